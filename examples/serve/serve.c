/* serve.c: `ocellus serve`, an OpenAI-compatible chat completions server (docs/serve.md).
 *
 * Threads: libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a
 * connection may block while its answer is generated; N slot threads each own one oc_context,
 * opened once, and take jobs from one bounded queue. Admission is a ticket: at most slots + queue
 * requests are inside the server at once (the rest get 503 before their body is read), which is
 * what makes the memory bound printed at start-up a bound. A job is shared by its connection and
 * its slot (reference counted); a connection that goes away cancels its job, and the slot stops at
 * the next token (oc_request.on_text returns nonzero).
 *
 * HTTP parsing is libmicrohttpd's (GNU, in Debian as libmicrohttpd-dev, used in many embedded
 * products, fuzzed by OSS-Fuzz): a small C library with thread-per-connection mode, connection
 * limits and timeouts, and no C++ or event-loop framework to adopt. Request JSON: serve_request.c. */
#define _POSIX_C_SOURCE 200809L
#include "serve/serve.h"

#include "port.h"
#include "tools/tools.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int cmd_serve(int argc, char **argv);

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

typedef struct job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    serve_chat chat;
    uint64_t t_start_ns, deadline_ns, t_first_ns;
    int state;
    int cancelled;               /* the client went away or the server stops */
    int timed_out;
    int stop_hit;
    serve_buf text;              /* the answer so far; capacity fixed when queued */
    size_t text_limit;
    size_t visible;              /* bytes of text that may be sent (stop-sequence holdback) */
    size_t holdback;
    int failed;
    serve_error err;
    oc_stats stats;
} job;

#define N_TTFT_BUCKETS 9
static const double ttft_buckets_s[N_TTFT_BUCKETS] = { 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30 };
#define N_TOK_BUCKETS 8
static const double tok_buckets_s[N_TOK_BUCKETS] = { 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1 };
static const int status_codes[] = { 200, 400, 401, 403, 404, 405, 413, 415, 500, 503, 504 };
#define N_STATUS ((int)(sizeof status_codes / sizeof status_codes[0]))

typedef struct server {
    oc_model *model;
    oc_context **ctx;
    pthread_t *threads;
    int n_slots, n_started;
    serve_limits lim;
    int64_t max_image_pixels;
    int timeout_s;
    const char *api_key;
    char model_id[128];
    long long created;
    /* queue and admission, under qmu */
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    job **queue;
    int q_cap, q_head, q_len;
    int tickets_used, tickets_max;
    int busy;
    int stopping;
    job **running;               /* per slot: the job it answers, for shutdown */
    /* metrics, under mmu */
    pthread_mutex_t mmu;
    unsigned long long n_status[N_STATUS + 1];
    unsigned long long prompt_tokens, completion_tokens, n_answers;
    unsigned long long ttft_hist[N_TTFT_BUCKETS + 1], tok_hist[N_TOK_BUCKETS + 1];
    double ttft_sum_s, tok_sum_s;
    unsigned long long n_tok_obs;
    uint64_t bound_bytes;
    unsigned long long next_id;
} server;

/* ---- jobs ------------------------------------------------------------------------------------ */

static void job_unref(job *j) {
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    serve_chat_free(&j->chat);
    serve_buf_free(&j->text);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void job_fail(job *j, int status, const char *type, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->failed) {
        j->failed = 1;
        serve_error_set(&j->err, status, type, "", "%s", msg);
    }
    j->state = JOB_DONE;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Bytes of text that are safe to send: all but a tail that could still become a stop sequence,
 * cut back to a UTF-8 character boundary. */
static size_t visible_len(const job *j) {
    size_t n = j->text.len > j->holdback ? j->text.len - j->holdback : 0;
    while (n > 0 && n < j->text.len && ((unsigned char)j->text.p[n] & 0xC0) == 0x80) n--;
    return n;
}

static int on_text(void *user, const char *piece, size_t n) {
    job *j = user;
    pthread_mutex_lock(&j->mu);
    if (!j->t_first_ns) j->t_first_ns = oc_port_now_ns();
    int stop = 0;
    size_t old = j->text.len;
    if (old + n > j->text_limit) stop = 1;   /* never grows past what the bound counts */
    else {
        memcpy(j->text.p + old, piece, n);
        j->text.len += n;
        j->text.p[j->text.len] = '\0';
        /* a stop sequence ends the answer before it; search only where a new one can end */
        for (int s = 0; s < j->chat.n_stop; s++) {
            size_t sl = strlen(j->chat.stop[s]);
            size_t from = old + 1 > sl ? old + 1 - sl : 0;
            for (size_t p = from; p + sl <= j->text.len; p++)
                if (!memcmp(j->text.p + p, j->chat.stop[s], sl)) {
                    j->text.len = p;
                    j->text.p[p] = '\0';
                    j->stop_hit = stop = 1;
                    break;
                }
            if (stop) break;
        }
    }
    j->visible = visible_len(j);
    if (j->cancelled) stop = 1;
    if (j->deadline_ns && oc_port_now_ns() > j->deadline_ns) { j->timed_out = 1; stop = 1; }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return stop;
}

static void observe(server *sv, const job *j) {
    pthread_mutex_lock(&sv->mmu);
    sv->prompt_tokens += (unsigned long long)j->stats.n_prompt_tokens;
    sv->completion_tokens += (unsigned long long)j->stats.n_generated;
    sv->n_answers++;
    double ttft = j->stats.ttft_ms / 1000.0;
    int b = 0;
    while (b < N_TTFT_BUCKETS && ttft > ttft_buckets_s[b]) b++;
    sv->ttft_hist[b]++;
    sv->ttft_sum_s += ttft;
    if (j->stats.n_generated > 1) {
        double per_tok = j->stats.decode_ms / 1000.0 / (j->stats.n_generated - 1);
        b = 0;
        while (b < N_TOK_BUCKETS && per_tok > tok_buckets_s[b]) b++;
        sv->tok_hist[b] += (unsigned long long)(j->stats.n_generated - 1);
        sv->tok_sum_s += j->stats.decode_ms / 1000.0;
        sv->n_tok_obs += (unsigned long long)(j->stats.n_generated - 1);
    }
    pthread_mutex_unlock(&sv->mmu);
}

static int job_flag(job *j, const int *flag) {
    pthread_mutex_lock(&j->mu);
    int v = *flag;
    pthread_mutex_unlock(&j->mu);
    return v;
}

static void run_job(server *sv, int slot, job *j) {
    if (job_flag(j, &j->cancelled)) { job_fail(j, 503, "server_error", "the request was cancelled"); return; }
    if (j->deadline_ns && oc_port_now_ns() > j->deadline_ns) {
        job_fail(j, 503, "server_error", "the request waited in the queue past --timeout; try again");
        return;
    }
    pthread_mutex_lock(&j->mu);
    j->state = JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);

    /* The images are decoded here, by the slot, so at most one request's pixels per slot exist:
     * larger JPEGs and PNGs at reduced scale to --max-image-pixels, anything else too large refused. */
    oc_image img[SERVE_MAX_IMAGES];
    oc_image_rgb views[SERVE_MAX_IMAGES];
    memset(img, 0, sizeof img);
    oc_image_limits il;
    oc_image_limits_default(&il);
    il.max_pixels = sv->max_image_pixels;
    il.reduce_to_pixels = sv->max_image_pixels;
    oc_error err;
    int n_ok = 0, bad_image = 0;
    for (int i = 0; i < j->chat.n_images; i++) {
        if (oc_image_decode(&img[i], j->chat.images[i].bytes, j->chat.images[i].n_bytes, &il, NULL, &err)) {
            char msg[300];
            snprintf(msg, sizeof msg, "image %d: %s", i + 1, err.message);
            job_fail(j, err.status == OC_ERR_NOMEM ? 503 : 400, "invalid_request_error", msg);
            bad_image = 1;
            break;
        }
        views[i] = oc_image_view(&img[i]);
        n_ok++;
    }
    if (!bad_image) {
        oc_request req;
        oc_request_default(&req);
        req.system = j->chat.system;
        req.question = j->chat.question;
        req.images = j->chat.n_images ? views : NULL;
        req.n_images = j->chat.n_images;
        req.max_new_tokens = j->chat.max_tokens;
        req.sampling = j->chat.sampling;
        req.on_text = on_text;
        req.user = j;
        oc_status st = oc_ask(sv->ctx[slot], &req, &err);
        oc_context_get_stats(sv->ctx[slot], &j->stats);
        if (job_flag(j, &j->timed_out)) job_fail(j, 504, "server_error", "the answer took longer than --timeout");
        else if (job_flag(j, &j->cancelled)) job_fail(j, 503, "server_error", "the request was cancelled");
        else if (st && st != OC_ERR_ABORTED) {
            int client = st == OC_ERR_INVALID || st == OC_ERR_RANGE || st == OC_ERR_FORMAT || st == OC_ERR_UNSUPPORTED;
            job_fail(j, client ? 400 : 500, client ? "invalid_request_error" : "server_error", err.message);
        } else {
            observe(sv, j);
            pthread_mutex_lock(&j->mu);
            j->visible = j->text.len;
            j->state = JOB_DONE;
            pthread_cond_broadcast(&j->cv);
            pthread_mutex_unlock(&j->mu);
        }
    }
    for (int i = 0; i < n_ok; i++) oc_image_free(&img[i]);
}

static void *slot_main(void *arg) {
    void **a = arg;
    server *sv = a[0];
    int slot = (int)(intptr_t)a[1];
    free(a);
    for (;;) {
        pthread_mutex_lock(&sv->qmu);
        while (!sv->stopping && sv->q_len == 0) pthread_cond_wait(&sv->qcv, &sv->qmu);
        if (sv->q_len == 0) { pthread_mutex_unlock(&sv->qmu); break; }
        job *j = sv->queue[sv->q_head];
        sv->q_head = (sv->q_head + 1) % sv->q_cap;
        sv->q_len--;
        sv->busy++;
        sv->running[slot] = j;
        int stopping = sv->stopping;
        pthread_mutex_unlock(&sv->qmu);
        if (stopping) {
            pthread_mutex_lock(&j->mu);
            j->cancelled = 1;
            pthread_mutex_unlock(&j->mu);
        }
        run_job(sv, slot, j);
        pthread_mutex_lock(&sv->qmu);
        sv->busy--;
        sv->running[slot] = NULL;
        pthread_mutex_unlock(&sv->qmu);
        job_unref(j);
    }
    return NULL;
}

/* ---- HTTP -------------------------------------------------------------------------------------- */

enum { ROUTE_CHAT = 1, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_METRICS };

typedef struct conn {
    server *sv;
    struct MHD_Connection *mc;
    int route;
    int has_ticket;
    int too_large;
    serve_buf body;
    uint64_t t_first_ns;
    job *j;
    /* streaming */
    serve_buf out;
    size_t out_pos, sent;
    int sent_role, finished;
    int answered;                /* a response is queued: later calls only drain the upload */
    char id[48];
} conn;

static void count_status(server *sv, int status) {
    int i = 0;
    while (i < N_STATUS && status_codes[i] != status) i++;
    pthread_mutex_lock(&sv->mmu);
    sv->n_status[i]++;
    pthread_mutex_unlock(&sv->mmu);
}

static enum MHD_Result respond(conn *c, int status, const char *type, const char *text, size_t n) {
    struct MHD_Response *r = MHD_create_response_from_buffer(n, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)status, r);
    MHD_destroy_response(r);
    c->answered = 1;
    count_status(c->sv, status);
    return ok;
}

static enum MHD_Result respond_error(conn *c, const serve_error *e) {
    serve_buf b = { 0 };
    serve_error_json(&b, e);
    enum MHD_Result ok = b.failed ? MHD_NO : respond(c, e->http_status, "application/json", b.p, b.len);
    serve_buf_free(&b);
    return ok;
}

static enum MHD_Result fail_with(conn *c, int status, const char *type, const char *param, const char *msg) {
    serve_error e;
    serve_error_set(&e, status, type, param, "%s", msg);
    return respond_error(c, &e);
}

static int release_ticket(conn *c) {
    if (!c->has_ticket) return 0;
    pthread_mutex_lock(&c->sv->qmu);
    c->sv->tickets_used--;
    pthread_mutex_unlock(&c->sv->qmu);
    c->has_ticket = 0;
    return 1;
}

static int peer_gone(conn *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci && oc_port_socket_peer_closed(ci->connect_fd);
}

/* Wait (job locked) until pred holds, checking every 100 ms whether the client left or the server
 * stops; returns 0 when the wait was given up (the job is then cancelled). */
static int wait_job(conn *c, int (*pred)(const conn *)) {
    job *j = c->j;
    while (!pred(c)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
        if (pred(c)) break;
        if (peer_gone(c)) { j->cancelled = 1; return 0; }
    }
    return 1;
}
static int pred_started(const conn *c) { return c->j->state == JOB_DONE || c->j->visible > 0 || c->j->t_first_ns; }
static int pred_done(const conn *c) { return c->j->state == JOB_DONE; }
static int pred_progress(const conn *c) { return c->j->state == JOB_DONE || c->j->visible > c->sent; }

static const char *finish_reason(const job *j) {
    return !j->stop_hit && j->stats.n_generated >= j->chat.max_tokens ? "length" : "stop";
}

static void put_usage(serve_buf *b, const job *j) {
    const oc_stats *s = &j->stats;
    serve_buf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d},", s->n_prompt_tokens,
                     s->n_generated, s->n_prompt_tokens + s->n_generated);
    serve_buf_printf(b, "\"timings\":{\"vision_ms\":%.3f,\"prefill_ms\":%.3f,\"ttft_ms\":%.3f,\"decode_ms\":%.3f,"
                        "\"n_images\":%d,\"n_image_tokens\":%d}",
                     s->vision_ms, s->prefill_ms, s->ttft_ms, s->decode_ms, s->n_images, s->n_image_tokens);
}

static void put_head(serve_buf *b, const conn *c, const char *object) {
    serve_buf_printf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", c->id, object, c->sv->created);
    serve_buf_json_str(b, c->sv->model_id, strlen(c->sv->model_id));
}

/* One SSE event with a delta (job locked): text[c->sent, visible), then the end when done. */
static void stream_step(conn *c) {
    job *j = c->j;
    serve_buf *b = &c->out;
    b->len = 0;
    c->out_pos = 0;
    if (!c->sent_role) {
        serve_buf_puts(b, "data: ");
        put_head(b, c, "chat.completion.chunk");
        serve_buf_puts(b, ",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n");
        c->sent_role = 1;
    }
    if (j->visible > c->sent) {
        serve_buf_puts(b, "data: ");
        put_head(b, c, "chat.completion.chunk");
        serve_buf_puts(b, ",\"choices\":[{\"index\":0,\"delta\":{\"content\":");
        serve_buf_json_str(b, j->text.p + c->sent, j->visible - c->sent);
        serve_buf_puts(b, "},\"finish_reason\":null}]}\n\n");
        c->sent = j->visible;
    }
    if (j->state == JOB_DONE && c->sent == j->visible) {
        if (j->failed) {
            serve_buf_puts(b, "data: ");
            serve_error_json(b, &j->err);
            serve_buf_puts(b, "\n\n");
        } else {
            serve_buf_puts(b, "data: ");
            put_head(b, c, "chat.completion.chunk");
            serve_buf_printf(b, ",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"%s\"}]}\n\n", finish_reason(j));
            if (j->chat.include_usage) {
                serve_buf_puts(b, "data: ");
                put_head(b, c, "chat.completion.chunk");
                serve_buf_puts(b, ",\"choices\":[],");
                put_usage(b, j);
                serve_buf_puts(b, "}\n\n");
            }
        }
        serve_buf_puts(b, "data: [DONE]\n\n");
        c->finished = 1;
    }
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    conn *c = cls;
    (void)pos;
    if (c->out_pos >= c->out.len) {
        if (c->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        job *j = c->j;
        pthread_mutex_lock(&j->mu);
        if (!wait_job(c, pred_progress)) {
            pthread_mutex_unlock(&j->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        stream_step(c);
        pthread_mutex_unlock(&j->mu);
        if (c->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = c->out.len - c->out_pos;
    if (n > max) n = max;
    memcpy(buf, c->out.p + c->out_pos, n);
    c->out_pos += n;
    return (ssize_t)n;
}

static enum MHD_Result answer_chat(conn *c) {
    server *sv = c->sv;
    if (c->too_large) {
        serve_error e;
        serve_error_set(&e, 413, "invalid_request_error", "", "the body is larger than this server takes (--max-body %zu bytes)",
                        sv->lim.max_body_bytes);
        return respond_error(c, &e);
    }
    job *j = calloc(1, sizeof *j);
    if (!j) return fail_with(c, 503, "server_error", "", "out of memory");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    serve_error e;
    int rc = serve_parse_chat(c->body.p ? c->body.p : "", c->body.len, &sv->lim, &j->chat, &e);
    serve_buf_free(&c->body);   /* parsed: the body's memory goes back before the answer */
    if (rc) { job_unref(j); return respond_error(c, &e); }
    /* the answer's text: room for max_tokens pieces of up to 32 bytes, allocated once */
    j->text_limit = (size_t)j->chat.max_tokens * 32 + 64;
    if (!serve_buf_reserve(&j->text, j->text_limit)) { job_unref(j); return fail_with(c, 503, "server_error", "", "out of memory"); }
    j->text.p[0] = '\0';
    for (int s = 0; s < j->chat.n_stop; s++) {
        size_t sl = strlen(j->chat.stop[s]);
        if (sl - 1 > j->holdback) j->holdback = sl - 1;
    }
    j->t_start_ns = c->t_first_ns;
    j->deadline_ns = sv->timeout_s > 0 ? c->t_first_ns + (uint64_t)sv->timeout_s * 1000000000u : 0;
    pthread_mutex_lock(&sv->qmu);
    if (sv->stopping || sv->q_len == sv->q_cap) {
        pthread_mutex_unlock(&sv->qmu);
        job_unref(j);
        return fail_with(c, 503, "server_error", "", "the server is stopping or full; try again");
    }
    j->refs = 2;   /* the connection's and the slot's */
    sv->queue[(sv->q_head + sv->q_len) % sv->q_cap] = j;
    sv->q_len++;
    snprintf(c->id, sizeof c->id, "chatcmpl-%llu", ++sv->next_id);
    pthread_cond_signal(&sv->qcv);
    pthread_mutex_unlock(&sv->qmu);
    c->j = j;

    pthread_mutex_lock(&j->mu);
    if (!wait_job(c, j->chat.stream ? pred_started : pred_done)) {
        pthread_mutex_unlock(&j->mu);
        return MHD_NO;   /* the client left: nothing to answer */
    }
    if (j->failed) {
        serve_error fe = j->err;
        pthread_mutex_unlock(&j->mu);
        return respond_error(c, &fe);
    }
    if (j->chat.stream) {
        pthread_mutex_unlock(&j->mu);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_reader, c, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ok = MHD_queue_response(c->mc, 200, r);
        MHD_destroy_response(r);
        c->answered = 1;
        count_status(sv, 200);
        return ok;
    }
    serve_buf b = { 0 };
    put_head(&b, c, "chat.completion");
    serve_buf_puts(&b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
    serve_buf_json_str(&b, j->text.p, j->text.len);
    serve_buf_printf(&b, "},\"finish_reason\":\"%s\"}],", finish_reason(j));
    put_usage(&b, j);
    serve_buf_puts(&b, "}");
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result ok = b.failed ? fail_with(c, 503, "server_error", "", "out of memory")
                                  : respond(c, 200, "application/json", b.p, b.len);
    serve_buf_free(&b);
    return ok;
}

static enum MHD_Result answer_get(conn *c) {
    server *sv = c->sv;
    serve_buf b = { 0 };
    const char *type = "application/json";
    if (c->route == ROUTE_MODELS) {
        serve_buf_puts(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
        serve_buf_json_str(&b, sv->model_id, strlen(sv->model_id));
        serve_buf_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"ocellus\"}]}", sv->created);
    } else if (c->route == ROUTE_HEALTH) {
        pthread_mutex_lock(&sv->qmu);
        serve_buf_printf(&b, "{\"status\":\"%s\",\"slots_busy\":%d,\"slots_free\":%d,\"queued\":%d,\"queue_capacity\":%d}",
                         sv->stopping ? "stopping" : "ok", sv->busy, sv->n_slots - sv->busy, sv->q_len, sv->q_cap - sv->n_slots);
        pthread_mutex_unlock(&sv->qmu);
    } else {
        type = "text/plain; version=0.0.4";
        pthread_mutex_lock(&sv->mmu);
        serve_buf_puts(&b, "# HELP ocellus_requests_total HTTP requests answered, by status.\n# TYPE ocellus_requests_total counter\n");
        for (int i = 0; i <= N_STATUS; i++)
            if (sv->n_status[i] || i < N_STATUS)
                serve_buf_printf(&b, "ocellus_requests_total{code=\"%s%d\"} %llu\n", i < N_STATUS ? "" : "other",
                                 i < N_STATUS ? status_codes[i] : 0, sv->n_status[i]);
        serve_buf_printf(&b, "# TYPE ocellus_prompt_tokens_total counter\nocellus_prompt_tokens_total %llu\n", sv->prompt_tokens);
        serve_buf_printf(&b, "# TYPE ocellus_completion_tokens_total counter\nocellus_completion_tokens_total %llu\n", sv->completion_tokens);
        serve_buf_puts(&b, "# HELP ocellus_ttft_seconds Request start (first body byte) to the first token.\n# TYPE ocellus_ttft_seconds histogram\n");
        unsigned long long cum = 0;
        for (int i = 0; i < N_TTFT_BUCKETS; i++) {
            cum += sv->ttft_hist[i];
            serve_buf_printf(&b, "ocellus_ttft_seconds_bucket{le=\"%g\"} %llu\n", ttft_buckets_s[i], cum);
        }
        cum += sv->ttft_hist[N_TTFT_BUCKETS];
        serve_buf_printf(&b, "ocellus_ttft_seconds_bucket{le=\"+Inf\"} %llu\nocellus_ttft_seconds_sum %.6f\nocellus_ttft_seconds_count %llu\n",
                         cum, sv->ttft_sum_s, sv->n_answers);
        serve_buf_puts(&b, "# HELP ocellus_decode_token_seconds Time per generated token after the first.\n# TYPE ocellus_decode_token_seconds histogram\n");
        cum = 0;
        for (int i = 0; i < N_TOK_BUCKETS; i++) {
            cum += sv->tok_hist[i];
            serve_buf_printf(&b, "ocellus_decode_token_seconds_bucket{le=\"%g\"} %llu\n", tok_buckets_s[i], cum);
        }
        cum += sv->tok_hist[N_TOK_BUCKETS];
        serve_buf_printf(&b, "ocellus_decode_token_seconds_bucket{le=\"+Inf\"} %llu\nocellus_decode_token_seconds_sum %.6f\nocellus_decode_token_seconds_count %llu\n",
                         cum, sv->tok_sum_s, sv->n_tok_obs);
        serve_buf_printf(&b, "# HELP ocellus_memory_bound_bytes The bound printed at start-up.\n# TYPE ocellus_memory_bound_bytes gauge\nocellus_memory_bound_bytes %llu\n",
                         (unsigned long long)sv->bound_bytes);
        pthread_mutex_unlock(&sv->mmu);
        serve_buf_printf(&b, "# TYPE ocellus_resident_bytes gauge\nocellus_resident_bytes %llu\n", (unsigned long long)oc_port_rss_bytes());
        serve_buf_printf(&b, "# TYPE ocellus_peak_resident_bytes gauge\nocellus_peak_resident_bytes %llu\n", (unsigned long long)oc_port_peak_rss_bytes());
        pthread_mutex_lock(&sv->qmu);
        serve_buf_printf(&b, "# TYPE ocellus_slots_busy gauge\nocellus_slots_busy %d\n# TYPE ocellus_slots gauge\nocellus_slots %d\n"
                             "# TYPE ocellus_queued gauge\nocellus_queued %d\n", sv->busy, sv->n_slots, sv->q_len);
        pthread_mutex_unlock(&sv->qmu);
    }
    enum MHD_Result ok = b.failed ? MHD_NO : respond(c, 200, type, b.p, b.len);
    serve_buf_free(&b);
    return ok;
}

/* Constant-time comparison of the bearer token, so its bytes cannot be learned from timing. */
static int key_ok(const char *want, const char *got) {
    if (!got) return 0;
    size_t n = strlen(want), m = strlen(got);
    unsigned diff = (unsigned)(n != m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)want[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls) {
    server *sv = cls;
    conn *c = *con_cls;
    (void)version;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) return MHD_NO;
        c->sv = sv;
        c->mc = mc;
        c->t_first_ns = oc_port_now_ns();
        *con_cls = c;
        int is_get = !strcmp(method, "GET"), is_post = !strcmp(method, "POST");
        if (!strcmp(url, "/v1/chat/completions")) c->route = ROUTE_CHAT;
        else if (!strcmp(url, "/v1/models")) c->route = ROUTE_MODELS;
        else if (!strcmp(url, "/health")) c->route = ROUTE_HEALTH;
        else if (!strcmp(url, "/metrics")) c->route = ROUTE_METRICS;
        else return fail_with(c, 404, "invalid_request_error", "", "no such endpoint (POST /v1/chat/completions, GET /v1/models, /health, /metrics)");
        if ((c->route == ROUTE_CHAT && !is_post) || (c->route != ROUTE_CHAT && !is_get))
            return fail_with(c, 405, "invalid_request_error", "", c->route == ROUTE_CHAT ? "use POST" : "use GET");
        if (sv->api_key && c->route != ROUTE_HEALTH) {
            const char *auth = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
            if (!auth || strncmp(auth, "Bearer ", 7) || !key_ok(sv->api_key, auth + 7))
                return fail_with(c, 401, "authentication_error", "", "missing or wrong API key (Authorization: Bearer KEY)");
        }
        if (c->route != ROUTE_CHAT) return MHD_YES;
        const char *ct = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Type");
        if (ct && strncmp(ct, "application/json", 16))
            return fail_with(c, 415, "invalid_request_error", "", "the body must be JSON (Content-Type: application/json)");
        const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > sv->lim.max_body_bytes) {
            serve_error e;
            serve_error_set(&e, 413, "invalid_request_error", "", "the body is %s bytes; this server takes at most %zu (--max-body)",
                            cl, sv->lim.max_body_bytes);
            return respond_error(c, &e);
        }
        pthread_mutex_lock(&sv->qmu);
        if (!sv->stopping && sv->tickets_used < sv->tickets_max) { sv->tickets_used++; c->has_ticket = 1; }
        pthread_mutex_unlock(&sv->qmu);
        if (!c->has_ticket) return fail_with(c, 503, "server_error", "", "all slots are busy and the queue is full (--slots, --queue); try again");
        return MHD_YES;
    }
    if (c->answered || c->j) { *upload_size = 0; return MHD_YES; }
    if (c->route != ROUTE_CHAT) return answer_get(c);
    if (*upload_size) {
        /* a slow sender (slowloris) gets --timeout for the whole body, not per byte */
        if (sv->timeout_s > 0 && oc_port_now_ns() - c->t_first_ns > (uint64_t)sv->timeout_s * 1000000000u) return MHD_NO;
        if (!c->too_large) {
            if (c->body.len + *upload_size > sv->lim.max_body_bytes) {
                c->too_large = 1;
                serve_buf_free(&c->body);
            } else {
                serve_buf_put(&c->body, upload_data, *upload_size);
                if (c->body.failed) return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return answer_chat(c);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)mc; (void)toe;
    conn *c = *con_cls;
    if (!c) return;
    if (c->j) {
        pthread_mutex_lock(&c->j->mu);
        c->j->cancelled = 1;   /* no one reads the rest: the slot stops at the next token */
        pthread_mutex_unlock(&c->j->mu);
        job_unref(c->j);
    }
    release_ticket(c);
    serve_buf_free(&c->body);
    serve_buf_free(&c->out);
    free(c);
    *con_cls = NULL;
}

/* ---- command line ------------------------------------------------------------------------------ */

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus serve [-m TEXT.gguf --mmproj VISION.gguf] [options]\n"
            "  OpenAI-compatible server: POST /v1/chat/completions, GET /v1/models, /health, /metrics\n"
            "  -m FILE, --mmproj FILE, --plan FILE, --backend B, --device D, --no-mmap   as for `ocellus ask`\n"
            "                       (the demo model without -m)\n"
            "  --host ADDR          numeric IPv4/IPv6 address to listen on (default 127.0.0.1)\n"
            "  --port N             (default 8080; 0: any free port, printed at start-up)\n"
            "  --slots N            requests answered at once, one context each (default 1)\n"
            "  --queue N            requests waiting for a slot at most; more get 503 (default 16)\n"
            "  -t N                 threads per slot (default: the CPUs / slots, at least 1)\n"
            "  -c N                 context tokens per slot (default 4096)\n"
            "  --max-image-tokens N tokens per image at most (default 1280)\n"
            "  --max-images N       images per request (default 4, at most %d)\n"
            "  --max-image-pixels N decoded pixels per image (default 4194304); larger JPEG/PNG are\n"
            "                       decoded at reduced scale, other formats refused\n"
            "  --max-body BYTES     request body at most (default 4194304); larger: 413\n"
            "  --max-tokens N       max_tokens at most, and its default (default 256)\n"
            "  --timeout S          a request's whole time (body, queue, answer) at most (default 60; 0: none)\n"
            "  --api-key KEY        require Authorization: Bearer KEY (not for /health)\n"
            "  --allow-files DIR    image_url may name files inside DIR (default: data: URIs only)\n"
            "  --alias NAME         the model id in responses (default: the text GGUF's file name)\n",
            SERVE_MAX_IMAGES);
}

static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    if (!s) return 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

#define MIB(x) ((double)(x) / 1048576.0)

int cmd_serve(int argc, char **argv) {
    const char *text_path = NULL, *mmproj = NULL, *host = "127.0.0.1", *alias = NULL, *allow = NULL;
    long port = 8080, slots = 1, queue = 16, threads = 0, v;
    server *sv = calloc(1, sizeof *sv);
    if (!sv) return 1;
    serve_limits_default(&sv->lim);
    sv->max_image_pixels = (int64_t)1 << 22;
    sv->timeout_s = 60;
    oc_context_params cp;
    oc_context_params_default(&cp);
    oc_model_params mp;
    oc_model_params_default(&mp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); free(sv); return 0; }
        else if (!strcmp(a, "--no-mmap")) { mp.load = OC_LOAD_READ; continue; }
        if (!val) { fprintf(stderr, "ocellus serve: option %s needs a value\n", a); free(sv); return 2; }
        i++;
        if (!strcmp(a, "-m")) text_path = val;
        else if (!strcmp(a, "--mmproj")) mmproj = val;
        else if (!strcmp(a, "--plan")) cp.plan_path = val;
        else if (!strcmp(a, "--backend") && oc_tool_parse_backend(val, &cp.backend)) {}
        else if (!strcmp(a, "--device")) cp.device = val;
        else if (!strcmp(a, "--host")) host = val;
        else if (!strcmp(a, "--alias")) alias = val;
        else if (!strcmp(a, "--api-key") && val[0]) sv->api_key = val;
        else if (!strcmp(a, "--allow-files")) allow = val;
        else if (!strcmp(a, "--port") && parse_long(val, 0, 65535, &port)) {}
        else if (!strcmp(a, "--slots") && parse_long(val, 1, 256, &slots)) {}
        else if (!strcmp(a, "--queue") && parse_long(val, 0, 4096, &queue)) {}
        else if (!strcmp(a, "-t") && parse_long(val, 1, 1024, &threads)) {}
        else if (!strcmp(a, "-c") && parse_long(val, 16, 1 << 24, &v)) cp.max_context_tokens = (int32_t)v;
        else if (!strcmp(a, "--max-image-tokens") && parse_long(val, 4, 1 << 20, &v)) cp.max_image_tokens = (int32_t)v;
        else if (!strcmp(a, "--max-images") && parse_long(val, 0, SERVE_MAX_IMAGES, &v)) sv->lim.max_images = (int32_t)v;
        else if (!strcmp(a, "--max-image-pixels") && parse_long(val, 784, 1L << 28, &v)) sv->max_image_pixels = v;
        else if (!strcmp(a, "--max-body") && parse_long(val, 1024, 1L << 30, &v)) sv->lim.max_body_bytes = (size_t)v;
        else if (!strcmp(a, "--max-tokens") && parse_long(val, 1, 1 << 20, &v)) sv->lim.max_tokens = (int32_t)v;
        else if (!strcmp(a, "--timeout") && parse_long(val, 0, 86400, &v)) sv->timeout_s = (int)v;
        else {
            fprintf(stderr, "ocellus serve: bad option or value: %s %s (ocellus serve --help lists them)\n", a, val);
            free(sv);
            return 2;
        }
    }
    if (!text_path && !mmproj && !oc_tool_demo_model(&text_path, &mmproj)) {
        fprintf(stderr, "ocellus serve: no model: pass -m TEXT.gguf [--mmproj VISION.gguf] (the demo model " OC_DEMO_TEXT
                        " is found only from the source tree's root)\n");
        free(sv);
        return 1;
    }
    if (!text_path) {
        fprintf(stderr, "ocellus serve: --mmproj needs the text model too: give -m TEXT.gguf\n");
        free(sv);
        return 2;
    }
    if (cp.device && cp.backend == OC_BACKEND_CPU) {
        fprintf(stderr, "ocellus serve: --device picks an OpenCL device: give --backend opencl or auto\n");
        free(sv);
        return 2;
    }
    if (!mmproj) sv->lim.max_images = 0;
    static char allow_real[4096];
    if (allow) {
        if (oc_port_real_path(allow, allow_real, sizeof allow_real) != 0) {
            fprintf(stderr, "ocellus serve: --allow-files %s: no such directory\n", allow);
            free(sv);
            return 2;
        }
        sv->lim.allow_dir = allow_real;
    }
    const char *base = strrchr(alias ? alias : text_path, '/');
    base = alias ? alias : base ? base + 1 : text_path;
    snprintf(sv->model_id, sizeof sv->model_id, "%s", base);
    char *dot = alias ? NULL : strstr(sv->model_id, ".gguf");
    if (dot) *dot = '\0';
    sv->created = (long long)time(NULL);

    /* before any thread starts, so every thread inherits the mask and only the main thread sees
     * SIGINT / SIGTERM (port.h) */
    if (oc_port_stop_signals_block() != 0) { fprintf(stderr, "ocellus serve: cannot set up signals\n"); free(sv); return 1; }

    int rc = 1;
    struct MHD_Daemon *d = NULL;
    oc_error err;
    sv->n_slots = (int)slots;
    sv->q_cap = (int)(slots + queue);
    sv->tickets_max = sv->q_cap;
    sv->ctx = calloc((size_t)slots, sizeof *sv->ctx);
    sv->threads = calloc((size_t)slots, sizeof *sv->threads);
    sv->running = calloc((size_t)slots, sizeof *sv->running);
    sv->queue = calloc((size_t)sv->q_cap, sizeof *sv->queue);
    pthread_mutex_init(&sv->qmu, NULL);
    pthread_cond_init(&sv->qcv, NULL);
    pthread_mutex_init(&sv->mmu, NULL);
    if (!sv->ctx || !sv->threads || !sv->running || !sv->queue) { fprintf(stderr, "ocellus serve: out of memory\n"); goto done; }
    mp.text_path = text_path;
    mp.mmproj_path = mmproj;
    if (oc_model_open_params(&sv->model, &mp, &err)) { fprintf(stderr, "ocellus serve: %s\n", err.message); goto done; }
    cp.n_threads = threads > 0 ? (int)threads : (oc_port_n_cpus() / (int)slots > 0 ? oc_port_n_cpus() / (int)slots : 1);
    cp.max_images = sv->lim.max_images > 0 ? sv->lim.max_images : 1;
    cp.max_answer_tokens = sv->lim.max_tokens;
    size_t ctx_bytes = 0;
    for (int s = 0; s < sv->n_slots; s++) {
        if (oc_context_open(&sv->ctx[s], sv->model, &cp, &err)) { fprintf(stderr, "ocellus serve: slot %d: %s\n", s, err.message); goto done; }
        oc_stats st;
        oc_context_get_stats(sv->ctx[s], &st);
        ctx_bytes += st.context_bytes;
    }
    for (int s = 0; s < sv->n_slots; s++) {
        void **a = malloc(2 * sizeof *a);
        if (!a) goto done;
        a[0] = sv;
        a[1] = (void *)(intptr_t)s;
        if (pthread_create(&sv->threads[s], NULL, slot_main, a) != 0) { free(a); fprintf(stderr, "ocellus serve: cannot start a slot thread\n"); goto done; }
        sv->n_started++;
    }

    /* The memory bound: what is resident now (binary, model pages touched, the contexts' memory
     * as far as touched, threads) plus everything that can still come: the model and the contexts
     * whole, the pixels of one request per slot, every admitted request (tickets = slots + queue)
     * at its largest with its answer and response, and the connections' buffers and stacks. */
    int conn_limit = sv->tickets_max + 16;   /* + GETs and requests refused early */
    const size_t stack_bytes = (size_t)256 << 10, conn_mem = (size_t)32 << 10;
    oc_model_info mi;
    oc_model_get_info(sv->model, &mi);
    size_t text_cap = (size_t)sv->lim.max_tokens * 32 + 64;
    size_t per_request = serve_request_bytes_max(&sv->lim) + text_cap + 3 * (6 * text_cap + 4096);
    size_t pixels = (size_t)sv->n_slots * (size_t)cp.max_images * (size_t)sv->max_image_pixels * 3 +
                    (size_t)sv->n_slots * ((size_t)1 << 20);   /* + libjpeg / libpng rows */
    size_t conns = (size_t)conn_limit * (stack_bytes + conn_mem + sizeof(conn));
    uint64_t rss0 = oc_port_rss_bytes();
    size_t slack = (size_t)16 << 20;   /* malloc arenas' free lists and the slot threads' stacks */
    sv->bound_bytes = rss0 + mi.memory_bytes + ctx_bytes + pixels + (size_t)sv->tickets_max * per_request + conns + slack;

    unsigned char addr[128];
    size_t addr_len = 0;
    int v6 = 0;
    if (oc_port_sockaddr(host, (int)port, addr, sizeof addr, &addr_len, &v6) != 0) {
        fprintf(stderr, "ocellus serve: --host %s: not a numeric IPv4 or IPv6 address\n", host);
        goto done;
    }
    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                             (v6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)port, NULL, NULL, on_request, sv,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)addr,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)conn_limit,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(sv->timeout_s > 0 ? sv->timeout_s : 0),
                         MHD_OPTION_CONNECTION_MEMORY_LIMIT, conn_mem,
                         MHD_OPTION_THREAD_STACK_SIZE, stack_bytes,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv,
                         MHD_OPTION_END);
    if (!d) { fprintf(stderr, "ocellus serve: cannot listen on %s port %ld (in use?)\n", host, port); goto done; }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    unsigned bound_port = di ? di->port : (unsigned)port;

    fprintf(stderr, "ocellus serve: model %s (%s), %d slot%s x %d thread%s, %s\n", sv->model_id, text_path, sv->n_slots,
            sv->n_slots == 1 ? "" : "s", cp.n_threads, cp.n_threads == 1 ? "" : "s", oc_context_backend_name(sv->ctx[0]));
    fprintf(stderr,
            "memory bound: %.1f MiB = resident at start %.1f + model %.1f + %d context%s %.1f + pixels %.1f"
            " + %d requests x %.2f + %d connections %.1f + slack %.1f\n",
            MIB(sv->bound_bytes), MIB(rss0), MIB(mi.memory_bytes), sv->n_slots, sv->n_slots == 1 ? "" : "s", MIB(ctx_bytes),
            MIB(pixels), sv->tickets_max, MIB(per_request), conn_limit, MIB(conns), MIB(slack));
    fprintf(stderr, "listening on http://%s%s%s:%u/v1 (queue %ld, timeout %d s%s)\n", v6 ? "[" : "", host, v6 ? "]" : "",
            bound_port, queue, sv->timeout_s, sv->api_key ? ", API key required" : "");
    fflush(stderr);

    int sig;
    while (!(sig = oc_port_stop_signal_wait(1000))) {}
    fprintf(stderr, "ocellus serve: signal %d: stopping\n", sig);
    rc = 0;
done:
    /* stop: refuse new work, cancel what waits and what runs, then let every thread end */
    pthread_mutex_lock(&sv->qmu);
    sv->stopping = 1;
    for (int i = 0; i < sv->q_len; i++) {
        job *j = sv->queue[(sv->q_head + i) % sv->q_cap];
        pthread_mutex_lock(&j->mu);
        j->cancelled = 1;
        pthread_mutex_unlock(&j->mu);
    }
    for (int s = 0; s < sv->n_started; s++)
        if (sv->running[s]) {
            pthread_mutex_lock(&sv->running[s]->mu);
            sv->running[s]->cancelled = 1;
            pthread_mutex_unlock(&sv->running[s]->mu);
        }
    pthread_cond_broadcast(&sv->qcv);
    pthread_mutex_unlock(&sv->qmu);
    for (int s = 0; s < sv->n_started; s++) pthread_join(sv->threads[s], NULL);
    if (d) MHD_stop_daemon(d);
    if (rc == 0)
        fprintf(stderr, "ocellus serve: stopped; %llu answers, peak RSS %.1f MiB of the %.1f MiB bound\n", sv->n_answers,
                MIB(oc_port_peak_rss_bytes()), MIB(sv->bound_bytes));
    for (int s = 0; sv->ctx && s < sv->n_slots; s++) oc_context_close(sv->ctx[s]);
    oc_model_close(sv->model);
    pthread_mutex_destroy(&sv->qmu);
    pthread_cond_destroy(&sv->qcv);
    pthread_mutex_destroy(&sv->mmu);
    free(sv->ctx);
    free(sv->threads);
    free(sv->running);
    free(sv->queue);
    free(sv);
    return rc;
}
