/* convert_tensor.c: the converter's tensor plumbing. Looks up and checks source tensors, picks the
 * output type exactly as llama.cpp's convert_hf_to_gguf.py does (ModelBase.prepare_tensors and
 * MmprojModel.tensor_force_quant), and converts rows at write time: F32/F16/BF16 sources are read
 * through f32 (exact), then stored as F32, F16 or BF16 (round to nearest even, as numpy does) or
 * quantized to Q8_0 / Q4_0 with the reference quantizers of quant.h. Same-type rows are copied. */
#include "tools/convert_internal.h"

#include "core/dtype.h"
#include "core/f16.h"
#include "kernels/quant.h"

#include <stdio.h>
#include <string.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && memcmp(s + n - k, suffix, k) == 0;
}

static void shape_str(char *buf, size_t n, uint32_t n_dims, const int64_t *shape) {
    size_t at = 0;
    at += (size_t)snprintf(buf + at, n - at, "[");
    for (uint32_t i = 0; i < n_dims && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

oc_status oc_cv_source(oc_cv_model *m, const char *hf_name, uint32_t n_dims, const int64_t *shape,
                       const oc_st_tensor **out, oc_error *err) {
    const oc_st_tensor *t = oc_safetensors_set_find(m->st, hf_name);
    *out = NULL;
    if (!t) return oc_fail(err, OC_ERR_FORMAT, "%.300s: tensor '%.100s' is missing", m->st_path, hf_name);
    if (t->dtype != OC_ST_F32 && t->dtype != OC_ST_F16 && t->dtype != OC_ST_BF16)
        return oc_fail(err, OC_ERR_UNSUPPORTED, "%.300s: tensor '%.100s' has dtype %s (supported: F32, F16, BF16)",
                       m->st_path, hf_name, oc_st_dtype_name(t->dtype));
    int ok = t->n_dims == n_dims;
    for (uint32_t i = 0; ok && i < n_dims; i++) ok = shape[i] < 0 || shape[i] == t->shape[i];
    if (!ok) {
        char got[96], want[96];
        shape_str(got, sizeof got, t->n_dims, t->shape);
        shape_str(want, sizeof want, n_dims, shape);
        return oc_fail(err, OC_ERR_FORMAT, "%.300s: tensor '%.100s' has shape %s, expected %s", m->st_path,
                       hf_name, got, want);
    }
    size_t i = 0;
    while (i < m->n_used && m->used[i] != t) i++;
    if (i == m->n_used) m->used[m->n_used++] = t;   /* capacity: every tensor of the set */
    *out = t;
    return OC_OK;
}

int32_t oc_cv_pick_dtype(oc_convert_ftype ftype, int is_mmproj, const char *name, uint32_t n_dims,
                         int64_t ne0) {
    int32_t forced = -1;   /* tensor_force_quant's "False" */
    if (is_mmproj && strstr(name, ".patch_embd.weight"))
        forced = ftype == OC_CONVERT_F16 ? OC_DTYPE_F16 : OC_DTYPE_F32;
    if (is_mmproj && strstr(name, ".position_embd."))
        forced = OC_DTYPE_F32;
    /* "Most of the codebase that takes in 1D tensors or norms only handles F32 tensors" */
    if (n_dims <= 1 || ends_with(name, "_norm.weight")) return OC_DTYPE_F32;
    if (forced >= 0) return forced;
    /* names whose last 7 characters are not ".weight" (biases ...) stay F32 */
    if (!ends_with(name, ".weight")) return OC_DTYPE_F32;
    int32_t t;
    switch (ftype) {
    case OC_CONVERT_F32: return OC_DTYPE_F32;
    case OC_CONVERT_F16: return OC_DTYPE_F16;
    case OC_CONVERT_BF16: return OC_DTYPE_BF16;
    case OC_CONVERT_Q8_0: t = OC_DTYPE_Q8_0; break;
    case OC_CONVERT_Q4_0: t = OC_DTYPE_Q4_0; break;
    default: return OC_DTYPE_F32;
    }
    /* gguf.quants.quantize raises QuantError when the row is not whole blocks: F16 instead */
    return ne0 % OC_QK == 0 ? t : OC_DTYPE_F16;
}

oc_status oc_cv_add(oc_cv_out *o, const char *name, const oc_st_tensor *src, uint32_t n_dims,
                    const int64_t *ne, uint64_t base, uint64_t rows_per_group, uint64_t group_stride,
                    oc_error *err) {
    if (o->n_jobs >= o->cap_jobs)
        return oc_fail(err, OC_ERR_RANGE, "convert: more output tensors than expected at '%.100s'", name);
    if (strlen(name) >= OC_CV_NAME_BYTES)
        return oc_fail(err, OC_ERR_RANGE, "convert: tensor name '%.100s' is too long", name);
    uint64_t n_rows = 1;
    for (uint32_t i = 1; i < n_dims; i++) n_rows *= (uint64_t)ne[i];
    /* the mapping is ours, but a wrong one must fail cleanly instead of reading out of bounds */
    if (n_dims == 0 || ne[0] <= 0 || n_rows == 0 || rows_per_group == 0) return oc_fail(err, OC_ERR_FORMAT, "convert: tensor '%.100s' is empty", name);
    uint64_t last = n_rows - 1;
    uint64_t end = base + (last / rows_per_group) * group_stride + (last % rows_per_group) * (uint64_t)ne[0] + (uint64_t)ne[0];
    if (end > src->n_elements)
        return oc_fail(err, OC_ERR_FORMAT, "convert: tensor '%.100s' reads past its source '%.100s'", name, src->name.ptr);
    oc_cv_job *j = &o->jobs[o->n_jobs];
    memset(j, 0, sizeof *j);
    j->out = o;
    j->src = src;
    j->dtype = oc_cv_pick_dtype(o->ftype, o->is_mmproj, name, n_dims, ne[0]);
    j->row_elems = ne[0];
    j->base = base;
    j->rows_per_group = rows_per_group;
    j->group_stride = group_stride;
    memcpy(j->name, name, strlen(name) + 1);
    oc_status s = oc_gguf_writer_add_tensor_fn(o->w, j->name, j->dtype, n_dims, ne, oc_cv_fill, j, err);
    if (s) return s;
    o->n_jobs++;
    if ((size_t)ne[0] > o->scratch_elems) o->scratch_elems = (size_t)ne[0];
    o->n_bytes += oc_dtype_row_bytes(j->dtype, (uint64_t)ne[0]) * n_rows;
    return OC_OK;
}

oc_status oc_cv_add_plain(oc_cv_out *o, const char *name, const oc_st_tensor *src, oc_error *err) {
    int64_t ne[OC_GGUF_MAX_DIMS];
    if (src->n_dims == 0 || src->n_dims > OC_GGUF_MAX_DIMS)
        return oc_fail(err, OC_ERR_FORMAT, "%.100s: %u dims cannot be a GGUF tensor", src->name.ptr, src->n_dims);
    for (uint32_t i = 0; i < src->n_dims; i++) ne[i] = src->shape[src->n_dims - 1 - i];
    uint64_t n_rows = src->n_elements / (uint64_t)ne[0];
    return oc_cv_add(o, name, src, src->n_dims, ne, 0, n_rows ? n_rows : 1, 0, err);
}

/* n source elements (any alignment) -> f32 */
static void to_f32(const oc_st_tensor *t, const unsigned char *s, float *d, int64_t n) {
    if (t->dtype == OC_ST_F32) {
        memcpy(d, s, (size_t)n * 4);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        d[i] = t->dtype == OC_ST_F16 ? oc_f16_to_f32(h) : oc_bf16_to_f32(h);
    }
}

static void convert_row(const oc_cv_job *j, const unsigned char *s, unsigned char *d, float *tmp) {
    const int64_t n = j->row_elems;
    const oc_st_dtype sd = j->src->dtype;
    if ((j->dtype == OC_DTYPE_F32 && sd == OC_ST_F32) || (j->dtype == OC_DTYPE_F16 && sd == OC_ST_F16) ||
        (j->dtype == OC_DTYPE_BF16 && sd == OC_ST_BF16)) {
        memcpy(d, s, (size_t)n * oc_st_dtype_size(sd));
        return;
    }
    to_f32(j->src, s, tmp, n);
    switch (j->dtype) {
    case OC_DTYPE_F32: memcpy(d, tmp, (size_t)n * 4); break;
    case OC_DTYPE_F16:
    case OC_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = j->dtype == OC_DTYPE_F16 ? oc_f32_to_f16(tmp[i]) : oc_f32_to_bf16(tmp[i]);
            memcpy(d + 2 * i, &h, 2);
        }
        break;
    case OC_DTYPE_Q8_0: oc_quantize_q8_0(tmp, d, n); break;
    case OC_DTYPE_Q4_0: oc_quantize_q4_0(tmp, d, n); break;
    default: break;
    }
}

oc_status oc_cv_fill(void *user, void *dst, uint64_t first_row, uint64_t n_rows, oc_error *err) {
    const oc_cv_job *j = user;
    const uint64_t row_bytes = oc_dtype_row_bytes(j->dtype, (uint64_t)j->row_elems);
    const size_t esize = oc_st_dtype_size(j->src->dtype);
    if (!j->out->scratch || j->out->scratch_elems < (size_t)j->row_elems)
        return oc_fail(err, OC_ERR_INVALID, "convert: no row buffer for '%.100s'", j->name);
    unsigned char *d = dst;
    for (uint64_t r = 0; r < n_rows; r++) {
        const uint64_t row = first_row + r;
        const uint64_t off = j->base + (row / j->rows_per_group) * j->group_stride +
                             (row % j->rows_per_group) * (uint64_t)j->row_elems;
        if (off + (uint64_t)j->row_elems > j->src->n_elements)   /* checked in oc_cv_add */
            return oc_fail(err, OC_ERR_FORMAT, "convert: row %llu of '%.100s' is outside its source",
                           (unsigned long long)row, j->name);
        convert_row(j, (const unsigned char *)j->src->data + off * esize, d + r * row_bytes, j->out->scratch);
    }
    return OC_OK;
}
