/* test_backend.c: the backend interface (src/backend/backend.h) as a contract: every operation of the
 * table against a naive double-precision reference, driven only through the table (alloc, write,
 * op, read), so a device backend can be run through the same cases once it is wired. Outputs are
 * poisoned with NaN first; strided outputs must leave the gaps untouched; operands outside their
 * buffer must fail with OC_ERR_INVALID; results must be bitwise the same with 1 and 3 threads and
 * the CPU backend is run with every ISA this machine has. The OpenCL backend runs the same cases
 * (skipped, saying why, without a device). Also: backend selection through oc_context_params
 * (OpenCL on a device that is not there fails naming the devices; auto then runs on the CPU and
 * says why; run make check with OCL_ICD_VENDORS=/nonexistent for the no-platform path). */
#include "backend/backend.h"
#include "check.h"
#include "core/f16.h"
#include "model/model.h"
#include "port.h"
#include "support/opencl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx {
    oc_backend *be;
    const oc_backend_ops *op;
    check_rng rng;
    float *log;          /* every output of a run, for the thread comparison */
    size_t n_log, cap_log;
} fx;

static void record(fx *f, const float *p, size_t n) {
    for (size_t i = 0; i < n && f->n_log < f->cap_log; i++) f->log[f->n_log++] = p[i];
}

static void fill(fx *f, float *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = check_rng_uniform(&f->rng, -1.0f, 1.0f);
}

/* A buffer holding n_bytes of host (alloc + write). */
static oc_bt upload(fx *f, const void *host, size_t n_bytes) {
    oc_bt t;
    oc_error e;
    memset(&t, 0, sizeof t);
    CHECKF(f->op->alloc(f->be, &t, n_bytes, 0, &e) == OC_OK, "alloc: %s", e.message);
    CHECKF(f->op->write(f->be, &t, 0, host, n_bytes, &e) == OC_OK, "write: %s", e.message);
    return t;
}

static void download(fx *f, const oc_bt *t, void *host, size_t n_bytes) {
    oc_error e;
    CHECKF(f->op->read(f->be, t, 0, host, n_bytes, &e) == OC_OK, "read: %s", e.message);
}

/* y rows with gaps: out[off + t * stride + o]; the gaps must stay NaN. */
static void case_matmul(fx *f, int64_t n_tok) {
    enum { N_IN = 64, N_OUT = 24, XS = 70, XO = 3, YS = 30, YO = 2 };
    float w[N_OUT * N_IN], bias[N_OUT], x[XO + 6 * XS], y[YO + 6 * YS];
    fill(f, w, OC_ARRAY_LEN(w));
    fill(f, bias, N_OUT);
    fill(f, x, OC_ARRAY_LEN(x));
    check_poison_f32(y, OC_ARRAY_LEN(y));
    oc_weight src = { OC_DTYPE_F32, N_IN, N_OUT, w, N_IN * sizeof(float) };
    oc_bw bw;
    oc_error e;
    REQUIREF(f->op->weight(f->be, &bw, &src, &e) == OC_OK, "%s", e.message);
    oc_bt bx = upload(f, x, sizeof x), by = upload(f, y, sizeof y), bb;
    REQUIREF(f->op->import(f->be, &bb, bias, sizeof bias, &e) == OC_OK, "%s", e.message);
    REQUIREF(f->op->matmul(f->be, &bw, &bx, XO, XS, &by, YO, YS, n_tok, &bb, &e) == OC_OK, "%s", e.message);
    download(f, &by, y, sizeof y);
    double ref[6 * N_OUT];
    float got[6 * N_OUT];
    int gaps_nan = 1;
    for (int64_t t = 0; t < n_tok; t++)
        for (int o = 0; o < YS; o++) {
            float v = y[YO + t * YS + o];
            if (o >= N_OUT) {
                gaps_nan &= isnan(v);
                continue;
            }
            double s = bias[o];
            for (int i = 0; i < N_IN; i++) s += (double)w[o * N_IN + i] * x[XO + t * XS + i];
            ref[t * N_OUT + o] = s;
            got[t * N_OUT + o] = v;
        }
    double err = check_rel_err_f32(got, ref, (size_t)n_tok * N_OUT);
    CHECKF(err <= 1e-5, "matmul n_tok %lld: rel err %.3e", (long long)n_tok, err);
    CHECKF(gaps_nan, "matmul wrote between output rows");
    record(f, got, (size_t)n_tok * N_OUT);
    /* an output buffer one element short is refused */
    oc_bt small;
    REQUIRE(f->op->alloc(f->be, &small, (size_t)(YO + (n_tok - 1) * YS + N_OUT - 1) * sizeof(float), 0, &e) == OC_OK);
    CHECK(f->op->matmul(f->be, &bw, &bx, XO, XS, &small, YO, YS, n_tok, &bb, &e) == OC_ERR_INVALID);
    oc_bt *all[] = { &bw.t, &bx, &by, &bb, &small };
    for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) f->op->free(f->be, all[i]);
}

/* F16 table; rows with a negative id keep what they held. */
static void case_embed(fx *f) {
    enum { ROWS = 10, DIM = 16, N = 4 };
    uint16_t table[ROWS * DIM];
    for (int i = 0; i < ROWS * DIM; i++) table[i] = oc_f32_to_f16(check_rng_uniform(&f->rng, -2.0f, 2.0f));
    int32_t ids[N] = { 3, -1, 9, 0 };
    float dst[N * DIM];
    for (int i = 0; i < N * DIM; i++) dst[i] = 7.0f;
    oc_weight src = { OC_DTYPE_F16, DIM, ROWS, table, DIM * sizeof(uint16_t) };
    oc_bw bw;
    oc_error e;
    REQUIRE(f->op->weight(f->be, &bw, &src, &e) == OC_OK);
    oc_bt bi = upload(f, ids, sizeof ids), bd = upload(f, dst, sizeof dst);
    REQUIREF(f->op->embed(f->be, &bw, &bi, N, &bd, 0, &e) == OC_OK, "%s", e.message);
    download(f, &bd, dst, sizeof dst);
    int ok = 1;
    for (int r = 0; r < N; r++)
        for (int i = 0; i < DIM; i++)
            ok &= dst[r * DIM + i] == (ids[r] < 0 ? 7.0f : oc_f16_to_f32(table[ids[r] * DIM + i]));
    CHECK(ok);
    record(f, dst, OC_ARRAY_LEN(dst));
    oc_bt *all[] = { &bw.t, &bi, &bd };
    for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) f->op->free(f->be, all[i]);
}

/* x += res; y = norm(x) * w (+ b), against the definitions in double. */
static void case_norm(fx *f, oc_norm_kind kind, int with_y) {
    enum { ROWS = 3, DIM = 40 };
    float x[ROWS * DIM], r[ROWS * DIM], w[DIM], b[DIM], y[ROWS * DIM];
    fill(f, x, OC_ARRAY_LEN(x));
    fill(f, r, OC_ARRAY_LEN(r));
    fill(f, w, DIM);
    fill(f, b, DIM);
    check_poison_f32(y, OC_ARRAY_LEN(y));
    oc_bt bx = upload(f, x, sizeof x), br = upload(f, r, sizeof r), bw = upload(f, w, sizeof w),
          bb = upload(f, b, sizeof b), by = upload(f, y, sizeof y);
    oc_error e;
    REQUIREF(f->op->norm(f->be, kind, &bx, 0, &br, 0, with_y ? &by : NULL, 0, &bw, kind == OC_NORM_LAYER ? &bb : NULL,
                         ROWS, DIM, 1e-6f, &e) == OC_OK, "%s", e.message);
    float gx[ROWS * DIM];
    download(f, &bx, gx, sizeof gx);
    download(f, &by, y, sizeof y);
    int add_exact = 1;
    double ref[ROWS * DIM];
    for (int row = 0; row < ROWS; row++) {
        float *xr = x + row * DIM;
        for (int i = 0; i < DIM; i++) {
            xr[i] += r[row * DIM + i];   /* one float add: correctly rounded either way */
            add_exact &= gx[row * DIM + i] == xr[i];
        }
        double mean = 0, var = 0, ss = 0;
        for (int i = 0; i < DIM; i++) mean += xr[i] / (double)DIM;
        for (int i = 0; i < DIM; i++) {
            var += (xr[i] - mean) * (xr[i] - mean) / DIM;
            ss += (double)xr[i] * xr[i] / DIM;
        }
        for (int i = 0; i < DIM; i++)
            ref[row * DIM + i] = kind == OC_NORM_LAYER ? (xr[i] - mean) / sqrt(var + 1e-6) * w[i] + b[i]
                                                       : xr[i] / sqrt(ss + 1e-6) * w[i];
    }
    CHECK(add_exact);
    if (with_y) {
        double err = check_rel_err_f32(y, ref, OC_ARRAY_LEN(y));
        CHECKF(err <= 1e-5, "norm kind %d: rel err %.3e", (int)kind, err);
        record(f, y, OC_ARRAY_LEN(y));
    } else {
        int untouched = 1;
        for (size_t i = 0; i < OC_ARRAY_LEN(y); i++) untouched &= isnan(y[i]);
        CHECKF(untouched, "norm without y wrote y");
    }
    oc_bt *all[] = { &bx, &br, &bw, &bb, &by };
    for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) f->op->free(f->be, all[i]);
}

/* NEOX rotary with 4 of 5 pairs turned (dims 8, 9 of each head stay), then the f16 store. */
static void case_rope_kv(fx *f) {
    enum { TOK = 3, HEADS = 2, HD = 10, PAIRS = 4, N = TOK * HEADS * HD };
    float x[N], c[TOK * PAIRS], s[TOK * PAIRS];
    fill(f, x, N);
    for (int i = 0; i < TOK * PAIRS; i++) {
        double a = check_rng_uniform(&f->rng, -3.0f, 3.0f);
        c[i] = (float)cos(a);
        s[i] = (float)sin(a);
    }
    oc_bt bx = upload(f, x, sizeof x), bc = upload(f, c, sizeof c), bs = upload(f, s, sizeof s);
    uint16_t h[N + 8];
    for (int i = 0; i < N + 8; i++) h[i] = 0x7e00;   /* f16 NaN */
    oc_bt bh = upload(f, h, sizeof h);
    oc_error e;
    REQUIREF(f->op->rope(f->be, &bx, 0, TOK, HEADS, HD, PAIRS, &bc, &bs, &e) == OC_OK, "%s", e.message);
    REQUIREF(f->op->kv_store(f->be, &bx, 0, &bh, 4, N, &e) == OC_OK, "%s", e.message);
    float got[N];
    download(f, &bx, got, sizeof got);
    download(f, &bh, h, sizeof h);
    double ref[N];
    for (int t = 0; t < TOK; t++)
        for (int hh = 0; hh < HEADS; hh++) {
            const float *v = x + (t * HEADS + hh) * HD;
            double *o = ref + (t * HEADS + hh) * HD;
            for (int k = 0; k < HD; k++) o[k] = v[k];
            for (int k = 0; k < PAIRS; k++) {
                o[k] = (double)v[k] * c[t * PAIRS + k] - (double)v[k + PAIRS] * s[t * PAIRS + k];
                o[k + PAIRS] = (double)v[k + PAIRS] * c[t * PAIRS + k] + (double)v[k] * s[t * PAIRS + k];
            }
        }
    double err = check_rel_err_f32(got, ref, N);
    CHECKF(err <= 1e-6, "rope rel err %.3e", err);
    int kv_ok = h[0] == 0x7e00 && h[3] == 0x7e00 && h[N + 4] == 0x7e00;
    for (int i = 0; i < N; i++) kv_ok &= h[4 + i] == oc_f32_to_f16(got[i]);
    CHECK(kv_ok);
    record(f, got, N);
    oc_bt *all[] = { &bx, &bc, &bs, &bh };
    for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) f->op->free(f->be, all[i]);
}

/* add, act (each kind), glu, gather_rows: elementwise against double definitions. */
static void case_elementwise(fx *f) {
    enum { N = 40000 };   /* several pool tasks */
    float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    double *ref = malloc(N * sizeof(double));
    REQUIRE(a && b && g && ref);
    fill(f, a, N);
    fill(f, b, N);
    oc_bt ba = upload(f, a, N * sizeof(float)), bb = upload(f, b, N * sizeof(float));
    oc_error e;
    REQUIRE(f->op->add(f->be, &ba, 5, &bb, 0, N - 5, &e) == OC_OK);
    download(f, &ba, g, N * sizeof(float));
    int ok = 1;
    for (int i = 0; i < N; i++) ok &= g[i] == (i < 5 ? a[i] : a[i] + b[i - 5]);
    CHECKF(ok, "add");
    record(f, g, N);
    for (int act = 0; act < 3; act++)
        for (int glu = 0; glu < 2; glu++) {
            REQUIRE(f->op->write(f->be, &ba, 0, a, N * sizeof(float), &e) == OC_OK);
            if (glu) REQUIRE(f->op->glu(f->be, &ba, 0, &bb, 0, N, (oc_act)act, &e) == OC_OK);
            else REQUIRE(f->op->act(f->be, &ba, 0, N, (oc_act)act, &e) == OC_OK);
            download(f, &ba, g, N * sizeof(float));
            for (int i = 0; i < N; i++) {
                double x = a[i];
                double v = act == OC_ACT_SILU ? x / (1 + exp(-x)) : act == OC_ACT_GELU_ERF ? 0.5 * x * (1 + erf(x / sqrt(2.0)))
                                                                                     : x / (1 + exp(-1.702 * x));
                ref[i] = glu ? v * b[i] : v;
            }
            double err = check_rel_err_f32(g, ref, N);
            CHECKF(err <= 1e-6, "act %d glu %d: rel err %.3e", act, glu, err);
            record(f, g, N);
        }
    /* gather: dst row r = src row idx[r / 2] * 2 + r % 2, rows of 3 */
    int32_t idx[3] = { 2, 0, 1 };
    oc_bt bi = upload(f, idx, sizeof idx);
    REQUIRE(f->op->gather_rows(f->be, &bb, 0, &ba, 0, &bi, 6, 3, 2, &e) == OC_OK);
    download(f, &ba, a, 18 * sizeof(float));
    download(f, &bb, b, 18 * sizeof(float));
    ok = 1;
    for (int r = 0; r < 6; r++)
        for (int k = 0; k < 3; k++) ok &= b[r * 3 + k] == a[(idx[r / 2] * 2 + r % 2) * 3 + k];
    CHECKF(ok, "gather_rows");
    int32_t bad[3] = { 2, 0, 1 << 20 };
    REQUIRE(f->op->write(f->be, &bi, 0, bad, sizeof bad, &e) == OC_OK);
    CHECK(f->op->gather_rows(f->be, &bb, 0, &ba, 0, &bi, 6, 3, 2, &e) == OC_ERR_INVALID);
    f->op->free(f->be, &ba);
    f->op->free(f->be, &bb);
    f->op->free(f->be, &bi);
    free(a);
    free(b);
    free(g);
    free(ref);
}

/* Causal grouped-query attention with an offset, f32 and f16 keys and values. */
static void case_attention(fx *f, int32_t kv_dtype) {
    enum { NQ = 5, NKV = 9, H = 4, HKV = 2, D = 8, OFF = 4 };
    float q[NQ * H * D], k[NKV * HKV * D], v[NKV * HKV * D], out[NQ * H * D];
    fill(f, q, OC_ARRAY_LEN(q));
    fill(f, k, OC_ARRAY_LEN(k));
    fill(f, v, OC_ARRAY_LEN(v));
    check_poison_f32(out, OC_ARRAY_LEN(out));
    uint16_t kh[NKV * HKV * D], vh[NKV * HKV * D];
    for (size_t i = 0; i < OC_ARRAY_LEN(k); i++) {
        kh[i] = oc_f32_to_f16(k[i]);
        vh[i] = oc_f32_to_f16(v[i]);
        if (kv_dtype == OC_DTYPE_F16) {   /* the reference reads what the engine reads */
            k[i] = oc_f16_to_f32(kh[i]);
            v[i] = oc_f16_to_f32(vh[i]);
        }
    }
    int f16 = kv_dtype == OC_DTYPE_F16;
    oc_bt bq = upload(f, q, sizeof q), bo = upload(f, out, sizeof out);
    oc_bt bk = f16 ? upload(f, kh, sizeof kh) : upload(f, k, sizeof k);
    oc_bt bv = f16 ? upload(f, vh, sizeof vh) : upload(f, v, sizeof v);
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    oc_attn_bt t = { &bq, &bk, &bv, &bo };
    a.n_q = NQ;
    a.n_kv = NKV;
    a.n_head = H;
    a.n_head_kv = HKV;
    a.head_dim = D;
    a.q_stride_token = H * D;
    a.q_stride_head = D;
    a.kv_dtype = kv_dtype;
    a.k_stride_token = a.v_stride_token = HKV * D;
    a.k_stride_head = a.v_stride_head = D;
    a.out_stride_token = H * D;
    a.out_stride_head = D;
    a.scale = 0.35f;
    a.mask = OC_ATTN_CAUSAL;
    a.q_offset = OFF;
    oc_error e;
    oc_attn_stats st = { 0, 0, 0 };
    REQUIREF(f->op->attention(f->be, &a, &t, &st, &e) == OC_OK, "%s", e.message);
    download(f, &bo, out, sizeof out);
    uint64_t pairs = 0;   /* causal with the offset: query i sees keys 0 .. OFF + i */
    for (int i = 0; i < NQ; i++) pairs += (uint64_t)OC_MIN(OFF + i + 1, (int)NKV);
    CHECKF(st.flops_kept == pairs * H * 4 * D && st.flops_skipped == 0 && st.flops_executed >= st.flops_kept,
           "attention stats: kept %llu, skipped %llu, executed %llu; expected %llu kept", (unsigned long long)st.flops_kept,
           (unsigned long long)st.flops_skipped, (unsigned long long)st.flops_executed,
           (unsigned long long)(pairs * H * 4 * D));
    /* a sparse pattern: A-shape (1 sink, window 2) on head 1 keeps fewer pairs, the others the same */
    oc_head_pattern pat[H];
    memset(pat, 0, sizeof pat);
    pat[1] = (oc_head_pattern){ .kind = OC_PATTERN_A_SHAPE, .n_sink = 1, .n_local = 2 };
    a.patterns = pat;
    oc_attn_stats sp = { 0, 0, 0 };
    float sparse_out[NQ * H * D];
    REQUIREF(f->op->attention(f->be, &a, &t, &sp, &e) == OC_OK, "%s", e.message);
    download(f, &bo, sparse_out, sizeof sparse_out);
    uint64_t a_pairs = 0;   /* key j < 1 or p - 2 < j <= p, p = OFF + i */
    for (int i = 0; i < NQ; i++)
        for (int j = 0; j <= OFF + i && j < NKV; j++) a_pairs += j < 1 || j > OFF + i - 2;
    CHECKF(sp.flops_kept == (pairs * (H - 1) + a_pairs) * 4 * D && sp.flops_skipped == (pairs - a_pairs) * 4 * D,
           "sparse attention stats: kept %llu, skipped %llu", (unsigned long long)sp.flops_kept,
           (unsigned long long)sp.flops_skipped);
    int others_same = 1;
    for (int i = 0; i < NQ; i++)
        for (int h = 0; h < H; h++)
            for (int c = 0; c < D && h != 1; c++) others_same &= sparse_out[(i * H + h) * D + c] == out[(i * H + h) * D + c];
    CHECKF(others_same, "a pattern on head 1 changed the other heads");
    record(f, sparse_out, OC_ARRAY_LEN(sparse_out));
    a.patterns = NULL;
    double ref[NQ * H * D];
    for (int i = 0; i < NQ; i++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / HKV);
            double s[NKV], mx = -1e300, sum = 0;
            for (int j = 0; j <= OFF + i && j < NKV; j++) {
                s[j] = 0;
                for (int c = 0; c < D; c++) s[j] += (double)q[(i * H + h) * D + c] * k[(j * HKV + g) * D + c];
                s[j] *= 0.35;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int c = 0; c < D; c++) ref[(i * H + h) * D + c] = 0;
            for (int j = 0; j <= OFF + i && j < NKV; j++) {
                double p = exp(s[j] - mx);
                sum += p;
                for (int c = 0; c < D; c++) ref[(i * H + h) * D + c] += p * v[(j * HKV + g) * D + c];
            }
            for (int c = 0; c < D; c++) ref[(i * H + h) * D + c] /= sum;
        }
    double err = check_rel_err_f32(out, ref, OC_ARRAY_LEN(out));
    CHECKF(err <= 1e-4, "attention kv dtype %d: rel err %.3e", (int)kv_dtype, err);
    record(f, out, OC_ARRAY_LEN(out));
    a.n_kv = NKV + 1;   /* one key past the buffers */
    CHECK(f->op->attention(f->be, &a, &t, NULL, &e) == OC_ERR_INVALID);
    oc_bt *all[] = { &bq, &bo, &bk, &bv };
    for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) f->op->free(f->be, all[i]);
}

/* Host buffers: bind + write, an op, read back into the bound memory; transfers out of range. */
static void case_transfers(fx *f) {
    float in[8], res[8], out[8];
    fill(f, in, 8);
    fill(f, res, 8);
    check_poison_f32(out, 8);
    oc_bt hi, ho, br = upload(f, res, sizeof res);
    oc_error e;
    REQUIRE(f->op->alloc(f->be, &hi, 16 * sizeof(float), OC_BT_HOST, &e) == OC_OK);
    REQUIRE(f->op->alloc(f->be, &ho, 16 * sizeof(float), OC_BT_HOST, &e) == OC_OK);
    REQUIRE(f->op->bind(f->be, &hi, in, sizeof in, &e) == OC_OK && f->op->write(f->be, &hi, 0, in, sizeof in, &e) == OC_OK);
    REQUIRE(f->op->bind(f->be, &ho, out, sizeof out, &e) == OC_OK);
    REQUIRE(f->op->norm(f->be, OC_NORM_RMS, &br, 0, &hi, 0, &ho, 0, NULL, NULL, 1, 8, 1e-6f, &e) == OC_OK);
    REQUIRE(f->op->read(f->be, &ho, 0, out, sizeof out, &e) == OC_OK);
    double ss = 0, ref[8];
    for (int i = 0; i < 8; i++) {
        res[i] += in[i];
        ss += (double)res[i] * res[i] / 8;
    }
    for (int i = 0; i < 8; i++) ref[i] = res[i] / sqrt(ss + 1e-6);
    CHECK(check_rel_err_f32(out, ref, 8) <= 1e-5);
    const float *view = f->op->map_read(f->be, &br, 0, sizeof res, &e);
    REQUIRE(view);
    CHECK(memcmp(view, res, sizeof res) == 0);
    f->op->unmap(f->be, &br, view);
    CHECK(f->op->bind(f->be, &hi, in, 17 * sizeof(float), &e) == OC_ERR_INVALID);
    CHECK(f->op->bind(f->be, &br, in, sizeof in, &e) == OC_ERR_INVALID);   /* not a host buffer */
    CHECK(f->op->write(f->be, &br, 4, in, sizeof in, &e) == OC_ERR_INVALID);
    CHECK(f->op->read(f->be, &br, 0, out, sizeof res + 1, &e) == OC_ERR_INVALID);
    oc_bt *all[] = { &hi, &ho, &br };
    for (size_t i = 0; i < OC_ARRAY_LEN(all); i++) f->op->free(f->be, all[i]);
}

static void run_cases(fx *f) {
    case_matmul(f, 5);
    case_matmul(f, 1);
    case_embed(f);
    case_norm(f, OC_NORM_RMS, 1);
    case_norm(f, OC_NORM_LAYER, 1);
    case_norm(f, OC_NORM_RMS, 0);
    case_rope_kv(f);
    case_elementwise(f);
    case_attention(f, OC_DTYPE_F32);
    case_attention(f, OC_DTYPE_F16);
    case_transfers(f);
}

/* Every case on the CPU backend with each ISA, serial and with 3 threads: same bits. */
static void test_cpu_ops(void) {
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_pool *pool;
    oc_error e;
    REQUIRE(oc_pool_open(&pool, 3, NULL, &e) == OC_OK);
    oc_backend_limits lim = { 128, 8, { 8, 16, 4, 2, 8 }, 0, 0, 0, 0 };
    size_t cap = 400000;
    float *logs[2] = { malloc(cap * sizeof(float)), malloc(cap * sizeof(float)) };
    REQUIRE(logs[0] && logs[1]);
    for (int isa = 0; isa < OC_ISA_COUNT; isa++) {
        if (!oc_isa_runs((oc_isa)isa, &cpu)) continue;
        size_t n_log[2];
        for (int t = 0; t < 2; t++) {
            oc_backend_spec spec = { OC_BACKEND_KIND_CPU, NULL, t ? pool : NULL, (oc_isa)isa, NULL };
            fx f = { NULL, NULL, { 42 }, logs[t], 0, cap };
            REQUIREF(oc_backend_open(&f.be, &spec, &lim, NULL, &e) == OC_OK, "%s", e.message);
            CHECK(oc_backend_bytes(&spec, &lim, oc_pool_n_threads(spec.pool)) > 0);
            f.op = f.be->ops;
            CHECK(f.op->version == OC_BACKEND_OPS_VERSION && strcmp(f.op->name, "cpu") == 0);
            run_cases(&f);
            n_log[t] = f.n_log;
            oc_backend_close(f.be);
        }
        CHECKF(n_log[0] == n_log[1] && memcmp(logs[0], logs[1], n_log[0] * sizeof(float)) == 0,
               "%s: 1 and 3 threads differ", oc_isa_name((oc_isa)isa));
        printf("  %s: every op matches its reference, %zu outputs equal with 1 and 3 threads\n",
               oc_isa_name((oc_isa)isa), n_log[0]);
    }
    oc_backend_spec bad = { (oc_backend_kind)7, NULL, NULL, OC_ISA_SCALAR, NULL };
    oc_backend dummy, *be = &dummy;   /* must be overwritten with NULL */
    CHECK(oc_backend_open(&be, &bad, &lim, NULL, &e) == OC_ERR_UNSUPPORTED && be == NULL);
    free(logs[0]);
    free(logs[1]);
    oc_pool_close(pool);
}

/* Every case on the OpenCL backend (on its own device, as a graph context opened alone does). */
static void test_opencl_ops(void) {
    const char *why = check_opencl_missing();
    if (why) {
        check_skip("%s", why);
        return;
    }
    oc_backend_limits lim = { 128, 8, { 8, 16, 4, 2, 8 }, 0, 0, 0, 0 };
    oc_backend_spec spec = { OC_BACKEND_KIND_OPENCL, check_opencl_device(), NULL, OC_ISA_SCALAR, NULL };
    fx f = { NULL, NULL, { 42 }, NULL, 0, 0 };
    oc_error e;
    REQUIREF(oc_backend_open(&f.be, &spec, &lim, NULL, &e) == OC_OK, "%s", e.message);
    CHECK(oc_backend_bytes(&spec, &lim, 1) > 0);
    f.op = f.be->ops;
    CHECK(f.op->version == OC_BACKEND_OPS_VERSION && strcmp(f.op->name, "opencl") == 0);
    run_cases(&f);
    /* the explicit debug mask is the CPU's alone; a call with other head counts than the limits */
    float q[8 * 4 * 8];
    oc_bt bq = upload(&f, q, sizeof q);
    uint8_t mask[8 * 8];
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    oc_attn_bt t = { &bq, &bq, &bq, &bq };
    a.n_q = a.n_kv = 8;
    a.n_head = 4;
    a.n_head_kv = 2;
    a.head_dim = 8;
    a.kv_dtype = OC_DTYPE_F32;
    a.q_stride_token = a.out_stride_token = 32;
    a.k_stride_token = a.v_stride_token = 16;
    a.q_stride_head = a.k_stride_head = a.v_stride_head = a.out_stride_head = 8;
    a.mask = OC_ATTN_EXPLICIT;
    a.explicit_mask = mask;
    a.explicit_stride_q = 8;
    CHECK(f.op->attention(f.be, &a, &t, NULL, &e) == OC_ERR_UNSUPPORTED);
    CHECKF(strstr(e.message, "explicit"), "%s", e.message);
    a.mask = OC_ATTN_CAUSAL;
    a.n_head_kv = 4;
    a.k_stride_token = a.v_stride_token = 32;
    CHECK(f.op->attention(f.be, &a, &t, NULL, &e) == OC_ERR_INVALID);
    f.op->free(f.be, &bq);
    oc_backend_close(f.be);
    printf("  opencl: every op matches its reference\n");
}

/* oc_context_params.backend: CPU opens; OpenCL on a device that is not there fails naming it (or
 * saying there is no platform), and AUTO then opens the CPU, saying why; OpenCL opens when a
 * device is there and says which. */
static void test_context_selection(void) {
    oc_backend_kind k;
    oc_error e;
    CHECK(oc_backend_resolve(OC_BACKEND_CPU, NULL, &k, &e) == OC_OK && k == OC_BACKEND_KIND_CPU);
    CHECK(oc_backend_resolve(OC_BACKEND_AUTO, "0", &k, &e) == OC_OK &&
          k == (OC_HAVE_OPENCL ? OC_BACKEND_KIND_OPENCL : OC_BACKEND_KIND_CPU));
    CHECK(oc_backend_resolve(7, NULL, &k, &e) == OC_ERR_INVALID);
    oc_model *m;
    REQUIREF(oc_model_open(&m, "tests/data/models/qwen2vl/text.gguf", NULL, NULL, &e) == OC_OK, "%s", e.message);
    oc_context_params p;
    oc_context_params_default(&p);
    CHECK(p.backend == OC_BACKEND_CPU && p.device == NULL);
    p.max_context_tokens = 64;
    p.n_threads = 1;
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &p, &e) == OC_OK, "%s", e.message);
    CHECKF(!strncmp(oc_context_backend_name(c), "CPU (", 5), "%s", oc_context_backend_name(c));
    size_t cpu_bytes = 0, bytes = 0;
    CHECK(oc_context_memory_bytes(m, &p, &cpu_bytes, &e) == OC_OK && cpu_bytes > 0);
    oc_context_close(c);

    p.backend = OC_BACKEND_OPENCL;
    p.device = "no-such-device-xyz";
    c = (oc_context *)&p;   /* must be overwritten with NULL */
    oc_status st = oc_context_open(&c, m, &p, &e);
    CHECK(st != OC_OK && c == NULL);
    if (!OC_HAVE_OPENCL) {
        CHECK(st == OC_ERR_UNSUPPORTED && oc_context_memory_bytes(m, &p, &bytes, &e) == OC_ERR_UNSUPPORTED);
        CHECKF(strstr(e.message, "OpenCL"), "message: %s", e.message);
    } else {
        CHECKF(st == OC_ERR_NOT_FOUND && (strstr(e.message, "no-such-device-xyz") || strstr(e.message, "no OpenCL platform")),
               "status %d: %s", (int)st, e.message);
    }
    printf("  OpenCL on a device that is not there: %s\n", e.message);
    p.backend = OC_BACKEND_AUTO;
    REQUIREF(oc_context_open(&c, m, &p, &e) == OC_OK, "%s", e.message);
    const char *name = oc_context_backend_name(c);
    CHECKF(!strncmp(name, "CPU (", 5) && (!OC_HAVE_OPENCL || strstr(name, "OpenCL not used: ")), "%s", name);
    CHECK(oc_context_memory_bytes(m, &p, &bytes, &e) == OC_OK && bytes == cpu_bytes);   /* auto: the CPU figure */
    printf("  auto: %s\n", name);
    oc_context_close(c);

    const char *why = check_opencl_missing();
    if (!why) {
        p.backend = OC_BACKEND_OPENCL;
        p.device = check_opencl_device();
        REQUIREF(oc_context_open(&c, m, &p, &e) == OC_OK, "%s", e.message);
        name = oc_context_backend_name(c);
        oc_stats s;
        oc_context_get_stats(c, &s);
        CHECKF(!strncmp(name, "OpenCL, ", 8) && s.device_bytes > 0, "%s, %zu device bytes", name, s.device_bytes);
        /* the KV cache and activations live on the device: the host figure shrinks */
        CHECK(oc_context_memory_bytes(m, &p, &bytes, &e) == OC_OK && bytes < cpu_bytes && s.context_bytes == bytes);
        printf("  opencl: %s, %zu bytes on the device, %zu on the host (CPU: %zu)\n", name, s.device_bytes, bytes,
               cpu_bytes);
        oc_context_close(c);
    } else {
        printf("  (%s)\n", why);
    }
    p.backend = (oc_backend_choice)9;
    CHECK(oc_context_open(&c, m, &p, &e) == OC_ERR_INVALID);
    oc_model_close(m);
}

/* The provider table (backend.h): the CPU's is always there, OpenCL's exactly when the build
 * links it; each answers for its own kind, carries the device members all or none, and both
 * report the attention engine's one table of what runs sparse. */
static void test_providers(void) {
    const oc_backend_provider *cpu = oc_backend_provider_find(OC_BACKEND_KIND_CPU);
    const oc_backend_provider *cl = oc_backend_provider_find(OC_BACKEND_KIND_OPENCL);
    REQUIRE(cpu != NULL);
    CHECK(cpu->kind == OC_BACKEND_KIND_CPU && !strcmp(cpu->name, "CPU") && cpu->open && cpu->bytes);
    CHECK(!cpu->device_open && !cpu->device_close && !cpu->buffer_host_bytes);
    CHECK(cpu->pattern_exec == oc_attn_pattern_exec);
    CHECK((cl != NULL) == (OC_HAVE_OPENCL != 0));
    if (cl) {
        CHECK(cl->kind == OC_BACKEND_KIND_OPENCL && !strcmp(cl->name, "OpenCL") && cl->open && cl->bytes);
        CHECK(cl->device_open && cl->device_close && cl->device_name && cl->device_bytes &&
              cl->device_finish && cl->device_host_bytes && cl->buffer_host_bytes);
        CHECK(cl->pattern_exec == oc_attn_pattern_exec);
    }
    CHECK(oc_backend_provider_find((oc_backend_kind)7) == NULL);
    /* the table itself: BlindSight kinds and A-shape sparse, the prefill kinds in prefill */
    CHECK(oc_attn_pattern_exec(OC_PATTERN_SINK) == OC_EXEC_SPARSE &&
          oc_attn_pattern_exec(OC_PATTERN_A_SHAPE) == OC_EXEC_SPARSE &&
          oc_attn_pattern_exec(OC_PATTERN_VERTICAL_SLASH) == OC_EXEC_PREFILL &&
          oc_attn_pattern_exec(OC_PATTERN_BOUNDARY_2D) == OC_EXEC_PREFILL &&
          oc_attn_pattern_exec(OC_PATTERN_DENSE) == OC_EXEC_DENSE);
    /* the CPU has no device: NULL, named "CPU", nothing to wait for */
    oc_backend_device *dev = (oc_backend_device *)1;
    oc_error e;
    CHECK(oc_backend_device_open(&dev, OC_BACKEND_KIND_CPU, NULL, NULL, &e) == OC_OK && dev == NULL);
    CHECK(!strcmp(oc_backend_device_name(NULL), "CPU") && oc_backend_device_bytes(NULL) == 0 &&
          oc_backend_device_finish(NULL, &e) == OC_OK);
    oc_backend_device_close(NULL);
}

int main(void) {
    CHECK_RUN(test_providers);
    CHECK_RUN(test_cpu_ops);
    CHECK_RUN(test_opencl_ops);
    CHECK_RUN(test_context_selection);
    return check_finish();
}
