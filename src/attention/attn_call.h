/* attn_call.h: one attention call, as the model code (text_layer.c, vision_encoder.c) describes it
 * and every executor reads it: the CPU engine (attn.c), the backend table (backend.h) and the
 * OpenCL host (opencl/cl_attn.c). The struct is passed by pointer from the graph to the engine and
 * never copied field by field, so a new sparse method is one new field here, read where it is
 * executed (attn.c / mask.c and opencl/cl_attn.c), and nothing in between changes. Fields planned
 * for the methods not written yet go at the end, zero meaning "off" so older callers stay correct:
 *  - per-head KV lengths (SparseMM: sparsemm.txt Sec. 3.3): kv_held, below (the CPU engine);
 *  - lazy layers sharing Q/K (qcache.txt): a layer pointer whose scores this call reuses;
 *  - Q-Cache VLA (qcache.txt Eq. 7-8): k_shared, below;
 *
 * What lives where: the call holds shapes, element offsets and strides, the mask description and the
 * head patterns. Where the tensors' memory is belongs to the executor and is passed beside the call
 * (oc_attn_host for the CPU engine, oc_attn_bt for a backend, oc_cl_attn_bufs on OpenCL); the
 * offsets and strides here index into that memory in elements of the operand's type (f32 for q and
 * out, kv_dtype for k and v): head h of query i is q[q_off + i * q_stride_token + h * q_stride_head].
 * The mask description is host data (segments, explicit mask, patterns, layout), like kernel
 * arguments: a device backend copies what its kernel needs.
 * Semantics of the mask: attn.h. Checks: oc_attn_run (CPU) and oc_cl_attn_prepare / run (OpenCL). */
#ifndef OC_ATTN_CALL_H
#define OC_ATTN_CALL_H

#include "attention/layout.h"
#include "attention/pattern.h"

typedef enum oc_attn_mask_kind {
    OC_ATTN_CAUSAL = 0,      /* query at position p sees keys 0..p */
    OC_ATTN_BIDIRECTIONAL,   /* every query sees every key */
    OC_ATTN_SEGMENTS,        /* block diagonal: a query sees the keys of the segment holding its
                                position (per-image vision attention, Qwen2.5-VL windows); a query
                                in no segment sees nothing (output 0) */
    OC_ATTN_EXPLICIT         /* debug/test path (CPU only): a byte mask per (head,) query and key;
                                every tile is treated as partial. Combined with the patterns like
                                the others. */
} oc_attn_mask_kind;

typedef struct oc_attn_call {
    /* shapes */
    int32_t n_q, n_kv;
    int32_t n_head, n_head_kv;   /* n_head % n_head_kv == 0: grouped-query attention */
    int32_t head_dim;            /* any value >= 1 on the CPU; OpenCL: cl_attn.h's limit */
    /* tensors: element offsets and strides into the executor's memory (see the header comment) */
    int64_t q_off, q_stride_token, q_stride_head;
    int32_t kv_dtype;            /* OC_DTYPE_F16 or OC_DTYPE_F32 */
    int64_t k_off, k_stride_token, k_stride_head;
    int64_t v_off, v_stride_token, v_stride_head;
    int64_t out_off, out_stride_token, out_stride_head;
    float scale;                 /* usually 1/sqrt(head_dim) */
    /* the base mask: query i sits at absolute position q_offset + i, key j at position j */
    oc_attn_mask_kind mask;
    int32_t q_offset;                  /* >= 0 */
    const oc_token_span *segments;     /* OC_ATTN_SEGMENTS: sorted, disjoint, non-empty spans */
    int32_t n_segments;
    /* OC_ATTN_EXPLICIT: mask[h * stride_head + i * stride_q + j] != 0 keeps key j for query i of
     * head h; stride_head 0 shares one mask across heads. */
    const uint8_t *explicit_mask;
    int64_t explicit_stride_q, explicit_stride_head;
    /* the sparse patterns, ANDed with the base mask */
    const oc_head_pattern *patterns;   /* [n_head], or NULL: every head dense */
    const oc_token_layout *layout;     /* for the BlindSight patterns; NULL: every token is text */
    /* new sparse methods: fields here, zero = off (see the header comment) */
    /* MMInference's per-prompt indices of the VERTICAL_SLASH / GRID heads (attention/dyn.h, built
     * by oc_attn_dyn_build for this call); NULL when no head is dynamic or the call is a decode */
    const struct oc_attn_dyn *dyn;
    /* Q-Cache VLA (qcache.txt Eq. 7-8): key j with k_shared[j] != 0 (j < n_kv) is the group's
     * first layer's, read at the same key index and strides from k_shared_off instead of k_off
     * (the lazy layer stores no key row of its own there). NULL: every key from k_off. */
    const uint8_t *k_shared;
    int64_t k_shared_off;
    /* 1: the executor may round q, k, the probabilities and v to bf16 for the two products (S = Q K^T,
     * O = P V; scores, softmax and sums stay f32) where its BF16 dot products are fast: the CPU engine
     * takes attn_bf16_avx512.c's table with AVX512_BF16 and oc_cpu_features.bf16_fast, the rule
     * under which the vision encoder's matrices already take matmul.h's BF16 path; elsewhere it
     * changes nothing. Error: about 2^-7 of sum |q k| per score and of sum p |v| per output
     * (attn_bf16_avx512.c). The vision encoder sets it; the text model does not. 0: f32. */
    int32_t bf16_products;
    /* Profiling, may be NULL: the executor adds the nanoseconds it spent estimating and choosing
     * the dynamic heads' index (dyn.h) before the kernels ran, so a caller can tell that cost
     * from the kernels' (bench plans). Results never depend on it. */
    uint64_t *estimate_ns;
    /* A cache compacted per kv head (SparseMM's per-head budgets, sparsemm.txt Sec. 3.3;
     * kvcache/kv_cache.h), or NULL: kv head g's keys are its kv_held[g] held rows followed by the
     * call's n_q own rows, and query i of g's heads sits at position kv_held[g] + i (causal). The
     * call means what n_head_kv calls of one kv head each (n_kv = kv_held[g] + n_q, q_offset =
     * kv_held[g]) mean, bitwise, in one dispatch of the pool: each of those calls cost a dispatch,
     * more at 16 threads in decode than the evicted keys saved. Needs the causal mask, no
     * patterns, no k_shared; n_kv >= every kv_held[g] + n_q (the rows read and the scratch's
     * size); q_offset is not read. The CPU engine only (oc_backend_ops.attention of "cpu"). */
    const int32_t *kv_held;
} oc_attn_call;

#endif
