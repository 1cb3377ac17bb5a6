/* serve_request.c: an untrusted /v1/chat/completions body -> a validated serve_chat, plus the
 * JSON the server writes (OpenAI error bodies, escaped strings). No sockets and no model here, so
 * the fuzz target (tests/fuzz/fuzz_serve.c) reaches every branch the network can.
 *
 * JSON: the project's parser (examples/tools/json.h), not a library such as cJSON: it is fuzzed
 * (tests/fuzz/fuzz_json.c), validates UTF-8 (the tokenizer and our responses then never see a
 * broken character), caps depth and node count before it allocates, and takes an allocator, so a
 * request's memory is known before it is parsed (serve_chat.bytes, the memory bound in serve.c). */
#define _POSIX_C_SOURCE 200809L
#include "serve/serve.h"

#include "port.h"
#include "tools/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void serve_limits_default(serve_limits *lim) {
    memset(lim, 0, sizeof *lim);
    lim->max_body_bytes = (size_t)4 << 20;
    lim->max_json_nodes = 4096;
    lim->max_images = 4;
    lim->max_tokens = 256;
}

void serve_error_set(serve_error *e, int http_status, const char *type, const char *param,
                     const char *fmt, ...) {
    e->http_status = http_status;
    e->type = type;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

/* ---- response text ------------------------------------------------------------------------- */

int serve_buf_reserve(serve_buf *b, size_t extra) {
    if (b->failed) return 0;
    if (b->len + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->failed = 1; return 0; }
    b->p = p;
    b->cap = cap;
    return 1;
}

void serve_buf_put(serve_buf *b, const char *s, size_t n) {
    if (!serve_buf_reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void serve_buf_puts(serve_buf *b, const char *s) { serve_buf_put(b, s, strlen(s)); }

void serve_buf_printf(serve_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) { b->failed = 1; return; }
    serve_buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void serve_buf_json_str(serve_buf *b, const char *s, size_t n) {
    if (!serve_buf_reserve(b, 6 * n + 2)) return;   /* worst case: every byte as \u00XX */
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { *o++ = '\\'; *o++ = (char)c; }
        else if (c == '\n') { *o++ = '\\'; *o++ = 'n'; }
        else if (c == '\r') { *o++ = '\\'; *o++ = 'r'; }
        else if (c == '\t') { *o++ = '\\'; *o++ = 't'; }
        else if (c < 0x20 || c == 0x7f) { o += snprintf(o, 7, "\\u%04x", c); }
        else *o++ = (char)c;
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    b->p[b->len] = '\0';
}

void serve_buf_free(serve_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

void serve_error_json(serve_buf *b, const serve_error *e) {
    serve_buf_puts(b, "{\"error\":{\"message\":");
    serve_buf_json_str(b, e->message, strlen(e->message));
    serve_buf_puts(b, ",\"type\":");
    serve_buf_json_str(b, e->type ? e->type : "invalid_request_error", strlen(e->type ? e->type : "invalid_request_error"));
    serve_buf_puts(b, ",\"param\":");
    if (e->param[0]) serve_buf_json_str(b, e->param, strlen(e->param));
    else serve_buf_puts(b, "null");
    serve_buf_printf(b, ",\"code\":%d}}", e->http_status);
}

/* ---- base64 ---------------------------------------------------------------------------------- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

long serve_base64_decode(const char *in, size_t n, uint8_t *out) {
    if (n % 4 != 0) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)in[i + k];
            if (c == '=' && i + 4 == n && k >= 2) { v[k] = 0; pad++; continue; }
            if (pad) return -1;   /* data after '=' */
            v[k] = b64_value(c);
            if (v[k] < 0) return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2) out[o++] = (uint8_t)(w >> 8);
        if (pad < 1) out[o++] = (uint8_t)w;
    }
    return (long)o;
}

/* ---- parsing --------------------------------------------------------------------------------- */

typedef struct parse_state {
    const oc_json *d;
    const serve_limits *lim;
    serve_chat *out;
    serve_error *err;
    serve_buf question;          /* earlier turns, then the last user turn */
    serve_buf last;              /* the current user turn's text */
    serve_buf system;
} parse_state;

static void *chat_alloc(serve_chat *c, size_t n) {
    void *p = malloc(n ? n : 1);
    if (p) c->bytes += n;
    return p;
}

static void *read_alloc(void *user, size_t n_bytes) {
    parse_state *ps = user;
    if (n_bytes > ps->lim->max_body_bytes) return NULL;   /* the same cap as a data: URI's image */
    return chat_alloc(ps->out, n_bytes);
}

static int bad(parse_state *ps, const char *param, const char *fmt, const char *detail) {
    serve_error_set(ps->err, 400, "invalid_request_error", param, fmt, detail);
    return 400;
}

/* An image_url: a data: URI with base64 bytes, or (only with --allow-files) a file under it. */
static int add_image(parse_state *ps, const char *url, size_t len) {
    serve_chat *c = ps->out;
    if (c->n_images >= ps->lim->max_images) {
        serve_error_set(ps->err, 400, "invalid_request_error", "messages",
                        "too many images: at most %d per request (--max-images)", (int)ps->lim->max_images);
        return 400;
    }
    serve_image *im = &c->images[c->n_images];
    if (len >= 5 && !strncmp(url, "data:", 5)) {
        const char *comma = memchr(url, ',', len);
        if (!comma) return bad(ps, "messages", "%s", "image_url: a data: URI without a comma");
        size_t head = (size_t)(comma - url);
        /* data:[<media type>][;params];base64,<data>: an image type (or none) and base64 */
        if (head < 12 || strncmp(url + head - 7, ";base64", 7))
            return bad(ps, "messages", "%s", "image_url: only base64 data: URIs are accepted (data:image/png;base64,...)");
        if (head > 12 && strncmp(url + 5, "image/", 6))
            return bad(ps, "messages", "%s", "image_url: the data: URI's media type is not image/*");
        const char *b64 = comma + 1;
        size_t n = len - head - 1;
        if (n == 0) return bad(ps, "messages", "%s", "image_url: empty image data");
        if (n / 4 * 3 > ps->lim->max_body_bytes) return bad(ps, "messages", "%s", "image_url: image too large");
        im->bytes = chat_alloc(c, n / 4 * 3 + 3);
        if (!im->bytes) { serve_error_set(ps->err, 503, "server_error", "", "out of memory for an image"); return 503; }
        long m = serve_base64_decode(b64, n, im->bytes);
        if (m <= 0) {
            free(im->bytes);
            im->bytes = NULL;
            return bad(ps, "messages", "%s", "image_url: invalid base64 (RFC 4648, '=' padding, no whitespace)");
        }
        im->n_bytes = (size_t)m;
        c->n_images++;
        return 0;
    }
    if ((len >= 7 && !strncmp(url, "http://", 7)) || (len >= 8 && !strncmp(url, "https://", 8)))
        return bad(ps, "messages", "%s", "image_url: this server never fetches from the network; send the image as a base64 data: URI");
    const char *path = url;
    if (len >= 7 && !strncmp(url, "file://", 7)) path = url + 7;
    if (!ps->lim->allow_dir) {
        serve_error_set(ps->err, 400, "invalid_request_error", "messages",
                        "image_url: files are refused (the server was not started with --allow-files DIR); send a base64 data: URI");
        return 400;
    }
    if (strlen(path) != (size_t)(len - (size_t)(path - url)) || !path[0])
        return bad(ps, "messages", "%s", "image_url: an empty file name or one with a NUL byte");
    /* Relative names are taken under DIR; the real path (symbolic links and .. resolved) must lie
     * inside DIR's real path, so neither ../ nor a link can reach another file. */
    char joined[4096], real[4096];
    int nj = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                            : snprintf(joined, sizeof joined, "%s/%s", ps->lim->allow_dir, path);
    if (nj < 0 || (size_t)nj >= sizeof joined) return bad(ps, "messages", "%s", "image_url: file name too long");
    size_t nd = strlen(ps->lim->allow_dir);
    if (oc_port_real_path(joined, real, sizeof real) != 0 || strncmp(real, ps->lim->allow_dir, nd) != 0 ||
        (real[nd] != '/' && real[nd] != '\0')) {
        serve_error_set(ps->err, 403, "permission_error", "messages",
                        "image_url: no such file under the --allow-files directory");
        return 403;
    }
    oc_port_mapping m;
    char msg[256];
    int e = oc_port_read_file(real, read_alloc, ps, &m, msg, sizeof msg);
    if (e != 0) {
        if (m.data) free((void *)m.data);
        serve_error_set(ps->err, 400, "invalid_request_error", "messages",
                        "image_url: cannot read the file (not a regular file, or larger than --max-body)");
        return 400;
    }
    im->bytes = (uint8_t *)m.data;
    im->n_bytes = m.n_bytes;
    c->n_images++;
    return 0;
}

/* content: a string, or an array of {"type":"text","text":...} / {"type":"image_url",
 * "image_url":{"url":...}} parts (a bare string url is accepted too). Text goes to ps->last. */
static int parse_content(parse_state *ps, uint32_t content, int images_allowed) {
    const oc_json *d = ps->d;
    oc_str s;
    oc_error e;
    oc_json_type t = oc_json_type_of(d, content);
    if (t == OC_JSON_STRING) {
        oc_json_str(d, content, &s, &e);
        serve_buf_put(&ps->last, s.ptr, s.len);
        return 0;
    }
    if (t != OC_JSON_ARRAY) return bad(ps, "messages", "%s", "message content must be a string or an array of parts");
    for (uint32_t part = oc_json_first(d, content); part != OC_JSON_NONE; part = oc_json_next(d, part)) {
        if (oc_json_type_of(d, part) != OC_JSON_OBJECT) return bad(ps, "messages", "%s", "a content part must be an object");
        uint32_t type = oc_json_get(d, part, "type");
        if (oc_json_str_eq(d, type, "text")) {
            if (oc_json_str(d, oc_json_get(d, part, "text"), &s, &e))
                return bad(ps, "messages", "%s", "a text part needs \"text\": a string");
            if (ps->last.len) serve_buf_puts(&ps->last, "\n");
            serve_buf_put(&ps->last, s.ptr, s.len);
        } else if (oc_json_str_eq(d, type, "image_url")) {
            if (!images_allowed) return bad(ps, "messages", "%s", "images are accepted in user messages only");
            uint32_t iu = oc_json_get(d, part, "image_url");
            if (oc_json_type_of(d, iu) == OC_JSON_OBJECT) iu = oc_json_get(d, iu, "url");
            if (oc_json_str(d, iu, &s, &e))
                return bad(ps, "messages", "%s", "an image_url part needs \"image_url\": {\"url\": a string}");
            int rc = add_image(ps, s.ptr, s.len);
            if (rc) return rc;
        } else {
            return bad(ps, "messages", "%s", "a content part's type must be \"text\" or \"image_url\"");
        }
    }
    return 0;
}

/* A number member: absent -> keep *out; else a finite number within [lo, hi]. */
static int get_number(parse_state *ps, uint32_t root, const char *key, double lo, double hi, double *out) {
    uint32_t n = oc_json_get(ps->d, root, key);
    if (n == OC_JSON_NONE || oc_json_type_of(ps->d, n) == OC_JSON_NULL) return 0;
    double v;
    oc_error e;
    if (oc_json_f64(ps->d, n, &v, &e) || !isfinite(v) || v < lo || v > hi) {
        serve_error_set(ps->err, 400, "invalid_request_error", key, "%s must be a number from %g to %g", key, lo, hi);
        return 400;
    }
    *out = v;
    return 0;
}

static int get_int(parse_state *ps, uint32_t root, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    uint32_t n = oc_json_get(ps->d, root, key);
    if (n == OC_JSON_NONE || oc_json_type_of(ps->d, n) == OC_JSON_NULL) return 0;
    int64_t v;
    oc_error e;
    if (oc_json_i64(ps->d, n, &v, &e) || v < lo || v > hi) {
        serve_error_set(ps->err, 400, "invalid_request_error", key, "%s must be a whole number from %lld to %lld",
                        key, (long long)lo, (long long)hi);
        return 400;
    }
    *out = v;
    return 0;
}

static int get_bool(parse_state *ps, uint32_t obj, const char *key, int *out) {
    uint32_t n = oc_json_get(ps->d, obj, key);
    if (n == OC_JSON_NONE || oc_json_type_of(ps->d, n) == OC_JSON_NULL) return 0;
    oc_error e;
    if (oc_json_bool(ps->d, n, out, &e)) {
        serve_error_set(ps->err, 400, "invalid_request_error", key, "%s must be true or false", key);
        return 400;
    }
    return 0;
}

static int add_stop(parse_state *ps, uint32_t n) {
    oc_str s;
    oc_error e;
    if (oc_json_str(ps->d, n, &s, &e) || s.len == 0 || s.len > SERVE_MAX_STOP_BYTES || ps->out->n_stop >= SERVE_MAX_STOP) {
        serve_error_set(ps->err, 400, "invalid_request_error", "stop",
                        "stop must be a string or an array of at most %d strings of 1 to %d bytes",
                        SERVE_MAX_STOP, SERVE_MAX_STOP_BYTES);
        return 400;
    }
    memcpy(ps->out->stop[ps->out->n_stop], s.ptr, s.len);
    ps->out->stop[ps->out->n_stop][s.len] = '\0';
    ps->out->n_stop++;
    return 0;
}

static int parse_root(parse_state *ps) {
    const oc_json *d = ps->d;
    serve_chat *c = ps->out;
    uint32_t root = oc_json_root(d);
    if (oc_json_type_of(d, root) != OC_JSON_OBJECT) return bad(ps, "", "%s", "the body must be a JSON object");

    int64_t v = 1;
    double x;
    int rc;
    if ((rc = get_int(ps, root, "n", 1, 1, &v))) return rc;
    v = ps->lim->max_tokens;
    if ((rc = get_int(ps, root, "max_completion_tokens", 1, ps->lim->max_tokens, &v))) return rc;
    if ((rc = get_int(ps, root, "max_tokens", 1, ps->lim->max_tokens, &v))) return rc;
    c->max_tokens = (int32_t)v;
    x = 0.0;
    if ((rc = get_number(ps, root, "temperature", 0.0, 2.0, &x))) return rc;
    c->sampling.temperature = (float)x;
    x = 1.0;
    if ((rc = get_number(ps, root, "top_p", 1e-6, 1.0, &x))) return rc;
    c->sampling.top_p = (float)x;
    v = 0;
    if ((rc = get_int(ps, root, "top_k", 0, 1 << 20, &v))) return rc;
    c->sampling.top_k = (int32_t)v;
    v = 0;
    if ((rc = get_int(ps, root, "seed", 0, INT64_MAX, &v))) return rc;
    c->sampling.seed = (uint64_t)v;
    if ((rc = get_bool(ps, root, "stream", &c->stream))) return rc;
    uint32_t so = oc_json_get(d, root, "stream_options");
    if (so != OC_JSON_NONE && oc_json_type_of(d, so) != OC_JSON_NULL) {
        if (oc_json_type_of(d, so) != OC_JSON_OBJECT) return bad(ps, "stream_options", "%s", "stream_options must be an object");
        if ((rc = get_bool(ps, so, "include_usage", &c->include_usage))) return rc;
    }
    uint32_t model = oc_json_get(d, root, "model");
    if (model != OC_JSON_NONE && oc_json_type_of(d, model) != OC_JSON_STRING)
        return bad(ps, "model", "%s", "model must be a string");
    uint32_t stop = oc_json_get(d, root, "stop");
    if (oc_json_type_of(d, stop) == OC_JSON_ARRAY) {
        for (uint32_t s = oc_json_first(d, stop); s != OC_JSON_NONE; s = oc_json_next(d, s))
            if ((rc = add_stop(ps, s))) return rc;
    } else if (stop != OC_JSON_NONE && oc_json_type_of(d, stop) != OC_JSON_NULL) {
        if ((rc = add_stop(ps, stop))) return rc;
    }

    uint32_t msgs = oc_json_get(d, root, "messages");
    if (oc_json_type_of(d, msgs) != OC_JSON_ARRAY || oc_json_count(d, msgs) == 0)
        return bad(ps, "messages", "%s", "messages must be a non-empty array");
    uint32_t n_msgs = oc_json_count(d, msgs), i = 0;
    int had_turns = 0;
    for (uint32_t m = oc_json_first(d, msgs); m != OC_JSON_NONE; m = oc_json_next(d, m), i++) {
        if (oc_json_type_of(d, m) != OC_JSON_OBJECT) return bad(ps, "messages", "%s", "each message must be an object");
        uint32_t role = oc_json_get(d, m, "role"), content = oc_json_get(d, m, "content");
        int is_system = oc_json_str_eq(d, role, "system") || oc_json_str_eq(d, role, "developer");
        int is_user = oc_json_str_eq(d, role, "user"), is_assistant = oc_json_str_eq(d, role, "assistant");
        if (!is_system && !is_user && !is_assistant)
            return bad(ps, "messages", "%s", "a message's role must be \"system\", \"developer\", \"user\" or \"assistant\"");
        if (i + 1 == n_msgs && !is_user) return bad(ps, "messages", "%s", "the last message must be the user's");
        ps->last.len = 0;
        if (is_assistant && oc_json_type_of(d, content) == OC_JSON_NULL) continue;   /* tool-call turns */
        if ((rc = parse_content(ps, content, is_user))) return rc;
        const char *text = ps->last.p ? ps->last.p : "";
        if (is_system) {
            if (ps->system.len) serve_buf_puts(&ps->system, "\n");
            serve_buf_put(&ps->system, text, ps->last.len);
        } else if (i + 1 < n_msgs) {
            /* ocellus's C API answers one turn (oc_ask); earlier turns become text before the
             * question, so the model sees the conversation, without KV reuse (docs/serve.md). */
            serve_buf_puts(&ps->question, is_user ? "User: " : "Assistant: ");
            serve_buf_put(&ps->question, text, ps->last.len);
            serve_buf_puts(&ps->question, "\n");
            had_turns = 1;
        } else {
            if (ps->last.len == 0) return bad(ps, "messages", "%s", "the last user message has no text (ask a question)");
            if (had_turns) serve_buf_puts(&ps->question, "User: ");
            serve_buf_put(&ps->question, text, ps->last.len);
        }
    }
    if (ps->question.failed || ps->system.failed || ps->last.failed) {
        serve_error_set(ps->err, 503, "server_error", "", "out of memory for the request");
        return 503;
    }
    return 0;
}

/* An upper bound of the JSON parser's memory for a body: the string pool (n_bytes + 1) and a node
 * array that doubles up to max_nodes (json.c: < 48 bytes a node). */
static size_t json_bytes(size_t n_bytes, uint32_t max_nodes) { return n_bytes + 1 + 2 * 48 * (size_t)max_nodes + 256; }

size_t serve_request_bytes_max(const serve_limits *lim) {
    size_t body = lim->max_body_bytes;
    /* the body itself, the parse, three text buffers that double (< 2x the body each), data: URI
     * images (3/4 of their base64) and, with --allow-files, whole files of up to a body each */
    return body + json_bytes(body, lim->max_json_nodes) + 6 * body + body +
           (lim->allow_dir ? (size_t)lim->max_images * body : 0);
}

typedef struct count_alloc { size_t live; } count_alloc;
static void *count_alloc_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    count_alloc *ca = user;
    if (new_bytes == 0) { free(ptr); ca->live -= old_bytes; return NULL; }
    void *p = realloc(ptr, new_bytes);
    if (p) ca->live += new_bytes - old_bytes;
    return p;
}

int serve_parse_chat(const char *body, size_t n_bytes, const serve_limits *lim, serve_chat *out,
                     serve_error *err) {
    memset(out, 0, sizeof *out);
    if (n_bytes > lim->max_body_bytes) {
        serve_error_set(err, 413, "invalid_request_error", "", "the body is %zu bytes; this server takes at most %zu (--max-body)",
                        n_bytes, lim->max_body_bytes);
        return 413;
    }
    oc_json_limits jl;
    oc_json_limits_default(&jl);
    jl.max_depth = 16;   /* a chat request nests 6 deep; deeper is an attack on the stack */
    jl.max_nodes = lim->max_json_nodes;
    count_alloc ca = { 0 };
    oc_allocator a = { count_alloc_fn, &ca };
    oc_json *d = NULL;
    oc_error e;
    oc_status st = oc_json_parse(&d, body, n_bytes, &jl, &a, &e);
    if (st) {
        serve_error_set(err, st == OC_ERR_NOMEM ? 503 : 400, st == OC_ERR_NOMEM ? "server_error" : "invalid_request_error",
                        "", "invalid JSON: %s", e.message);
        return err->http_status;
    }
    parse_state ps = { d, lim, out, err, { 0 }, { 0 }, { 0 } };
    int rc = parse_root(&ps);
    oc_json_free(d);
    if (rc == 0) {
        out->question = ps.question.p;
        out->bytes += ps.question.cap;
        ps.question.p = NULL;
        if (ps.system.len) {
            out->system = ps.system.p;
            out->bytes += ps.system.cap;
            ps.system.p = NULL;
        }
    }
    serve_buf_free(&ps.question);
    serve_buf_free(&ps.system);
    serve_buf_free(&ps.last);
    if (rc) serve_chat_free(out);
    return rc;
}

void serve_chat_free(serve_chat *chat) {
    if (!chat) return;
    free(chat->system);
    free(chat->question);
    for (int i = 0; i < chat->n_images; i++) free(chat->images[i].bytes);
    memset(chat, 0, sizeof *chat);
}
