/* nn.h: the small per-row operations of a transformer block that are not matrix products: norms,
 * activations, rotary embeddings, residual adds. Plain f32 loops in a fixed order (results do not
 * depend on threads or ISA); they cost O(n) per row next to the O(n^2) matmuls, so they stay scalar,
 * except SiLU / QuickGELU, whose expf showed in profiles: oc_act_kernel gives an AVX-512 loop for
 * those (results then depend on the ISA within its stated error, like the matrix kernels).
 * Definitions follow Hugging Face transformers' Qwen2-VL / Qwen2.5-VL modules (the parity target):
 * RMSNorm and LayerNorm accumulate in f32, GELU is the exact erf form, QuickGELU is x*sigmoid(1.702x).
 * y may alias x in every function. */
#ifndef OC_NN_H
#define OC_NN_H

#include "core/core.h"
#include "core/isa.h"

/* y = x / sqrt(mean(x^2) + eps) * w   (Qwen2RMSNorm; w NULL: no scale) */
void oc_rms_norm(float *y, const float *x, const float *w, int64_t n, float eps);
/* y = (x - mean) / sqrt(var + eps) * w + b   (torch LayerNorm, biased variance; w, b may be NULL) */
void oc_layer_norm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps);

float oc_silu(float x);        /* x * sigmoid(x) */
float oc_gelu_erf(float x);    /* 0.5 x (1 + erf(x / sqrt 2)): torch nn.GELU() */
float oc_gelu_quick(float x);  /* x * sigmoid(1.702 x): HF "quick_gelu" */

typedef enum oc_act { OC_ACT_SILU = 0, OC_ACT_GELU_ERF, OC_ACT_GELU_QUICK } oc_act;
/* x[i] = act(x[i]) */
void oc_act_apply(float *x, int64_t n, oc_act act);
/* out[i] = act(gate[i]) * up[i]  (SwiGLU when act is SiLU); out may alias gate or up */
void oc_glu(float *out, const float *gate, const float *up, int64_t n, oc_act act);
/* out[i] = act(x[i]) * (up ? up[i] : 1), out may alias x or up: the loops above (oc_act_apply,
 * oc_glu), the reference. */
void oc_act_scalar(float *out, const float *x, const float *up, int64_t n, oc_act act);
/* The same on 16 floats at a time (act_avx512.c): SiLU and QuickGELU by a polynomial exp, within
 * 1e-6 + 1.2e-7 |a x| relative of the exact value (a = 1 or 1.702); GELU (erf) the scalar loop. */
void oc_act_avx512(float *out, const float *x, const float *up, int64_t n, oc_act act);
typedef void (*oc_act_fn)(float *out, const float *x, const float *up, int64_t n, oc_act act);
/* The activation loop for isa: oc_act_avx512 for OC_ISA_AVX512 where built, else oc_act_scalar. The
 * backend's elementwise ops take it (the activations were 4-6% of an image's encode and prefill on a
 * Zen 4 with libm's expf: BENCHMARKS.md "matmul"). */
oc_act_fn oc_act_kernel(oc_isa isa);
/* y[i] += x[i] */
void oc_add(float *y, const float *x, int64_t n);

/* Rotary embedding, NEOX pairing (HF rotate_half): for k < n_pairs the pair (x[k], x[k + n_pairs])
 * becomes (x[k] cos_k - x[k+n_pairs] sin_k, x[k+n_pairs] cos_k + x[k] sin_k). Dimensions past
 * 2 * n_pairs are untouched. */
void oc_rope_neox(float *x, int32_t n_pairs, const float *cos_k, const float *sin_k);

/* inv_freq[k] = 1 / base^(2k / dim) for k < dim / 2, rounded to f32 as HF computes it
 * (base ** (arange(0, dim, 2).float() / dim) in f32, then the reciprocal). */
void oc_rope_inv_freq(float *inv_freq, int32_t dim, float base);

#endif
