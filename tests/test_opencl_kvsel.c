/* test_opencl_kvsel.c: the shrinking KV cache's steps on an OpenCL device (opencl/cl_kvsel.c,
 * kernels/kvsel.cl) against the host's definitions in kvcache/kv_select.c on random inputs:
 *  - scoring: the observed rows' softmax summed per key (SparseMM's window per kv head, ZipVL's
 *    probe rows over every head) against oc_kv_score_rows (double sums), added to what the masses
 *    held before;
 *  - ZipVL's set and SparseMM's (over every key and within a subset, as positions and as indices
 *    into it, budgets below and above the keys) against oc_kv_select_zipvl / _sparsemm(_within) on
 *    the same masses: exactly the same set. The masses are multiples of 1/64 with many ties, so the
 *    ties' order (the earlier token first) is tested; ZipVL's masses are its normalized values times
 *    nnz, so mass / nnz is exact in float and double alike;
 *  - compaction: every kv head's K and V rows of a layer, in place and from a staging slot, a layer
 *    without K rows (GLA), against the host's copies; rows past the set and other columns untouched.
 * Device outputs are poisoned (NaN, or -1 for lists) before each run. Skips without an OpenCL device. */
#include "check.h"
#include "core/core.h"

#if OC_HAVE_OPENCL

#include "attention/attn_kernels.h"
#include "backend/backend.h"
#include "core/f16.h"
#include "kvcache/kv_select.h"
#include "opencl/cl_device.h"
#include "opencl/cl_kvsel.h"
#include "port.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static oc_cl_device *g_dev;
static char g_why[OC_ERROR_MESSAGE_BYTES + 32];
static int g_open_failed;

static oc_cl_device *need_dev(void) {
    if (!g_dev && g_open_failed) check_fail_at(__FILE__, __LINE__, "%s", g_why);
    else if (!g_dev) check_skip("%s", g_why);
    return g_dev;
}

/* a device buffer as the backend names it */
static oc_bt dev_bt(size_t n_bytes, const void *host) {
    oc_cl_buf *b = NULL;
    oc_error err;
    oc_bt t = { NULL, 0, 0 };
    if (oc_cl_buf_alloc(g_dev, n_bytes, &b, &err) != OC_OK) {
        check_fail_at(__FILE__, __LINE__, "%s", err.message);
        return t;
    }
    if (host && oc_cl_upload(g_dev, b, 0, host, n_bytes, &err) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", err.message);
    if (!host && oc_cl_fill32(g_dev, b, 0, 0x7fc00000u, n_bytes / 4 * 4, &err) != OC_OK)   /* NaN / garbage */
        check_fail_at(__FILE__, __LINE__, "%s", err.message);
    t.impl = b;
    t.n_bytes = n_bytes;
    return t;
}
static void bt_free(oc_bt *t) { oc_cl_buf_free((oc_cl_buf *)t->impl); }
static void bt_get(const oc_bt *t, size_t off, void *dst, size_t n) {
    oc_error err;
    if (oc_cl_download(g_dev, (oc_cl_buf *)t->impl, off, dst, n, &err) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", err.message);
}
static void bt_set(oc_bt *t, size_t off, const void *src, size_t n) {
    oc_error err;
    if (oc_cl_upload(g_dev, (oc_cl_buf *)t->impl, off, src, n, &err) != OC_OK) check_fail_at(__FILE__, __LINE__, "%s", err.message);
}
static int run(const oc_kv_dev_op *o) {
    oc_error err;
    oc_status st = oc_cl_kv_dev(g_dev, o, &err);
    if (st != OC_OK) check_fail_at(__FILE__, __LINE__, "kv_dev kind %d: %s", (int)o->kind, err.message);
    return st == OC_OK;
}

/* Scoring: n keys of n_kv heads, rows at positions in a batch that starts at `first` (the q buffer
 * holds the batch's rows), against oc_kv_score_rows. */
static void score_case(check_rng *r, int32_t n, int32_t first, int zipvl, int32_t nh, int32_t nkv, int32_t hd) {
    const int32_t d = nh * hd, kvd = nkv * hd, C = n + 5;
    float *q = malloc(sizeof(float) * (size_t)(n - first) * d);
    uint16_t *k = malloc(2 * (size_t)n * kvd);
    for (int64_t i = 0; i < (int64_t)(n - first) * d; i++) q[i] = check_rng_uniform(r, -1.5f, 1.5f);
    for (int64_t i = 0; i < (int64_t)n * kvd; i++) k[i] = oc_f32_to_f16(check_rng_uniform(r, -1.5f, 1.5f));
    int32_t pos[128], n_rows = 0;
    if (zipvl) {   /* probe-like: scattered positions in the batch, ascending */
        for (int32_t p = first; p < n && n_rows < 128; p++)
            if (check_rng_int(r, 0, 2) == 0 || p >= n - 8) pos[n_rows++] = p;
    } else {
        for (int32_t p = OC_MAX(first, n - 32); p < n; p++) pos[n_rows++] = p;
    }
    int32_t n_out = zipvl ? 1 : nkv;
    double *want = calloc((size_t)n_out * C, sizeof(double));
    float *acc0 = malloc(sizeof(float) * (size_t)n_out * C), *got = malloc(sizeof(float) * (size_t)n_out * C);
    for (int32_t i = 0; i < n_out * C; i++) want[i] = acc0[i] = (float)check_rng_int(r, 0, 3);   /* earlier batches' */
    /* the host's scores (kv_select.c), on the host's kernels */
    float *qh = malloc(sizeof(float) * (size_t)n_rows * d);
    for (int32_t i = 0; i < n_rows; i++) memcpy(qh + (size_t)i * d, q + (size_t)(pos[i] - first) * d, sizeof(float) * d);
    oc_kv_rows rows = { qh, d, hd, pos, n_rows, k, NULL, kvd, hd, nh, nkv, hd, 1.0f / sqrtf((float)hd) };
    size_t sb = (oc_kv_score_scratch_bytes(nh, nkv, n, hd, 1) + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN;
    void *scratch = aligned_alloc(OC_MEM_ALIGN, sb);
    oc_kv_score_rows(&rows, want, zipvl ? 0 : C, scratch, oc_attn_kernels_scalar(), NULL);
    oc_bt tq = dev_bt(sizeof(float) * (size_t)(n - first) * d, q), tk = dev_bt(2 * (size_t)n * kvd, k);
    oc_bt tpos = dev_bt(sizeof pos, pos), tstats = dev_bt(sizeof(float) * 2 * 128 * (size_t)nh, NULL);
    oc_bt tpart = dev_bt(sizeof(float) * 128 * (size_t)nkv * C, NULL), tacc = dev_bt(sizeof(float) * (size_t)n_out * C, acc0);
    oc_kv_dev_op o;
    memset(&o, 0, sizeof o);
    o.kind = OC_KV_DEV_SCORE;
    o.q = &tq, o.q_stride = d, o.q_base = first;
    o.k = &tk, o.k_stride = kvd;
    if (zipvl) o.pos = &tpos;
    else o.pos0 = pos[0];
    o.n_rows = n_rows, o.n_head = nh, o.n_head_kv = nkv, o.head_dim = hd, o.acc_stride = zipvl ? 0 : C;
    o.scale = 1.0f / sqrtf((float)hd);
    o.stats = &tstats, o.part = &tpart, o.acc = &tacc, o.n = n;
    if (run(&o)) {
        bt_get(&tacc, 0, got, sizeof(float) * (size_t)n_out * C);
        double worst = 0;
        int bad = 0;
        for (int32_t go = 0; go < n_out; go++)
            for (int32_t j = 0; j < C; j++) {
                double w = want[(size_t)go * C + j], g = got[(size_t)go * C + j];
                if (!(fabs(g - w) <= 2e-5 * (1.0 + fabs(w)))) bad++;   /* NaN fails */
                worst = OC_MAX(worst, fabs(g - w) / (1.0 + fabs(w)));
            }
        CHECKF(!bad, "score (%s, %d keys, rows from %d, %d/%d heads of %d): %d masses differ, worst %.3g",
               zipvl ? "zipvl" : "sparsemm", n, first, nh, nkv, hd, bad, worst);
    }
    bt_free(&tq); bt_free(&tk); bt_free(&tpos); bt_free(&tstats); bt_free(&tpart); bt_free(&tacc);
    free(q); free(k); free(want); free(acc0); free(got); free(qh); free(scratch);
}

static void test_score(void) {
    if (!need_dev()) return;
    check_rng r = { 5150 };
    score_case(&r, 300, 0, 0, 8, 2, 64);
    score_case(&r, 300, 0, 1, 8, 2, 64);
    score_case(&r, 1000, 700, 0, 8, 2, 64);    /* a second batch: rows 700.., keys from 0 */
    score_case(&r, 1000, 400, 1, 8, 2, 64);
    score_case(&r, 37, 0, 1, 8, 2, 64);
    score_case(&r, 500, 0, 1, 12, 2, 128);     /* the Qwen2-VL-2B shape */
    score_case(&r, 500, 100, 0, 12, 2, 128);
    score_case(&r, 200, 0, 1, 4, 4, 80);       /* one query head per kv head, head_dim 80 */
    /* 1,024+ keys: the statistics in several work-groups per row, merged (empty splits for the
     * early probe rows) */
    score_case(&r, 1100, 0, 0, 8, 2, 64);
    score_case(&r, 4361, 0, 1, 8, 2, 64);      /* the long model's items: 8 splits */
    score_case(&r, 4361, 3000, 0, 8, 2, 64);
    score_case(&r, 2600, 2000, 1, 12, 2, 128);
}

/* one set of the device's lists: count, then the entries */
static int32_t get_list(const oc_bt *lists, const oc_bt *counts, int32_t slot, int32_t C, int32_t *out) {
    int32_t n = -1;
    bt_get(counts, (size_t)slot * 4, &n, 4);
    if (n > 0 && n <= C) bt_get(lists, (size_t)slot * C * 4, out, (size_t)n * 4);
    return n;
}

static void test_select(void) {
    if (!need_dev()) return;
    check_rng r = { 4242 };
    const int32_t n_head = 8;
    for (int trial = 0; trial < 14; trial++) {   /* 12, 13: ZipVL's ranking split 8 and 11 ways */
        int32_t n = trial < 4 ? check_rng_int(&r, 1, 80) : trial < 12 ? check_rng_int(&r, 200, 3000) : trial == 12 ? 4361 : 5700,
                C = n + 7;
        /* probes (kv_select.c's), nnz and normalized masses with ties, mass = norm x nnz */
        int32_t probes[128], n_probes = oc_kv_zipvl_probes(n, probes);
        double *mass = malloc(sizeof(double) * n), *tmp = malloc(sizeof(double) * n);
        float *mf = malloc(sizeof(float) * n);
        int32_t *nnz = malloc(4 * n), *kept = malloc(4 * n), *order = malloc(4 * n), *got = malloc(4 * C);
        int32_t *within = malloc(4 * n);
        for (int32_t j = 0, t = 0; j < n; j++) {
            while (t < n_probes && probes[t] < j) t++;
            nnz[j] = (n_probes - t) * n_head;
            double norm = (double)check_rng_int(&r, 0, trial % 2 ? 8 : 200) / 64.0;
            mass[j] = norm * nnz[j];
            mf[j] = (float)mass[j];
        }
        oc_bt tacc = dev_bt(4 * (size_t)C, NULL), tprobes = dev_bt(sizeof probes, probes);
        bt_set(&tacc, 0, mf, 4 * (size_t)n);
        oc_bt tflags = dev_bt(4 * (size_t)C, NULL), tnorm = dev_bt(4 * (size_t)C, NULL);
        oc_bt tlists = dev_bt(4 * (size_t)C * 4, NULL), tcounts = dev_bt(4 * 8, NULL), tpart = dev_bt(4 * 32 * (size_t)C, NULL);
        oc_kv_dev_op o;
        memset(&o, 0, sizeof o);
        o.acc = &tacc, o.counts = &tcounts, o.flags = &tflags, o.norm = &tnorm, o.list = &tlists, o.part = &tpart;
        o.list_stride = C, o.n = n, o.within_idx = -1;
        /* ZipVL: T into slots 0 and 1 (two copies) */
        double tau = trial % 3 == 0 ? 0.9 : trial % 3 == 1 ? 0.99 : 1.5;   /* 1.5: never reached, keeps all */
        int32_t m = oc_kv_select_zipvl(mass, nnz, n, (double)n_probes * n_head, tau, kept, order, tmp);
        o.kind = OC_KV_DEV_ZIPVL, o.probes = &tprobes, o.n_probes = n_probes, o.n_head = n_head;
        o.recent = OC_KV_ZIPVL_RECENT_PROBES, o.p_idx = 7, o.target = tau * n_probes * n_head;
        o.list_off = 0, o.count_idx = 0, o.n_copies = 2;
        if (run(&o)) {
            for (int c = 0; c < 2; c++) {
                int32_t g = get_list(&tlists, &tcounts, c, C, got);
                CHECKF(g == m && !memcmp(got, kept, 4 * (size_t)m), "trial %d zipvl (n %d, tau %.2f) copy %d: %d kept, host %d",
                       trial, n, tau, c, g, m);
            }
        }
        memcpy(within, kept, 4 * (size_t)m);   /* T, for the budgets within it (slot 0 on the device) */
        int32_t n_within = m;
        /* SparseMM: every key, then within T as positions and as indices */
        int32_t budget = trial % 4 == 3 ? n + 3 : check_rng_int(&r, 1, OC_MAX(1, n / 2)), window = 32;
        o.kind = OC_KV_DEV_SPARSEMM, o.budget = budget, o.window = window, o.n_copies = 1;
        o.list_off = 2 * (size_t)C, o.count_idx = 2;
        m = oc_kv_select_sparsemm(mass, n, budget, window, kept, order);
        if (run(&o)) {
            int32_t g = get_list(&tlists, &tcounts, 2, C, got);
            CHECKF(g == m && !memcmp(got, kept, 4 * (size_t)m), "trial %d sparsemm (n %d, budget %d): %d kept, host %d",
                   trial, n, budget, g, m);
        }
        budget = trial % 4 == 3 ? n_within + 3 : check_rng_int(&r, 1, OC_MAX(1, n_within));
        m = oc_kv_select_sparsemm_within(mass, within, n_within, budget, window, kept, order, tmp);
        for (int map = 1; map >= 0; map--) {
            o.budget = budget, o.within = &tlists, o.within_off = 0, o.within_idx = 0, o.map_within = map;
            o.list_off = 3 * (size_t)C, o.count_idx = 3;
            if (!run(&o)) break;
            int32_t g = get_list(&tlists, &tcounts, 3, C, got), ok = g == m;
            for (int32_t i = 0, t = 0; ok && i < m; i++) {
                if (map) {
                    ok = got[i] == kept[i];
                } else {
                    while (t < n_within && within[t] < kept[i]) t++;
                    ok = got[i] == t;
                }
            }
            CHECKF(ok, "trial %d sparsemm within T (%d of %d, budget %d, %s): %d kept, host %d", trial, n_within, n, budget,
                   map ? "positions" : "indices", g, m);
        }
        bt_free(&tacc); bt_free(&tprobes); bt_free(&tflags); bt_free(&tnorm); bt_free(&tlists); bt_free(&tcounts); bt_free(&tpart);
        free(mass); free(tmp); free(mf); free(nnz); free(kept); free(order); free(got); free(within);
    }
}

/* Compaction of one layer's two kv heads, K and V, against the host's copies. Trials 8 on: other
 * row lengths, so the rows are cut into other slices (cl_kvsel.c keep: 128 -> 8 slices of 8 words,
 * 40 -> 2 of 10, 6 -> one of 3 words, 85 rows an item's sweep; 514 -> one of 257 words, wider than
 * the work-group). */
static void test_keep(void) {
    if (!need_dev()) return;
    check_rng r = { 99 };
    static const int32_t hds[] = { 128, 40, 6, 514, 128, 6 };
    const int32_t nkv = 2;
    for (int trial = 0; trial < 8 + (int)OC_ARRAY_LEN(hds); trial++) {
        const int32_t hd = trial < 8 ? 64 : hds[trial - 8], kvd = hd * nkv;
        int32_t n = trial < 2 || trial == 12 ? check_rng_int(&r, 1, 40) : check_rng_int(&r, 600, 3000), C = n + 3;
        int staged = trial % 2, no_k = trial == 5;
        int32_t at = 2, shift = staged ? C : 0;   /* region rows from `at`; staging C rows after it */
        size_t rows = (size_t)at + (size_t)C * 2 + 4, elems = rows * kvd;
        uint16_t *k = malloc(2 * elems), *v = malloc(2 * elems), *wk = malloc(2 * elems), *wv = malloc(2 * elems);
        uint16_t *gk = malloc(2 * elems), *gv = malloc(2 * elems);
        for (size_t i = 0; i < elems; i++) k[i] = (uint16_t)check_rng_int(&r, 0, 65535), v[i] = (uint16_t)check_rng_int(&r, 0, 65535);
        int32_t *lists = malloc(4 * (size_t)C * nkv), counts[2];
        for (int32_t g = 0; g < nkv; g++) {
            int32_t m = 0;
            for (int32_t j = 0; j < n; j++)
                if (check_rng_int(&r, 0, 3) || j == n - 1) lists[(size_t)g * C + m++] = j;
            counts[g] = m;
        }
        memcpy(wk, k, 2 * elems);
        memcpy(wv, v, 2 * elems);
        for (int32_t g = 0; g < nkv; g++)
            for (int32_t i = 0; i < counts[g]; i++) {
                size_t src = ((size_t)at + lists[(size_t)g * C + i] + shift) * kvd + (size_t)g * hd, dst = ((size_t)at + i) * kvd + (size_t)g * hd;
                if (!no_k) memmove(wk + dst, wk + src, 2 * (size_t)hd);
                memmove(wv + dst, wv + src, 2 * (size_t)hd);
            }
        oc_bt tk = dev_bt(2 * elems, k), tv = dev_bt(2 * elems, v), tl = dev_bt(4 * (size_t)C * nkv, lists);
        oc_bt tc = dev_bt(sizeof counts, counts);
        oc_kv_dev_op o;
        memset(&o, 0, sizeof o);
        o.kind = OC_KV_DEV_KEEP, o.n = n, o.counts = &tc, o.list = &tl, o.list_stride = C, o.count_idx = 0;
        o.t = no_k ? NULL : &tk, o.t2 = &tv, o.t_off = o.t2_off = (int64_t)at * kvd, o.t_stride = kvd;
        o.row_elems = hd, o.shift = o.shift2 = shift, o.n_groups = nkv;
        if (run(&o)) {
            bt_get(&tk, 0, gk, 2 * elems);
            bt_get(&tv, 0, gv, 2 * elems);
            CHECKF(!memcmp(gk, wk, 2 * elems) && !memcmp(gv, wv, 2 * elems), "trial %d (%d keys of %d, %s%s): rows differ",
                   trial, n, (int)hd, staged ? "from staging" : "in place", no_k ? ", V only" : "");
        }
        bt_free(&tk); bt_free(&tv); bt_free(&tl); bt_free(&tc);
        free(k); free(v); free(wk); free(wv); free(gk); free(gv); free(lists);
    }
}

/* Operands outside their buffers are refused before any launch. */
static void test_errors(void) {
    if (!need_dev()) return;
    oc_bt small = dev_bt(64, NULL), counts = dev_bt(16, NULL);
    oc_kv_dev_op o;
    memset(&o, 0, sizeof o);
    o.kind = OC_KV_DEV_ZIPVL, o.acc = &small, o.flags = &small, o.norm = &small, o.counts = &counts, o.list = &small;
    o.n = 1000, o.n_copies = 1, o.within_idx = -1;
    oc_error err;
    CHECK(oc_cl_kv_dev(g_dev, &o, &err) == OC_ERR_INVALID && strstr(err.message, "outside"));
    o.kind = OC_KV_DEV_KEEP, o.t2 = &small, o.n_groups = 1, o.row_elems = 64, o.t_stride = 64;
    CHECK(oc_cl_kv_dev(g_dev, &o, &err) == OC_ERR_INVALID);
    o.kind = (oc_kv_dev_kind)99;
    CHECK(oc_cl_kv_dev(g_dev, &o, &err) == OC_ERR_INVALID);
    bt_free(&small);
    bt_free(&counts);
}

int main(void) {
    oc_error err;
    const char *want = getenv("OC_TEST_OPENCL_DEVICE");
    oc_status st = oc_cl_open(&g_dev, want, NULL, NULL, &err);
    if (st != OC_OK) {
        g_open_failed = st != OC_ERR_NOT_FOUND || (want && *want);
        snprintf(g_why, sizeof g_why, "%s: %s", g_open_failed ? "the OpenCL device did not open" : "no OpenCL device",
                 err.message);
    }
    CHECK_RUN(test_score);
    CHECK_RUN(test_select);
    CHECK_RUN(test_keep);
    CHECK_RUN(test_errors);
    oc_cl_close(g_dev);
    return check_finish();
}

#else

static void test_opencl_kvsel(void) { check_skip("built without OpenCL (./configure found no CL/cl.h and -lOpenCL)"); }

int main(void) {
    CHECK_RUN(test_opencl_kvsel);
    return check_finish();
}

#endif
