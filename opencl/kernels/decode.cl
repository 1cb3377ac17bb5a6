/* decode.cl: attention for one query row over an f16 KV cache whose keys it all keeps (a decode step of
 * a dense head: causal with the query last, or bidirectional), the case the tiled kernel (attn.cl)
 * serves worst: its tiles are shaped for many rows, so one row over a few hundred keys left most
 * of a work-group idle and took ~50 us per layer on an H200. Here a work-group of DEC_WG items
 * takes (query head, key chunk) (flash-decoding: the keys split over work-groups, their partial
 * softmaxes merged after): the keys of the chunk go DEC_WG at a time, one key per item for the
 * score (its K row read 16 bytes per load when the rows are 8-half aligned), then each item
 * accumulates 8 output columns over a quarter of the block's keys (one 16-byte V load per key).
 * Online softmax in base 2 (scale * log2 e is folded into q), f32 throughout. Every item computes
 * the block's max and sum itself from local memory in the same order, so no reduction tree and
 * the same values on every item. A launch with one chunk writes the output; with several each
 * writes its (max, sum, unnormalised output) where attn.cl's oc_attn_merge reads them. */
#define DEC_WG 64
#define DEC_MAX_D 128   /* OC_CL_ATTN_MAX_HEAD_DIM */

/* Eight halves held as the bits of a uint4, in f32 (exact: vload_half8 from a private copy). */
inline float8 oc_dec_half8(uint4 u) {
    uint p[4] = { u.x, u.y, u.z, u.w };
    return vload_half8(0, (const __private half *)p);
}

/* q: f32 rows, head h at q_off + h * q_sh; k, v: f16 caches, key j of kv head g at
 * (k_off + j * k_st + g * k_sh) halves (v likewise); out: head h at o_off + h * o_sh. k_al, v_al:
 * offsets and strides are multiples of 8 halves (16-byte loads of K rows and of V's 8-column
 * groups). Work-group (h, chunk) of DEC_WG items. Scores: item = key. Output: item (kg, dc) =
 * (lid / DEC_DC, lid % DEC_DC) takes columns 8 dc .. 8 dc + 7 of the block's keys kg, kg + DEC_KG,
 * ... (one 16-byte V load per key instead of a 2-byte one per column and key); the DEC_KG partial
 * sums of a column meet once, at the end, in a fixed order. */
#define DEC_DC (DEC_MAX_D / 8)        /* 16 groups of 8 columns */
#define DEC_KG (DEC_WG / DEC_DC)      /* 4 key groups */
__kernel __attribute__((reqd_work_group_size(DEC_WG, 1, 1)))
void oc_attn_decode(const __global float *q, int q_off, int q_sh, const __global uchar *k, int k_off, int k_st,
                    int k_sh, const __global uchar *v, int v_off, int v_st, int v_sh, __global float *out, int o_off,
                    int o_sh, __global float *partials, int n_rep, int d, int n_kv, int chunk_keys, int k_al, int v_al,
                    float qscale) {
    __local float qs[DEC_MAX_D];
    __local float ss[DEC_WG], ps[DEC_WG];
    __local float red[DEC_KG * DEC_MAX_D];
    const int lid = get_local_id(0), h = get_group_id(0), chunk = get_group_id(1), n_head = get_num_groups(0);
    const int g = h / n_rep, kg = lid / DEC_DC, c0 = 8 * (lid % DEC_DC);
    for (int i = lid; i < d; i += DEC_WG) qs[i] = q[q_off + (size_t)h * q_sh + i] * qscale;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int k0 = chunk * chunk_keys, k1 = min(n_kv, k0 + chunk_keys);
    const __global half *kh = (const __global half *)k, *vh = (const __global half *)v;
    float m = -INFINITY, l = 0.0f;
    float8 acc = (float8)(0.0f);
    for (int b0 = k0; b0 < k1; b0 += DEC_WG) {
        const int nb = min(DEC_WG, k1 - b0);
        float s = -INFINITY;
        if (lid < nb) {
            size_t at = (size_t)k_off + (size_t)(b0 + lid) * k_st + (size_t)g * k_sh;
            float a0 = 0.0f, a1 = 0.0f;
            if (k_al) {
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
        ss[lid] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        float bm = -INFINITY;
        for (int t = 0; t < nb; t++) bm = fmax(bm, ss[t]);
        const float mn = fmax(m, bm);
        /* mn is -inf only when every score so far is -inf (an infinite q or K): those keys weigh 0 */
        const float corr = mn == -INFINITY ? 1.0f : exp2(m - mn);
        ps[lid] = lid < nb && mn != -INFINITY ? exp2(s - mn) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        float bl = 0.0f;
        for (int t = 0; t < nb; t++) bl += ps[t];   /* every item, in the same order */
        l = l * corr + bl;
        acc *= corr;
        if (c0 < d) {
            const size_t vg = (size_t)v_off + (size_t)g * v_sh + c0;
            if (v_al && c0 + 8 <= d) {   /* two keys per step: two loads in flight */
                const __global uint4 *v4 = (const __global uint4 *)(v + 2 * (vg + (size_t)b0 * v_st));
                const size_t st4 = (size_t)v_st / 8;
                int t = kg;
                for (; t + DEC_KG < nb; t += 2 * DEC_KG) {
                    uint4 u0 = v4[t * st4], u1 = v4[(t + DEC_KG) * st4];
                    acc = fma((float8)(ps[t]), oc_dec_half8(u0), acc);
                    acc = fma((float8)(ps[t + DEC_KG]), oc_dec_half8(u1), acc);
                }
                if (t < nb) acc = fma((float8)(ps[t]), oc_dec_half8(v4[t * st4]), acc);
            } else {
                for (int t = kg; t < nb; t += DEC_KG) {
                    size_t vr = vg + (size_t)(b0 + t) * v_st;
                    float w[8];
                    for (int e = 0; e < 8; e++) w[e] = c0 + e < d ? vload_half(vr + e, vh) : 0.0f;
                    acc = fma((float8)(ps[t]), (float8)(w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]), acc);
                }
            }
        }
        m = mn;
        barrier(CLK_LOCAL_MEM_FENCE);   /* ss and ps are rewritten by the next block */
    }
    vstore8(acc, 0, red + kg * DEC_MAX_D + c0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int split = chunk_keys < n_kv;
    __global float *slot = partials + ((size_t)chunk * n_head + h) * (size_t)(d + 2);
    if (split && lid == 0) {   /* this chunk's (max, sum, unnormalised output), oc_attn_merge's slot */
        slot[0] = m;
        slot[1] = l;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int col = lid; col < d; col += DEC_WG) {
        float o = 0.0f;
        for (int j = 0; j < DEC_KG; j++) o += red[j * DEC_MAX_D + col];
        if (split) slot[2 + col] = o;
        else out[o_off + (size_t)h * o_sh + col] = o * inv;
    }
}
