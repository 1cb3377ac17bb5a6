/* dyn.cl: MMInference's online estimate on the device (mminference.txt Sec. 4.1, App. C.3, Alg. 1-3:
 * A^ = softmax(Q[rows] K^T + base mask) over the 64 estimate rows), the same sums as the CPU's
 * (src/attention/dyn_build.c): per key the column score vs[j] = sum_r A^[r, j] and per diagonal
 * offset o the score ss[o + n_diag - 1] = sum_r A^[r, key at coordinate c_r - o]. One job = one
 * head and its 64 rows (the call's last 64 queries, or a modality's last 64 for Q-Boundary and
 * 2D-Boundary heads: Alg. 2's "final segment of each modality's queries"), given as a row list
 * (query index, coordinate c_r: the position, or for 2D-Boundary the rank within the row's
 * modality). oc_dyn_choose (below) then chooses a Vertical-Slash index from the scores as the
 * CPU's code does (dyn_index.c oc_dyn_top_k), on the device; a Grid index is chosen on the host
 * with the CPU's code (dyn_index.c oc_dyn_choose), so both executors make the same choice from the
 * same scores.
 * Every launch takes a batch of jobs (dimension 1: job b; one table holds every job's rows at
 * 128 b, then the jobs' heads at jobs_at, then oc_dyn_diag's entries at entries_at; each job's
 * buffers lie at a fixed stride), so one layer's estimates are three launches and
 * one read-back, not three launches and two waits per head (the host round trips made the
 * estimate most of an OpenCL prefill).
 *  oc_dyn_estimate pass 0 (64 items, item c = row c; work-group w = keys [64 w, 64 w + 64)): each
 *    row's max and sum (base 2) over the tile -> part[w][c] (a tile past the job's last key:
 *    max -inf, sum 0, which pass 1 skips);
 *  pass 1: the merged max and sum, then the probabilities of the tile's keys into prob[c][j]
 *    (0 where the base mask drops the pair) and the column sums vs[j] in row order;
 *  oc_dyn_diag (item t = one diagonal of one key stream; dimension 1: entry e of a table of
 *    (job, perm offset, has perm, n_coord, n_diag, score offset)): sums prob down the diagonal in row
 *    order, the keys addressed through the stream (the identity, or a 2D-Boundary key modality's
 *    positions by rank). Every score is written by one item in a fixed order: no atomics, and the
 *    result does not depend on scheduling.
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

/* The row's query lives in registers: every index into qv is a constant once the loops over
 * EST_DMAX are unrolled (the element past d skipped, the same products in the same order as a loop
 * to d). A loop to the runtime d lets a compiler keep qv in per-item stack memory, one cached load
 * before each dependent fma (the estimate passes took about 200 us a launch on an H200). */
inline float oc_est_dot(const float *qv, const __local float *kr, int d) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < EST_DMAX; e++)
        if (e < d) s = fma(qv[e], kr[e], s);
    return s;
}

__kernel __attribute__((reqd_work_group_size(EST_ROWS, 1, 1)))
void oc_dyn_estimate(int pass, const __global float *q, int q_off, int q_st, int q_sh,
                     const __global uchar *k, int k_off, int k_st, int k_sh, int kv_f16,
                     const __global int *rows_all, int jobs_at, int n_rep, int d, int n_kv, int q_offset,
                     int causal, float qscale, __global float2 *part_all, int part_w, __global float *prob_all,
                     __global float *scores, int ss_stride, __local float *ks, __local float *pl) {
    const int c = get_local_id(0), w = get_group_id(0), b = get_group_id(1), h = rows_all[jobs_at + b], g = h / n_rep;
    const __global int *rows = rows_all + 2 * EST_ROWS * b;
    __global float2 *part = part_all + (size_t)b * part_w * EST_ROWS;
    __global float *prob = prob_all + (size_t)b * EST_ROWS * n_kv;
    __global float *vs = scores + (size_t)b * ss_stride;
    const int p = q_offset + rows[2 * c], p_last = q_offset + rows[2 * (EST_ROWS - 1)];
    const int key_end = causal ? min(n_kv, p_last + 1) : n_kv;
    const int n_w0 = (key_end + EST_ROWS - 1) / EST_ROWS;
    if (pass == 0 && w >= n_w0) {   /* the launch covers the longest job; uniform per work-group */
        part[(size_t)w * EST_ROWS + c] = (float2)(-INFINITY, 0.0f);
        return;
    }
    float qv[EST_DMAX];
    const __global float *qr = q + q_off + (size_t)rows[2 * c] * q_st + (size_t)h * q_sh;
#pragma unroll
    for (int e = 0; e < EST_DMAX; e++) qv[e] = e < d ? qr[e] * qscale : 0.0f;
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
        part[(size_t)w * EST_ROWS + c] = (float2)(m, l);
        return;
    }
    /* pass 1: the row's max and sum over every tile, in tile order */
    float mx = -INFINITY, sum = 0.0f;
    for (int t = 0; t < n_w0; t++) {
        float2 ml = part[(size_t)t * EST_ROWS + c];
        if (ml.y > 0.0f && ml.x > mx) mx = ml.x;
    }
    for (int t = 0; t < n_w0; t++) {
        float2 ml = part[(size_t)t * EST_ROWS + c];
        if (ml.y > 0.0f) sum += ml.y * exp2(ml.x - mx);
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int e0 = 0; e0 < EST_ROWS; e0 += SUB) {
        const int j0 = w * EST_ROWS + e0;
        barrier(CLK_LOCAL_MEM_FENCE);
        oc_est_load(ks, k, kv_f16, k_off, k_st, k_sh, g, d, j0, key_end, c);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = 0; t < SUB; t++) {
            int j = j0 + t;
            float a = 0.0f;
            if (j < key_end && !(causal && j > p)) a = exp2(oc_est_dot(qv, ks + t * d, d) - mx) * inv;
            pl[c * PSTRIDE + t] = a;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* the tile's probabilities out a row at a time, SUB neighbouring items on neighbouring keys
         * (item c writing its own row put every item of a store on another row: one memory
         * transaction per float) */
        for (int e = c; e < EST_ROWS * SUB; e += EST_ROWS) {
            const int r = e / SUB, t = e - r * SUB;
            if (j0 + t < n_kv) prob[(size_t)r * n_kv + j0 + t] = pl[r * PSTRIDE + t];
        }
        if (c < SUB && j0 + c < n_kv) {
            float col = 0.0f;
            for (int r = 0; r < EST_ROWS; r++) col += pl[r * PSTRIDE + c];
            vs[j0 + c] = col;
        }
    }
}

/* Item t: ss[t] = sum_r prob[r][key of coordinate c_r - o], o = t - (n_diag - 1), over the rows
 * whose coordinate lies in the stream [0, n_coord); the key of coordinate x is perm[x] (has_perm)
 * or x. */
__kernel void oc_dyn_diag(const __global float *prob_all, int n_kv, const __global int *rows_all,
                          const __global int *perm, int entries_at, __global float *scores) {
    const __global int *en = rows_all + entries_at + 6 * get_global_id(1);
    const int b = en[0], perm_off = en[1], has_perm = en[2], n_coord = en[3], n_diag = en[4];
    const __global float *prob = prob_all + (size_t)b * EST_ROWS * n_kv;
    const __global int *rows = rows_all + 2 * EST_ROWS * b;
    __global float *ss = scores + en[5];
    const int t = get_global_id(0);
    if (t >= 2 * n_diag - 1) return;
    const int o = t - (n_diag - 1);
    float s = 0.0f;
    for (int r = 0; r < EST_ROWS; r++) {
        int x = rows[2 * r + 1] - o;
        if (x < 0 || x >= n_coord) continue;
        int j = has_perm ? perm[perm_off + x] : x;
        s += prob[(size_t)r * n_kv + j];
    }
    ss[t] = s;
}

/* oc_dyn_choose: a Vertical-Slash part's index chosen where its scores are, so a prefill queues
 * every layer without a read-back (the host chose it after one wait per layer, the estimate's
 * largest cost on a GPU). One work-group per entry of the table at tab_at (CH_INTS ints: the
 * columns' scores, through a 2D-Boundary key modality's permutation or not, the diagonals'
 * scores, the counts, where the part and its arrays lie in the second launch's table). The choice
 * is dyn_index.c's oc_dyn_top_k exactly: the first k by (score descending, index ascending), a NaN
 * ranking as -inf, the forced offset 0 first. Each score becomes a 32-bit key whose unsigned order
 * is that order (-0 as +0, the forced index above all); a radix select of 4 digit passes finds the
 * k-th key T and how many keys equal to T are kept (the lowest indices, as the CPU's tie rule);
 * then each item walks its own contiguous stretch of indices, counts and writes in index order
 * (offsets by a prefix sum over the items): ascending, as the CPU sorts them. The diagonals'
 * offsets go to scratch and one item merges them into runs exactly as cl_attn.c add_part does.
 * Histograms count with local atomics: sums of counts, the same in any order. The columns and the
 * diagonals are two rounds of one loop body with no early return (the same body in an inline
 * function called twice, with barriers inside, crashed PoCL 3.1). */
#define CH_WG 256
#define CH_INTS 12
#define DYN_BLOCK_CH 64   /* src/attention/dyn.h OC_DYN_BLOCK */

inline uint oc_ch_key(float x, int i, int force) {
    if (i == force) return 0xffffffffu;
    if (!(x == x)) x = -INFINITY;   /* dyn_index.c rank_of */
    if (x == 0.0f) x = 0.0f;        /* -0 ties with +0 there */
    uint u = as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* score i of a choice: sc[i], or through a key modality's permutation (ranks past n_mk: NaN) */
inline float oc_ch_score(const __global float *sc, const __global int *perm, int i, int n_mk) {
    if (!perm) return sc[i];
    return i < n_mk ? sc[perm[i]] : NAN;
}

/* exclusive prefix sum of v over the work-group; *total gets the sum */
inline int oc_ch_scan(__local int *s, int v, int lid, int *total) {
    s[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int off = 1; off < CH_WG; off <<= 1) {
        int add = lid >= off ? s[lid - off] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        s[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    int incl = s[lid];
    *total = s[CH_WG - 1];
    barrier(CLK_LOCAL_MEM_FENCE);
    return incl - v;
}

/* entry: 0 columns' scores at, 1 permutation at (-1: none), 2 n_mk, 3 n (coordinates of the
 * choice), 4 k columns, 5 k diagonals, 6 diagonals' scores at (2 n - 1 of them), 7 the part in
 * dyn, 8 its columns' room, 9 its runs' room, 10 n_coord (columns at or past it are dropped),
 * 11 scratch at (2 n ints). Two rounds of one body (the columns, then the diagonals, forced
 * offset 0), every barrier reached by every item in both (no early return).
 * A round's n keys (a score read through the permutation, then its key) are computed once into
 * kc (n_cache of them fit; a longer round computes them again at each of its 7 sweeps, as every
 * round did: 7 passes of dependent global reads). */
__kernel __attribute__((reqd_work_group_size(CH_WG, 1, 1)))
void oc_dyn_choose(const __global float *scores, const __global int *perm_all, const __global int *tab, int tab_at,
                   __global int *dyn, __global int *scratch, __local uint *kc, int n_cache) {
    __local int hist[258], s[CH_WG];
    const int lid = get_local_id(0);
    const __global int *en = tab + tab_at + CH_INTS * get_group_id(0);
    const int n0 = en[3], part = en[7], cols = en[8], runs = en[9];
    int nv = 0, ns = 0;
    for (int round = 0; round < 2; round++) {
        /* the top k of n scores; the chosen indices i < n_out, ascending, to out[] as i + add */
        const __global float *sc = scores + (round ? en[6] : en[0]);
        const __global int *perm = !round && en[1] >= 0 ? perm_all + en[1] : 0;
        const int n_mk = en[2], n = round ? 2 * n0 - 1 : n0, force = round ? n0 - 1 : -1;
        const int n_out = round ? n : en[10], add = round ? -(n0 - 1) : 0;
        const int k = max(0, min(round ? en[5] : en[4], n)), cached = n <= n_cache;
        __global int *out = round ? scratch + en[11] : dyn + cols;
        barrier(CLK_LOCAL_MEM_FENCE);   /* the last round is done with kc */
        for (int i = lid; cached && i < n; i += CH_WG) kc[i] = oc_ch_key(oc_ch_score(sc, perm, i, n_mk), i, force);
        barrier(CLK_LOCAL_MEM_FENCE);
#define CH_KEY(i) (cached ? kc[i] : oc_ch_key(oc_ch_score(sc, perm, (i), n_mk), (i), force))
        uint T = 0u, prefix = 0u, mask = 0u;
        int rem = k;   /* keys equal to T to keep */
        for (int shift = 24; shift >= 0; shift -= 8) {   /* k < n: the k-th largest key, 8 bits a pass */
            hist[lid] = 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int i = lid; k > 0 && k < n && i < n; i += CH_WG) {
                uint key = CH_KEY(i);
                if ((key & mask) == prefix) atomic_inc(&hist[(key >> shift) & 255u]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (lid == 0) {   /* the digit of the rem-th largest among the keys under prefix */
                int above = 0, dgt = 255;
                for (; dgt > 0 && above + hist[dgt] < rem; dgt--) above += hist[dgt];
                hist[256] = dgt;
                hist[257] = rem - above;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            if (k > 0 && k < n) {
                prefix |= (uint)hist[256] << shift;
                mask |= 255u << shift;
                rem = hist[257];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (k > 0 && k < n) T = prefix;   /* else (k = n) every key is above T = 0 */
        const int len = (n + CH_WG - 1) / CH_WG, i0 = min(n, lid * len), i1 = min(n, i0 + len);
        int n_eq = 0, total;
        for (int i = i0; k > 0 && i < i1; i++) n_eq += CH_KEY(i) == T;
        int eq_before = oc_ch_scan(s, n_eq, lid, &total), n_sel = 0;
        for (int i = i0, e = eq_before; k > 0 && i < i1; i++) {
            uint key = CH_KEY(i);
            int sel = key > T || (key == T && e++ < rem);
            n_sel += sel && i < n_out;
        }
        int at = oc_ch_scan(s, n_sel, lid, &total);
        for (int i = i0, e = eq_before; k > 0 && i < i1; i++) {
            uint key = CH_KEY(i);
            int sel = key > T || (key == T && e++ < rem);
            if (sel && i < n_out) out[at++] = i + add;
        }
        if (round) ns = total;
        else nv = total;
#undef CH_KEY
    }
    const __global int *sl = scratch + en[11];
    barrier(CLK_GLOBAL_MEM_FENCE);
    /* add_part's runs: offsets descending (walk step w takes o_w = sl[ns - 1 - w]), each
     * [b - o, b + 64 - o) from the block start, merged while they touch. Every band is 64 keys
     * wide, so a band's end only grows along the walk and step w starts a run exactly when
     * o_(w-1) - o_w > 64: each item marks the starts of its stretch of steps, a prefix sum numbers
     * the runs, and a run's first step writes its start, its last step its end (one item merging
     * every band, each step reading back the run end it had just written to global memory, was a
     * serial chain of memory round trips; the whole launch took about 115 us on an H200). */
    __global int *dr = dyn + runs;
    const int lw = (ns + CH_WG - 1) / CH_WG, w0 = min(ns, lid * lw), w1 = min(ns, w0 + lw);
    int n_st = 0, nd;
    for (int w = w0; w < w1; w++) n_st += w == 0 || sl[ns - w] - sl[ns - 1 - w] > DYN_BLOCK_CH;
    int r = oc_ch_scan(s, n_st, lid, &nd) - 1;
    for (int w = w0; w < w1; w++) {
        const int o = sl[ns - 1 - w];
        if (w == 0 || sl[ns - w] - o > DYN_BLOCK_CH) dr[2 * ++r] = -o;
        if (w == ns - 1 || o - sl[ns - 2 - w] > DYN_BLOCK_CH) dr[2 * r + 1] = DYN_BLOCK_CH - o;
    }
    if (lid) return;
    dyn[part + 1] = nv;
    dyn[part + 2] = cols;
    dyn[part + 3] = nd;
    dyn[part + 4] = runs;
}
