/* weights.c: shape- and type-checked tensor lookups for the model loaders (see weights.h). */
#include "model/weights.h"

#include "core/dtype.h"
#include "core/f16.h"
#include "kernels/quant.h"

#include <string.h>

static oc_status matrix(const oc_gguf *g, const char *source, const char *name, int64_t n_in,
                        int64_t n_out, int required, oc_weight *out, oc_error *err) {
    memset(out, 0, sizeof *out);
    const oc_gguf_tensor *t = oc_gguf_find_tensor(g, name);
    if (!t) {
        if (!required) return OC_OK;
        return oc_fail(err, OC_ERR_NOT_FOUND, "%s: tensor '%s' is missing", source, name);
    }
    if (t->n_dims != 2 || (n_in > 0 && t->ne[0] != n_in) || (n_out > 0 && t->ne[1] != n_out))
        return oc_fail(err, OC_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld] (%u dims), "
                       "expected [%lld, %lld]", source, name, (long long)t->ne[0], (long long)t->ne[1],
                       (long long)t->ne[2], (long long)t->ne[3], t->n_dims, (long long)n_in,
                       (long long)n_out);
    if (!oc_dtype_is_supported(t->dtype))
        return oc_fail(err, OC_ERR_TYPE, "%s: tensor '%s' has type %s, which ocellus cannot "
                       "multiply (supported: f32, f16, bf16, q8_0, q4_0, q4_k, q6_k)", source, name,
                       oc_dtype_name(t->dtype));
    const oc_dtype_traits *tr = oc_dtype_get(t->dtype);
    if (t->ne[0] % tr->block_elems != 0)
        return oc_fail(err, OC_ERR_FORMAT, "%s: tensor '%s' rows of %lld elements are not whole %s blocks",
                       source, name, (long long)t->ne[0], oc_dtype_name(t->dtype));
    /* Element loads (f32, f16 scales of the blocks) need natural alignment: a file with a small
     * general.alignment can place tensors at odd offsets. */
    size_t align = t->dtype == OC_DTYPE_F32 ? 4 : 2;
    size_t row_bytes = (size_t)oc_dtype_row_bytes(t->dtype, (uint64_t)t->ne[0]);
    if ((uintptr_t)t->data % align || row_bytes % align)
        return oc_fail(err, OC_ERR_FORMAT, "%s: tensor '%s' (%s) is not %zu-byte aligned in the file",
                       source, name, oc_dtype_name(t->dtype), align);
    out->dtype = t->dtype;
    out->n_in = t->ne[0];
    out->n_out = t->ne[1];
    out->data = t->data;
    out->row_bytes = row_bytes;
    return OC_OK;
}

oc_status oc_weights_matrix(const oc_gguf *g, const char *source, const char *name, int64_t n_in,
                            int64_t n_out, oc_weight *out, oc_error *err) {
    return matrix(g, source, name, n_in, n_out, 1, out, err);
}

oc_status oc_weights_matrix_opt(const oc_gguf *g, const char *source, const char *name,
                                int64_t n_in, int64_t n_out, oc_weight *out, oc_error *err) {
    return matrix(g, source, name, n_in, n_out, 0, out, err);
}

oc_status oc_weights_vector_opt(const oc_gguf *g, const char *source, const char *name, int64_t n,
                                float *dst, int *present, oc_error *err) {
    const oc_gguf_tensor *t = oc_gguf_find_tensor(g, name);
    if (present) *present = t != NULL;
    if (!t) {
        if (present) return OC_OK;
        return oc_fail(err, OC_ERR_NOT_FOUND, "%s: tensor '%s' is missing", source, name);
    }
    int64_t count = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (count != n || t->ne[0] != n)
        return oc_fail(err, OC_ERR_FORMAT, "%s: tensor '%s' has %lld elements in %u dims, expected a "
                       "vector of %lld", source, name, (long long)count, t->n_dims, (long long)n);
    if ((uintptr_t)t->data % (t->dtype == OC_DTYPE_F32 ? 4u : 2u))
        return oc_fail(err, OC_ERR_FORMAT, "%s: tensor '%s' is not aligned in the file", source, name);
    switch (t->dtype) {
    case OC_DTYPE_F32: oc_dequant_f32(t->data, dst, n); break;
    case OC_DTYPE_F16: oc_dequant_f16(t->data, dst, n); break;
    case OC_DTYPE_BF16: oc_dequant_bf16(t->data, dst, n); break;
    default:
        return oc_fail(err, OC_ERR_TYPE, "%s: tensor '%s' has type %s; vectors must be f32, "
                       "f16 or bf16", source, name, oc_dtype_name(t->dtype));
    }
    return OC_OK;
}

oc_status oc_weights_vector(const oc_gguf *g, const char *source, const char *name, int64_t n,
                            float *dst, oc_error *err) {
    return oc_weights_vector_opt(g, source, name, n, dst, NULL, err);
}

oc_status oc_weights_key_int(const oc_gguf *g, const char *source, const char *key, int64_t *out,
                             oc_error *err) {
    oc_error e;
    oc_status st = oc_gguf_get_int(g, key, out, &e);
    if (st == OC_ERR_NOT_FOUND) return oc_fail(err, OC_ERR_FORMAT, "%s: key '%s' is missing", source, key);
    if (st) return oc_fail(err, st, "%s: %s", source, e.message);
    return OC_OK;
}

oc_status oc_weights_key_float(const oc_gguf *g, const char *source, const char *key, float *out,
                               oc_error *err) {
    oc_error e;
    double v;
    oc_status st = oc_gguf_get_float(g, key, &v, &e);
    if (st == OC_ERR_NOT_FOUND) return oc_fail(err, OC_ERR_FORMAT, "%s: key '%s' is missing", source, key);
    if (st) return oc_fail(err, st, "%s: %s", source, e.message);
    *out = (float)v;
    return OC_OK;
}
