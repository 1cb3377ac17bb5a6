/* cl_device.h: the OpenCL runtime: device discovery and choice, the per-device context (every
 * embedded program built once, kernels cached by id), device buffers, and ONE launch helper that
 * sets a kernel's arguments from a tagged list and enqueues it. The per-op functions on device
 * buffers (cl_ops.h, cl_attn.h) are built on this; no file outside src/cl_*.c needs CL/cl.h.
 * Works on any OpenCL 1.2 device: kernels compute in f32 and touch f16 only through
 * vload_half/vstore_half (core 1.2; PoCL and NVIDIA list no cl_khr_fp16); subgroup reductions are
 * used only when the device lists cl_khr_subgroups or cl_intel_subgroups and its compiler takes them.
 * A device object is used by one thread at a time; commands run in order on its one queue, and
 * only downloads (and oc_cl_finish) wait for them. Nothing here is global: two devices, or the
 * same device opened twice, are independent. */
#ifndef OC_CL_DEVICE_H
#define OC_CL_DEVICE_H

#include "core/core.h"

/* Every kernel the library launches: id, program (opencl/FILE), function name. */
#define OC_CL_KERNEL_LIST(X)                          \
    X(NORM, "norm.cl", "oc_norm")                     \
    X(ROPE_NEOX, "rope.cl", "oc_rope_neox")           \
    X(ROPE_STORE, "rope.cl", "oc_rope_store")         \
    X(ACT, "elementwise.cl", "oc_act")                \
    X(GLU, "elementwise.cl", "oc_glu")                \
    X(ADD, "elementwise.cl", "oc_add")                \
    X(ADD_BIAS, "elementwise.cl", "oc_add_bias")      \
    X(GATHER_ROWS, "elementwise.cl", "oc_gather_rows") \
    X(EMBED, "embed.cl", "oc_embed")                  \
    X(KV_STORE, "kv.cl", "oc_kv_store")               \
    X(KV_KEEP, "kv.cl", "oc_kv_keep")                 \
    X(ARGMAX, "argmax.cl", "oc_argmax")               \
    X(GEMV, "matmul.cl", "oc_gemv")                   \
    X(GEMV_FUSED, "matmul.cl", "oc_gemv_fused")       \
    X(GEMM, "matmul.cl", "oc_gemm")                   \
    X(ATTN, "attn.cl", "oc_attn")                     \
    X(ATTN_MERGE, "attn.cl", "oc_attn_merge")         \
    X(ATTN_DECODE, "decode.cl", "oc_attn_decode")     \
    X(ATTN_COUNT, "attn.cl", "oc_attn_count")         \
    X(DYN_ESTIMATE, "dyn.cl", "oc_dyn_estimate")      \
    X(DYN_DIAG, "dyn.cl", "oc_dyn_diag")              \
    X(DYN_CHOOSE, "dyn.cl", "oc_dyn_choose")          \
    X(FMA_PEAK, "peak.cl", "oc_fma_peak")             \
    X(READ_PEAK, "peak.cl", "oc_read_peak")           \
    X(KVS_STATS, "kvsel.cl", "oc_kvs_stats")          \
    X(KVS_MERGE, "kvsel.cl", "oc_kvs_merge")          \
    X(KVS_PART, "kvsel.cl", "oc_kvs_part")            \
    X(KVS_REDUCE, "kvsel.cl", "oc_kvs_reduce")        \
    X(KVS_ZIPVL_PRE, "kvsel.cl", "oc_kvs_zipvl_pre")  \
    X(KVS_ZIPVL_FLAG, "kvsel.cl", "oc_kvs_zipvl_flag") \
    X(KVS_ZIPVL_P, "kvsel.cl", "oc_kvs_zipvl_p")      \
    X(KVS_ZIPVL_SET, "kvsel.cl", "oc_kvs_zipvl_set")  \
    X(KVS_SPARSEMM_FLAG, "kvsel.cl", "oc_kvs_sparsemm_flag") \
    X(KVS_COLLECT, "kvsel.cl", "oc_kvs_collect")      \
    X(KVS_KEEP, "kvsel.cl", "oc_kvs_keep")            \
    X(ATTN_DYN, "attn.cl", "oc_attn")

typedef enum oc_cl_kernel_id {
#define OC_CL_KERNEL_ENUM(id, file, fn) OC_CLK_##id,
    OC_CL_KERNEL_LIST(OC_CL_KERNEL_ENUM)
#undef OC_CL_KERNEL_ENUM
    OC_CLK_COUNT
} oc_cl_kernel_id;

/* Attention tiles (opencl/kernels/attn.cl): row_groups x key_groups work-items (8 x 8 = 64 by default);
 * query rows per work-group row_groups * rows_per_item, keys per tile key_groups * keys_per_item;
 * chosen per device from its local memory, or forced by oc_cl_options. */
#define OC_CL_ATTN_MAX_HEAD_DIM 128

#define OC_CL_NAME_BYTES 128
typedef struct oc_cl_caps {
    int index;                          /* position in the list over all platforms' devices */
    char platform[OC_CL_NAME_BYTES];    /* CL_PLATFORM_NAME */
    char device[OC_CL_NAME_BYTES];      /* CL_DEVICE_NAME */
    char version[OC_CL_NAME_BYTES];     /* CL_DEVICE_VERSION, e.g. "OpenCL 3.0 CUDA" */
    char driver[OC_CL_NAME_BYTES];      /* CL_DRIVER_VERSION */
    int is_gpu, is_cpu;
    int has_subgroups;                  /* cl_khr_subgroups or cl_intel_subgroups: used */
    int has_fp16, has_fp64;             /* cl_khr_fp16 / cl_khr_fp64: information only */
    uint32_t compute_units;
    size_t max_work_group_size;
    uint64_t local_mem_bytes, global_mem_bytes, max_alloc_bytes;
    int attn_rows_per_item, attn_keys_per_item;   /* the attention tile shape built for it ... */
    int attn_row_groups, attn_key_groups;         /* ... on a grid of this many work-items */
    int attn_dyn_rows_per_item;   /* MMInference's prefill heads' launch (OC_CLK_ATTN_DYN, a build of its
                                     own): rows per item of its 64-row tile; 0: none (the main one's) */
} oc_cl_caps;

typedef struct oc_cl_device oc_cl_device;
typedef struct oc_cl_buf oc_cl_buf;

/* Choices made at open; zero-initialised (or a NULL pointer) means automatic. */
typedef struct oc_cl_options {
    int attn_rows_per_item;   /* 0: the device's default (opencl/cl_device.c); 1..8 forces that many rows per item */
    int subgroups;            /* 0: sub-group reductions when the device lists them; -1: never;
                                 1: try them anyway (tests: a device whose compiler refuses them
                                 falls back to local memory, which is what open does then) */
    /* the rest of the attention tile (0: the device's default, 2 keys per item on 16 x 8 items); open fails
       with OC_ERR_INVALID unless keys 1..8, key groups 4, 8 or 16, 32..256 items (at most the
       device's work-group limit) and >= 16 rows per work-group */
    int attn_keys_per_item, attn_row_groups, attn_key_groups;
} oc_cl_options;

/* Local memory bytes the attention kernel of caps c's tile needs at head_dim (opencl/kernels/attn.cl). */
size_t oc_cl_attn_local_bytes(const oc_cl_caps *c, int32_t head_dim);

/* Describe up to max_devices devices of every platform into out (may be NULL with max 0);
 * *n_found gets the total. [alloc: no] [errors: OC_ERR_NOT_FOUND when there is no platform
 * (-1001) or no device, OC_ERR_DEVICE when an OpenCL query fails] */
oc_status oc_cl_list_devices(oc_cl_caps *out, int max_devices, int *n_found, oc_error *err);

/* The device oc_cl_open would pick for selector (below), described, without opening it.
 * [alloc: no] [errors: as oc_cl_list_devices, OC_ERR_NOT_FOUND when nothing matches] */
oc_status oc_cl_select(const char *selector, oc_cl_caps *out, oc_error *err);

/* Open a device and build every program for it. selector: NULL or "" picks the first GPU (else
 * the first device); all decimal digits picks that index of oc_cl_list_devices; anything else is
 * a case-insensitive substring of the device name, then of the platform name.
 * [alloc: yes] [errors: OC_ERR_NOT_FOUND (no platform, no device, or the selector matches none:
 * the message lists them), OC_ERR_DEVICE (an OpenCL call failed, or a program did not build: the
 * message names the program and starts its build log), OC_ERR_UNSUPPORTED (device below OpenCL
 * 1.2), OC_ERR_NOMEM] */
oc_status oc_cl_open(oc_cl_device **out, const char *selector, const oc_cl_options *opt, const oc_allocator *alloc,
                     oc_error *err);
void oc_cl_close(oc_cl_device *dev);   /* NULL is a no-op; free the device's buffers first */
const oc_cl_caps *oc_cl_device_caps(const oc_cl_device *dev);

/* Build one program from source with the device's options and release it again: the path every
 * embedded program takes, exposed so tests can check the failure message. name appears in it. */
oc_status oc_cl_try_build(oc_cl_device *dev, const char *name, const char *source, oc_error *err);

/* CLBlast matrix products for F32 weights: has = the build has CLBlast; use = take it (on by
 * default when built; off: opencl/kernels/matmul.cl for every type). */
int oc_cl_has_clblast(const oc_cl_device *dev);
void oc_cl_use_clblast(oc_cl_device *dev, int on);

/* ---- buffers ------------------------------------------------------------------------------------ */

/* A device buffer of n_bytes (> 0). [alloc: yes: host bookkeeping + the device allocation]
 * [errors: OC_ERR_RANGE above the device's single-allocation limit, OC_ERR_DEVICE, OC_ERR_NOMEM] */
oc_status oc_cl_buf_alloc(oc_cl_device *dev, size_t n_bytes, oc_cl_buf **out, oc_error *err);
void oc_cl_buf_free(oc_cl_buf *buf);   /* NULL is a no-op */
size_t oc_cl_buf_bytes(const oc_cl_buf *buf);
/* What oc_cl_buf_alloc takes from the device's allocator per buffer (its handle, with
 * oc_mem_alloc's header), and what oc_cl_open takes for the device: host bytes only. */
size_t oc_cl_buf_host_bytes(void);
size_t oc_cl_device_host_bytes(void);

/* Copy host -> device (returns when src may be reused) and device -> host (returns when the
 * queued work before it is done and dst holds the data). [errors: OC_ERR_RANGE (outside the
 * buffer), OC_ERR_DEVICE] */
oc_status oc_cl_upload(oc_cl_device *dev, oc_cl_buf *dst, size_t dst_offset_bytes, const void *src,
                       size_t n_bytes, oc_error *err);
oc_status oc_cl_download(oc_cl_device *dev, const oc_cl_buf *src, size_t src_offset_bytes, void *dst,
                         size_t n_bytes, oc_error *err);
/* Queue a host -> device copy and return at once: src must stay unchanged until the next
 * download or oc_cl_finish (data that lives as long as the model: plan patterns, tables). */
oc_status oc_cl_upload_nowait(oc_cl_device *dev, oc_cl_buf *dst, size_t dst_offset_bytes, const void *src,
                              size_t n_bytes, oc_error *err);
/* Fill n_bytes at offset with a repeated 4-byte pattern (offset and n_bytes multiples of 4). */
oc_status oc_cl_fill32(oc_cl_device *dev, oc_cl_buf *dst, size_t offset_bytes, uint32_t pattern,
                       size_t n_bytes, oc_error *err);
/* KV cache compaction in place: the row of row_bytes at off + kept[r] * stride_bytes moves to
 * off + r * stride_bytes, for r < n_kept (kept ascending). With idx (a device buffer of at least
 * n_kept int32) and 4-byte aligned rows: kept is written to idx (a wait) and one launch of
 * kv.cl's oc_kv_keep moves every row; else queued copies, one per run of consecutive rows.
 * [errors: OC_ERR_RANGE, OC_ERR_INVALID (rows overlap), OC_ERR_DEVICE] */
oc_status oc_cl_keep_rows(oc_cl_device *dev, oc_cl_buf *buf, size_t offset_bytes, size_t stride_bytes,
                          size_t row_bytes, const int32_t *kept, int32_t n_kept, oc_cl_buf *idx, oc_error *err);
/* Profiling: with OCELLUS_CL_PROFILE=FILE in the environment at oc_cl_open, the device's queue
 * records every launch, and oc_cl_close appends a per-interval and per-kernel table to FILE
 * (cl_device.c "Profile"; `ocellus bench vlm --profile`). oc_cl_prof_batch marks the open interval
 * as a batch one (a product outside oc_cl_launch: CLBlast). */
void oc_cl_prof_batch(oc_cl_device *dev);
/* How many times the host has waited for the queue (downloads, blocking uploads, finishes): when
 * it changed since a host copy was handed to oc_cl_upload_nowait, the queue has read that copy. */
uint64_t oc_cl_wait_count(const oc_cl_device *dev);
/* Wait until every queued command has finished (benchmarks time with it). */
oc_status oc_cl_finish(oc_cl_device *dev, oc_error *err);

/* ---- the launch helper ---------------------------------------------------------------------------- */

typedef enum oc_cl_arg_kind { OC_CL_ARG_BUF, OC_CL_ARG_I32, OC_CL_ARG_F32, OC_CL_ARG_LOCAL } oc_cl_arg_kind;
typedef struct oc_cl_arg {
    oc_cl_arg_kind kind;
    const oc_cl_buf *buf;    /* BUF; NULL passes a NULL pointer */
    int32_t i32;
    float f32;
    size_t local_bytes;      /* LOCAL: __local memory of this size */
} oc_cl_arg;

#define OC_CL_BUF(b) ((oc_cl_arg){ .kind = OC_CL_ARG_BUF, .buf = (b) })
#define OC_CL_I32(v) ((oc_cl_arg){ .kind = OC_CL_ARG_I32, .i32 = (int32_t)(v) })
#define OC_CL_F32(v) ((oc_cl_arg){ .kind = OC_CL_ARG_F32, .f32 = (float)(v) })
#define OC_CL_LOCAL(n) ((oc_cl_arg){ .kind = OC_CL_ARG_LOCAL, .local_bytes = (size_t)(n) })

/* Set the n_args arguments of kernel id in order and enqueue it over work_dim (1..3) dimensions.
 * global[d] is rounded up to a multiple of local[d] (kernels check their bounds); local NULL lets
 * the driver choose. A global size of 0 enqueues nothing. [alloc: no]
 * [errors: OC_ERR_INVALID (local size above the kernel's limit), OC_ERR_DEVICE naming the kernel
 * and the failing call] */
oc_status oc_cl_launch(oc_cl_device *dev, oc_cl_kernel_id id, int work_dim, const size_t *global,
                       const size_t *local, int n_args, const oc_cl_arg *args, oc_error *err);
/* CL_KERNEL_WORK_GROUP_SIZE of kernel id on this device. */
size_t oc_cl_kernel_wg_size(const oc_cl_device *dev, oc_cl_kernel_id id);
/* The largest power of two <= min(want, the kernel's work-group limit). */
size_t oc_cl_pow2_wg(const oc_cl_device *dev, oc_cl_kernel_id id, size_t want);

/* 1 when every element index a kernel computes as off + (n - 1) (with n >= 1) stays an int32. */
static inline int oc_cl_fits_i32(int64_t off, int64_t n) {
    return off >= 0 && n >= 0 && off <= INT32_MAX && n <= (int64_t)INT32_MAX - off;
}

#endif
