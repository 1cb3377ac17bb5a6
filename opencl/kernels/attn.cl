/* attn.cl: tiled flash attention with the CPU engine's semantics (src/attention/attn.h: base mask causal,
 * bidirectional or segments, AND the head's pattern: dense, the BlindSight categories, A-shape,
 * and in prefill MMInference's Vertical-Slash and Grid from a per-prompt index; grouped-query
 * heads; f16 or f32 K/V with strides). Online softmax in base 2 (scale * log2 e is
 * folded into Q once), f32 throughout, never an n_q x n_kv buffer. How it works: below. */

/* Work items (opencl/cl_attn.c builds them): the host cuts the query rows into runs of one class
 * (segment, image or text: all rows of a run keep keys from the same set C) and at most BQ rows.
 * A work-group of WG = RG x CG items takes (run, unit, chunk):
 *  - plain mode: unit = one query head; rows = the run's queries of that head;
 *  - stacked mode (decode: n_q * heads-per-kv-head <= BQ): unit = one kv head; rows = every
 *    query head of its group x the run's queries, so one K/V tile serves the whole group;
 *  - chunk: a slice of the keys when the host splits long caches over work-groups
 *    (flash-decoding); oc_attn_merge then combines the partial (max, sum, output) in chunk order.
 * Dimension 0 of the launch is (run, unit) with the unit fastest and the runs longest first, so
 * the devices that hand out work-groups in index order start the longest (run, head) pairs of
 * every head first: a head-major order left the last heads' longest runs for the end (the
 * sparse plan's short heads made that tail worse: time/FLOP 1.42 at 8 x 1024 on an H100).
 * Tile classification, as in src/attention/attn.c: the keys the rows can keep are C AND the union of their
 * windows (causal bound, A-shape sinks and local window: both grow with the position, so the
 * first and last rows bound them). C is a short list of intervals (for an image row of a
 * BlindSight head: the text between images, each image's sinks, its own image), walked by a
 * cursor and gathered into tiles of BK keys; keys outside are never loaded, so a skipped tile
 * costs nothing. A gathered tile whose keys all lie in the windows' intersection is "full" and
 * needs no mask; only the others evaluate the mask per element. In stacked mode the rows may
 * have different patterns: C is the run's base range and every element is masked exactly.
 *
 * Prefill heads (MMInference Vertical-Slash, Grid, Q-Boundary and 2D-Boundary, mminference.txt
 * Sec. 3.1-3.2, Alg. 1-3, App. C.3-C.4; the masks are src/attention/dyn.h's): a second launch of
 * this kernel whose runs name their head (RUN_INTS: head >= 0), list their rows (query index and
 * coordinate: the position, or for 2D-Boundary the rank within the rows' modality) and name 1 or 2
 * parts. A part is one plain pattern over one key stream (PART_INTS: kind ALL, A-shape,
 * Vertical-Slash or Grid with its index, and the stream: every key by position, or one modality's
 * keys by rank through the key permutation): a Vertical-Slash or Grid head is one part; a
 * Q-Boundary head's rows of modality m run the part of modality m; a 2D-Boundary head's rows of
 * modality mq run the parts (mq, text) and (mq, vision), one softmax over both (Alg. 3's loop over
 * modality pairs, by loading, as Alg. 7 does). The host groups the rows so that a run's rows keep
 * the same coordinates of every Vertical-Slash and Grid part (one block of 64 coordinates, which
 * share the block's diagonal runs; one residue class (c - phase) mod stride: Alg. 1's row
 * permutation, done by loading rows from the list, as the paper's kernel does). Item 0 generates
 * the keys part by part in ascending coordinates (oc_dyn_next: merged diagonal runs and columns,
 * the grid's lines, an A-shape's sinks and the union of the rows' windows, or every coordinate)
 * into the tile's key list (a tile never mixes parts); per element only the base mask in positions
 * and an A-shape part's window in coordinates are tested. The first launch skips these heads. The
 * tables come from the host (opencl/cl_attn.c): one flag per head, the parts, their columns and
 * merged diagonal runs, the key permutation and the row lists.
 *
 * Tile shape (build options, opencl/cl_device.c): RG x CG items; item (rg, cg) = (lid / CG,
 * lid % CG) owns rows rg + RG a (a < RPT) and keys cg + CG b (b < KPT) of a tile, and the output
 * columns 4 (cg + CG c) .. +3 (c < DMAX / (4 CG)): interleaved, so the float4 reads of local
 * memory hit distinct banks (local rows are an odd number of float4s apart). BQ = RG RPT query
 * rows, BK = CG KPT keys per tile. Per tile and item: S = Q K^T costs RPT + KPT float4 reads of
 * local memory per 4 RPT KPT FMAs; O += P V reads P as float4s over 4 keys, so RPT + 4 NC4
 * float4 reads per 16 RPT NC4 FMAs. Local memory (bytes, row = 16 (C4 | 1)): (BQ + BK) row for
 * Q and the K/V tile (K and V take turns), BQ (BK + 4) 4 for P, BQ CG 4 for the row maxima,
 * (3 BK + WG) 4 for the key list: 40 KB at d 128 for 48 x 16 (the GPU default, opencl/cl_device.c)
 * or 32 x 32, so 5 work-groups fit an SM's 228 KB on NVIDIA; a 64-row tile fits only up to
 * d ~ 96 (48 KB per work-group). Q and the K/V tile are float4 arguments so every
 * implementation aligns them for float4 access. */
#define RPT OC_ATT_RPT
#define KPT OC_ATT_KPT
#define RG OC_ATT_RG
#define CG OC_ATT_CG
#define WG (RG * CG)
#define BQ (RG * RPT)
#define BK (CG * KPT)
#define PS (BK + 4)   /* floats of a P row: float4-aligned, rows 4 banks apart */
#define DMAX 128
#define NC4 (DMAX / (4 * CG))
#define BIG 0x3fffffff
#define P_SINK 1
#define P_INTRA 2
#define P_INTRA_SINK 3
#define P_ASHAPE 4
#define RUN_INTS 7   /* i0, len, c0, c1, image, step, head (-1: the launch's unit); a second launch's run
                        (head >= 0): rows at, len, parts at, n_parts, -1, 0, head */
#define PART_INTS 8  /* kind, then Vertical-Slash: n_vertical, at, n_runs, at; Grid: stride, phase, lines;
                        A-shape: n_sink, n_local; then the stream: perm at (-1: positions), n_coord */
#define DYN_VS 1
#define DYN_GRID 2
#define DYN_ALL 3
#define DYN_ASHAPE 4
#define DYN_BLOCK 64 /* queries that share one set of diagonal runs (src/attention/dyn.h OC_DYN_BLOCK) */

/* Row p's window: keys j < sk or lo <= j <= hi (src/attention/attn.c row_window). */
typedef struct { int sk, lo, hi; } oc_win;

inline oc_win oc_row_window(int causal, int kind, int n_sink, int n_local, int p) {
    oc_win w;
    int ashape = kind == P_ASHAPE;
    w.hi = causal || ashape ? p : BIG;
    w.lo = ashape ? p - n_local + 1 : 0;
    w.sk = ashape ? (causal ? min(n_sink, p + 1) : n_sink) : 0;
    return w;
}

inline int oc_win_keeps(oc_win w, int j) { return j < w.sk || (j >= w.lo && j <= w.hi); }

/* Up to two sorted, disjoint intervals [lo, hi) from two that may overlap or be empty. */
typedef struct { int n, lo0, hi0, lo1, hi1; } oc_ivals;

inline oc_ivals oc_ivals_of(int a0, int b0, int a1, int b1) {
    oc_ivals r;
    r.n = 0;
    r.lo0 = r.hi0 = r.lo1 = r.hi1 = 0;
    if (a0 < b0) { r.lo0 = a0; r.hi0 = b0; r.n = 1; }
    if (a1 < b1) {
        if (r.n == 0) { r.lo0 = a1; r.hi0 = b1; r.n = 1; }
        else { r.lo1 = a1; r.hi1 = b1; r.n = 2; }
    }
    if (r.n == 2) {
        if (r.lo1 < r.lo0) {
            int t = r.lo0; r.lo0 = r.lo1; r.lo1 = t;
            t = r.hi0; r.hi0 = r.hi1; r.hi1 = t;
        }
        if (r.lo1 <= r.hi0) { r.hi0 = max(r.hi0, r.hi1); r.n = 1; }
    }
    return r;
}

/* The keys a work-group walks: virtual interval v = s * n_cand + k is candidate interval k of C
 * cut to window-union interval s and to the chunk [kw0, kw1). s outer keeps them ascending: two
 * union intervals only come from A-shape, whose C is one interval. */
typedef struct {
    int n_cand, c0, c1, g, sinks, intra, n_img, n_some, kw0, kw1;
    int slo[2], shi[2];
    const __global int *img;   /* per image: start, end, number of sinks */
} oc_keyset;

/* Candidate interval k of C: n_cand 1: [c0, c1). Else C of an image row (image g) under a
 * BlindSight pattern (src/attention/attn.c cand_next): k = 2i the text before image i (i = n_img: after the
 * last one), k = 2i + 1 the part of image i it keeps: all of it (own image, Intra kinds), its
 * sinks (Sink kinds), or nothing. */
inline int2 oc_cand(const oc_keyset *ks, int k) {
    if (ks->n_cand == 1) return (int2)(ks->c0, ks->c1);
    int i = k >> 1;
    if ((k & 1) == 0) {
        int lo = i == 0 ? 0 : ks->img[3 * (i - 1) + 1], hi = i == ks->n_img ? BIG : ks->img[3 * i];
        return (int2)(max(lo, ks->c0), min(hi, ks->c1));
    }
    int s = ks->img[3 * i], e = ks->img[3 * i + 1];
    int hi = ks->intra && i == ks->g ? e : ks->sinks ? s + ks->img[3 * i + 2] : s;
    return (int2)(max(s, ks->c0), min(hi, ks->c1));
}

inline int2 oc_vint(const oc_keyset *ks, int v) {
    int s = v / ks->n_cand;
    int2 c = oc_cand(ks, v - s * ks->n_cand);
    return (int2)(max(c.x, max(ks->slo[s], ks->kw0)), min(c.y, min(ks->shi[s], ks->kw1)));
}

/* The key n places after the cursor (v, pos) (n = 0: the cursor's own), or -1 when the set ends
 * first; the cursor moves there. */
inline int oc_walk(const oc_keyset *ks, int *v, int *pos, int n) {
    int nv = ks->n_some * ks->n_cand;
    while (*v < nv) {
        int2 iv = oc_vint(ks, *v);
        int p = max(*pos, iv.x);
        if (p < iv.y) {
            if (n < iv.y - p) {
                *pos = p + n;
                return p + n;
            }
            n -= iv.y - p;
        }
        (*v)++;
        *pos = 0;
    }
    return -1;
}

/* The keys of one part of a second-launch run (dyn.h), generated in ascending coordinates from pos
 * up to hi; a coordinate's key is perm[c] (a 2D-Boundary stream) or c. Streams ascend in position,
 * so the part ends at the first key past pmax (the base mask's bound for the run's last row). */
typedef struct {
    int kind, pos, hi, pmax;
    int b, nv, vi, nd, di;              /* Vertical-Slash: block start, columns, diagonal runs */
    const __global int *v, *dr, *perm;  /* columns ascending; runs (lo, hi) relative to b, ascending */
    int all, s, fv, fs;                 /* Grid: every key (a horizontal line's rows); stride; next
                                           vertical-line and diagonal coordinate, BIG when off */
    int sink, lo2;                      /* A-shape: sinks [0, sink), then from lo2 */
} oc_dyngen;

/* Part pt for rows whose coordinates run from c_first to c_last (ascending), keys up to position pmax. */
inline oc_dyngen oc_dyn_init(const __global int *dyn, const __global int *pt, int c_first, int c_last, int pmax) {
    oc_dyngen gn;
    gn.kind = pt[0];
    gn.pos = 0;
    gn.pmax = pmax;
    gn.perm = pt[5] >= 0 ? dyn + pt[5] : 0;
    gn.hi = gn.perm ? pt[6] : min(pt[6], pmax + 1);
    gn.b = c_first - c_first % DYN_BLOCK;
    gn.nv = gn.vi = gn.nd = gn.di = 0;
    gn.v = gn.dr = dyn;
    gn.all = 0;
    gn.s = 1;
    gn.fv = gn.fs = BIG;
    gn.sink = gn.lo2 = 0;
    if (gn.kind == DYN_VS) {
        gn.nv = pt[1];
        gn.v = dyn + pt[2];
        gn.nd = pt[3];
        gn.dr = dyn + pt[4];
    } else if (gn.kind == DYN_GRID) {
        int s = pt[1], phase = pt[2], lines = pt[3];
        int rq = ((c_first - phase) % s + s) % s;   /* the rows' class, relative to the phase */
        gn.s = s;
        gn.all = (lines & 1) && rq == 0;
        if (lines & 2) gn.fv = phase % s;
        if (lines & 4) gn.fs = c_first % s;
    } else if (gn.kind == DYN_ASHAPE) {
        gn.sink = pt[1];
        gn.lo2 = max(0, c_first - pt[2] + 1);
        gn.hi = min(gn.hi, c_last + 1);
    }
    return gn;
}

/* The next key of the part (its coordinate in *coord), or -1 when it ends. */
inline int oc_dyn_next(oc_dyngen *gn, int *coord) {
    if (gn->pos >= gn->hi) return -1;
    int c;
    if (gn->kind == DYN_VS) {
        while (gn->di < gn->nd && gn->b + gn->dr[2 * gn->di + 1] <= gn->pos) gn->di++;
        while (gn->vi < gn->nv && gn->v[gn->vi] < gn->pos) gn->vi++;
        int dc = gn->di < gn->nd ? max(gn->pos, gn->b + gn->dr[2 * gn->di]) : BIG;
        int vc = gn->vi < gn->nv ? gn->v[gn->vi] : BIG;
        c = min(dc, vc);
    } else if (gn->kind == DYN_GRID && !gn->all) {
        c = min(gn->fv, gn->fs);
        if (gn->fv == c) gn->fv += gn->s;
        if (gn->fs == c) gn->fs += gn->s;
    } else if (gn->kind == DYN_ASHAPE) {
        c = gn->pos >= gn->sink && gn->pos < gn->lo2 ? gn->lo2 : gn->pos;
    } else {
        c = gn->pos;
    }
    int j = c < gn->hi ? (gn->perm ? gn->perm[c] : c) : BIG;
    if (c >= gn->hi || j > gn->pmax) {
        gn->pos = gn->hi;
        return -1;
    }
    gn->pos = c + 1;
    *coord = c;
    return j;
}

/* A Vertical-Slash part's next tile without walking it key by key: inside a diagonal run the
 * tile is a stretch of consecutive coordinates (c0 .. c0 + n - 1, *mode 1), else it is the
 * columns before the next run (v[c0 .. c0 + n - 1], *mode 2, found by a binary search); the items
 * write the keys themselves. The same keys in the same order as oc_dyn_next, each once (a column
 * inside a run is skipped as there), a tile only shorter where a run or the columns end. *last:
 * the tile's last key. Returns n (0: the part ended). */
inline int oc_vs_coord(const oc_dyngen *gn, int mode, int c0, int t) { return mode == 1 ? c0 + t : gn->v[c0 + t]; }

inline int oc_vs_tile(oc_dyngen *gn, int *mode, int *c0, int *last) {
    int pos = gn->pos;
    while (pos < gn->hi) {
        while (gn->di < gn->nd && gn->b + gn->dr[2 * gn->di + 1] <= pos) gn->di++;
        while (gn->vi < gn->nv && gn->v[gn->vi] < pos) gn->vi++;
        int rs = gn->di < gn->nd ? gn->b + gn->dr[2 * gn->di] : BIG, n;
        if (rs <= pos) {
            *mode = 1;
            *c0 = pos;
            n = min(min(gn->b + gn->dr[2 * gn->di + 1], gn->hi), pos + BK) - pos;
        } else {
            int bound = min(rs, gn->hi), lo = 0, hi = min(BK, gn->nv - gn->vi);
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (gn->v[gn->vi + mid] < bound) lo = mid + 1;
                else hi = mid;
            }
            if (lo == 0) {   /* no column before the run (or the end): go there */
                pos = bound;
                continue;
            }
            *mode = 2;
            *c0 = gn->vi;
            n = lo;
        }
        int cl = oc_vs_coord(gn, *mode, *c0, n - 1), jl = gn->perm ? gn->perm[cl] : cl;
        if (jl > gn->pmax) {   /* the stream's keys ascend: the first past pmax ends the part */
            int lo = 0, hi = n - 1;
            while (lo < hi) {
                int mid = (lo + hi) / 2, cm = oc_vs_coord(gn, *mode, *c0, mid);
                if ((gn->perm ? gn->perm[cm] : cm) > gn->pmax) hi = mid;
                else lo = mid + 1;
            }
            gn->pos = gn->hi;
            if (lo == 0) return 0;
            cl = oc_vs_coord(gn, *mode, *c0, lo - 1);
            *last = gn->perm ? gn->perm[cl] : cl;
            return lo;
        }
        gn->pos = cl + 1;
        if (*mode == 2) gn->vi += n;
        *last = jl;
        return n;
    }
    gn->pos = gn->hi;
    return 0;
}

/* Four elements of a K/V or Q row starting at element at; past n_left elements: 0. */
inline float4 oc_load4(const __global uchar *base, int f16, size_t at, int n_left) {
    if (n_left >= 4)
        return f16 ? vload_half4(0, (const __global half *)(base + 2 * at)) : vload4(0, (const __global float *)(base + 4 * at));
    float r[4];
    for (int e = 0; e < 4; e++)
        r[e] = e >= n_left ? 0.0f
             : f16 ? vload_half(at + e, (const __global half *)base) : ((const __global float *)base)[at + e];
    return (float4)(r[0], r[1], r[2], r[3]);
}

inline float oc_comp(float4 v, int e) { return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w; }

/* The image holding token j (binary search over the spans), or -1 for text. */
inline int oc_image_of(const __global int *img, int n_img, int j) {
    int lo = 0, hi = n_img;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (img[3 * mid + 1] <= j) lo = mid + 1; else hi = mid;
    }
    return lo < n_img && img[3 * lo] <= j ? lo : -1;
}

/* Tile load: rows t of BK (key indices kidx[t], -1: zeros) x C4 float4s of src into dst. In
 * batches of LB elements per item, each in two phases, loads into registers, then stores: an
 * item has LB loads in flight at once instead of one global latency per element (a loop whose
 * count depends on d waits for each load before the next), and LB bounds the registers (4 LB).
 * Element e = lid + WG n; its (row, column) is stepped, not divided, from the item's first. */
#define NLD ((BK * (DMAX / 4) + WG - 1) / WG)
#define LB (NLD < 8 ? NLD : 8)
/* sel (Q-Cache VLA's k_shared flags, attn_call.h; NULL: none): key j with sel[j] != 0 loads from
 * off_sel instead of off. */
inline void oc_load_tile(__local float4 *dst, const __local int *kidx, const __global uchar *src, int f16, int off,
                         const __global uchar *sel, int off_sel, int st, int col0, int d, int C4, int LS4, int lid) {
    const int dt = WG / C4, dc = WG - dt * C4;
    int t = lid / C4, c = lid - t * C4;
    for (int n0 = 0; n0 < NLD && t < BK; n0 += LB) {
        float4 val[LB];
        int tb = t, cb = c;
        #pragma unroll
        for (int n = 0; n < LB; n++) {
            int j = t < BK ? kidx[t] : -1;
            int o = j >= 0 && sel && sel[j] ? off_sel : off;
            val[n] = j < 0 ? (float4)(0.0f) : oc_load4(src, f16, (size_t)o + (size_t)j * st + (size_t)col0 + 4 * c, d - 4 * c);
            t += dt;
            c += dc;
            if (c >= C4) { c -= C4; t++; }
        }
        #pragma unroll
        for (int n = 0; n < LB; n++) {
            if (tb < BK) dst[tb * LS4 + cb] = val[n];
            tb += dt;
            cb += dc;
            if (cb >= C4) { cb -= C4; tb++; }
        }
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void oc_attn(const __global float *q, int q_off, int q_st, int q_sh,
             const __global uchar *k, int k_off, int k_st, int k_sh,
             const __global uchar *k_sel, int k_sel_off, int has_k_sel,
             const __global uchar *v, int v_off, int v_st, int v_sh, int kv_f16,
             __global float *out, int o_off, int o_st, int o_sh, __global float *partials,
             const __global int *runs, int n_runs, const __global int *img, int n_img,
             const __global int *pat_buf, int pat_off, int has_pats, const __global int *dyn, int has_dyn,
             int head_runs, __global uint *counts, int count_base, int want_counts,
             int n_head, int n_rep, int d, int n_q, int n_kv, int q_offset, int causal, int stacked,
             int chunk_keys, float qscale,
             __local float4 *qs4, __local float4 *kvs4, __local float4 *ps4, __local float *red, __local int *kloc) {
    const int lid = get_local_id(0), rg = lid / CG, cg = lid - rg * CG;
    const __global int *pats = pat_buf + pat_off;   /* per head: kind, n_sink, n_local */
    const int n_units = head_runs ? 1 : stacked ? n_head / n_rep : n_head, gid = get_group_id(0);
    const int run = n_runs - 1 - gid / n_units;   /* largest causal runs first, every unit of a run together */
    const int unit = gid - (n_runs - 1 - run) * n_units, chunk = get_group_id(2);
    const __global int *R = runs + RUN_INTS * run;
    const int i0 = R[0], len = R[1], image = R[4], step = R[5];
    const int h0 = head_runs ? R[6] : stacked ? unit * n_rep : unit, nh = stacked ? n_rep : 1;
    const int g = stacked ? unit : h0 / n_rep;
    const int rows = nh * len;
    const int dk = has_dyn && !stacked ? dyn[h0] : 0;   /* a prefill head: its own launch */
    const size_t item = count_base + ((size_t)chunk * n_units + unit) * n_runs + run;
    if (dk != 0 && !head_runs) {
        if (want_counts && lid == 0) counts[2 * item] = counts[2 * item + 1] = 0;
        return;
    }
    const int C4 = (d + 3) >> 2, LS4 = C4 | 1;   /* local row: float4s, odd so rows start on other banks */
    __local int *kidx = kloc, *kimg = kloc + BK, *ksink = kloc + 2 * BK, *cnt = kloc + 3 * BK;
    __local int *dstate = kloc + 3 * BK + WG;   /* a second-launch tile: key count, A-shape sizes, last key */
    __local int *kcoord = kimg;                 /* ... and its keys' coordinates (kimg is stacked mode's) */
    __local float *ps = (__local float *)ps4;

    /* this item's rows: head, query index, window, BlindSight flags */
    int r_ok[RPT], r_h[RPT], r_i[RPT], r_c[RPT], r_bs[RPT], r_sinks[RPT], r_intra[RPT];
    oc_win r_w[RPT];
    for (int a = 0; a < RPT; a++) {
        int r = rg + RG * a;
        r_ok[a] = r < rows;
        r_h[a] = h0 + (r_ok[a] ? r / len : 0);
        r_i[a] = head_runs ? dyn[i0 + 2 * (r_ok[a] ? r : 0)] : i0 + (r_ok[a] ? r % len : 0) * step;
        r_c[a] = head_runs ? dyn[i0 + 2 * (r_ok[a] ? r : 0) + 1] : 0;
        int kind = has_pats ? pats[3 * r_h[a]] : 0;
        r_w[a] = oc_row_window(causal, kind, has_pats ? pats[3 * r_h[a] + 1] : 0,
                               has_pats ? pats[3 * r_h[a] + 2] : 1, q_offset + r_i[a]);
        r_bs[a] = image >= 0 && kind >= P_SINK && kind <= P_INTRA_SINK;
        r_sinks[a] = kind != P_INTRA;
        r_intra[a] = kind != P_SINK;
    }

    /* the key set */
    oc_keyset ks;
    ks.c0 = R[2];
    ks.c1 = R[3];
    ks.img = img;
    ks.n_img = n_img;
    ks.g = image;
    ks.kw0 = chunk * chunk_keys;
    ks.kw1 = min(n_kv, ks.kw0 + chunk_keys);
    oc_ivals all;
    all.n = 0;
    all.lo0 = all.hi0 = all.lo1 = all.hi1 = 0;
    if (stacked) {
        ks.n_cand = 1;
        ks.sinks = ks.intra = 0;
        ks.n_some = 1;
        ks.slo[0] = 0;
        ks.shi[0] = causal ? q_offset + i0 + len : BIG;
        ks.slo[1] = ks.shi[1] = 0;
    } else {
        int kind = has_pats ? pats[3 * h0] : 0, n_sink = has_pats ? pats[3 * h0 + 1] : 0;
        int n_local = has_pats ? pats[3 * h0 + 2] : 1;
        int bs = image >= 0 && kind >= P_SINK && kind <= P_INTRA_SINK;
        ks.n_cand = bs ? 2 * n_img + 1 : 1;
        ks.sinks = kind != P_INTRA;
        ks.intra = kind != P_SINK;
        oc_win wa = oc_row_window(causal, kind, n_sink, n_local, q_offset + i0);
        oc_win wb = oc_row_window(causal, kind, n_sink, n_local, q_offset + i0 + (len - 1) * step);
        oc_ivals some = oc_ivals_of(0, wb.sk, wa.lo, wb.hi + 1);
        all = oc_ivals_of(0, wa.sk, wb.lo, wa.hi + 1);
        ks.n_some = some.n;
        ks.slo[0] = some.lo0; ks.shi[0] = some.hi0;
        ks.slo[1] = some.lo1; ks.shi[1] = some.hi1;
    }

    /* Q, scaled, into local memory; rows past the run and columns past d are 0 */
    for (int e = lid; e < BQ * C4; e += WG) {
        int r = e / C4, c = (e - r * C4) * 4;
        float4 val = (float4)(0.0f);
        if (r < rows) {
            int h = h0 + r / len, i = head_runs ? dyn[i0 + 2 * r] : i0 + (r % len) * step;
            val = oc_load4((const __global uchar *)q, 0, (size_t)q_off + (size_t)i * q_st + (size_t)h * q_sh + c, d - c) * qscale;
        }
        qs4[r * LS4 + (c >> 2)] = val;
    }

    float m[RPT], l[RPT];
    float4 o[RPT][NC4];
    for (int a = 0; a < RPT; a++) {
        m[a] = -INFINITY;
        l[a] = 0.0f;
        for (int c = 0; c < NC4; c++) o[a][c] = (float4)(0.0f);
    }
    uint kept = 0, executed = 0;
    int cv = 0, cpos = 0;
    int next = dk ? 0 : oc_walk(&ks, &cv, &cpos, 0);
    /* a second-launch run's keys: its parts in turn; rows ascend in position and coordinate */
    int part = 0, n_parts = head_runs ? R[3] : 0;
    const int c_first = head_runs ? dyn[i0 + 1] : 0, c_last = head_runs ? dyn[i0 + 2 * (len - 1) + 1] : 0;
    const int p_first = head_runs ? q_offset + dyn[i0] : 0;
    const int pmax = causal && head_runs ? q_offset + dyn[i0 + 2 * (len - 1)] : BIG;
    oc_dyngen gen;
    if (dk) gen = oc_dyn_init(dyn, dyn + R[2], c_first, c_last, pmax);
    while (next >= 0) {
        barrier(CLK_LOCAL_MEM_FENCE);   /* the previous tile is done with kvs, ps and kidx */
        if (dk) {
            if (lid == 0) {
                int n = 0, j, cc = 0, mode = 0, c0 = 0, last = 0, vs = 0;
                while (part < n_parts) {   /* a tile takes keys of one part */
                    vs = gen.kind == DYN_VS;
                    if (vs) {   /* the items write the keys (oc_vs_tile) */
                        n = oc_vs_tile(&gen, &mode, &c0, &last);
                    } else {
                        while (n < BK && (j = oc_dyn_next(&gen, &cc)) >= 0) {
                            kidx[n] = j;
                            kcoord[n++] = cc;
                        }
                        mode = 0;
                        last = n ? kidx[n - 1] : 0;
                    }
                    if (n == BK || (vs && n > 0)) break;
                    dstate[1] = gen.kind == DYN_ASHAPE;
                    dstate[2] = gen.sink;
                    dstate[3] = dyn[R[2] + PART_INTS * part + 2];
                    if (++part < n_parts) gen = oc_dyn_init(dyn, dyn + R[2] + PART_INTS * part, c_first, c_last, pmax);
                    if (n > 0) break;
                }
                if (n == BK || (vs && n > 0)) {
                    dstate[1] = gen.kind == DYN_ASHAPE;
                    dstate[2] = gen.sink;
                    dstate[3] = dyn[R[2] + PART_INTS * part + 2];
                }
                if (!mode)
                    for (int t = n; t < BK; t++) kidx[t] = -1;
                dstate[0] = n;
                dstate[4] = last;
                dstate[5] = mode;
                dstate[6] = c0;
                dstate[7] = part;
            }
        } else {
            for (int t = lid; t < BK; t += WG) {
                int cv2 = cv, cp2 = cpos;
                int j = oc_walk(&ks, &cv2, &cp2, t);
                kidx[t] = j;
                if (stacked) {
                    int gi = j >= 0 ? oc_image_of(img, n_img, j) : -1;
                    kimg[t] = gi;
                    ksink[t] = gi >= 0 && j < img[3 * gi] + img[3 * gi + 2];
                }
            }
            next = oc_walk(&ks, &cv, &cpos, BK);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        int n_valid = BK, t_ashape = 0, t_sink = 0, t_local = 1;
        if (dk) {
            n_valid = dstate[0];   /* the same for every item: read after the barrier */
            if (n_valid == 0) break;
            t_ashape = dstate[1];
            t_sink = dstate[2];
            t_local = dstate[3];
            const int mode = dstate[5], c0 = dstate[6];
            if (mode) {   /* a Vertical-Slash tile: a stretch of coordinates or a run of columns */
                const __global int *pt = dyn + R[2] + PART_INTS * dstate[7];
                const __global int *vv = dyn + pt[2], *perm = pt[5] >= 0 ? dyn + pt[5] : 0;
                for (int t = lid; t < BK; t += WG) {
                    int j = -1;
                    if (t < n_valid) {
                        int c = mode == 1 ? c0 + t : vv[c0 + t];
                        j = perm ? perm[c] : c;
                    }
                    kidx[t] = j;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        } else if (next < 0) {
            while (n_valid > 0 && kidx[n_valid - 1] < 0) n_valid--;
        }
        /* a second-launch tile is full when no row's base mask cuts its last key and no A-shape
         * window applies */
        int full = dk ? !t_ashape && (!causal || dstate[4] <= p_first)
                      : !stacked && all.n > 0 &&
                        ((kidx[0] >= all.lo0 && kidx[n_valid - 1] < all.hi0) ||
                         (all.n == 2 && kidx[0] >= all.lo1 && kidx[n_valid - 1] < all.hi1));
        oc_load_tile(kvs4, kidx, k, kv_f16, k_off, has_k_sel ? k_sel : 0, k_sel_off, k_st, g * k_sh, d, C4, LS4, lid);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* S = Q K^T for this item's RPT x KPT block */
        float s[RPT][KPT];
        #pragma unroll
        for (int a = 0; a < RPT; a++)
            for (int b = 0; b < KPT; b++) s[a][b] = 0.0f;
        for (int c = 0; c < C4; c++) {
            float4 qv[RPT], kv[KPT];
            #pragma unroll
            for (int a = 0; a < RPT; a++) qv[a] = qs4[(rg + RG * a) * LS4 + c];
            #pragma unroll
            for (int b = 0; b < KPT; b++) kv[b] = kvs4[(cg + CG * b) * LS4 + c];
            #pragma unroll
            for (int a = 0; a < RPT; a++)
                for (int b = 0; b < KPT; b++)
                    s[a][b] = fma(qv[a].w, kv[b].w, fma(qv[a].z, kv[b].z, fma(qv[a].y, kv[b].y, fma(qv[a].x, kv[b].x, s[a][b]))));
        }
        /* mask, row maxima */
        int kj[KPT], ki[KPT], kk[KPT];
        for (int b = 0; b < KPT; b++) {
            kj[b] = kidx[cg + CG * b];
            ki[b] = stacked || t_ashape ? kimg[cg + CG * b] : -1;   /* t_ashape: the key's coordinate */
            kk[b] = stacked ? ksink[cg + CG * b] : 0;
        }
        for (int a = 0; a < RPT; a++) {
            float mx = -INFINITY;
            for (int b = 0; b < KPT; b++) {
                int keep = kj[b] >= 0 && r_ok[a];
                if (keep && !full) {
                    keep = oc_win_keeps(r_w[a], kj[b]);
                    if (stacked && r_bs[a])
                        keep = keep && (ki[b] < 0 || (r_sinks[a] && kk[b]) || (r_intra[a] && ki[b] == image));
                    if (t_ashape)   /* the part's window in coordinates (dyn.h) */
                        keep = keep && (ki[b] < t_sink || (ki[b] > r_c[a] - t_local && ki[b] <= r_c[a]));
                }
                kept += keep;
                if (!keep) s[a][b] = -INFINITY;
                mx = fmax(mx, s[a][b]);
            }
            red[(rg + RG * a) * CG + cg] = mx;
        }
        if (lid == 0) executed += (uint)rows * (uint)n_valid;
        barrier(CLK_LOCAL_MEM_FENCE);   /* S is done with kvs; the maxima are in red */
        /* V tile into the same local memory */
        oc_load_tile(kvs4, kidx, v, kv_f16, v_off, 0, 0, v_st, g * v_sh, d, C4, LS4, lid);
        /* online softmax: new maxima, P into local memory, rescale the running sums */
        for (int a = 0; a < RPT; a++) {
            int r = rg + RG * a;
            float mt = red[r * CG];
            for (int c = 1; c < CG; c++) mt = fmax(mt, red[r * CG + c]);
            float mn = fmax(m[a], mt);
            float alpha = mn == -INFINITY ? 1.0f : exp2(m[a] - mn);
            float sum = 0.0f;
            for (int b = 0; b < KPT; b++) {
                float p = s[a][b] == -INFINITY ? 0.0f : exp2(s[a][b] - mn);
                ps[r * PS + cg + CG * b] = p;
                sum += p;
            }
            l[a] = l[a] * alpha + sum;
            m[a] = mn;
            if (alpha != 1.0f)
                for (int c = 0; c < NC4; c++) o[a][c] *= alpha;
        }
        barrier(CLK_LOCAL_MEM_FENCE);   /* P and V are in place */
        /* O += P V, 4 keys at a time (P and V of the keys past n_valid are 0) */
        for (int t = 0; t < n_valid; t += 4) {
            float4 pa[RPT];
            #pragma unroll
            for (int a = 0; a < RPT; a++) pa[a] = ps4[((rg + RG * a) * PS + t) >> 2];
            #pragma unroll
            for (int c = 0; c < NC4; c++) {
                if (4 * (cg + CG * c) >= d) break;
                const __local float4 *vc = kvs4 + t * LS4 + cg + CG * c;
                float4 v0 = vc[0], v1 = vc[LS4], v2 = vc[2 * LS4], v3 = vc[3 * LS4];
                #pragma unroll
                for (int a = 0; a < RPT; a++)
                    o[a][c] = fma((float4)(pa[a].w), v3, fma((float4)(pa[a].z), v2,
                              fma((float4)(pa[a].y), v1, fma((float4)(pa[a].x), v0, o[a][c]))));
            }
        }
    }

    /* l is split over the CG items of a row: sum it in a fixed order */
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int a = 0; a < RPT; a++) red[(rg + RG * a) * CG + cg] = l[a];
    if (want_counts) cnt[lid] = (int)kept;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int a = 0; a < RPT; a++) {
        if (!r_ok[a]) continue;
        int r = rg + RG * a;
        float lt = 0.0f;
        for (int c = 0; c < CG; c++) lt += red[r * CG + c];
        if (chunk_keys < n_kv) {   /* split: this chunk's (max, sum, unnormalised output) */
            __global float *slot = partials + (((size_t)chunk * n_head + r_h[a]) * n_q + r_i[a]) * (size_t)(d + 2);
            if (cg == 0) {
                slot[0] = m[a];
                slot[1] = lt;
            }
            for (int c = 0; c < NC4; c++)
                for (int e = 0; e < 4; e++) {
                    int col = 4 * (cg + CG * c) + e;
                    if (col < d) slot[2 + col] = oc_comp(o[a][c], e);
                }
        } else {
            __global float *dst = out + o_off + (size_t)r_i[a] * o_st + (size_t)r_h[a] * o_sh;
            float inv = lt > 0.0f ? 1.0f / lt : 0.0f;   /* every key masked: output 0 */
            for (int c = 0; c < NC4; c++)
                for (int e = 0; e < 4; e++) {
                    int col = 4 * (cg + CG * c) + e;
                    if (col < d) dst[col] = oc_comp(o[a][c], e) * inv;
                }
        }
    }
    if (want_counts && lid == 0) {
        uint sum = 0;
        for (int i = 0; i < WG; i++) sum += (uint)cnt[i];
        counts[2 * item] = sum;
        counts[2 * item + 1] = executed;
    }
}

/* Flash-decoding merge: item (column, head * n_q + query) combines the chunks' partial results in
 * chunk order (src/attention/attn.c merge_fn). */
__kernel void oc_attn_merge(__global float *out, int o_off, int o_st, int o_sh, const __global float *partials,
                            int n_chunks, int n_head, int n_q, int d) {
    int col = get_global_id(0), row = get_global_id(1);
    if (col >= d || row >= n_head * n_q) return;
    int h = row / n_q, i = row - h * n_q;
    size_t slot = (size_t)d + 2, cstride = (size_t)n_head * n_q * slot;
    const __global float *first = partials + (size_t)row * slot;
    float mx = -INFINITY;
    for (int c = 0; c < n_chunks; c++) {
        const __global float *s = first + c * cstride;
        if (s[1] > 0.0f && s[0] > mx) mx = s[0];
    }
    float val = 0.0f, sum = 0.0f;
    for (int c = 0; mx != -INFINITY && c < n_chunks; c++) {
        const __global float *s = first + c * cstride;
        if (!(s[1] > 0.0f)) continue;
        float f = exp2(s[0] - mx);
        sum += s[1] * f;
        val += f * s[2 + col];
    }
    out[o_off + (size_t)i * o_st + (size_t)h * o_sh + col] = mx == -INFINITY ? 0.0f : val / sum;
}

/* A call's counters summed where they are (cl_attn.h oc_cl_attn_defer_counts): one work-group of
 * 256 adds every work-group's kept and executed pairs, in a fixed order (integers: the same in
 * any), into acc[0] and acc[1], so a sparse call need not wait to read them. */
__kernel __attribute__((reqd_work_group_size(256, 1, 1)))
void oc_attn_count(const __global uint *counts, int n_items, __global ulong *acc) {
    __local ulong sk[256], se[256];
    const int lid = get_local_id(0);
    ulong k = 0, e = 0;
    for (int i = lid; i < n_items; i += 256) {
        k += counts[2 * i];
        e += counts[2 * i + 1];
    }
    sk[lid] = k;
    se[lid] = e;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 128; s > 0; s >>= 1) {
        if (lid < s) {
            sk[lid] += sk[lid + s];
            se[lid] += se[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        acc[0] += sk[0];
        acc[1] += se[0];
    }
}
