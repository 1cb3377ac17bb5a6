/* elementwise.cl: the per-element operations of a transformer block (src/kernels/nn.h): activations
 * (SiLU, GELU with erf, QuickGELU), the gated unit act(gate) * up (SwiGLU with SiLU), residual
 * adds and the bias add after a CLBlast product. Offsets and counts are in floats. */
/* oc_act_eval and the OC_ACT_* ids: common.cl (matmul.cl's fused gate/up product takes them too) */
__kernel void oc_act(__global float *x, int off, int n, int act) {
    int i = get_global_id(0);
    if (i < n) x[off + i] = oc_act_eval(x[off + i], act);
}

/* out[i] = act(gate[i]) * up[i]; out may alias gate or up */
__kernel void oc_glu(__global float *out, int out_off, const __global float *gate, int gate_off,
                     const __global float *up, int up_off, int n, int act) {
    int i = get_global_id(0);
    if (i < n) out[out_off + i] = oc_act_eval(gate[gate_off + i], act) * up[up_off + i];
}

/* y[i] += x[i] */
__kernel void oc_add(__global float *y, int y_off, const __global float *x, int x_off, int n) {
    int i = get_global_id(0);
    if (i < n) y[y_off + i] += x[x_off + i];
}

/* y[r][c] += b[c] for r < n_rows, c < n */
__kernel void oc_add_bias(__global float *y, int y_off, int y_stride, const __global float *b, int n, int n_rows) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c < n && r < n_rows) y[y_off + (size_t)r * y_stride + c] += b[c];
}

/* dst row r = src row idx[r / unit] * unit + r % unit, rows of dim floats (Qwen2.5-VL's window
 * order and its inverse, as a gather). Item (c, r). A source row outside [0, n_src_rows) leaves
 * the destination row as it was. */
__kernel void oc_gather_rows(__global float *dst, int dst_off, const __global float *src, int src_off, int n_src_rows,
                             const __global int *idx, int idx_off, int n_rows, int dim, int unit) {
    int c = get_global_id(0), r = get_global_id(1);
    if (c >= dim || r >= n_rows) return;
    int sr = idx[idx_off + r / unit] * unit + r % unit;
    if (sr < 0 || sr >= n_src_rows) return;
    dst[dst_off + (size_t)r * dim + c] = src[src_off + (size_t)sr * dim + c];
}
