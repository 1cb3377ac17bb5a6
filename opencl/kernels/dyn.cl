/* dyn.cl: MMInference's online estimate on the device (mminference.txt Sec. 4.1, App. C.3, Alg. 1:
 * A^ = softmax(Q[-last_q:] K^T + causal mask), last_q = 64), the same sums as the CPU's
 * (src/attention/dyn_build.c): per key the column score vs[j] = sum_r A^[r, j] and per offset
 * o = p_r - j the diagonal score ss[o + n_kv - 1] = sum_r A^[r, p_r - j]. The host then chooses
 * the index from them with the CPU's code (dyn_index.c oc_dyn_choose), so both executors make
 * the same choice from the same scores. Work-group: 64 items, item c = estimate row c (query
 * n_q - 64 + c); dimension 1 = the dynamic head (heads[]).
 *  pass 0: tile w of 64 keys: each row's max and sum (base 2) over the tile -> part[head][w][c];
 *  pass 1: tile w owns the columns [64 w, 64 w + 64) and the diagonals whose row-0 key is
 *          d in [64 w - 63, 64 w + 1): it recomputes the probabilities of the 127 keys
 *          [64 w - 63, 64 w + 64) (row c of diagonal d reads key d + c) with the merged max and
 *          sum, 32 keys at a time, and sums them down the columns and along the diagonals. Each
 *          score is written by one work-group, summed in a fixed order: no atomics, and the result
 *          does not depend on scheduling. The host zeroes the scores first (keys no row sees).
 * Local memory: 32 x d floats of K and 64 x 33 of probabilities (25 KB at d 128). */
#define EST_ROWS 64
#define SUB 32
#define PSTRIDE (SUB + 1)
#define EST_DMAX 128

/* keys [j0, j0 + SUB) of kv head g into ks (rows of d floats); keys outside [0, key_end): 0 */
inline void oc_est_load(__local float *ks, const __global uchar *k, int f16, int k_off, int k_st, int k_sh, int g,
                        int d, int j0, int key_end, int lid) {
    for (int e = lid; e < SUB * d; e += EST_ROWS) {
        int t = e / d, col = e - t * d, j = j0 + t;
        float val = 0.0f;
        if (j >= 0 && j < key_end) {
            size_t at = (size_t)k_off + (size_t)g * k_sh + (size_t)j * k_st + col;
            val = f16 ? vload_half(at, (const __global half *)k) : ((const __global float *)k)[at];
        }
        ks[t * d + col] = val;
    }
}

inline float oc_est_dot(const float *qv, const __local float *kr, int d) {
    float s = 0.0f;
    for (int e = 0; e < d; e++) s = fma(qv[e], kr[e], s);
    return s;
}

__kernel __attribute__((reqd_work_group_size(EST_ROWS, 1, 1)))
void oc_dyn_estimate(int pass, const __global float *q, int q_off, int q_st, int q_sh,
                     const __global uchar *k, int k_off, int k_st, int k_sh, int kv_f16,
                     const __global int *heads, int n_rep, int d, int n_q, int n_kv, int q_offset, int causal,
                     float qscale, __global float2 *part, int n_w0, __global float *scores,
                     __local float *ks, __local float *pl) {
    const int c = get_local_id(0), w = get_group_id(0), hh = get_group_id(1);
    const int h = heads[hh], g = h / n_rep;
    const int p0 = q_offset + n_q - EST_ROWS, p = p0 + c;
    const int key_end = causal ? min(n_kv, p0 + EST_ROWS) : n_kv;
    float qv[EST_DMAX];
    const __global float *qr = q + q_off + (size_t)(n_q - EST_ROWS + c) * q_st + (size_t)h * q_sh;
    for (int e = 0; e < d; e++) qv[e] = qr[e] * qscale;
    if (pass == 0) {
        float m = -INFINITY, l = 0.0f;
        for (int j0 = w * EST_ROWS; j0 < w * EST_ROWS + EST_ROWS; j0 += SUB) {
            barrier(CLK_LOCAL_MEM_FENCE);
            oc_est_load(ks, k, kv_f16, k_off, k_st, k_sh, g, d, j0, key_end, c);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int t = 0; t < SUB; t++) {
                int j = j0 + t;
                if (j >= key_end || (causal && j > p)) continue;
                float s = oc_est_dot(qv, ks + t * d, d);
                if (s > m) {
                    l = l * exp2(m - s) + 1.0f;
                    m = s;
                } else {
                    l += exp2(s - m);
                }
            }
        }
        part[((size_t)hh * n_w0 + w) * EST_ROWS + c] = (float2)(m, l);
        return;
    }
    /* pass 1: the row's max and sum over every tile, in tile order */
    float mx = -INFINITY, sum = 0.0f;
    for (int t = 0; t < n_w0; t++) {
        float2 ml = part[((size_t)hh * n_w0 + t) * EST_ROWS + c];
        if (ml.y > 0.0f && ml.x > mx) mx = ml.x;
    }
    for (int t = 0; t < n_w0; t++) {
        float2 ml = part[((size_t)hh * n_w0 + t) * EST_ROWS + c];
        if (ml.y > 0.0f) sum += ml.y * exp2(ml.x - mx);
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int base = w * EST_ROWS - (EST_ROWS - 1);   /* the key of extended index e = 0 */
    __global float *vs = scores + (size_t)hh * 3 * n_kv, *ss = vs + n_kv;
    float diag = 0.0f;   /* item c sums diagonal d = base + c */
    for (int e0 = 0; e0 < 2 * EST_ROWS; e0 += SUB) {
        barrier(CLK_LOCAL_MEM_FENCE);
        oc_est_load(ks, k, kv_f16, k_off, k_st, k_sh, g, d, base + e0, key_end, c);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = 0; t < SUB; t++) {
            int j = base + e0 + t;
            float a = 0.0f;
            if (j >= 0 && j < key_end && !(causal && j > p)) a = exp2(oc_est_dot(qv, ks + t * d, d) - mx) * inv;
            pl[c * PSTRIDE + t] = a;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* columns: extended index e in [63, 127) is key 64 w + e - 63 */
        int e = e0 + c;
        if (c < SUB && e >= EST_ROWS - 1 && e < 2 * EST_ROWS - 1 && base + e < n_kv) {
            float col = 0.0f;
            for (int r = 0; r < EST_ROWS; r++) col += pl[r * PSTRIDE + c];
            vs[base + e] = col;
        }
        /* diagonal d = base + c: row r reads extended index c + r */
        int r0 = max(0, e0 - c), r1 = min(EST_ROWS, e0 + SUB - c);
        for (int r = r0; r < r1; r++) diag += pl[r * PSTRIDE + c + r - e0];
    }
    int idx = p0 - (base + c) + n_kv - 1;   /* offset o = p0 - d */
    if (idx >= 0 && idx < 2 * n_kv - 1) ss[idx] = diag;
}
