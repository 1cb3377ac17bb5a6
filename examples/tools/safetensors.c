/* safetensors.c: one safetensors file (mapped or borrowed bytes): header length, JSON header,
 * per-tensor validation, the tiling check the format demands (no holes, so no polyglot files),
 * then tensors sorted by name for binary search. Sharded sets live in safetensors_index.c. */
#include "tools/safetensors.h"

#include "tools/json.h"
#include "port.h"

#include <stdlib.h>
#include <string.h>

struct oc_safetensors {
    oc_allocator alloc;
    oc_port_mapping map;      /* is_mapped or a heap copy from the port layer; unused for bytes */
    int owns_map;
    oc_json *header;
    uint32_t metadata;        /* "__metadata__" object node, or OC_JSON_NONE */
    oc_st_tensor *tensors;    /* sorted by name */
    size_t n_tensors, cap_tensors;
};

static const struct { const char *name; size_t size; } dtype_info[OC_ST_N_DTYPES] = {
    [OC_ST_BOOL] = { "BOOL", 1 }, [OC_ST_U8] = { "U8", 1 }, [OC_ST_I8] = { "I8", 1 },
    [OC_ST_F8_E5M2] = { "F8_E5M2", 1 }, [OC_ST_F8_E4M3] = { "F8_E4M3", 1 }, [OC_ST_F8_E8M0] = { "F8_E8M0", 1 },
    [OC_ST_I16] = { "I16", 2 }, [OC_ST_U16] = { "U16", 2 }, [OC_ST_F16] = { "F16", 2 }, [OC_ST_BF16] = { "BF16", 2 },
    [OC_ST_I32] = { "I32", 4 }, [OC_ST_U32] = { "U32", 4 }, [OC_ST_F32] = { "F32", 4 },
    [OC_ST_I64] = { "I64", 8 }, [OC_ST_U64] = { "U64", 8 }, [OC_ST_F64] = { "F64", 8 },
};

const char *oc_st_dtype_name(oc_st_dtype dtype) {
    return (unsigned)dtype < OC_ST_N_DTYPES ? dtype_info[dtype].name : "unknown";
}

size_t oc_st_dtype_size(oc_st_dtype dtype) {
    return (unsigned)dtype < OC_ST_N_DTYPES ? dtype_info[dtype].size : 0;
}

void oc_safetensors_close(oc_safetensors *st) {
    if (!st) return;
    oc_allocator a = st->alloc;
    oc_mem_free(&a, st->tensors, st->cap_tensors * sizeof *st->tensors);
    oc_json_free(st->header);
    if (st->owns_map) oc_port_unmap_file(&st->map);
    oc_mem_free(&a, st, sizeof *st);
}

static int by_name(const void *a, const void *b) {
    const oc_st_tensor *x = a, *y = b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = memcmp(x->name.ptr, y->name.ptr, n);
    if (c) return c;
    return (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

static int by_begin(const void *a, const void *b) {
    const oc_st_tensor *const *x = a, *const *y = b;
    if ((*x)->begin != (*y)->begin) return (*x)->begin < (*y)->begin ? -1 : 1;
    return ((*x)->end > (*y)->end) - ((*x)->end < (*y)->end);
}

/* Reads one non-negative integer array element into *out. */
static int get_u64(const oc_json *h, uint32_t node, uint64_t *out) {
    int64_t v;
    oc_error e;
    if (oc_json_i64(h, node, &v, &e) != OC_OK || v < 0) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* Fill t from the tensor-info object at node; data_bytes is the size of the data section. */
static oc_status parse_tensor(const oc_json *h, uint32_t key, uint64_t data_bytes, oc_st_tensor *t, oc_error *err) {
    oc_error e;
    (void)oc_json_str(h, key, &t->name, &e);
    const char *nm = t->name.ptr;
    uint32_t info = oc_json_value(h, key);
    if (oc_json_type_of(h, info) != OC_JSON_OBJECT)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': info is not a JSON object", nm);
    oc_str dt;
    if (oc_json_str(h, oc_json_get(h, info, "dtype"), &dt, &e) != OC_OK)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': missing or non-string \"dtype\"", nm);
    int found = 0;
    for (int d = 0; d < OC_ST_N_DTYPES; d++)
        if (strlen(dtype_info[d].name) == dt.len && memcmp(dtype_info[d].name, dt.ptr, dt.len) == 0) {
            t->dtype = (oc_st_dtype)d;
            found = 1;
        }
    if (!found)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "safetensors: tensor '%.80s': dtype '%.16s' is not supported", nm, dt.ptr);
    uint32_t shape = oc_json_get(h, info, "shape");
    if (oc_json_type_of(h, shape) != OC_JSON_ARRAY)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': missing or non-array \"shape\"", nm);
    if (oc_json_count(h, shape) > OC_ST_MAX_DIMS)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "safetensors: tensor '%.80s': %u dimensions (at most %d supported)",
                       nm, oc_json_count(h, shape), OC_ST_MAX_DIMS);
    t->n_dims = 0;
    t->n_elements = 1;
    int overflow = 0;
    for (uint32_t it = oc_json_first(h, shape); it != OC_JSON_NONE; it = oc_json_next(h, it)) {
        uint64_t dim;
        if (!get_u64(h, it, &dim) || dim > (uint64_t)INT64_MAX)
            return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': shape entries must be non-negative integers", nm);
        t->shape[t->n_dims++] = (int64_t)dim;
        if (dim && t->n_elements > UINT64_MAX / dim) overflow = 1;
        else t->n_elements *= dim;
    }
    uint32_t offs = oc_json_get(h, info, "data_offsets");
    uint64_t b, en;
    if (oc_json_type_of(h, offs) != OC_JSON_ARRAY || oc_json_count(h, offs) != 2 ||
        !get_u64(h, oc_json_at(h, offs, 0), &b) || !get_u64(h, oc_json_at(h, offs, 1), &en))
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': \"data_offsets\" must be two non-negative integers", nm);
    if (en < b)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': data_offsets [%llu, %llu) end before they begin",
                       nm, (unsigned long long)b, (unsigned long long)en);
    if (en > data_bytes)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': data_offsets end %llu is past the data section (%llu bytes)",
                       nm, (unsigned long long)en, (unsigned long long)data_bytes);
    const uint64_t esize = dtype_info[t->dtype].size;
    if (overflow || t->n_elements > UINT64_MAX / esize)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': the shape holds more than 2^64 bytes", nm);
    if (t->n_elements * esize != en - b)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s': data_offsets [%llu, %llu) hold %llu bytes, but %llu %s elements need %llu",
                       nm, (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b),
                       (unsigned long long)t->n_elements, dtype_info[t->dtype].name, (unsigned long long)(t->n_elements * esize));
    t->begin = b;
    t->end = en;
    t->n_bytes = en - b;
    return OC_OK;
}

static oc_status open_common(oc_safetensors *st, const uint8_t *bytes, size_t n_bytes, oc_error *err) {
    if (n_bytes < 8)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: %zu bytes are too few for the 8-byte header length", n_bytes);
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | bytes[k];
    if (hlen > OC_ST_MAX_HEADER_BYTES)
        return oc_fail(err, OC_ERR_RANGE, "safetensors: header length %llu exceeds the limit of %u bytes",
                       (unsigned long long)hlen, OC_ST_MAX_HEADER_BYTES);
    if (hlen > n_bytes - 8)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: header length %llu runs past the end of the file (%zu bytes)",
                       (unsigned long long)hlen, n_bytes);
    if (hlen == 0 || bytes[8] != '{')
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: the header does not start with '{'");
    oc_error je = { OC_OK, "" };
    oc_json_limits lim;
    oc_json_limits_default(&lim);
    oc_status s = oc_json_parse(&st->header, (const char *)bytes + 8, (size_t)hlen, &lim, &st->alloc, &je);
    if (s) return oc_fail(err, s, "safetensors header: %s", je.message);
    const oc_json *h = st->header;
    const uint32_t root = oc_json_root(h);
    if (oc_json_type_of(h, root) != OC_JSON_OBJECT)
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: the header is not a JSON object");
    const uint8_t *data = bytes + 8 + hlen;
    const uint64_t data_bytes = n_bytes - 8 - hlen;
    st->metadata = OC_JSON_NONE;
    size_t n = 0;
    for (uint32_t k = oc_json_first(h, root); k != OC_JSON_NONE; k = oc_json_next(h, k)) n++;
    if (n) {
        st->tensors = oc_mem_calloc(&st->alloc, n * sizeof *st->tensors);
        if (!st->tensors) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate %zu tensor entries", n);
        st->cap_tensors = n;
    }
    for (uint32_t k = oc_json_first(h, root); k != OC_JSON_NONE; k = oc_json_next(h, k)) {
        if (oc_json_str_eq(h, k, "__metadata__")) {
            uint32_t m = oc_json_value(h, k);
            if (oc_json_type_of(h, m) != OC_JSON_OBJECT)
                return oc_fail(err, OC_ERR_FORMAT, "safetensors: \"__metadata__\" is not a JSON object");
            for (uint32_t mk = oc_json_first(h, m); mk != OC_JSON_NONE; mk = oc_json_next(h, mk))
                if (oc_json_type_of(h, oc_json_value(h, mk)) != OC_JSON_STRING)
                    return oc_fail(err, OC_ERR_FORMAT, "safetensors: \"__metadata__\" values must be strings");
            st->metadata = m;
            continue;
        }
        oc_st_tensor *t = &st->tensors[st->n_tensors];
        oc_status ts = parse_tensor(h, k, data_bytes, t, err);
        if (ts) return ts;
        t->data = data + t->begin;
        st->n_tensors++;
    }
    /* the tensors must tile [0, data_bytes) exactly */
    if (st->n_tensors) {
        const oc_st_tensor **order = oc_mem_alloc(&st->alloc, st->n_tensors * sizeof *order);
        if (!order) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate the offset check");
        for (size_t i = 0; i < st->n_tensors; i++) order[i] = &st->tensors[i];
        qsort(order, st->n_tensors, sizeof *order, by_begin);
        uint64_t at = 0;
        oc_status ts = OC_OK;
        for (size_t i = 0; i < st->n_tensors && !ts; i++) {
            if (order[i]->begin != at)
                ts = oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s' starts at data byte %llu, expected %llu (%s)",
                             order[i]->name.ptr, (unsigned long long)order[i]->begin, (unsigned long long)at,
                             order[i]->begin > at ? "a gap" : "an overlap");
            at = order[i]->end;
        }
        oc_mem_free(&st->alloc, order, st->n_tensors * sizeof *order);
        if (ts) return ts;
        if (at != data_bytes)
            return oc_fail(err, OC_ERR_FORMAT, "safetensors: %llu bytes after the last tensor (the data section has %llu)",
                           (unsigned long long)(data_bytes - at), (unsigned long long)data_bytes);
    } else if (data_bytes != 0) {
        return oc_fail(err, OC_ERR_FORMAT, "safetensors: %llu data bytes but no tensors", (unsigned long long)data_bytes);
    }
    if (st->n_tensors) qsort(st->tensors, st->n_tensors, sizeof *st->tensors, by_name);
    for (size_t i = 1; i < st->n_tensors; i++)
        if (by_name(&st->tensors[i - 1], &st->tensors[i]) == 0)
            return oc_fail(err, OC_ERR_FORMAT, "safetensors: tensor '%.80s' is listed twice", st->tensors[i].name.ptr);
    return OC_OK;
}

static oc_safetensors *new_handle(const oc_allocator *alloc) {
    oc_safetensors *st = oc_mem_calloc(alloc, sizeof *st);
    if (st) st->alloc = (alloc && alloc->fn) ? *alloc : *oc_default_allocator();
    return st;
}

oc_status oc_safetensors_open_bytes(oc_safetensors **out, const void *bytes, size_t n_bytes,
                                    const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "safetensors: NULL output");
    *out = NULL;
    if (!bytes && n_bytes) return oc_fail(err, OC_ERR_INVALID, "safetensors: NULL bytes");
    oc_safetensors *st = new_handle(alloc);
    if (!st) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate a handle");
    oc_status s = open_common(st, bytes, n_bytes, err);
    if (s) {
        oc_safetensors_close(st);
        return s;
    }
    *out = st;
    return OC_OK;
}

oc_status oc_safetensors_open(oc_safetensors **out, const char *path, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "safetensors: NULL output");
    *out = NULL;
    if (!path) return oc_fail(err, OC_ERR_INVALID, "safetensors: NULL path");
    oc_safetensors *st = new_handle(alloc);
    if (!st) return oc_fail(err, OC_ERR_NOMEM, "safetensors: cannot allocate a handle");
    char msg[OC_ERROR_MESSAGE_BYTES];
    if (oc_port_map_file(path, &st->map, msg, sizeof msg) != 0) {
        oc_safetensors_close(st);
        return oc_fail(err, OC_ERR_IO, "%s", msg);
    }
    st->owns_map = 1;
    oc_error inner = { OC_OK, "" };
    oc_status s = open_common(st, st->map.data, st->map.n_bytes, &inner);
    if (s) {
        oc_safetensors_close(st);
        return oc_fail(err, s, "%.100s: %s", path, inner.message);
    }
    *out = st;
    return OC_OK;
}

size_t oc_safetensors_n_tensors(const oc_safetensors *st) { return st ? st->n_tensors : 0; }

const oc_st_tensor *oc_safetensors_tensor_at(const oc_safetensors *st, size_t i) {
    return (st && i < st->n_tensors) ? &st->tensors[i] : NULL;
}

const oc_st_tensor *oc_safetensors_find(const oc_safetensors *st, const char *name) {
    if (!st || !name || !st->n_tensors) return NULL;
    oc_st_tensor key;
    key.name.ptr = name;
    key.name.len = strlen(name);
    return bsearch(&key, st->tensors, st->n_tensors, sizeof *st->tensors, by_name);
}

oc_status oc_safetensors_metadata(const oc_safetensors *st, const char *key, oc_str *out, oc_error *err) {
    uint32_t v = st ? oc_json_get(st->header, st->metadata, key) : OC_JSON_NONE;
    if (v == OC_JSON_NONE)
        return oc_fail(err, OC_ERR_NOT_FOUND, "safetensors: no __metadata__ entry '%.80s'", key ? key : "(null)");
    return oc_json_str(st->header, v, out, err);
}
