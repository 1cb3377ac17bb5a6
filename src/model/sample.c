/* sample.c: greedy and temperature / top-k / top-p sampling (see sample.h). Order of the
 * filters as in llama.cpp's default chain and Hugging Face's warpers: top-k on the logits, then
 * softmax with the temperature, then top-p (the smallest prefix of the sorted distribution whose
 * mass reaches p), then a draw. */
#include "model/sample.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

oc_status oc_sampler_init(oc_sampler *s, int32_t n_vocab, const oc_sampling *params,
                          const oc_allocator *alloc, oc_error *err) {
    s->cands = NULL;
    s->prob = NULL;
    if (n_vocab < 1) return oc_fail(err, OC_ERR_INVALID, "sampler: empty vocabulary");
    if (!(params->temperature >= 0.0f) || params->top_k < 0 || !(params->top_p > 0.0f) ||
        params->top_p > 1.0f)
        return oc_fail(err, OC_ERR_INVALID, "sampling: need temperature >= 0, top-k >= 0 and "
                       "0 < top-p <= 1 (got %g, %d, %g)", (double)params->temperature, params->top_k,
                       (double)params->top_p);
    s->params = *params;
    s->n_vocab = n_vocab;
    s->alloc = alloc ? *alloc : *oc_default_allocator();
    s->cands = oc_mem_alloc(&s->alloc, sizeof(oc_sample_cand) * (size_t)n_vocab);
    s->prob = oc_mem_alloc(&s->alloc, sizeof(float) * (size_t)n_vocab);
    if (!s->cands || !s->prob) {
        oc_sampler_free(s);
        return oc_fail(err, OC_ERR_NOMEM, "sampler: out of memory");
    }
    oc_sampler_reset(s);
    return OC_OK;
}

void oc_sampler_free(oc_sampler *s) {
    oc_mem_free(&s->alloc, s->cands, sizeof(oc_sample_cand) * (size_t)s->n_vocab);
    oc_mem_free(&s->alloc, s->prob, sizeof(float) * (size_t)s->n_vocab);
    s->cands = NULL;
    s->prob = NULL;
}

void oc_sampler_reset(oc_sampler *s) { s->rng = s->params.seed; }

int32_t oc_sample_greedy(const float *x, int32_t n) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
    return best < 0 ? 0 : best;
}

/* Sort candidates by logit descending, id ascending on ties (a total order: deterministic). */
typedef oc_sample_cand cand;

static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t oc_sampler_next(oc_sampler *s, const float *logits, int32_t n_valid) {
    if (n_valid > s->n_vocab) n_valid = s->n_vocab;
    const oc_sampling *p = &s->params;
    if (p->temperature <= 0.0f || p->top_k == 1) return oc_sample_greedy(logits, n_valid);
    cand *c = s->cands;
    int32_t n_c = 0;
    int32_t k = p->top_k > 0 && p->top_k < n_valid ? p->top_k : n_valid;
    if (k > 256) {
        /* Top-k off or wide: every finite logit (insertion into a sorted list would be slow). */
        for (int32_t i = 0; i < n_valid; i++)
            if (logits[i] == logits[i]) c[n_c++] = (cand){ logits[i], i };
        if (n_c > k) {
            qsort(c, (size_t)n_c, sizeof *c, cand_cmp);
            n_c = k;
        }
    } else {
        for (int32_t i = 0; i < n_valid; i++) {
            float l = logits[i];
            if (l != l) continue;
            if (n_c < k) {
                c[n_c++] = (cand){ l, i };
                if (n_c == k) qsort(c, (size_t)n_c, sizeof *c, cand_cmp);
            } else if (l > c[k - 1].logit) {
                /* insert into the sorted top-k, dropping the last */
                int32_t j = k - 1;
                while (j > 0 && c[j - 1].logit < l) {
                    c[j] = c[j - 1];
                    j--;
                }
                c[j] = (cand){ l, i };
            }
        }
    }
    if (n_c == 0) return oc_sample_greedy(logits, n_valid);
    qsort(c, (size_t)n_c, sizeof *c, cand_cmp);
    /* softmax with temperature, in double for a stable sum */
    double sum = 0.0;
    float *pr = s->prob;
    for (int32_t i = 0; i < n_c; i++) {
        pr[i] = (float)exp((double)(c[i].logit - c[0].logit) / (double)p->temperature);
        sum += pr[i];
    }
    /* top-p: the smallest prefix whose mass reaches top_p */
    int32_t n_keep = n_c;
    if (p->top_p < 1.0f) {
        double cum = 0.0;
        for (int32_t i = 0; i < n_c; i++) {
            cum += pr[i] / sum;
            if (cum >= (double)p->top_p) {
                n_keep = i + 1;
                break;
            }
        }
    }
    double kept = 0.0;
    for (int32_t i = 0; i < n_keep; i++) kept += pr[i];
    double u = (double)(splitmix64(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * kept;
    double acc = 0.0;
    for (int32_t i = 0; i < n_keep; i++) {
        acc += pr[i];
        if (u < acc) return c[i].id;
    }
    return c[n_keep - 1].id;
}
