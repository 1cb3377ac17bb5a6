/* test_vision_q8.c: Q8_0 mmproj files on the transformers parity fixtures (tests/data/models). For
 * both kinds (Qwen2-VL, Qwen2.5-VL) two Q8_0 files are made from the fixture's checkpoint: one by
 * `ocellus convert --type q8_0` from the Hugging Face directory (patch kernels F32, as llama.cpp's
 * converter), one by `ocellus quantize --type q8_0` from the F16 mmproj (patch kernels stay F16).
 * Checked: every matrix with whole 32-element rows is Q8_0 and nothing else changed type; the
 * matmul dispatch takes the int8 path for such a matrix at an image's token count on this CPU's
 * ISA where the ISA has int8 GEMM kernels (AVX2, AVX-512, NEON dotprod: matmul.h); and the
 * encoder's output on both fixture images against the F16 file's on the same engine, and against
 * transformers' image_embeds.
 * Bound: Q8_0 rounds each weight to 1/254 of its block's largest magnitude and the int8 path rounds
 * the activations the same way. Through these small random encoders that measured 1.5e-2 to 2.1e-2
 * relative error (against the F16 file and against transformers alike) on AVX-512 VNNI, AVX2 and the
 * FP32 path of the F16 file; 1.35e-2 on the scalar ISA, which keeps the activations in f32 (so the
 * weights' rounding is most of it). The bound, 3e-2, is the one test_vision holds the int8 path's
 * random models to. */
#include "check.h"
#include "core/dtype.h"
#include "core/pool.h"
#include "kernels/matmul.h"
#include "model/vision_model.h"
#include "port.h"
#include "tools/convert.h"
#include "tools/safetensors.h"
#include "tools/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define Q8_REL_TOL 3e-2

static oc_isa best_isa(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    return oc_isa_best(&cpu);
}

/* Encodes image img of the fixture's reference with the file at path; out gets n_out floats
 * (malloc), n_patches the encoder's token count. Returns 0 on failure (reported). */
static int encode_file(const char *path, const oc_safetensors *st, int img, float **out, size_t *n_out, int64_t *n_patches) {
    oc_gguf *g = NULL;
    oc_vision_model *m = NULL;
    oc_pool *pool = NULL;
    oc_vision_ctx *ctx = NULL;
    oc_error e;
    int ok = 0;
    const oc_st_tensor *thw = oc_safetensors_find(st, "image_grid_thw");
    char pn[32];
    snprintf(pn, sizeof pn, "pixel_values.%d", img);
    const oc_st_tensor *pv = oc_safetensors_find(st, pn);
    if (!thw || thw->n_elements != 6 || !pv || pv->dtype != OC_ST_F32) {
        check_fail_at(__FILE__, __LINE__, "%s: no image_grid_thw / %s", path, pn);
        return 0;
    }
    int64_t grid[3];
    for (int c = 0; c < 3; c++) {
        if (thw->dtype == OC_ST_I32) { int32_t v; memcpy(&v, (const char *)thw->data + (img * 3 + c) * 4, 4); grid[c] = v; }
        else memcpy(&grid[c], (const char *)thw->data + (img * 3 + c) * 8, 8);
    }
    int64_t n = grid[1] * grid[2];
    *n_patches = n;
    float *pix = malloc((size_t)pv->n_elements * sizeof(float));
    if (pix) memcpy(pix, pv->data, (size_t)pv->n_elements * sizeof(float));
    oc_backend_spec bs = { OC_BACKEND_KIND_CPU, NULL, NULL, best_isa(), NULL };
    if (!pix || oc_gguf_open(&g, path, NULL, &e) || oc_vision_model_load(&m, g, path, NULL, &e) ||
        oc_pool_open(&pool, 2, NULL, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s: %s", path, pix ? e.message : "out of memory");
        goto done;
    }
    bs.pool = pool;
    *n_out = (size_t)(n / 4) * (size_t)oc_vision_model_hparams(m)->proj_dim;
    *out = malloc(*n_out * sizeof(float));
    if (!*out || pv->n_elements != (uint64_t)n * 1176 || oc_vision_ctx_open_backend(&ctx, m, (int32_t)n, &bs, NULL, &e) ||
        oc_vision_encode(ctx, pix, (int32_t)grid[1], (int32_t)grid[2], NULL, *out, NULL, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s image %d: %s", path, img, *out ? e.message : "out of memory");
        free(*out);
        *out = NULL;
        goto done;
    }
    ok = 1;
done:
    oc_vision_ctx_close(ctx);
    oc_pool_close(pool);
    oc_vision_model_free(m);
    oc_gguf_close(g);
    free(pix);
    return ok;
}

/* Every tensor of q against f16: Q8_0 where f16 has a 2-D+ F16 "*.weight" with whole blocks (the
 * patch kernels excepted: patch_type, or F16 / F32 for the converter), else the same type. Also:
 * the int8 path for the first Q8_0 matrix at n_tok tokens. */
static void check_types(const char *q, const char *f16, int patch_f32, int64_t n_tok) {
    oc_gguf *gq = NULL, *gf = NULL;
    oc_error e;
    if (oc_gguf_open(&gq, q, NULL, &e) || oc_gguf_open(&gf, f16, NULL, &e)) {
        check_fail_at(__FILE__, __LINE__, "%s", e.message);
        goto done;
    }
    CHECKF(oc_gguf_n_tensors(gq) == oc_gguf_n_tensors(gf), "%s: %lld tensors, %s %lld", q, (long long)oc_gguf_n_tensors(gq), f16,
           (long long)oc_gguf_n_tensors(gf));
    int n_q8 = 0;
    const oc_gguf_tensor *first = NULL;
    for (int64_t i = 0; i < oc_gguf_n_tensors(gf); i++) {
        const oc_gguf_tensor *tf = oc_gguf_tensor_at(gf, i);
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)tf->name.len, tf->name.ptr);
        const oc_gguf_tensor *tq = oc_gguf_find_tensor(gq, name);
        if (!tq) { check_fail_at(__FILE__, __LINE__, "%s: no %s", q, name); continue; }
        int is_patch = strstr(name, "patch_embd") != NULL;
        int want_q8 = !is_patch && tf->dtype == OC_DTYPE_F16 && tf->n_dims >= 2 && tf->ne[0] % 32 == 0 &&
                      strlen(name) > 7 && !strcmp(name + strlen(name) - 7, ".weight");
        int32_t want = want_q8 ? OC_DTYPE_Q8_0 : is_patch && patch_f32 ? OC_DTYPE_F32 : tf->dtype;
        CHECKF(tq->dtype == want, "%s: %s is %s, expected %s", q, name, oc_dtype_name(tq->dtype), oc_dtype_name(want));
        if (tq->dtype == OC_DTYPE_Q8_0 && !first) first = tq;
        n_q8 += tq->dtype == OC_DTYPE_Q8_0;
    }
    CHECKF(n_q8 > 0, "%s: no Q8_0 matrix", q);
    oc_isa isa = best_isa();
    const oc_matmul_kernels *k = oc_matmul_kernels_for(isa);
    oc_matmul_ctx *mc = NULL;
    if (first && k && oc_matmul_ctx_open(&mc, k, NULL, first->ne[0], n_tok, NULL, &e) == OC_OK) {
        oc_weight w = { first->dtype, first->ne[0], first->ne[1], first->data,
                        (size_t)oc_dtype_row_bytes(first->dtype, (uint64_t)first->ne[0]) };
        int int8 = oc_matmul_uses_int8(mc, &w, n_tok);
        const char *kn = oc_matmul_kernels_name(k);
        int has_int8_gemm = isa == OC_ISA_AVX2 || isa == OC_ISA_AVX512 || strstr(kn, "dotprod") != NULL;
        printf("  %s: %d Q8_0 matrices; %s at %lld tokens: %s path\n", q, n_q8, kn, (long long)n_tok, int8 ? "int8" : "float");
        CHECKF(int8 == has_int8_gemm, "%s: %.*s at %lld tokens on %s: int8 path %d, expected %d", q, (int)first->name.len,
               first->name.ptr, (long long)n_tok, kn, int8, has_int8_gemm);
    }
    oc_matmul_ctx_close(mc);
done:
    oc_gguf_close(gq);
    oc_gguf_close(gf);
}

static void q8_case(const char *dir) {
    char f16[256], hf[256], refp[256], prefix[256], conv[300], quant[256];
    snprintf(f16, sizeof f16, "tests/data/models/%s/mmproj.gguf", dir);
    snprintf(hf, sizeof hf, "tests/data/models/%s/hf", dir);
    snprintf(refp, sizeof refp, "tests/data/models/%s/reference.safetensors", dir);
    snprintf(prefix, sizeof prefix, "build/tests/test_vision_q8.%s", dir);
    snprintf(conv, sizeof conv, "%s-mmproj.gguf", prefix);
    snprintf(quant, sizeof quant, "build/tests/test_vision_q8.%s.quantized.gguf", dir);
    oc_error e;
    oc_safetensors *st = NULL;
    if (oc_safetensors_open(&st, refp, NULL, &e)) { check_fail_at(__FILE__, __LINE__, "%s", e.message); return; }
    char text[300];
    snprintf(text, sizeof text, "%s.gguf", prefix);
    oc_status cs = oc_convert_hf(hf, prefix, OC_CONVERT_Q8_0, NULL, NULL, &e);
    CHECKF(cs == OC_OK, "convert %s --type q8_0: %s", hf, e.message);
    cs = oc_quantize_gguf(f16, quant, OC_DTYPE_Q8_0, NULL, NULL, &e);
    CHECKF(cs == OC_OK, "quantize %s %s --type q8_0: %s", f16, quant, e.message);
    const char *files[2] = { conv, quant };
    for (int img = 0; img < 2; img++) {
        char en[32];
        snprintf(en, sizeof en, "image_embeds.%d", img);
        const oc_st_tensor *ie = oc_safetensors_find(st, en);
        float *out_f16 = NULL;
        size_t n_f16 = 0;
        int64_t n_patches = 0;
        if (!ie || ie->dtype != OC_ST_F32 || !encode_file(f16, st, img, &out_f16, &n_f16, &n_patches) || ie->n_elements != n_f16) {
            check_fail_at(__FILE__, __LINE__, "%s image %d: no F16 encode / %s", dir, img, en);
            free(out_f16);
            continue;
        }
        double *ref_hf = malloc(n_f16 * sizeof(double)), *ref_f16 = malloc(n_f16 * sizeof(double));
        for (size_t i = 0; i < n_f16; i++) {
            float v;
            memcpy(&v, (const char *)ie->data + i * 4, 4);
            ref_hf[i] = v;
            ref_f16[i] = out_f16[i];
        }
        double f16_hf = check_rel_err_f32(out_f16, ref_hf, n_f16);
        for (int f = 0; f < 2 && cs == OC_OK; f++) {
            if (img == 0) check_types(files[f], f16, f == 0, n_patches);
            float *out_q = NULL;
            size_t n_q = 0;
            int64_t n_pq = 0;
            if (!encode_file(files[f], st, img, &out_q, &n_q, &n_pq) || n_q != n_f16) { free(out_q); continue; }
            double vs_f16 = check_rel_err_f32(out_q, ref_f16, n_q), vs_hf = check_rel_err_f32(out_q, ref_hf, n_q);
            printf("  %s image %d, %s: rel err %.3g against the F16 file's output, %.3g against transformers (F16 file: %.3g)\n",
                   dir, img, f == 0 ? "convert --type q8_0" : "quantize --type q8_0", vs_f16, vs_hf, f16_hf);
            CHECKF(vs_f16 <= Q8_REL_TOL, "%s image %d %s: rel err %.3g against F16 > %.3g", dir, img, files[f], vs_f16, Q8_REL_TOL);
            CHECKF(vs_hf <= Q8_REL_TOL, "%s image %d %s: rel err %.3g against transformers > %.3g", dir, img, files[f], vs_hf, Q8_REL_TOL);
            free(out_q);
        }
        free(out_f16); free(ref_hf); free(ref_f16);
    }
    remove(conv);
    remove(text);
    remove(quant);
    oc_safetensors_close(st);
}

static void test_qwen2vl_q8_0(void) { q8_case("qwen2vl"); }
static void test_qwen25vl_q8_0(void) { q8_case("qwen25vl"); }

int main(void) {
    CHECK_RUN(test_qwen2vl_q8_0);
    CHECK_RUN(test_qwen25vl_q8_0);
    return check_finish();
}
