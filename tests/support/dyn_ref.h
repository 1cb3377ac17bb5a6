/* dyn_ref.h: the masks of MMInference's patterns written from their definitions
 * (src/attention/dyn.h, attn.h), sharing no code with the engines, for the tests that compare a
 * sparse run with dense attention under the same mask given explicitly (test_dyn.c, test_opencl.c). */
#ifndef OC_TEST_DYN_REF_H
#define OC_TEST_DYN_REF_H

#include "attention/attn.h"

/* 1 when head pattern pt (with its per-prompt index dh for VERTICAL_SLASH / GRID) keeps key j for the
 * query at position p under base mask `mask` (causal or bidirectional). DENSE, A_SHAPE and the
 * dynamic kinds only. */
int ref_dyn_keep(oc_attn_mask_kind mask, const oc_head_pattern *pt, const oc_dyn_head *dh, int p, int j);

#endif
