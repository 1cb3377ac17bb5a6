/* kv_select.c: the SparseMM and ZipVL token choices (kv_select.h) on host arrays. Runs once per
 * prompt on caller scratch; plain C in double precision because it is not a hot path (w = 32 or
 * 128 query rows against the prompt's keys, once per layer) and a ranking must not flip with the
 * ISA or the thread count. */
#include "kvcache/kv_select.h"
#include "core/f16.h"

#include <math.h>

/* ---- scores ------------------------------------------------------------------------------------ */

/* Key j of kv head g as f32 (the cache's f16 converted once, shared by the group's query heads). */
static void key_row(const oc_kv_rows *r, int32_t g, int32_t j, float *out) {
    int64_t at = (int64_t)j * r->k_stride_token + (int64_t)g * r->k_stride_head;
    if (r->k_f16)
        for (int32_t d = 0; d < r->head_dim; d++) out[d] = oc_f16_to_f32(r->k_f16[at + d]);
    else
        for (int32_t d = 0; d < r->head_dim; d++) out[d] = r->k_f32[at + d];
}

/* q . k in 8 float lanes (so the compiler can vectorize it; each lane sums head_dim / 8 products,
 * a relative error near 1e-7, far below the gaps between the masses being ranked), then in double. */
static double dot(const float *q, const float *k, int32_t n) {
    float lane[8] = { 0 };
    int32_t d = 0;
    for (; d + 8 <= n; d += 8)
        for (int32_t l = 0; l < 8; l++) lane[l] += q[d + l] * k[d + l];
    double s = 0;
    for (int32_t l = 0; l < 8; l++) s += (double)lane[l];
    for (; d < n; d++) s += (double)q[d] * (double)k[d];
    return s;
}

void oc_kv_score_rows(const oc_kv_rows *r, double *acc, int64_t acc_stride_head, double *scores) {
    int32_t group = r->n_head / r->n_head_kv, hd = r->head_dim;
    float *k = (float *)(void *)(scores + (size_t)group * (size_t)(r->q_pos[r->n_q - 1] + 1));
    for (int32_t i = 0; i < r->n_q; i++) {
        int32_t n_keys = r->q_pos[i] + 1;   /* Eq. 12: key j is seen by query i when j <= i */
        const float *qi = r->q + (int64_t)i * r->q_stride_token;
        for (int32_t g = 0; g < r->n_head_kv; g++) {
            /* logits of the group's heads, scores[h][j]: each key converted once, while in L1 */
            for (int32_t j = 0; j < n_keys; j++) {
                key_row(r, g, j, k);
                for (int32_t h = 0; h < group; h++)
                    scores[(size_t)h * (size_t)n_keys + (size_t)j] =
                        dot(qi + (int64_t)(g * group + h) * r->q_stride_head, k, hd) * (double)r->scale;
            }
            double *a = acc + (int64_t)g * acc_stride_head;
            for (int32_t h = 0; h < group; h++) {
                double *sc = scores + (size_t)h * (size_t)n_keys, mx = -INFINITY, sum = 0;
                for (int32_t j = 0; j < n_keys; j++) mx = sc[j] > mx ? sc[j] : mx;
                for (int32_t j = 0; j < n_keys; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int32_t j = 0; j < n_keys; j++) a[j] += sc[j] / sum;
            }
        }
    }
}

/* ---- ranking ----------------------------------------------------------------------------------- */

/* a ranks before b: larger key, ties to the earlier token. */
static int before(const double *key, int32_t a, int32_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); }

/* Heap sort of idx[0..n) into rank order (best first): a min-heap on "before" keeps the worst at
 * the root, so popping it to the end leaves the best at the front. No allocation, O(n log n). */
static void sift(const double *key, int32_t *idx, int32_t root, int32_t n) {
    for (;;) {
        int32_t c = 2 * root + 1;
        if (c >= n) return;
        if (c + 1 < n && before(key, idx[c], idx[c + 1])) c++;   /* the worse child */
        if (!before(key, idx[root], idx[c])) return;
        int32_t t = idx[root];
        idx[root] = idx[c];
        idx[c] = t;
        root = c;
    }
}

static void rank(const double *key, int32_t *idx, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift(key, idx, i, n);
    for (int32_t end = n - 1; end > 0; end--) {
        int32_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        sift(key, idx, 0, end);
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
    rank(mass, order, rest);
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
    rank(mass, order, n);
    /* Eq. 7: the smallest p whose p largest masses reach tau * (total mass of the rows) */
    double target = tau * n_rows, sum = 0;
    int32_t p = n;
    for (int32_t t = 0; t < n; t++) {
        sum += mass[order[t]];
        if (sum >= target) {
            p = t + 1;
            break;
        }
    }
    /* Eq. 8-9: top p by mass over the number of rows that can see the key (corrects for the
     * causal mask, under which early keys are seen by more rows) */
    for (int32_t j = 0; j < n; j++) norm[j] = nnz[j] > 0 ? mass[j] / (double)nnz[j] : 0.0;
    for (int32_t j = 0; j < n; j++) order[j] = j;
    rank(norm, order, n);
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
