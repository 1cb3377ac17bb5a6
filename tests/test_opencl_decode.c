/* test_opencl_decode.c: what the OpenCL decode step relies on besides its kernels' arithmetic
 * (test_opencl.c has that): the per-kernel profile (OCELLUS_CL_PROFILE: intervals between waits,
 * launches per kernel, batch intervals apart), the device's read-only bandwidth probe, and the
 * backend's staged small writes (no host wait; the staging ring restarts after a wait, or after a
 * finish when full, and a write is never read from a slot another write reused). Without an OpenCL
 * device every case skips, saying why. */
#include "check.h"
#include "support/opencl.h"
#include "core/core.h"

#if OC_HAVE_OPENCL

#include "backend/backend.h"
#include "opencl/cl_ops.h"
#include "port.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int skip_without_device(void) {
    const char *why = check_opencl_missing();
    if (why) check_skip("%s", why);
    return why != NULL;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = calloc(1, 1 << 16);
    size_t n = s ? fread(s, 1, (1 << 16) - 1, f) : 0;
    fclose(f);
    if (s && n == 0) {   /* an empty profile: nothing to match */
        free(s);
        s = NULL;
    }
    return s;
}

/* One one-token interval (3 adds and a GEMV, then a download) and one batch interval (a GEMM,
 * then a finish): the table counts both apart, with their launches per kernel. */
static void test_profile(void) {
    if (skip_without_device()) return;
    char path[64];
    snprintf(path, sizeof path, "/tmp/oc-prof-%llu.md", (unsigned long long)oc_port_now_ns());
    oc_error err;
    oc_cl_device *dev = NULL;
    REQUIRE(oc_port_setenv("OCELLUS_CL_PROFILE", path) == 0);
    oc_status st = oc_cl_open(&dev, check_opencl_device(), NULL, NULL, &err);
    oc_port_setenv("OCELLUS_CL_PROFILE", "");
    REQUIREF(st == OC_OK, "%s", err.message);
    enum { N_IN = 64, N_OUT = 40, N_TOK = 70 };
    float w[N_OUT * N_IN], x[N_TOK * N_IN], y[N_TOK * N_OUT];
    for (int i = 0; i < N_OUT * N_IN; i++) w[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < N_TOK * N_IN; i++) x[i] = (float)(i % 5) * 0.25f;
    oc_weight wt = { .dtype = OC_DTYPE_F32, .n_in = N_IN, .n_out = N_OUT, .data = w, .row_bytes = sizeof(float) * N_IN };
    oc_cl_weight cw;
    oc_cl_buf *dx = NULL, *dy = NULL;
    REQUIREF(oc_cl_weight_upload(dev, &wt, 0, &cw, &err) == OC_OK, "%s", err.message);
    REQUIRE(oc_cl_buf_alloc(dev, sizeof x, &dx, &err) == OC_OK && oc_cl_buf_alloc(dev, sizeof y, &dy, &err) == OC_OK);
    CHECK(oc_cl_upload(dev, dx, 0, x, sizeof x, &err) == OC_OK);
    CHECK(oc_cl_finish(dev, &err) == OC_OK);   /* the uploads' interval: no launches */
    for (int i = 0; i < 3; i++) CHECK(oc_cl_add(dev, dx, 0, dx, N_IN, N_IN, &err) == OC_OK);
    oc_cl_use_clblast(dev, 0);   /* the GEMM below is oc_gemm, a launch the profile sees */
    CHECKF(oc_cl_matmul(dev, &cw, oc_cl_mat_of(dx, 0, N_IN), oc_cl_mat_of(dy, 0, N_OUT), 1, NULL, &err) == OC_OK, "%s",
           err.message);
    CHECK(oc_cl_download(dev, dy, 0, y, sizeof(float) * N_OUT, &err) == OC_OK);
    CHECKF(oc_cl_matmul(dev, &cw, oc_cl_mat_of(dx, 0, N_IN), oc_cl_mat_of(dy, 0, N_OUT), N_TOK, NULL, &err) == OC_OK, "%s",
           err.message);
    CHECK(oc_cl_finish(dev, &err) == OC_OK);
    oc_cl_buf_free(dx);
    oc_cl_buf_free(dy);
    oc_cl_weight_free(&cw);
    oc_cl_close(dev);
    char *s = slurp(path);
    REQUIREF(s, "no profile written to %s", path);
    /* two one-token intervals (the uploads' and the adds + GEMV's): 4 launches over 2 = 2.0 each,
     * one wait each besides the upload's */
    CHECKF(strstr(s, "| one token (decode) | 2 | 2.0 |"), "%s", s);
    CHECKF(strstr(s, "| batch (prefill, images) | 1 | 1.0 |"), "%s", s);
    CHECKF(strstr(s, "| oc_add | 1.5 |") && strstr(s, "| oc_gemv | 0.5 |") && strstr(s, "| oc_gemm | 1.0 |"), "%s", s);
    free(s);
    remove(path);
    /* an empty variable profiles nothing */
    REQUIRE(oc_port_setenv("OCELLUS_CL_PROFILE", "") == 0);
    REQUIRE(oc_cl_open(&dev, check_opencl_device(), NULL, NULL, &err) == OC_OK);
    CHECK(oc_cl_finish(dev, &err) == OC_OK);
    oc_cl_close(dev);
    FILE *f = fopen(path, "r");
    CHECKF(!f, "%s written without OCELLUS_CL_PROFILE", path);
    if (f) fclose(f);
}

static void test_read_peak(void) {
    if (skip_without_device()) return;
    oc_error err;
    oc_cl_device *dev = NULL;
    REQUIREF(oc_cl_open(&dev, check_opencl_device(), NULL, NULL, &err) == OC_OK, "%s", err.message);
    double g = -1;
    CHECKF(oc_cl_read_peak(dev, (size_t)16 << 20, &g, &err) == OC_OK, "%s", err.message);
    CHECKF(g > 0.05 && isfinite(g), "read bandwidth %g GB/s", g);
    printf("# device read bandwidth %.1f GB/s (16 MiB, cached on a CPU device)\n", g);
    CHECK(oc_cl_read_peak(dev, 1000, &g, &err) == OC_ERR_INVALID && g == 0);
    oc_cl_close(dev);
}

/* Many small writes with no wait between them (more than the staging ring holds), each from the
 * same host array changed right after the call, then a read; then a write after that read (the
 * ring restarts). Every element must hold what its last write said. */
static void test_staged_writes(void) {
    if (skip_without_device()) return;
    oc_backend_limits lim = { 128, 8, { 0, 0, 0, 0, 0 }, 0, 0, 0, 0 };
    oc_backend_spec spec = { OC_BACKEND_KIND_OPENCL, check_opencl_device(), NULL, OC_ISA_SCALAR, NULL };
    oc_backend *be = NULL;
    oc_error e;
    REQUIREF(oc_backend_open(&be, &spec, &lim, NULL, &e) == OC_OK, "%s", e.message);
    const oc_backend_ops *op = be->ops;
    enum { N = 3000, ROW = 25 };   /* 3000 writes of 100 bytes: 300 KB through a 64 KiB ring */
    oc_bt t;
    REQUIRE(op->alloc(be, &t, sizeof(float) * N * ROW / 10, 0, &e) == OC_OK);
    float src[ROW], *want = calloc(N * ROW / 10, sizeof(float)), *got = calloc(N * ROW / 10, sizeof(float));
    REQUIRE(want && got);
    for (int i = 0; i < N; i++) {   /* rows overlap (10 writes per row slot): the last one must win */
        int row = (i * 7) % (N / 10);
        for (int k = 0; k < ROW; k++) src[k] = (float)(i * ROW + k);
        CHECK(op->write(be, &t, sizeof(float) * (size_t)row * ROW, src, sizeof src, &e) == OC_OK);
        memcpy(want + (size_t)row * ROW, src, sizeof src);
        for (int k = 0; k < ROW; k++) src[k] = NAN;   /* the caller reuses its array at once */
    }
    CHECK(op->read(be, &t, 0, got, sizeof(float) * N * ROW / 10, &e) == OC_OK);
    CHECK(memcmp(got, want, sizeof(float) * N * ROW / 10) == 0);
    for (int k = 0; k < ROW; k++) src[k] = -1.0f - (float)k;
    CHECK(op->write(be, &t, 0, src, sizeof src, &e) == OC_OK);
    for (int k = 0; k < ROW; k++) src[k] = NAN;
    CHECK(op->read(be, &t, 0, got, sizeof src, &e) == OC_OK);
    for (int k = 0; k < ROW; k++) CHECKF(got[k] == -1.0f - (float)k, "element %d: %g after the ring restarted", k, (double)got[k]);
    free(want);
    free(got);
    op->free(be, &t);
    oc_backend_close(be);
}

int main(void) {
    CHECK_RUN(test_profile);
    CHECK_RUN(test_read_peak);
    CHECK_RUN(test_staged_writes);
    return check_finish();
}

#else /* no OpenCL in this build */

static void test_opencl_decode(void) { check_skip("built without OpenCL (./configure found no CL/cl.h and -lOpenCL)"); }

int main(void) {
    CHECK_RUN(test_opencl_decode);
    return check_finish();
}

#endif
