/* dyn_index.c: the index choices of dyn.h that need no attention scores: top-k selection for
 * Vertical-Slash, the grid stride and phase search (mminference.txt Alg. 1) and the modality
 * permutation of Q-Boundary and 2D-Boundary heads (Alg. 2-3). Pure functions on caller memory. */
#include "attention/dyn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* NaN ranks last so a bad score can never break the ordering the selection relies on. */
static float rank_of(float x) { return x == x ? x : -INFINITY; }

/* a before b: the forced index first, then higher score, then lower index. */
static int before(const float *score, int32_t force, int32_t a, int32_t b) {
    if (a == force || b == force) return a == force && b != force;
    float sa = rank_of(score[a]), sb = rank_of(score[b]);
    return sa > sb || (sa == sb && a < b);
}

static void swap_i32(int32_t *x, int32_t *y) {
    int32_t t = *x;
    *x = *y;
    *y = t;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t oc_dyn_top_k(const float *score, int32_t n, int32_t k, int32_t force, int32_t *work, int32_t *out) {
    if (k > n) k = n;
    if (k <= 0) return 0;
    if (force >= n) force = -1;
    for (int32_t i = 0; i < n; i++) work[i] = i;
    /* Quickselect: afterwards work[0..k) are the k first in `before` order (not sorted). */
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        /* median of three as pivot, moved to hi */
        if (before(score, force, work[mid], work[lo])) swap_i32(&work[mid], &work[lo]);
        if (before(score, force, work[hi], work[lo])) swap_i32(&work[hi], &work[lo]);
        if (before(score, force, work[mid], work[hi])) swap_i32(&work[mid], &work[hi]);
        int32_t pivot = work[hi], store = lo;
        for (int32_t i = lo; i < hi; i++)
            if (before(score, force, work[i], pivot)) swap_i32(&work[i], &work[store++]);
        swap_i32(&work[store], &work[hi]);
        if (store == k - 1 || store == k) break;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
    for (int32_t i = 0; i < k; i++) out[i] = work[i];
    qsort(out, (size_t)k, sizeof *out, cmp_i32);
    return k;
}

/* sums[r] = the viewed columns t = r (mod s), t < n_view (view[t]: key j0 + t), each summed in
 * ascending t. */
static void fold(const double *restrict view, int32_t n_view, int32_t s, double *restrict sums) {
    /* period by period: each period adds into sums[0..s) as one contiguous stream (vector adds at
     * -O2; the four-phases-in-registers fold walked the view with stride s, and its inner loops ran
     * only n_view / s times: this is 2% faster per build at 8K, BENCHMARKS.md "Dynamic
     * patterns"); each phase still sums its keys in ascending order: bitwise the same sums */
    int32_t first = OC_MIN(s, n_view), r = 0;
    for (; r < first; r++) sums[r] = view[r];
    for (; r < s; r++) sums[r] = 0.0;
    for (int32_t k0 = s; k0 < n_view; k0 += s) {
        const double *restrict v = view + k0;
        int32_t len = OC_MIN(s, n_view - k0), t = 0;
        for (; t + 4 <= len; t += 4) {
            sums[t] += v[t];
            sums[t + 1] += v[t + 1];
            sums[t + 2] += v[t + 2];
            sums[t + 3] += v[t + 3];
        }
        for (; t < len; t++) sums[t] += v[t];
    }
}

/* The largest of x[0..n) (-inf when n is 0; the sums hold no NaN: rank_of). Four independent maxima. */
static double max_of(const double *restrict x, int32_t n) {
    double m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
    int32_t i = 0;
    for (; i + 4 <= n; i += 4) {
        m0 = x[i] > m0 ? x[i] : m0;
        m1 = x[i + 1] > m1 ? x[i + 1] : m1;
        m2 = x[i + 2] > m2 ? x[i + 2] : m2;
        m3 = x[i + 3] > m3 ? x[i + 3] : m3;
    }
    for (; i < n; i++) m0 = x[i] > m0 ? x[i] : m0;
    m0 = m1 > m0 ? m1 : m0;
    m2 = m3 > m2 ? m3 : m2;
    return m2 > m0 ? m2 : m0;
}

/* The first r in [lo, hi) with x[r] == v, or -1. */
static int32_t first_equal(const double *x, int32_t lo, int32_t hi, double v) {
    for (int32_t r = lo; r < hi; r++)
        if (x[r] == v) return r;
    return -1;
}

/* The best phase of stride s from its phase sums (fold) over the viewed columns (n_view from key
 * j0) and its score: how far the mean column score of the keys j = f (mod s) stands above the
 * view's mean, in standard errors, (mean_f - mean) * sqrt(count_f) (the common deviation left
 * out); lowest f on ties; -inf when no phase has a key there.
 * A phase's count is q + 1 or q (q = n_view / s: the phases whose first key comes before
 * n_view % s have one more), and the score grows with the sum among phases of one count, so only
 * the largest sum of each count is scored: two divisions and square roots per stride. */
static double best_phase(const double *restrict sums, int32_t j0, int32_t n_view, int32_t s, double mean,
                         int32_t *phase) {
    int32_t q = n_view / s, rem = n_view % s, f0 = j0 % s;
    double best = -INFINITY;
    for (int g = 0; g < 2; g++) {   /* g 0: the phases r < rem (count q + 1); g 1: the rest (count q) */
        int32_t r0 = g ? rem : 0, r1 = g ? s : rem, count = g ? q : q + 1, bf = -1;
        if (count < 1) continue;
        /* the largest sum, then its lowest phase: view index r is phase r + f0 - s for r >= s - f0,
         * else r + f0, so the first r equal to it in [s - f0, s), else in [0, s - f0), is it (two
         * passes without a dependency from one element to the next: a single pass keeping the best
         * so far waits on its compare for every element) */
        double bs = max_of(sums + r0, r1 - r0);
        if (bs == -INFINITY) continue;
        int32_t cut = s - f0, br = first_equal(sums, OC_MAX(r0, cut), r1, bs);
        if (br < 0) br = first_equal(sums, r0, OC_MIN(r1, cut), bs);
        bf = br >= cut ? br - cut : br + f0;
        double score = (bs / count - mean) * sqrt((double)count);
        if (score > best || (score == best && bf < *phase)) { best = score; *phase = bf; }
    }
    return best;
}

/* The candidate strides: a stride of n or more puts one line of each kind in the prompt, the same
 * mask as stride n. */
static void stride_range(int32_t n, int32_t fixed_stride, int32_t max_stride, int32_t *s_lo, int32_t *s_hi) {
    *s_lo = fixed_stride > 0 ? OC_MIN(fixed_stride, n) : 2;
    *s_hi = fixed_stride > 0 ? *s_lo : OC_MIN(max_stride, n);
}

void oc_dyn_grid_view(int32_t n, int32_t fixed_stride, int32_t max_stride, int32_t *j0, int32_t *j1) {
    *j0 = 0;
    *j1 = n;
    if (n < 2) return;
    int32_t s_lo, s_hi;
    stride_range(n, fixed_stride, max_stride, &s_lo, &s_hi);
    /* dyn.h: without the first and last min(s_hi, n / 4) keys, and at most the last
     * OC_DYN_GRID_PERIODS periods of the largest stride before the end */
    int32_t edge = OC_MIN(s_hi, n / 4);
    *j1 = n - edge;
    *j0 = (int32_t)OC_MAX((int64_t)edge, (int64_t)*j1 - (int64_t)OC_DYN_GRID_PERIODS * s_hi);
}

void oc_dyn_grid_search(const float *vertical, int32_t n, int32_t fixed_stride, int32_t max_stride,
                        double *work, int32_t *stride, int32_t *phase) {
    *stride = 1;
    *phase = 0;
    if (n < 2) return;
    int32_t s_lo, s_hi, j0, j1;
    stride_range(n, fixed_stride, max_stride, &s_lo, &s_hi);
    oc_dyn_grid_view(n, fixed_stride, max_stride, &j0, &j1);
    /* the viewed columns once as doubles (a NaN ranks as -inf), after the s_hi sums */
    double *view = work + s_hi, mean = 0.0;
    for (int32_t j = j0; j < j1; j++) mean += view[j - j0] = (double)rank_of(vertical[j]);
    mean /= (double)(j1 - j0);
    /* The strides in chains t, t / 2, t / 4, .. (while even) from each top t of (s_hi / 2, s_hi]:
     * only a top folds the view; each halving adds the two halves of the sums it has (phases r and
     * r + s / 2 of stride s make phase r of s / 2), O(s) instead of O(n_view), which halves the
     * search. Every stride lies on one chain; ties go to the smaller stride as before. */
    double best = -INFINITY;
    int32_t t_lo = s_lo == s_hi ? s_hi : OC_MAX(s_lo, s_hi / 2 + 1);
    for (int32_t t = t_lo; t <= s_hi; t++) {
        fold(view, j1 - j0, t, work);
        for (int32_t s = t;; s /= 2) {
            int32_t f = 0;
            double score = best_phase(work, j0, j1 - j0, s, mean, &f);
            if (score > best || (score == best && s < *stride)) {
                best = score;
                *stride = s;
                *phase = f;
            }
            if (s % 2 || s / 2 < s_lo) break;
            for (int32_t r = 0; r < s / 2; r++) work[r] += work[r + s / 2];
        }
    }
}

void oc_dyn_choose(const oc_head_pattern *pat, int32_t n_kv, const float *vertical, const float *slash, int32_t *idx,
                   int32_t *work, double *grid, oc_dyn_head *out) {
    memset(out, 0, sizeof *out);
    out->stride = 1;
    if (n_kv < 1) return;
    if (pat->kind == OC_PATTERN_VERTICAL_SLASH) {
        int32_t *vert = idx, *sl = idx + n_kv;
        out->n_vertical = oc_dyn_top_k(vertical, n_kv, pat->n_vertical, -1, work, vert);
        /* offset 0 sits at index n_kv - 1 of the diagonal scores (dyn.h: always kept) */
        int32_t n_s = oc_dyn_top_k(slash, 2 * n_kv - 1, pat->n_slash, n_kv - 1, work, sl);
        for (int32_t k = 0; k < n_s; k++) sl[k] -= n_kv - 1;
        out->n_slash = n_s;
        out->vertical = vert;
        out->slash = sl;
    } else if (pat->kind == OC_PATTERN_GRID) {
        oc_dyn_grid_search(vertical, n_kv, pat->grid_stride, pat->grid_max_stride, grid, &out->stride, &out->phase);
    }
}

void oc_dyn_choose_pair(const oc_head_pattern *sub, int32_t n_mk, int32_t n_diag, const float *vertical,
                        const int32_t *perm_mk, const float *slash, float *vr, int32_t *idx, int32_t *work, double *grid,
                        oc_dyn_head *out) {
    /* Vertical-Slash chooses over n = max(n_mk, n_mq) coordinates, so that every rank offset of the
     * pair has a diagonal; the columns past n_mk score as NaN (ranked last) and select no key. Grid
     * searches the n_mk columns alone. */
    int32_t n = sub->kind == OC_PATTERN_VERTICAL_SLASH ? n_diag : n_mk;
    for (int32_t r = 0; r < n; r++) vr[r] = r < n_mk ? vertical[perm_mk[r]] : NAN;
    oc_dyn_choose(sub, n, vr, slash, idx, work, grid, out);
}

oc_status oc_dyn_modality_perm(const uint8_t *modality, int32_t n, int32_t n_modalities, int32_t *perm,
                               int32_t *start, oc_error *err) {
    if (n < 0 || n_modalities < 1 || n_modalities > 255)
        return oc_fail(err, OC_ERR_INVALID, "modality perm: %d tokens, %d modalities", (int)n, (int)n_modalities);
    for (int32_t m = 0; m <= n_modalities; m++) start[m] = 0;
    for (int32_t i = 0; i < n; i++) {
        if (modality[i] >= n_modalities)
            return oc_fail(err, OC_ERR_INVALID, "modality perm: token %d has modality %d of %d", (int)i,
                           (int)modality[i], (int)n_modalities);
        start[modality[i] + 1]++;
    }
    for (int32_t m = 0; m < n_modalities; m++) start[m + 1] += start[m];
    /* stable counting sort; start[m] runs ahead while filling and is restored after */
    for (int32_t i = 0; i < n; i++) perm[start[modality[i]]++] = i;
    for (int32_t m = n_modalities; m > 0; m--) start[m] = start[m - 1];
    start[0] = 0;
    return OC_OK;
}
