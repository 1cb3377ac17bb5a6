/* cl_kvsel.c: backend.h's oc_kv_dev_op on an OpenCL device (kernels: opencl/kernels/kvsel.cl).
 * Every step is queued; a chosen set's size is written by one kernel and read by the next ones
 * (their launch sizes are the host's upper bound, n keys), so a prefill never waits for the device
 * inside a layer. The operands are checked against their buffers here, before any launch. */
#include "opencl/cl_kvsel.h"

#include <math.h>

static oc_cl_buf *cb(const oc_bt *t) { return t ? (oc_cl_buf *)t->impl : NULL; }

/* elements [off, off + n) of elem bytes lie inside t, and every index fits an int32 */
static int inside(const oc_bt *t, int64_t off, int64_t n, size_t elem) {
    return t && t->impl && off >= 0 && n >= 0 && oc_cl_fits_i32(off, n) &&
           (uint64_t)(off + n) <= (uint64_t)(t->n_bytes / elem);
}

static oc_status bad(oc_error *err, const char *what) {
    return oc_fail(err, OC_ERR_INVALID, "backend opencl kv_dev: %s", what);
}

static oc_status score(oc_cl_device *dev, const oc_kv_dev_op *o, oc_error *err) {
    int32_t hd = o->head_dim, nh = o->n_head, nkv = o->n_head_kv;
    if (o->n_rows <= 0 || o->n <= 0) return OC_OK;
    if (hd < 4 || hd > 128 || hd % 4 || nkv < 1 || nh < nkv || nh % nkv || nh / nkv > 16 || o->acc_stride < 0)
        return bad(err, "score: head_dim a multiple of 4 up to 128, query heads 1..16 times the kv heads");
    /* positions lie in [q_base, n): the q rows from q_base up to the last key's, every key */
    if (o->pos && !inside(o->pos, o->pos_first, o->n_rows, 4)) return bad(err, "score: positions outside their buffer");
    if (!o->pos && (o->pos0 < o->q_base || (int64_t)o->pos0 + o->n_rows > o->n)) return bad(err, "score: rows outside the keys");
    int64_t q_rows = (int64_t)o->n - o->q_base;
    if (q_rows < 1 || o->q_stride < nh * hd || !inside(o->q, o->q_off, (q_rows - 1) * o->q_stride + (int64_t)nh * hd, 4))
        return bad(err, "score: q rows outside their buffer");
    if (!inside(o->k, o->k_off, (int64_t)(o->n - 1) * o->k_stride + (int64_t)nkv * hd, 2))
        return bad(err, "score: keys outside their buffer");
    int32_t n_out = o->acc_stride ? nkv : 1;
    if (!inside(o->acc, o->acc_off, (int64_t)(n_out - 1) * o->acc_stride + o->n, 4) ||
        !inside(o->stats, 0, 2 * (int64_t)o->n_rows * nh, 4) || !inside(o->part, 0, (int64_t)o->n_rows * n_out * o->n, 4))
        return bad(err, "score: masses, stats or parts outside their buffers");
    float scale2 = o->scale * 1.44269504088896340736f;   /* logits in base 2, as kv_select.c */
    /* The rows' softmax statistics in n_split work-groups per (row, kv head), each over a contiguous
     * share of the keys, about 512 keys a group; the splits' partial (m, l) sit in part (free until
     * oc_kvs_part writes it, later in the same in-order queue; 2 x 16 heads x n / 512 splits fit its
     * n_rows x n floats) and one small launch merges them in split order. The split count depends
     * on the key count only, so the masses are the same on any device and launch. */
    int32_t n_split = OC_MAX(1, OC_MIN(16, o->n / 512));
    if (!inside(o->part, 0, 2 * (int64_t)o->n_rows * nh * n_split, 4)) return bad(err, "score: parts outside their buffer");
    oc_cl_arg a[] = { OC_CL_BUF(cb(o->q)), OC_CL_I32(o->q_off), OC_CL_I32(o->q_stride), OC_CL_I32(o->q_base),
                      OC_CL_BUF(cb(o->k)), OC_CL_I32(o->k_off), OC_CL_I32(o->k_stride), OC_CL_BUF(cb(o->pos)),
                      OC_CL_I32(o->pos_first), OC_CL_I32(o->pos0), OC_CL_I32(nh), OC_CL_I32(nh / nkv), OC_CL_I32(hd),
                      OC_CL_F32(scale2), OC_CL_I32(n_split), OC_CL_BUF(cb(o->stats)), OC_CL_BUF(cb(o->part)) };
    size_t g1[1] = { (size_t)64 * (size_t)o->n_rows * (size_t)nkv * (size_t)n_split }, l1[1] = { 64 };
    oc_status st = oc_cl_launch(dev, OC_CLK_KVS_STATS, 1, g1, l1, (int)OC_ARRAY_LEN(a), a, err);
    if (st) return st;
    if (n_split > 1) {
        int32_t n_ih = o->n_rows * nh;
        oc_cl_arg m[] = { OC_CL_BUF(cb(o->part)), OC_CL_I32(n_split), OC_CL_I32(n_ih), OC_CL_BUF(cb(o->stats)) };
        size_t gm[1] = { ((size_t)n_ih + 63) / 64 * 64 }, lm[1] = { 64 };
        if ((st = oc_cl_launch(dev, OC_CLK_KVS_MERGE, 1, gm, lm, (int)OC_ARRAY_LEN(m), m, err))) return st;
    }
    oc_cl_arg b[] = { OC_CL_BUF(cb(o->q)), OC_CL_I32(o->q_off), OC_CL_I32(o->q_stride), OC_CL_I32(o->q_base),
                      OC_CL_BUF(cb(o->k)), OC_CL_I32(o->k_off), OC_CL_I32(o->k_stride), OC_CL_BUF(cb(o->pos)),
                      OC_CL_I32(o->pos_first), OC_CL_I32(o->pos0), OC_CL_I32(o->n_rows), OC_CL_I32(nh), OC_CL_I32(nh / nkv),
                      OC_CL_I32(hd), OC_CL_F32(scale2), OC_CL_BUF(cb(o->stats)), OC_CL_I32(o->acc_stride), OC_CL_I32(o->n),
                      OC_CL_BUF(cb(o->part)) };
    int32_t n_blocks = (o->n_rows + 7) / 8;   /* kvsel.cl KVS_ROWS */
    size_t g2[2] = { (size_t)o->n, (size_t)n_blocks }, l2[2] = { 64, 1 };   /* kvsel.cl KVS_WG: its required size */
    if ((st = oc_cl_launch(dev, OC_CLK_KVS_PART, 2, g2, l2, (int)OC_ARRAY_LEN(b), b, err))) return st;
    oc_cl_arg c[] = { OC_CL_BUF(cb(o->part)), OC_CL_I32(n_blocks), OC_CL_I32(n_out), OC_CL_I32(o->n),
                      OC_CL_BUF(cb(o->acc)), OC_CL_I32(o->acc_off), OC_CL_I32(o->acc_stride) };
    size_t g3[2] = { (size_t)o->n, (size_t)n_out }, l3[2] = { 64, 1 };
    return oc_cl_launch(dev, OC_CLK_KVS_REDUCE, 2, g3, l3, (int)OC_ARRAY_LEN(c), c, err);
}

/* the out list of op: n_copies lists of up to n entries, and their counts */
static int list_ok(const oc_kv_dev_op *o, int32_t n) {
    return o->n_copies >= 1 && o->list_stride >= 0 && (o->n_copies == 1 || o->list_stride >= n) &&
           inside(o->list, o->list_off, (int64_t)(o->n_copies - 1) * o->list_stride + n, 4) &&
           inside(o->counts, o->count_idx, o->n_copies, 4);
}

static oc_status collect(oc_cl_device *dev, const oc_kv_dev_op *o, const oc_bt *map, int64_t map_off, int32_t n_idx,
                         oc_error *err) {
    oc_cl_arg a[] = { OC_CL_BUF(cb(o->flags)), OC_CL_I32(o->n), OC_CL_BUF(cb(o->counts)), OC_CL_I32(n_idx),
                      OC_CL_BUF(cb(map)), OC_CL_I32(map_off), OC_CL_BUF(cb(o->list)), OC_CL_I32(o->list_off),
                      OC_CL_I32(o->list_stride), OC_CL_I32(o->n_copies), OC_CL_I32(o->count_idx) };
    size_t g[1] = { 256 }, l[1] = { 256 };
    return oc_cl_launch(dev, OC_CLK_KVS_COLLECT, 1, g, l, (int)OC_ARRAY_LEN(a), a, err);
}

static oc_status zipvl(oc_cl_device *dev, const oc_kv_dev_op *o, oc_error *err) {
    if (o->n <= 0) return OC_OK;
    /* the rankings' O(n^2) compares in n_split groups per 256 keys (about 512 other keys each, the
     * split from the key count alone), their partial sums and counts in part (8 bytes a key and
     * split), then one item per key adds them */
    int32_t n_split = OC_MAX(1, OC_MIN(16, o->n / 512));
    if (!inside(o->acc, o->acc_off, o->n, 4) || !inside(o->flags, 0, o->n, 4) || !inside(o->norm, 0, o->n, 4) ||
        !inside(o->counts, o->p_idx, 1, 4) || (o->n_probes > 0 && !inside(o->probes, 0, o->n_probes, 4)) ||
        !inside(o->part, 0, 2 * (int64_t)n_split * o->n, 4) || !list_ok(o, o->n))
        return bad(err, "zipvl: an operand outside its buffer");
    /* the target in 2^-40 fixed point, as the kernel sums the masses */
    double t = o->target * 1099511627776.0;
    uint64_t target = !(t > 0) ? 0 : t >= 18446744073709549568.0 ? UINT64_MAX : (uint64_t)t;
    oc_status st = oc_cl_fill32(dev, cb(o->counts), (size_t)o->p_idx * 4, 0, 4, err);
    if (st) return st;
    size_t g2[2] = { ((size_t)o->n + 255) / 256 * 256, (size_t)n_split }, l2[2] = { 256, 1 };
    size_t g[1] = { ((size_t)o->n + 63) / 64 * 64 }, l[1] = { 64 };
    oc_cl_arg a[] = { OC_CL_BUF(cb(o->acc)), OC_CL_I32(o->acc_off), OC_CL_I32(o->n), OC_CL_BUF(cb(o->part)) };
    if ((st = oc_cl_launch(dev, OC_CLK_KVS_ZIPVL_PRE, 2, g2, l2, (int)OC_ARRAY_LEN(a), a, err))) return st;
    oc_cl_arg b[] = { OC_CL_BUF(cb(o->acc)), OC_CL_I32(o->acc_off), OC_CL_I32(o->n), OC_CL_I32((int32_t)(uint32_t)target),
                      OC_CL_I32((int32_t)(uint32_t)(target >> 32)), OC_CL_BUF(cb(o->part)), OC_CL_I32(n_split),
                      OC_CL_BUF(cb(o->probes)), OC_CL_I32(o->n_probes), OC_CL_I32(o->n_head), OC_CL_BUF(cb(o->norm)),
                      OC_CL_BUF(cb(o->counts)), OC_CL_I32(o->p_idx) };
    if ((st = oc_cl_launch(dev, OC_CLK_KVS_ZIPVL_P, 1, g, l, (int)OC_ARRAY_LEN(b), b, err))) return st;
    oc_cl_arg c[] = { OC_CL_BUF(cb(o->norm)), OC_CL_I32(o->n), OC_CL_BUF(cb(o->part)) };
    if ((st = oc_cl_launch(dev, OC_CLK_KVS_ZIPVL_FLAG, 2, g2, l2, (int)OC_ARRAY_LEN(c), c, err))) return st;
    oc_cl_arg d[] = { OC_CL_BUF(cb(o->part)), OC_CL_I32(n_split), OC_CL_I32(o->n), OC_CL_BUF(cb(o->counts)),
                      OC_CL_I32(o->p_idx), OC_CL_I32(o->recent), OC_CL_BUF(cb(o->flags)) };
    if ((st = oc_cl_launch(dev, OC_CLK_KVS_ZIPVL_SET, 1, g, l, (int)OC_ARRAY_LEN(d), d, err))) return st;
    return collect(dev, o, NULL, 0, -1, err);
}

static oc_status sparsemm(oc_cl_device *dev, const oc_kv_dev_op *o, oc_error *err) {
    if (o->n <= 0) return OC_OK;
    /* the within set's size is at most n (the host's bound, checked by the kernel's reads: n) */
    if (!inside(o->acc, o->acc_off, o->n, 4) || !inside(o->flags, 0, o->n, 4) || !list_ok(o, o->n) ||
        (o->within && (!inside(o->within, o->within_off, o->n, 4) || !inside(o->counts, o->within_idx, 1, 4))) ||
        (!o->within && o->map_within) || o->budget < 0 || o->window < 0)
        return bad(err, "sparsemm: an operand outside its buffer");
    int32_t within_idx = o->within ? o->within_idx : -1;
    size_t g[1] = { (size_t)o->n }, l[1] = { 256 };
    oc_cl_arg a[] = { OC_CL_BUF(cb(o->acc)), OC_CL_I32(o->acc_off), OC_CL_BUF(cb(o->within)), OC_CL_I32(o->within_off),
                      OC_CL_BUF(cb(o->counts)), OC_CL_I32(within_idx), OC_CL_I32(o->n), OC_CL_I32(o->budget),
                      OC_CL_I32(o->window), OC_CL_BUF(cb(o->flags)) };
    oc_status st = oc_cl_launch(dev, OC_CLK_KVS_SPARSEMM_FLAG, 1, g, l, (int)OC_ARRAY_LEN(a), a, err);
    if (st) return st;
    return collect(dev, o, o->map_within ? o->within : NULL, o->within_off, within_idx, err);
}

static oc_status keep(oc_cl_device *dev, const oc_kv_dev_op *o, oc_error *err) {
    /* f16 rows as 32-bit words; the rows a list can name: n (the host's bound on its entries) */
    if (o->n <= 0 || o->n_groups <= 0) return OC_OK;
    int64_t span = (int64_t)(o->n_groups - 1) * o->row_elems + o->row_elems, top_k = (int64_t)o->n + o->shift - 1,
            top_v = (int64_t)o->n + o->shift2 - 1;
    if (o->t_off % 2 || o->t2_off % 2 || o->t_stride % 2 || o->row_elems % 2 || o->row_elems < 2 ||
        o->row_elems > 2 * 64 * 256 || span > o->t_stride || o->shift < 0 || o->shift2 < 0 || !o->t2 ||
        (o->t && !inside(o->t, o->t_off, top_k * o->t_stride + span, 2)) ||
        !inside(o->t2, o->t2_off, top_v * o->t_stride + span, 2) ||
        o->list_stride < (o->n_groups > 1 ? o->n : 0) ||
        !inside(o->list, o->list_off, (int64_t)(o->n_groups - 1) * o->list_stride + o->n, 4) ||
        !inside(o->counts, o->count_idx, o->n_groups, 4))
        return bad(err, "keep: rows outside the cache, or not whole 32-bit words");
    /* each kv head's K and V rows cut into up to 8 slices of at least 8 words (a 32-byte sector):
     * 2 kv heads were 4 work-groups of a GPU's 100+ compute units */
    int32_t row = o->row_elems / 2, n_slice = 1;
    while (n_slice < 8 && row % (2 * n_slice) == 0 && row / (2 * n_slice) >= 8) n_slice *= 2;
    oc_cl_arg a[] = { OC_CL_BUF(cb(o->t)), OC_CL_I32(o->t_off / 2), OC_CL_I32(o->shift), OC_CL_BUF(cb(o->t2)),
                      OC_CL_I32(o->t2_off / 2), OC_CL_I32(o->shift2), OC_CL_I32(o->t_stride / 2),
                      OC_CL_I32(row), OC_CL_I32(n_slice), OC_CL_BUF(cb(o->list)), OC_CL_I32(o->list_off),
                      OC_CL_I32(o->list_stride), OC_CL_BUF(cb(o->counts)), OC_CL_I32(o->count_idx) };
    size_t g[1] = { (size_t)256 * 2 * (size_t)o->n_groups * (size_t)n_slice }, l[1] = { 256 };
    return oc_cl_launch(dev, OC_CLK_KVS_KEEP, 1, g, l, (int)OC_ARRAY_LEN(a), a, err);
}

oc_status oc_cl_kv_dev(oc_cl_device *dev, const oc_kv_dev_op *op, oc_error *err) {
    switch (op->kind) {
    case OC_KV_DEV_SCORE: return score(dev, op, err);
    case OC_KV_DEV_ZIPVL: return zipvl(dev, op, err);
    case OC_KV_DEV_SPARSEMM: return sparsemm(dev, op, err);
    case OC_KV_DEV_KEEP: return keep(dev, op, err);
    case OC_KV_DEV_ZERO:
        if (op->n <= 0) return OC_OK;
        if (!inside(op->acc, op->acc_off, op->n, 4)) return bad(err, "zero: outside the buffer");
        return oc_cl_fill32(dev, cb(op->acc), (size_t)op->acc_off * 4, 0, (size_t)op->n * 4, err);
    }
    return bad(err, "unknown kind");
}
