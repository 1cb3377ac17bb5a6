/* fuzz_plan.c: libFuzzer target for the plan parser. Any input either fails with a one-line
 * message or parses into a plan that writes, reads back into equal data and writes the same bytes
 * again (the canonical-writer property); fit checks and statistics run on every accepted plan. */
#include "plan/plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *write_or_die(const oc_plan *plan, size_t *n_bytes) {
    oc_error err;
    if (oc_plan_write(plan, NULL, 0, n_bytes, &err) != OC_OK) { fprintf(stderr, "measure: %s\n", err.message); abort(); }
    char *text = malloc(*n_bytes + 1);
    if (!text) abort();
    if (oc_plan_write(plan, text, *n_bytes + 1, n_bytes, &err) != OC_OK) { fprintf(stderr, "write: %s\n", err.message); abort(); }
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_plan *plan = NULL;
    oc_error err;
    memset(&err, 0, sizeof err);
    if (oc_plan_parse(&plan, (const char *)data, size, NULL, NULL, &err) != OC_OK) {
        const char *nul = memchr(err.message, '\0', sizeof err.message);
        if (plan || !nul || nul == err.message || memchr(err.message, '\n', (size_t)(nul - err.message))) abort();
        return 0;
    }
    size_t n1, n2;
    char *t1 = write_or_die(plan, &n1);
    oc_plan *back = NULL;
    if (oc_plan_parse(&back, t1, n1, NULL, NULL, &err) != OC_OK) {
        fprintf(stderr, "written plan does not parse: %s\n%s\n", err.message, t1);
        abort();
    }
    if (!oc_plan_equal(plan, back)) abort();
    char *t2 = write_or_die(back, &n2);
    if (n1 != n2 || memcmp(t1, t2, n1) != 0) abort();
    oc_plan_model_shape model = { { 28, 12, 2, 128 }, { 32, 16, 16, 80 } };
    (void)oc_plan_check_fits(plan, &model, &err);
    model.decoder = plan->stacks[OC_PLAN_DECODER].shape;
    model.vision = plan->stacks[OC_PLAN_VISION].shape;
    if (oc_plan_check_fits(plan, &model, &err) != OC_OK) abort();   /* a plan fits its own shape */
    for (int s = 0; s < OC_PLAN_N_STACKS; s++) {
        oc_plan_stats st;
        oc_plan_stats_get(plan, (oc_plan_stack)s, &st);
        int32_t sum = 0;
        for (int k = 0; k < OC_PATTERN_COUNT; k++) sum += st.n_per_pattern[k];
        if (sum != st.n_heads || st.n_sparse != st.n_heads - st.n_per_pattern[OC_PATTERN_DENSE]) abort();
    }
    free(t1);
    free(t2);
    oc_plan_free(back);
    oc_plan_free(plan);
    return 0;
}
