/* nn.c: norms, activations, rotary embedding and residual adds (definitions in nn.h). */
#include "kernels/nn.h"
#include "core/isa_built.h"

#include <math.h>

void oc_rms_norm(float *y, const float *x, const float *w, int64_t n, float eps) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = w ? w[i] * (x[i] * r) : x[i] * r;
}

void oc_layer_norm(float *y, const float *x, const float *w, const float *b, int64_t n, float eps) {
    float sum = 0.0f;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    float mean = sum / (float)n, var = 0.0f;
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    float r = 1.0f / sqrtf(var / (float)n + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean) * r;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

float oc_silu(float x) { return x / (1.0f + expf(-x)); }
float oc_gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
float oc_gelu_quick(float x) { return x / (1.0f + expf(-1.702f * x)); }

static float act_eval(float x, oc_act act) {
    switch (act) {
    case OC_ACT_GELU_ERF: return oc_gelu_erf(x);
    case OC_ACT_GELU_QUICK: return oc_gelu_quick(x);
    default: return oc_silu(x);
    }
}

void oc_act_apply(float *x, int64_t n, oc_act act) {
    for (int64_t i = 0; i < n; i++) x[i] = act_eval(x[i], act);
}

void oc_glu(float *out, const float *gate, const float *up, int64_t n, oc_act act) {
    for (int64_t i = 0; i < n; i++) out[i] = act_eval(gate[i], act) * up[i];
}

void oc_act_scalar(float *out, const float *x, const float *up, int64_t n, oc_act act) {
    if (up) {
        oc_glu(out, x, up, n, act);
    } else {
        if (out != x) for (int64_t i = 0; i < n; i++) out[i] = x[i];
        oc_act_apply(out, n, act);
    }
}

oc_act_fn oc_act_kernel(oc_isa isa) {
#if OC_BUILT_AVX512
    if (isa == OC_ISA_AVX512) return oc_act_avx512;
#endif
    (void)isa;
    return oc_act_scalar;
}

void oc_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

void oc_rope_neox(float *x, int32_t n_pairs, const float *cos_k, const float *sin_k) {
    for (int32_t k = 0; k < n_pairs; k++) {
        float a = x[k], b = x[k + n_pairs];
        x[k] = a * cos_k[k] - b * sin_k[k];
        x[k + n_pairs] = b * cos_k[k] + a * sin_k[k];
    }
}

void oc_rope_inv_freq(float *inv_freq, int32_t dim, float base) {
    for (int32_t k = 0; k < dim / 2; k++) {
        float e = (float)(2 * k) / (float)dim;
        inv_freq[k] = 1.0f / powf(base, e);
    }
}
