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

/* A Q8_0 block's product with its 32 elements of x (x4: 16-byte aligned, the block's first float4).
 * The block's 34 bytes start 2 bytes into a 4-byte word when b is odd (row_bytes is a multiple of 4),
 * so nine aligned word loads cover it, never past the row's padded end: the scale is the low or the
 * high half of word 0 and the quants are words 1-8 (odd) or the words straddling 0-8 (even). Byte
 * loads of the same bytes were 1.5x slower on NVIDIA's compiler. */
inline float oc_q8dot_block(const __global uchar *row, int b, const __global float4 *x4) {
    int odd = b & 1;
    const __global uint *p = (const __global uint *)(row + 34 * b - 2 * odd);
    uint wv[9];
    for (int j = 0; j < 9; j++) wv[j] = p[j];
    ushort dh = (ushort)(odd ? wv[0] >> 16 : wv[0] & 0xffffu);
    float s = 0.0f;
    for (int j = 0; j < 8; j++) {
        uint q = odd ? wv[j + 1] : (wv[j] >> 16) | (wv[j + 1] << 16);
        s += dot(convert_float4(as_char4(q)), x4[j]);
    }
    return s * vload_half(0, (const __private half *)&dh);
}

/* One token's product with one row: this item's share of the row's dot with x. The share's order
 * is fixed by (t, nt), so a row's sum does not depend on the launch's other rows. Three loops:
 *  - F16 rows of whole 16-byte chunks and a 16-byte aligned x: chunks t, t + nt, ... of 8, four
 *    loads in flight per item before the first is used, w and x both read as 16-byte vectors. x
 *    through float4 pointers and not vload8: NVIDIA's compiler emits eight 4-byte loads for a
 *    vload8 of floats (only 4-byte alignment is promised), and the F16 GEMV read 1.5 TB/s with them
 *    against 2.9 TB/s with these on the H200 (27.5 MB gate and up, see BENCHMARKS.md);
 *  - Q8_0 rows (row_bytes a multiple of 4) with an aligned x: whole blocks t, t + nt, ..., two in
 *    flight, oc_q8dot_block;
 *  - otherwise chunks of 8 through oc_load8, two in flight (F32, Q4_0, odd widths, unaligned x). */
inline float oc_gemv_part1(const __global uchar *wr, int dtype, int row_bytes, int n_in, const __global float *xr,
                           int t, int nt) {
    int n8 = (n_in + 7) / 8, c = t;
    int x_al = ((size_t)xr & 15) == 0;
    float a0 = 0.0f, a1 = 0.0f;
    if (dtype == OC_DT_F16 && (row_bytes & 15) == 0 && (n_in & 7) == 0 && x_al) {
        const __global uint4 *w4 = (const __global uint4 *)wr;
        const __global float4 *x4 = (const __global float4 *)xr;
        for (; c + 3 * nt < n8; c += 4 * nt) {
            uint4 u0 = w4[c], u1 = w4[c + nt], u2 = w4[c + 2 * nt], u3 = w4[c + 3 * nt];
            a0 += oc_hdot8(u0, x4[2 * c], x4[2 * c + 1]);
            a1 += oc_hdot8(u1, x4[2 * (c + nt)], x4[2 * (c + nt) + 1]);
            a0 += oc_hdot8(u2, x4[2 * (c + 2 * nt)], x4[2 * (c + 2 * nt) + 1]);
            a1 += oc_hdot8(u3, x4[2 * (c + 3 * nt)], x4[2 * (c + 3 * nt) + 1]);
        }
        for (; c < n8; c += nt) a0 += oc_hdot8(w4[c], x4[2 * c], x4[2 * c + 1]);
    } else if (dtype == OC_DT_Q8_0 && (row_bytes & 3) == 0 && x_al) {
        const __global float4 *x4 = (const __global float4 *)xr;
        int nb = n_in / 32, b = t;
        for (; b + nt < nb; b += 2 * nt) {
            a0 += oc_q8dot_block(wr, b, x4 + 8 * b);
            a1 += oc_q8dot_block(wr, b + nt, x4 + 8 * (b + nt));
        }
        if (b < nb) a0 += oc_q8dot_block(wr, b, x4 + 8 * b);
    } else {
        for (; c + nt < n8; c += 2 * nt) {
            float8 w0 = oc_load8(dtype, wr, 8 * c, n_in), w1 = oc_load8(dtype, wr, 8 * (c + nt), n_in);
            float8 x0 = oc_load8_f32(xr, 8 * c, n_in), x1 = oc_load8_f32(xr, 8 * (c + nt), n_in);
            a0 += dot(w0.lo, x0.lo) + dot(w0.hi, x0.hi);
            a1 += dot(w1.lo, x1.lo) + dot(w1.hi, x1.hi);
        }
        if (c < n8) {
            float8 w0 = oc_load8(dtype, wr, 8 * c, n_in), x0 = oc_load8_f32(xr, 8 * c, n_in);
            a0 += dot(w0.lo, x0.lo) + dot(w0.hi, x0.hi);
        }
    }
    return a0 + a1;
}

/* oc_q8dot_block with x in local memory (oc_gemv_fused's normalized x). */
inline float oc_q8dot_block_lx(const __global uchar *row, int b, const __local float4 *x4) {
    int odd = b & 1;
    const __global uint *p = (const __global uint *)(row + 34 * b - 2 * odd);
    uint wv[9];
    for (int j = 0; j < 9; j++) wv[j] = p[j];
    ushort dh = (ushort)(odd ? wv[0] >> 16 : wv[0] & 0xffffu);
    float s = 0.0f;
    for (int j = 0; j < 8; j++) {
        uint q = odd ? wv[j + 1] : (wv[j] >> 16) | (wv[j + 1] << 16);
        s += dot(convert_float4(as_char4(q)), x4[j]);
    }
    return s * vload_half(0, (const __private half *)&dh);
}

/* oc_gemv_part1 with x in local memory, n_in floats padded with zeros to a multiple of 8 (so every
 * chunk reads two whole float4s): the same loops and the same order of sums, so a product of the
 * same x is the same bit for bit. */
inline float oc_gemv_part1_lx(const __global uchar *wr, int dtype, int row_bytes, int n_in, const __local float4 *x4,
                              int t, int nt) {
    int n8 = (n_in + 7) / 8, c = t;
    float a0 = 0.0f, a1 = 0.0f;
    if (dtype == OC_DT_F16 && (row_bytes & 15) == 0 && (n_in & 7) == 0) {
        const __global uint4 *w4 = (const __global uint4 *)wr;
        for (; c + 3 * nt < n8; c += 4 * nt) {
            uint4 u0 = w4[c], u1 = w4[c + nt], u2 = w4[c + 2 * nt], u3 = w4[c + 3 * nt];
            a0 += oc_hdot8(u0, x4[2 * c], x4[2 * c + 1]);
            a1 += oc_hdot8(u1, x4[2 * (c + nt)], x4[2 * (c + nt) + 1]);
            a0 += oc_hdot8(u2, x4[2 * (c + 2 * nt)], x4[2 * (c + 2 * nt) + 1]);
            a1 += oc_hdot8(u3, x4[2 * (c + 3 * nt)], x4[2 * (c + 3 * nt) + 1]);
        }
        for (; c < n8; c += nt) a0 += oc_hdot8(w4[c], x4[2 * c], x4[2 * c + 1]);
    } else if (dtype == OC_DT_Q8_0 && (row_bytes & 3) == 0) {
        int nb = n_in / 32, b = t;
        for (; b + nt < nb; b += 2 * nt) {
            a0 += oc_q8dot_block_lx(wr, b, x4 + 8 * b);
            a1 += oc_q8dot_block_lx(wr, b + nt, x4 + 8 * (b + nt));
        }
        if (b < nb) a0 += oc_q8dot_block_lx(wr, b, x4 + 8 * b);
    } else {
        for (; c + nt < n8; c += 2 * nt) {
            float8 w0 = oc_load8(dtype, wr, 8 * c, n_in), w1 = oc_load8(dtype, wr, 8 * (c + nt), n_in);
            float8 x0 = (float8)(x4[2 * c], x4[2 * c + 1]), x1 = (float8)(x4[2 * (c + nt)], x4[2 * (c + nt) + 1]);
            a0 += dot(w0.lo, x0.lo) + dot(w0.hi, x0.hi);
            a1 += dot(w1.lo, x1.lo) + dot(w1.hi, x1.hi);
        }
        if (c < n8) {
            float8 w0 = oc_load8(dtype, wr, 8 * c, n_in), x0 = (float8)(x4[2 * c], x4[2 * c + 1]);
            a0 += dot(w0.lo, x0.lo) + dot(w0.hi, x0.hi);
        }
    }
    return a0 + a1;
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
 * has_norm: x is first RMS-normalized and scaled by nw (eps), in each work-group (a decode step's
 * norm before q/k/v and before gate/up, without a launch of its own). */
__kernel void oc_gemv_fused(const __global float *x, int x_off, int dtype, int n_in, int glu,
                            const __global uchar *w0, int rb0, int n0, __global float *y0, int y0_off,
                            const __global float *b0, int has_b0,
                            const __global uchar *w1, int rb1, int n1, __global float *y1, int y1_off,
                            const __global float *b1, int has_b1,
                            const __global uchar *w2, int rb2, int n2, __global float *y2, int y2_off,
                            const __global float *b2, int has_b2, const __global float *nw, int has_norm, float eps,
                            __local float *red, __local float4 *xs) {
    int t = get_local_id(0), nt = get_local_size(0), r = get_local_id(1);
    int o = get_group_id(1) * get_local_size(1) + r;
    int n_rows = glu >= 0 ? n0 : n0 + n1 + n2;
    __local float *rr = red + r * nt * 2;
    const __global float *xr = x + x_off;
    if (has_norm) {   /* uniform */
        /* x' = RMSNorm(x) * nw, the oc_norm kernel's formula (norm.cl, with no residual and no
         * mean), computed by every work-group into local memory (x: n_in floats, a few KB read
         * from the cache) instead of by a launch of its own before this one; the sum of squares
         * through a radix-4 tree over the work-group's items. xs holds n_in floats and zeros up
         * to the next multiple of 8. */
        int lid = r * nt + t, nl = nt * (int)get_local_size(1), n_pad = (n_in + 7) / 8 * 8;
        __local float *xf = (__local float *)xs;
        float ss = 0.0f;
        for (int i = lid; i < n_pad; i += nl) {
            float v = i < n_in ? xr[i] : 0.0f;
            xf[i] = v;
            ss = fma(v, v, ss);
        }
        red[lid] = ss;
        oc_gemv_reduce(red, lid, nl, 1);
        float rs = 1.0f / sqrt(red[0] / (float)n_in + eps);
        for (int i = lid; i < n_in; i += nl) xf[i] = xf[i] * rs * nw[i];
        barrier(CLK_LOCAL_MEM_FENCE);   /* xs whole; red[0] read by every item before it is reused */
    }
    /* the row's weight (the same for every item of the row) */
    int j = o < n0 ? 0 : o < n0 + n1 ? 1 : 2, row = j == 0 ? o : j == 1 ? o - n0 : o - n0 - n1;
    const __global uchar *w = j == 0 ? w0 : j == 1 ? w1 : w2;
    int rb = j == 0 ? rb0 : j == 1 ? rb1 : rb2;
    float p0 = 0.0f, p1 = 0.0f;
    if (o < n_rows && has_norm) {
        p0 = oc_gemv_part1_lx(w + (size_t)row * rb, dtype, rb, n_in, xs, t, nt);
        if (glu >= 0) p1 = oc_gemv_part1_lx(w1 + (size_t)o * rb1, dtype, rb1, n_in, xs, t, nt);
    } else if (o < n_rows) {
        p0 = oc_gemv_part1(w + (size_t)row * rb, dtype, rb, n_in, xr, t, nt);
        if (glu >= 0) p1 = oc_gemv_part1(w1 + (size_t)o * rb1, dtype, rb1, n_in, xr, t, nt);
    }
    rr[t] = p0;
    rr[nt + t] = p1;
    oc_gemv_reduce(rr, t, nt, 2);
    if (t != 0 || o >= n_rows) return;
    if (glu >= 0) {
        float g = rr[0] + (has_b0 ? b0[o] : 0.0f), u = rr[nt] + (has_b1 ? b1[o] : 0.0f);
        y0[y0_off + o] = oc_act_eval(g, glu) * u;
        return;
    }
    const __global float *b = j == 0 ? b0 : j == 1 ? b1 : b2;
    int has_b = j == 0 ? has_b0 : j == 1 ? has_b1 : has_b2;
    __global float *y = j == 0 ? y0 : j == 1 ? y1 : y2;
    int y_off = j == 0 ? y0_off : j == 1 ? y1_off : y2_off;
    y[y_off + row] = rr[0] + (has_b ? b[row] : 0.0f);
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
