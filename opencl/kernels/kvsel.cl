/* kvsel.cl: a shrinking KV cache's scoring, selection and compaction on the device
 * (opencl/cl_kvsel.c; the rules are kvcache/kv_select.h's, on host arrays there):
 *  - oc_kvs_stats, oc_kvs_merge, oc_kvs_part, oc_kvs_reduce: the observed rows' softmax over the keys they see (SparseMM's window,
 *    sparsemm.txt Eq. 10-13; ZipVL's probes, zipvl.txt Eq. A, 6) summed per key into acc;
 *  - oc_kvs_zipvl_pre / _p, oc_kvs_zipvl_flag / _set: ZipVL's p (the fewest keys whose largest masses reach
 *    tau of the rows' total, Eq. 7) and the top p by mass / nnz (Eq. 8-9);
 *  - oc_kvs_sparsemm_flag: SparseMM's window plus the top budget - window by mass (Eq. 13-14);
 *  - oc_kvs_collect: the flags to an ascending list and its size (both stay on the device);
 *  - oc_kvs_keep: kv.cl's compaction with those lists and sizes read on the device, every kv
 *    head's K and V of a layer in one launch.
 * Ranks are counted, not sorted: key j's rank is the number of keys that rank before it (a larger
 * mass, or an equal one at an earlier position: kv_select.c's order), one work-item per key over
 * tiles of the others in local memory. O(n^2) compares, no data-dependent launch sizes, and the
 * same set as the host's ranking whenever the masses are the same. ZipVL's cumulative mass is in
 * 2^-40 fixed point (ulong): exact and independent of the summation order. */

#define KVS_WG 64      /* the scoring's work-group: one (row, head) */
#define KVS_TILE 256   /* the rankings' work-group and tile */

/* a ranks before b: larger, ties to the earlier index (kv_select.c before()) */
#define KVS_BEFORE(va, a, vb, b) ((va) > (vb) || ((va) == (vb) && (a) < (b)))

static int kvs_pos(const __global int *pos, int pos_first, int pos0, int i) {
    return pos ? pos[pos_first + i] : pos0 + i;
}

#define KVS_MAX_GROUP 16   /* query heads per kv head (host-checked) */
#define KVS_ROWS 8         /* observed rows per oc_kvs_part item */

/* Row i x kv head g x split s per work-group (group id (i * n_kv + g) * n_split + s): for each of
 * g's query heads h, the max m and sum l of 2^(x - m) (x the logit in base 2) over split s of the
 * row's keys 0..pos (n_split contiguous ranges), combined over the work-items in a fixed tree. Each
 * key row is read once (four halves a load) for all of g's heads. With n_split 1 the row's (m, l)
 * go to stats; else each split's to pstats[2 * ((i * n_head + h) * n_split + s)] and
 * oc_kvs_merge combines them in split order. One work-group per (row, kv head) left an H200 mostly
 * idle: 2 kv heads x 32-64 rows is 64-128 groups, each walking 4,000+ keys (0.9 ms a layer). */
__kernel __attribute__((reqd_work_group_size(KVS_WG, 1, 1)))
void oc_kvs_stats(const __global float *q, int q_off, int q_stride, int q_base, const __global half *k, int k_off,
                  int k_stride, const __global int *pos, int pos_first, int pos0, int n_head, int group, int hd,
                  float scale2, int n_split, __global float *stats, __global float *pstats) {
    __local float qs[KVS_MAX_GROUP * 128];
    __local float rm[KVS_WG * KVS_MAX_GROUP], rl[KVS_WG * KVS_MAX_GROUP];
    const int n_kv = n_head / group, wg = get_group_id(0) / n_split, s = get_group_id(0) % n_split, lid = get_local_id(0);
    const int i = wg / n_kv, g = wg % n_kv;
    const int p = kvs_pos(pos, pos_first, pos0, i);
    const int chunk = (p + n_split) / n_split, j0 = s * chunk, j1 = min(p + 1, j0 + chunk);
    const __global float *qr = q + q_off + (size_t)(p - q_base) * q_stride + (size_t)g * group * hd;
    for (int e = lid; e < group * hd; e += KVS_WG) qs[e] = qr[e] * scale2;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* m, l, sc in registers: the loops over heads run to KVS_MAX_GROUP, unrolled, the heads past
     * group skipped (loops to the runtime group let a compiler keep them in per-item stack memory) */
    float m[KVS_MAX_GROUP], l[KVS_MAX_GROUP], sc[KVS_MAX_GROUP];
#pragma unroll
    for (int h = 0; h < KVS_MAX_GROUP; h++) m[h] = -INFINITY, l[h] = 0.0f;
    for (int j = j0 + lid; j < j1; j += KVS_WG) {
        const __global half *kr = k + k_off + (size_t)j * k_stride + (size_t)g * hd;
#pragma unroll
        for (int h = 0; h < KVS_MAX_GROUP; h++) sc[h] = 0.0f;
        for (int d = 0; d < hd; d += 4) {
            const float4 kv = vload_half4(0, kr + d);
#pragma unroll
            for (int h = 0; h < KVS_MAX_GROUP; h++) {
                if (h >= group) continue;
                const __local float *qh = qs + h * hd + d;
                sc[h] += qh[0] * kv.x + qh[1] * kv.y + qh[2] * kv.z + qh[3] * kv.w;
            }
        }
#pragma unroll
        for (int h = 0; h < KVS_MAX_GROUP; h++) {
            if (h >= group) continue;
            if (sc[h] > m[h]) {
                l[h] = l[h] * exp2(m[h] - sc[h]) + 1.0f;
                m[h] = sc[h];
            } else {
                l[h] += exp2(sc[h] - m[h]);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < KVS_MAX_GROUP; h++) {
        if (h >= group) continue;
        rm[h * KVS_WG + lid] = m[h];
        rl[h * KVS_WG + lid] = l[h];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = KVS_WG / 2; w > 0; w >>= 1) {
        if (lid < w)
            for (int h = 0; h < group; h++) {
                const int a = h * KVS_WG + lid;
                float ma = rm[a], mb = rm[a + w], mx = fmax(ma, mb);
                rl[a] = mx == -INFINITY ? 0.0f : rl[a] * exp2(ma - mx) + rl[a + w] * exp2(mb - mx);
                rm[a] = mx;
            }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid < group) {
        const int h = g * group + lid;
        __global float *out = n_split > 1 ? pstats + 2 * ((size_t)(i * n_head + h) * n_split + s) : stats + 2 * (i * n_head + h);
        out[0] = rm[lid * KVS_WG];
        out[1] = rl[lid * KVS_WG];
    }
}

/* Item (row i, head h) < n: its splits' (m, l) from oc_kvs_stats combined in split order (the same
 * rule as the work-items' tree: a split with no keys, m = -inf, adds nothing). */
__kernel void oc_kvs_merge(const __global float *pstats, int n_split, int n, __global float *stats) {
    const int ih = get_global_id(0);
    if (ih >= n) return;
    const __global float *ps = pstats + 2 * (size_t)ih * n_split;
    float m = -INFINITY;
    for (int s = 0; s < n_split; s++) m = fmax(m, ps[2 * s]);
    float l = 0.0f;
    for (int s = 0; s < n_split; s++)
        if (ps[2 * s] != -INFINITY) l += ps[2 * s + 1] * exp2(ps[2 * s] - m);
    stats[2 * ih] = m;
    stats[2 * ih + 1] = l;
}

/* Key j (dimension 0) x block b of KVS_ROWS observed rows (dimension 1): the probabilities of key j
 * in those rows (the ones that see it: pos >= j) summed over the heads of each output row go (kv
 * head go; every head into go 0 when acc_stride is 0), to part[(b * n_out + go) * n_keys + j].
 * The key's row is read once per kv head (four halves a load) for all the block's rows and heads:
 * reading it per row and head made the scoring 2-3 ms a layer on an H200. The logit is computed
 * as oc_kvs_stats computes it (the same products in the same order); a probability below 2^-125
 * of its row's largest counts as 0 (kv_select.h). */
__kernel __attribute__((reqd_work_group_size(KVS_WG, 1, 1)))   /* so a compiler may give kk its 128 registers */
void oc_kvs_part(const __global float *q, int q_off, int q_stride, int q_base, const __global half *k, int k_off,
                 int k_stride, const __global int *pos, int pos_first, int pos0, int n_rows, int n_head,
                 int group, int hd, float scale2, const __global float *stats, int acc_stride, int n_keys,
                 __global float *part) {
    const int j = get_global_id(0), blk = get_global_id(1);
    if (j >= n_keys) return;
    const int n_kv = n_head / group, n_out = acc_stride ? n_kv : 1, i0 = blk * KVS_ROWS, i1 = min(n_rows, i0 + KVS_ROWS);
    /* the key row in registers: the loops over its elements run to 128, unrolled, the ones past hd
     * skipped (the same products in the same order; loops to the runtime hd let a compiler keep kk
     * in per-item stack memory, one cached load before each product) */
    float kk[128];
    float sum = 0.0f;
    for (int g = 0; g < n_kv; g++) {
        const __global half *kr = k + k_off + (size_t)j * k_stride + (size_t)g * hd;
#pragma unroll
        for (int d = 0; d < 128; d += 4) {
            if (d >= hd) continue;
            const float4 kv = vload_half4(0, kr + d);
            kk[d] = kv.x, kk[d + 1] = kv.y, kk[d + 2] = kv.z, kk[d + 3] = kv.w;
        }
        for (int i = i0; i < i1; i++) {
            const int p = kvs_pos(pos, pos_first, pos0, i);
            if (p < j) continue;
            for (int h = g * group; h < (g + 1) * group; h++) {
                const __global float *qr = q + q_off + (size_t)(p - q_base) * q_stride + (size_t)h * hd;
                float s = 0.0f;
#pragma unroll
                for (int d = 0; d < 128; d += 4)
                    if (d < hd)
                        s += (qr[d] * scale2) * kk[d] + (qr[d + 1] * scale2) * kk[d + 1] +
                             (qr[d + 2] * scale2) * kk[d + 2] + (qr[d + 3] * scale2) * kk[d + 3];
                const float e = s - stats[2 * (i * n_head + h)];
                if (e >= -125.0f) sum += exp2(e) / stats[2 * (i * n_head + h) + 1];
            }
        }
        if (acc_stride) {
            part[((size_t)blk * n_out + g) * n_keys + j] = sum;
            sum = 0.0f;
        }
    }
    if (!acc_stride) part[(size_t)blk * n_keys + j] = sum;
}

/* acc[acc_off + go * acc_stride + j] += the row blocks' parts in order (fixed: the same sum for any
 * launch shape). */
__kernel void oc_kvs_reduce(const __global float *part, int n_blocks, int n_out, int n_keys, __global float *acc,
                            int acc_off, int acc_stride) {
    const int j = get_global_id(0), go = get_global_id(1);
    if (j >= n_keys) return;
    float sum = 0.0f;
    for (int b = 0; b < n_blocks; b++) sum += part[((size_t)b * n_out + go) * n_keys + j];
    acc[acc_off + (size_t)go * acc_stride + j] += sum;
}

/* ZipVL, first pass, key j < n (dimension 0) x split s of the other keys (dimension 1, n_split
 * contiguous ranges): the mass of the keys of split s ranked before j, in 2^-40 fixed point, to
 * ppre[s * n + j]. Integer sums: exact, so the same total for any split. One work-group per 256
 * keys made 18 of them at 4,361 keys, a sliver of a GPU; the splits give it n_split times more. */
__kernel __attribute__((reqd_work_group_size(KVS_TILE, 1, 1)))
void oc_kvs_zipvl_pre(const __global float *acc, int acc_off, int n, __global ulong *ppre) {
    __local float tile[KVS_TILE];
    const int j = get_global_id(0), lid = get_local_id(0), s = get_global_id(1), n_split = get_global_size(1);
    const int span = (n + n_split - 1) / n_split, u0 = s * span, u1 = min(n, u0 + span);
    const float mj = j < n ? acc[acc_off + j] : 0.0f;
    ulong pre = 0;
    for (int t0 = u0; t0 < u1; t0 += KVS_TILE) {
        tile[lid] = t0 + lid < u1 ? acc[acc_off + t0 + lid] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int m = min(KVS_TILE, u1 - t0);
        for (int u = 0; u < m; u++) {
            const float mi = tile[u];
            if (KVS_BEFORE(mi, t0 + u, mj, j)) pre += (ulong)(mi * 0x1p40f);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (j < n) ppre[(size_t)s * n + j] = pre;
}

/* Key j < n: pre = its splits' sums (the mass of the keys ranked before j); j is among the top p
 * exactly when pre < target (Eq. 7: the key at rank t is kept while the masses before it have not
 * reached the target), so p is the number of such keys (an atomic count: the same for any order).
 * Also norm[j] = mass / nnz (Eq. 8), nnz = n_head x the probe rows at or after j. counts[p_idx]
 * must be 0 before. */
__kernel void oc_kvs_zipvl_p(const __global float *acc, int acc_off, int n, uint target_lo, uint target_hi,
                             const __global ulong *ppre, int n_split, const __global int *probes, int n_probes,
                             int n_head, __global float *norm, __global int *counts, int p_idx) {
    const int j = get_global_id(0);
    if (j >= n) return;
    ulong pre = 0;
    for (int s = 0; s < n_split; s++) pre += ppre[(size_t)s * n + j];
    const ulong target = ((ulong)target_hi << 32) | (ulong)target_lo;
    if (pre < target) atomic_inc(counts + p_idx);
    int seen = 0;
    for (int t = 0; t < n_probes; t++) seen += probes[t] >= j;
    norm[j] = seen ? acc[acc_off + j] / (float)(seen * n_head) : 0.0f;
}

/* ZipVL, second pass, key j (dimension 0) x split s (dimension 1, as oc_kvs_zipvl_pre): the number
 * of split s's keys whose norm ranks before j's, to prank[s * n + j]. */
__kernel __attribute__((reqd_work_group_size(KVS_TILE, 1, 1)))
void oc_kvs_zipvl_flag(const __global float *norm, int n, __global int *prank) {
    __local float tile[KVS_TILE];
    const int j = get_global_id(0), lid = get_local_id(0), s = get_global_id(1), n_split = get_global_size(1);
    const int span = (n + n_split - 1) / n_split, u0 = s * span, u1 = min(n, u0 + span);
    const float vj = j < n ? norm[j] : 0.0f;
    int rank = 0;
    for (int t0 = u0; t0 < u1; t0 += KVS_TILE) {
        tile[lid] = t0 + lid < u1 ? norm[t0 + lid] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int m = min(KVS_TILE, u1 - t0);
        for (int u = 0; u < m; u++) rank += KVS_BEFORE(tile[u], t0 + u, vj, j);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (j < n) prank[(size_t)s * n + j] = rank;
}

/* flags[j] = j's rank (its splits' counts) < p, or j among the last `recent` keys. */
__kernel void oc_kvs_zipvl_set(const __global int *prank, int n_split, int n, const __global int *counts, int p_idx,
                               int recent, __global int *flags) {
    const int j = get_global_id(0);
    if (j >= n) return;
    int rank = 0;
    for (int s = 0; s < n_split; s++) rank += prank[(size_t)s * n + j];
    flags[j] = rank < counts[p_idx] || j >= n - recent;
}

/* SparseMM for one kv head over n_w keys (counts[within_idx], or n when within_idx < 0): item t
 * stands for key within[within_off + t] (or t); the last w = min(window, budget) are kept, the
 * others by rank of their mass < budget - w; budget >= n_w keeps all. Items past n_w flag 0. */
__kernel __attribute__((reqd_work_group_size(KVS_TILE, 1, 1)))
void oc_kvs_sparsemm_flag(const __global float *acc, int acc_off, const __global int *within, int within_off,
                          const __global int *counts, int within_idx, int n, int budget, int window,
                          __global int *flags) {
    __local float tile[KVS_TILE];
    const int t = get_global_id(0), lid = get_local_id(0);
    const int n_w = within_idx >= 0 ? counts[within_idx] : n;
    const int w = min(window, budget), rest = n_w - w;
    const float vt = t < n_w ? acc[acc_off + (within ? within[within_off + t] : t)] : 0.0f;
    int rank = 0;
    for (int t0 = 0; budget < n_w && t0 < rest; t0 += KVS_TILE) {
        tile[lid] = t0 + lid < rest ? acc[acc_off + (within ? within[within_off + t0 + lid] : t0 + lid)] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int m = min(KVS_TILE, rest - t0);
        for (int u = 0; u < m; u++) rank += KVS_BEFORE(tile[u], t0 + u, vt, t);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (t >= n) return;
    flags[t] = t < n_w && (budget >= n_w || t >= rest || rank < budget - w);
}

/* One work-group: the flagged items of 0..n_f (counts[n_idx], or n when n_idx < 0) in order,
 * each as map[map_off + t] (map NULL: t), to n_copies lists list_stride apart; the count to
 * counts[count_idx + c]. Each work-item takes a contiguous chunk; the chunks' offsets are an
 * exclusive scan of their counts. */
__kernel __attribute__((reqd_work_group_size(KVS_TILE, 1, 1)))
void oc_kvs_collect(const __global int *flags, int n, __global int *counts, int n_idx, const __global int *map,
                    int map_off, __global int *list, int list_off, int list_stride, int n_copies, int count_idx) {
    __local int part[KVS_TILE];
    const int lid = get_local_id(0);
    const int n_f = n_idx >= 0 ? counts[n_idx] : n, chunk = (n_f + KVS_TILE - 1) / KVS_TILE;
    const int a = min(n_f, lid * chunk), b = min(n_f, a + chunk);
    int c = 0;
    for (int t = a; t < b; t++) c += flags[t] != 0;
    part[lid] = c;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        int s = 0;
        for (int i = 0; i < KVS_TILE; i++) {
            int x = part[i];
            part[i] = s;
            s += x;
        }
        for (int cp = 0; cp < n_copies; cp++) counts[count_idx + cp] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int r = part[lid];
    for (int t = a; t < b; t++) {
        if (!flags[t]) continue;
        const int v = map ? map[map_off + t] : t;
        for (int cp = 0; cp < n_copies; cp++) list[list_off + cp * list_stride + r] = v;
        r++;
    }
}

/* kv.cl's oc_kv_keep with the rows kept[kept_off + g * kept_stride + r] + shift, r <
 * counts[n_idx + g], for every kv head g of a layer at once: work-group (2 g + v) n_slice + s moves
 * slice s of the row's words (row / n_slice of them, from k_off + g * row + s row / n_slice) of
 * kv head g's K (v 0; none when k is NULL) or V (v 1) rows. Each work-group takes the same steps
 * as oc_kv_keep, so the same in-place safety (kept ascending, each source at or after its
 * destination, every source of a step read before any of its rows is written), and the groups
 * touch disjoint words. 64 words per item a step, each item on one word of a slice (its row and
 * column computed once): one work-group per kv head's K or V, dividing each item's index by the
 * row length per word, took about 270 us a layer on an H200 for 2 MiB of rows. */
#define KVS_KEEP_PER 64
__kernel __attribute__((reqd_work_group_size(KVS_TILE, 1, 1)))
void oc_kvs_keep(__global uint *k, int k_off, int k_shift, __global uint *v, int v_off, int v_shift, int stride, int row,
                 int n_slice, const __global int *kept, int kept_off, int kept_stride, const __global int *counts,
                 int n_idx) {
    const int lid = get_local_id(0), wg = get_group_id(0) / n_slice, sl = get_group_id(0) % n_slice, g = wg / 2,
              is_v = wg % 2, sw = row / n_slice;
    __global uint *buf = is_v ? v : k;
    if (!buf) return;   /* the same for the whole work-group */
    const int off = (is_v ? v_off : k_off) + g * row + sl * sw, shift = is_v ? v_shift : k_shift;
    const __global int *kg = kept + kept_off + (size_t)g * kept_stride;
    const int n = counts[n_idx + g];
    if (sw <= KVS_TILE) {   /* item (rsub, col): rows rsub, rsub + rs, ... of a step, word col */
        const int rs = KVS_TILE / sw, rsub = lid / sw, col = lid - rsub * sw, step = rs * KVS_KEEP_PER;
        const int on = rsub < rs;
        for (int r0 = 0; r0 < n; r0 += step) {
            uint x[KVS_KEEP_PER];
#pragma unroll
            for (int e0 = 0; e0 < KVS_KEEP_PER; e0++) {
                const int r = r0 + rsub + e0 * rs;
                if (on && r < n) x[e0] = buf[off + (size_t)(kg[r] + shift) * stride + col];
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
#pragma unroll
            for (int e0 = 0; e0 < KVS_KEEP_PER; e0++) {
                const int r = r0 + rsub + e0 * rs;
                if (on && r < n) buf[off + (size_t)r * stride + col] = x[e0];
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
        }
        return;
    }
    const int step = max(1, KVS_TILE * KVS_KEEP_PER / sw);   /* slices wider than the work-group */
    for (int r0 = 0; r0 < n; r0 += step) {
        const int total = min(step, n - r0) * sw;
        uint x[KVS_KEEP_PER];
#pragma unroll
        for (int e0 = 0; e0 < KVS_KEEP_PER; e0++) {
            int e = lid + e0 * KVS_TILE;
            if (e < total) x[e0] = buf[off + (size_t)(kg[r0 + e / sw] + shift) * stride + e % sw];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
#pragma unroll
        for (int e0 = 0; e0 < KVS_KEEP_PER; e0++) {
            int e = lid + e0 * KVS_TILE;
            if (e < total) buf[off + (size_t)(r0 + e / sw) * stride + e % sw] = x[e0];
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}
