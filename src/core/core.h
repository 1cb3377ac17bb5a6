/* core.h: what every library file includes: the public API, config.h, error reporting and the
 * allocator helpers. No OS or compiler knowledge here (that is port/). */
#ifndef OC_CORE_H
#define OC_CORE_H

#include "ocellus.h"
#include "ocellus_gguf.h"
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#define OC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define OC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define OC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Alignment of every buffer oc_mem_alloc returns: one cache line, enough for AVX-512 loads. */
#define OC_MEM_ALIGN 64

/* Record a failure in err (if non-NULL) and return status, so call sites read
 *   return oc_fail(err, OC_ERR_FORMAT, "gguf: key '%s' ...", key);                         */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
oc_status oc_fail(oc_error *err, oc_status status, const char *fmt, ...);

/* A printable, bounded copy of n bytes of s for a message: control bytes become '?', and at most
 * dst_bytes - 4 bytes are shown, "..." marking a cut. Names and tokens read from a file go through
 * it, so a message stays one line and never carries a file's raw bytes. dst_bytes >= 8. */
void oc_quote(char *dst, size_t dst_bytes, const char *s, size_t n);

/* The allocator to use when the caller passed NULL (malloc/realloc/free). */
const oc_allocator *oc_default_allocator(void);
/* alloc may be NULL (default). Returned memory is OC_MEM_ALIGN-aligned; free it with the same
 * n_bytes. oc_mem_calloc zero-fills. */
void *oc_mem_alloc(const oc_allocator *alloc, size_t n_bytes);
void *oc_mem_calloc(const oc_allocator *alloc, size_t n_bytes);
void oc_mem_free(const oc_allocator *alloc, void *p, size_t n_bytes);

/* Overflow-checked size arithmetic: return 0 and leave *out unchanged on overflow. */
static inline int oc_mul_size(size_t a, size_t b, size_t *out) {
    if (b && a > SIZE_MAX / b) return 0;
    *out = a * b;
    return 1;
}
static inline int oc_add_size(size_t a, size_t b, size_t *out) {
    if (a > SIZE_MAX - b) return 0;
    *out = a + b;
    return 1;
}
/* *total += what oc_mem_alloc(n_bytes) takes from its allocator: n_bytes plus its OC_MEM_ALIGN
 * header. Every *_bytes function that predicts an open adds its blocks with this, so the
 * prediction is the allocator's count exactly. 0 (and *total unchanged) on overflow. */
static inline int oc_add_block(size_t *total, size_t n_bytes) {
    size_t b;
    return oc_add_size(n_bytes, OC_MEM_ALIGN, &b) && oc_add_size(*total, b, total);
}

#endif /* OC_CORE_H */
