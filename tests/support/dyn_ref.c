/* dyn_ref.c: see dyn_ref.h. */
#include "dyn_ref.h"
#include <string.h>

int ref_dyn_keep(oc_attn_mask_kind mask, const oc_head_pattern *pt, const oc_dyn_head *dh, int p, int j) {
    if (mask == OC_ATTN_CAUSAL && j > p) return 0;
    if (pt->kind == OC_PATTERN_A_SHAPE) return j < pt->n_sink || (j > p - pt->n_local && j <= p);
    if (pt->kind == OC_PATTERN_VERTICAL_SLASH) {
        for (int k = 0; k < dh->n_vertical; k++)
            if (dh->vertical[k] == j) return 1;
        int b = p - p % OC_DYN_BLOCK;
        for (int k = 0; k < dh->n_slash; k++)
            if (j >= b - dh->slash[k] && j <= b + OC_DYN_BLOCK - 1 - dh->slash[k]) return 1;
        return 0;
    }
    if (pt->kind == OC_PATTERN_GRID) {
        int s = dh->stride, f = dh->phase;
        int mod_p = ((p - f) % s + s) % s, mod_j = ((j - f) % s + s) % s, mod_pj = ((p - j) % s + s) % s;
        return ((pt->grid_lines & OC_GRID_HLINE) && mod_p == 0) || ((pt->grid_lines & OC_GRID_VLINE) && mod_j == 0) ||
               ((pt->grid_lines & OC_GRID_SLASH) && mod_pj == 0);
    }
    return 1;
}

int ref_2d_keep(oc_attn_mask_kind mask, const oc_head_pattern *pt, const oc_dyn_head *pairs, const uint8_t *modality,
                int p, int j) {
    if (mask == OC_ATTN_CAUSAL && j > p) return 0;
    int mq = modality[p], mk = modality[j], rq = 0, rk = 0;
    for (int i = 0; i < p; i++) rq += modality[i] == mq;   /* ranks by counting, no permutation */
    for (int i = 0; i < j; i++) rk += modality[i] == mk;
    const oc_modal_pattern *s = &pt->pair[mq][mk];
    oc_head_pattern sub;
    memset(&sub, 0, sizeof sub);
    sub.kind = s->kind;
    sub.n_sink = s->n_sink;
    sub.n_local = s->n_local;
    sub.grid_lines = s->grid_lines;
    const oc_dyn_head *dh = &pairs[mq * OC_N_MODALITIES + mk];
    if ((sub.kind == OC_PATTERN_VERTICAL_SLASH || sub.kind == OC_PATTERN_GRID) && dh->dense) sub.kind = OC_PATTERN_DENSE;
    return ref_dyn_keep(OC_ATTN_BIDIRECTIONAL, &sub, dh, rq, rk);
}
