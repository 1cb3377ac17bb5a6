/* test_decode_more.c: oc_ctx_decode_more (model/context_state.h), the decode steps `ocellus bench
 * plans --decode-steps` times after each answer, on the demo model, dense and with plans that evict
 * (SparseMM budgets, ZipVL, a lazy group) or restrict image queries (BlindSight):
 *   - continuing a one-token answer by G steps gives, bit for bit, the logits and the next token of
 *     oc_ask's own greedy answer of G tokens (the same passes at the same positions), and a few
 *     steps more past the stop token stay equal on both contexts;
 *   - oc_ask's stats are left as they were (but kv_bytes, read from the cache when asked); no
 *     allocator call;
 *   - refusals: no answer to continue (OC_ERR_INVALID), negative steps, the context's end and a
 *     SparseMM budget's answer room (OC_ERR_RANGE, with the reason). */
#include "check.h"
#include "model/context_state.h"
#include "ocellus.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

#define DEMO "examples/demo/ocellus-demo.gguf"
#define DEMO_MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
#define QUESTION "Is there a red square in the picture? Answer in many words, please."

static const char *const plan_text[] = {
    NULL,   /* dense */
    /* SparseMM budgets, ZipVL, a GLA lazy group, an A-shape head composed with both */
    "ocellus-plan 4\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nkv-window 4\n"
    "decoder layer 0 kv-budget 8 12\ndecoder layer 0 heads 1 a-shape(sink=2,local=8)\n"
    "decoder layer 0 zipvl-tau 0.9 prefill heads\n"
    "decoder layer 1-2 zipvl-tau 0.9\ndecoder lazy-group 1-2 mode gla\n"
    "decoder layer 3-5 kv-budget 10 10\n",
    /* BlindSight categories on every head */
    "ocellus-plan 1\nshape decoder layers 6 heads 4 kv-heads 2 head-dim 64\nsink-fraction 0.1\n"
    "decoder default sink\ndecoder layer 2 heads all intra-image\n",
};

typedef struct answer {
    char text[256];
    size_t n;
} answer;

static int collect(void *user, const char *text, size_t n_bytes) {
    answer *a = user;
    size_t room = sizeof a->text - 1 - a->n, n = n_bytes < room ? n_bytes : room;
    memcpy(a->text + a->n, text, n);
    a->n += n;
    a->text[a->n] = '\0';
    return 0;
}

static int write_plan(char *path, size_t n, int k) {
    snprintf(path, n, "/tmp/ocellus-decode-more-%d-%d.plan", k, (int)(oc_port_now_ns() % 100000));
    FILE *f = fopen(path, "w");
    if (!f) return 0;
    fputs(plan_text[k], f);
    return fclose(f) == 0;
}

static void open_ctx(oc_model *m, const char *plan, int32_t ctx_tokens, int32_t answer_room, oc_allocator *alloc,
                     oc_context **c) {
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = ctx_tokens;
    cp.max_answer_tokens = answer_room;
    cp.n_threads = 2;
    cp.alloc = alloc;
    cp.plan_path = plan;
    oc_error e;
    *c = NULL;
    REQUIREF(oc_context_open(c, m, &cp, &e) == OC_OK, "%s", e.message);
}

static oc_status ask(oc_context *c, int32_t max_new, answer *a) {
    oc_request r;
    oc_request_default(&r);
    r.question = QUESTION;
    r.max_new_tokens = max_new;
    r.on_text = collect;
    r.user = a;
    memset(a, 0, sizeof *a);
    oc_error e;
    oc_status st = oc_ask(c, &r, &e);
    CHECKF(st == OC_OK, "%s", e.message);
    return st;
}

static void test_continues_the_greedy_answer(void) {
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK, "%s", e.message);
    for (int k = 0; k < (int)(sizeof plan_text / sizeof plan_text[0]); k++) {
        char path[96];
        if (plan_text[k]) REQUIRE(write_plan(path, sizeof path, k));
        check_alloc cnt = { 0 };
        oc_allocator al = { check_alloc_fn, &cnt };
        oc_context *a, *b;
        open_ctx(m, plan_text[k] ? path : NULL, 192, 64, &al, &a);
        open_ctx(m, plan_text[k] ? path : NULL, 192, 64, &al, &b);
        answer ans_a, ans_b;
        oc_stats sa, sb, sb2;
        if (ask(a, 40, &ans_a) || ask(b, 1, &ans_b)) goto next;
        oc_context_get_stats(a, &sa);
        oc_context_get_stats(b, &sb);
        int32_t G = sa.n_generated;
        CHECKF(G >= 1 && sb.n_generated == 1 && a->has_pending && b->has_pending, "plan %d: %d and %d tokens", k, G,
               sb.n_generated);
        /* a's answer fed each of its G tokens back (it ended on a stop token or at 40); b fed none */
        oc_attn_stats as = { 0, 0, 0 };
        double ms = -1, attn_ms = -1;
        long calls = cnt.n_calls;
        CHECKF(oc_ctx_decode_more(b, G - (G == 40), &as, &ms, &attn_ms, &e) == OC_OK, "plan %d: %s", k, e.message);
        CHECKF(cnt.n_calls == calls, "plan %d: %ld allocator calls", k, cnt.n_calls - calls);
        CHECKF(ms >= attn_ms && attn_ms >= 0 && as.flops_kept > 0, "plan %d: %.3f ms, %.3f attention, %llu FLOPs", k,
               ms, attn_ms, (unsigned long long)as.flops_kept);
        int32_t V = m->text->hp.n_vocab;
        CHECKF(a->pending_tok == b->pending_tok && a->pending_pos == b->pending_pos, "plan %d: next token %d at %d "
               "after the answer, %d at %d after the steps", k, a->pending_tok, a->pending_pos, b->pending_tok,
               b->pending_pos);
        CHECKF(!memcmp(a->logits, b->logits, sizeof(float) * (size_t)V), "plan %d: logits differ after %d steps", k, G);
        oc_context_get_stats(b, &sb2);
        CHECKF(sb.n_generated == sb2.n_generated && sb.decode_ms == sb2.decode_ms && sb.decode_attn_ms == sb2.decode_attn_ms &&
               sb.attn_decode_flops_kept == sb2.attn_decode_flops_kept && sb.kv_prefill_bytes == sb2.kv_prefill_bytes,
               "plan %d: the stats changed", k);
        /* past the stop token: both contexts run the same steps */
        CHECK(oc_ctx_decode_more(a, 3, &as, &ms, &attn_ms, &e) == OC_OK);
        CHECK(oc_ctx_decode_more(b, 3, &as, &ms, &attn_ms, &e) == OC_OK);
        CHECKF(a->pending_tok == b->pending_tok && !memcmp(a->logits, b->logits, sizeof(float) * (size_t)V),
               "plan %d: the steps past the answer differ", k);
        /* no steps: nothing runs */
        CHECK(oc_ctx_decode_more(a, 0, &as, &ms, &attn_ms, &e) == OC_OK && ms == 0.0);
    next:
        oc_context_close(a);
        oc_context_close(b);
        CHECKF(cnt.n_live == 0, "plan %d: %ld blocks leaked", k, cnt.n_live);
        if (plan_text[k]) remove(path);
    }
    oc_model_close(m);
}

static void test_refusals(void) {
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, DEMO, DEMO_MMPROJ, NULL, &e) == OC_OK, "%s", e.message);
    char path[96];
    REQUIRE(write_plan(path, sizeof path, 1));
    oc_context *d, *p;
    open_ctx(m, NULL, 128, 64, NULL, &d);
    open_ctx(m, path, 192, 8, NULL, &p);
    oc_attn_stats as = { 0, 0, 0 };
    double ms, attn_ms;
    answer ans;
    CHECK(oc_ctx_decode_more(d, 2, &as, &ms, &attn_ms, &e) == OC_ERR_INVALID && strstr(e.message, "no answer"));
    if (!ask(d, 1, &ans)) {
        CHECK(oc_ctx_decode_more(d, -1, &as, &ms, &attn_ms, &e) == OC_ERR_INVALID);
        oc_stats st;
        oc_context_get_stats(d, &st);
        int32_t room = 128 - st.n_prompt_tokens;   /* the pending token goes at the prompt's end */
        CHECKF(room > 0 && oc_ctx_decode_more(d, room + 1, &as, &ms, &attn_ms, &e) == OC_ERR_RANGE &&
               strstr(e.message, "context full"), "%d tokens of room: %s", room, e.message);
        CHECK(oc_ctx_decode_more(d, 1, &as, &ms, &attn_ms, &e) == OC_ERR_INVALID);   /* nothing pending after a failure */
    }
    if (!ask(p, 1, &ans)) {
        CHECKF(oc_ctx_decode_more(p, 8, &as, &ms, &attn_ms, &e) == OC_OK, "%s", e.message);
        CHECKF(oc_ctx_decode_more(p, 8, &as, &ms, &attn_ms, &e) == OC_ERR_RANGE && strstr(e.message, "KV cache full"),
               "%s", e.message);
    }
    oc_context_close(d);
    oc_context_close(p);
    oc_model_close(m);
    remove(path);
}

int main(void) {
    check_cpu_features("-bf16_fast");
    CHECK_RUN(test_continues_the_greedy_answer);
    CHECK_RUN(test_refusals);
    return check_finish();
}
