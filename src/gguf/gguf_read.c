/* gguf_read.c: the GGUF reader (v2/v3, little-endian; layout in docs/formats.md §1).
 * Opening validates the whole header against the file size with overflow-safe arithmetic, so that
 * every getter afterwards is a bounds-checked lookup that cannot fail on memory. The handle keeps
 * an index (one entry per key and per tensor, hash tables for name lookup, and a 4-byte offset per
 * element of each string array); values stay in the borrowed or mapped bytes.
 * We are more lenient than llama.cpp's reader on tensor placement (docs/formats.md §1, "Strictness"):
 * any aligned, in-bounds offset is accepted, in any order, gaps and overlaps included. */
#include "gguf/gguf.h"

#include "core/dtype.h"
#include "port.h"

#include <stdio.h>
#include <errno.h>
#include <string.h>

/* Smallest encodings, used to refuse counts the remaining bytes cannot hold before allocating:
 * a key/value is a name length (8) + value type (4) + a 1-byte value; a tensor info is a name
 * length (8) + n_dims (4) + one ne (8) + type (4) + offset (8). */
#define MIN_KV_BYTES 13u
#define MIN_TENSOR_INFO_BYTES 32u
/* Hash slots hold index + 1 in 32 bits; string-array offsets are 32-bit (see str_off). */
#define MAX_ENTRIES 0x7fffffffu

typedef struct gguf_kv {
    oc_str key;
    uint32_t type;       /* oc_gguf_type */
    uint32_t elem_type;  /* arrays only */
    uint64_t count;      /* arrays: element count; strings: byte length */
    const uint8_t *val;  /* scalar value, string bytes, or first array element */
    uint32_t *str_off;   /* string arrays: offset from val of element i's length field */
} gguf_kv;

struct oc_gguf {
    oc_allocator alloc;
    oc_port_mapping map;  /* set when opened from a path */
    const uint8_t *bytes;
    size_t n_bytes;
    uint32_t version, alignment;
    int64_t n_keys, n_tensors;
    gguf_kv *keys;
    oc_gguf_tensor *tensors;
    uint32_t *key_slots, *tensor_slots;  /* open addressing; 0 = empty, else index + 1 */
    uint32_t key_cap, tensor_cap;        /* powers of two, or 0 */
    uint64_t data_offset;                /* start of the data section in the file */
};

/* ---- little-endian loads (the file is byte-addressed; no alignment is assumed) ------------------- */

static uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t ld64(const uint8_t *p) { return (uint64_t)ld32(p) | ((uint64_t)ld32(p + 4) << 32); }

/* Value of a fixed-size integer/bool element as int64 (u64 above INT64_MAX saturates). */
static int64_t ld_int(uint32_t type, const uint8_t *p) {
    switch (type) {
    case OC_GGUF_U8: case OC_GGUF_BOOL: return p[0];
    case OC_GGUF_I8: return (int8_t)p[0];
    case OC_GGUF_U16: return ld16(p);
    case OC_GGUF_I16: return (int16_t)ld16(p);
    case OC_GGUF_U32: return ld32(p);
    case OC_GGUF_I32: return (int32_t)ld32(p);
    case OC_GGUF_U64: { uint64_t v = ld64(p); return v > INT64_MAX ? INT64_MAX : (int64_t)v; }
    case OC_GGUF_I64: return (int64_t)ld64(p);
    default: return 0;
    }
}

static float f32_bits(uint32_t b) { float f; memcpy(&f, &b, 4); return f; }   /* bit-exact, NaNs too */

static double ld_float(uint32_t type, const uint8_t *p) {
    if (type == OC_GGUF_F32) { uint32_t b = ld32(p); float f; memcpy(&f, &b, 4); return f; }
    if (type == OC_GGUF_F64) { uint64_t b = ld64(p); double d; memcpy(&d, &b, 8); return d; }
    if (type == OC_GGUF_U64) return (double)ld64(p);
    return (double)ld_int(type, p);
}

/* ---- names and hashing ---------------------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int str_eq(oc_str a, const char *b, size_t b_len) {
    return a.len == b_len && (b_len == 0 || memcmp(a.ptr, b, b_len) == 0);
}

static uint32_t cap_for(int64_t n) {
    uint32_t cap = 8;
    while ((int64_t)cap < 2 * n) cap *= 2;   /* n <= MAX_ENTRIES / 2 keeps this in range */
    return cap;
}

/* Probe an open-addressing table of entry indices for name (entries named by name_at).
 * Returns the matching index, or -1 with *empty_at set to the slot where it would go. */
typedef const oc_str *(*name_at_fn)(const oc_gguf *g, int64_t i);
static int64_t probe(const oc_gguf *g, const uint32_t *slots, uint32_t cap, name_at_fn name_at,
                     const char *name, size_t len, uint32_t *empty_at) {
    if (!cap) return -1;
    uint32_t mask = cap - 1, at = (uint32_t)hash_bytes(name, len) & mask;
    while (slots[at]) {
        int64_t i = (int64_t)slots[at] - 1;
        if (str_eq(*name_at(g, i), name, len)) return i;
        at = (at + 1) & mask;
    }
    if (empty_at) *empty_at = at;
    return -1;
}

/* Insert entry i; returns the index of an earlier entry with the same name, or -1. */
static int64_t insert(const oc_gguf *g, uint32_t *slots, uint32_t cap, name_at_fn name_at, int64_t i) {
    const oc_str *name = name_at(g, i);
    uint32_t at = 0;
    int64_t dup = probe(g, slots, cap, name_at, name->ptr, name->len, &at);
    if (dup < 0) slots[at] = (uint32_t)(i + 1);
    return dup;
}

static const oc_str *key_name_at(const oc_gguf *g, int64_t i) { return &g->keys[i].key; }
static const oc_str *tensor_name_at(const oc_gguf *g, int64_t i) { return &g->tensors[i].name; }

/* ---- the parser ---------------------------------------------------------------------------------- */

typedef struct parser {
    const uint8_t *b;
    size_t n, pos;
    oc_error *err;
    char where[96];   /* "key #3 'general.name'" or "tensor #0 'x'"; empty for the header */
} parser;

static oc_status fail_eof(parser *p, const char *field, uint64_t need_bytes) {
    return oc_fail(p->err, OC_ERR_FORMAT,
                   "gguf: %s%s%s runs past end of file (needs %llu bytes at byte %zu, file is %zu bytes)",
                   p->where, p->where[0] ? ": " : "", field, (unsigned long long)need_bytes, p->pos,
                   p->n);
}

static oc_status take(parser *p, const char *field, uint64_t n_bytes, const uint8_t **out) {
    if (n_bytes > (uint64_t)(p->n - p->pos)) return fail_eof(p, field, n_bytes);
    *out = p->b + p->pos;
    p->pos += (size_t)n_bytes;
    return OC_OK;
}

static oc_status rd_u32(parser *p, const char *field, uint32_t *v) {
    const uint8_t *q = NULL;
    oc_status s = take(p, field, 4, &q);
    if (s == OC_OK) *v = ld32(q);
    return s;
}

static oc_status rd_u64(parser *p, const char *field, uint64_t *v) {
    const uint8_t *q = NULL;
    oc_status s = take(p, field, 8, &q);
    if (s == OC_OK) *v = ld64(q);
    return s;
}

/* A string: uint64 length, then the bytes. field names it in messages ("key name" ...). */
static oc_status rd_str(parser *p, const char *field, oc_str *out) {
    char what[64];
    uint64_t len;
    snprintf(what, sizeof what, "length of %s", field);
    oc_status s = rd_u64(p, what, &len);
    if (s) return s;
    if (len > (uint64_t)(p->n - p->pos)) {
        snprintf(what, sizeof what, "%s (%llu bytes)", field, (unsigned long long)len);
        return fail_eof(p, what, len);
    }
    out->ptr = (const char *)p->b + p->pos;
    out->len = (size_t)len;
    p->pos += (size_t)len;
    return OC_OK;
}

static void set_where(parser *p, const char *kind, int64_t i, const oc_str *name) {
    if (!name) {
        snprintf(p->where, sizeof p->where, "%s #%lld", kind, (long long)i);
        return;
    }
    char q[64];
    oc_quote(q, sizeof q, name->ptr, name->len);
    snprintf(p->where, sizeof p->where, "%s #%lld '%s'", kind, (long long)i, q);
}

static oc_status parse_array(oc_gguf *g, parser *p, gguf_kv *kv) {
    uint32_t et;
    oc_status s = rd_u32(p, "array element type", &et);
    if (s) return s;
    if (et == OC_GGUF_ARRAY)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: nested arrays are not supported", p->where);
    if (et >= OC_GGUF_N_TYPES)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: unknown array element type %u", p->where, et);
    kv->elem_type = et;
    if ((s = rd_u64(p, "array count", &kv->count))) return s;
    uint64_t remaining = p->n - p->pos;
    kv->val = p->b + p->pos;
    if (et != OC_GGUF_STRING) {
        uint64_t size = oc_gguf_type_size(et);
        if (kv->count > remaining / size)
            return oc_fail(p->err, OC_ERR_FORMAT,
                           "gguf: %s: array of %llu %s runs past end of file at byte %zu (file is %zu bytes)",
                           p->where, (unsigned long long)kv->count, oc_gguf_type_name(et), p->pos, p->n);
        p->pos += (size_t)(kv->count * size);
        return OC_OK;
    }
    /* Strings: each needs at least its 8-byte length, which bounds the offset table's size. */
    if (kv->count > remaining / 8)
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: %s: array of %llu strings runs past end of file at byte %zu (file is %zu bytes)",
                       p->where, (unsigned long long)kv->count, p->pos, p->n);
    if (kv->count == 0) return OC_OK;
    kv->str_off = oc_mem_alloc(&g->alloc, (size_t)kv->count * sizeof(uint32_t));
    if (!kv->str_off)
        return oc_fail(p->err, OC_ERR_NOMEM, "gguf: %s: no memory for %llu string offsets", p->where,
                       (unsigned long long)kv->count);
    /* The hot loop of a tokenizer file (151,936 + 151,387 strings for Qwen2): no formatting
     * unless something is wrong. */
    size_t start = p->pos;
    for (uint64_t i = 0; i < kv->count; i++) {
        if (p->pos - start > UINT32_MAX)
            return oc_fail(p->err, OC_ERR_UNSUPPORTED,
                           "gguf: %s: string array larger than 4 GiB is not supported", p->where);
        kv->str_off[i] = (uint32_t)(p->pos - start);
        uint64_t len = p->n - p->pos >= 8 ? ld64(p->b + p->pos) : 0;
        if (p->n - p->pos < 8 || len > (uint64_t)(p->n - p->pos - 8)) {
            char what[64];
            oc_str dummy;
            snprintf(what, sizeof what, "string #%llu of %llu", (unsigned long long)i,
                     (unsigned long long)kv->count);
            return rd_str(p, what, &dummy);   /* fails with the message naming the field */
        }
        p->pos += 8 + (size_t)len;
    }
    return OC_OK;
}

static oc_status parse_kv(oc_gguf *g, parser *p, int64_t i) {
    gguf_kv *kv = &g->keys[i];
    set_where(p, "key", i, NULL);
    oc_status s = rd_str(p, "name", &kv->key);
    if (s) return s;
    set_where(p, "key", i, &kv->key);
    if ((s = rd_u32(p, "value type", &kv->type))) return s;
    if (kv->type >= OC_GGUF_N_TYPES)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: unknown value type %u", p->where, kv->type);
    if (kv->type == OC_GGUF_ARRAY) {
        if ((s = parse_array(g, p, kv))) return s;
    } else if (kv->type == OC_GGUF_STRING) {
        oc_str v;
        if ((s = rd_str(p, "string value", &v))) return s;
        kv->val = (const uint8_t *)v.ptr;
        kv->count = v.len;
    } else {
        char what[32];
        snprintf(what, sizeof what, "%s value", oc_gguf_type_name(kv->type));
        if ((s = take(p, what, oc_gguf_type_size(kv->type), &kv->val))) return s;
    }
    int64_t dup = insert(g, g->key_slots, g->key_cap, key_name_at, i);
    if (dup >= 0)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s duplicates key #%lld", p->where, (long long)dup);
    if (str_eq(kv->key, OC_GGUF_ALIGNMENT_KEY, strlen(OC_GGUF_ALIGNMENT_KEY))) {
        if (kv->type != OC_GGUF_U32)
            return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: alignment must be u32, not %s", p->where,
                           kv->type == OC_GGUF_ARRAY ? "an array" : oc_gguf_type_name(kv->type));
        uint32_t a = ld32(kv->val);
        if (!oc_is_pow2_u32(a))
            return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: alignment %u is not a power of two",
                           p->where, a);
        g->alignment = a;
    }
    return OC_OK;
}

static oc_status parse_tensor_info(oc_gguf *g, parser *p, int64_t i) {
    oc_gguf_tensor *t = &g->tensors[i];
    set_where(p, "tensor", i, NULL);
    oc_status s = rd_str(p, "name", &t->name);
    if (s) return s;
    set_where(p, "tensor", i, &t->name);
    if ((s = rd_u32(p, "n_dims", &t->n_dims))) return s;
    if (t->n_dims < 1 || t->n_dims > OC_GGUF_MAX_DIMS)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: n_dims %u is not in 1..%d", p->where,
                       t->n_dims, OC_GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < OC_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        char what[16];
        uint64_t v;
        snprintf(what, sizeof what, "ne[%u]", d);
        if ((s = rd_u64(p, what, &v))) return s;
        if (v > INT64_MAX)
            return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: ne[%u] = %lld is negative", p->where, d,
                           (long long)(int64_t)v);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    if ((s = rd_u32(p, "type", &type))) return s;
    t->dtype = (int32_t)type;
    if ((s = rd_u64(p, "offset", &t->offset_bytes))) return s;

    const oc_dtype_traits *tr = oc_dtype_get(t->dtype);
    if (!tr) return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: unknown tensor type %d", p->where, t->dtype);
    /* Element count must fit int64 (ggml's own limit); a zero dim makes the tensor empty. */
    uint64_t n_rows = 1, n_elems = (uint64_t)t->ne[0];
    for (uint32_t d = 1; d < OC_GGUF_MAX_DIMS; d++) {
        uint64_t v = (uint64_t)t->ne[d];
        if (v && n_rows > INT64_MAX / v) goto overflow;
        n_rows *= v;
    }
    if (n_rows && n_elems > INT64_MAX / n_rows) goto overflow;
    if (t->ne[0] % tr->block_elems)
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: %s: ne[0] = %lld is not a multiple of the %s block size %d", p->where,
                       (long long)t->ne[0], tr->name, tr->block_elems);
    uint64_t n_blocks = n_elems / (uint64_t)tr->block_elems;
    if (n_blocks > UINT64_MAX / (uint64_t)tr->block_bytes) goto too_big;
    uint64_t row_bytes = n_blocks * (uint64_t)tr->block_bytes;
    if (n_rows && row_bytes > UINT64_MAX / n_rows) goto too_big;
    t->size_bytes = row_bytes * n_rows;
    if (t->offset_bytes % g->alignment)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: offset %llu is not a multiple of alignment %u",
                       p->where, (unsigned long long)t->offset_bytes, g->alignment);
    int64_t dup = insert(g, g->tensor_slots, g->tensor_cap, tensor_name_at, i);
    if (dup >= 0)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s duplicates the name of tensor #%lld", p->where,
                       (long long)dup);
    return OC_OK;
overflow:
    return oc_fail(p->err, OC_ERR_FORMAT,
                   "gguf: %s: element count of ne = [%lld, %lld, %lld, %lld] overflows int64", p->where,
                   (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
too_big:
    return oc_fail(p->err, OC_ERR_FORMAT, "gguf: %s: byte size of %s ne = [%lld, %lld, %lld, %lld] overflows",
                   p->where, tr->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3]);
}

/* Counts are int64 in v2/v3; refuse ones that the remaining bytes cannot hold before any
 * allocation sized from them. */
static oc_status check_counts(parser *p, int64_t n_tensors, int64_t n_kv) {
    uint64_t rem = p->n - p->pos;
    if (n_tensors < 0) return oc_fail(p->err, OC_ERR_FORMAT, "gguf: n_tensors = %lld is negative", (long long)n_tensors);
    if (n_kv < 0) return oc_fail(p->err, OC_ERR_FORMAT, "gguf: n_kv = %lld is negative", (long long)n_kv);
    if ((uint64_t)n_kv > rem / MIN_KV_BYTES || (uint64_t)n_kv > MAX_ENTRIES / 2)
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: n_kv = %lld is implausible: %zu bytes remain after the header, each "
                       "key/value needs at least %u", (long long)n_kv, (size_t)rem, MIN_KV_BYTES);
    rem -= (uint64_t)n_kv * MIN_KV_BYTES;
    if ((uint64_t)n_tensors > rem / MIN_TENSOR_INFO_BYTES || (uint64_t)n_tensors > MAX_ENTRIES / 2)
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: n_tensors = %lld is implausible: %zu bytes remain after the header and "
                       "%lld key/values, each tensor info needs at least %u",
                       (long long)n_tensors, (size_t)rem, (long long)n_kv, MIN_TENSOR_INFO_BYTES);
    return OC_OK;
}

static oc_status parse_header(oc_gguf *g, parser *p) {
    const uint8_t *q = NULL;
    oc_status s = take(p, "magic", 4, &q);
    if (s) return s;
    if (memcmp(q, OC_GGUF_MAGIC, 4) != 0) {
        char shown[8];
        oc_quote(shown, sizeof shown, (const char *)q, 4);
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: bad magic '%s' (bytes %02x %02x %02x %02x), not a GGUF file", shown,
                       q[0], q[1], q[2], q[3]);
    }
    if ((s = rd_u32(p, "version", &g->version))) return s;
    /* A byte-swapped (big-endian) file shows its small version number in the high half
     * (gguf.cpp's endianness guess, docs/formats.md §1). */
    if (g->version != 0 && (g->version & 0xffffu) == 0)
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: version field 0x%08x looks byte-swapped: big-endian GGUF files are not supported",
                       g->version);
    if (g->version == 1)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: version 1 is not supported (only versions 2 and 3)");
    if (g->version != 2 && g->version != 3)
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: unknown version %u (only versions 2 and 3)", g->version);
    uint64_t n_tensors, n_kv;
    if ((s = rd_u64(p, "n_tensors", &n_tensors))) return s;
    if ((s = rd_u64(p, "n_kv", &n_kv))) return s;
    if ((s = check_counts(p, (int64_t)n_tensors, (int64_t)n_kv))) return s;

    g->n_keys = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    if (n_kv) {
        g->key_cap = cap_for(g->n_keys);
        g->keys = oc_mem_calloc(&g->alloc, (size_t)n_kv * sizeof *g->keys);
        g->key_slots = oc_mem_calloc(&g->alloc, (size_t)g->key_cap * sizeof(uint32_t));
        if (!g->keys || !g->key_slots) goto nomem;
    }
    if (n_tensors) {
        g->tensor_cap = cap_for(g->n_tensors);
        g->tensors = oc_mem_calloc(&g->alloc, (size_t)n_tensors * sizeof *g->tensors);
        g->tensor_slots = oc_mem_calloc(&g->alloc, (size_t)g->tensor_cap * sizeof(uint32_t));
        if (!g->tensors || !g->tensor_slots) goto nomem;
    }
    return OC_OK;
nomem:
    return oc_fail(p->err, OC_ERR_NOMEM, "gguf: no memory for the index of %lld keys and %lld tensors",
                   (long long)n_kv, (long long)n_tensors);
}

/* Data section and tensor byte ranges; needs the alignment (from the keys) and the end of the
 * tensor infos. */
static oc_status place_tensors(oc_gguf *g, parser *p) {
    p->where[0] = '\0';
    if (!oc_gguf_pad_u64(p->pos, g->alignment, &g->data_offset))
        return oc_fail(p->err, OC_ERR_FORMAT, "gguf: data section offset overflows");
    if (g->n_tensors == 0) return OC_OK;   /* tokenizer-only files need no data section */
    if (g->data_offset > p->n)
        return oc_fail(p->err, OC_ERR_FORMAT,
                       "gguf: data section starts at byte %llu (tensor infos end at %zu, alignment %u), "
                       "past end of file (file is %zu bytes)",
                       (unsigned long long)g->data_offset, p->pos, g->alignment, p->n);
    uint64_t data_bytes = p->n - g->data_offset;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        oc_gguf_tensor *t = &g->tensors[i];
        if (t->offset_bytes > data_bytes || t->size_bytes > data_bytes - t->offset_bytes) {
            char q[64];
            oc_quote(q, sizeof q, t->name.ptr, t->name.len);
            return oc_fail(p->err, OC_ERR_FORMAT,
                           "gguf: tensor #%lld '%s': data (offset %llu + %llu bytes, data section at "
                           "byte %llu) runs past end of file (file is %zu bytes)",
                           (long long)i, q, (unsigned long long)t->offset_bytes,
                           (unsigned long long)t->size_bytes, (unsigned long long)g->data_offset, p->n);
        }
        t->data = g->bytes + g->data_offset + t->offset_bytes;
    }
    return OC_OK;
}

static oc_status parse(oc_gguf *g, oc_error *err) {
    parser p = { g->bytes, g->n_bytes, 0, err, "" };
    oc_status s = parse_header(g, &p);
    for (int64_t i = 0; s == OC_OK && i < g->n_keys; i++) s = parse_kv(g, &p, i);
    for (int64_t i = 0; s == OC_OK && i < g->n_tensors; i++) s = parse_tensor_info(g, &p, i);
    if (s == OC_OK) s = place_tensors(g, &p);
    return s;
}

/* ---- open / close --------------------------------------------------------------------------------- */

void oc_gguf_close(oc_gguf *g) {
    if (!g) return;
    oc_allocator a = g->alloc;
    if (g->keys)
        for (int64_t i = 0; i < g->n_keys; i++)
            if (g->keys[i].str_off)
                oc_mem_free(&a, g->keys[i].str_off, (size_t)g->keys[i].count * sizeof(uint32_t));
    oc_mem_free(&a, g->keys, (size_t)g->n_keys * sizeof *g->keys);
    oc_mem_free(&a, g->key_slots, (size_t)g->key_cap * sizeof(uint32_t));
    oc_mem_free(&a, g->tensors, (size_t)g->n_tensors * sizeof *g->tensors);
    oc_mem_free(&a, g->tensor_slots, (size_t)g->tensor_cap * sizeof(uint32_t));
    if (g->map.is_mapped == 2) oc_mem_free(&a, (void *)g->map.data, g->map.n_bytes);   /* a read copy */
    oc_port_unmap_file(&g->map);
    oc_mem_free(&a, g, sizeof *g);
}

static oc_status new_handle(oc_gguf **out, const oc_allocator *alloc, oc_error *err) {
    if (!alloc || !alloc->fn) alloc = oc_default_allocator();
    oc_gguf *g = oc_mem_calloc(alloc, sizeof *g);
    if (!g) return oc_fail(err, OC_ERR_NOMEM, "gguf: no memory for the handle");
    g->alloc = *alloc;
    g->alignment = OC_GGUF_DEFAULT_ALIGNMENT;
    *out = g;
    return OC_OK;
}

oc_status oc_gguf_open_bytes(oc_gguf **out, const void *bytes, size_t n_bytes,
                             const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "gguf: out is NULL");
    *out = NULL;
    if (!bytes && n_bytes) return oc_fail(err, OC_ERR_INVALID, "gguf: bytes is NULL");
    oc_gguf *g;
    oc_status s = new_handle(&g, alloc, err);
    if (s) return s;
    g->bytes = bytes;
    g->n_bytes = n_bytes;
    if ((s = parse(g, err))) { oc_gguf_close(g); return s; }
    *out = g;
    return OC_OK;
}

size_t oc_gguf_mapped_bytes(const oc_gguf *g) {
    return g && g->map.data && g->map.is_mapped != 2 ? g->map.n_bytes : 0;
}

static void *alloc_from(void *user, size_t n_bytes) { return oc_mem_alloc(user, n_bytes); }

/* Map the file, or with read_copy read it into memory from g's allocator (oc_gguf_open_read). */
static oc_status open_path(oc_gguf **out, const char *path, int read_copy, const oc_allocator *alloc,
                           oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "gguf: out is NULL");
    *out = NULL;
    if (!path) return oc_fail(err, OC_ERR_INVALID, "gguf: path is NULL");
    oc_gguf *g;
    oc_status s = new_handle(&g, alloc, err);
    if (s) return s;
    char msg[OC_ERROR_MESSAGE_BYTES];
    int e = read_copy ? oc_port_read_file(path, alloc_from, &g->alloc, &g->map, msg, sizeof msg)
                      : oc_port_map_file(path, &g->map, msg, sizeof msg);
    if (e != 0) {
        oc_gguf_close(g);
        return oc_fail(err, e == ENOMEM ? OC_ERR_NOMEM : OC_ERR_IO, "%s", msg);
    }
    g->bytes = g->map.data;
    g->n_bytes = g->map.n_bytes;
    oc_error local;
    if ((s = parse(g, &local))) {
        oc_gguf_close(g);
        return oc_fail(err, s, "%s: %s", path, local.message);   /* name the file */
    }
    *out = g;
    return OC_OK;
}

oc_status oc_gguf_open(oc_gguf **out, const char *path, const oc_allocator *alloc, oc_error *err) {
    return open_path(out, path, 0, alloc, err);
}

oc_status oc_gguf_open_read(oc_gguf **out, const char *path, const oc_allocator *alloc, oc_error *err) {
    return open_path(out, path, 1, alloc, err);
}

/* ---- header facts and key index -------------------------------------------------------------------- */

uint32_t oc_gguf_version(const oc_gguf *g) { return g ? g->version : 0; }
uint32_t oc_gguf_alignment(const oc_gguf *g) { return g ? g->alignment : 0; }
int64_t oc_gguf_n_keys(const oc_gguf *g) { return g ? g->n_keys : 0; }
int64_t oc_gguf_n_tensors(const oc_gguf *g) { return g ? g->n_tensors : 0; }

static const gguf_kv *kv_at(const oc_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_keys ? &g->keys[i] : NULL;
}

oc_str oc_gguf_key_name(const oc_gguf *g, int64_t key_index) {
    const gguf_kv *kv = kv_at(g, key_index);
    oc_str empty = { "", 0 };
    return kv ? kv->key : empty;
}

oc_gguf_type oc_gguf_key_type(const oc_gguf *g, int64_t key_index) {
    const gguf_kv *kv = kv_at(g, key_index);
    return kv ? (oc_gguf_type)kv->type : OC_GGUF_NONE;
}

int64_t oc_gguf_find_key(const oc_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return probe(g, g->key_slots, g->key_cap, key_name_at, key, strlen(key), NULL);
}

const oc_gguf_tensor *oc_gguf_find_tensor(const oc_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    int64_t i = probe(g, g->tensor_slots, g->tensor_cap, tensor_name_at, name, strlen(name), NULL);
    return i >= 0 ? &g->tensors[i] : NULL;
}

const oc_gguf_tensor *oc_gguf_tensor_at(const oc_gguf *g, int64_t tensor_index) {
    return g && tensor_index >= 0 && tensor_index < g->n_tensors ? &g->tensors[tensor_index] : NULL;
}

/* ---- typed getters ------------------------------------------------------------------------------------ */

static void describe_type(const gguf_kv *kv, char *buf, size_t n) {
    if (kv->type == OC_GGUF_ARRAY)
        snprintf(buf, n, "array of %s", oc_gguf_type_name(kv->elem_type));
    else
        snprintf(buf, n, "%s", oc_gguf_type_name(kv->type));
}

/* Look key up; when want_type is a type (not OC_GGUF_NONE) require it. */
static oc_status lookup(const oc_gguf *g, const char *key, uint32_t want_type, const char *want_name,
                        const gguf_kv **out, oc_error *err) {
    if (!g || !key) return oc_fail(err, OC_ERR_INVALID, "gguf: NULL handle or key");
    const gguf_kv *kv = kv_at(g, oc_gguf_find_key(g, key));
    char q[64];
    if (!kv) {
        oc_quote(q, sizeof q, key, strlen(key));
        return oc_fail(err, OC_ERR_NOT_FOUND, "gguf: key '%s' not found", q);
    }
    if (want_type != OC_GGUF_NONE && kv->type != want_type) {
        char have[32];
        oc_quote(q, sizeof q, key, strlen(key));
        describe_type(kv, have, sizeof have);
        return oc_fail(err, OC_ERR_TYPE, "gguf: key '%s' has type %s, not %s", q, have, want_name);
    }
    *out = kv;
    return OC_OK;
}

#define SCALAR_GETTER(fn, ctype, gtype, expr)                                                      \
    oc_status fn(const oc_gguf *g, const char *key, ctype *out, oc_error *err) {                   \
        const gguf_kv *kv;                                                                         \
        oc_status s = lookup(g, key, gtype, oc_gguf_type_name(gtype), &kv, err);                   \
        if (s == OC_OK && out) *out = (expr);                                                      \
        return s;                                                                                  \
    }

SCALAR_GETTER(oc_gguf_get_u32, uint32_t, OC_GGUF_U32, ld32(kv->val))
SCALAR_GETTER(oc_gguf_get_i32, int32_t, OC_GGUF_I32, (int32_t)ld32(kv->val))
SCALAR_GETTER(oc_gguf_get_u64, uint64_t, OC_GGUF_U64, ld64(kv->val))
SCALAR_GETTER(oc_gguf_get_f32, float, OC_GGUF_F32, f32_bits(ld32(kv->val)))
SCALAR_GETTER(oc_gguf_get_bool, int, OC_GGUF_BOOL, kv->val[0] != 0)

oc_status oc_gguf_get_str(const oc_gguf *g, const char *key, oc_str *out, oc_error *err) {
    const gguf_kv *kv;
    oc_status s = lookup(g, key, OC_GGUF_STRING, "string", &kv, err);
    if (s == OC_OK && out) { out->ptr = (const char *)kv->val; out->len = (size_t)kv->count; }
    return s;
}

oc_status oc_gguf_get_int(const oc_gguf *g, const char *key, int64_t *out, oc_error *err) {
    const gguf_kv *kv;
    oc_status s = lookup(g, key, OC_GGUF_NONE, NULL, &kv, err);
    if (s) return s;
    char q[64], have[32];
    oc_quote(q, sizeof q, key, strlen(key));
    if (!oc_gguf_type_is_int(kv->type)) {
        describe_type(kv, have, sizeof have);
        return oc_fail(err, OC_ERR_TYPE, "gguf: key '%s' has type %s, not an integer", q, have);
    }
    if (kv->type == OC_GGUF_U64 && ld64(kv->val) > INT64_MAX)
        return oc_fail(err, OC_ERR_RANGE, "gguf: key '%s': u64 value %llu does not fit in int64", q,
                       (unsigned long long)ld64(kv->val));
    if (out) *out = ld_int(kv->type, kv->val);
    return OC_OK;
}

oc_status oc_gguf_get_float(const oc_gguf *g, const char *key, double *out, oc_error *err) {
    const gguf_kv *kv;
    oc_status s = lookup(g, key, OC_GGUF_NONE, NULL, &kv, err);
    if (s) return s;
    if (kv->type != OC_GGUF_F32 && kv->type != OC_GGUF_F64) {
        char q[64], have[32];
        oc_quote(q, sizeof q, key, strlen(key));
        describe_type(kv, have, sizeof have);
        return oc_fail(err, OC_ERR_TYPE, "gguf: key '%s' has type %s, not f32 or f64", q, have);
    }
    if (out) *out = ld_float(kv->type, kv->val);
    return OC_OK;
}

/* ---- arrays --------------------------------------------------------------------------------------------- */

oc_status oc_gguf_get_arr(const oc_gguf *g, const char *key, oc_gguf_type *elem_type,
                          uint64_t *count, oc_error *err) {
    const gguf_kv *kv;
    oc_status s = lookup(g, key, OC_GGUF_ARRAY, "array", &kv, err);
    if (s) return s;
    if (elem_type) *elem_type = (oc_gguf_type)kv->elem_type;
    if (count) *count = kv->count;
    return OC_OK;
}

/* Element i of an array key, or NULL when out of range or not an array. */
static const gguf_kv *arr_at(const oc_gguf *g, int64_t key_index, uint64_t i) {
    const gguf_kv *kv = kv_at(g, key_index);
    return kv && kv->type == OC_GGUF_ARRAY && i < kv->count ? kv : NULL;
}

oc_str oc_gguf_arr_str(const oc_gguf *g, int64_t key_index, uint64_t i) {
    const gguf_kv *kv = arr_at(g, key_index, i);
    oc_str r = { "", 0 };
    if (kv && kv->elem_type == OC_GGUF_STRING) {
        const uint8_t *q = kv->val + kv->str_off[i];
        r.len = (size_t)ld64(q);
        r.ptr = (const char *)q + 8;
    }
    return r;
}

int64_t oc_gguf_arr_int(const oc_gguf *g, int64_t key_index, uint64_t i) {
    const gguf_kv *kv = arr_at(g, key_index, i);
    if (!kv || !oc_gguf_type_is_int(kv->elem_type)) return 0;
    return ld_int(kv->elem_type, kv->val + i * oc_gguf_type_size(kv->elem_type));
}

double oc_gguf_arr_float(const oc_gguf *g, int64_t key_index, uint64_t i) {
    const gguf_kv *kv = arr_at(g, key_index, i);
    if (!kv || kv->elem_type == OC_GGUF_STRING) return 0;
    return ld_float(kv->elem_type, kv->val + i * oc_gguf_type_size(kv->elem_type));
}
