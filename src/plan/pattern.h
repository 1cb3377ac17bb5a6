/* pattern.h: the sparse attention pattern of one head, as a plan file names it and the attention
 * engine executes it. Shared by plan.c (parse/write) and the attention engine.
 *   DENSE               the model's own mask (causal in the decoder, full/segments in vision)
 *   SINK, INTRA_IMAGE,  BlindSight categories (blindsight.txt Sec. 3.2, App. L Alg. 3): text
 *   INTRA_IMAGE_SINK    queries stay dense; image queries keep all text keys plus: the sink tokens
 *                       of earlier images (SINK), their own image causally (INTRA_IMAGE), or both
 *   A_SHAPE             MMInference (mminference.txt Sec. 3, Table 3): the first n_sink keys plus a
 *                       local window of n_local keys before each query
 * Per-head KV budgets (SparseMM) and lazy-layer groups (Q-Cache) live beside the pattern in the
 * plan, not here. */
#ifndef OC_PATTERN_H
#define OC_PATTERN_H

#include <stdint.h>

typedef enum oc_pattern_kind {
    OC_PATTERN_DENSE = 0,
    OC_PATTERN_SINK,
    OC_PATTERN_INTRA_IMAGE,
    OC_PATTERN_INTRA_IMAGE_SINK,
    OC_PATTERN_A_SHAPE,
    OC_PATTERN_COUNT
} oc_pattern_kind;

typedef struct oc_head_pattern {
    oc_pattern_kind kind;
    int32_t n_sink;    /* A_SHAPE: leading keys every query keeps (MMInference: 128) */
    int32_t n_local;   /* A_SHAPE: keys before and including the query's own (1024, 2048, 4096) */
} oc_head_pattern;

/* 1 when an executor can run p: a known kind, and for A_SHAPE n_sink >= 0 and n_local >= 1 (the
 * sizes of the other kinds are not read). Plans are stricter (plan.h oc_plan_validate). */
static inline int oc_pattern_valid(const oc_head_pattern *p) {
    if ((int)p->kind < 0 || p->kind >= OC_PATTERN_COUNT) return 0;
    return p->kind != OC_PATTERN_A_SHAPE || (p->n_sink >= 0 && p->n_local >= 1);
}

/* 1 when p and q keep the same keys: the same kind and, for A_SHAPE, the same sizes. The one
 * definition of "same pattern": heads grouped by the engine, plan equality and plan writing. */
static inline int oc_pattern_same(const oc_head_pattern *p, const oc_head_pattern *q) {
    if (p->kind != q->kind) return 0;
    return p->kind != OC_PATTERN_A_SHAPE || (p->n_sink == q->n_sink && p->n_local == q->n_local);
}

#endif
