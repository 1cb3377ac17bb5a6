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

/* The same for a BOUNDARY_2D head (dyn.h, mminference.txt Alg. 3): the base mask in positions, and
 * the pattern of pair (modality[p], modality[j]) with index pairs[mq * 2 + mk] on the ranks of p
 * and j within their modalities (counted here from modality[], 0 text, 1 vision); a dynamic pair
 * whose index is marked dense keeps every key of the pair. */
int ref_2d_keep(oc_attn_mask_kind mask, const oc_head_pattern *pt, const oc_dyn_head *pairs, const uint8_t *modality,
                int p, int j);

#endif
