/* decode.cl: attention for one query row over an f16 KV cache whose keys it all keeps (a decode step of
 * a dense head: causal with the query last, or bidirectional), the case the tiled kernel (attn.cl)
 * serves worst: its tiles are shaped for many rows, so one row over a few hundred keys left most
 * of a work-group idle and took ~50 us per layer on an H200. Here a work-group of DEC_WG items
 * takes (query head, key chunk) (flash-decoding, Dao et al.'s split-K decode): the keys of the
 * chunk go DEC_WG at a time, one key per item for the score (its K row read 16 bytes per load when
 * the rows are 8-half aligned), then every item walks the block's probabilities from local memory
 * for its output columns (V rows read across the items, coalesced). Online softmax in base 2
 * (scale * log2 e is folded into q), f32 throughout. Every item computes the block's max and sum
 * itself from local memory in the same order, so no reduction tree and the same result on every
 * item. A launch with one chunk writes the output; with several each writes its (max, sum,
 * unnormalised output) where attn.cl's oc_attn_merge reads them. */
#define DEC_WG 64
#define DEC_MAX_D 128   /* OC_CL_ATTN_MAX_HEAD_DIM */
#define DEC_DPI (DEC_MAX_D / DEC_WG)

/* Eight halves held as the bits of a uint4, in f32 (exact: vload_half8 from a private copy). */
inline float8 oc_dec_half8(uint4 u) {
    uint p[4] = { u.x, u.y, u.z, u.w };
    return vload_half8(0, (const __private half *)p);
}

/* q: f32 rows, head h at q_off + h * q_sh; k, v: f16 caches, key j of kv head g at
 * (k_off + j * k_st + g * k_sh) halves; out: head h at o_off + h * o_sh. aligned: offsets, strides
 * and d are multiples of 8 (uint4 loads of K). Work-group (h, chunk) of DEC_WG items. */
__kernel __attribute__((reqd_work_group_size(DEC_WG, 1, 1)))
void oc_attn_decode(const __global float *q, int q_off, int q_sh, const __global uchar *k, int k_off, int k_st,
                    int k_sh, const __global uchar *v, int v_off, int v_st, int v_sh, __global float *out, int o_off,
                    int o_sh, __global float *partials, int n_rep, int d, int n_kv, int chunk_keys, int aligned,
                    float qscale) {
    __local float qs[DEC_MAX_D];
    __local float ps[DEC_WG];
    const int lid = get_local_id(0), h = get_group_id(0), chunk = get_group_id(1), n_head = get_num_groups(0);
    const int g = h / n_rep;
    for (int i = lid; i < d; i += DEC_WG) qs[i] = q[q_off + (size_t)h * q_sh + i] * qscale;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int k0 = chunk * chunk_keys, k1 = min(n_kv, k0 + chunk_keys);
    const __global half *kh = (const __global half *)k, *vh = (const __global half *)v;
    float m = -INFINITY, l = 0.0f, acc[DEC_DPI];
    for (int c = 0; c < DEC_DPI; c++) acc[c] = 0.0f;
    for (int b0 = k0; b0 < k1; b0 += DEC_WG) {
        const int nb = min(DEC_WG, k1 - b0), j = b0 + lid;
        float s = -INFINITY;
        if (lid < nb) {
            size_t at = (size_t)k_off + (size_t)j * k_st + (size_t)g * k_sh;
            float a0 = 0.0f, a1 = 0.0f;
            if (aligned) {
                const __global uint4 *k4 = (const __global uint4 *)(k + 2 * at);
                int e = 0;
                for (; e + 16 <= d; e += 16) {
                    float8 w0 = oc_dec_half8(k4[e >> 3]), w1 = oc_dec_half8(k4[(e >> 3) + 1]);
                    a0 += dot(w0.lo, vload4(0, qs + e)) + dot(w0.hi, vload4(0, qs + e + 4));
                    a1 += dot(w1.lo, vload4(0, qs + e + 8)) + dot(w1.hi, vload4(0, qs + e + 12));
                }
                if (e < d) {
                    float8 w0 = oc_dec_half8(k4[e >> 3]);
                    a0 += dot(w0.lo, vload4(0, qs + e)) + dot(w0.hi, vload4(0, qs + e + 4));
                }
            } else {
                for (int e = 0; e < d; e++) a0 = fma(vload_half(at + e, kh), qs[e], a0);
            }
            s = a0 + a1;
        }
        ps[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        float bm = -INFINITY;
        for (int t = 0; t < nb; t++) bm = fmax(bm, ps[t]);
        const float mn = fmax(m, bm);
        /* mn is -inf only when every score so far is -inf (an infinite q or K): those keys weigh 0 */
        const float corr = mn == -INFINITY ? 1.0f : exp2(m - mn);
        l *= corr;
        for (int c = 0; c < DEC_DPI; c++) acc[c] *= corr;
        for (int t = 0; t < nb; t++) {
            float p = mn == -INFINITY ? 0.0f : exp2(ps[t] - mn);
            l += p;
            size_t vr = (size_t)v_off + (size_t)(b0 + t) * v_st + (size_t)g * v_sh;
            for (int c = 0; c < DEC_DPI; c++) {
                int col = lid + DEC_WG * c;
                if (col < d) acc[c] = fma(p, vload_half(vr + col, vh), acc[c]);
            }
        }
        m = mn;
        barrier(CLK_LOCAL_MEM_FENCE);   /* ps is rewritten by the next block */
    }
    if (chunk_keys < n_kv) {   /* split: this chunk's (max, sum, unnormalised output), oc_attn_merge's slot */
        __global float *slot = partials + ((size_t)chunk * n_head + h) * (size_t)(d + 2);
        if (lid == 0) {
            slot[0] = m;
            slot[1] = l;
        }
        for (int c = 0; c < DEC_DPI; c++) {
            int col = lid + DEC_WG * c;
            if (col < d) slot[2 + col] = acc[c];
        }
    } else {
        float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < DEC_DPI; c++) {
            int col = lid + DEC_WG * c;
            if (col < d) out[o_off + (size_t)h * o_sh + col] = acc[c] * inv;
        }
    }
}
