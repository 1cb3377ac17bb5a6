/* weights.h: typed, shape-checked access to the tensors of a model GGUF, shared by the text and
 * vision loaders. Every failure is one line naming the file, the tensor and the problem, e.g.
 *   model.gguf: tensor 'blk.3.attn_q.weight' has shape [64, 32], expected [64, 64]          */
#ifndef OC_WEIGHTS_H
#define OC_WEIGHTS_H

#include "core/core.h"
#include "kernels/matmul.h"

/* A 2-D matrix for oc_matmul: ne = [n_in, n_out] (pass <= 0 to accept any size on that axis),
 * a type the matmul kernels support, n_in a multiple of the type's block.
 * [errors: OC_ERR_NOT_FOUND (missing), OC_ERR_FORMAT (shape, alignment), OC_ERR_TYPE (type)] */
oc_status oc_weights_matrix(const oc_gguf *g, const char *source, const char *name, int64_t n_in,
                            int64_t n_out, oc_weight *out, oc_error *err);
/* Like oc_weights_matrix, but a missing tensor is not an error: out->data stays NULL. */
oc_status oc_weights_matrix_opt(const oc_gguf *g, const char *source, const char *name,
                                int64_t n_in, int64_t n_out, oc_weight *out, oc_error *err);
/* A 1-D tensor of exactly n elements (F32, F16 or BF16), converted to f32 into dst.
 * [errors: OC_ERR_NOT_FOUND (missing), OC_ERR_FORMAT (shape), OC_ERR_TYPE (type)] */
oc_status oc_weights_vector(const oc_gguf *g, const char *source, const char *name, int64_t n,
                            float *dst, oc_error *err);
/* Like oc_weights_vector; a missing tensor sets *present = 0 and is not an error. */
oc_status oc_weights_vector_opt(const oc_gguf *g, const char *source, const char *name, int64_t n,
                                float *dst, int *present, oc_error *err);

/* An integer / float key with a message naming the file when it is missing or mistyped. */
oc_status oc_weights_key_int(const oc_gguf *g, const char *source, const char *key, int64_t *out,
                             oc_error *err);
oc_status oc_weights_key_float(const oc_gguf *g, const char *source, const char *key, float *out,
                               oc_error *err);

#endif
