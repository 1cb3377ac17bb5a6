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
