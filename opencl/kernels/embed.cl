/* embed.cl: token embedding lookup: out row t = row ids[t] of the embedding table, dequantized
 * (F32, F16, Q8_0, Q4_0 rows through common.cl's loader). A row whose id is negative (an image
 * embedding the caller writes itself) or not below n_rows is left untouched. Item (c, t) writes
 * elements 8c .. 8c+7 of row t. */
__kernel void oc_embed(__global float *out, int out_off, int out_stride, const __global uchar *table, int dtype,
                       int row_bytes, int n_rows, int n_in, const __global int *ids, int ids_off, int n_tokens) {
    int c = get_global_id(0), t = get_global_id(1), k0 = 8 * c;
    if (k0 >= n_in || t >= n_tokens) return;
    int id = ids[ids_off + t];
    if (id < 0 || id >= n_rows) return;
    float8 v = oc_load8(dtype, table + (size_t)id * row_bytes, k0, n_in);
    __global float *o = out + out_off + (size_t)t * out_stride + k0;
    if (k0 + 8 <= n_in) {
        vstore8(v, 0, o);
    } else {
        float a[8];
        vstore8(v, 0, a);
        for (int e = 0; k0 + e < n_in; e++) o[e] = a[e];
    }
}
