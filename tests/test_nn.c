/* test_nn.c: the activation loops (src/kernels/nn.c oc_act_scalar, act_avx512.c oc_act_avx512 through
 * oc_act_kernel) against a double-precision reference: SiLU x / (1 + e^-x), QuickGELU
 * x / (1 + e^(-1.702 x)) with 1.702 rounded to f32 as the f32 code (and HF in f32) multiplies by it,
 * GELU 0.5 x (1 + erf(x / sqrt 2)); with and without the up factor (SwiGLU), in place and not, every
 * length remainder, outputs poisoned before each run, NaN in -> NaN out. Bound per element:
 * (1e-6 + 1.2e-7 |a x|) |ref| + 1e-30 (nn.h: the exponent's rounding grows with |a x|; the absolute
 * floor covers the vector loop's x / 2^126 where the exact value underflows), and for GELU (erff,
 * the scalar loop on every ISA) 1.2e-7 |x| more: 1 + erf cancels for negative x. */
#include "kernels/nn.h"
#include "check.h"
#include "port.h"

#include <math.h>

static double ref_act(double x, oc_act act) {
    switch (act) {
    case OC_ACT_SILU: return x / (1.0 + exp(-x));
    case OC_ACT_GELU_QUICK: return x / (1.0 + exp(-(double)1.702f * x));
    default: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    }
}

static void test_activations(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    enum { N = 1000 };
    float *x = malloc(sizeof(float) * N), *up = malloc(sizeof(float) * N), *out = malloc(sizeof(float) * N);
    static const float special[] = { 0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 1e4f, -1e4f, 1e30f, -1e30f };
    static const float ranges[] = { 0.1f, 4.0f, 30.0f, 120.0f };
    check_rng rng = { 0xac7ULL };
    int n_kernels = 0;
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!oc_isa_runs((oc_isa)isa, &cpu)) continue;
        oc_act_fn fn = oc_act_kernel((oc_isa)isa);
        if (isa != OC_ISA_SCALAR && fn == oc_act_scalar) continue;   /* the same loop as scalar's */
        n_kernels++;
        double worst = 0;
        for (int act = OC_ACT_SILU; act <= OC_ACT_GELU_QUICK; act++)
            for (int with_up = 0; with_up < 2; with_up++)
                for (int rep = 0; rep < 24; rep++) {
                    int n = rep < 17 ? rep + 1 : check_rng_int(&rng, 18, N);
                    float mag = ranges[rep % 4];
                    for (int i = 0; i < n; i++) {
                        x[i] = check_rng_uniform(&rng, -mag, mag);
                        up[i] = check_rng_uniform(&rng, -2.0f, 2.0f);
                    }
                    if (rep == 20)
                        for (int i = 0; i < (int)OC_ARRAY_LEN(special) && i < n; i++) x[i] = special[i];
                    int in_place = rep % 3 == 0;
                    float *dst = in_place ? x : out;
                    float *x0 = malloc(sizeof(float) * (size_t)n);
                    memcpy(x0, x, sizeof(float) * (size_t)n);
                    if (!in_place) check_poison_f32(out, N);
                    fn(dst, x, with_up ? up : NULL, n, (oc_act)act);
                    for (int i = 0; i < n; i++) {
                        double a = act == OC_ACT_SILU ? 1.0 : act == OC_ACT_GELU_QUICK ? 1.702 : 1.0;
                        double ref = ref_act(x0[i], (oc_act)act) * (with_up ? up[i] : 1.0);
                        double tol = (1e-6 + 1.2e-7 * fabs(a * x0[i])) * fabs(ref) + 1e-30;
                        /* GELU: 1 + erf(x / sqrt 2) cancels for x < 0, so erff's last bit is an absolute
                         * error of about 0.5 |x| 2^-24 (times up) */
                        if (act == OC_ACT_GELU_ERF) tol += 1.2e-7 * fabs(x0[i]) * (with_up ? fabs(up[i]) : 1.0);
                        double err = fabs(dst[i] - ref);
                        CHECKF(err <= tol, "%s act %d up %d n %d: x %.9g -> %.9g, reference %.9g", oc_isa_name((oc_isa)isa),
                               act, with_up, n, (double)x0[i], (double)dst[i], ref);
                        if (fabs(ref) > 1e-3 && err / fabs(ref) > worst) worst = err / fabs(ref);
                    }
                    if (!in_place)
                        for (int i = n; i < N; i++) CHECK(isnan(out[i]));   /* nothing written past n */
                    free(x0);
                }
        /* NaN in, NaN out; the neighbours unaffected */
        for (int act = OC_ACT_SILU; act <= OC_ACT_GELU_QUICK; act++) {
            for (int i = 0; i < 20; i++) x[i] = 0.5f;
            x[7] = NAN;
            fn(out, x, NULL, 20, (oc_act)act);
            for (int i = 0; i < 20; i++)
                CHECKF(i == 7 ? isnan(out[i]) : out[i] == out[0] && isfinite(out[i]), "%s act %d NaN: element %d: %g",
                       oc_isa_name((oc_isa)isa), act, i, (double)out[i]);
        }
        printf("# %s activations: worst relative error %.3g (outputs above 1e-3)\n", oc_isa_name((oc_isa)isa), worst);
    }
    CHECK(n_kernels > 0);
    free(x); free(up); free(out);
}

int main(void) {
    CHECK_RUN(test_activations);
    return check_finish();
}
