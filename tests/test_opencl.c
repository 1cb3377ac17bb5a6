/* test_opencl.c: the OpenCL backend (opencl/ host code and the opencl kernels) against the CPU references on random
 * inputs: every kernel against a double-precision loop over the CPU definitions (src/kernels/nn.c,
 * src/kernels/quant.c, src/model/sample.c), attention against the CPU engine (src/attention/attn.c run with the same
 * arguments: dense, every pattern, segments, GQA, f16 and f32 caches, head dims 64 / 80 / 128,
 * sizes that are no multiple of a tile, decode with and without the key split, every tile shape
 * the kernel offers; kept and skipped pair counts must match exactly), matmul for F32 / F16 / Q8_0 / Q4_0 x one / few / many tokens
 * (the decode GEMV's F16 conversion bit-exact on special halves),
 * and the error paths (bad device name, program build failure, views outside buffers).
 * Device outputs are poisoned with NaN before every run. Without an OpenCL platform or device
 * (e.g. OCL_ICD_VENDORS=/nonexistent), or in builds without OpenCL, every case skips, saying why;
 * a device that is there but does not open (a program fails to build) fails every case.
 * OC_TEST_OPENCL_DEVICE=N|NAME picks the device (default: the first GPU, else the first device).
 * Under AddressSanitizer the leaks inside PoCL / LLVM are suppressed (tests/support/opencl.c). */
#include "check.h"
#include "support/dyn_ref.h"
#include "core/core.h"

#if OC_HAVE_OPENCL

#include "attention/attn.h"
#include "backend/backend.h"
#include "opencl/cl_attn.h"
#include "opencl/cl_ops.h"
#include "opencl/cl_internal.h"
#include "core/dtype.h"
#include "core/f16.h"
#include "attention/layout.h"
#include "kernels/nn.h"
#include "port.h"
#include "kernels/quant.h"

/* A static pattern (the dynamic kinds take their own fields; see test_dyn.c). */
#define PAT(kind_, sink_, local_) { .kind = (kind_), .n_sink = (sink_), .n_local = (local_) }

#define NAN_BITS 0x7fc00000u

static oc_cl_device *g_dev;
static char g_why[OC_ERROR_MESSAGE_BYTES + 32];

static int g_open_failed;   /* a device exists but did not open: every case fails */

static oc_cl_device *need_dev(void) {
    if (!g_dev && g_open_failed) check_fail_at(__FILE__, __LINE__, "%s", g_why);
    else if (!g_dev) check_skip("%s", g_why);
    return g_dev;
}

/* ---- buffer helpers -------------------------------------------------------------------------------- */

static oc_cl_buf *dbuf(size_t n_bytes) {
    oc_cl_buf *b = NULL;
    oc_error err;
    if (oc_cl_buf_alloc(g_dev, n_bytes, &b, &err) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", err.message);
    return b;
}

static oc_cl_buf *dup_host(const void *p, size_t n_bytes) {
    oc_cl_buf *b = dbuf(n_bytes);
    oc_error err;
    if (b && oc_cl_upload(g_dev, b, 0, p, n_bytes, &err) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", err.message);
    return b;
}

static void poison(oc_cl_buf *b) {
    oc_error err;
    if (oc_cl_fill32(g_dev, b, 0, NAN_BITS, oc_cl_buf_bytes(b) / 4 * 4, &err) != OC_OK)
        check_fail_at(__FILE__, __LINE__, "%s", err.message);
}

static float *fetch(const oc_cl_buf *b) {
    float *h = malloc(oc_cl_buf_bytes(b));
    oc_error err;
    if (oc_cl_download(g_dev, b, 0, h, oc_cl_buf_bytes(b), &err) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", err.message);
    return h;
}

static float *rand_f32(check_rng *r, size_t n, float lo, float hi) {
    float *x = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) x[i] = check_rng_uniform(r, lo, hi);
    return x;
}

/* ---- device, errors --------------------------------------------------------------------------------- */

static int contains_nocase_ascii(const char *hay, const char *needle) {
    for (; *hay; hay++) {
        size_t i = 0;
        while (needle[i] && hay[i] && (hay[i] | 32) == (needle[i] | 32)) i++;
        if (!needle[i]) return 1;
    }
    return 0;
}

static void test_devices(void) {
    if (!need_dev()) return;
    oc_cl_caps list[8];
    int n = 0;
    oc_error err;
    REQUIREF(oc_cl_list_devices(list, 8, &n, &err) == OC_OK, "%s", err.message);
    CHECK(n >= 1);
    const oc_cl_caps *c = oc_cl_device_caps(g_dev);
    printf("# device %d: '%s' on '%s' (%s), %u CUs, local %llu bytes, max work-group %zu, subgroups %d, fp16 %d, "
           "attention tile %d x %d, CLBlast %d\n", c->index, c->device, c->platform, c->version, c->compute_units,
           (unsigned long long)c->local_mem_bytes, c->max_work_group_size, c->has_subgroups, c->has_fp16,
           c->attn_row_groups * c->attn_rows_per_item, c->attn_key_groups * c->attn_keys_per_item, oc_cl_has_clblast(g_dev));
    CHECK(c->local_mem_bytes >= 16384 && c->max_work_group_size >= 64 && c->compute_units >= 1);
    /* the same device by index and by a case-changed piece of its name */
    char sel[16], name[16];
    snprintf(sel, sizeof sel, "%d", c->index);
    snprintf(name, sizeof name, "%.6s", c->device);
    for (char *p = name; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    const char *sels[2] = { sel, name };
    for (int i = 0; i < 2; i++) {
        oc_cl_caps got;
        CHECKF(oc_cl_select(sels[i], &got, &err) == OC_OK, "select '%s': %s", sels[i], err.message);
        CHECKF(got.index == c->index || (i == 1 && contains_nocase_ascii(got.device, name)), "'%s' picked device %d '%s'",
               sels[i], got.index, got.device);
    }
    /* a name that matches nothing, an index past the list: the same message from open */
    oc_cl_device *bad = NULL;
    oc_cl_caps none;
    CHECK(oc_cl_select("no-such-gpu-xyz", &none, &err) == OC_ERR_NOT_FOUND);
    CHECK(oc_cl_open(&bad, "no-such-gpu-xyz", NULL, NULL, &err) == OC_ERR_NOT_FOUND && !bad);
    CHECKF(strstr(err.message, "no device matches 'no-such-gpu-xyz'") && strstr(err.message, c->device), "%s", err.message);
    CHECK(oc_cl_select("99", &none, &err) == OC_ERR_NOT_FOUND);
}

static void test_build_failure(void) {
    if (!need_dev()) return;
    oc_error err;
    oc_status st = oc_cl_try_build(g_dev, "broken.cl", "__kernel void f(__global float *x) { x[0] = no_such_name; }", &err);
    CHECK(st == OC_ERR_DEVICE);
    CHECKF(strstr(err.message, "program broken.cl failed to build") && strstr(err.message, "no_such_name"), "%s", err.message);
    CHECK(!strchr(err.message, '\n'));
    CHECK(oc_cl_try_build(g_dev, "fine.cl", "__kernel void f(__global float *x) { x[0] = 1.0f; }", &err) == OC_OK);
}

static void test_range_errors(void) {
    if (!need_dev()) return;
    oc_cl_buf *b = dbuf(400);   /* 100 floats */
    if (!b) return;
    oc_error err;
    CHECK(oc_cl_norm(g_dev, OC_CL_NORM_RMS, oc_cl_mat_of(b, 0, 50), oc_cl_mat_of(b, 0, 50), oc_cl_mat_of(NULL, 0, 0), NULL,
                     NULL, 3, 50, 1e-6f, &err) == OC_ERR_RANGE);
    CHECK(oc_cl_add(g_dev, b, 90, b, 0, 11, &err) == OC_ERR_RANGE);
    CHECK(oc_cl_act(g_dev, b, -1, 4, OC_ACT_SILU, &err) == OC_ERR_RANGE);
    float h[4];
    CHECK(oc_cl_download(g_dev, b, 398, h, 4, &err) == OC_ERR_RANGE);
    oc_cl_buf *big = NULL;
    CHECK(oc_cl_buf_alloc(g_dev, (size_t)oc_cl_device_caps(g_dev)->max_alloc_bytes + 1, &big, &err) == OC_ERR_RANGE && !big);
    /* weight types the kernels do not take, unless dequantized at upload */
    unsigned char q4k[144] = { 0 };
    oc_weight w = { OC_DTYPE_Q4_K, 256, 1, q4k, 144 };
    oc_cl_weight cw;
    CHECK(oc_cl_weight_upload(g_dev, &w, 0, &cw, &err) == OC_ERR_UNSUPPORTED && !cw.buf);
    CHECKF(oc_cl_weight_upload(g_dev, &w, 1, &cw, &err) == OC_OK && cw.dtype == OC_DTYPE_F32, "%s", err.message);
    oc_cl_weight_free(&cw);
    oc_cl_buf_free(b);
}

/* ---- norms, activations, rotary ------------------------------------------------------------------------ */

/* norm(x + res) rows in double: the residual add in f32 first, as the kernel (and nn.c's callers) do. */
static void norm_ref(double *ref, float *xsum, const float *x, const float *res, int rows, int n, int stride, int layer,
                     const float *w, const float *b) {
    for (int i = 0; i < rows; i++) {
        float *xr = xsum + (size_t)i * n;
        for (int k = 0; k < n; k++) xr[k] = x[(size_t)i * stride + k] + (res ? res[(size_t)i * n + k] : 0.0f);
        double mean = 0, ss = 0;
        for (int k = 0; k < n; k++) mean += xr[k];
        mean = layer ? mean / n : 0;
        for (int k = 0; k < n; k++) ss += (xr[k] - mean) * (xr[k] - mean);
        double inv = 1.0 / sqrt(ss / n + 1e-6);
        for (int k = 0; k < n; k++) ref[(size_t)i * n + k] = (xr[k] - mean) * inv * (w ? w[k] : 1.0) + (b ? b[k] : 0.0);
    }
}

static void test_norms(void) {
    if (!need_dev()) return;
    check_rng r = { 11 };
    const int rows = 5;
    const int ns[3] = { 1536, 77, 4099 };   /* 4,099: more than the kernel keeps in registers */
    for (int ni = 0; ni < 3; ni++) {
        int n = ns[ni], stride = n + 3;
        float *x = rand_f32(&r, (size_t)rows * stride, -3.0f, 3.0f), *w = rand_f32(&r, (size_t)n, 0.5f, 1.5f),
              *bb = rand_f32(&r, (size_t)n, -1.0f, 1.0f), *res = rand_f32(&r, (size_t)rows * n, -1.0f, 1.0f);
        float *xsum = malloc(sizeof(float) * rows * n);
        double *ref = malloc(sizeof(double) * rows * n);
        oc_cl_buf *dw = dup_host(w, sizeof(float) * n), *db = dup_host(bb, sizeof(float) * n), *dy = dbuf(sizeof(float) * rows * n);
        /* kinds: rms, rms without w, layer, layer without w and b; each with and without a residual */
        for (int kind = 0; kind < 8 && dy; kind++) {
            int layer = (kind & 3) >= 2, with_w = kind % 2 == 0, with_res = kind >= 4;
            norm_ref(ref, xsum, x, with_res ? res : NULL, rows, n, stride, layer, with_w ? w : NULL,
                     layer && with_w ? bb : NULL);
            oc_cl_buf *dx = dup_host(x, sizeof(float) * rows * stride), *dr = dup_host(res, sizeof(float) * rows * n);
            poison(dy);
            oc_error err;
            oc_status st = oc_cl_norm(g_dev, layer ? OC_CL_NORM_LAYER : OC_CL_NORM_RMS, oc_cl_mat_of(dy, 0, n),
                                      oc_cl_mat_of(dx, 0, stride), oc_cl_mat_of(with_res ? dr : NULL, 0, n),
                                      with_w ? dw : NULL, layer && with_w ? db : NULL, rows, n, 1e-6f, &err);
            CHECKF(st == OC_OK, "%s", err.message);
            float *y = fetch(dy), *xs = fetch(dx);
            double e = check_rel_err_f32(y, ref, (size_t)rows * n);
            CHECKF(e < 1e-5, "norm kind %d n %d: rel err %.3g", kind, n, e);
            int bad = 0;   /* x holds x + res afterwards (exactly: one f32 add) */
            for (int i = 0; i < rows; i++)
                for (int k = 0; k < n; k++) bad += xs[(size_t)i * stride + k] != xsum[(size_t)i * n + k];
            CHECKF(!bad, "norm kind %d: %d elements of x + res differ", kind, bad);
            free(y); free(xs);
            oc_cl_buf_free(dx); oc_cl_buf_free(dr);
        }
        /* in place (y == x) and into the residual (y == res); and the residual add alone (no y) */
        oc_cl_buf *dx = dup_host(x, sizeof(float) * rows * stride), *dr = dup_host(res, sizeof(float) * rows * n);
        oc_error err;
        CHECKF(oc_cl_norm(g_dev, OC_CL_NORM_RMS, oc_cl_mat_of(dx, 0, stride), oc_cl_mat_of(dx, 0, stride),
                          oc_cl_mat_of(NULL, 0, 0), dw, NULL, rows, n, 1e-6f, &err) == OC_OK, "%s", err.message);
        norm_ref(ref, xsum, x, NULL, rows, n, stride, 0, w, NULL);
        float *y = fetch(dx);
        double num = 0, den = 0;
        for (int i = 0; i < rows; i++)
            for (int k = 0; k < n; k++) {
                double d = y[(size_t)i * stride + k] - ref[(size_t)i * n + k];
                num += d * d;
                den += ref[(size_t)i * n + k] * ref[(size_t)i * n + k];
            }
        CHECKF(sqrt(num / den) < 1e-5, "in-place rms: rel err %.3g", sqrt(num / den));
        free(y);
        oc_cl_buf_free(dx);
        dx = dup_host(x, sizeof(float) * rows * stride);
        CHECKF(oc_cl_norm(g_dev, OC_CL_NORM_LAYER, oc_cl_mat_of(dr, 0, n), oc_cl_mat_of(dx, 0, stride),
                          oc_cl_mat_of(dr, 0, n), dw, db, rows, n, 1e-6f, &err) == OC_OK, "%s", err.message);
        norm_ref(ref, xsum, x, res, rows, n, stride, 1, w, bb);
        y = fetch(dr);
        CHECKF(check_rel_err_f32(y, ref, (size_t)rows * n) < 1e-5, "layer norm into the residual");
        free(y);
        oc_cl_buf_free(dx);
        dx = dup_host(x, sizeof(float) * rows * stride);
        oc_cl_buf_free(dr);
        dr = dup_host(res, sizeof(float) * rows * n);
        CHECKF(oc_cl_norm(g_dev, OC_CL_NORM_RMS, oc_cl_mat_of(NULL, 0, 0), oc_cl_mat_of(dx, 0, stride),
                          oc_cl_mat_of(dr, 0, n), NULL, NULL, rows, n, 1e-6f, &err) == OC_OK, "%s", err.message);
        y = fetch(dx);
        int bad = 0;
        for (int i = 0; i < rows; i++)
            for (int k = 0; k < n; k++) bad += y[(size_t)i * stride + k] != x[(size_t)i * stride + k] + res[(size_t)i * n + k];
        CHECKF(!bad, "residual add alone: %d differ", bad);
        free(y);
        free(x); free(w); free(bb); free(res); free(xsum); free(ref);
        oc_cl_buf_free(dx); oc_cl_buf_free(dr); oc_cl_buf_free(dw); oc_cl_buf_free(db); oc_cl_buf_free(dy);
    }
}

static void test_gather_rows(void) {
    if (!need_dev()) return;
    check_rng r = { 19 };
    const int n_src = 24, dim = 33, unit = 4;
    int32_t idx[7] = { 5, 0, 3, 2, 4, 1, 99 };   /* 99: outside the source, its rows stay */
    float *src = rand_f32(&r, (size_t)n_src * dim + 2, -1.0f, 1.0f);
    oc_cl_buf *ds = dup_host(src, sizeof(float) * (n_src * dim + 2)), *di = dup_host(idx, sizeof idx),
              *dd = dbuf(sizeof(float) * (7 * unit * dim + 1));
    poison(dd);
    oc_error err;
    CHECKF(oc_cl_gather_rows(g_dev, dd, 1, ds, 2, n_src, di, 0, 7 * unit, dim, unit, &err) == OC_OK, "%s", err.message);
    float *y = fetch(dd);
    int bad = !isnan(y[0]);
    for (int row = 0; row < 7 * unit; row++)
        for (int c = 0; c < dim; c++) {
            float got = y[1 + row * dim + c];
            if (idx[row / unit] == 99) { bad += !isnan(got); continue; }
            bad += got != src[2 + (idx[row / unit] * unit + row % unit) * dim + c];
        }
    CHECKF(!bad, "gather_rows: %d elements differ", bad);
    /* a partial last unit reads one more index: 7 units + 1 row need 8 */
    CHECK(oc_cl_gather_rows(g_dev, dd, 0, ds, 0, n_src, di, 0, 7 * unit + 1, dim, unit, &err) == OC_ERR_RANGE);
    CHECK(oc_cl_gather_rows(g_dev, dd, 0, ds, 0, n_src, di, 0, 7 * unit, dim, 0, &err) == OC_ERR_INVALID);
    free(y);
    poison(dd);
    CHECKF(oc_cl_gather_rows(g_dev, dd, 0, ds, 0, n_src, di, 0, 3 * unit - 1, dim, unit, &err) == OC_OK, "%s", err.message);
    y = fetch(dd);
    bad = 0;
    for (int row = 0; row < 3 * unit; row++)
        for (int c = 0; c < dim; c++) {
            float got = y[row * dim + c];
            bad += row == 3 * unit - 1 ? !isnan(got) : got != src[(idx[row / unit] * unit + row % unit) * dim + c];
        }
    CHECKF(!bad, "gather_rows with a partial last unit: %d elements differ", bad);
    free(src); free(y);
    oc_cl_buf_free(ds); oc_cl_buf_free(di); oc_cl_buf_free(dd);
}

static void test_elementwise(void) {
    if (!need_dev()) return;
    check_rng r = { 12 };
    const int n = 1000, off = 7;
    float *g = rand_f32(&r, n + off, -6.0f, 6.0f), *u = rand_f32(&r, n + off, -2.0f, 2.0f);
    oc_cl_buf *dg = dup_host(g, sizeof(float) * (n + off)), *du = dup_host(u, sizeof(float) * (n + off)),
              *dout = dbuf(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    oc_error err;
    for (int act = 0; act < 3 && dg && du && dout; act++) {
        for (int glu = 0; glu < 2; glu++) {
            for (int i = 0; i < n; i++) {
                double x = g[off + i];
                double a = act == OC_ACT_SILU ? x / (1 + exp(-x))
                         : act == OC_ACT_GELU_ERF ? 0.5 * x * (1 + erf(x / sqrt(2.0))) : x / (1 + exp(-1.702 * x));
                ref[i] = glu ? a * u[off + i] : a;
            }
            poison(dout);
            oc_status st;
            if (glu) {
                st = oc_cl_glu(g_dev, dout, 0, dg, off, du, off, n, (oc_act)act, &err);
            } else {
                oc_cl_buf *tmp = dup_host(g + off, sizeof(float) * n);
                st = oc_cl_act(g_dev, tmp, 0, n, (oc_act)act, &err);
                CHECKF(st == OC_OK, "%s", err.message);
                float *y = fetch(tmp);
                double e = check_rel_err_f32(y, ref, (size_t)n);
                CHECKF(e < 2e-6, "act %d: rel err %.3g", act, e);
                free(y);
                oc_cl_buf_free(tmp);
                continue;
            }
            CHECKF(st == OC_OK, "%s", err.message);
            float *y = fetch(dout);
            double e = check_rel_err_f32(y, ref, (size_t)n);
            CHECKF(e < 2e-6, "glu %d: rel err %.3g", act, e);
            free(y);
        }
    }
    /* residual add */
    poison(dout);
    CHECK(oc_cl_fill32(g_dev, dout, 0, 0, sizeof(float) * n, &err) == OC_OK);
    CHECK(oc_cl_add(g_dev, dout, 0, dg, off, n, &err) == OC_OK && oc_cl_add(g_dev, dout, 0, du, off, n, &err) == OC_OK);
    float *y = fetch(dout);
    for (int i = 0; i < n; i++) ref[i] = (double)(g[off + i] + u[off + i]);
    CHECK(check_rel_err_f32(y, ref, (size_t)n) == 0.0);
    free(y); free(g); free(u); free(ref);
    oc_cl_buf_free(dg); oc_cl_buf_free(du); oc_cl_buf_free(dout);
}

static void test_rope(void) {
    if (!need_dev()) return;
    check_rng r = { 13 };
    const int n_tok = 9, n_heads = 3, hd = 80, pairs = 40, st_tok = n_heads * hd + 5, extra = 6;   /* 6 dims left alone */
    float *x = rand_f32(&r, (size_t)n_tok * st_tok, -2.0f, 2.0f);
    float *cs = malloc(sizeof(float) * n_tok * (pairs + 2)), *sn = malloc(sizeof(float) * n_tok * (pairs + 2));
    for (int t = 0; t < n_tok; t++)
        for (int k = 0; k < pairs + 2; k++) {
            float ang = (float)(t * 3 + 1) * powf(10000.0f, -(float)k / pairs);
            cs[t * (pairs + 2) + k] = cosf(ang);
            sn[t * (pairs + 2) + k] = sinf(ang);
        }
    oc_cl_buf *dx = dup_host(x, sizeof(float) * n_tok * st_tok), *dc = dup_host(cs, sizeof(float) * n_tok * (pairs + 2)),
              *ds = dup_host(sn, sizeof(float) * n_tok * (pairs + 2));
    oc_error err;
    int use_pairs = pairs - extra / 2;
    CHECKF(oc_cl_rope_neox(g_dev, dx, 0, st_tok, hd, n_tok, n_heads, use_pairs, oc_cl_mat_of(dc, 0, pairs + 2),
                           oc_cl_mat_of(ds, 0, pairs + 2), &err) == OC_OK, "%s", err.message);
    float *y = fetch(dx);
    double *ref = malloc(sizeof(double) * n_tok * st_tok);
    for (int i = 0; i < n_tok * st_tok; i++) ref[i] = x[i];
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_heads; h++) {
            double *p = ref + (size_t)t * st_tok + h * hd;
            for (int k = 0; k < use_pairs; k++) {
                double a = p[k], b = p[k + use_pairs], c = cs[t * (pairs + 2) + k], s = sn[t * (pairs + 2) + k];
                p[k] = a * c - b * s;
                p[k + use_pairs] = b * c + a * s;
            }
        }
    double e = check_rel_err_f32(y, ref, (size_t)n_tok * st_tok);
    CHECKF(e < 1e-6, "rope: rel err %.3g", e);
    free(x); free(cs); free(sn); free(y); free(ref);
    oc_cl_buf_free(dx); oc_cl_buf_free(dc); oc_cl_buf_free(ds);
}

/* ---- weights: embedding and matmul -------------------------------------------------------------------------- */

static const int32_t dev_types[4] = { OC_DTYPE_F32, OC_DTYPE_F16, OC_DTYPE_Q8_0, OC_DTYPE_Q4_0 };

/* A random weight of n_out x n_in in dtype (host bytes in *data) and its f32 values. */
static float *make_weight(check_rng *r, int32_t dtype, int64_t n_in, int64_t n_out, oc_weight *w, void **data) {
    float *f = rand_f32(r, (size_t)(n_in * n_out), -1.0f, 1.0f);
    size_t row = (size_t)oc_dtype_row_bytes(dtype, (uint64_t)n_in);
    unsigned char *b = malloc(row * (size_t)n_out);
    for (int64_t o = 0; o < n_out; o++) {
        float *src = f + o * n_in;
        unsigned char *dst = b + (size_t)o * row;
        if (dtype == OC_DTYPE_F32) memcpy(dst, src, row);
        else if (dtype == OC_DTYPE_F16) for (int64_t k = 0; k < n_in; k++) ((uint16_t *)dst)[k] = oc_f32_to_f16(src[k]);
        else if (dtype == OC_DTYPE_Q8_0) oc_quantize_q8_0(src, dst, n_in);
        else oc_quantize_q4_0(src, dst, n_in);
        oc_dequant_ref(dtype)(dst, src, n_in);   /* the values the kernels see */
    }
    w->dtype = dtype;
    w->n_in = n_in;
    w->n_out = n_out;
    w->data = b;
    w->row_bytes = row;
    *data = b;
    return f;
}

static void test_embed(void) {
    if (!need_dev()) return;
    check_rng r = { 14 };
    const int n_vocab = 50, n_in = 96, n_tok = 6;
    int32_t ids[6] = { 3, 49, -1, 0, 3, 17 };
    for (int ti = 0; ti < 4; ti++) {
        oc_weight w;
        void *data;
        float *f = make_weight(&r, dev_types[ti], n_in, n_vocab, &w, &data);
        oc_cl_weight cw;
        oc_error err;
        REQUIREF(oc_cl_weight_upload(g_dev, &w, 0, &cw, &err) == OC_OK, "%s", err.message);
        oc_cl_buf *did = dup_host(ids, sizeof ids), *dout = dbuf(sizeof(float) * n_tok * (n_in + 1));
        poison(dout);
        CHECKF(oc_cl_embed(g_dev, &cw, did, 0, n_tok, oc_cl_mat_of(dout, 0, n_in + 1), &err) == OC_OK, "%s", err.message);
        float *y = fetch(dout);
        for (int t = 0; t < n_tok; t++) {
            const float *row = y + (size_t)t * (n_in + 1);
            if (ids[t] < 0) {   /* left as it was */
                for (int k = 0; k < n_in; k++) CHECKF(isnan(row[k]), "%s: row %d overwritten", oc_dtype_name(dev_types[ti]), t);
                continue;
            }
            for (int k = 0; k < n_in; k++)
                CHECKF(row[k] == f[(size_t)ids[t] * n_in + k], "%s: token %d element %d: %g vs %g",
                       oc_dtype_name(dev_types[ti]), t, k, (double)row[k], (double)f[(size_t)ids[t] * n_in + k]);
        }
        free(y); free(f); free(data);
        oc_cl_buf_free(did); oc_cl_buf_free(dout); oc_cl_weight_free(&cw);
    }
}

/* y = x W^T + bias on the device against a double loop, for one weight type and shape. */
static void check_matmul(check_rng *r, int32_t dtype, int to_f32, int64_t n_in, int64_t n_out, int64_t n_tok, int bias,
                         int clblast) {
    oc_weight w;
    void *data;
    float *f = make_weight(r, dtype, n_in, n_out, &w, &data);
    int64_t xs = n_in + 5, ys = n_out + 2;
    float *x = rand_f32(r, (size_t)(n_tok * xs), -1.0f, 1.0f), *bv = rand_f32(r, (size_t)n_out, -1.0f, 1.0f);
    double *ref = malloc(sizeof(double) * (size_t)(n_tok * ys));
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < ys; o++) {
            double s = NAN;   /* the gaps between rows stay poisoned */
            if (o < n_out) {
                s = bias ? bv[o] : 0.0;
                for (int64_t k = 0; k < n_in; k++) s += (double)x[t * xs + k] * f[o * n_in + k];
            }
            ref[t * ys + o] = s;
        }
    oc_cl_weight cw;
    oc_error err;
    oc_cl_use_clblast(g_dev, clblast);
    if (oc_cl_weight_upload(g_dev, &w, to_f32, &cw, &err) == OC_OK) {
        oc_cl_buf *dx = dup_host(x, sizeof(float) * (size_t)(n_tok * xs)), *db = dup_host(bv, sizeof(float) * (size_t)n_out),
                  *dy = dbuf(sizeof(float) * (size_t)(n_tok * ys));
        poison(dy);
        oc_status st = oc_cl_matmul(g_dev, &cw, oc_cl_mat_of(dx, 0, xs), oc_cl_mat_of(dy, 0, ys), n_tok, bias ? db : NULL, &err);
        CHECKF(st == OC_OK, "%s", err.message);
        float *y = fetch(dy);
        double num = 0, den = 0;
        int bad = 0;
        for (int64_t i = 0; i < n_tok * ys; i++) {
            if (isnan(ref[i])) { bad += !isnan(y[i]); continue; }
            if (!isfinite(y[i])) { bad++; continue; }
            num += (y[i] - ref[i]) * (y[i] - ref[i]);
            den += ref[i] * ref[i];
        }
        double e = bad ? INFINITY : sqrt(num / den);
        CHECKF(e < 1e-5, "matmul %s%s %lld x %lld, %lld tokens, bias %d, clblast %d: rel err %.3g (%d bad)",
               oc_dtype_name(dtype), to_f32 ? " as f32" : "", (long long)n_out, (long long)n_in, (long long)n_tok, bias,
               clblast, e, bad);
        free(y);
        oc_cl_buf_free(dx); oc_cl_buf_free(db); oc_cl_buf_free(dy);
        oc_cl_weight_free(&cw);
    } else {
        check_fail_at(__FILE__, __LINE__, "%s", err.message);
    }
    oc_cl_use_clblast(g_dev, 1);
    free(f); free(data); free(x); free(bv); free(ref);
}

/* The one-token branch converts F16 rows from 16-byte words: every special half (subnormals, the
 * largest, signed zeros, both infinities) must come out as the host's exact conversion. Row o holds
 * one value at column o and zeros elsewhere, x is all ones, so y[o] is that value, bit for bit. */
static void test_gemv_f16_exact(void) {
    if (!need_dev()) return;
    const uint16_t specials[] = { 0x0001, 0x8001, 0x0200, 0x03ff, 0x83ff, 0x0400, 0x0401, 0x3c00, 0xbc00, 0x3555,
                                  0x7bff, 0xfbff, 0x0000, 0x8000, 0x7c00, 0xfc00 };
    const int n = (int)OC_ARRAY_LEN(specials), n_in = 64;
    uint16_t *wb = calloc((size_t)(n * n_in), sizeof *wb);
    float *ones = malloc(sizeof(float) * n_in);
    for (int k = 0; k < n_in; k++) ones[k] = 1.0f;
    for (int o = 0; o < n; o++) wb[o * n_in + o] = specials[o];
    oc_weight w = { .dtype = OC_DTYPE_F16, .n_in = n_in, .n_out = n, .data = wb, .row_bytes = 2 * n_in };
    oc_cl_weight cw;
    oc_error err;
    REQUIREF(oc_cl_weight_upload(g_dev, &w, 0, &cw, &err) == OC_OK, "%s", err.message);
    oc_cl_buf *dx = dup_host(ones, sizeof(float) * n_in), *dy = dbuf(sizeof(float) * (size_t)n);
    poison(dy);
    CHECKF(oc_cl_matmul(g_dev, &cw, oc_cl_mat_of(dx, 0, n_in), oc_cl_mat_of(dy, 0, n), 1, NULL, &err) == OC_OK, "%s",
           err.message);
    float *y = fetch(dy);
    for (int o = 0; o < n; o++) {
        float want = oc_f16_to_f32(specials[o]);
        uint32_t a, b;
        memcpy(&a, &y[o], 4);
        memcpy(&b, &want, 4);
        /* a lone -0 summed with +0 partials is +0: signed zeros compare by value */
        CHECKF(a == b || (want == 0.0f && y[o] == 0.0f), "half 0x%04x: %a (bits %08x), want %a (bits %08x)",
               specials[o], (double)y[o], a, (double)want, b);
    }
    free(y); free(wb); free(ones);
    oc_cl_buf_free(dx); oc_cl_buf_free(dy); oc_cl_weight_free(&cw);
}

/* oc_cl_matmul_fused against a double loop: n products of one x (q, k, v shapes: odd row counts,
 * biases on some) written into one buffer with gaps that stay poisoned, or with glu the SiLU gated
 * unit of two (gate, up), for every weight type and odd widths, x at element xo of its buffer (3:
 * not 16-byte aligned, the kernels' general loop; 0: their vector loops), with norm the products of
 * RMSNorm(x) * w computed in the launch (the reference normalizes in double); and refusals of bad
 * calls. */
static void check_fused(check_rng *r, int32_t dtype, int64_t n_in, int n, const int64_t *n_out, int glu, int xo,
                        int norm) {
    oc_weight w[OC_CL_FUSED_MAX];
    void *data[OC_CL_FUSED_MAX];
    float *f[OC_CL_FUSED_MAX], *bv[OC_CL_FUSED_MAX];
    oc_cl_weight cw[OC_CL_FUSED_MAX];
    const oc_cl_weight *wp[OC_CL_FUSED_MAX];
    oc_cl_mat ym[OC_CL_FUSED_MAX];
    const oc_cl_buf *bp[OC_CL_FUSED_MAX];
    oc_cl_buf *db[OC_CL_FUSED_MAX];
    oc_error err;
    float *x = rand_f32(r, (size_t)n_in + 3, -1.0f, 1.0f), *nw = rand_f32(r, (size_t)n_in, 0.5f, 1.5f);
    const float eps = 1e-6f;
    double *xn = malloc(sizeof(double) * (size_t)n_in), ss = 0;   /* the products' x */
    for (int64_t k = 0; k < n_in; k++) ss += (double)x[xo + k] * x[xo + k];
    for (int64_t k = 0; k < n_in; k++) xn[k] = norm ? x[xo + k] / sqrt(ss / (double)n_in + eps) * nw[k] : x[xo + k];
    oc_cl_buf *dnw = dup_host(nw, sizeof(float) * (size_t)n_in);
    int64_t total = 0, at[OC_CL_FUSED_MAX];
    for (int j = 0; j < n; j++) {
        f[j] = make_weight(r, dtype, n_in, n_out[j], &w[j], &data[j]);
        bv[j] = rand_f32(r, (size_t)n_out[j], -1.0f, 1.0f);
        REQUIREF(oc_cl_weight_upload(g_dev, &w[j], 0, &cw[j], &err) == OC_OK, "%s", err.message);
        wp[j] = &cw[j];
        db[j] = dup_host(bv[j], sizeof(float) * (size_t)n_out[j]);
        bp[j] = j != 1 ? db[j] : NULL;   /* a product without bias between two with */
        at[j] = total + 1;               /* one poisoned float before each output */
        total += n_out[j] + 1;
    }
    oc_cl_buf *dx = dup_host(x, sizeof(float) * ((size_t)n_in + 3)), *dy = dbuf(sizeof(float) * (size_t)(total + 1));
    for (int j = 0; j < n; j++) ym[j] = oc_cl_mat_of(dy, glu ? at[0] : at[j], n_out[j]);
    poison(dy);
    oc_status st = oc_cl_matmul_fused(g_dev, n, wp, oc_cl_mat_of(dx, xo, n_in), ym, bp, glu, OC_ACT_SILU,
                                      norm ? dnw : NULL, eps, &err);
    CHECKF(st == OC_OK, "%s", err.message);
    float *y = fetch(dy);
    double *ref = malloc(sizeof(double) * (size_t)(total + 1));
    for (int64_t i = 0; i <= total; i++) ref[i] = NAN;
    for (int j = 0; j < n; j++)
        for (int64_t o = 0; o < n_out[j]; o++) {
            double s = bp[j] ? bv[j][o] : 0.0;
            for (int64_t k = 0; k < n_in; k++) s += xn[k] * f[j][o * n_in + k];
            if (!glu) ref[at[j] + o] = s;
            else if (j == 0) ref[at[0] + o] = s / (1.0 + exp(-s));
            else ref[at[0] + o] *= s;
        }
    double num = 0, den = 0;
    int bad = 0;
    for (int64_t i = 0; i <= total; i++) {
        if (isnan(ref[i])) { bad += !isnan(y[i]); continue; }
        if (!isfinite(y[i])) { bad++; continue; }
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    double e = bad ? INFINITY : sqrt(num / den);
    CHECKF(e < 1e-5, "fused %s, %d products of %lld, glu %d, x at %d, norm %d: rel err %.3g (%d bad)",
           oc_dtype_name(dtype), n, (long long)n_in, glu, xo, norm, e, bad);
    free(y); free(ref); free(x); free(nw); free(xn);
    oc_cl_buf_free(dx); oc_cl_buf_free(dy); oc_cl_buf_free(dnw);
    for (int j = 0; j < n; j++) {
        free(f[j]); free(bv[j]); free(data[j]);
        oc_cl_buf_free(db[j]);
        oc_cl_weight_free(&cw[j]);
    }
}

static void test_matmul_fused(void) {
    if (!need_dev()) return;
    check_rng r = { 21 };
    const int64_t qkv[3] = { 96, 17, 17 }, one[1] = { 41 }, gu[2] = { 77, 77 }, big[3] = { 300, 64, 64 };
    for (int ti = 0; ti < 4; ti++) {
        int32_t t = dev_types[ti];
        int q = t == OC_DTYPE_Q8_0 || t == OC_DTYPE_Q4_0;
        for (int xo = 3; xo >= 0; xo -= 3)
            for (int norm = 0; norm < 2; norm++) {
                check_fused(&r, t, q ? 96 : 100, 3, qkv, 0, xo, norm);
                check_fused(&r, t, q ? 64 : 37, 1, one, 0, xo, norm);
                check_fused(&r, t, q ? 160 : 136, 2, gu, 1, xo, norm);
                check_fused(&r, t, q ? 1536 : 1544, 3, big, 0, xo, norm);
                check_fused(&r, t, q ? 2048 : 2056, 2, gu, 1, xo, norm);
            }
        if (q) check_fused(&r, t, 96 + 32 * 64, 2, gu, 1, 0, 1);   /* 67 blocks a row: an odd block last */
    }
    /* refusals: a mixed type, mismatched gate/up rows, too many products, an output over x */
    oc_weight wa, wb;
    void *da, *dbb;
    float *fa = make_weight(&r, OC_DTYPE_F16, 64, 8, &wa, &da), *fb = make_weight(&r, OC_DTYPE_F32, 64, 9, &wb, &dbb);
    oc_cl_weight ca, cb;
    oc_error err;
    REQUIREF(oc_cl_weight_upload(g_dev, &wa, 0, &ca, &err) == OC_OK && oc_cl_weight_upload(g_dev, &wb, 0, &cb, &err) == OC_OK,
             "%s", err.message);
    oc_cl_buf *buf = dbuf(sizeof(float) * 256);
    const oc_cl_weight *mixed[2] = { &ca, &cb }, *four[4] = { &ca, &ca, &ca, &ca };
    oc_cl_mat ym[4] = { oc_cl_mat_of(buf, 100, 8), oc_cl_mat_of(buf, 120, 9), oc_cl_mat_of(buf, 140, 8),
                        oc_cl_mat_of(buf, 160, 8) };
    const oc_cl_buf *nb[4] = { NULL, NULL, NULL, NULL };
    CHECK(oc_cl_matmul_fused(g_dev, 2, mixed, oc_cl_mat_of(buf, 0, 64), ym, nb, 0, OC_ACT_SILU, NULL, 0.0f, &err) == OC_ERR_INVALID);
    CHECK(oc_cl_matmul_fused(g_dev, 4, four, oc_cl_mat_of(buf, 0, 64), ym, nb, 0, OC_ACT_SILU, NULL, 0.0f, &err) == OC_ERR_INVALID);
    CHECK(oc_cl_matmul_fused(g_dev, 3, four, oc_cl_mat_of(buf, 0, 64), ym, nb, 1, OC_ACT_SILU, NULL, 0.0f, &err) == OC_ERR_INVALID);
    oc_cl_mat over[1] = { oc_cl_mat_of(buf, 60, 8) };
    CHECK(oc_cl_matmul_fused(g_dev, 1, four, oc_cl_mat_of(buf, 0, 64), over, nb, 0, OC_ACT_SILU, NULL, 0.0f, &err) == OC_ERR_INVALID);
    oc_cl_mat past[1] = { oc_cl_mat_of(buf, 250, 8) };
    CHECK(oc_cl_matmul_fused(g_dev, 1, four, oc_cl_mat_of(buf, 0, 64), past, nb, 0, OC_ACT_SILU, NULL, 0.0f, &err) == OC_ERR_RANGE);
    oc_cl_buf *short_w = dbuf(sizeof(float) * 63);   /* a norm weight shorter than x */
    CHECK(oc_cl_matmul_fused(g_dev, 1, four, oc_cl_mat_of(buf, 0, 64), ym, nb, 0, OC_ACT_SILU, short_w, 1e-6f, &err) ==
          OC_ERR_RANGE);
    oc_cl_buf_free(short_w);
    oc_cl_buf_free(buf);
    oc_cl_weight_free(&ca); oc_cl_weight_free(&cb);
    free(fa); free(fb); free(da); free(dbb);
}

/* oc_cl_matmul_acc: y += x W^T (+ bias) for one token, every weight type, odd widths, against
 * y0 + the product in double; the floats after y stay poisoned. */
static void test_matmul_acc(void) {
    if (!need_dev()) return;
    check_rng r = { 23 };
    const int64_t widths[3] = { 100, 1544, 4128 };
    for (int ti = 0; ti < 4; ti++)
        for (int wi = 0; wi < 3; wi++) {
            int32_t t = dev_types[ti];
            int q = t == OC_DTYPE_Q8_0 || t == OC_DTYPE_Q4_0;
            int64_t n_in = q ? (widths[wi] + 31) / 32 * 32 : widths[wi], n_out = 75;
            oc_weight w;
            void *data;
            float *f = make_weight(&r, t, n_in, n_out, &w, &data);
            float *x = rand_f32(&r, (size_t)n_in, -1.0f, 1.0f), *y0 = rand_f32(&r, (size_t)n_out + 1, -2.0f, 2.0f),
                  *bv = rand_f32(&r, (size_t)n_out, -1.0f, 1.0f);
            y0[n_out] = NAN;
            oc_cl_weight cw;
            oc_error err;
            REQUIREF(oc_cl_weight_upload(g_dev, &w, 0, &cw, &err) == OC_OK, "%s", err.message);
            oc_cl_buf *dx = dup_host(x, sizeof(float) * (size_t)n_in), *dy = dup_host(y0, sizeof(float) * (size_t)(n_out + 1)),
                      *db = dup_host(bv, sizeof(float) * (size_t)n_out);
            CHECKF(oc_cl_matmul_acc(g_dev, &cw, oc_cl_mat_of(dx, 0, n_in), oc_cl_mat_of(dy, 0, n_out), wi == 1 ? NULL : db,
                                    &err) == OC_OK, "%s", err.message);
            float *y = fetch(dy);
            double num = 0, den = 0;
            int bad = !isnan(y[n_out]);
            for (int64_t o = 0; o < n_out; o++) {
                double s = wi == 1 ? 0.0 : bv[o];
                for (int64_t k = 0; k < n_in; k++) s += (double)x[k] * f[o * n_in + k];
                double want = y0[o] + s;
                if (!isfinite(y[o])) bad++;
                num += (y[o] - want) * (y[o] - want);
                den += want * want;
            }
            double e = bad ? INFINITY : sqrt(num / den);
            CHECKF(e < 1e-5, "matmul_acc %s %lld x %lld: rel err %.3g (%d bad)", oc_dtype_name(t), (long long)n_out,
                   (long long)n_in, e, bad);
            free(y); free(f); free(data); free(x); free(y0); free(bv);
            oc_cl_buf_free(dx); oc_cl_buf_free(dy); oc_cl_buf_free(db);
            oc_cl_weight_free(&cw);
        }
}

static void test_matmul(void) {
    if (!need_dev()) return;
    check_rng r = { 15 };
    const int64_t toks[3] = { 1, 3, 70 };
    for (int ti = 0; ti < 4; ti++)
        for (int k = 0; k < 3; k++) {
            int32_t t = dev_types[ti];
            int64_t n_in = t == OC_DTYPE_F32 || t == OC_DTYPE_F16 ? 100 : 160;   /* f32/f16: rows end inside a chunk */
            check_matmul(&r, t, 0, n_in, 67, toks[k], k != 1, 0);
        }
    /* the decode kernel at widths that end inside its items' strides (1000 f16: 125 chunks of 8
     * over 32 items; 4100 f16, 4128 q8_0: 513 and 516 chunks), 5 tokens (a second group of four),
     * outputs that leave a last work-group's rows spare */
    for (int ti = 0; ti < 4; ti++) {
        int32_t t = dev_types[ti];
        int64_t wide = t == OC_DTYPE_F32 || t == OC_DTYPE_F16 ? 4100 : 4128;
        check_matmul(&r, t, 0, t == OC_DTYPE_F32 || t == OC_DTYPE_F16 ? 1000 : 1024, 13, 1, 1, 0);
        check_matmul(&r, t, 0, wide, 7, ti == 1 ? 5 : 1, ti & 1, 0);
    }
    /* the decode branch (one token) against the few-token one, every type: F16 rows of whole 16-byte
     * chunks take the uint4 loads (1536: 192 chunks, an even number of steps per item; 1544: 193, an
     * odd one; 8: one chunk, most items idle), rows of a width not a multiple of 8 the loader; 1..5
     * tokens, bias or not, 37 outputs (not a multiple of the rows per work-group) */
    for (int ti = 0; ti < 4; ti++) {
        int32_t t = dev_types[ti];
        int q = t == OC_DTYPE_Q8_0 || t == OC_DTYPE_Q4_0;
        const int64_t widths[4] = { 1536, q ? 1568 : 1544, q ? 32 : 8, q ? 96 : 1539 };
        for (int wi = 0; wi < 4; wi++)
            for (int64_t nt = 1; nt <= 5; nt++) check_matmul(&r, t, 0, widths[wi], 37, nt, (int)((nt + wi) & 1), 0);
    }
    /* few long rows: the launch gives each more items (128 for one row of 4100-8192, 64 for three of 8192) */
    for (int ti = 0; ti < 4; ti++) {
        int32_t t = dev_types[ti];
        int q = t == OC_DTYPE_Q8_0 || t == OC_DTYPE_Q4_0;
        check_matmul(&r, t, 0, q ? 4128 : 4100, 1, 1, 1, 0);
        check_matmul(&r, t, 0, 8192, 1, 1, 0, 0);
        check_matmul(&r, t, 0, 8192, 3, 2, 1, 0);
    }
    /* a larger one through the tiled kernel: two k steps of 32 blocks, partial tiles both ways */
    check_matmul(&r, OC_DTYPE_Q8_0, 0, 512, 130, 77, 1, 0);
    /* CLBlast takes F32 (also dequantized at upload) when the build has it */
    if (oc_cl_has_clblast(g_dev)) {
        check_matmul(&r, OC_DTYPE_F32, 0, 96, 67, 70, 1, 1);
        check_matmul(&r, OC_DTYPE_Q4_0, 1, 96, 67, 9, 0, 1);
    }
}

/* Closing a device lets its context go, CLBlast's products included: CLBlast caches its programs
 * per context and a cached program holds the context, so before oc_cl_close dropped that cache a
 * process that opened device after device kept every one of them (NVIDIA refused a new context
 * after about 100). We hold the context ourselves across the close; after it, ours must be the
 * only reference left (an implementation may take a moment to drop the ones its queue held). */
static void test_close_releases_context(void) {
    if (!need_dev()) return;
    oc_cl_device *dev = NULL, *saved = g_dev;
    oc_error err;
    if (oc_cl_open(&dev, getenv("OC_TEST_OPENCL_DEVICE"), NULL, NULL, &err) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "second device: %s", err.message);
        return;
    }
    check_rng r = { 41 };
    g_dev = dev;   /* check_matmul works on g_dev: an F32 product of 70 tokens (CLBlast when built with it) */
    check_matmul(&r, OC_DTYPE_F32, 0, 96, 67, 70, 1, 1);
    g_dev = saved;
    cl_context ctx = dev->context;
    clRetainContext(ctx);
    oc_cl_close(dev);
    cl_uint refs = 0;
    uint64_t t0 = oc_port_now_ns();
    do {
        if (clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, sizeof refs, &refs, NULL) != CL_SUCCESS) refs = 0;
    } while (refs > 1 && oc_port_now_ns() - t0 < 5000000000ull);
    CHECKF(refs == 1, "after oc_cl_close the context still has %u references besides ours (CLBlast %d)", refs - 1,
           oc_cl_has_clblast(saved));
    clReleaseContext(ctx);
}

/* ---- KV cache, argmax ----------------------------------------------------------------------------------------- */

/* oc_cl_rope_store against the launches it replaces (oc_cl_rope_neox on q and k, oc_cl_kv_store of
 * k and v into f16 caches): q, k and both caches bit for bit, the cache rows outside the stored
 * ones still poisoned, and q against a double rotation; odd head dims (a tail past the pairs),
 * partial rotation, one token and several, GQA; and refusals. */
static void check_rope_store(check_rng *r, int n_tok, int n_head, int n_kv, int hd, int pairs, int at_row) {
    int qd = n_head * hd, kvd = n_kv * hd, rows = at_row + n_tok + 2;
    float *q = rand_f32(r, (size_t)n_tok * qd, -2.0f, 2.0f), *k = rand_f32(r, (size_t)n_tok * kvd, -2.0f, 2.0f);
    float *v = rand_f32(r, (size_t)n_tok * kvd, -2.0f, 2.0f);
    float *cs = malloc(sizeof(float) * (size_t)(n_tok * pairs)), *sn = malloc(sizeof(float) * (size_t)(n_tok * pairs));
    for (int t = 0; t < n_tok * pairs; t++) {
        float ang = (float)(t * 7 + 1) * 0.37f;
        cs[t] = cosf(ang);
        sn[t] = sinf(ang);
    }
    size_t qb = sizeof(float) * (size_t)n_tok * qd, kb = sizeof(float) * (size_t)n_tok * kvd;
    size_t cb = 2 * (size_t)rows * kvd, tb = sizeof(float) * (size_t)(n_tok * pairs);
    oc_cl_buf *q1 = dup_host(q, qb), *k1 = dup_host(k, kb), *q2 = dup_host(q, qb), *k2 = dup_host(k, kb), *dv = dup_host(v, kb);
    oc_cl_buf *kc1 = dbuf(cb), *vc1 = dbuf(cb), *kc2 = dbuf(cb), *vc2 = dbuf(cb), *dc = dup_host(cs, tb), *ds = dup_host(sn, tb);
    poison(kc1); poison(vc1); poison(kc2); poison(vc2);
    oc_error err;
    unsigned char *poison_bytes = malloc(cb);
    CHECK(oc_cl_download(g_dev, kc2, 0, poison_bytes, cb, &err) == OC_OK);
    int64_t dst = (int64_t)at_row * kvd;
    oc_cl_mat ct = oc_cl_mat_of(dc, 0, pairs), stt = oc_cl_mat_of(ds, 0, pairs);
    CHECKF(oc_cl_rope_neox(g_dev, q1, 0, qd, hd, n_tok, n_head, pairs, ct, stt, &err) == OC_OK &&
           oc_cl_rope_neox(g_dev, k1, 0, kvd, hd, n_tok, n_kv, pairs, ct, stt, &err) == OC_OK &&
           oc_cl_kv_store(g_dev, oc_cl_mat_of(k1, 0, kvd), n_tok, kvd, kc1, OC_DTYPE_F16, dst, kvd, &err) == OC_OK &&
           oc_cl_kv_store(g_dev, oc_cl_mat_of(dv, 0, kvd), n_tok, kvd, vc1, OC_DTYPE_F16, dst, kvd, &err) == OC_OK,
           "%s", err.message);
    CHECKF(oc_cl_rope_store(g_dev, oc_cl_mat_of(q2, 0, qd), k2, 0, dv, 0, kvd, n_tok, n_head, n_kv, hd, pairs, ct, stt,
                            kc2, dst, vc2, dst, &err) == OC_OK, "%s", err.message);
    float *a[2] = { fetch(q1), fetch(k1) }, *b[2] = { fetch(q2), fetch(k2) };
    size_t nb[2] = { qb, kb };
    unsigned char *c1[2] = { malloc(cb), malloc(cb) }, *c2[2] = { malloc(cb), malloc(cb) };
    oc_cl_buf *caches1[2] = { kc1, vc1 }, *caches2[2] = { kc2, vc2 };
    for (int i = 0; i < 2; i++) {
        CHECKF(!memcmp(a[i], b[i], nb[i]), "rope_store %d x %d/%d x %d (%d pairs): %s differs from rope", n_tok, n_head,
               n_kv, hd, pairs, i ? "k" : "q");
        CHECK(oc_cl_download(g_dev, caches1[i], 0, c1[i], cb, &err) == OC_OK);
        CHECK(oc_cl_download(g_dev, caches2[i], 0, c2[i], cb, &err) == OC_OK);
        CHECKF(!memcmp(c1[i], c2[i], cb), "rope_store %d x %d/%d x %d (%d pairs): %s cache differs from kv_store", n_tok,
               n_head, n_kv, hd, pairs, i ? "v" : "k");
        int untouched = 0;   /* rows outside [at_row, at_row + n_tok) keep the poison's bytes */
        for (int row = 0; row < rows; row++)
            if (row < at_row || row >= at_row + n_tok)
                untouched += !memcmp(c2[i] + 2 * (size_t)row * kvd, poison_bytes + 2 * (size_t)row * kvd, 2 * (size_t)kvd);
        CHECKF(untouched == rows - n_tok, "rope_store: %d of %d rows outside the stored ones kept their poison",
               untouched, rows - n_tok);
    }
    double *ref = malloc(sizeof(double) * (size_t)n_tok * qd);
    for (int t = 0; t < n_tok; t++)
        for (int h = 0; h < n_head; h++) {
            double *p = ref + (size_t)t * qd + h * hd;
            for (int e = 0; e < hd; e++) p[e] = q[(size_t)t * qd + h * hd + e];
            for (int j = 0; j < pairs; j++) {
                double x0 = p[j], x1 = p[j + pairs], c = cs[t * pairs + j], sv = sn[t * pairs + j];
                p[j] = x0 * c - x1 * sv;
                p[j + pairs] = x1 * c + x0 * sv;
            }
        }
    double e = check_rel_err_f32(b[0], ref, (size_t)n_tok * qd);
    CHECKF(e < 1e-6, "rope_store q: rel err %.3g", e);
    free(ref); free(q); free(k); free(v); free(cs); free(sn); free(poison_bytes);
    for (int i = 0; i < 2; i++) { free(a[i]); free(b[i]); free(c1[i]); free(c2[i]); }
    oc_cl_buf_free(q1); oc_cl_buf_free(k1); oc_cl_buf_free(q2); oc_cl_buf_free(k2); oc_cl_buf_free(dv);
    oc_cl_buf_free(kc1); oc_cl_buf_free(vc1); oc_cl_buf_free(kc2); oc_cl_buf_free(vc2);
    oc_cl_buf_free(dc); oc_cl_buf_free(ds);
}

static void test_rope_store(void) {
    if (!need_dev()) return;
    check_rng r = { 22 };
    check_rope_store(&r, 1, 12, 2, 128, 64, 37);   /* the 2B model's decode step */
    check_rope_store(&r, 1, 4, 4, 37, 18, 0);      /* odd head dim: one element past the pairs */
    check_rope_store(&r, 3, 6, 2, 40, 16, 5);      /* partial rotation, several tokens */
    oc_error err;
    oc_cl_buf *b = dbuf(4096);
    oc_cl_mat t = oc_cl_mat_of(b, 0, 4);
    CHECK(oc_cl_rope_store(g_dev, oc_cl_mat_of(b, 0, 64), b, 0, b, 0, 32, 1, 2, 1, 32, 17, t, t, b, 0, b, 0, &err) ==
          OC_ERR_INVALID);   /* 17 pairs in 32 */
    CHECK(oc_cl_rope_store(g_dev, oc_cl_mat_of(b, 0, 64), b, 0, b, 0, 32, 1, 2, 1, 32, 4, t, t, b, 2040, b, 0, &err) ==
          OC_ERR_RANGE);     /* the k row past the cache */
    CHECK(oc_cl_rope_store(g_dev, oc_cl_mat_of(b, 1000, 64), b, 0, b, 0, 32, 1, 2, 1, 32, 4, t, t, b, 0, b, 0, &err) ==
          OC_ERR_RANGE);     /* q past its buffer */
    oc_cl_buf_free(b);
}

static void test_kv_store(void) {
    if (!need_dev()) return;
    check_rng r = { 16 };
    const int n_rows = 4, n_cols = 40, src_stride = 45, dst_stride = 48, at_row = 3;
    float *src = rand_f32(&r, (size_t)n_rows * src_stride, -70000.0f, 70000.0f);
    src[0] = 1.0f + 1.0f / 2048.0f;   /* a tie: rounds to even (1.0) */
    src[1] = 1e-6f;                   /* subnormal in f16 */
    src[2] = -0.0f;
    for (int f16 = 1; f16 >= 0; f16--) {
        size_t es = f16 ? 2 : 4, n = (size_t)(at_row + n_rows + 1) * dst_stride;
        oc_cl_buf *ds = dup_host(src, sizeof(float) * n_rows * src_stride), *dd = dbuf(es * n);
        poison(dd);
        oc_error err;
        CHECKF(oc_cl_kv_store(g_dev, oc_cl_mat_of(ds, 0, src_stride), n_rows, n_cols, dd,
                              f16 ? OC_DTYPE_F16 : OC_DTYPE_F32, (int64_t)at_row * dst_stride, dst_stride, &err) == OC_OK,
               "%s", err.message);
        unsigned char *got = malloc(es * n);
        CHECK(oc_cl_download(g_dev, dd, 0, got, es * n, &err) == OC_OK);
        int bad = 0;
        for (int i = 0; i < n_rows; i++)
            for (int c = 0; c < n_cols; c++) {
                size_t at = (size_t)(at_row + i) * dst_stride + c;
                float v = src[i * src_stride + c];
                if (f16) bad += ((uint16_t *)got)[at] != oc_f32_to_f16(v);
                else bad += memcmp((float *)got + at, &v, 4) != 0;
            }
        /* rows before the offset untouched */
        if (f16) bad += ((uint16_t *)got)[0] != (uint16_t)(NAN_BITS >> 16) && ((uint16_t *)got)[0] != (uint16_t)NAN_BITS;
        else bad += !isnan(((float *)got)[0]);
        CHECKF(!bad, "kv_store f16=%d: %d elements differ", f16, bad);
        free(got);
        oc_cl_buf_free(ds); oc_cl_buf_free(dd);
    }
    free(src);
}

/* oc_cl_keep_rows (the KV cache's in-place compaction): random kept sets with runs of consecutive
 * rows (moved as one rectangle copy when the shift allows) and single rows, at offsets inside a
 * row and at a whole-row base, against the host's compaction of the same bytes; rows past the
 * kept count and bytes outside each row stay as they were. Both paths: the copies, and with an
 * index buffer the one-launch kernel (kv.cl oc_kv_keep), over sets longer than its step (512
 * rows of 32 bytes) so that its steps' order is tested too. */
static void test_keep_rows(void) {
    if (!need_dev()) return;
    check_rng r = { 77 };
    oc_cl_buf *idx = dbuf(3000 * sizeof(int32_t));
    int32_t *kept = malloc(3000 * sizeof(int32_t));
    for (int trial = 0; trial < 24; trial++) {
        const size_t stride = 96, row = trial % 3 == 2 ? 96 : 32, n_rows = trial >= 12 ? 3000 : 300;
        size_t off = (size_t)(trial % 3) * 32 + (trial % 4 == 3 ? 5 * stride : 0);
        if (off % stride + row > stride) off -= off % stride;
        size_t n_bytes = off + n_rows * stride;
        unsigned char *h = malloc(n_bytes), *want = malloc(n_bytes), *got = malloc(n_bytes);
        for (size_t i = 0; i < n_bytes; i++) h[i] = (unsigned char)check_rng_int(&r, 0, 255);
        int32_t n_kept = 0;
        for (int32_t j = 0; j < (int32_t)n_rows;) {   /* runs of 1-40 kept rows, gaps of 0-30 */
            int32_t run = check_rng_int(&r, 1, 40), gap = check_rng_int(&r, 0, trial % 2 ? 3 : 30);
            for (int32_t k = 0; k < run && j < (int32_t)n_rows; k++) kept[n_kept++] = j++;
            j += gap;
        }
        memcpy(want, h, n_bytes);
        for (int32_t k = 0; k < n_kept; k++) memmove(want + off + (size_t)k * stride, h + off + (size_t)kept[k] * stride, row);
        oc_cl_buf *b = dup_host(h, n_bytes);
        oc_error err;
        oc_cl_buf *use = trial % 4 >= 2 ? idx : NULL;
        CHECKF(oc_cl_keep_rows(g_dev, b, off, stride, row, kept, n_kept, use, &err) == OC_OK, "trial %d: %s", trial,
               err.message);
        CHECK(oc_cl_download(g_dev, b, 0, got, n_bytes, &err) == OC_OK);
        CHECKF(memcmp(got, want, n_bytes) == 0, "trial %d (%s, %d kept of %zu, off %zu, row %zu): bytes differ", trial,
               use ? "one launch" : "copies", n_kept, n_rows, off, row);
        oc_cl_buf_free(b);
        free(h); free(want); free(got);
    }
    free(kept);
    oc_cl_buf_free(idx);
}

static void test_argmax(void) {
    if (!need_dev()) return;
    check_rng r = { 17 };
    const int rows = 4, n = 3001;
    float *x = rand_f32(&r, (size_t)rows * n, -5.0f, 5.0f);
    x[17] = 9.0f; x[2500] = 9.0f;          /* row 0: a tie, the lower index wins */
    x[n + 5] = NAN; x[n + 6] = 100.0f;     /* row 1: NaN ignored */
    for (int i = 0; i < n; i++) x[2 * n + i] = NAN;   /* row 2: all NaN -> 0 */
    x[3 * n + n - 1] = 50.0f;              /* row 3: the last element */
    oc_cl_buf *dx = dup_host(x, sizeof(float) * rows * n), *di = dbuf(sizeof(int32_t) * (rows + 1));
    poison(di);
    oc_error err;
    CHECKF(oc_cl_argmax(g_dev, oc_cl_mat_of(dx, 0, n), rows, n, di, 1, &err) == OC_OK, "%s", err.message);
    int32_t got[5];
    CHECK(oc_cl_download(g_dev, di, 0, got, sizeof got, &err) == OC_OK);
    CHECKF(got[1] == 17 && got[2] == 6 && got[3] == 0 && got[4] == n - 1, "argmax %d %d %d %d", got[1], got[2], got[3],
           got[4]);
    free(x);
    oc_cl_buf_free(dx); oc_cl_buf_free(di);
}

/* ---- attention ---------------------------------------------------------------------------------------------- */

typedef struct attn_case {
    const char *name;
    int n_q, n_kv, n_head, n_head_kv, d, q_offset;
    oc_attn_mask_kind mask;
    const oc_token_span *seg;
    int n_seg;
    const oc_head_pattern *pat;
    const oc_token_span *images;   /* layout spans */
    int n_images, n_tokens;        /* layout size */
    int32_t kv_dtype;
    int force_split;
} attn_case;

/* Run one case on the CPU engine (scalar kernels) and on the device with the same buffers and
 * strides; outputs within 1e-4 relative (the CPU engine's own tolerance against double), kept and
 * skipped pair counts equal. */
static int g_kv_aligned;   /* check_attn: cache rows of 8-half multiples (decode.cl's 16-byte K loads) */

static void check_attn(const attn_case *c, oc_cl_attn *at, check_rng *r, int host_patterns) {
    int d = c->d;
    int64_t qst = (int64_t)c->n_head * d + 3, ost = (int64_t)c->n_head * d + 1;
    int64_t kst = g_kv_aligned ? (d + 7) / 8 * 8 + 8 : d + 5;   /* head-major cache, padded rows */
    int64_t ksh = (int64_t)(c->n_kv > 0 ? c->n_kv : 1) * kst;
    size_t es = c->kv_dtype == OC_DTYPE_F16 ? 2 : 4, nq = (size_t)(c->n_q > 0 ? c->n_q : 1);
    size_t kv_elems = (size_t)c->n_head_kv * (size_t)ksh;
    float *q = rand_f32(r, nq * (size_t)qst, -2.0f, 2.0f);
    unsigned char *k = malloc(es * kv_elems), *v = malloc(es * kv_elems);
    for (size_t i = 0; i < kv_elems; i++) {
        float a = check_rng_uniform(r, -1.0f, 1.0f), b = check_rng_uniform(r, -1.0f, 1.0f);
        if (es == 2) { ((uint16_t *)k)[i] = oc_f32_to_f16(a); ((uint16_t *)v)[i] = oc_f32_to_f16(b); }
        else { ((float *)k)[i] = a; ((float *)v)[i] = b; }
    }
    float *out_cpu = malloc(sizeof(float) * nq * (size_t)ost);
    check_poison_f32(out_cpu, nq * (size_t)ost);
    oc_token_layout *layout = NULL;
    oc_error err;
    if (c->n_images && oc_layout_build(&layout, c->n_tokens, c->images, c->n_images, OC_LAYOUT_DEFAULT_SINK_FRACTION, NULL,
                                       &err) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "%s", err.message);
        return;
    }
    /* one call for both engines: only where the tensors live differs */
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = c->n_q; a.n_kv = c->n_kv; a.n_head = c->n_head; a.n_head_kv = c->n_head_kv; a.head_dim = d;
    a.q_stride_token = qst; a.q_stride_head = d;
    a.kv_dtype = c->kv_dtype;
    a.k_stride_token = a.v_stride_token = kst; a.k_stride_head = a.v_stride_head = ksh;
    a.out_stride_token = ost; a.out_stride_head = d;
    a.scale = 1.0f / sqrtf((float)d);
    a.mask = c->mask; a.q_offset = c->q_offset; a.segments = c->seg; a.n_segments = c->n_seg;
    a.patterns = c->pat; a.layout = layout;
    oc_attn_host mem = { q, k, v, out_cpu };
    oc_attn_dims dims = { c->n_q, c->n_kv, c->n_head, c->n_head_kv, d };
    size_t sb = oc_attn_scratch_bytes(&dims, 1);
    void *scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, sb);
    oc_attn_stats cpu_st = { 0, 0, 0 }, gpu_st = { 0, 0, 0 };
    CHECKF(oc_attn_run(&a, &mem, OC_ISA_SCALAR, NULL, scratch, sb, &cpu_st, &err) == OC_OK, "%s: cpu: %s", c->name, err.message);

    oc_cl_buf *dq = dup_host(q, sizeof(float) * nq * (size_t)qst), *dk = dup_host(k, es * kv_elems),
              *dv = dup_host(v, es * kv_elems), *dout = dbuf(sizeof(float) * nq * (size_t)ost), *dp = NULL;
    if (c->pat && !host_patterns) {
        dp = dbuf(sizeof(int32_t) * OC_CL_PATTERN_INTS * (size_t)(c->n_head + 2));
        CHECKF(dp && oc_cl_patterns_write(g_dev, dp, 2, c->pat, c->n_head, &err) == OC_OK, "%s", err.message);
    }
    poison(dout);
    oc_cl_attn_force_split(at, c->force_split);
    oc_status st = oc_cl_attn_prepare(at, &a, &err);
    CHECKF(st == OC_OK, "%s: prepare: %s", c->name, err.message);
    oc_cl_attn_bufs io = { dq, dk, dv, dout, dp, 2 };   /* dp NULL: the call's host patterns */
    if (st == OC_OK) {
        st = oc_cl_attn_run(at, &a, &io, &gpu_st, &err);
        CHECKF(st == OC_OK, "%s: run: %s", c->name, err.message);
    }
    float *out_gpu = fetch(dout);
    /* every output row (token, head): relative error against the CPU engine's row */
    double worst = 0;
    int bad_gap = 0;
    double *row_ref = malloc(sizeof(double) * (size_t)d);
    for (int i = 0; i < c->n_q; i++) {
        for (int h = 0; h < c->n_head; h++) {
            const float *cr = out_cpu + (size_t)i * ost + (size_t)h * d, *gr = out_gpu + (size_t)i * ost + (size_t)h * d;
            double n2 = 0;
            for (int e = 0; e < d; e++) { row_ref[e] = cr[e]; n2 += (double)cr[e] * cr[e]; }
            double e = n2 > 0 ? check_rel_err_f32(gr, row_ref, (size_t)d) : 0;
            if (n2 == 0)   /* a row with every key masked is 0 */
                for (int x = 0; x < d; x++) if (gr[x] != 0.0f) e = INFINITY;
            if (e > worst) worst = e;
        }
        bad_gap += !isnan(out_gpu[(size_t)i * ost + (size_t)c->n_head * d]);   /* the padding stays poisoned */
    }
    CHECKF(worst < 1e-4, "%s: worst row rel err %.3g vs the CPU engine", c->name, worst);
    CHECKF(!bad_gap, "%s: %d writes past the heads", c->name, bad_gap);
    CHECKF(gpu_st.flops_kept == cpu_st.flops_kept && gpu_st.flops_skipped == cpu_st.flops_skipped,
           "%s: kept %llu / skipped %llu FLOPs, the CPU engine %llu / %llu", c->name,
           (unsigned long long)gpu_st.flops_kept, (unsigned long long)gpu_st.flops_skipped,
           (unsigned long long)cpu_st.flops_kept, (unsigned long long)cpu_st.flops_skipped);
    CHECK(gpu_st.flops_executed >= gpu_st.flops_kept);
    free(row_ref); free(out_gpu); free(q); free(k); free(v); free(out_cpu);
    oc_port_aligned_free(scratch);
    oc_layout_free(layout);
    oc_cl_buf_free(dq); oc_cl_buf_free(dk); oc_cl_buf_free(dv); oc_cl_buf_free(dout); oc_cl_buf_free(dp);
}

static void run_cases(const attn_case *cases, int n, int max_images, int max_seg) {
    check_rng r = { 18 };
    for (int i = 0; i < n; i++) {
        const attn_case *c = &cases[i];
        oc_cl_attn_limits lim = { OC_MAX(c->n_q, 1), c->n_head, c->n_head_kv, c->d, max_images, max_seg, c->n_kv, c->n_kv };
        oc_cl_attn *at = NULL;
        oc_error err;
        CHECKF(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_OK, "%s: %s", c->name, err.message);
        if (at) check_attn(c, at, &r, 0);
        oc_cl_attn_close(at);
    }
}

static void test_attn_dense(void) {
    if (!need_dev()) return;
    static const oc_token_span seg[3] = { { 0, 30 }, { 30, 64 }, { 70, 100 } };
    const attn_case cases[] = {
        { "causal 100, d64, GQA 4/2, f16", 100, 100, 4, 2, 64, 0, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "causal 100, d64, f32", 100, 100, 2, 1, 64, 0, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F32, 0 },
        { "vision bidirectional 77, d80", 77, 77, 3, 3, 80, 0, OC_ATTN_BIDIRECTIONAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F32, 0 },
        { "causal prefix 40 of 90, d128", 40, 90, 4, 2, 128, 50, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "segments with a gap, d80", 100, 100, 2, 2, 80, 0, OC_ATTN_SEGMENTS, seg, 3, NULL, NULL, 0, 0, OC_DTYPE_F32, 0 },
        { "odd head dim 37", 45, 45, 2, 1, 37, 0, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "no keys", 3, 0, 2, 1, 64, 0, OC_ATTN_BIDIRECTIONAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
    };
    run_cases(cases, (int)OC_ARRAY_LEN(cases), 0, 3);
}

/* One query row over every key it keeps (decode: opencl/kernels/decode.cl when the heads are dense and
 * the cache f16): key counts around its block of 64 and chunk edges, head dims that are not
 * multiples of 8 or of its 64 items, GQA groups, forced splits, a causal prefix, both cache row
 * alignments (16-byte loads or one half at a time); f32 caches and dense-pattern calls too. */
static void test_attn_decode(void) {
    if (!need_dev()) return;
    static const oc_head_pattern dense4[4] = { { .kind = OC_PATTERN_DENSE }, { .kind = OC_PATTERN_DENSE },
                                               { .kind = OC_PATTERN_DENSE }, { .kind = OC_PATTERN_DENSE } };
    const attn_case cases[] = {
        { "decode 1 key, d128, GQA 12/2", 1, 1, 12, 2, 128, 0, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 63 keys, d64", 1, 63, 4, 2, 64, 62, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 64 keys, d128", 1, 64, 4, 1, 128, 63, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 65 keys, d80", 1, 65, 6, 3, 80, 64, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 513 keys, d128, GQA 12/2", 1, 513, 12, 2, 128, 512, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 700 keys, d37", 1, 700, 2, 1, 37, 699, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 4100 keys, d128, GQA 12/2", 1, 4100, 12, 2, 128, 4099, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode 300 keys, split 7", 1, 300, 4, 2, 64, 299, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 7 },
        { "decode 130 keys, split 64", 1, 130, 2, 2, 40, 129, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 64 },
        { "decode causal prefix 90 of 200", 1, 200, 4, 2, 64, 89, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode bidirectional 150, d24", 1, 150, 3, 1, 24, 0, OC_ATTN_BIDIRECTIONAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode dense patterns 333", 1, 333, 4, 2, 128, 332, OC_ATTN_CAUSAL, NULL, 0, dense4, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "decode f32 cache 333", 1, 333, 4, 2, 64, 332, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F32, 0 },
    };
    for (g_kv_aligned = 0; g_kv_aligned < 2; g_kv_aligned++) run_cases(cases, (int)OC_ARRAY_LEN(cases), 0, 0);
    g_kv_aligned = 0;
}

static void test_attn_patterns(void) {
    if (!need_dev()) return;
    /* 3 images: 40 + 55 + 37 tokens, sinks 4, 6, 4 */
    static const oc_token_span img[3] = { { 5, 45 }, { 47, 102 }, { 130, 167 } };
    static const oc_head_pattern pat6[6] = {
        PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_SINK, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE, 0, 0),
        PAT(OC_PATTERN_INTRA_IMAGE_SINK, 0, 0), PAT(OC_PATTERN_A_SHAPE, 4, 16), PAT(OC_PATTERN_A_SHAPE, 0, 40),
    };
    static const oc_head_pattern pat4[4] = {
        PAT(OC_PATTERN_A_SHAPE, 8, 24), PAT(OC_PATTERN_SINK, 0, 0), PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE, 0, 0),
    };
    /* MMInference's dynamic heads are prefill patterns: a decode call runs them dense on both engines */
    static const oc_head_pattern dyn4[4] = {
        { .kind = OC_PATTERN_VERTICAL_SLASH, .n_vertical = 8, .n_slash = 2 }, PAT(OC_PATTERN_SINK, 0, 0),
        { .kind = OC_PATTERN_GRID, .grid_max_stride = 16, .grid_lines = OC_GRID_VLINE }, PAT(OC_PATTERN_A_SHAPE, 2, 20),
    };
    const attn_case cases[] = {
        { "dynamic heads in decode: dense", 3, 300, 4, 2, 64, 297, OC_ATTN_CAUSAL, NULL, 0, dyn4, img, 3, 170, OC_DTYPE_F16, 0 },
        { "patterns prefill 200, GQA 6/2, f16", 200, 200, 6, 2, 64, 0, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 180, OC_DTYPE_F16, 0 },
        { "patterns prefill d128 f32", 170, 170, 6, 3, 128, 0, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 170, OC_DTYPE_F32, 0 },
        { "patterns chunk after a cache", 60, 200, 6, 2, 64, 140, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 200, OC_DTYPE_F16, 0 },
        { "a-shape bidirectional", 90, 90, 4, 1, 80, 0, OC_ATTN_BIDIRECTIONAL, NULL, 0, pat4, NULL, 0, 0, OC_DTYPE_F32, 0 },
        { "decode, stacked", 1, 300, 6, 2, 64, 299, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 170, OC_DTYPE_F16, 0 },
        { "decode, image query, split 3", 1, 300, 6, 2, 64, 60, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 300, OC_DTYPE_F16, 3 },
        { "3 queries, stacked, split 2", 3, 140, 4, 1, 128, 95, OC_ATTN_CAUSAL, NULL, 0, pat4, img, 3, 170, OC_DTYPE_F32, 2 },
        { "decode 1100 keys, auto split", 1, 1100, 4, 1, 64, 1099, OC_ATTN_CAUSAL, NULL, 0, pat4, img, 3, 170, OC_DTYPE_F16, 0 },
    };
    run_cases(cases, (int)OC_ARRAY_LEN(cases), 3, 0);
}

/* MMInference's dynamic heads (Vertical-Slash, Grid; cl_attn.h) mixed with static ones, prefill:
 *  - with the CPU's index (oc_attn_dyn_build) the device keeps exactly the CPU engine's pairs
 *    (kept and skipped FLOP counters equal) and matches dense attention with that mask given
 *    explicitly (the CPU engine's OC_ATTN_EXPLICIT path, the mask from tests/support/dyn_ref.c);
 *  - the device's own estimate (opencl/kernels/dyn.cl) chooses the same index as the CPU's. */
typedef struct dyn_case {
    const char *name;
    int n_q, n_kv, n_head, n_head_kv, d, q_offset;
    oc_attn_mask_kind mask;
    int32_t dtype;
    int max_kv;   /* the context's max_n_kv (0: n_kv): larger ones cut the estimate into more batches */
} dyn_case;

/* seed >= 100: Vertical-Slash and Grid heads only (a call with no first launch: cl_attn.c run_call) */
static void dyn_patterns(oc_head_pattern *pat, int n_head, int seed) {
    for (int h = 0; h < n_head; h++) {
        memset(&pat[h], 0, sizeof pat[h]);
        switch ((h + seed) % (seed >= 100 ? 3 : 5)) {
        case 0: pat[h].kind = OC_PATTERN_VERTICAL_SLASH; pat[h].n_vertical = 7 + 13 * h; pat[h].n_slash = 2 + h % 3; break;
        case 1: pat[h].kind = OC_PATTERN_GRID; pat[h].grid_max_stride = 24; pat[h].grid_lines = 1 + (h + 3 * seed) % 7; break;
        case 2: pat[h].kind = OC_PATTERN_GRID; pat[h].grid_stride = 5 + h; pat[h].grid_lines = 1 + (2 * h + seed) % 7; break;
        case 3: pat[h].kind = OC_PATTERN_A_SHAPE; pat[h].n_sink = 4; pat[h].n_local = 20; break;
        default: pat[h].kind = OC_PATTERN_DENSE; break;
        }
    }
}

static int same_index(const oc_dyn_head *x, const oc_dyn_head *y, oc_pattern_kind kind) {
    if (kind == OC_PATTERN_GRID) return x->stride == y->stride && x->phase == y->phase;
    if (kind != OC_PATTERN_VERTICAL_SLASH) return 1;
    return x->n_vertical == y->n_vertical && x->n_slash == y->n_slash &&
           !memcmp(x->vertical, y->vertical, sizeof(int32_t) * (size_t)x->n_vertical) &&
           !memcmp(x->slash, y->slash, sizeof(int32_t) * (size_t)x->n_slash);
}

static void check_dyn(const dyn_case *c, int seed) {
    check_rng r = { 0x5eedULL + (unsigned long long)seed };
    int d = c->d, H = c->n_head;
    int64_t qst = (int64_t)H * d + 3, ost = (int64_t)H * d + 1, kst = d + 5, ksh = (int64_t)c->n_kv * kst;
    size_t es = c->dtype == OC_DTYPE_F16 ? 2 : 4, nq = (size_t)c->n_q, kv_elems = (size_t)c->n_head_kv * (size_t)ksh;
    float *q = rand_f32(&r, nq * (size_t)qst, -3.0f, 3.0f);
    unsigned char *k = malloc(es * kv_elems), *v = malloc(es * kv_elems);
    for (size_t i = 0; i < kv_elems; i++) {
        float x = check_rng_uniform(&r, -1.0f, 1.0f), y = check_rng_uniform(&r, -1.0f, 1.0f);
        if (es == 2) { ((uint16_t *)k)[i] = oc_f32_to_f16(x); ((uint16_t *)v)[i] = oc_f32_to_f16(y); }
        else { ((float *)k)[i] = x; ((float *)v)[i] = y; }
    }
    oc_head_pattern pat[16];
    dyn_patterns(pat, H, seed);
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = c->n_q; a.n_kv = c->n_kv; a.n_head = H; a.n_head_kv = c->n_head_kv; a.head_dim = d;
    a.q_stride_token = qst; a.q_stride_head = d; a.kv_dtype = c->dtype;
    a.k_stride_token = a.v_stride_token = kst; a.k_stride_head = a.v_stride_head = ksh;
    a.out_stride_token = ost; a.out_stride_head = d; a.scale = 1.0f / sqrtf((float)d);
    a.mask = c->mask; a.q_offset = c->q_offset; a.patterns = pat;
    size_t n_out = nq * (size_t)ost;
    float *out_cpu = malloc(sizeof(float) * n_out), *out_ref = malloc(sizeof(float) * n_out);
    oc_attn_host mem = { q, k, v, out_cpu };
    oc_attn_dims dims = { c->n_q, c->n_kv, H, c->n_head_kv, d };
    size_t sb = oc_attn_scratch_bytes(&dims, 1), db = oc_attn_dyn_bytes(&dims, 1);
    void *scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, sb), *dmem = oc_port_aligned_alloc(OC_MEM_ALIGN, db);
    oc_error err = { OC_OK, "" };
    const oc_attn_dyn *cpu_dyn = NULL;
    REQUIREF(oc_attn_dyn_build(&a, &mem, OC_ISA_SCALAR, NULL, dmem, db, &cpu_dyn, &err) == OC_OK, "%s: %s", c->name,
             err.message);
    oc_attn_call ai = a;
    ai.dyn = cpu_dyn;
    oc_attn_stats cpu_st = { 0, 0, 0 }, dev_st = { 0, 0, 0 }, ref_st = { 0, 0, 0 };
    check_poison_f32(out_cpu, n_out);
    REQUIREF(oc_attn_run(&ai, &mem, OC_ISA_SCALAR, NULL, scratch, sb, &cpu_st, &err) == OC_OK, "%s: %s", c->name, err.message);
    /* the same mask, explicit, dense */
    uint8_t *em = malloc((size_t)H * nq * (size_t)c->n_kv);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < c->n_q; i++)
            for (int j = 0; j < c->n_kv; j++)
                em[((size_t)h * nq + (size_t)i) * (size_t)c->n_kv + (size_t)j] =
                    (uint8_t)ref_dyn_keep(c->mask, &pat[h], &cpu_dyn->heads[h], c->q_offset + i, j);
    oc_attn_call ae = a;
    ae.mask = OC_ATTN_EXPLICIT; ae.patterns = NULL; ae.explicit_mask = em;
    ae.explicit_stride_q = c->n_kv; ae.explicit_stride_head = (int64_t)nq * c->n_kv;
    oc_attn_host mem_ref = { q, k, v, out_ref };
    check_poison_f32(out_ref, n_out);
    REQUIRE(oc_attn_run(&ae, &mem_ref, OC_ISA_SCALAR, NULL, scratch, sb, &ref_st, &err) == OC_OK);
    CHECKF(ref_st.flops_kept == cpu_st.flops_kept, "%s: explicit mask keeps %llu FLOPs, the sparse CPU run %llu",
           c->name, (unsigned long long)ref_st.flops_kept, (unsigned long long)cpu_st.flops_kept);

    oc_cl_attn_limits lim = { c->n_q, H, c->n_head_kv, d, 0, 0, c->max_kv ? c->max_kv : c->n_kv, 0 };
    oc_cl_attn *at = NULL;
    REQUIREF(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_OK, "%s: %s", c->name, err.message);
    /* the prefill heads run the 64-row build wherever the device has one and its local memory
     * takes the head dim (the checks below then test that build) */
    const oc_cl_caps *caps = oc_cl_device_caps(g_dev);
    oc_cl_caps dc = *caps;
    dc.attn_rows_per_item = caps->attn_dyn_rows_per_item;
    int dyn64 = caps->attn_dyn_rows_per_item && oc_cl_attn_local_bytes(&dc, d) <= caps->local_mem_bytes;
    CHECKF(oc_cl_attn_dyn_rows(at) == (dyn64 ? 64 : caps->attn_row_groups * caps->attn_rows_per_item),
           "%s: the prefill heads' launch takes %d rows", c->name, (int)oc_cl_attn_dyn_rows(at));
    oc_cl_buf *dq = dup_host(q, sizeof(float) * nq * (size_t)qst), *dk = dup_host(k, es * kv_elems),
              *dv = dup_host(v, es * kv_elems), *dout = dbuf(sizeof(float) * n_out);
    oc_cl_attn_bufs io = { dq, dk, dv, dout, NULL, 0 };
    /* without an index the run is refused, with a message */
    CHECK(oc_cl_attn_run(at, &a, &io, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "index"));
    poison(dout);
    CHECKF(oc_cl_attn_run(at, &ai, &io, &dev_st, &err) == OC_OK, "%s: run: %s", c->name, err.message);
    float *out_dev = fetch(dout);
    double worst = 0, worst_cpu = 0;
    double *row = malloc(sizeof(double) * (size_t)d);
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < H; h++) {
            size_t at_row = (size_t)i * (size_t)ost + (size_t)h * (size_t)d;
            for (int e = 0; e < d; e++) row[e] = out_ref[at_row + (size_t)e];
            double e1 = check_rel_err_f32(out_dev + at_row, row, (size_t)d), e2 = check_rel_err_f32(out_cpu + at_row, row, (size_t)d);
            worst = e1 > worst || e1 != e1 ? e1 : worst;
            worst_cpu = e2 > worst_cpu || e2 != e2 ? e2 : worst_cpu;
        }
    CHECKF(worst < 1e-4, "%s: device vs dense with the explicit mask: worst row rel err %.3g", c->name, worst);
    CHECKF(worst_cpu < 1e-4, "%s: CPU sparse vs explicit mask: worst row rel err %.3g", c->name, worst_cpu);
    CHECKF(dev_st.flops_kept == cpu_st.flops_kept && dev_st.flops_skipped == cpu_st.flops_skipped,
           "%s: device kept %llu / skipped %llu FLOPs, the CPU engine %llu / %llu", c->name,
           (unsigned long long)dev_st.flops_kept, (unsigned long long)dev_st.flops_skipped,
           (unsigned long long)cpu_st.flops_kept, (unsigned long long)cpu_st.flops_skipped);
    CHECK(dev_st.flops_skipped > 0 && dev_st.flops_executed >= dev_st.flops_kept);
    /* the device's own estimate and choice, serial and on a pool of 3 threads (the same) */
    oc_pool *pool = NULL;
    REQUIRE(oc_pool_open(&pool, 3, NULL, &err) == OC_OK);
    for (int pass = 0; pass < 2; pass++) {
        oc_cl_attn_set_pool(at, pass ? pool : NULL);
        const oc_attn_dyn *dev_dyn = NULL;
        CHECKF(oc_cl_attn_dyn_build(at, &a, &io, &dev_dyn, &err) == OC_OK, "%s: dyn build: %s", c->name, err.message);
        for (int h = 0; dev_dyn && h < H; h++)
            CHECKF(same_index(&dev_dyn->heads[h], &cpu_dyn->heads[h], pat[h].kind),
                   "%s head %d (kind %d, %s): the device's estimate chose another index than the CPU's", c->name, h,
                   (int)pat[h].kind, pass ? "pool" : "serial");
    }
    oc_cl_attn_set_pool(at, NULL);
    oc_pool_close(pool);
    free(row); free(out_dev); free(em); free(q); free(k); free(v); free(out_cpu); free(out_ref);
    oc_port_aligned_free(scratch);
    oc_port_aligned_free(dmem);
    oc_cl_buf_free(dq); oc_cl_buf_free(dk); oc_cl_buf_free(dv); oc_cl_buf_free(dout);
    oc_cl_attn_close(at);
}

static void test_attn_dynamic(void) {
    if (!need_dev()) return;
    static const dyn_case cases[] = {
        { "causal 131 (odd), MHA, d64, f16", 131, 131, 4, 4, 64, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16, 0 },
        { "chunk after 45 keys, GQA 3, d72, f32", 200, 245, 6, 2, 72, 45, OC_ATTN_CAUSAL, OC_DTYPE_F32, 0 },
        { "GQA 6 (the 2B decoder), d80, f16", 257, 257, 6, 1, 80, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16, 0 },
        { "bidirectional (vision), d128, f32", 150, 150, 5, 5, 128, 0, OC_ATTN_BIDIRECTIONAL, OC_DTYPE_F32, 0 },
        { "causal 259, GQA 2, d128, f16", 259, 259, 4, 2, 128, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16, 0 },
        /* the estimate's batches: a context opened for more keys than the call has (the buffers'
         * strides follow the call), and one so long that every job is a batch of its own */
        { "chunk after 45 keys, 3000-key context", 200, 245, 6, 2, 72, 45, OC_ATTN_CAUSAL, OC_DTYPE_F32, 3000 },
        { "causal 259, one job per estimate batch", 259, 259, 6, 2, 64, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16, 100000 },
    };
    for (int k = 0; k < (int)OC_ARRAY_LEN(cases); k++) check_dyn(&cases[k], k);
    /* every head a prefill head: the second launch alone */
    check_dyn(&cases[0], 100);
    check_dyn(&cases[4], 101);
}

/* Q-Boundary and 2D-Boundary heads (mminference.txt Sec. 3.2, Alg. 2-3; cl_attn.h) beside plain
 * Vertical-Slash and Grid heads, prefill, on the device's second launch: with the CPU's index the
 * device's output equals dense attention with the same mask given explicitly (the CPU engine's
 * OC_ATTN_EXPLICIT path; the mask from tests/support/dyn_ref.c, written from dyn.h's definitions),
 * and it keeps exactly the CPU engine's pairs; the device's own estimate (per modality from its
 * last 64 queries, 2D pairs by rank) chooses the CPU's index. Parts of every kind: dense, A-shape,
 * Vertical-Slash, Grid, and a dynamic part of a modality with fewer than 64 queries (dense). */
typedef struct bnd_case {
    const char *name;
    int n_q, n_kv, n_head, n_head_kv, d, q_offset;
    oc_attn_mask_kind mask;
    int32_t dtype;
    int n_img;
    oc_token_span img[3];
    int max_kv;   /* the context's max_n_kv (0: n_kv), as dyn_case's */
    int no_grid;  /* Vertical-Slash where bnd_patterns puts a Grid: every index the device's to choose */
    int ties;     /* key rows repeat with period 7: exact ties among column and diagonal scores */
} bnd_case;

static oc_modal_pattern modal_of(oc_pattern_kind kind, int a, int b) {
    oc_modal_pattern s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    if (kind == OC_PATTERN_A_SHAPE) { s.n_sink = a; s.n_local = b; }
    if (kind == OC_PATTERN_VERTICAL_SLASH) { s.n_vertical = a; s.n_slash = b; }
    if (kind == OC_PATTERN_GRID) { s.grid_stride = a; s.grid_max_stride = 16; s.grid_lines = b; }
    return s;
}

static void bnd_patterns(oc_head_pattern *pat, int n_head, int seed, int no_grid) {
    for (int h = 0; h < n_head; h++) {
        oc_head_pattern *p = &pat[h];
        memset(p, 0, sizeof *p);
        switch ((h + seed) % 5) {
        case 0:
            p->kind = OC_PATTERN_Q_BOUNDARY;
            p->modal[0] = modal_of(OC_PATTERN_VERTICAL_SLASH, 7 + h, 2);
            p->modal[1] = modal_of(OC_PATTERN_GRID, 0, 1 + (h + seed) % 7);
            break;
        case 1:
            p->kind = OC_PATTERN_Q_BOUNDARY;
            p->modal[0] = modal_of(OC_PATTERN_A_SHAPE, 4, 20);
            p->modal[1] = modal_of(OC_PATTERN_VERTICAL_SLASH, 5, 1 + h % 3);
            break;
        case 2:
            p->kind = OC_PATTERN_BOUNDARY_2D;
            p->pair[0][0] = modal_of(OC_PATTERN_VERTICAL_SLASH, 6, 2);
            p->pair[0][1] = modal_of(OC_PATTERN_A_SHAPE, 3, 17);
            p->pair[1][0] = modal_of(OC_PATTERN_DENSE, 0, 0);
            p->pair[1][1] = modal_of(OC_PATTERN_GRID, 0, 2 + (h + seed) % 6);
            break;
        case 3:
            p->kind = OC_PATTERN_BOUNDARY_2D;
            p->pair[0][0] = modal_of(OC_PATTERN_GRID, 5, 6);
            p->pair[0][1] = modal_of(OC_PATTERN_GRID, 5, 3);
            p->pair[1][0] = modal_of(OC_PATTERN_VERTICAL_SLASH, 4, 2);
            p->pair[1][1] = modal_of(OC_PATTERN_A_SHAPE, 2, 9);
            break;
        default:
            if (h % 2) {
                p->kind = OC_PATTERN_GRID;
                p->grid_max_stride = 24;
                p->grid_lines = 6;
            } else {
                p->kind = OC_PATTERN_VERTICAL_SLASH;
                p->n_vertical = 9;
                p->n_slash = 2;
            }
            break;
        }
        if (!no_grid) continue;
        int vs = 3 + (h + seed) % 5;   /* a few columns and diagonals, so ties decide some of them */
        if (p->kind == OC_PATTERN_GRID) { p->kind = OC_PATTERN_VERTICAL_SLASH; p->n_vertical = vs; p->n_slash = 2 + h % 3; }
        if (p->kind == OC_PATTERN_VERTICAL_SLASH && h % 3 == 2)   /* k >= n: every column, every diagonal */
            p->n_vertical = p->n_slash = 100000;
        for (int m = 0; m < OC_N_MODALITIES; m++) {
            if (p->kind == OC_PATTERN_Q_BOUNDARY && p->modal[m].kind == OC_PATTERN_GRID)
                p->modal[m] = modal_of(OC_PATTERN_VERTICAL_SLASH, vs, 3);
            for (int k = 0; k < OC_N_MODALITIES && p->kind == OC_PATTERN_BOUNDARY_2D; k++)
                if (p->pair[m][k].kind == OC_PATTERN_GRID) p->pair[m][k] = modal_of(OC_PATTERN_VERTICAL_SLASH, vs + k, 2 + m);
        }
    }
}

/* One slot of an index equal (same_index's test) for kind. */
static int same_slot(const oc_dyn_head *x, const oc_dyn_head *y, oc_pattern_kind kind) {
    if (x->dense != y->dense) return 0;
    return x->dense || same_index(x, y, kind);
}

static void check_boundary(const bnd_case *c, int seed) {
    check_rng r = { 0xb0dULL + (unsigned long long)seed };
    int d = c->d, H = c->n_head, n_kv = c->n_kv;
    int64_t qst = (int64_t)H * d + 3, ost = (int64_t)H * d + 1, kst = d + 5, ksh = (int64_t)n_kv * kst;
    size_t es = c->dtype == OC_DTYPE_F16 ? 2 : 4, nq = (size_t)c->n_q, kv_elems = (size_t)c->n_head_kv * (size_t)ksh;
    oc_token_layout *layout = NULL;
    REQUIRE(oc_layout_build(&layout, n_kv, c->img, c->n_img, OC_LAYOUT_DEFAULT_SINK_FRACTION, NULL, NULL) == OC_OK);
    uint8_t *modality = malloc((size_t)n_kv);
    for (int j = 0; j < n_kv; j++) modality[j] = oc_layout_image_at(layout, j) >= 0;
    float *q = rand_f32(&r, nq * (size_t)qst, -3.0f, 3.0f);
    unsigned char *k = malloc(es * kv_elems), *v = malloc(es * kv_elems);
    for (size_t i = 0; i < kv_elems; i++) {
        float x = check_rng_uniform(&r, -1.0f, 1.0f), y = check_rng_uniform(&r, -1.0f, 1.0f);
        if (es == 2) { ((uint16_t *)k)[i] = oc_f32_to_f16(x); ((uint16_t *)v)[i] = oc_f32_to_f16(y); }
        else { ((float *)k)[i] = x; ((float *)v)[i] = y; }
    }
    if (c->ties)   /* key j = key j mod 7 of its kv head: equal scores, broken by index */
        for (size_t i = 0; i < kv_elems; i++) {
            size_t g = i / (size_t)ksh, j = i % (size_t)ksh / (size_t)kst, e = i % (size_t)kst;
            memcpy(k + es * i, k + es * (g * (size_t)ksh + j % 7 * (size_t)kst + e), es);
        }
    oc_head_pattern pat[16];
    bnd_patterns(pat, H, seed, c->no_grid);
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = c->n_q; a.n_kv = n_kv; a.n_head = H; a.n_head_kv = c->n_head_kv; a.head_dim = d;
    a.q_stride_token = qst; a.q_stride_head = d; a.kv_dtype = c->dtype;
    a.k_stride_token = a.v_stride_token = kst; a.k_stride_head = a.v_stride_head = ksh;
    a.out_stride_token = ost; a.out_stride_head = d; a.scale = 1.0f / sqrtf((float)d);
    a.mask = c->mask; a.q_offset = c->q_offset; a.patterns = pat; a.layout = layout;
    size_t n_out = nq * (size_t)ost;
    float *out_cpu = malloc(sizeof(float) * n_out), *out_ref = malloc(sizeof(float) * n_out);
    oc_attn_host mem = { q, k, v, out_cpu };
    oc_attn_dims dims = { c->n_q, n_kv, H, c->n_head_kv, d };
    size_t sb = oc_attn_scratch_bytes(&dims, 1), db = oc_attn_dyn_bytes(&dims, 1);
    void *scratch = oc_port_aligned_alloc(OC_MEM_ALIGN, sb), *dmem = oc_port_aligned_alloc(OC_MEM_ALIGN, db);
    oc_error err = { OC_OK, "" };
    const oc_attn_dyn *cd = NULL;
    REQUIREF(oc_attn_dyn_build(&a, &mem, OC_ISA_SCALAR, NULL, dmem, db, &cd, &err) == OC_OK, "%s: %s", c->name,
             err.message);
    oc_attn_call ai = a;
    ai.dyn = cd;
    oc_attn_stats cpu_st = { 0, 0, 0 }, dev_st = { 0, 0, 0 };
    check_poison_f32(out_cpu, n_out);
    REQUIREF(oc_attn_run(&ai, &mem, OC_ISA_SCALAR, NULL, scratch, sb, &cpu_st, &err) == OC_OK, "%s: %s", c->name, err.message);
    uint8_t *em = malloc((size_t)H * nq * (size_t)n_kv);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < c->n_q; i++) {
            int p = c->q_offset + i, m = modality[p];
            oc_head_pattern sub = oc_pattern_modal(&pat[h], m);
            const oc_dyn_head *dh = m ? &cd->heads_vision[h] : &cd->heads[h];
            if (oc_pattern_is_dynamic(sub.kind) && dh->dense) sub.kind = OC_PATTERN_DENSE;
            for (int j = 0; j < n_kv; j++) {
                int keep;
                if (pat[h].kind == OC_PATTERN_BOUNDARY_2D) keep = ref_2d_keep(c->mask, &pat[h], cd->pairs + 4 * h, modality, p, j);
                else if (pat[h].kind == OC_PATTERN_Q_BOUNDARY) keep = ref_dyn_keep(c->mask, &sub, dh, p, j);
                else keep = ref_dyn_keep(c->mask, &pat[h], &cd->heads[h], p, j);
                em[((size_t)h * nq + (size_t)i) * (size_t)n_kv + (size_t)j] = (uint8_t)keep;
            }
        }
    oc_attn_call ae = a;
    ae.mask = OC_ATTN_EXPLICIT; ae.patterns = NULL; ae.layout = NULL; ae.explicit_mask = em;
    ae.explicit_stride_q = n_kv; ae.explicit_stride_head = (int64_t)nq * n_kv;
    oc_attn_host mem_ref = { q, k, v, out_ref };
    oc_attn_stats ref_st = { 0, 0, 0 };
    check_poison_f32(out_ref, n_out);
    REQUIRE(oc_attn_run(&ae, &mem_ref, OC_ISA_SCALAR, NULL, scratch, sb, &ref_st, &err) == OC_OK);
    CHECKF(ref_st.flops_kept == cpu_st.flops_kept, "%s: explicit mask keeps %llu FLOPs, the sparse CPU run %llu",
           c->name, (unsigned long long)ref_st.flops_kept, (unsigned long long)cpu_st.flops_kept);

    oc_cl_attn_limits lim = { c->n_q, H, c->n_head_kv, d, c->n_img, 1, c->max_kv ? c->max_kv : n_kv, 0 };
    oc_cl_attn *at = NULL;
    REQUIREF(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_OK, "%s: %s", c->name, err.message);
    /* the prefill heads run the 64-row build wherever the device has one and its local memory
     * takes the head dim (the checks below then test that build) */
    const oc_cl_caps *caps = oc_cl_device_caps(g_dev);
    oc_cl_caps dc = *caps;
    dc.attn_rows_per_item = caps->attn_dyn_rows_per_item;
    int dyn64 = caps->attn_dyn_rows_per_item && oc_cl_attn_local_bytes(&dc, d) <= caps->local_mem_bytes;
    CHECKF(oc_cl_attn_dyn_rows(at) == (dyn64 ? 64 : caps->attn_row_groups * caps->attn_rows_per_item),
           "%s: the prefill heads' launch takes %d rows", c->name, (int)oc_cl_attn_dyn_rows(at));
    oc_cl_buf *dq = dup_host(q, sizeof(float) * nq * (size_t)qst), *dk = dup_host(k, es * kv_elems),
              *dv = dup_host(v, es * kv_elems), *dout = dbuf(sizeof(float) * n_out);
    oc_cl_attn_bufs io = { dq, dk, dv, dout, NULL, 0 };
    CHECK(oc_cl_attn_run(at, &a, &io, NULL, &err) == OC_ERR_INVALID && strstr(err.message, "index"));
    poison(dout);
    CHECKF(oc_cl_attn_run(at, &ai, &io, &dev_st, &err) == OC_OK, "%s: run: %s", c->name, err.message);
    float *out_dev = fetch(dout);
    double worst = 0;
    double *row = malloc(sizeof(double) * (size_t)d);
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < H; h++) {
            size_t at_row = (size_t)i * (size_t)ost + (size_t)h * (size_t)d;
            for (int e = 0; e < d; e++) row[e] = out_ref[at_row + (size_t)e];
            double e1 = check_rel_err_f32(out_dev + at_row, row, (size_t)d);
            worst = e1 > worst || e1 != e1 ? e1 : worst;
        }
    CHECKF(worst < 1e-4, "%s: device vs dense with the explicit mask: worst row rel err %.3g", c->name, worst);
    CHECKF(dev_st.flops_kept == cpu_st.flops_kept && dev_st.flops_skipped == cpu_st.flops_skipped,
           "%s: device kept %llu / skipped %llu FLOPs, the CPU engine %llu / %llu", c->name,
           (unsigned long long)dev_st.flops_kept, (unsigned long long)dev_st.flops_skipped,
           (unsigned long long)cpu_st.flops_kept, (unsigned long long)cpu_st.flops_skipped);
    CHECK(dev_st.flops_skipped > 0 && dev_st.flops_executed >= dev_st.flops_kept);
    if (seed == 0) {   /* boundary heads under a segments base: refused with a status, not run dense */
        oc_head_pattern st_pat[16];
        for (int h = 0; h < H; h++) {
            memset(&st_pat[h], 0, sizeof st_pat[h]);
            st_pat[h].kind = OC_PATTERN_Q_BOUNDARY;
            st_pat[h].modal[0] = modal_of(OC_PATTERN_A_SHAPE, 2, 8);
        }
        oc_token_span seg[1] = { { 0, n_kv } };
        oc_attn_call as = a;
        as.patterns = st_pat; as.mask = OC_ATTN_SEGMENTS; as.segments = seg; as.n_segments = 1;
        CHECK(oc_cl_attn_run(at, &as, &io, NULL, &err) == OC_ERR_UNSUPPORTED && strstr(err.message, "segments"));
    }
    /* the device's own estimate and choice, slot by slot */
    const oc_attn_dyn *dd = NULL;
    oc_pool *pool = NULL;   /* odd cases choose on a pool of 3 threads (the same choices) */
    REQUIRE(oc_pool_open(&pool, 3, NULL, &err) == OC_OK);
    oc_cl_attn_set_pool(at, seed % 2 ? pool : NULL);
    CHECKF(oc_cl_attn_dyn_build(at, &a, &io, &dd, &err) == OC_OK, "%s: dyn build: %s", c->name, err.message);
    oc_cl_attn_set_pool(at, NULL);
    oc_pool_close(pool);
    for (int h = 0; dd && h < H; h++) {
        int ok = 1;
        if (pat[h].kind == OC_PATTERN_BOUNDARY_2D) {
            ok = dd->pairs && !memcmp(dd->key_start, cd->key_start, sizeof cd->key_start);
            for (int s = 0; ok && s < 4; s++) ok = same_slot(&dd->pairs[4 * h + s], &cd->pairs[4 * h + s], pat[h].pair[s / 2][s % 2].kind);
        } else if (pat[h].kind == OC_PATTERN_Q_BOUNDARY) {
            ok = same_slot(&dd->heads[h], &cd->heads[h], pat[h].modal[0].kind) &&
                 same_slot(&dd->heads_vision[h], &cd->heads_vision[h], pat[h].modal[1].kind);
        } else {
            ok = same_slot(&dd->heads[h], &cd->heads[h], pat[h].kind);
        }
        CHECKF(ok, "%s head %d (kind %d): the device's estimate chose another index than the CPU's", c->name, h,
               (int)pat[h].kind);
    }
    /* oc_cl_attn_run_indexed: the index estimated and chosen on the device (a Grid part: the host's
     * search), written into the tables it runs. Its parts equal, int for int, those of the CPU's
     * index and of the host's choice from the device's scores; its output is the explicit mask's,
     * its FLOPs the CPU engine's. */
    int32_t ni = oc_cl_attn_parts_ints(at), cap = 4 * ni + 64, n_cpu = -1, n_host = -1, n_dev = -1;
    int32_t *tmp = malloc(sizeof(int32_t) * (size_t)ni), *p_cpu = malloc(sizeof(int32_t) * (size_t)cap),
            *p_host = malloc(sizeof(int32_t) * (size_t)cap), *p_dev = malloc(sizeof(int32_t) * (size_t)cap);
    CHECKF(oc_cl_attn_run(at, &ai, &io, NULL, &err) == OC_OK && oc_cl_attn_parts(at, tmp, p_cpu, cap, &n_cpu, &err) == OC_OK,
           "%s: parts of the CPU's index: %s", c->name, err.message);
    const oc_attn_dyn *dh2 = NULL;
    oc_attn_call ah = a;
    CHECKF(oc_cl_attn_dyn_build(at, &a, &io, &dh2, &err) == OC_OK, "%s: dyn build: %s", c->name, err.message);
    ah.dyn = dh2;
    CHECKF(oc_cl_attn_run(at, &ah, &io, NULL, &err) == OC_OK && oc_cl_attn_parts(at, tmp, p_host, cap, &n_host, &err) == OC_OK,
           "%s: parts of the host's choice: %s", c->name, err.message);
    oc_attn_stats ix_st = { 0, 0, 0 };
    uint64_t est_ns = 0;
    poison(dout);
    CHECKF(oc_cl_attn_run_indexed(at, &a, &io, &ix_st, &est_ns, &err) == OC_OK, "%s: run indexed: %s", c->name,
           err.message);
    float *out_ix = fetch(dout);
    double worst_ix = 0;
    for (int i = 0; i < c->n_q; i++)
        for (int h = 0; h < H; h++) {
            size_t at_row = (size_t)i * (size_t)ost + (size_t)h * (size_t)d;
            for (int e = 0; e < d; e++) row[e] = out_ref[at_row + (size_t)e];
            double e1 = check_rel_err_f32(out_ix + at_row, row, (size_t)d);
            worst_ix = e1 > worst_ix || e1 != e1 ? e1 : worst_ix;
        }
    CHECKF(worst_ix < 1e-4, "%s: device-indexed run vs the explicit mask: worst row rel err %.3g", c->name, worst_ix);
    CHECKF(ix_st.flops_kept == cpu_st.flops_kept && ix_st.flops_skipped == cpu_st.flops_skipped,
           "%s: device-indexed run kept %llu / skipped %llu FLOPs, the CPU engine %llu / %llu", c->name,
           (unsigned long long)ix_st.flops_kept, (unsigned long long)ix_st.flops_skipped,
           (unsigned long long)cpu_st.flops_kept, (unsigned long long)cpu_st.flops_skipped);
    CHECKF(oc_cl_attn_parts(at, tmp, p_dev, cap, &n_dev, &err) == OC_OK, "%s: parts: %s", c->name, err.message);
    int32_t diff = -1;
    for (int32_t i = 0; diff < 0 && i < n_dev && i < n_cpu; i++)
        if (p_dev[i] != p_cpu[i]) diff = i;
    CHECKF(n_dev > 0 && n_dev == n_cpu && diff < 0, "%s: the device chose other parts than the CPU's index (%d vs %d "
           "ints, first difference at %d)", c->name, (int)n_dev, (int)n_cpu, (int)diff);
    CHECKF(n_host == n_dev && !memcmp(p_host, p_dev, sizeof(int32_t) * (size_t)OC_MAX(0, n_dev)),
           "%s: the device chose other parts than the host from the same scores (%d vs %d ints)", c->name, (int)n_dev,
           (int)n_host);
    /* deferred counters: two runs' counts summed on the device, taken once, equal the runs' own */
    oc_attn_stats df_st = { 0, 0, 0 };
    oc_cl_attn_defer_counts(at, 1);
    CHECKF(oc_cl_attn_run_indexed(at, &a, &io, &df_st, NULL, &err) == OC_OK &&
           oc_cl_attn_run(at, &ai, &io, &df_st, &err) == OC_OK, "%s: deferred runs: %s", c->name, err.message);
    CHECK(df_st.flops_kept == 0 && df_st.flops_skipped == 0 && df_st.flops_executed == 0);
    CHECKF(oc_cl_attn_counts_take(at, &df_st, &err) == OC_OK, "%s: take: %s", c->name, err.message);
    CHECKF(df_st.flops_kept == 2 * cpu_st.flops_kept && df_st.flops_skipped == 2 * cpu_st.flops_skipped &&
           df_st.flops_executed == 2 * ix_st.flops_executed,
           "%s: deferred counts kept %llu / skipped %llu / executed %llu, two runs' own %llu / %llu / %llu", c->name,
           (unsigned long long)df_st.flops_kept, (unsigned long long)df_st.flops_skipped,
           (unsigned long long)df_st.flops_executed, 2 * (unsigned long long)cpu_st.flops_kept,
           2 * (unsigned long long)cpu_st.flops_skipped, 2 * (unsigned long long)ix_st.flops_executed);
    CHECK(oc_cl_attn_counts_take(at, &df_st, &err) == OC_OK && df_st.flops_kept == 2 * cpu_st.flops_kept);
    oc_cl_attn_defer_counts(at, 0);
    free(tmp); free(p_cpu); free(p_host); free(p_dev); free(out_ix);
    free(row); free(out_dev); free(em); free(q); free(k); free(v); free(out_cpu); free(out_ref); free(modality);
    oc_port_aligned_free(scratch);
    oc_port_aligned_free(dmem);
    oc_cl_buf_free(dq); oc_cl_buf_free(dk); oc_cl_buf_free(dv); oc_cl_buf_free(dout);
    oc_cl_attn_close(at);
    oc_layout_free(layout);
}

static void test_attn_boundary(void) {
    if (!need_dev()) return;
    static const bnd_case cases[] = {
        { "causal 301 (odd), 2 images, MHA, d64, f16", 301, 301, 5, 5, 64, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16,
          2, { { 20, 110 }, { 150, 240 } }, 0, 0, 0 },
        { "chunk after 45 keys, GQA 3, d72, f32", 233, 278, 6, 2, 72, 45, OC_ATTN_CAUSAL, OC_DTYPE_F32,
          2, { { 10, 100 }, { 130, 170 } }, 0, 0, 0 },
        { "GQA 5, d80, f16, a short image (its dynamic parts dense)", 257, 257, 5, 1, 80, 0, OC_ATTN_CAUSAL,
          OC_DTYPE_F16, 3, { { 30, 60 }, { 100, 120 }, { 200, 207 } }, 0, 0, 0 },
        { "bidirectional, d128, f32", 199, 199, 5, 5, 128, 0, OC_ATTN_BIDIRECTIONAL, OC_DTYPE_F32,
          1, { { 40, 150 } }, 0, 0, 0 },
        { "causal 263, GQA 2, d128, f16, image first", 263, 263, 4, 2, 128, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16,
          1, { { 0, 131 } }, 0, 0, 0 },
        { "chunk after 45 keys, 4000-key context", 233, 278, 6, 2, 72, 45, OC_ATTN_CAUSAL, OC_DTYPE_F32,
          2, { { 10, 100 }, { 130, 170 } }, 4000, 0, 0 },
        { "causal 301, one job per estimate batch", 301, 301, 5, 5, 64, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16,
          2, { { 20, 110 }, { 150, 240 } }, 100000, 0, 0 },
        /* every index the device's to choose (oc_dyn_choose), with and without exact ties */
        { "device choice, causal 301, 2 images, f16", 301, 301, 5, 5, 64, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16,
          2, { { 20, 110 }, { 150, 240 } }, 0, 1, 0 },
        { "device choice, ties, chunk after 45 keys, GQA 3, f32", 233, 278, 6, 2, 72, 45, OC_ATTN_CAUSAL,
          OC_DTYPE_F32, 2, { { 10, 100 }, { 130, 170 } }, 0, 1, 1 },
        { "device choice, ties, short image, GQA 5, f16", 257, 257, 5, 1, 80, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16,
          3, { { 30, 60 }, { 100, 120 }, { 200, 207 } }, 0, 1, 1 },
        { "device choice, ties, bidirectional, d128", 199, 199, 5, 5, 128, 0, OC_ATTN_BIDIRECTIONAL, OC_DTYPE_F32,
          1, { { 40, 150 } }, 0, 1, 1 },
        { "device choice, ties, one job per batch", 301, 301, 5, 5, 64, 0, OC_ATTN_CAUSAL, OC_DTYPE_F16,
          2, { { 20, 110 }, { 150, 240 } }, 100000, 1, 1 },
    };
    for (int k = 0; k < (int)OC_ARRAY_LEN(cases); k++) check_boundary(&cases[k], k);
    const oc_backend_provider *clp = oc_backend_provider_find(OC_BACKEND_KIND_OPENCL);
    CHECK(clp && clp->pattern_exec(OC_PATTERN_BOUNDARY_2D) == OC_EXEC_PREFILL &&
          clp->pattern_exec(OC_PATTERN_Q_BOUNDARY) == OC_EXEC_PREFILL);
}

/* Every tile shape the kernel offers (ocellus bench attention --tiles compares them), each on a
 * second device forced to it: the 16-row tile of 32 KiB devices first (it also asks for sub-group
 * reductions: where the compiler has none, PoCL, open falls back), then the larger ones. A tile
 * whose local memory exceeds the device's at a head dim must fail to open with UNSUPPORTED. */
static void test_attn_tiles(void) {
    if (!need_dev()) return;
    static const oc_token_span img[3] = { { 5, 45 }, { 47, 102 }, { 130, 167 } };
    static const oc_head_pattern pat6[6] = {
        PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_SINK, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE, 0, 0),
        PAT(OC_PATTERN_INTRA_IMAGE_SINK, 0, 0), PAT(OC_PATTERN_A_SHAPE, 4, 16), PAT(OC_PATTERN_A_SHAPE, 0, 40),
    };
    const attn_case cases[] = {
        { "causal prefix, d128", 40, 90, 4, 2, 128, 50, OC_ATTN_CAUSAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F16, 0 },
        { "patterns", 200, 200, 6, 2, 64, 0, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 180, OC_DTYPE_F16, 0 },
        { "decode split, d80", 2, 300, 6, 3, 80, 298, OC_ATTN_CAUSAL, NULL, 0, pat6, img, 3, 170, OC_DTYPE_F32, 2 },
        { "bidirectional, d37", 70, 70, 2, 2, 37, 0, OC_ATTN_BIDIRECTIONAL, NULL, 0, NULL, NULL, 0, 0, OC_DTYPE_F32, 0 },
    };
    /* rows per item, sub-groups, keys per item, row groups, key groups (oc_cl_options order):
     * 2x4 (16 x 32), 2x4@16x8, 4x2@8x16, 6x2 (48 x 16), 4x2, 8x4 (64 x 32), 4x4@16x8, 4x8 (32 x 64) */
    static const oc_cl_options tiles[] = {
        { 2, 1, 4, 8, 8 }, { 2, 0, 4, 16, 8 }, { 4, 0, 2, 8, 16 }, { 6, 0, 2, 8, 8 }, { 4, 0, 2, 8, 8 },
        { 8, 0, 4, 8, 8 }, { 4, 0, 4, 16, 8 }, { 4, 0, 8, 8, 8 },
    };
    static const dyn_case dyn_tile_case = { "causal 131, GQA 2, d64, f16", 131, 131, 4, 2, 64, 0, OC_ATTN_CAUSAL,
                                            OC_DTYPE_F16, 0 };
    oc_cl_device *keep = g_dev;
    check_rng r = { 19 };
    for (size_t t = 0; t < OC_ARRAY_LEN(tiles); t++) {
        oc_cl_device *dev = NULL;
        oc_error err;
        REQUIREF(oc_cl_open(&dev, oc_cl_device_caps(keep)->device, &tiles[t], NULL, &err) == OC_OK, "tile %zu: %s", t,
                 err.message);
        const oc_cl_caps *c = oc_cl_device_caps(dev);
        CHECK(c->attn_rows_per_item == tiles[t].attn_rows_per_item && c->attn_row_groups == tiles[t].attn_row_groups);
        if (t == 0) {
            printf("# 16-row attention tile, sub-group reductions %s\n",
                   c->has_subgroups ? "built" : "refused by the compiler: local memory");
            g_dev = dev;   /* the helpers allocate on g_dev */
            test_norms();  /* through whichever reduction it got */
        }
        g_dev = dev;
        /* the prefill heads' 64-row build: where the row groups divide 64 into 1..8 rows per item
         * other than the main tile's (cl_device.c choose_dyn_tiles), and their calls on it (or on
         * the main tile) keep the CPU's pairs and index (check_dyn) */
        int rg = c->attn_row_groups, want = 64 % rg == 0 && 64 / rg <= 8 && 64 / rg != c->attn_rows_per_item ? 64 / rg : 0;
        CHECKF(c->attn_dyn_rows_per_item == want, "tile %zu: %d rows per item for the prefill heads, want %d", t,
               c->attn_dyn_rows_per_item, want);
        check_dyn(&dyn_tile_case, (int)t);
        for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
            const attn_case *a = &cases[i];
            oc_cl_attn_limits lim = { a->n_q, a->n_head, a->n_head_kv, a->d, 3, 0, 0, 0 };
            oc_cl_attn *at = NULL;
            int fits = oc_cl_attn_local_bytes(c, a->d) <= c->local_mem_bytes;
            oc_status st = oc_cl_attn_open(&at, dev, &lim, &err);
            CHECKF(fits ? st == OC_OK : st == OC_ERR_UNSUPPORTED, "tile %d x %d on %d x %d, %s: %s", c->attn_rows_per_item,
                   c->attn_keys_per_item, c->attn_row_groups, c->attn_key_groups, a->name, st ? err.message : "opened");
            if (at) check_attn(a, at, &r, 0);
            oc_cl_attn_close(at);
        }
        g_dev = keep;
        oc_cl_close(dev);
    }
    /* tiles the kernel does not take */
    static const oc_cl_options bad[] = { { 9, 0, 0, 0, 0 }, { 0, 0, 0, 0, 6 }, { 1, 0, 0, 8, 0 }, { 0, 0, 0, 64, 8 } };
    for (size_t t = 0; t < OC_ARRAY_LEN(bad); t++) {
        oc_cl_device *dev = NULL;
        oc_error err;
        CHECKF(oc_cl_open(&dev, oc_cl_device_caps(keep)->device, &bad[t], NULL, &err) == OC_ERR_INVALID && !dev,
               "bad tile %zu opened", t);
        CHECKF(strstr(err.message, "attention tile"), "%s", err.message);
    }
}

/* One context through changing geometries: A, A again (prepare reuses the uploaded runs), B, A;
 * then decode steps whose tables stay as they are on the device while the key count grows (C, D),
 * one whose image table changes (E) and one back (D again), a prefill whose images moved (A', its
 * tables as many runs as A's, other ones) and A again; patterns given on the host (the
 * context keeps them on the device); then more pattern sets than the context keeps, and the first
 * one again after it was pushed out. */
static void test_attn_reuse(void) {
    if (!need_dev()) return;
    static const oc_token_span img[2] = { { 10, 60 }, { 70, 100 } };
    static const oc_head_pattern pat4[4] = {
        PAT(OC_PATTERN_SINK, 0, 0), PAT(OC_PATTERN_A_SHAPE, 2, 20), PAT(OC_PATTERN_DENSE, 0, 0), PAT(OC_PATTERN_INTRA_IMAGE_SINK, 0, 0),
    };
    const attn_case a = { "reuse A: prefill", 120, 120, 4, 2, 64, 0, OC_ATTN_CAUSAL, NULL, 0, pat4, img, 2, 110, OC_DTYPE_F16, 0 };
    const attn_case b = { "reuse B: decode", 1, 121, 4, 2, 64, 120, OC_ATTN_CAUSAL, NULL, 0, pat4, img, 2, 110, OC_DTYPE_F16, 0 };
    static const oc_token_span img2[2] = { { 11, 61 }, { 71, 101 } };
    const attn_case c = { "reuse C: decode", 1, 122, 4, 2, 64, 121, OC_ATTN_CAUSAL, NULL, 0, pat4, img, 2, 110, OC_DTYPE_F16, 0 };
    const attn_case d = { "reuse D: decode", 1, 123, 4, 2, 64, 122, OC_ATTN_CAUSAL, NULL, 0, pat4, img, 2, 110, OC_DTYPE_F16, 0 };
    const attn_case e = { "reuse E: decode, images moved", 1, 123, 4, 2, 64, 122, OC_ATTN_CAUSAL, NULL, 0, pat4, img2, 2, 110,
                          OC_DTYPE_F16, 0 };
    oc_cl_attn_limits lim = { 120, 4, 2, 64, 2, 0, 0, 0 };
    oc_cl_attn *at = NULL;
    oc_error err;
    REQUIREF(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_OK, "%s", err.message);
    check_rng r = { 20 };
    const attn_case a2 = { "reuse A': prefill, images moved", 120, 120, 4, 2, 64, 0, OC_ATTN_CAUSAL, NULL, 0, pat4, img2, 2,
                           110, OC_DTYPE_F16, 0 };
    const attn_case *seq[10] = { &a, &a, &b, &a, &c, &d, &e, &d, &a2, &a };
    for (int i = 0; i < 10; i++) check_attn(seq[i], at, &r, 1);
    oc_head_pattern many[4];
    attn_case m = { "pattern set", 24, 24, 4, 2, 64, 0, OC_ATTN_CAUSAL, NULL, 0, many, NULL, 0, 0, OC_DTYPE_F32, 0 };
    for (int s = 0; s <= OC_CL_ATTN_PATTERN_SETS + 1; s++) {
        int k = s == OC_CL_ATTN_PATTERN_SETS + 1 ? 0 : s;
        for (int h = 0; h < 4; h++) {
            many[h].kind = h == 0 ? OC_PATTERN_DENSE : OC_PATTERN_A_SHAPE;
            many[h].n_sink = k % 5;
            many[h].n_local = 1 + (k + h) % 23;
        }
        check_attn(&m, at, &r, 1);
    }
    oc_cl_attn_close(at);
}

static void test_attn_errors(void) {
    if (!need_dev()) return;
    oc_cl_attn *at = NULL;
    oc_error err;
    oc_cl_attn_limits lim = { 16, 4, 2, 200, 0, 0, 0, 0 };
    CHECK(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_ERR_UNSUPPORTED && !at);
    lim.head_dim = 64;
    lim.n_head_kv = 3;
    CHECK(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_ERR_INVALID && !at);
    lim.n_head_kv = 2;
    REQUIREF(oc_cl_attn_open(&at, g_dev, &lim, &err) == OC_OK, "%s", err.message);
    oc_attn_call s;
    memset(&s, 0, sizeof s);
    s.n_q = s.n_kv = 17;
    s.n_head = 4; s.n_head_kv = 2; s.head_dim = 64;
    s.kv_dtype = OC_DTYPE_F16;
    s.mask = OC_ATTN_CAUSAL;
    CHECK(oc_cl_attn_prepare(at, &s, &err) == OC_ERR_RANGE);        /* above max_n_q */
    s.n_q = 4;
    s.mask = OC_ATTN_EXPLICIT;
    uint8_t em[4 * 17] = { 0 };
    s.explicit_mask = em;
    s.explicit_stride_q = 17;
    CHECK(oc_cl_attn_prepare(at, &s, &err) == OC_ERR_UNSUPPORTED);
    s.mask = OC_ATTN_CAUSAL;
    s.n_head = 2;
    CHECK(oc_cl_attn_prepare(at, &s, &err) == OC_ERR_INVALID);      /* heads not the context's */
    s.n_head = 4;
    int32_t held[2] = { 5, 9 };   /* per-kv-head held keys: the CPU engine's alone, refused, never ignored */
    s.kv_held = held;
    CHECK(oc_cl_attn_prepare(at, &s, &err) == OC_ERR_UNSUPPORTED && strstr(err.message, "kv_held"));
    s.kv_held = NULL;
    REQUIRE(oc_cl_attn_prepare(at, &s, &err) == OC_OK);
    oc_cl_buf *small = dbuf(256);
    oc_cl_attn_bufs io = { small, small, small, small, NULL, 0 };
    s.q_stride_token = s.out_stride_token = 4 * 64;
    s.q_stride_head = s.out_stride_head = 64;
    s.k_stride_token = s.v_stride_token = 128;
    s.k_stride_head = s.v_stride_head = 64;
    CHECK(oc_cl_attn_run(at, &s, &io, NULL, &err) == OC_ERR_RANGE);
    CHECK(oc_cl_attn_run(at, &s, NULL, NULL, &err) == OC_ERR_INVALID);
    oc_head_pattern badp = PAT(OC_PATTERN_A_SHAPE, 4, 0);
    CHECK(oc_cl_patterns_write(g_dev, small, 0, &badp, 1, &err) == OC_ERR_INVALID);
    oc_cl_buf_free(small);
    oc_cl_attn_close(at);
}

static void test_fma_peak(void) {
    if (!need_dev()) return;
    double g = 0;
    oc_error err;
    CHECKF(oc_cl_fma_peak(g_dev, &g, &err) == OC_OK, "%s", err.message);
    CHECKF(g > 0.1 && isfinite(g), "FMA peak %g GFLOP/s", g);
    printf("# FMA peak %.1f GFLOP/s\n", g);
}

int main(void) {
    oc_error err;
    uint64_t t0 = oc_port_now_ns();
    const char *want = getenv("OC_TEST_OPENCL_DEVICE");   /* pick a device; then it must open */
    oc_status st = oc_cl_open(&g_dev, want, NULL, NULL, &err);
    if (st != OC_OK) {
        /* no platform or no device: skip; anything else (a program that does not build) fails */
        g_open_failed = st != OC_ERR_NOT_FOUND || (want && *want);
        snprintf(g_why, sizeof g_why, "%s: %s", g_open_failed ? "the OpenCL device did not open" : "no OpenCL device",
                 err.message);
    } else {
        printf("# opened in %.2f s\n", (double)(oc_port_now_ns() - t0) * 1e-9);
    }
    CHECK_RUN(test_devices);
    CHECK_RUN(test_build_failure);
    CHECK_RUN(test_range_errors);
    CHECK_RUN(test_norms);
    CHECK_RUN(test_gather_rows);
    CHECK_RUN(test_elementwise);
    CHECK_RUN(test_rope);
    CHECK_RUN(test_embed);
    CHECK_RUN(test_matmul);
    CHECK_RUN(test_gemv_f16_exact);
    CHECK_RUN(test_matmul_acc);
    CHECK_RUN(test_matmul_fused);
    CHECK_RUN(test_close_releases_context);
    CHECK_RUN(test_kv_store);
    CHECK_RUN(test_rope_store);
    CHECK_RUN(test_keep_rows);
    CHECK_RUN(test_argmax);
    CHECK_RUN(test_attn_dense);
    CHECK_RUN(test_attn_decode);
    CHECK_RUN(test_attn_patterns);
    CHECK_RUN(test_attn_dynamic);
    CHECK_RUN(test_attn_boundary);
    CHECK_RUN(test_attn_tiles);
    CHECK_RUN(test_attn_reuse);
    CHECK_RUN(test_attn_errors);
    CHECK_RUN(test_fma_peak);
    oc_cl_close(g_dev);
    return check_finish();
}

#else /* no OpenCL in this build */

static void test_opencl(void) { check_skip("built without OpenCL (./configure found no CL/cl.h and -lOpenCL)"); }

int main(void) {
    CHECK_RUN(test_opencl);
    return check_finish();
}

#endif
