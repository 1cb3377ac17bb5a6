/* json.h: a small strict RFC 8259 parser for config.json, tokenizer.json and safetensors headers.
 * One node array plus one pool of unescaped NUL-terminated UTF-8 strings, from the caller's
 * allocator; nodes are addressed by index. Strict: UTF-8 validated (no overlongs or encoded
 * surrogates), control characters must be escaped, \u escapes must pair surrogates, numbers follow
 * the RFC grammar, nothing but whitespace after the value; a leading BOM is skipped (RFC 8259 §8.1).
 * Duplicate keys are kept and oc_json_get returns the last one, as Python's json does. Errors say
 * "line L, column C (byte B)" (columns count bytes). Doubles are correctly rounded on the exact fast
 * path (<= 19 significant digits, |exponent| <= 22), otherwise strtod ("C" LC_NUMERIC assumed). */
#ifndef OC_JSON_H
#define OC_JSON_H

#include "core/core.h"

typedef enum oc_json_type {
    OC_JSON_NULL = 0,
    OC_JSON_FALSE,
    OC_JSON_TRUE,
    OC_JSON_NUMBER,
    OC_JSON_STRING,
    OC_JSON_ARRAY,
    OC_JSON_OBJECT
} oc_json_type;

/* "no node": returned by lookups that find nothing; every accessor accepts it. */
#define OC_JSON_NONE UINT32_MAX

typedef struct oc_json_limits {
    uint32_t max_depth;   /* nesting of arrays/objects; default 64, at most 1024 */
    size_t max_bytes;     /* input size; default 1 GiB, at most 4 GiB - 1 */
    uint32_t max_nodes;   /* values + keys; default 1 << 26 */
} oc_json_limits;

void oc_json_limits_default(oc_json_limits *limits);

typedef struct oc_json oc_json;

/* Parse n_bytes of text (not NUL-terminated; the text may be freed afterwards). limits and alloc
 * may be NULL. [alloc: nodes (doubling) + a string pool of n_bytes + 1]
 * [errors: OC_ERR_FORMAT (syntax, with position), OC_ERR_RANGE (limits), OC_ERR_NOMEM] */
oc_status oc_json_parse(oc_json **out, const char *text, size_t n_bytes, const oc_json_limits *limits,
                        const oc_allocator *alloc, oc_error *err);
void oc_json_free(oc_json *doc);

uint32_t oc_json_root(const oc_json *doc);                    /* 0 */
uint32_t oc_json_n_nodes(const oc_json *doc);
oc_json_type oc_json_type_of(const oc_json *doc, uint32_t node); /* OC_JSON_NULL for NONE */
const char *oc_json_type_name(oc_json_type type);              /* "null", "number", ... */
size_t oc_json_offset(const oc_json *doc, uint32_t node);      /* byte offset in the source */

/* Navigation. For arrays the children are the elements; for objects they are the member keys
 * (string nodes) and oc_json_value(key) is the member's value. Iterate with
 *   for (uint32_t k = oc_json_first(d, obj); k != OC_JSON_NONE; k = oc_json_next(d, k)) ... */
uint32_t oc_json_count(const oc_json *doc, uint32_t node);     /* elements / members, else 0 */
uint32_t oc_json_first(const oc_json *doc, uint32_t node);
uint32_t oc_json_next(const oc_json *doc, uint32_t node);
uint32_t oc_json_value(const oc_json *doc, uint32_t key);
uint32_t oc_json_at(const oc_json *doc, uint32_t array, uint32_t index);  /* O(index) */
/* Member lookup by key (the last duplicate wins); NONE when absent or node is no object. */
uint32_t oc_json_get(const oc_json *doc, uint32_t object, const char *key);
uint32_t oc_json_get_n(const oc_json *doc, uint32_t object, const char *key, size_t key_len);
/* RFC 6901 JSON Pointer from node: "" is node itself, "/a/0/b~1c" walks a, 0, "b/c".
 * NONE when a step is missing or malformed. */
uint32_t oc_json_pointer(const oc_json *doc, uint32_t node, const char *pointer);

/* Typed access. OC_ERR_TYPE (message names the actual type and byte offset) on a mismatch,
 * OC_ERR_NOT_FOUND for NONE. Strings are unescaped UTF-8, NUL-terminated, owned by doc. */
oc_status oc_json_str(const oc_json *doc, uint32_t node, oc_str *out, oc_error *err);
oc_status oc_json_f64(const oc_json *doc, uint32_t node, double *out, oc_error *err);
/* Only numbers written as integers (no fraction, no exponent) that fit in int64_t. */
oc_status oc_json_i64(const oc_json *doc, uint32_t node, int64_t *out, oc_error *err);
oc_status oc_json_bool(const oc_json *doc, uint32_t node, int *out, oc_error *err);
/* String equality without allocation (false for non-strings). */
int oc_json_str_eq(const oc_json *doc, uint32_t node, const char *s);

#endif /* OC_JSON_H */
