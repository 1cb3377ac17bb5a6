/* sample.h: choosing the next token from the logits: greedy, or temperature + top-k + top-p
 * sampling with a seeded generator (same seed, same logits -> same token on every machine).
 * Working memory (candidate and probability arrays of n_vocab entries) is allocated once in
 * oc_sampler_init; oc_sampler_next allocates nothing. */
#ifndef OC_SAMPLE_H
#define OC_SAMPLE_H

#include "core/core.h"

typedef struct oc_sample_cand {
    float logit;
    int32_t id;
} oc_sample_cand;

typedef struct oc_sampler {
    oc_sampling params;
    uint64_t rng;            /* splitmix64 state */
    int32_t n_vocab;
    oc_sample_cand *cands;   /* [n_vocab] */
    float *prob;             /* [n_vocab] */
    oc_allocator alloc;
} oc_sampler;

/* [alloc: 2 arrays of n_vocab] [errors: OC_ERR_INVALID (params out of range), OC_ERR_NOMEM] */
/* The first largest of x[0..n), NaN never chosen (0 when all are NaN): greedy decoding. */
int32_t oc_sample_greedy(const float *x, int32_t n);
oc_status oc_sampler_init(oc_sampler *s, int32_t n_vocab, const oc_sampling *params,
                          const oc_allocator *alloc, oc_error *err);
void oc_sampler_free(oc_sampler *s);
/* Restart the random sequence from params.seed. */
void oc_sampler_reset(oc_sampler *s);
/* The next token among ids [0, n_valid) (n_valid <= n_vocab: ids past the tokenizer's vocabulary,
 * padding rows of the embedding, are never chosen). Greedy when temperature <= 0 or top_k == 1:
 * the largest logit, the lowest id on ties. NaN logits are never chosen. */
int32_t oc_sampler_next(oc_sampler *s, const float *logits, int32_t n_valid);

#endif
