/* pattern.h: the sparse attention pattern of one head, as a plan file names it and the attention
 * engine executes it: the engine's input type, so it lives with attention; plan.c parses and writes it.
 *   DENSE               the model's own mask (causal in the decoder, full/segments in vision)
 *   SINK, INTRA_IMAGE,  BlindSight categories (blindsight.txt Sec. 3.2, App. L Alg. 3): text
 *   INTRA_IMAGE_SINK    queries stay dense; image queries keep all text keys plus: the sink tokens
 *                       of earlier images (SINK), their own image causally (INTRA_IMAGE), or both
 *   A_SHAPE             MMInference (mminference.txt Sec. 3, Table 3): the first n_sink keys plus a
 *                       local window of n_local keys before each query
 *   VERTICAL_SLASH      MMInference/MInference (mminference.txt Sec. 3, C.3, Table 3): n_vertical key
 *                       columns plus n_slash diagonals, chosen per prompt from the last 64 queries
 *   GRID                MMInference (mminference.txt Sec. 3.1, Alg. 1, Table 3): lines every `stride`
 *                       tokens (horizontal: whole query rows; vertical: key columns; slash:
 *                       diagonals), stride and phase found per prompt from the last 64 queries
 *   Q_BOUNDARY          MMInference (mminference.txt Sec. 3.2, Alg. 2, App. C.4): the queries
 *                       grouped by modality (text, vision: the token layout's image spans), each
 *                       modality with its own pattern (dense, A_SHAPE, VERTICAL_SLASH or GRID:
 *                       modal[]) over all keys, a dynamic one indexed from that modality's own last
 *                       64 queries ("the final segment of each modality's queries")
 *   BOUNDARY_2D         MMInference (mminference.txt Sec. 3.2, Alg. 3, App. C.4): queries and keys
 *                       grouped by modality, each (query modality, key modality) pair with its own
 *                       pattern (pair[][]: dense, A_SHAPE, VERTICAL_SLASH or GRID) in the pair's
 *                       permuted coordinates (a token's rank among the tokens of its modality),
 *                       ANDed with the model's mask in prompt positions (attention/dyn.h)
 * VERTICAL_SLASH, GRID, Q_BOUNDARY and BOUNDARY_2D are prefill patterns (MMInference sparsifies the pre-filling
 * stage only): their index is built from the prompt at run time (attention/dyn.h) and a call with
 * fewer queries than that estimate uses (decode) runs them dense. A_SHAPE is static and applies in decode too: a
 * stated choice, since its window is also a KV policy (StreamingLLM) and needs no estimate.
 * Per-head KV budgets (SparseMM) and lazy-layer groups (Q-Cache) live beside the pattern in the
 * plan, not here. */
#ifndef OC_PATTERN_H
#define OC_PATTERN_H

#include <stdint.h>
#include <string.h>

typedef enum oc_pattern_kind {
    OC_PATTERN_DENSE = 0,
    OC_PATTERN_SINK,
    OC_PATTERN_INTRA_IMAGE,
    OC_PATTERN_INTRA_IMAGE_SINK,
    OC_PATTERN_A_SHAPE,
    OC_PATTERN_VERTICAL_SLASH,
    OC_PATTERN_GRID,
    OC_PATTERN_Q_BOUNDARY,
    OC_PATTERN_BOUNDARY_2D,
    OC_PATTERN_COUNT
} oc_pattern_kind;

/* Q_BOUNDARY's modalities: query rows of the layout's image spans are vision, the rest text. */
#define OC_MODALITY_TEXT 0
#define OC_MODALITY_VISION 1
#define OC_N_MODALITIES 2

/* One modality's pattern inside a Q_BOUNDARY head: the fields of oc_head_pattern of that kind. */
typedef struct oc_modal_pattern {
    oc_pattern_kind kind;   /* DENSE, A_SHAPE, VERTICAL_SLASH or GRID */
    int32_t n_sink, n_local, n_vertical, n_slash, grid_stride, grid_max_stride, grid_lines;
} oc_modal_pattern;

typedef struct oc_head_pattern {
    oc_pattern_kind kind;
    int32_t n_sink;    /* A_SHAPE: leading keys every query keeps (MMInference: 128) */
    int32_t n_local;   /* A_SHAPE: keys before and including the query's own (1024, 2048, 4096) */
    int32_t n_vertical;     /* VERTICAL_SLASH: key columns kept (Table 3: 1000, 2000, 3500) */
    int32_t n_slash;        /* VERTICAL_SLASH: diagonals kept (Table 3: 200 .. 4096) */
    int32_t grid_stride;    /* GRID: a fixed stride (Table 3's frame_stride), or 0: search 2..max */
    int32_t grid_max_stride;   /* GRID: largest stride the search tries (Table 3: 1024) */
    int32_t grid_lines;     /* GRID: OC_GRID_HLINE | OC_GRID_VLINE | OC_GRID_SLASH, at least one */
    oc_modal_pattern modal[OC_N_MODALITIES];   /* Q_BOUNDARY: text, vision (else all zero) */
    /* BOUNDARY_2D: [query modality][key modality] (else all zero) */
    oc_modal_pattern pair[OC_N_MODALITIES][OC_N_MODALITIES];
} oc_head_pattern;

/* Grid line kinds (Table 3's use-hline, use-vline, use-slash flags). */
#define OC_GRID_HLINE 1
#define OC_GRID_VLINE 2
#define OC_GRID_SLASH 4

/* How an executor runs a head pattern (attn.h oc_attn_pattern_exec, which every backend provider
 * of backend.h names as its pattern_exec): what `ocellus plan` reports per backend. */
typedef enum oc_pattern_exec {
    OC_EXEC_DENSE = 0,     /* the pattern is not executed: the head runs dense */
    OC_EXEC_SPARSE,        /* sparse in prefill and decode */
    OC_EXEC_PREFILL        /* sparse in prefill (calls of >= 64 queries), dense in decode */
} oc_pattern_exec;

/* 1 for the patterns whose index is built per prompt (VERTICAL_SLASH, GRID). */
static inline int oc_pattern_is_dynamic(oc_pattern_kind kind) {
    return kind == OC_PATTERN_VERTICAL_SLASH || kind == OC_PATTERN_GRID;
}

/* 1 for the modality-boundary kinds, whose parts are plain patterns per modality (pair). */
static inline int oc_pattern_is_boundary(oc_pattern_kind kind) {
    return kind == OC_PATTERN_Q_BOUNDARY || kind == OC_PATTERN_BOUNDARY_2D;
}

/* 1 for the prefill-only patterns (pattern.h's header): the dynamic and the boundary kinds. */
static inline int oc_pattern_is_prefill(oc_pattern_kind kind) {
    return oc_pattern_is_dynamic(kind) || oc_pattern_is_boundary(kind);
}

/* 1 when a head of pattern p needs a per-prompt index in prefill (attention/dyn.h): a dynamic kind,
 * a Q_BOUNDARY head with a dynamic modality pattern, or a BOUNDARY_2D head. */
static inline int oc_pattern_needs_index(const oc_head_pattern *p) {
    int any = p->kind == OC_PATTERN_BOUNDARY_2D;   /* its rank coordinates come with the index */
    for (int m = 0; m < OC_N_MODALITIES; m++) {
        if (p->kind == OC_PATTERN_Q_BOUNDARY) any |= oc_pattern_is_dynamic(p->modal[m].kind);
        for (int k = 0; k < OC_N_MODALITIES && p->kind == OC_PATTERN_BOUNDARY_2D; k++)
            any |= oc_pattern_is_dynamic(p->pair[m][k].kind);
    }
    return any || oc_pattern_is_dynamic(p->kind);
}

/* A modal pattern as a plain head pattern. */
static inline oc_head_pattern oc_pattern_of_modal(const oc_modal_pattern *s) {
    oc_head_pattern q;
    memset(&q, 0, sizeof q);
    q.kind = s->kind;
    q.n_sink = s->n_sink;
    q.n_local = s->n_local;
    q.n_vertical = s->n_vertical;
    q.n_slash = s->n_slash;
    q.grid_stride = s->grid_stride;
    q.grid_max_stride = s->grid_max_stride;
    q.grid_lines = s->grid_lines;
    return q;
}

/* Modality m's pattern of a Q_BOUNDARY head as a plain head pattern. */
static inline oc_head_pattern oc_pattern_modal(const oc_head_pattern *p, int m) {
    return oc_pattern_of_modal(&p->modal[m]);
}

/* The (query modality mq, key modality mk) pattern of a BOUNDARY_2D head as a plain head pattern. */
static inline oc_head_pattern oc_pattern_pair(const oc_head_pattern *p, int mq, int mk) {
    return oc_pattern_of_modal(&p->pair[mq][mk]);
}

/* The modal pattern holding plain pattern q's kind and sizes. */
static inline oc_modal_pattern oc_pattern_to_modal(const oc_head_pattern *q) {
    oc_modal_pattern s = { q->kind, q->n_sink, q->n_local, q->n_vertical, q->n_slash, q->grid_stride,
                           q->grid_max_stride, q->grid_lines };
    return s;
}

/* 1 when an executor can run p: a known kind, for A_SHAPE n_sink >= 0 and n_local >= 1, for
 * VERTICAL_SLASH n_vertical >= 0 and n_slash >= 1, for GRID a stride >= 1 or a max stride >= 2 to
 * search and at least one line kind (the sizes of the other kinds are not read). Plans are stricter
 * (plan.h oc_plan_validate). */
static inline int oc_pattern_valid_plain(const oc_head_pattern *p) {
    if ((int)p->kind < 0 || p->kind >= OC_PATTERN_COUNT) return 0;
    if (p->kind == OC_PATTERN_A_SHAPE) return p->n_sink >= 0 && p->n_local >= 1;
    if (p->kind == OC_PATTERN_VERTICAL_SLASH) return p->n_vertical >= 0 && p->n_slash >= 1;
    if (p->kind == OC_PATTERN_GRID)
        return p->grid_stride >= 0 && (p->grid_stride > 0 || p->grid_max_stride >= 2) && p->grid_lines >= 1 &&
               p->grid_lines <= (OC_GRID_HLINE | OC_GRID_VLINE | OC_GRID_SLASH);
    return p->kind != OC_PATTERN_Q_BOUNDARY;
}

/* A part of a boundary head: valid and of kind DENSE, A_SHAPE, VERTICAL_SLASH or GRID. */
static inline int oc_pattern_valid_part(const oc_modal_pattern *s) {
    oc_head_pattern q = oc_pattern_of_modal(s);
    return (q.kind == OC_PATTERN_DENSE || q.kind == OC_PATTERN_A_SHAPE || oc_pattern_is_dynamic(q.kind)) &&
           oc_pattern_valid_plain(&q);
}

/* ... and for Q_BOUNDARY each modality's pattern, for BOUNDARY_2D each pair's, a valid part. */
static inline int oc_pattern_valid(const oc_head_pattern *p) {
    if (!oc_pattern_is_boundary(p->kind)) return oc_pattern_valid_plain(p);
    for (int m = 0; m < OC_N_MODALITIES; m++) {
        if (p->kind == OC_PATTERN_Q_BOUNDARY && !oc_pattern_valid_part(&p->modal[m])) return 0;
        for (int k = 0; k < OC_N_MODALITIES && p->kind == OC_PATTERN_BOUNDARY_2D; k++)
            if (!oc_pattern_valid_part(&p->pair[m][k])) return 0;
    }
    return 1;
}

/* 1 when p and q are the same pattern: the same kind and the same sizes of that kind. The one
 * definition of "same pattern" for plan equality and plan writing, and for the engine's head
 * groups of static patterns (two dynamic heads with the same sizes still get different indices,
 * so the engine never groups those). */
static inline int oc_pattern_same(const oc_head_pattern *p, const oc_head_pattern *q) {
    if (p->kind != q->kind) return 0;
    switch (p->kind) {
    case OC_PATTERN_Q_BOUNDARY:
        for (int m = 0; m < OC_N_MODALITIES; m++) {
            oc_head_pattern a = oc_pattern_modal(p, m), b = oc_pattern_modal(q, m);
            if (!oc_pattern_same(&a, &b)) return 0;
        }
        return 1;
    case OC_PATTERN_BOUNDARY_2D:
        for (int m = 0; m < OC_N_MODALITIES * OC_N_MODALITIES; m++) {
            oc_head_pattern a = oc_pattern_pair(p, m / OC_N_MODALITIES, m % OC_N_MODALITIES),
                           b = oc_pattern_pair(q, m / OC_N_MODALITIES, m % OC_N_MODALITIES);
            if (!oc_pattern_same(&a, &b)) return 0;
        }
        return 1;
    case OC_PATTERN_A_SHAPE: return p->n_sink == q->n_sink && p->n_local == q->n_local;
    case OC_PATTERN_VERTICAL_SLASH: return p->n_vertical == q->n_vertical && p->n_slash == q->n_slash;
    case OC_PATTERN_GRID:
        return p->grid_stride == q->grid_stride && p->grid_max_stride == q->grid_max_stride &&
               p->grid_lines == q->grid_lines;
    default: return 1;
    }
}

#endif
