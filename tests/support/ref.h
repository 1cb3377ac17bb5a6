/* ref.h: reading the transformers reference outputs (tests/data/models/NAME/reference.safetensors,
 * made by tests/reference/make_model_fixtures.py) into malloc'd, aligned copies. */
#ifndef OC_TEST_REF_H
#define OC_TEST_REF_H

#include "tools/safetensors.h"

/* The tensor's elements as floats (F32 tensors) or int32 (I32 tensors); NULL when absent or of
 * another dtype. *n gets the element count, dims (may be NULL) the shape (up to 4). free() it. */
float *ref_f32(const oc_safetensors *st, const char *name, size_t *n, int64_t dims[4]);
int32_t *ref_i32(const oc_safetensors *st, const char *name, size_t *n, int64_t dims[4]);
/* rel. error of a against b (both float), as check_rel_err_f32 with b widened to double */
double ref_rel_err(const float *a, const float *b, size_t n);
/* index of the largest element */
size_t ref_argmax(const float *x, size_t n);

#endif
