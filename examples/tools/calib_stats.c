/* calib_stats.c: attention statistics of one head for calibration (calib.h), computed tile by tile
 * over the keys so memory stays O(OC_CALIB_TILE_KEYS + head_dim) per head whatever the prompt
 * length: never an N x N matrix. Where a statistic needs softmax probabilities themselves (one
 * row's distribution, column mass) a first pass over the tiles finds the row's max and normaliser
 * and a second produces the probabilities; outputs (softmax V) need only the online softmax.
 * Scores are float dot products (as the engine computes them) accumulated in double; everything
 * after the scores is double. tests/test_calibrate.c checks each against a naive O(N^2) double
 * reference. */
#include "tools/calib.h"

#include <math.h>
#include <string.h>

size_t oc_calib_scratch_doubles(int32_t head_dim) { return 4 * (size_t)head_dim + OC_CALIB_TILE_KEYS; }

int oc_calib_keeps(const oc_calib_tokens *t, oc_pattern_kind kind, int32_t p, int32_t j) {
    if (j > p) return 0;
    int32_t gp = p < t->n_tokens ? t->image_of[p] : -1;
    if (kind == OC_PATTERN_DENSE || gp < 0) return 1;
    int32_t gj = j < t->n_tokens ? t->image_of[j] : -1;
    if (gj < 0) return 1;
    int sinks = kind != OC_PATTERN_INTRA_IMAGE, intra = kind != OC_PATTERN_SINK;
    return (sinks && t->is_sink[j]) || (intra && gj == gp);
}

/* Scores of row i against keys [j0, j1) into s (scaled, as the softmax sees them). */
static void scores(const oc_calib_head *h, int32_t i, int32_t j0, int32_t j1, double *s) {
    const float *q = h->q + (size_t)i * (size_t)h->q_stride;
    for (int32_t j = j0; j < j1; j++) {
        const float *k = h->k + (size_t)j * (size_t)h->kv_stride;
        double dot = 0.0;
        for (int32_t d = 0; d < h->head_dim; d++) dot += (double)q[d] * (double)k[d];
        s[j - j0] = dot * (double)h->scale;
    }
}

/* One online-softmax state: running max m, normaliser l, accumulator acc[head_dim]. */
typedef struct osm { double m, l; double *acc; } osm;

static void osm_reset(osm *st, int32_t n_states, int32_t D) {
    for (int m = 0; m < n_states; m++) {
        st[m].m = -INFINITY;
        st[m].l = 0.0;
        memset(st[m].acc, 0, sizeof(double) * (size_t)D);
    }
}

/* Adds the keys [j0, j1) that keep[j - j0] marks (scores s) to the state: the online softmax. */
static void osm_add_tile(osm *st, const oc_calib_head *h, const double *s, const uint8_t *keep, int32_t j0, int32_t j1) {
    double tile_max = -INFINITY;
    for (int32_t j = j0; j < j1; j++)
        if (keep[j - j0] && s[j - j0] > tile_max) tile_max = s[j - j0];
    if (tile_max == -INFINITY) return;   /* the mask keeps nothing in this tile */
    double m_new = OC_MAX(st->m, tile_max), corr = exp(st->m - m_new);
    st->l *= corr;
    for (int32_t d = 0; d < h->head_dim; d++) st->acc[d] *= corr;
    st->m = m_new;
    for (int32_t j = j0; j < j1; j++) {
        if (!keep[j - j0]) continue;
        double e = exp(s[j - j0] - m_new);
        const float *v = h->v + (size_t)j * (size_t)h->kv_stride;
        st->l += e;
        for (int32_t d = 0; d < h->head_dim; d++) st->acc[d] += e * (double)v[d];
    }
}

/* Squared norm of the dense output ref (its row keeps its own key, so l > 0) and squared error
 * of a masked output against it; a mask that keeps nothing of the row outputs zeros (the
 * engine's convention, and ZipVL's for rows outside T). */
static double osm_out_sq(const osm *ref, int32_t D) {
    double r = 0.0;
    for (int32_t d = 0; d < D; d++) {
        double o = ref->acc[d] / ref->l;
        r += o * o;
    }
    return r;
}
static double osm_err_sq(const osm *st, const osm *ref, int32_t D) {
    double e2 = 0.0;
    for (int32_t d = 0; d < D; d++) {
        double o = st->l > 0.0 ? st->acc[d] / st->l : 0.0, diff = o - ref->acc[d] / ref->l;
        e2 += diff * diff;
    }
    return e2;
}

static const oc_pattern_kind mask_kinds[OC_CALIB_N_BS_MASKS] = {
    OC_PATTERN_SINK, OC_PATTERN_INTRA_IMAGE, OC_PATTERN_INTRA_IMAGE_SINK,
};

void oc_calib_mask_errors(const oc_calib_head *h, const oc_calib_tokens *t, double err_sq[3], double *ref_sq,
                          double *scratch) {
    int32_t D = h->head_dim;
    double *s = scratch + 4 * (size_t)D;
    uint8_t keep[OC_CALIB_TILE_KEYS];
    osm st[4];   /* 0: dense, 1..3: the masks */
    for (int m = 0; m < 4; m++) st[m].acc = scratch + (size_t)m * (size_t)D;
    for (int32_t i = 0; i < h->n_q; i++) {
        int32_t p = h->q_first + i, n_keys = OC_MIN(p + 1, h->n_kv);
        /* a text query keeps every key under every mask: its masked outputs equal the dense one */
        int is_image = p < t->n_tokens && t->image_of[p] >= 0, n_states = is_image ? 4 : 1;
        osm_reset(st, n_states, D);
        for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
            int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
            scores(h, i, j0, j1, s);
            for (int m = 0; m < n_states; m++) {
                oc_pattern_kind kind = m == 0 ? OC_PATTERN_DENSE : mask_kinds[m - 1];
                for (int32_t j = j0; j < j1; j++) keep[j - j0] = (uint8_t)oc_calib_keeps(t, kind, p, j);
                osm_add_tile(&st[m], h, s, keep, j0, j1);
            }
        }
        *ref_sq += osm_out_sq(&st[0], D);
        if (!is_image) continue;
        for (int m = 1; m < 4; m++) err_sq[m - 1] += osm_err_sq(&st[m], &st[0], D);
    }
}

void oc_calib_vision_errors(const oc_calib_head *h, const int32_t *seg_start, const int32_t *seg_end, int32_t n_cand,
                            const int32_t *sink, const int32_t *local, double *err_sq, double *ref_sq, double *scratch) {
    int32_t D = h->head_dim, n_states = 1 + n_cand;
    double *s = scratch + 4 * (size_t)D;
    uint8_t keep[OC_CALIB_TILE_KEYS];
    osm st[4];
    for (int m = 0; m < n_states; m++) st[m].acc = scratch + (size_t)m * (size_t)D;
    for (int32_t i = 0; i < h->n_q; i++) {
        int32_t lo = seg_start[i], hi = seg_end[i];
        osm_reset(st, n_states, D);
        for (int32_t j0 = lo; j0 < hi; j0 += OC_CALIB_TILE_KEYS) {
            int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, hi);
            scores(h, i, j0, j1, s);
            for (int m = 0; m < n_states; m++) {
                for (int32_t j = j0; j < j1; j++)
                    keep[j - j0] = (uint8_t)(m == 0 || j < sink[m - 1] || (j > i - local[m - 1] && j <= i));
                osm_add_tile(&st[m], h, s, keep, j0, j1);
            }
        }
        *ref_sq += osm_out_sq(&st[0], D);
        for (int m = 1; m < n_states; m++) err_sq[m - 1] += osm_err_sq(&st[m], &st[0], D);
    }
}

/* Row i's max score and softmax normaliser over its causal keys (pass 1). */
static void row_norm(const oc_calib_head *h, int32_t i, double *s, double *m_out, double *l_out) {
    int32_t n_keys = OC_MIN(h->q_first + i + 1, h->n_kv);
    double m = -INFINITY, l = 0.0;
    for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
        int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
        scores(h, i, j0, j1, s);
        double tm = -INFINITY;
        for (int32_t j = 0; j < j1 - j0; j++) tm = OC_MAX(tm, s[j]);
        double m_new = OC_MAX(m, tm);
        l *= exp(m - m_new);
        for (int32_t j = 0; j < j1 - j0; j++) l += exp(s[j] - m_new);
        m = m_new;
    }
    *m_out = m;
    *l_out = l;
}

void oc_calib_row_probs(const oc_calib_head *h, int32_t i, double *probs, double *scratch) {
    double *s = scratch + 4 * (size_t)h->head_dim, m, l;
    int32_t n_keys = OC_MIN(h->q_first + i + 1, h->n_kv);
    row_norm(h, i, s, &m, &l);
    for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
        int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
        scores(h, i, j0, j1, s);
        for (int32_t j = j0; j < j1; j++) probs[j] = exp(s[j - j0] - m) / l;
    }
    for (int32_t j = n_keys; j < h->n_kv; j++) probs[j] = 0.0;
}

int32_t oc_calib_row_argmax(const oc_calib_head *h, int32_t i, double *scratch) {
    double *s = scratch + 4 * (size_t)h->head_dim, best = -INFINITY;
    int32_t n_keys = OC_MIN(h->q_first + i + 1, h->n_kv), arg = 0;
    for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
        int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
        scores(h, i, j0, j1, s);
        for (int32_t j = j0; j < j1; j++)
            if (s[j - j0] > best) {
                best = s[j - j0];
                arg = j;
            }
    }
    return arg;
}

void oc_calib_column_mass(const oc_calib_head *h, double *col_sum, int64_t *col_nnz, double *scratch) {
    double *s = scratch + 4 * (size_t)h->head_dim;
    for (int32_t i = 0; i < h->n_q; i++) {
        int32_t n_keys = OC_MIN(h->q_first + i + 1, h->n_kv);
        double m, l;
        row_norm(h, i, s, &m, &l);
        for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
            int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
            scores(h, i, j0, j1, s);
            for (int32_t j = j0; j < j1; j++) {
                col_sum[j] += exp(s[j - j0] - m) / l;
                col_nnz[j]++;
            }
        }
    }
}

void oc_calib_rows_mass(const oc_calib_head *h, const int32_t *rows, int32_t n_rows, double *col_sum, double *scratch) {
    double *s = scratch + 4 * (size_t)h->head_dim;
    for (int32_t r = 0; r < n_rows; r++) {
        int32_t i = rows[r], n_keys = OC_MIN(h->q_first + i + 1, h->n_kv);
        double m, l;
        row_norm(h, i, s, &m, &l);
        for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
            int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
            scores(h, i, j0, j1, s);
            for (int32_t j = j0; j < j1; j++) col_sum[j] += exp(s[j - j0] - m) / l;
        }
    }
}

void oc_calib_zipvl_errors(const oc_calib_head *h, const uint8_t *in_set, int32_t n_sets, double *err_sq,
                           double *ref_sq, double *scratch) {
    int32_t D = h->head_dim;
    double *s = scratch + 4 * (size_t)D;
    uint8_t keep[OC_CALIB_TILE_KEYS];
    osm st[4];   /* 0: dense, 1..n_sets: attention over set s - 1 */
    for (int m = 0; m <= n_sets; m++) st[m].acc = scratch + (size_t)m * (size_t)D;
    for (int32_t i = 0; i < h->n_q; i++) {
        int32_t p = h->q_first + i, n_keys = OC_MIN(p + 1, h->n_kv);
        unsigned row_sets = in_set[p];   /* the sets this row belongs to: only those attend */
        osm_reset(st, n_sets + 1, D);
        for (int32_t j0 = 0; j0 < n_keys; j0 += OC_CALIB_TILE_KEYS) {
            int32_t j1 = OC_MIN(j0 + OC_CALIB_TILE_KEYS, n_keys);
            scores(h, i, j0, j1, s);
            for (int m = 0; m <= n_sets; m++) {
                unsigned bit = m ? 1u << (m - 1) : 0u;
                if (m && !(row_sets & bit)) continue;   /* a padded row: its output stays 0 */
                for (int32_t j = j0; j < j1; j++) keep[j - j0] = (uint8_t)(!m || (in_set[j] & bit));
                osm_add_tile(&st[m], h, s, keep, j0, j1);
            }
        }
        *ref_sq += osm_out_sq(&st[0], D);
        for (int m = 1; m <= n_sets; m++) err_sq[m - 1] += osm_err_sq(&st[m], &st[0], D);
    }
}

double oc_calib_jsd(const double *p, const double *q, int32_t n) {
    double kl_p = 0.0, kl_q = 0.0;
    for (int32_t j = 0; j < n; j++) {
        double mid = 0.5 * (p[j] + q[j]);
        if (p[j] > 0.0) kl_p += p[j] * log2(p[j] / mid);
        if (q[j] > 0.0) kl_q += q[j] * log2(q[j] / mid);
    }
    double js = 0.5 * (kl_p + kl_q);
    return js < 0.0 ? 0.0 : js > 1.0 ? 1.0 : js;
}
