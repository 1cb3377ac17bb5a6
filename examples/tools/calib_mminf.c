/* calib_mminf.c: MMInference's offline pattern search per head (mminference.txt Sec. 3.3, App. A
 * Alg. 4, App. C.5 Table 3): every candidate of the kernel-aware search space (A-shape,
 * Vertical-Slash and Grid configurations of comparable cost) runs on the calibration prompt with
 * the runtime's own engine and per-prompt index (attention/attn.h: oc_attn_dyn_build, then
 * oc_attn_run), and the head takes the candidate whose attention output is closest to dense
 * attention (Alg. 4's argmin over ||sparse(Q, K, V; i) - attention(Q, K, V)||; App. A: "the
 * actual attention output as the objective", so V counts). Alg. 4's steps as this engine can run
 * them: the intra-modality search (each candidate as the pattern of one modality's queries, indexed
 * from that modality's own last 64 queries: a Q-Boundary head), and the inter-modality choice
 * between the best No-Boundary pattern (App. B.1: one index over all rows), the Q-Boundary head
 * of the two best modality patterns and the 2D-Boundary head of the four best pair patterns. The
 * cross-modality step (Alg. 4's loop over modality pairs, Sec. 3.2 Alg. 3): each candidate, its
 * sizes scaled to the key modality's share of the keys (oc_calib_mminf_pair_space: the kernel-aware
 * space at equal cost, App. A), as the pattern of one (query modality, key modality) pair of a
 * 2D-Boundary head whose other pair of those rows is dense; the rows of the query modality measure
 * it. Two runs per candidate: the diagonal pairs (text-text, vision-vision) sparse, then the cross
 * pairs. Everything runs in the engine tile by tile: no N x N score matrix. */
#include "tools/calib.h"
#include "attention/attn.h"
#include "attention/layout.h"
#include "port.h"

#include <math.h>
#include <string.h>

/* Table 3 (App. C.5), in its order. Grid: (stride, hline, vline, slash, max stride) with the stride
 * fixed (frame_stride) or searched per prompt (Alg. 1); A-shape: (sink, local); Vertical-Slash:
 * (vertical, slash). */
static const int grid_lines[6] = {
    OC_GRID_HLINE, OC_GRID_VLINE, OC_GRID_SLASH, OC_GRID_HLINE | OC_GRID_VLINE, OC_GRID_VLINE | OC_GRID_SLASH,
    OC_GRID_HLINE | OC_GRID_VLINE | OC_GRID_SLASH,
};
static const int32_t ashape[3][2] = { { 128, 1024 }, { 128, 2048 }, { 128, 4096 } };
static const int32_t vslash[9][2] = {
    { 1000, 1024 }, { 1000, 2048 }, { 2000, 2048 }, { 1000, 3096 }, { 2000, 3096 },
    { 1000, 4096 }, { 2000, 4096 }, { 3500, 200 }, { 1000, 2500 },
};
#define GRID_MAX_STRIDE 1024

static int32_t scaled(int32_t x, double scale, int32_t lo) {
    double v = floor((double)x * scale + 0.5);
    return v < lo ? lo : (int32_t)v;
}

int32_t oc_calib_mminf_space(double scale, int32_t frame_stride, oc_head_pattern *out) {
    int32_t n = 0;
    for (int fixed = 1; fixed >= 0; fixed--) {
        if (fixed && frame_stride < 1) continue;   /* no frame to stride by */
        for (int k = 0; k < 6; k++) {
            oc_head_pattern *p = &out[n++];
            memset(p, 0, sizeof *p);
            p->kind = OC_PATTERN_GRID;
            p->grid_stride = fixed ? frame_stride : 0;
            p->grid_max_stride = scaled(GRID_MAX_STRIDE, scale, 2);
            p->grid_lines = grid_lines[k];
        }
    }
    for (int k = 0; k < 3; k++) {
        oc_head_pattern *p = &out[n++];
        memset(p, 0, sizeof *p);
        p->kind = OC_PATTERN_A_SHAPE;
        p->n_sink = scaled(ashape[k][0], scale, 1);
        p->n_local = scaled(ashape[k][1], scale, 1);
    }
    for (int k = 0; k < 9; k++) {
        oc_head_pattern *p = &out[n++];
        memset(p, 0, sizeof *p);
        p->kind = OC_PATTERN_VERTICAL_SLASH;
        p->n_vertical = scaled(vslash[k][0], scale, 1);
        p->n_slash = scaled(vslash[k][1], scale, 1);
    }
    return n;
}

int32_t oc_calib_mminf_pair_space(const oc_head_pattern *cand, int32_t n_cand, double share, oc_head_pattern *out) {
    for (int32_t c = 0; c < n_cand; c++) {
        oc_head_pattern p = cand[c];
        if (p.kind == OC_PATTERN_A_SHAPE) {   /* keys per row: sink + local */
            p.n_sink = scaled(p.n_sink, share, 1);
            p.n_local = scaled(p.n_local, share, 1);
        } else if (p.kind == OC_PATTERN_VERTICAL_SLASH) {   /* columns + diagonals */
            p.n_vertical = scaled(p.n_vertical, share, 1);
            p.n_slash = scaled(p.n_slash, share, 1);
        }   /* Grid: a line every stride keys, in any stream: already the stream's share */
        out[c] = p;
    }
    return n_cand;
}

size_t oc_calib_mminf_work_bytes(int32_t max_tokens, int32_t head_dim) {
    oc_attn_dims dims = { max_tokens, max_tokens, 1, 1, head_dim };
    size_t sc = oc_attn_scratch_bytes(&dims, 1), dyn = oc_attn_dyn_bytes(&dims, 1);
    size_t out = 2 * (size_t)max_tokens * (size_t)head_dim * sizeof(float);
    return sc + dyn + out + 3 * OC_MEM_ALIGN;
}

/* work: OC_MEM_ALIGN-aligned pieces carved from the caller's block */
typedef struct mm_work { void *scratch, *dyn; float *dense, *sparse; size_t scratch_bytes, dyn_bytes; } mm_work;

static mm_work carve(void *work, int32_t max_tokens, int32_t head_dim) {
    oc_attn_dims dims = { max_tokens, max_tokens, 1, 1, head_dim };
    mm_work w;
    unsigned char *b = work;
    b += (OC_MEM_ALIGN - (uintptr_t)b % OC_MEM_ALIGN) % OC_MEM_ALIGN;
    w.scratch_bytes = oc_attn_scratch_bytes(&dims, 1);
    w.dyn_bytes = oc_attn_dyn_bytes(&dims, 1);
    w.scratch = b;
    b += (w.scratch_bytes + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN;
    w.dyn = b;
    b += (w.dyn_bytes + OC_MEM_ALIGN - 1) / OC_MEM_ALIGN * OC_MEM_ALIGN;
    w.dense = (float *)b;
    w.sparse = w.dense + (size_t)max_tokens * (size_t)head_dim;
    return w;
}

/* Squared errors of out against dense, all rows into *all and per row's modality into modal[0..2)
 * (modal NULL: not split). */
static void sq_errors(const float *out, const float *dense, int32_t n_q, int32_t d, int32_t q_first,
                      const oc_token_layout *layout, double *all, double *modal) {
    for (int32_t i = 0; i < n_q; i++) {
        double e = 0.0;
        for (int32_t c = 0; c < d; c++) {
            double x = (double)out[(size_t)i * d + c] - (double)dense[(size_t)i * d + c];
            e += x * x;
        }
        if (all) *all += e;
        if (modal) modal[oc_layout_image_at(layout, q_first + i) >= 0] += e;
    }
}

oc_status oc_calib_mminf_head(const oc_calib_head *h, const oc_head_pattern *cand, int32_t n_cand, int32_t max_tokens,
                              const oc_token_layout *layout, const oc_head_pattern *pair_cand, void *work,
                              double *err_sq, double *err_modal, double *err_pair, double *ref_sq,
                              uint64_t *kept_pairs, oc_error *err) {
    if (h->n_kv > max_tokens || h->n_q > max_tokens || h->n_q < 1)
        return oc_fail(err, OC_ERR_INVALID, "calibrate mminference: %d rows / %d keys above %d", (int)h->n_q,
                       (int)h->n_kv, (int)max_tokens);
    int32_t d = h->head_dim;
    mm_work w = carve(work, max_tokens, d);
    oc_cpu_features cpu;
    oc_port_cpu_features(&cpu);
    oc_isa isa = oc_isa_best(&cpu);
    oc_attn_call a;
    memset(&a, 0, sizeof a);
    a.n_q = h->n_q;
    a.n_kv = h->n_kv;
    a.n_head = a.n_head_kv = 1;
    a.head_dim = d;
    a.q_stride_token = h->q_stride;
    a.kv_dtype = OC_DTYPE_F32;
    a.k_stride_token = a.v_stride_token = h->kv_stride;
    a.out_stride_token = d;
    a.scale = h->scale;
    a.mask = OC_ATTN_CAUSAL;
    a.q_offset = h->q_first;
    oc_attn_host mem = { h->q, h->k, h->v, w.dense };
    oc_status st = oc_attn_run(&a, &mem, isa, NULL, w.scratch, w.scratch_bytes, NULL, err);
    if (st != OC_OK) return st;
    size_t n_out = (size_t)h->n_q * (size_t)d;
    (void)n_out;
    double ref = 0.0;
    for (size_t i = 0; i < n_out; i++) ref += (double)w.dense[i] * w.dense[i];
    *ref_sq += ref;
    mem.out = w.sparse;
    for (int32_t c = 0; c < n_cand; c++) {
        oc_attn_call ac = a;
        ac.patterns = &cand[c];
        if (oc_pattern_is_dynamic(cand[c].kind) && oc_attn_wants_dyn(&ac)) {
            st = oc_attn_dyn_build(&ac, &mem, isa, NULL, w.dyn, w.dyn_bytes, &ac.dyn, err);
            if (st != OC_OK) return st;
        }
        oc_attn_stats stats = { 0, 0, 0 };
        st = oc_attn_run(&ac, &mem, isa, NULL, w.scratch, w.scratch_bytes, &stats, err);
        if (st != OC_OK) return st;
        /* a static candidate is the same pattern as each modality's: its rows' errors split */
        int split = layout && !oc_pattern_is_dynamic(cand[c].kind);
        sq_errors(w.sparse, w.dense, h->n_q, d, h->q_first, layout, &err_sq[c], split ? err_modal + 2 * c : NULL);
        if (kept_pairs) kept_pairs[c] += stats.flops_kept / (4 * (uint64_t)d);
        if (!layout || split) continue;
        /* Alg. 4's intra-modality step: the candidate as both modalities' pattern of a Q-Boundary
         * head, each modality indexed from its own last 64 queries; the rows of modality m measure
         * the candidate as modality m's pattern */
        oc_head_pattern qb;
        memset(&qb, 0, sizeof qb);
        qb.kind = OC_PATTERN_Q_BOUNDARY;
        qb.modal[OC_MODALITY_TEXT] = qb.modal[OC_MODALITY_VISION] = oc_pattern_to_modal(&cand[c]);
        oc_attn_call aq = a;
        aq.patterns = &qb;
        aq.layout = layout;
        if ((st = oc_attn_dyn_build(&aq, &mem, isa, NULL, w.dyn, w.dyn_bytes, &aq.dyn, err)) != OC_OK ||
            (st = oc_attn_run(&aq, &mem, isa, NULL, w.scratch, w.scratch_bytes, NULL, err)) != OC_OK)
            return st;
        sq_errors(w.sparse, w.dense, h->n_q, d, h->q_first, layout, NULL, err_modal + 2 * c);
    }
    if (!layout || !pair_cand || !err_pair) return OC_OK;
    /* Alg. 4's cross-modality step: candidate c as one pair's pattern of a 2D-Boundary head, the
     * other pair of the same query rows dense; cross 0: pairs (text, text) and (vision, vision),
     * cross 1: (text, vision) and (vision, text). The rows of query modality mq measure pair
     * (mq, mk) with mk = mq ^ cross. */
    oc_attn_call a2 = a;
    a2.layout = layout;
    for (int32_t c = 0; c < n_cand; c++)
        for (int cross = 0; cross < 2; cross++) {
            oc_head_pattern p2;
            memset(&p2, 0, sizeof p2);
            p2.kind = OC_PATTERN_BOUNDARY_2D;   /* pair[][] of kind DENSE: zero */
            for (int mq = 0; mq < OC_N_MODALITIES; mq++) {
                int mk = mq ^ cross;
                p2.pair[mq][mk] = oc_pattern_to_modal(&pair_cand[(size_t)mk * (size_t)n_cand + (size_t)c]);
            }
            a2.patterns = &p2;
            if ((st = oc_attn_dyn_build(&a2, &mem, isa, NULL, w.dyn, w.dyn_bytes, &a2.dyn, err)) != OC_OK ||
                (st = oc_attn_run(&a2, &mem, isa, NULL, w.scratch, w.scratch_bytes, NULL, err)) != OC_OK)
                return st;
            double e[2] = { 0.0, 0.0 };
            sq_errors(w.sparse, w.dense, h->n_q, d, h->q_first, layout, NULL, e);
            for (int mq = 0; mq < OC_N_MODALITIES; mq++) err_pair[((size_t)c * 2 + (size_t)mq) * 2 + (size_t)(mq ^ cross)] += e[mq];
        }
    return OC_OK;
}

int32_t oc_calib_mminf_choose(const double *nmse, int32_t n_cand) {
    int32_t best = 0;
    for (int32_t c = 1; c < n_cand; c++)
        if (nmse[c] < nmse[best]) best = c;   /* strictly better: ties keep Table 3's order */
    return best;
}
