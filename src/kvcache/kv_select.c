/* kv_select.c: the SparseMM and ZipVL token choices (kv_select.h) on host arrays, on caller
 * scratch. The scores (w = 32 or up to 128 query rows against every key of the prompt, once per
 * evicting layer during prefill) run on the attention micro-kernels in float, key blocks across the
 * pool, accumulated in double in a fixed order; the ranking is plain C in double. Neither depends
 * on the thread count. */
#include "kvcache/kv_select.h"

#include <math.h>
#include <string.h>

/* ---- scores ------------------------------------------------------------------------------------ */

/* The scorer is the attention engine's S^T = K Q^T loop (attn_kernels.h) run once over the key
 * blocks: pass 1 computes each block's logits, keeps them in the scratch and takes each column's
 * (query row x head) softmax max and sum per block; a serial combine in block order gives the
 * row's max M and 1 / sum; pass 2 turns the kept logits into 2^(s - M) with softmax_cols (m preset
 * to M) and adds p / sum into acc in double. (Pass 2 used to recompute the logits, bitwise the
 * same, doubling the key conversion and the GEMM: about half of the scoring's time. Keeping them
 * costs max_keys x n_head_kv x 128 floats of scratch: 9 MiB at the long model's 9K tokens.) A block is a pool task; every task writes only its own
 * partials and its own keys of acc, so the result does not depend on the thread count. Each key
 * block is converted to f32 once per pass for all the rows of a chunk (SCORE_COLS columns). */
#define SCORE_KEYS 128    /* keys per block (one pool task) */
#define SCORE_COLS 128    /* query row x head columns per chunk of rows */
#define SCORE_PAD 16      /* columns padded to a multiple of every table's vec */
#define SCORE_ALIGN 64

static int32_t chunk_rows(int32_t group) { return group >= SCORE_COLS ? 1 : SCORE_COLS / group; }
static int32_t pad_cols(int32_t group) { return (chunk_rows(group) * group + SCORE_PAD - 1) / SCORE_PAD * SCORE_PAD; }
static size_t up(size_t n) { return (n + SCORE_ALIGN - 1) / SCORE_ALIGN * SCORE_ALIGN; }

/* The scratch's parts, in bytes: shared ones, then one slice per thread. */
typedef struct score_layout {
    size_t qt, part, mx, inv, qptr, logits, thread;   /* shared */
    size_t k, s, stats, kptr;                          /* per thread: k, s, m/l/alpha, key pointers */
} score_layout;

static score_layout layout_of(int32_t n_head, int32_t n_head_kv, int32_t max_keys, int32_t head_dim) {
    int32_t group = n_head / n_head_kv, nc = pad_cols(group);
    size_t blocks = ((size_t)max_keys + SCORE_KEYS - 1) / SCORE_KEYS, gc = (size_t)n_head_kv * (size_t)nc;
    score_layout L;
    L.qt = up(gc * (size_t)head_dim * sizeof(float));
    L.part = up(2 * blocks * gc * sizeof(float));
    L.mx = up(gc * sizeof(float));
    L.inv = up(gc * sizeof(double));
    L.qptr = up((size_t)nc * sizeof(const float *));
    L.logits = up(blocks * gc * (size_t)SCORE_KEYS * sizeof(float));   /* [block][kv head][key][nc] */
    L.k = up((size_t)SCORE_KEYS * (size_t)head_dim * sizeof(float));
    L.s = up((size_t)SCORE_KEYS * (size_t)nc * sizeof(float));
    L.stats = up(3 * (size_t)nc * sizeof(float));
    L.kptr = up((size_t)SCORE_KEYS * sizeof(const void *));
    L.thread = L.k + L.s + L.stats + L.kptr;
    return L;
}

size_t oc_kv_score_scratch_bytes(int32_t n_head, int32_t n_head_kv, int32_t max_keys, int32_t head_dim,
                                 int n_threads) {
    score_layout L = layout_of(n_head, n_head_kv, max_keys, head_dim);
    return L.qt + L.part + L.mx + L.inv + L.qptr + L.logits + (size_t)(n_threads < 1 ? 1 : n_threads) * L.thread;
}

typedef struct score_run {
    const oc_kv_rows *r;
    const oc_attn_kernels *kn;
    score_layout L;
    double *acc;
    int64_t acc_stride;
    int32_t group, i0, n_cols, nc, n_keys, pass;
    float *qt, *part, *mx;   /* part: [block][kv head][nc] maxima, then the same for sums */
    float *logits;           /* [block][kv head][SCORE_KEYS][nc]: pass 1's logits for pass 2 */
    double *inv;             /* [kv head][nc] 1 / sum */
    char *threads;
    size_t part_half;        /* floats from the maxima to the sums */
} score_run;

static void score_block(void *ctx, int64_t b, int thread) {
    score_run *x = ctx;
    const oc_kv_rows *r = x->r;
    const oc_attn_kernels *kn = x->kn;
    char *t = x->threads + (size_t)thread * x->L.thread;
    float *k = (float *)(void *)t;
    float *m = (float *)(void *)(t + x->L.k + x->L.s), *l = m + x->nc, *alpha = l + x->nc;
    const void **kp = (const void **)(void *)(t + x->L.k + x->L.s + x->L.stats);
    int32_t hd = r->head_dim, nc = x->nc, j0 = (int32_t)b * SCORE_KEYS, nk = OC_MIN(SCORE_KEYS, x->n_keys - j0);
    int32_t dtype = r->k_f16 ? OC_DTYPE_F16 : OC_DTYPE_F32;
    for (int32_t g = 0; g < r->n_head_kv; g++) {
        float *kept = x->logits + ((size_t)b * (size_t)r->n_head_kv + (size_t)g) * SCORE_KEYS * (size_t)nc;
        /* pass 1 takes its softmax on a copy in the thread's s; pass 2 on the kept logits */
        float *s = x->pass == 1 ? (float *)(void *)(t + x->L.k) : kept;
        if (x->pass == 1) {
            for (int32_t j = 0; j < nk; j++) {
                int64_t at = (int64_t)(j0 + j) * r->k_stride_token + (int64_t)g * r->k_stride_head;
                kp[j] = r->k_f16 ? (const void *)(r->k_f16 + at) : (const void *)(r->k_f32 + at);
            }
            kn->convert_rows(k, kp, nk, hd, dtype);
            kn->gemm(nk, nc, hd, k, hd, 1, x->qt + (size_t)g * (size_t)hd * (size_t)nc, s, nc, 0);   /* S^T = K Q^T */
            /* Eq. 12: column c (row i0 + c / group) sees key j when j <= its position; rows ascend, so
             * only keys past the chunk's first row need the mask. Padding columns are never read. */
            for (int32_t j = OC_MAX(0, r->q_pos[x->i0] + 1 - j0); j < nk; j++)
                for (int32_t c = 0; c < x->n_cols; c++)
                    if (j0 + j > r->q_pos[x->i0 + c / x->group]) s[(size_t)j * (size_t)nc + (size_t)c] = -INFINITY;
            memcpy(kept, s, (size_t)nk * (size_t)nc * sizeof(float));
        }
        float *pm = x->part + ((size_t)b * (size_t)r->n_head_kv + (size_t)g) * (size_t)nc, *pl = pm + x->part_half;
        const float *row_max = x->mx + (size_t)g * (size_t)nc;
        for (int32_t c = 0; c < nc; c++) {
            m[c] = x->pass == 1 ? -INFINITY : row_max[c];
            l[c] = 0;
        }
        kn->softmax_cols(s, nc, nk, nc, m, l, alpha);
        if (x->pass == 1) {
            memcpy(pm, m, (size_t)nc * sizeof(float));
            memcpy(pl, l, (size_t)nc * sizeof(float));
            continue;
        }
        /* pass 2: s = 2^(s - M) (M is the row's max, so softmax_cols leaves m at M) */
        double *a = x->acc + (int64_t)g * x->acc_stride + j0;
        const double *inv = x->inv + (size_t)g * (size_t)nc;
        for (int32_t j = 0; j < nk; j++) {   /* 4 lanes in a fixed order, so the compiler vectorizes */
            const float *sj = s + (size_t)j * (size_t)nc;
            double lane[4] = { 0, 0, 0, 0 };
            for (int32_t c = 0; c < x->n_cols; c += 4)   /* inv is 0 on padding columns */
                for (int32_t e = 0; e < 4; e++) lane[e] += (double)sj[c + e] * inv[c + e];
            a[j] += (lane[0] + lane[1]) + (lane[2] + lane[3]);
        }
    }
}

void oc_kv_score_rows(const oc_kv_rows *r, double *acc, int64_t acc_stride_head, void *scratch,
                      const oc_attn_kernels *kn, oc_pool *pool) {
    int32_t group = r->n_head / r->n_head_kv, hd = r->head_dim, rows_per = chunk_rows(group);
    score_run x;
    memset(&x, 0, sizeof x);
    x.r = r;
    x.kn = kn;
    x.L = layout_of(r->n_head, r->n_head_kv, r->q_pos[r->n_q - 1] + 1, hd);
    x.acc = acc;
    x.acc_stride = acc_stride_head;
    x.group = group;
    x.nc = pad_cols(group);
    char *p = scratch;
    x.qt = (float *)(void *)p;
    x.part = (float *)(void *)(p + x.L.qt);
    x.mx = (float *)(void *)(p + x.L.qt + x.L.part);
    x.inv = (double *)(void *)(p + x.L.qt + x.L.part + x.L.mx);
    const float **qp = (const float **)(void *)(p + x.L.qt + x.L.part + x.L.mx + x.L.inv);
    x.logits = (float *)(void *)(p + x.L.qt + x.L.part + x.L.mx + x.L.inv + x.L.qptr);
    x.threads = p + x.L.qt + x.L.part + x.L.mx + x.L.inv + x.L.qptr + x.L.logits;
    /* logits in base 2: softmax_cols takes 2^(s - m) */
    float qscale = r->scale * 1.44269504088896340736f;
    size_t gc = (size_t)r->n_head_kv * (size_t)x.nc;
    for (int32_t i0 = 0; i0 < r->n_q; i0 += rows_per) {
        int32_t n_rows = OC_MIN(rows_per, r->n_q - i0);
        x.i0 = i0;
        x.n_cols = n_rows * group;
        x.n_keys = r->q_pos[i0 + n_rows - 1] + 1;
        int32_t n_blocks = (x.n_keys + SCORE_KEYS - 1) / SCORE_KEYS;
        x.part_half = (size_t)n_blocks * gc;
        for (int32_t g = 0; g < r->n_head_kv; g++) {   /* column c = row i0 + c / group, head g * group + c % group */
            for (int32_t c = 0; c < x.n_cols; c++)
                qp[c] = r->q + (int64_t)(i0 + c / group) * r->q_stride_token +
                        (int64_t)(g * group + c % group) * r->q_stride_head;
            kn->pack_qt(x.qt + (size_t)g * (size_t)hd * (size_t)x.nc, qp, x.n_cols, x.nc, hd, qscale);
        }
        x.pass = 1;
        oc_pool_run(pool, n_blocks, score_block, &x);
        /* the rows' max and sum from the blocks', in block order (double) */
        for (size_t gcol = 0; gcol < gc; gcol++) {
            float M = -INFINITY;
            for (int32_t b = 0; b < n_blocks; b++) M = OC_MAX(M, x.part[(size_t)b * gc + gcol]);
            double sum = 0;
            for (int32_t b = 0; b < n_blocks; b++) {
                float mb = x.part[(size_t)b * gc + gcol];
                if (mb != -INFINITY) sum += (double)x.part[x.part_half + (size_t)b * gc + gcol] * exp2((double)mb - M);
            }
            x.mx[gcol] = M;
            x.inv[gcol] = sum > 0 && (int32_t)(gcol % (size_t)x.nc) < x.n_cols ? 1.0 / sum : 0.0;
        }
        x.pass = 2;
        oc_pool_run(pool, n_blocks, score_block, &x);
    }
}

/* ---- ranking ----------------------------------------------------------------------------------- */

/* a ranks before b: larger key, ties to the earlier token. */
static int before(const double *key, int32_t a, int32_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); }

/* The heap with the best at the root (a parent before its children): sift idx[root] down. */
static void sift_best(const double *key, int32_t *idx, int32_t root, int32_t n) {
    for (;;) {
        int32_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && before(key, idx[c + 1], idx[c])) c++;   /* the better child */
        if (!before(key, idx[c], idx[root])) return;
        int32_t t = idx[root];
        idx[root] = idx[c];
        idx[c] = t;
        root = c;
    }
}

/* The k best of idx[0..n) (by `before`: a strict total order, so the set is unique) moved to
 * idx[0..k), in no particular order: quickselect, O(n) on average, where a full ranking took
 * O(n log n). Choosing kept tokens needs the set only, not its order. */
static void top(const double *key, int32_t *idx, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        /* median of three as the pivot, then a Lomuto partition: [lo, i) before the pivot */
        int32_t mid = lo + (hi - lo) / 2, a = idx[lo], b = idx[mid], c = idx[hi], piv;
        if (before(key, a, b)) piv = before(key, b, c) ? b : before(key, a, c) ? c : a;
        else piv = before(key, a, c) ? a : before(key, b, c) ? c : b;
        int32_t at = piv == a ? lo : piv == b ? mid : hi, t;
        t = idx[at], idx[at] = idx[hi], idx[hi] = t;
        int32_t i = lo;
        for (int32_t j = lo; j < hi; j++)
            if (before(key, idx[j], piv)) t = idx[j], idx[j] = idx[i], idx[i] = t, i++;
        t = idx[i], idx[i] = idx[hi], idx[hi] = t;   /* the pivot at its rank i */
        if (i == k || i + 1 == k) return;
        if (i > k) hi = i - 1;
        else lo = i + 1;
    }
}

/* Ascending insertion of the marks: kept[] from a 0/1 flag per key stored in order[]. */
static int32_t collect(const int32_t *flag, int32_t n, int32_t *kept) {
    int32_t m = 0;
    for (int32_t j = 0; j < n; j++)
        if (flag[j]) kept[m++] = j;
    return m;
}

int32_t oc_kv_select_sparsemm(const double *mass, int32_t n, int32_t budget, int32_t window, int32_t *kept,
                              int32_t *order) {
    if (budget >= n) {
        for (int32_t j = 0; j < n; j++) kept[j] = j;
        return n;
    }
    int32_t w = OC_MIN(window, budget), rest = n - w;   /* keys 0..rest-1 compete (Eq. 13) */
    for (int32_t j = 0; j < rest; j++) order[j] = j;
    top(mass, order, rest, budget - w);
    /* kept doubles as the flag array: mark, then compact to indices */
    int32_t *flag = kept;
    for (int32_t j = 0; j < n; j++) flag[j] = j >= rest;
    for (int32_t t = 0; t < budget - w; t++) flag[order[t]] = 1;
    return collect(flag, n, kept);
}

int32_t oc_kv_select_sparsemm_within(const double *mass, const int32_t *within, int32_t n_within, int32_t budget,
                                     int32_t window, int32_t *kept, int32_t *order, double *tmp) {
    for (int32_t t = 0; t < n_within; t++) tmp[t] = mass[within[t]];
    int32_t m = oc_kv_select_sparsemm(tmp, n_within, budget, window, kept, order);
    for (int32_t r = 0; r < m; r++) kept[r] = within[kept[r]];
    return m;
}

int32_t oc_kv_select_zipvl(const double *mass, const int32_t *nnz, int32_t n, double n_rows, double tau,
                           int32_t *kept, int32_t *order, double *norm) {
    if (n <= 0) return 0;
    for (int32_t j = 0; j < n; j++) order[j] = j;
    /* Eq. 7: the smallest p whose p largest masses reach tau * (total mass of the rows): the
     * masses added best first, from a heap, only as many as it takes (the same sums in the same
     * order as over a full ranking) */
    double target = tau * n_rows, sum = 0;
    int32_t p = n;
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_best(mass, order, i, n);
    for (int32_t t = 0, end = n; t < n; t++) {
        sum += mass[order[0]];
        if (sum >= target) {
            p = t + 1;
            break;
        }
        order[0] = order[--end];
        sift_best(mass, order, 0, end);
    }
    /* Eq. 8-9: top p by mass over the number of rows that can see the key (corrects for the
     * causal mask, under which early keys are seen by more rows) */
    for (int32_t j = 0; j < n; j++) norm[j] = nnz[j] > 0 ? mass[j] / (double)nnz[j] : 0.0;
    for (int32_t j = 0; j < n; j++) order[j] = j;
    top(norm, order, n, p);
    int32_t *flag = kept;
    for (int32_t j = 0; j < n; j++) flag[j] = 0;
    for (int32_t t = 0; t < p; t++) flag[order[t]] = 1;
    /* The recent probe rows stay in T as well. Alg. 1 pads the outputs of rows outside T, and the
     * prompt's last rows (the one that predicts the answer among them) are rarely important as
     * keys, so without this the answer row gets no attention output at all: the demo model fell
     * from 97 to 57 of 100 items. These rows' attention is the probe's own, computed exactly
     * (zipvl.txt §4.2, "Efficient approximation": the recent subset). */
    for (int32_t j = OC_MAX(0, n - OC_KV_ZIPVL_RECENT_PROBES); j < n; j++) flag[j] = 1;
    return collect(flag, n, kept);
}

/* ---- probes ------------------------------------------------------------------------------------ */

int32_t oc_kv_zipvl_probes(int32_t n, int32_t *out) {
    int32_t n_recent = OC_MIN(n, OC_KV_ZIPVL_RECENT_PROBES), rest = n - n_recent, m = 0;
    if (rest <= OC_KV_ZIPVL_RANDOM_PROBES) {
        for (int32_t j = 0; j < rest; j++) out[m++] = j;
    } else {
        uint32_t s = OC_KV_ZIPVL_SEED;   /* xorshift32: a fixed sequence, no global state */
        while (m < OC_KV_ZIPVL_RANDOM_PROBES) {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            int32_t j = (int32_t)(s % (uint32_t)rest), dup = 0;
            for (int32_t t = 0; t < m && !dup; t++) dup = out[t] == j;
            if (!dup) out[m++] = j;
        }
        for (int32_t i = 1; i < m; i++)   /* ascending: insertion sort of 64 */
            for (int32_t t = i; t > 0 && out[t - 1] > out[t]; t--) {
                int32_t x = out[t];
                out[t] = out[t - 1];
                out[t - 1] = x;
            }
    }
    for (int32_t j = rest; j < n; j++) out[m++] = j;
    return m;
}
