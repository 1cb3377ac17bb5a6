/* test_prompt.c: the chat prompt builder: token ids, M-RoPE positions, image spans, limits, and the
 * Hugging Face fixture tests/data/prompt/two_images.txt (processor + get_rope_index, made by
 * tests/reference/make_prompt_fixtures.py). */
#include "check.h"
#include "tools/json.h"
#include "model/prompt.h"
#include "support/tiny_vocab.h"

#include <ctype.h>

static const oc_chat_tokens fake = { 100, 101, 102, 103, 104, 105 };

/* Positions worked out by hand from docs/formats.md §3: text 0..2, vision_start 3, a 2x3 image at 4,
 * vision_end at 4 + max(2, 3) = 7, then text 8. */
static void test_positions_by_hand(void) {
    oc_prompt p;
    oc_error e;
    REQUIRE(oc_prompt_init(&p, 32, 2, NULL, &e) == OC_OK);
    int32_t text[3] = { 1, 2, 3 }, tail = 9;
    REQUIRE(oc_prompt_add_ids(&p, text, 3, &e) == OC_OK);
    REQUIRE(oc_prompt_add_image(&p, &fake, 2, 3, &e) == OC_OK);
    REQUIRE(oc_prompt_add_ids(&p, &tail, 1, &e) == OC_OK);
    static const int32_t ids[] = { 1, 2, 3, 102, 104, 104, 104, 104, 104, 104, 103, 9 };
    static const int32_t t[] = { 0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 7, 8 };
    static const int32_t h[] = { 0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 7, 8 };
    static const int32_t w[] = { 0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8 };
    REQUIRE(p.n_tokens == 12);
    for (int i = 0; i < 12; i++)
        CHECKF(p.ids[i] == ids[i] && p.pos_t[i] == t[i] && p.pos_h[i] == h[i] && p.pos_w[i] == w[i],
               "token %d: id %d t %d h %d w %d", i, p.ids[i], p.pos_t[i], p.pos_h[i], p.pos_w[i]);
    CHECK(p.n_images == 1 && p.images[0].first_token == 4 && p.images[0].n_tokens == 6);
    CHECK(p.next_pos == 9);
    oc_prompt_reset(&p);
    CHECK(p.n_tokens == 0 && p.next_pos == 0);
    oc_prompt_free(&p);
    oc_prompt_free(&p);   /* freeing twice is harmless */
}

static void test_limits(void) {
    oc_prompt p;
    oc_error e;
    REQUIRE(oc_prompt_init(&p, 8, 1, NULL, &e) == OC_OK);
    CHECK(oc_prompt_add_image(&p, &fake, 2, 4, &e) == OC_ERR_RANGE);   /* 8 + 2 tokens */
    CHECKF(strstr(e.message, "prompt too long: 10 tokens needed, the limit is 8"), "%s", e.message);
    CHECK(p.n_tokens == 0);
    CHECK(oc_prompt_add_image(&p, &fake, 0, 4, &e) == OC_ERR_INVALID);
    CHECK(oc_prompt_add_image(&p, &fake, 65536, 65536, &e) == OC_ERR_INVALID);
    CHECK(oc_prompt_add_image(&p, &fake, 2, 2, &e) == OC_OK);
    CHECK(oc_prompt_add_image(&p, &fake, 1, 1, &e) == OC_ERR_RANGE);   /* one image at most */
    CHECKF(strstr(e.message, "more than 1 images"), "%s", e.message);
    oc_prompt_free(&p);
    CHECK(oc_prompt_init(&p, 0, 1, NULL, &e) == OC_ERR_INVALID);
}

/* The tiny vocabulary has no vision tokens: the builder says which one is missing. */
static void test_missing_chat_tokens(void) {
    static unsigned char file[1 << 16];
    size_t n = tiny_vocab_gguf(file, sizeof file, NULL, NULL);
    REQUIRE(n > 0 && n <= sizeof file);
    oc_gguf *g;
    oc_tokenizer *tok;
    oc_error e;
    REQUIRE(oc_gguf_open_bytes(&g, file, n, NULL, &e) == OC_OK);
    REQUIREF(oc_tokenizer_open_gguf(&tok, g, NULL, &e) == OC_OK, "%s", e.message);
    oc_chat_tokens ct;
    CHECK(oc_chat_tokens_find(&ct, tok, &e) == OC_ERR_UNSUPPORTED);
    CHECKF(strstr(e.message, "vocabulary has no <|im_end|> token: not a Qwen2-VL chat model"), "%s", e.message);
    oc_tokenizer_close(tok);
    oc_gguf_close(g);
}

/* ---- the Hugging Face fixture ------------------------------------------------------------------ */

/* The JSON string literal that fills the rest of a fixture line, decoded with our JSON parser. */
static int read_json_string(const char *s, char *out, size_t cap) {
    size_t n = strcspn(s, "\r\n");
    oc_json *doc;
    oc_str v;
    int ok = 0;
    if (oc_json_parse(&doc, s, n, NULL, NULL, NULL) != OC_OK) return 0;
    if (oc_json_str(doc, oc_json_root(doc), &v, NULL) == OC_OK && v.len < cap) {
        memcpy(out, v.ptr, v.len);
        out[v.len] = '\0';
        ok = 1;
    }
    oc_json_free(doc);
    return ok;
}

static int32_t *read_row(const char *line, const char *name, int32_t *n_out) {
    size_t k = strlen(name);
    if (strncmp(line, name, k) || line[k] != ' ') return NULL;
    char *end;
    long n = strtol(line + k + 1, &end, 10);
    if (n <= 0 || n > 100000) return NULL;
    int32_t *v = malloc((size_t)n * sizeof *v);
    for (long i = 0; i < n; i++) v[i] = (int32_t)strtol(end, &end, 10);
    *n_out = (int32_t)n;
    return v;
}

static void test_hf_fixture(void) {
    const char *shared = check_shared_data_dir();
    FILE *f = fopen("tests/data/prompt/two_images.txt", "r");
    if (!f) { check_fail_at(__FILE__, __LINE__, "committed fixture tests/data/prompt/two_images.txt is missing "
                             "(tests/reference/make_prompt_fixtures.py makes it)"); return; }
    if (!shared) { fclose(f); check_skip("../shared/data absent: the Qwen2 vocabulary is needed"); return; }
    static char line[1 << 20];
    char system[256] = "", question[256] = "";
    int32_t grids[8], n_images = 0, n_ids = 0, n_t = 0, n_h = 0, n_w = 0;
    int32_t *ids = NULL, *pt = NULL, *ph = NULL, *pw = NULL, *tmp;
    int32_t n_tmp;
    while (fgets(line, sizeof line, f)) {
        int gt, gh, gw;
        if (!strncmp(line, "system ", 7)) CHECK(read_json_string(line + 7, system, sizeof system));
        else if (!strncmp(line, "question ", 9)) CHECK(read_json_string(line + 9, question, sizeof question));
        else if (sscanf(line, "image %d %d %d", &gt, &gh, &gw) == 3 && n_images < 4) {
            grids[2 * n_images] = gh / 2;     /* patch grid -> merged token grid */
            grids[2 * n_images + 1] = gw / 2;
            n_images++;
        } else if ((tmp = read_row(line, "ids", &n_tmp))) { ids = tmp; n_ids = n_tmp; }
        else if ((tmp = read_row(line, "pos_t", &n_tmp))) { pt = tmp; n_t = n_tmp; }
        else if ((tmp = read_row(line, "pos_h", &n_tmp))) { ph = tmp; n_h = n_tmp; }
        else if ((tmp = read_row(line, "pos_w", &n_tmp))) { pw = tmp; n_w = n_tmp; }
    }
    fclose(f);
    char path[512];
    snprintf(path, sizeof path, "%s/qwen2-tokenizer/vocab-qwen2.gguf", shared);
    oc_gguf *g = NULL;
    oc_tokenizer *tok = NULL;
    oc_prompt p = { 0 };
    oc_chat_tokens ct;
    oc_error e;
    if (!ids || !pt || !ph || !pw || n_t != n_ids || n_h != n_ids || n_w != n_ids || !n_images || !question[0]) {
        check_fail_at(__FILE__, __LINE__, "fixture is incomplete");
        goto done;
    }
    if (oc_gguf_open(&g, path, NULL, &e) || oc_tokenizer_open_gguf(&tok, g, NULL, &e) ||
        oc_chat_tokens_find(&ct, tok, &e) || oc_prompt_init(&p, 4096, 8, NULL, &e) ||
        oc_prompt_chat(&p, tok, NULL, &ct, system, grids, n_images, 0, question, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s", e.message);
        goto done;
    }
    CHECKF(p.n_tokens == n_ids, "%d tokens, Hugging Face has %d", p.n_tokens, n_ids);
    for (int32_t i = 0; i < n_ids && i < p.n_tokens; i++)
        CHECKF(p.ids[i] == ids[i] && p.pos_t[i] == pt[i] && p.pos_h[i] == ph[i] && p.pos_w[i] == pw[i],
               "token %d: ours id %d (%d,%d,%d), HF id %d (%d,%d,%d)", i, p.ids[i], p.pos_t[i], p.pos_h[i],
               p.pos_w[i], ids[i], pt[i], ph[i], pw[i]);
    printf("# prompt: %d tokens, %d images, matches Hugging Face ids and positions\n", p.n_tokens, n_images);
done:
    oc_prompt_free(&p);
    oc_tokenizer_close(tok);
    oc_gguf_close(g);
    free(ids); free(pt); free(ph); free(pw);
}

int main(void) {
    CHECK_RUN(test_positions_by_hand);
    CHECK_RUN(test_limits);
    CHECK_RUN(test_missing_chat_tokens);
    CHECK_RUN(test_hf_fixture);
    return check_finish();
}
