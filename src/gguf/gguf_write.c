/* gguf_write.c: the GGUF v3 writer. Keys are serialized (little-endian) into one buffer as they
 * are added, in insertion order; tensors are recorded with borrowed data or a fill callback and
 * laid out at write time exactly as llama.cpp's writers do (docs/formats.md §1; gguf.cpp
 * gguf_write_to_buf, gguf_writer.py): header, keys, tensor infos, zero padding to the alignment,
 * then each tensor's bytes followed by zero padding, so offsets are the running sum of
 * pad(n_bytes, alignment). Output goes through stdio. */
#include "gguf/gguf.h"

#include "core/dtype.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Streaming fills are asked for chunks of whole rows of about this size. */
#define FILL_CHUNK_BYTES ((size_t)4 << 20)

typedef struct wkey {
    size_t name_at, name_len;  /* the name's bytes inside kv */
    size_t val_at;             /* the value's bytes (after the type field) inside kv */
    uint32_t type;
} wkey;

typedef struct wtensor {
    size_t name_at, name_len;  /* inside names */
    int32_t dtype;
    uint32_t n_dims;
    int64_t ne[OC_GGUF_MAX_DIMS];
    uint64_t n_bytes, row_bytes, n_rows;
    const void *data;          /* borrowed, or NULL when fill is set */
    oc_gguf_fill_fn fill;
    void *user;
} wtensor;

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
} wbuf;

struct oc_gguf_writer {
    oc_allocator alloc;
    uint32_t alignment;
    wbuf kv;        /* serialized key/values */
    wbuf names;     /* tensor names */
    wbuf keys;      /* wkey[] */
    wbuf tensors;   /* wtensor[] */
};

/* ---- growable buffers through the caller's allocator --------------------------------------------- */

static int wb_reserve(const oc_allocator *a, wbuf *b, size_t extra) {
    size_t need;
    if (!oc_add_size(b->n, extra, &need)) return 0;
    if (need <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) { cap = need; break; }
        cap *= 2;
    }
    unsigned char *p = oc_mem_alloc(a, cap);
    if (!p) return 0;
    if (b->n) memcpy(p, b->p, b->n);
    oc_mem_free(a, b->p, b->cap);
    b->p = p;
    b->cap = cap;
    return 1;
}

static void wb_free(const oc_allocator *a, wbuf *b) {
    oc_mem_free(a, b->p, b->cap);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Appends assume wb_reserve succeeded for the total first. */
static void wb_put(wbuf *b, const void *p, size_t n) {
    if (n) memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void wb_le(wbuf *b, uint64_t v, unsigned n_bytes) {
    for (unsigned i = 0; i < n_bytes; i++) b->p[b->n++] = (unsigned char)(v >> (8 * i));
}

/* A host-order value of type t (fixed size) as uint64 bits, for little-endian output. */
static uint64_t host_bits(uint32_t t, const void *v) {
    switch (oc_gguf_type_size(t)) {
    case 1: { uint8_t x; memcpy(&x, v, 1); return x; }
    case 2: { uint16_t x; memcpy(&x, v, 2); return x; }
    case 4: { uint32_t x; memcpy(&x, v, 4); return x; }
    default: { uint64_t x; memcpy(&x, v, 8); return x; }
    }
}

/* ---- open / close ------------------------------------------------------------------------------------- */

oc_status oc_gguf_writer_open(oc_gguf_writer **out, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "gguf writer: out is NULL");
    *out = NULL;
    if (!alloc || !alloc->fn) alloc = oc_default_allocator();
    oc_gguf_writer *w = oc_mem_calloc(alloc, sizeof *w);
    if (!w) return oc_fail(err, OC_ERR_NOMEM, "gguf writer: no memory for the handle");
    w->alloc = *alloc;
    w->alignment = OC_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return OC_OK;
}

void oc_gguf_writer_close(oc_gguf_writer *w) {
    if (!w) return;
    oc_allocator a = w->alloc;
    wb_free(&a, &w->kv);
    wb_free(&a, &w->names);
    wb_free(&a, &w->keys);
    wb_free(&a, &w->tensors);
    oc_mem_free(&a, w, sizeof *w);
}

/* ---- keys ------------------------------------------------------------------------------------------------ */

static size_t n_keys(const oc_gguf_writer *w) { return w->keys.n / sizeof(wkey); }
static wkey *key_at(const oc_gguf_writer *w, size_t i) { return (wkey *)(void *)w->keys.p + i; }

static const wkey *find_key(const oc_gguf_writer *w, const char *key, size_t len) {
    for (size_t i = 0; i < n_keys(w); i++) {
        const wkey *k = key_at(w, i);
        if (k->name_len == len && !memcmp(w->kv.p + k->name_at, key, len)) return k;
    }
    return NULL;
}

/* Check key, reserve value_bytes of value after the name and type, and write name and type.
 * Returns the new record, or NULL with err set. */
static wkey *begin_key(oc_gguf_writer *w, const char *key, uint32_t type, uint64_t value_bytes,
                       oc_status *status, oc_error *err) {
    if (!w || !key) { *status = oc_fail(err, OC_ERR_INVALID, "gguf writer: NULL writer or key"); return NULL; }
    size_t len = strlen(key);
    if (type != OC_GGUF_U32 && !strcmp(key, OC_GGUF_ALIGNMENT_KEY)) {
        *status = oc_fail(err, OC_ERR_INVALID, "gguf writer: %s must be u32, not %s", key, oc_gguf_type_name(type));
        return NULL;
    }
    if (find_key(w, key, len)) {
        *status = oc_fail(err, OC_ERR_INVALID, "gguf writer: duplicate key '%.80s'", key);
        return NULL;
    }
    size_t total;
    if (value_bytes > SIZE_MAX || !oc_add_size(8 + 4, len, &total) ||
        !oc_add_size(total, (size_t)value_bytes, &total) || !wb_reserve(&w->alloc, &w->kv, total) ||
        !wb_reserve(&w->alloc, &w->keys, sizeof(wkey))) {
        *status = oc_fail(err, OC_ERR_NOMEM, "gguf writer: no memory for key '%.80s'", key);
        return NULL;
    }
    wkey k = { 0, len, 0, type };
    wb_le(&w->kv, len, 8);
    k.name_at = w->kv.n;
    wb_put(&w->kv, key, len);
    wb_le(&w->kv, type, 4);
    k.val_at = w->kv.n;
    wb_put(&w->keys, &k, sizeof k);
    *status = OC_OK;
    return key_at(w, n_keys(w) - 1);
}

oc_status oc_gguf_writer_set_alignment(oc_gguf_writer *w, uint32_t alignment, oc_error *err) {
    if (!w) return oc_fail(err, OC_ERR_INVALID, "gguf writer: NULL writer");
    if (!oc_is_pow2_u32(alignment))
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: alignment %u is not a power of two", alignment);
    const wkey *k = find_key(w, OC_GGUF_ALIGNMENT_KEY, strlen(OC_GGUF_ALIGNMENT_KEY));
    if (k) {
        /* Update the stored value in place (add_u32 made sure it is a u32). */
        for (unsigned i = 0; i < 4; i++) w->kv.p[k->val_at + i] = (unsigned char)(alignment >> (8 * i));
    } else {
        oc_status s;
        if (!begin_key(w, OC_GGUF_ALIGNMENT_KEY, OC_GGUF_U32, 4, &s, err)) return s;
        wb_le(&w->kv, alignment, 4);
    }
    w->alignment = alignment;
    return OC_OK;
}

oc_status oc_gguf_writer_add_scalar(oc_gguf_writer *w, const char *key, oc_gguf_type type,
                                    const void *value, oc_error *err) {
    uint32_t size = oc_gguf_type_size((uint32_t)type);
    if (!size) return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': type %d is not a fixed-size scalar", key ? key : "", (int)type);
    if (!value) return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': NULL value", key ? key : "");
    if (key && !strcmp(key, OC_GGUF_ALIGNMENT_KEY)) {
        if (type != OC_GGUF_U32)
            return oc_fail(err, OC_ERR_INVALID, "gguf writer: %s must be u32, not %s", key, oc_gguf_type_name((uint32_t)type));
        uint32_t a = (uint32_t)host_bits(OC_GGUF_U32, value);
        if (w && find_key(w, key, strlen(key)))
            return oc_fail(err, OC_ERR_INVALID, "gguf writer: duplicate key '%s'", key);
        return oc_gguf_writer_set_alignment(w, a, err);
    }
    oc_status s;
    if (!begin_key(w, key, (uint32_t)type, size, &s, err)) return s;
    wb_le(&w->kv, host_bits((uint32_t)type, value), size);
    return OC_OK;
}

oc_status oc_gguf_writer_add_u32(oc_gguf_writer *w, const char *key, uint32_t v, oc_error *err) {
    return oc_gguf_writer_add_scalar(w, key, OC_GGUF_U32, &v, err);
}
oc_status oc_gguf_writer_add_i32(oc_gguf_writer *w, const char *key, int32_t v, oc_error *err) {
    return oc_gguf_writer_add_scalar(w, key, OC_GGUF_I32, &v, err);
}
oc_status oc_gguf_writer_add_u64(oc_gguf_writer *w, const char *key, uint64_t v, oc_error *err) {
    return oc_gguf_writer_add_scalar(w, key, OC_GGUF_U64, &v, err);
}
oc_status oc_gguf_writer_add_f32(oc_gguf_writer *w, const char *key, float v, oc_error *err) {
    return oc_gguf_writer_add_scalar(w, key, OC_GGUF_F32, &v, err);
}
oc_status oc_gguf_writer_add_bool(oc_gguf_writer *w, const char *key, int v, oc_error *err) {
    uint8_t b = v != 0;
    return oc_gguf_writer_add_scalar(w, key, OC_GGUF_BOOL, &b, err);
}

oc_status oc_gguf_writer_add_str(oc_gguf_writer *w, const char *key, const char *v, oc_error *err) {
    if (!v) return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': NULL string", key ? key : "");
    size_t len = strlen(v);
    oc_status s;
    if (!begin_key(w, key, OC_GGUF_STRING, (uint64_t)len + 8, &s, err)) return s;
    wb_le(&w->kv, len, 8);
    wb_put(&w->kv, v, len);
    return OC_OK;
}

oc_status oc_gguf_writer_add_arr(oc_gguf_writer *w, const char *key, oc_gguf_type elem_type,
                                 const void *values, uint64_t count, oc_error *err) {
    uint32_t size = oc_gguf_type_size((uint32_t)elem_type);
    if (!size)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': element type %d is not fixed-size (use add_arr_str for strings; arrays do not nest)", key ? key : "", (int)elem_type);
    if (!values && count)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': NULL values", key ? key : "");
    if (count > (UINT64_MAX - 12) / size)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': array of %llu elements is too large", key ? key : "", (unsigned long long)count);
    oc_status s;
    if (!begin_key(w, key, OC_GGUF_ARRAY, 12 + count * size, &s, err)) return s;
    wb_le(&w->kv, (uint32_t)elem_type, 4);
    wb_le(&w->kv, count, 8);
    const unsigned char *v = values;
    for (uint64_t i = 0; i < count; i++) wb_le(&w->kv, host_bits((uint32_t)elem_type, v + i * size), size);
    return OC_OK;
}

oc_status oc_gguf_writer_add_arr_str(oc_gguf_writer *w, const char *key, const char *const *values,
                                     uint64_t count, oc_error *err) {
    if (!values && count)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': NULL values", key ? key : "");
    uint64_t total = 12;
    for (uint64_t i = 0; i < count; i++) {
        if (!values[i])
            return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': string #%llu is NULL", key ? key : "", (unsigned long long)i);
        uint64_t len = strlen(values[i]);
        if (total > UINT64_MAX - 8 - len)
            return oc_fail(err, OC_ERR_INVALID, "gguf writer: key '%.80s': array too large", key ? key : "");
        total += 8 + len;
    }
    oc_status s;
    if (!begin_key(w, key, OC_GGUF_ARRAY, total, &s, err)) return s;
    wb_le(&w->kv, OC_GGUF_STRING, 4);
    wb_le(&w->kv, count, 8);
    for (uint64_t i = 0; i < count; i++) {
        size_t len = strlen(values[i]);
        wb_le(&w->kv, len, 8);
        wb_put(&w->kv, values[i], len);
    }
    return OC_OK;
}

/* ---- tensors ---------------------------------------------------------------------------------------------- */

static size_t n_tensors(const oc_gguf_writer *w) { return w->tensors.n / sizeof(wtensor); }
static wtensor *tensor_at(const oc_gguf_writer *w, size_t i) { return (wtensor *)(void *)w->tensors.p + i; }

static oc_status add_tensor(oc_gguf_writer *w, const char *name, int32_t dtype, uint32_t n_dims,
                            const int64_t *ne, const void *data, oc_gguf_fill_fn fill, void *user,
                            oc_error *err) {
    if (!w || !name) return oc_fail(err, OC_ERR_INVALID, "gguf writer: NULL writer or tensor name");
    size_t len = strlen(name);
    for (size_t i = 0; i < n_tensors(w); i++) {
        const wtensor *t = tensor_at(w, i);
        if (t->name_len == len && !memcmp(w->names.p + t->name_at, name, len))
            return oc_fail(err, OC_ERR_INVALID, "gguf writer: duplicate tensor name '%.80s'", name);
    }
    if (n_dims < 1 || n_dims > OC_GGUF_MAX_DIMS || !ne)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': n_dims %u is not in 1..%d", name, n_dims, OC_GGUF_MAX_DIMS);
    const oc_dtype_traits *tr = oc_dtype_get(dtype);
    if (!tr) return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': unknown type %d", name, dtype);
    wtensor t = { 0, len, dtype, n_dims, { 1, 1, 1, 1 }, 0, 0, 1, data, fill, user };
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': ne[%u] = %lld is negative", name, d, (long long)ne[d]);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % tr->block_elems)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': ne[0] = %lld is not a multiple of the %s block size %d", name, (long long)t.ne[0], tr->name, tr->block_elems);
    /* Same limits as the reader: element count fits int64, byte size fits uint64. */
    for (uint32_t d = 1; d < OC_GGUF_MAX_DIMS; d++) {
        if (t.ne[d] && t.n_rows > (uint64_t)INT64_MAX / (uint64_t)t.ne[d]) goto too_big;
        t.n_rows *= (uint64_t)t.ne[d];
    }
    if (t.n_rows && (uint64_t)t.ne[0] > (uint64_t)INT64_MAX / t.n_rows) goto too_big;
    t.row_bytes = oc_dtype_row_bytes(dtype, (uint64_t)t.ne[0]);
    if (t.row_bytes == 0 && t.ne[0] != 0) goto too_big;
    if (t.n_rows && t.row_bytes > UINT64_MAX / t.n_rows) goto too_big;
    t.n_bytes = t.row_bytes * t.n_rows;
    if (t.n_bytes > SIZE_MAX) goto too_big;
    if (!fill && !data && t.n_bytes)
        return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': NULL data for %llu bytes", name, (unsigned long long)t.n_bytes);
    if (!wb_reserve(&w->alloc, &w->names, len) || !wb_reserve(&w->alloc, &w->tensors, sizeof t))
        return oc_fail(err, OC_ERR_NOMEM, "gguf writer: no memory for tensor '%.80s'", name);
    t.name_at = w->names.n;
    wb_put(&w->names, name, len);
    wb_put(&w->tensors, &t, sizeof t);
    return OC_OK;
too_big:
    return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': size of ne = [%lld, %lld, %lld, %lld] overflows", name, (long long)t.ne[0], (long long)t.ne[1], (long long)t.ne[2], (long long)t.ne[3]);
}

oc_status oc_gguf_writer_add_tensor(oc_gguf_writer *w, const char *name, int32_t dtype,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    oc_error *err) {
    return add_tensor(w, name, dtype, n_dims, ne, data, NULL, NULL, err);
}

oc_status oc_gguf_writer_add_tensor_fn(oc_gguf_writer *w, const char *name, int32_t dtype,
                                       uint32_t n_dims, const int64_t *ne, oc_gguf_fill_fn fill,
                                       void *user, oc_error *err) {
    if (!fill) return oc_fail(err, OC_ERR_INVALID, "gguf writer: tensor '%.80s': NULL fill function", name ? name : "");
    return add_tensor(w, name, dtype, n_dims, ne, NULL, fill, user, err);
}

/* ---- writing ------------------------------------------------------------------------------------------------ */

typedef struct out_file {
    FILE *f;
    const char *path;
    uint64_t pos;
    int failed;      /* an fwrite failed; errno_at is its errno */
    int errno_at;
} out_file;

static void out_bytes(out_file *o, const void *p, size_t n) {
    if (o->failed || !n) return;
    errno = 0;
    if (fwrite(p, 1, n, o->f) != n) { o->failed = 1; o->errno_at = errno; return; }
    o->pos += n;
}

static void out_le(out_file *o, uint64_t v, unsigned n_bytes) {
    unsigned char b[8];
    for (unsigned i = 0; i < n_bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
    out_bytes(o, b, n_bytes);
}

static void out_pad(out_file *o, uint32_t alignment) {
    static const unsigned char zeros[64];
    uint64_t n = (alignment - o->pos % alignment) % alignment;
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        out_bytes(o, zeros, k);
        n -= k;
    }
}

static oc_status io_fail(oc_error *err, const out_file *o, const char *what, int e) {
    return oc_fail(err, OC_ERR_IO, "gguf writer: %s: %s: %s", o->path, what,
                   e ? strerror(e) : "unknown error");
}

/* Produce a streamed tensor's bytes chunk by chunk through buf (buf_bytes >= one row). */
static oc_status out_filled(out_file *o, const wtensor *t, const char *name, unsigned char *buf,
                            size_t buf_bytes, oc_error *err) {
    uint64_t rows_per_chunk = t->row_bytes ? buf_bytes / t->row_bytes : 0;
    for (uint64_t r = 0; t->row_bytes && r < t->n_rows; r += rows_per_chunk) {
        uint64_t n = OC_MIN(rows_per_chunk, t->n_rows - r);
        if (err) err->message[0] = '\0';
        oc_status s = t->fill(t->user, buf, r, n, err);
        if (s != OC_OK) {
            if (err && !err->message[0])
                oc_fail(err, s, "gguf writer: filling rows %llu..%llu of tensor '%.80s' failed",
                        (unsigned long long)r, (unsigned long long)(r + n), name);
            if (err) err->status = s;
            return s;
        }
        out_bytes(o, buf, (size_t)(n * t->row_bytes));
    }
    return OC_OK;
}

static oc_status write_all(oc_gguf_writer *w, out_file *o, unsigned char *buf, size_t buf_bytes,
                           oc_error *err) {
    size_t nt = n_tensors(w);
    out_bytes(o, OC_GGUF_MAGIC, 4);
    out_le(o, OC_GGUF_WRITE_VERSION, 4);
    out_le(o, nt, 8);
    out_le(o, n_keys(w), 8);
    out_bytes(o, w->kv.p, w->kv.n);
    uint64_t offset = 0;
    for (size_t i = 0; i < nt; i++) {
        const wtensor *t = tensor_at(w, i);
        out_le(o, t->name_len, 8);
        out_bytes(o, w->names.p + t->name_at, t->name_len);
        out_le(o, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) out_le(o, (uint64_t)t->ne[d], 8);
        out_le(o, (uint32_t)t->dtype, 4);
        out_le(o, offset, 8);
        uint64_t padded;
        if (!oc_gguf_pad_u64(t->n_bytes, w->alignment, &padded) || offset > UINT64_MAX - padded)
            return oc_fail(err, OC_ERR_INVALID, "gguf writer: %s: data section exceeds 2^64 bytes", o->path);
        offset += padded;
    }
    out_pad(o, w->alignment);
    for (size_t i = 0; i < nt; i++) {
        const wtensor *t = tensor_at(w, i);
        if (t->fill) {
            char name[96];
            snprintf(name, sizeof name, "%.*s", (int)OC_MIN(t->name_len, 80), (const char *)w->names.p + t->name_at);
            oc_status s = out_filled(o, t, name, buf, buf_bytes, err);
            if (s) return s;
        } else {
            out_bytes(o, t->data, (size_t)t->n_bytes);
        }
        out_pad(o, w->alignment);
    }
    if (o->failed) return io_fail(err, o, "write failed", o->errno_at);
    return OC_OK;
}

oc_status oc_gguf_writer_write(oc_gguf_writer *w, const char *path, oc_error *err) {
    if (!w || !path) return oc_fail(err, OC_ERR_INVALID, "gguf writer: NULL writer or path");
    /* One chunk buffer for all streamed tensors: FILL_CHUNK_BYTES, or one row when larger. */
    size_t buf_bytes = 0;
    for (size_t i = 0; i < n_tensors(w); i++) {
        const wtensor *t = tensor_at(w, i);
        if (t->fill && t->n_bytes) buf_bytes = OC_MAX(buf_bytes, OC_MAX((size_t)OC_MIN(t->n_bytes, FILL_CHUNK_BYTES), (size_t)t->row_bytes));
    }
    unsigned char *buf = NULL;
    if (buf_bytes && !(buf = oc_mem_alloc(&w->alloc, buf_bytes)))
        return oc_fail(err, OC_ERR_NOMEM, "gguf writer: no memory for a %zu-byte fill buffer", buf_bytes);
    out_file o = { NULL, path, 0, 0, 0 };
    errno = 0;
    o.f = fopen(path, "wb");
    oc_status s;
    if (!o.f) {
        s = io_fail(err, &o, "cannot create", errno);
    } else {
        s = write_all(w, &o, buf, buf_bytes, err);
        errno = 0;
        if (fclose(o.f) != 0 && s == OC_OK) s = io_fail(err, &o, "close failed", errno);
        if (s != OC_OK) remove(path);
    }
    oc_mem_free(&w->alloc, buf, buf_bytes);
    return s;
}
