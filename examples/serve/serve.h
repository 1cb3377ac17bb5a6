/* serve.h: `ocellus serve`, an OpenAI-compatible HTTP server over include/ocellus.h.
 * Two halves: serve_request.c turns an untrusted request body into a serve_chat (pure: no sockets,
 * no model, so tests/fuzz/fuzz_serve.c drives it directly) and writes OpenAI-style error and
 * response JSON; serve.c holds the slots (one oc_context each), the bounded queue, the HTTP side
 * (libmicrohttpd) and the command line. docs/serve.md describes the endpoints and the memory bound. */
#ifndef OC_SERVE_H
#define OC_SERVE_H

#include "ocellus.h"

#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_IMAGES 16      /* --max-images at most */
#define SERVE_MAX_STOP 4         /* OpenAI's limit on stop sequences */
#define SERVE_MAX_STOP_BYTES 64  /* each */

/* What a request may ask for; every field is a command-line option (serve.c). */
typedef struct serve_limits {
    size_t max_body_bytes;       /* the request body; larger ones are refused with 413 */
    uint32_t max_json_nodes;     /* JSON values + keys in one body */
    int32_t max_images;          /* images in one request */
    int32_t max_tokens;          /* max_tokens at most (and the default) */
    const char *allow_dir;       /* --allow-files: the real path of the one directory image_url may
                                    name files in, or NULL: files are refused */
} serve_limits;

/* One image as the request gave it: its encoded bytes (PNG, JPEG, PNM), decoded later by the slot
 * that answers, inside the slot's pixel budget. */
typedef struct serve_image {
    uint8_t *bytes;
    size_t n_bytes;
} serve_image;

/* A parsed, validated chat request. Strings are NUL-terminated and owned (serve_chat_free). */
typedef struct serve_chat {
    char *system;                /* system messages joined, or NULL */
    char *question;              /* the last user turn; earlier turns go before it as text */
    serve_image images[SERVE_MAX_IMAGES];
    int32_t n_images;
    int32_t max_tokens;
    oc_sampling sampling;
    int stream;
    int include_usage;           /* stream_options.include_usage: a usage chunk before [DONE] */
    char stop[SERVE_MAX_STOP][SERVE_MAX_STOP_BYTES + 1];
    int32_t n_stop;
    size_t bytes;                /* heap bytes this struct owns (the memory accounting's figure) */
} serve_chat;

/* An OpenAI-style error: HTTP status, error.type, error.param (may be ""), error.message. */
typedef struct serve_error {
    int http_status;
    const char *type;            /* "invalid_request_error", "authentication_error", ... */
    char param[48];
    char message[256];
} serve_error;

void serve_limits_default(serve_limits *lim);
void serve_error_set(serve_error *e, int http_status, const char *type, const char *param,
                     const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Parse and validate a /v1/chat/completions body. Returns 0 and fills *out, or the HTTP status
 * (400, 403, 413) with *err filled and *out owning nothing. Reads files only under
 * lim->allow_dir, never the network. */
int serve_parse_chat(const char *body, size_t n_bytes, const serve_limits *lim, serve_chat *out,
                     serve_error *err);
void serve_chat_free(serve_chat *chat);
/* The most heap one request can hold from its first body byte to its answer's start: the body, the
 * JSON parse and the serve_chat (the memory bound, serve.c). */
size_t serve_request_bytes_max(const serve_limits *lim);

/* Decode strict base64 (RFC 4648 section 4, '=' padding, no whitespace) into out (at least
 * 3 * (n / 4) bytes). Returns the decoded length, or -1 on a malformed input. */
long serve_base64_decode(const char *in, size_t n, uint8_t *out);

/* A growing text buffer for responses (heap; grows rarely: sized for the answer up front). */
typedef struct serve_buf {
    char *p;
    size_t len, cap;
    int failed;                  /* an allocation failed: the contents are incomplete */
} serve_buf;
int serve_buf_reserve(serve_buf *b, size_t extra);
void serve_buf_put(serve_buf *b, const char *s, size_t n);
void serve_buf_puts(serve_buf *b, const char *s);
void serve_buf_printf(serve_buf *b, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* s as a JSON string literal, quotes included (control characters escaped; s is valid UTF-8). */
void serve_buf_json_str(serve_buf *b, const char *s, size_t n);
void serve_buf_free(serve_buf *b);

/* The OpenAI error body {"error":{"message":...,"type":...,"param":...,"code":...}}. */
void serve_error_json(serve_buf *b, const serve_error *e);

#endif /* OC_SERVE_H */
