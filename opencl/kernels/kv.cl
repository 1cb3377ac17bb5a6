/* kv.cl: store f32 rows (new K or V of n_rows tokens) into a KV cache at a token offset, as f16
 * (vstore_half_rte: round to nearest even, as src/core/f16.h) or f32. Offsets and strides are in
 * elements of the cache's type. */
__kernel void oc_kv_store(__global uchar *dst, int dst_f16, int dst_off, int dst_stride, const __global float *src,
                          int src_off, int src_stride, int n_cols, int n_rows) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= n_cols || r >= n_rows) return;
    float v = src[src_off + (size_t)r * src_stride + c];
    size_t at = (size_t)dst_off + (size_t)r * dst_stride + c;
    if (dst_f16) vstore_half_rte(v, at, (__global half *)dst);
    else ((__global float *)dst)[at] = v;
}

/* KV cache compaction in place in one launch (cl_device.c oc_cl_keep_rows): row kept[r] moves to
 * row r for r < n (kept ascending, so kept[r] >= r), rows of `row` 32-bit words `stride` words
 * apart from word `off`. One work-group walks the rows in steps of KEEP_WG * KEEP_PER words; each
 * item reads its words of the step before any item writes (the barrier between), so no source of
 * the step is overwritten before it is read, and a step writes only rows below every later step's
 * sources (kept[r'] >= r' > the step's rows): the result is the copies in increasing r, one row
 * after another, as one command per row gave. */
#define KEEP_WG 256
#define KEEP_PER 16
__kernel __attribute__((reqd_work_group_size(KEEP_WG, 1, 1)))
void oc_kv_keep(__global uint *buf, int off, int stride, int row, const __global int *kept, int n) {
    const int lid = get_local_id(0), step = max(1, KEEP_WG * KEEP_PER / row);
    for (int r0 = 0; r0 < n; r0 += step) {
        const int total = min(step, n - r0) * row;
        uint v[KEEP_PER];
        for (int k = 0; k < KEEP_PER; k++) {
            int e = lid + k * KEEP_WG;
            if (e < total) v[k] = buf[off + (size_t)kept[r0 + e / row] * stride + e % row];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
        for (int k = 0; k < KEEP_PER; k++) {
            int e = lid + k * KEEP_WG;
            if (e < total) buf[off + (size_t)(r0 + e / row) * stride + e % row] = v[k];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
