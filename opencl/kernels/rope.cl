/* rope.cl: rotary embedding, NEOX pairing (HF rotate_half, src/kernels/nn.h oc_rope_neox) with per-token
 * cos/sin tables the host builds: that one kernel serves M-RoPE in the decoder (tables from the
 * t/h/w position sections) and the vision encoder's 2-D rotary (tables from row/column).
 * Item (k, head, token) rotates the pair (x[k], x[k + n_pairs]) of one head of one token. */
__kernel void oc_rope_neox(__global float *x, int x_off, int stride_token, int stride_head, int n_heads,
                           int n_pairs, int n_tokens, const __global float *cos_t, int cos_off,
                           const __global float *sin_t, int sin_off, int table_stride) {
    int k = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    if (k >= n_pairs || h >= n_heads || t >= n_tokens) return;
    __global float *p = x + x_off + (size_t)t * stride_token + (size_t)h * stride_head;
    float c = cos_t[cos_off + (size_t)t * table_stride + k], s = sin_t[sin_off + (size_t)t * table_stride + k];
    float a = p[k], b = p[k + n_pairs];
    p[k] = a * c - b * s;
    p[k + n_pairs] = b * c + a * s;
}

/* A decode step's rotation and cache store in one launch (the three launches it replaces cost
 * ~4 us each whatever their size): q (n_head heads) and k (n_head_kv heads) turned as
 * oc_rope_neox turns them, then k and v stored into the f16 caches as kv.cl's oc_kv_store does
 * (round to nearest even). Item (pair, unit, token): unit < n_head a q head, then the k heads,
 * then the v heads; item 0 of a k or v head also stores its elements past the pairs (an odd
 * head_dim). Rows: q at q_off + t q_st, k and v at k_off / v_off + t kv_st, the caches at
 * kc_off / vc_off + t kv_st in halves; head h at h head_dim. */
__kernel void oc_rope_store(__global float *q, int q_off, int q_st, int n_head, __global float *k, int k_off,
                            const __global float *v, int v_off, int kv_st, int n_head_kv, int head_dim, int n_pairs,
                            int n_tokens, const __global float *cos_t, int cos_off, const __global float *sin_t,
                            int sin_off, int table_stride, __global uchar *kc, int kc_off, __global uchar *vc,
                            int vc_off) {
    int p = get_global_id(0), u = get_global_id(1), t = get_global_id(2);
    if (p >= n_pairs || u >= n_head + 2 * n_head_kv || t >= n_tokens) return;
    int kvd = n_head_kv * head_dim;
    if (u >= n_head + n_head_kv) {   /* a v head: stored as it is */
        int g = u - n_head - n_head_kv;
        const __global float *src = v + v_off + (size_t)t * kv_st + (size_t)g * head_dim;
        size_t at = (size_t)vc_off + (size_t)t * kvd + (size_t)g * head_dim;
        vstore_half_rte(src[p], at + p, (__global half *)vc);
        vstore_half_rte(src[p + n_pairs], at + p + n_pairs, (__global half *)vc);
        for (int e = 2 * n_pairs; p == 0 && e < head_dim; e++) vstore_half_rte(src[e], at + e, (__global half *)vc);
        return;
    }
    int is_k = u >= n_head, g = is_k ? u - n_head : u;
    __global float *x = is_k ? k + k_off + (size_t)t * kv_st + (size_t)g * head_dim
                             : q + q_off + (size_t)t * q_st + (size_t)g * head_dim;
    float c = cos_t[cos_off + (size_t)t * table_stride + p], s = sin_t[sin_off + (size_t)t * table_stride + p];
    float a = x[p], b = x[p + n_pairs];
    float ra = a * c - b * s, rb = b * c + a * s;
    x[p] = ra;
    x[p + n_pairs] = rb;
    if (!is_k) return;
    size_t at = (size_t)kc_off + (size_t)t * kvd + (size_t)g * head_dim;
    vstore_half_rte(ra, at + p, (__global half *)kc);
    vstore_half_rte(rb, at + p + n_pairs, (__global half *)kc);
    for (int e = 2 * n_pairs; p == 0 && e < head_dim; e++) vstore_half_rte(x[e], at + e, (__global half *)kc);
}
