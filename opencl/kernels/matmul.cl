/* matmul.cl: y[t][o] = sum_k x[t][k] * W[o][k] (+ bias[o]) for GGUF weights (F32, F16, Q8_0, Q4_0
 * rows of row_bytes bytes, decoded by common.cl's oc_load8) against f32 activations, the product
 * src/kernels/matmul.h defines. Two kernels, one loader:
 *  - oc_gemv, for a few tokens (decode): a work-group of (T, R) items computes R outputs; the T
 *    items of an output stride along its row in chunks of 8 (adjacent items read adjacent bytes)
 *    and meet in a local-memory tree; tokens go 4 at a time, and one token (decode) has its own
 *    branch (oc_gemv_part1: 16-byte loads of F16 rows and of x, four in flight; Q8_0 by blocks).
 *  - oc_gemm, for batches: 64 x 64 tiles of (tokens x outputs) by 16 x 16 items of 4 x 4 each;
 *    each step loads 32 elements of k of both operands (one quantized block) into local memory,
 *    decoded to f32, transposed so the inner loop reads consecutive floats. */
#define GEMV_TOK 4
#define TS 64
#define KS 32

/* Eight halves held as the bits of a uint4, in f32: vload_half8 from a private copy is exact by definition
 * (IEEE half to float, subnormals, inf and NaN included), and it lets a row be read with one 16-byte
 * load per item instead of the eight 2-byte loads some compilers (NVIDIA's) emit for vload_half8 on
 * global memory. Little-endian: the same halves, in the same order, as the bytes in memory. */
inline float8 oc_half8_of_bits(uint4 u) {
    uint p[4] = { u.x, u.y, u.z, u.w };
    return vload_half8(0, (const __private half *)p);
}

/* Sums the nt partials of n_acc accumulators, rr[j * nt + t], into rr[j * nt]: a radix-4 tree, so 32
 * items per row meet in 3 barriers instead of 5. Every item of the work-group must call it. */
inline void oc_gemv_reduce(__local float *rr, int t, int nt, int n_acc) {
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = nt; s > 1;) {
        int q = (s + 3) / 4;
        if (t < q)
            for (int j = 0; j < n_acc; j++) {
                float v = rr[j * nt + t];
                for (int i = 1; i < 4; i++)
                    if (t + i * q < s) v += rr[j * nt + t + i * q];
                rr[j * nt + t] = v;
            }
        s = q;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Eight f16 weights (the bits u) dotted with x0 (elements 0-3) and x1 (4-7). */
inline float oc_hdot8(uint4 u, float4 x0, float4 x1) {
    float8 w = oc_half8_of_bits(u);
    return dot(w.lo, x0) + dot(w.hi, x1);
}

/* x's four floats at x4[i], times the norm weight's when norm (then their squares go into *ss). */
inline float4 oc_gemv_x4(const __global float4 *x4, const __global float4 *n4, int norm, int i, float *ss) {
    float4 v = x4[i];
    if (norm) {
        *ss += dot(v, v);
        v *= n4[i];
    }
    return v;
}

/* A Q8_0 block b's products with its 32 elements of x (x4, n4: the block's first float4 of x and
 * of the norm weight, 16-byte aligned), for the row at r0 and, when two, the row at r1 too (*s1).
 * The block's 34 bytes start 2 bytes into a 4-byte word when b is odd (row_bytes is a multiple of
 * 4), so nine aligned word loads cover it, never past the row's padded end: the scale is the low or
 * the high half of word 0 and the quants are words 1-8 (odd) or the words straddling 0-8 (even).
 * On the H200, with the weights read from HBM: 480-750 GB/s with byte loads (oc_load8), 530-890 with these. */
inline float oc_q8dot_block(const __global uchar *r0, const __global uchar *r1, int two, int b,
                            const __global float4 *x4, const __global float4 *n4, int norm, float *ss, float *s1) {
    int odd = b & 1;
    const __global uint *p0 = (const __global uint *)(r0 + 34 * b - 2 * odd);
    const __global uint *p1 = (const __global uint *)(r1 + 34 * b - 2 * odd);
    uint w0[9], w1[9];
    for (int j = 0; j < 9; j++) {
        w0[j] = p0[j];
        w1[j] = two ? p1[j] : 0u;
    }
    float a0 = 0.0f, a1 = 0.0f;
    for (int j = 0; j < 8; j++) {
        float4 xv = oc_gemv_x4(x4, n4, norm, j, ss);
        uint q0 = odd ? w0[j + 1] : (w0[j] >> 16) | (w0[j + 1] << 16);
        a0 += dot(convert_float4(as_char4(q0)), xv);
        if (two) {
            uint q1 = odd ? w1[j + 1] : (w1[j] >> 16) | (w1[j + 1] << 16);
            a1 += dot(convert_float4(as_char4(q1)), xv);
        }
    }
    ushort d0 = (ushort)(odd ? w0[0] >> 16 : w0[0] & 0xffffu), d1 = (ushort)(odd ? w1[0] >> 16 : w1[0] & 0xffffu);
    if (two) *s1 += a1 * vload_half(0, (const __private half *)&d1);
    return a0 * vload_half(0, (const __private half *)&d0);
}

/* One token's products with one row (r0) or two rows of the same type and width (two: r1 too, the
 * gate's and the up projection's: both read each x chunk once): this item's share of each dot with
 * x, and with norm of x * nw (the RMSNorm's weight; the caller scales the sums by the norm's
 * 1 / rms, which is why .z returns this item's share of sum(x * x)). .x, .y: the rows' shares. The
 * share's order is fixed by (t, nt), so a row's sum does not depend on the launch's other rows,
 * nor on two. Three loops, each with every load of a step issued before the first is used:
 *  - F16 rows of whole 16-byte chunks and a 16-byte aligned x: chunks t, t + nt, ... of 8, four
 *    steps of nt at a time (the last ones predicated), w and x both read as 16-byte vectors; x
 *    through float4 pointers, not vload8: NVIDIA's compiler emits eight 4-byte loads for a vload8
 *    of floats (only 4-byte alignment is promised), and the F16 GEMV read 1.5 TB/s with them
 *    against 2.7 TB/s with these on the H200 (55 MB of gate and up rows read from HBM);
 *  - Q8_0 rows (row_bytes a multiple of 4) with an aligned x: blocks t, t + nt, ..., two steps at
 *    a time (oc_q8dot_block);
 *  - otherwise chunks of 8 through oc_load8, two steps at a time (F32, Q4_0, odd widths,
 *    unaligned x or norm weight). */
inline float4 oc_gemv_part(const __global uchar *r0, const __global uchar *r1, int two, int dtype, int row_bytes,
                           int n_in, const __global float *xr, const __global float *nw, int norm, int t, int nt) {
    int n8 = (n_in + 7) / 8, c = t;
    int al = ((size_t)xr & 15) == 0 && (!norm || ((size_t)nw & 15) == 0);
    float a0 = 0.0f, a1 = 0.0f, b0 = 0.0f, b1 = 0.0f, ss = 0.0f;
    if (dtype == OC_DT_F16 && (row_bytes & 15) == 0 && (n_in & 7) == 0 && al) {
        const __global uint4 *u4 = (const __global uint4 *)r0, *v4 = (const __global uint4 *)r1;
        const __global float4 *x4 = (const __global float4 *)xr, *n4 = (const __global float4 *)nw;
        for (; c < n8; c += 4 * nt) {
            uint4 u[4], v[4];
            for (int k = 0; k < 4; k++) {
                int ck = c + k * nt, in = ck < n8;
                u[k] = in ? u4[ck] : (uint4)0u;
                v[k] = two && in ? v4[ck] : (uint4)0u;
            }
            for (int k = 0; k < 4; k++) {
                int ck = c + k * nt;
                if (ck >= n8) break;
                float4 x0 = oc_gemv_x4(x4, n4, norm, 2 * ck, &ss), x1 = oc_gemv_x4(x4, n4, norm, 2 * ck + 1, &ss);
                if (k & 1) a1 += oc_hdot8(u[k], x0, x1);
                else a0 += oc_hdot8(u[k], x0, x1);
                if (two && (k & 1)) b1 += oc_hdot8(v[k], x0, x1);
                else if (two) b0 += oc_hdot8(v[k], x0, x1);
            }
        }
    } else if (dtype == OC_DT_Q8_0 && (row_bytes & 3) == 0 && al) {
        const __global float4 *x4 = (const __global float4 *)xr, *n4 = (const __global float4 *)nw;
        int nb = n_in / 32, b = t;
        for (; b < nb; b += 2 * nt) {
            a0 += oc_q8dot_block(r0, r1, two, b, x4 + 8 * b, n4 + 8 * b, norm, &ss, &b0);
            if (b + nt < nb)
                a1 += oc_q8dot_block(r0, r1, two, b + nt, x4 + 8 * (b + nt), n4 + 8 * (b + nt), norm, &ss, &b1);
        }
    } else {
        for (; c < n8; c += 2 * nt) {
            for (int k = 0; k < 2; k++) {
                int ck = c + k * nt;
                if (ck >= n8) break;
                float8 xv = oc_load8_f32(xr, 8 * ck, n_in);
                if (norm) {
                    ss += dot(xv.lo, xv.lo) + dot(xv.hi, xv.hi);
                    xv *= oc_load8_f32(nw, 8 * ck, n_in);
                }
                float8 w0 = oc_load8(dtype, r0, 8 * ck, n_in);
                float d0 = dot(w0.lo, xv.lo) + dot(w0.hi, xv.hi);
                if (k) a1 += d0;
                else a0 += d0;
                if (two) {
                    float8 w1 = oc_load8(dtype, r1, 8 * ck, n_in);
                    float d1 = dot(w1.lo, xv.lo) + dot(w1.hi, xv.hi);
                    if (k) b1 += d1;
                    else b0 += d1;
                }
            }
        }
    }
    return (float4)(a0 + a1, b0 + b1, ss, 0.0f);
}

/* One row, no norm: the one-token branch of oc_gemv. */
inline float oc_gemv_part1(const __global uchar *wr, int dtype, int row_bytes, int n_in, const __global float *xr,
                           int t, int nt) {
    return oc_gemv_part(wr, wr, 0, dtype, row_bytes, n_in, xr, xr, 0, t, nt).x;
}

__kernel void oc_gemv(__global float *y, int y_off, int y_stride, const __global float *x, int x_off, int x_stride,
                      const __global uchar *w, int dtype, int row_bytes, int n_in, int n_out,
                      const __global float *bias, int has_bias, int n_tok, int acc, __local float *red) {
    int t = get_local_id(0), nt = get_local_size(0), r = get_local_id(1);
    int o = get_group_id(1) * get_local_size(1) + r, n8 = (n_in + 7) / 8;
    const __global uchar *wr = w + (size_t)min(o, n_out - 1) * row_bytes;
    __local float *rr = red + r * nt * GEMV_TOK;
    if (n_tok == 1) {   /* decode: one token (uniform branch) */
        rr[t] = o < n_out ? oc_gemv_part1(wr, dtype, row_bytes, n_in, x + x_off, t, nt) : 0.0f;
        oc_gemv_reduce(rr, t, nt, 1);
        if (t == 0 && o < n_out) {   /* acc: y += the product, the residual add of a decode step */
            float v = rr[0] + (has_bias ? bias[o] : 0.0f);
            y[y_off + o] = acc ? y[y_off + o] + v : v;
        }
        return;
    }
    for (int t0 = 0; t0 < n_tok; t0 += GEMV_TOK) {
        float acc[GEMV_TOK] = { 0.0f, 0.0f, 0.0f, 0.0f };
        for (int c = t; o < n_out && c < n8; c += nt) {
            float8 wv = oc_load8(dtype, wr, 8 * c, n_in);
            for (int j = 0; j < GEMV_TOK; j++) {
                if (t0 + j >= n_tok) break;
                float8 xv = oc_load8_f32(x + x_off + (size_t)(t0 + j) * x_stride, 8 * c, n_in);
                acc[j] += dot(wv.lo, xv.lo) + dot(wv.hi, xv.hi);
            }
        }
        for (int j = 0; j < GEMV_TOK; j++) rr[j * nt + t] = acc[j];
        oc_gemv_reduce(rr, t, nt, GEMV_TOK);
        if (t == 0 && o < n_out)
            for (int j = 0; j < GEMV_TOK && t0 + j < n_tok; j++)
                y[y_off + (size_t)(t0 + j) * y_stride + o] = rr[j * nt] + (has_bias ? bias[o] : 0.0f);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Several products of one token's x in one launch (decode): the rows of up to three weights of the
 * same type and n_in, one after another (q, k and v: y_j[o] = x W_j[o] + b_j[o] for the rows of
 * weight j), or with glu >= 0 two weights row by row, y0[o] = act(x W0[o] + b0[o]) * (x W1[o] + b1[o])
 * (gate and up: SwiGLU in the epilogue; act: common.cl's oc_act_eval). Work-groups as oc_gemv's
 * one-token branch, over n0 + n1 + n2 rows (glu: n0); each row is oc_gemv_part1 of one row, so a
 * product is oc_gemv's, bit for bit, when the host gives its rows as many items (cl_matmul.c).
 * has_norm: the products of RMSNorm(x) * nw (eps) instead (a decode step's norm before q/k/v and
 * before gate/up, without a launch of its own): each row's items also sum x * x over their chunks,
 * which together are all of x, and the epilogue scales by 1 / rms. */
__kernel void oc_gemv_fused(const __global float *x, int x_off, int dtype, int n_in, int glu,
                            const __global uchar *w0, int rb0, int n0, __global float *y0, int y0_off,
                            const __global float *b0, int has_b0,
                            const __global uchar *w1, int rb1, int n1, __global float *y1, int y1_off,
                            const __global float *b1, int has_b1,
                            const __global uchar *w2, int rb2, int n2, __global float *y2, int y2_off,
                            const __global float *b2, int has_b2, const __global float *nw, int has_norm, float eps,
                            __local float *red) {
    int t = get_local_id(0), nt = get_local_size(0), r = get_local_id(1);
    int o = get_group_id(1) * get_local_size(1) + r;
    int n_rows = glu >= 0 ? n0 : n0 + n1 + n2;
    __local float *rr = red + r * nt * 3;
    const __global float *xr = x + x_off;
    /* the row's weight (the same for every item of the row) */
    int j = o < n0 ? 0 : o < n0 + n1 ? 1 : 2, row = j == 0 ? o : j == 1 ? o - n0 : o - n0 - n1;
    const __global uchar *w = j == 0 ? w0 : j == 1 ? w1 : w2;
    int rb = j == 0 ? rb0 : j == 1 ? rb1 : rb2;
    float4 p = (float4)(0.0f);
    if (o < n_rows)
        p = oc_gemv_part(w + (size_t)row * rb, glu >= 0 ? w1 + (size_t)o * rb1 : w, glu >= 0, dtype, rb, n_in, xr,
                         has_norm ? nw : xr, has_norm, t, nt);
    rr[t] = p.x;
    rr[nt + t] = p.y;
    rr[2 * nt + t] = p.z;
    oc_gemv_reduce(rr, t, nt, 3);
    if (t != 0 || o >= n_rows) return;
    /* has_norm: the products were of x * nw; times 1 / rms(x) (norm.cl's formula) they are the
     * products of RMSNorm(x) * nw, which a launch of oc_norm used to write out before this one */
    float s = has_norm ? 1.0f / sqrt(rr[2 * nt] / (float)n_in + eps) : 1.0f;
    float d0 = has_norm ? rr[0] * s : rr[0], d1 = has_norm ? rr[nt] * s : rr[nt];
    if (glu >= 0) {
        float g = d0 + (has_b0 ? b0[o] : 0.0f), u = d1 + (has_b1 ? b1[o] : 0.0f);
        y0[y0_off + o] = oc_act_eval(g, glu) * u;
        return;
    }
    const __global float *b = j == 0 ? b0 : j == 1 ? b1 : b2;
    int has_b = j == 0 ? has_b0 : j == 1 ? has_b1 : has_b2;
    __global float *y = j == 0 ? y0 : j == 1 ? y1 : y2;
    int y_off = j == 0 ? y0_off : j == 1 ? y1_off : y2_off;
    y[y_off + row] = d0 + (has_b ? b[row] : 0.0f);
}

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void oc_gemm(__global float *y, int y_off, int y_stride, const __global float *x, int x_off, int x_stride,
             const __global uchar *w, int dtype, int row_bytes, int n_in, int n_out,
             const __global float *bias, int has_bias, int n_tok) {
    __local float xs[KS][TS + 1], ws[KS][TS + 1];   /* [k][token], [k][output]; +1: no bank conflicts on stores */
    int tx = get_local_id(0), ty = get_local_id(1), lid = ty * 16 + tx;
    int tok0 = get_group_id(1) * TS, out0 = get_group_id(0) * TS;
    int lr = lid >> 2, lc = (lid & 3) * 8;   /* this item loads row lr, elements lc .. lc+7 of each step */
    const __global float *xrow = x + x_off + (size_t)min(tok0 + lr, n_tok - 1) * x_stride;
    const __global uchar *wrow = w + (size_t)min(out0 + lr, n_out - 1) * row_bytes;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < n_in; k0 += KS) {
        float8 xv = oc_load8_f32(xrow, k0 + lc, n_in);
        float8 wv = oc_load8(dtype, wrow, k0 + lc, n_in);
        barrier(CLK_LOCAL_MEM_FENCE);   /* the previous step is done reading */
        xs[lc + 0][lr] = xv.s0; xs[lc + 1][lr] = xv.s1; xs[lc + 2][lr] = xv.s2; xs[lc + 3][lr] = xv.s3;
        xs[lc + 4][lr] = xv.s4; xs[lc + 5][lr] = xv.s5; xs[lc + 6][lr] = xv.s6; xs[lc + 7][lr] = xv.s7;
        ws[lc + 0][lr] = wv.s0; ws[lc + 1][lr] = wv.s1; ws[lc + 2][lr] = wv.s2; ws[lc + 3][lr] = wv.s3;
        ws[lc + 4][lr] = wv.s4; ws[lc + 5][lr] = wv.s5; ws[lc + 6][lr] = wv.s6; ws[lc + 7][lr] = wv.s7;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < KS; kk++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) a[i] = xs[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) b[j] = ws[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
    }
    for (int i = 0; i < 4; i++) {
        int tok = tok0 + ty + 16 * i;
        if (tok >= n_tok) break;
        for (int j = 0; j < 4; j++) {
            int o = out0 + tx + 16 * j;
            if (o < n_out) y[y_off + (size_t)tok * y_stride + o] = acc[i][j] + (has_bias ? bias[o] : 0.0f);
        }
    }
}
