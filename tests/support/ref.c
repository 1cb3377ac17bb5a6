/* ref.c: see ref.h. */
#include "ref.h"

#include "check.h"

#include <stdlib.h>
#include <string.h>

static void *copy_tensor(const oc_safetensors *st, const char *name, oc_st_dtype want, size_t *n,
                         int64_t dims[4]) {
    const oc_st_tensor *t = oc_safetensors_find(st, name);
    if (!t || t->dtype != want) return NULL;
    if (dims)
        for (uint32_t i = 0; i < 4; i++) dims[i] = i < t->n_dims ? t->shape[i] : 1;
    *n = (size_t)t->n_elements;
    void *p = aligned_alloc(64, ((size_t)t->n_bytes + 63) / 64 * 64 + 64);
    if (!p) return NULL;
    memcpy(p, t->data, t->n_bytes);
    return p;
}

float *ref_f32(const oc_safetensors *st, const char *name, size_t *n, int64_t dims[4]) {
    return copy_tensor(st, name, OC_ST_F32, n, dims);
}

int32_t *ref_i32(const oc_safetensors *st, const char *name, size_t *n, int64_t dims[4]) {
    return copy_tensor(st, name, OC_ST_I32, n, dims);
}

double ref_rel_err(const float *a, const float *b, size_t n) {
    double *d = malloc(sizeof(double) * (n ? n : 1));
    if (!d) return INFINITY;
    for (size_t i = 0; i < n; i++) d[i] = b[i];
    double e = check_rel_err_f32(a, d, n);
    free(d);
    return e;
}

size_t ref_argmax(const float *x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}
