/* quantize.c: a GGUF file (text model or
 * mmproj) with its matrices quantized, the role of llama.cpp's llama-quantize, for files that exist
 * only as GGUF (an F16 mmproj from the web, the demo model). Which tensors change follows the
 * converter's rule (convert_tensor.c oc_cv_pick_dtype, after convert_hf_to_gguf.py): tensors of 2 or
 * more dims named "*.weight", not "*_norm.weight", with rows of whole 32-element blocks; the patch
 * kernels and position embeddings of an mmproj never (tensor_force_quant), and tensors already
 * quantized stay as they are (no second rounding). Everything else, keys included, is copied; the
 * file type key says the new type. Values are dequantized to f32 and quantized with quant.h's
 * reference quantizers, a chunk of rows at a time (the writer streams them). */
#include "tools/quantize.h"
#include "core/dtype.h"
#include "kernels/quant.h"

#include <stdlib.h>
#include <string.h>

typedef struct quant_job {
    const oc_gguf_tensor *t;
    int32_t dtype;
    float *row;   /* ne[0] floats */
} quant_job;

static oc_status fill(void *user, void *dst, uint64_t first_row, uint64_t n_rows, oc_error *err) {
    quant_job *j = user;
    int64_t n = j->t->ne[0];
    oc_to_f32_fn to_f32 = oc_dequant_ref(j->t->dtype);
    size_t src_rb = (size_t)oc_dtype_row_bytes(j->t->dtype, (uint64_t)n), dst_rb = (size_t)oc_dtype_row_bytes(j->dtype, (uint64_t)n);
    if (!to_f32 || !src_rb || !dst_rb) return oc_fail(err, OC_ERR_UNSUPPORTED, "quantize: cannot convert a row of %.*s",
                                                      (int)j->t->name.len, j->t->name.ptr);
    for (uint64_t r = 0; r < n_rows; r++) {
        to_f32((const unsigned char *)j->t->data + (first_row + r) * src_rb, j->row, n);
        unsigned char *out = (unsigned char *)dst + r * dst_rb;
        if (j->dtype == OC_DTYPE_Q8_0) oc_quantize_q8_0(j->row, out, n);
        else oc_quantize_q4_0(j->row, out, n);
    }
    return OC_OK;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !memcmp(s + a - b, suffix, b);
}

/* The type tensor t takes in a file quantized to dtype. */
static int32_t pick(const oc_gguf_tensor *t, const char *name, int is_mmproj, int32_t dtype) {
    int is_float = t->dtype == OC_DTYPE_F32 || t->dtype == OC_DTYPE_F16 || t->dtype == OC_DTYPE_BF16;
    if (!is_float || t->n_dims < 2 || !ends_with(name, ".weight") || ends_with(name, "_norm.weight")) return t->dtype;
    if (is_mmproj && (strstr(name, ".patch_embd.weight") || strstr(name, ".position_embd."))) return t->dtype;
    return t->ne[0] % OC_QK == 0 ? dtype : t->dtype;
}

/* Copies key i of g into w, whatever its type. */
static oc_status copy_key(oc_gguf_writer *w, const oc_gguf *g, int64_t i, const char *name, oc_error *err) {
    oc_gguf_type type = oc_gguf_key_type(g, i);
    if (type == OC_GGUF_STRING) {
        oc_str s;
        oc_status st = oc_gguf_get_str(g, name, &s, err);
        char *z = st ? NULL : malloc(s.len + 1);
        if (st) return st;
        if (!z) return oc_fail(err, OC_ERR_NOMEM, "quantize: out of memory");
        memcpy(z, s.ptr, s.len);
        z[s.len] = 0;
        st = oc_gguf_writer_add_str(w, name, z, err);
        free(z);
        return st;
    }
    if (type == OC_GGUF_ARRAY) {
        oc_gguf_type et;
        uint64_t n;
        oc_status st = oc_gguf_get_arr(g, name, &et, &n, err);
        if (st) return st;
        if (et == OC_GGUF_STRING) {
            char **v = calloc(n ? n : 1, sizeof *v);
            for (uint64_t k = 0; v && k < n && !st; k++) {
                oc_str s = oc_gguf_arr_str(g, i, k);
                if (!(v[k] = malloc(s.len + 1))) st = OC_ERR_NOMEM;
                else { memcpy(v[k], s.ptr, s.len); v[k][s.len] = 0; }
            }
            if (!v || st) st = oc_fail(err, OC_ERR_NOMEM, "quantize: out of memory for key %s", name);
            else st = oc_gguf_writer_add_arr_str(w, name, (const char *const *)v, n, err);
            for (uint64_t k = 0; v && k < n; k++) free(v[k]);
            free(v);
            return st;
        }
        size_t es = et == OC_GGUF_U8 || et == OC_GGUF_I8 || et == OC_GGUF_BOOL ? 1 : et == OC_GGUF_U16 || et == OC_GGUF_I16 ? 2
                    : et == OC_GGUF_U64 || et == OC_GGUF_I64 || et == OC_GGUF_F64 ? 8 : 4;
        unsigned char *v = malloc(n ? n * es : 1);
        if (!v) return oc_fail(err, OC_ERR_NOMEM, "quantize: out of memory for key %s", name);
        for (uint64_t k = 0; k < n; k++) {
            int64_t iv = oc_gguf_arr_int(g, i, k);
            double fv = oc_gguf_arr_float(g, i, k);
            unsigned char *d = v + k * es;
            switch (et) {
            case OC_GGUF_F32: { float f = (float)fv; memcpy(d, &f, 4); break; }
            case OC_GGUF_F64: memcpy(d, &fv, 8); break;
            case OC_GGUF_U64: { uint64_t u = (uint64_t)iv; memcpy(d, &u, 8); break; }
            case OC_GGUF_I64: memcpy(d, &iv, 8); break;
            case OC_GGUF_U32: { uint32_t u = (uint32_t)iv; memcpy(d, &u, 4); break; }
            case OC_GGUF_I32: { int32_t s = (int32_t)iv; memcpy(d, &s, 4); break; }
            case OC_GGUF_U16: { uint16_t u = (uint16_t)iv; memcpy(d, &u, 2); break; }
            case OC_GGUF_I16: { int16_t s = (int16_t)iv; memcpy(d, &s, 2); break; }
            default: { uint8_t u = (uint8_t)iv; memcpy(d, &u, 1); break; }   /* U8, I8, BOOL */
            }
        }
        st = oc_gguf_writer_add_arr(w, name, et, v, n, err);
        free(v);
        return st;
    }
    /* scalars: the value in the key's own type (add_scalar copies it) */
    unsigned char v[8];
    int64_t iv = 0;
    double fv = 0;
    if (type == OC_GGUF_F32 || type == OC_GGUF_F64) {
        oc_status st = oc_gguf_get_float(g, name, &fv, err);
        if (st) return st;
        if (type == OC_GGUF_F32) { float f = (float)fv; memcpy(v, &f, 4); } else memcpy(v, &fv, 8);
    } else if (type == OC_GGUF_U64) {
        uint64_t u;
        oc_status st = oc_gguf_get_u64(g, name, &u, err);
        if (st) return st;
        memcpy(v, &u, 8);
    } else {
        oc_status st = oc_gguf_get_int(g, name, &iv, err);
        if (st) return st;
        switch (type) {
        case OC_GGUF_I64: memcpy(v, &iv, 8); break;
        case OC_GGUF_U32: { uint32_t u = (uint32_t)iv; memcpy(v, &u, 4); break; }
        case OC_GGUF_I32: { int32_t s = (int32_t)iv; memcpy(v, &s, 4); break; }
        case OC_GGUF_U16: { uint16_t u = (uint16_t)iv; memcpy(v, &u, 2); break; }
        case OC_GGUF_I16: { int16_t s = (int16_t)iv; memcpy(v, &s, 2); break; }
        default: { uint8_t u = (uint8_t)iv; memcpy(v, &u, 1); break; }
        }
    }
    return oc_gguf_writer_add_scalar(w, name, type, v, err);
}

oc_status oc_quantize_gguf(const char *in, const char *out, int32_t dtype, int64_t *n_quantized,
                           int64_t *n_tensors, oc_error *err) {
    if (dtype != OC_DTYPE_Q8_0 && dtype != OC_DTYPE_Q4_0)
        return oc_fail(err, OC_ERR_INVALID, "quantize: the type must be q8_0 or q4_0");
    if (!strcmp(in, out)) return oc_fail(err, OC_ERR_INVALID, "quantize: the output must be another file than the input");
    oc_gguf *g = NULL;
    oc_gguf_writer *w = NULL;
    quant_job *jobs = NULL;
    float *rows = NULL;
    int64_t n_t = 0, n_quant = 0, max_row = 1;
    /* read, not mapped: the output may replace a file the input maps (a link, another path to it) */
    oc_status st = oc_gguf_open_read(&g, in, NULL, err);
    if (!st) st = oc_gguf_writer_open(&w, NULL, err);
    if (!st) {
        n_t = oc_gguf_n_tensors(g);
        for (int64_t i = 0; i < n_t; i++) max_row = OC_MAX(max_row, oc_gguf_tensor_at(g, i)->ne[0]);
        jobs = calloc((size_t)(n_t ? n_t : 1), sizeof *jobs);
        rows = malloc((size_t)max_row * sizeof(float));   /* one row at a time: the writer fills one tensor at a time */
        if (!jobs || !rows) st = oc_fail(err, OC_ERR_NOMEM, "quantize: out of memory");
    }
    oc_str arch = { "", 0 };
    if (!st) oc_gguf_get_str(g, "general.architecture", &arch, NULL);
    int is_mmproj = arch.len == 4 && !memcmp(arch.ptr, "clip", 4);
    if (!st && oc_gguf_alignment(g) != 32) st = oc_gguf_writer_set_alignment(w, oc_gguf_alignment(g), err);
    for (int64_t i = 0; !st && i < oc_gguf_n_keys(g); i++) {
        char name[256];
        oc_str k = oc_gguf_key_name(g, i);
        if (k.len >= sizeof name) { st = oc_fail(err, OC_ERR_FORMAT, "%s: key name of %zu bytes", in, k.len); break; }
        memcpy(name, k.ptr, k.len);
        name[k.len] = 0;
        if (!strcmp(name, "general.file_type") || !strcmp(name, "general.quantization_version")) continue;
        st = copy_key(w, g, i, name, err);
    }
    /* llama_ftype: 2 MOSTLY_Q4_0, 7 MOSTLY_Q8_0; quantization_version 2 as llama-quantize writes */
    if (!st) st = oc_gguf_writer_add_u32(w, "general.file_type", dtype == OC_DTYPE_Q8_0 ? 7 : 2, err);
    if (!st) st = oc_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
    char tname[256];
    for (int64_t i = 0; !st && i < n_t; i++) {
        const oc_gguf_tensor *t = oc_gguf_tensor_at(g, i);
        if (t->name.len >= sizeof tname) { st = oc_fail(err, OC_ERR_FORMAT, "%s: tensor name of %zu bytes", in, t->name.len); break; }
        memcpy(tname, t->name.ptr, t->name.len);
        tname[t->name.len] = 0;
        quant_job *j = &jobs[i];
        *j = (quant_job){ t, pick(t, tname, is_mmproj, dtype), rows };
        if (j->dtype == t->dtype) {
            st = oc_gguf_writer_add_tensor(w, tname, t->dtype, t->n_dims, t->ne, t->data, err);
        } else {
            st = oc_gguf_writer_add_tensor_fn(w, tname, j->dtype, t->n_dims, t->ne, fill, j, err);
            n_quant++;
        }
    }
    if (!st) st = oc_gguf_writer_write(w, out, err);
    oc_gguf_writer_close(w);
    oc_gguf_close(g);
    free(jobs);
    free(rows);
    if (n_quantized) *n_quantized = n_quant;
    if (n_tensors) *n_tensors = n_t;
    return st;
}
