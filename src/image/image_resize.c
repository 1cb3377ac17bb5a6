/* image_resize.c: bicubic resampling that reproduces Pillow's Image.resize(size, BICUBIC) on RGB
 * images bit for bit (Pillow src/libImaging/Resample.c, unchanged in this respect from Pillow 4.3
 * to 11), because HF's Qwen2VLImageProcessor resizes with Pillow and the model was trained on that.
 * Pillow's algorithm, re-implemented here from its description:
 *  - separable: a horizontal pass over only the source rows the vertical pass will read, into an
 *    8-bit intermediate, then a vertical pass; a pass whose size does not change is skipped.
 *    Here the intermediate is a ring of as many rows as one output row's taps (the windows of
 *    successive output rows only move down), so the memory follows the output size and the
 *    kernel width, not the source's height (oc_image_resize_bytes states it exactly);
 *  - kernel: cubic convolution with a = -0.5, support 2, widened by the downscale factor
 *    (antialiasing); output pixel xx samples around center = (xx + 0.5) * in/out;
 *  - taps are normalized to sum 1 in double, then rounded to fixed point with 22 fraction bits
 *    (PRECISION_BITS = 32 - 8 - 2), accumulated from 1 << 21 (rounding) and clamped to 0..255. */
#include "image/image.h"

#include <math.h>
#include <string.h>

#define PRECISION_BITS 22

typedef struct axis_coeffs {
    int32_t ksize;         /* taps per output sample (room; n below may be smaller) */
    int32_t *bounds;       /* [out_size][2]: first source index, number of taps */
    int32_t *k;            /* [out_size][ksize] fixed-point weights */
    double *tmp;           /* [ksize] double weights of one output sample */
    size_t bounds_bytes, k_bytes, tmp_bytes;
} axis_coeffs;

static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static void coeffs_free(axis_coeffs *c, const oc_allocator *alloc) {
    oc_mem_free(alloc, c->bounds, c->bounds_bytes);
    oc_mem_free(alloc, c->k, c->k_bytes);
    oc_mem_free(alloc, c->tmp, c->tmp_bytes);
    memset(c, 0, sizeof *c);
}

/* Pillow keeps the box in float: (double)(in1 - in0) with in0 = 0 is exact below 2^24 */
static double axis_scale(int32_t in_size, int32_t out_size) { return (double)(float)in_size / out_size; }

/* The table sizes of one axis (0 when they overflow): taps per output sample ceil(support) * 2 + 1. */
static int coeffs_size(axis_coeffs *c, int32_t in_size, int32_t out_size) {
    memset(c, 0, sizeof *c);
    const double scale = axis_scale(in_size, out_size);
    const double ksize_d = ceil(2.0 * (scale < 1.0 ? 1.0 : scale)) * 2 + 1;
    size_t n_k;
    if (ksize_d > (double)INT32_MAX / 4) return 0;
    c->ksize = (int32_t)ksize_d;
    c->tmp_bytes = (size_t)c->ksize * sizeof(double);
    return oc_mul_size((size_t)out_size, (size_t)c->ksize, &n_k) && oc_mul_size(n_k, sizeof(int32_t), &c->k_bytes) &&
           oc_mul_size((size_t)out_size, 2 * sizeof(int32_t), &c->bounds_bytes);
}

static oc_status coeffs_init(axis_coeffs *c, int32_t in_size, int32_t out_size,
                             const oc_allocator *alloc, oc_error *err) {
    const double scale = axis_scale(in_size, out_size);
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 2.0 * filterscale;
    const double ss = 1.0 / filterscale;
    if (!coeffs_size(c, in_size, out_size)) {
        memset(c, 0, sizeof *c);
        return oc_fail(err, OC_ERR_RANGE, "resize: coefficient table for %d -> %d overflows", in_size, out_size);
    }
    c->k = oc_mem_calloc(alloc, c->k_bytes);
    c->bounds = oc_mem_alloc(alloc, c->bounds_bytes);
    c->tmp = oc_mem_alloc(alloc, c->tmp_bytes);
    if (!c->k || !c->bounds || !c->tmp) {
        coeffs_free(c, alloc);
        return oc_fail(err, OC_ERR_NOMEM, "resize: cannot allocate coefficients for %d -> %d", in_size, out_size);
    }
    for (int32_t xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale;
        /* (int) truncates toward zero, as Pillow's C does; clamped to the source */
        int32_t xmin = (int32_t)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int32_t xmax = (int32_t)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        int32_t n = xmax - xmin;
        if (n < 0) n = 0;
        if (n > c->ksize) n = c->ksize;   /* cannot happen; keeps the table access provably in range */
        double ww = 0.0;
        for (int32_t x = 0; x < n; x++) {
            double w = bicubic((x + xmin - center + 0.5) * ss);
            c->tmp[x] = w;
            ww += w;
        }
        int32_t *k = c->k + (size_t)xx * (size_t)c->ksize;
        for (int32_t x = 0; x < n; x++) {
            double w = ww != 0.0 ? c->tmp[x] / ww : c->tmp[x];
            w *= (double)(1 << PRECISION_BITS);
            k[x] = (int32_t)(w < 0 ? w - 0.5 : w + 0.5);
        }
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = n;
    }
    return OC_OK;
}

static uint8_t clip8(int64_t acc) {
    if (acc < 0) return 0;
    acc >>= PRECISION_BITS;
    return acc > 255 ? 255 : (uint8_t)acc;
}

/* One row resampled along x: out[0 .. c's out_size) <- in. */
static void row_horizontal(uint8_t *out, const uint8_t *in, int32_t out_width, const axis_coeffs *c) {
    for (int32_t xx = 0; xx < out_width; xx++) {
        const int32_t xmin = c->bounds[2 * xx], n = c->bounds[2 * xx + 1];
        const int32_t *k = c->k + (size_t)xx * (size_t)c->ksize;
        const uint8_t *p = in + (size_t)xmin * 3;
        int64_t r = 1 << (PRECISION_BITS - 1), g = r, b = r;
        for (int32_t x = 0; x < n; x++, p += 3) {
            r += (int64_t)p[0] * k[x];
            g += (int64_t)p[1] * k[x];
            b += (int64_t)p[2] * k[x];
        }
        out[3 * xx] = clip8(r);
        out[3 * xx + 1] = clip8(g);
        out[3 * xx + 2] = clip8(b);
    }
}

/* dst row yy <- source rows bounds[yy] ... resampled along y. Taps run in the outer loop over
 * whole rows (acc holds one output row), so every source row is read sequentially. With ch, a
 * source row is first resampled along x into ring slot (row % cv->ksize), once: a window never
 * holds more than ksize rows and windows only move down, so the rows it reads are the last
 * ksize computed. Without ch the source rows are read in place. */
static void pass_vertical(oc_image *dst, const oc_image *src, const axis_coeffs *ch, uint8_t *ring,
                          const axis_coeffs *cv, int64_t *acc) {
    const size_t n_bytes_row = (size_t)dst->width_px * 3;
    int32_t next = 0;   /* the next source row the horizontal pass fills into the ring */
    for (int32_t yy = 0; yy < dst->height_px; yy++) {
        const int32_t ymin = cv->bounds[2 * yy], n = cv->bounds[2 * yy + 1];
        const int32_t *k = cv->k + (size_t)yy * (size_t)cv->ksize;
        if (ch) {
            if (next < ymin) next = ymin;
            for (; next < ymin + n; next++)
                row_horizontal(ring + (size_t)(next % cv->ksize) * n_bytes_row,
                               src->rgb + (size_t)next * src->stride_bytes, dst->width_px, ch);
        }
        for (size_t i = 0; i < n_bytes_row; i++) acc[i] = 1 << (PRECISION_BITS - 1);
        for (int32_t y = 0; y < n; y++) {
            const uint8_t *row = ch ? ring + (size_t)((ymin + y) % cv->ksize) * n_bytes_row
                                    : src->rgb + (size_t)(ymin + y) * src->stride_bytes;
            const int64_t w = k[y];
            for (size_t i = 0; i < n_bytes_row; i++) acc[i] += (int64_t)row[i] * w;
        }
        uint8_t *out = dst->rgb + (size_t)yy * dst->stride_bytes;
        for (size_t i = 0; i < n_bytes_row; i++) out[i] = clip8(acc[i]);
    }
}

/* payload += n, blocks += 1 (0 on overflow). */
static int add_block(size_t *payload, size_t *n_blocks, size_t n) {
    (*n_blocks)++;
    return oc_add_size(*payload, n, payload);
}

int oc_image_resize_bytes(int32_t in_width_px, int32_t in_height_px, int32_t out_width_px, int32_t out_height_px,
                          size_t *payload, size_t *n_blocks) {
    size_t out_bytes, acc_bytes = (size_t)out_width_px * 3 * sizeof(int64_t), ring_bytes;
    *payload = *n_blocks = 0;
    if (in_width_px <= 0 || in_height_px <= 0 || out_width_px <= 0 || out_height_px <= 0 ||
        !oc_mul_size((size_t)out_width_px * 3, (size_t)out_height_px, &out_bytes) ||
        !add_block(payload, n_blocks, out_bytes))
        return 0;
    if (out_width_px == in_width_px && out_height_px == in_height_px) return 1;   /* a copy */
    axis_coeffs cv, ch;
    if (out_width_px != in_width_px &&
        (!coeffs_size(&ch, in_width_px, out_width_px) || !add_block(payload, n_blocks, ch.k_bytes) ||
         !add_block(payload, n_blocks, ch.bounds_bytes) || !add_block(payload, n_blocks, ch.tmp_bytes)))
        return 0;
    if (out_height_px == in_height_px) return 1;   /* horizontal only: straight into out */
    if (!coeffs_size(&cv, in_height_px, out_height_px) || !add_block(payload, n_blocks, cv.k_bytes) ||
        !add_block(payload, n_blocks, cv.bounds_bytes) || !add_block(payload, n_blocks, cv.tmp_bytes) ||
        !add_block(payload, n_blocks, acc_bytes))
        return 0;
    if (out_width_px != in_width_px &&
        (!oc_mul_size((size_t)cv.ksize, (size_t)out_width_px * 3, &ring_bytes) ||
         !add_block(payload, n_blocks, ring_bytes)))
        return 0;
    return 1;
}

oc_status oc_image_resize_bicubic(oc_image *out, const oc_image *in, int32_t out_width_px,
                                  int32_t out_height_px, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "resize: NULL output");
    memset(out, 0, sizeof *out);
    if (!in || !in->rgb || in->width_px <= 0 || in->height_px <= 0 || in->stride_bytes / 3 < (size_t)in->width_px)
        return oc_fail(err, OC_ERR_INVALID, "resize: invalid source image");
    if (out_width_px <= 0 || out_height_px <= 0)
        return oc_fail(err, OC_ERR_INVALID, "resize: target size %dx%d is empty", out_width_px, out_height_px);
    /* sizes here come from smart_resize (bounded by max_pixels); only memory arithmetic limits them */
    const oc_image_limits no_limits = { INT32_MAX, INT32_MAX, INT64_MAX, 0 };
    oc_status st;
    if (out_width_px == in->width_px && out_height_px == in->height_px) {   /* Pillow copies */
        if ((st = oc_image_alloc(out, out_width_px, out_height_px, &no_limits, alloc, err))) return st;
        for (int32_t y = 0; y < out_height_px; y++)
            memcpy(out->rgb + (size_t)y * out->stride_bytes, in->rgb + (size_t)y * in->stride_bytes,
                   (size_t)out_width_px * 3);
        return OC_OK;
    }
    const int need_h = out_width_px != in->width_px, need_v = out_height_px != in->height_px;
    axis_coeffs cv, ch;
    memset(&cv, 0, sizeof cv);
    memset(&ch, 0, sizeof ch);
    int64_t *acc = NULL;
    uint8_t *ring = NULL;
    size_t acc_bytes = (size_t)out_width_px * 3 * sizeof(int64_t), ring_bytes = 0;   /* fit: out was allocated */
    if ((st = oc_image_alloc(out, out_width_px, out_height_px, &no_limits, alloc, err))) return st;
    if (need_h && (st = coeffs_init(&ch, in->width_px, out_width_px, alloc, err))) goto done;
    if (!need_v) {   /* horizontal only: every source row, straight into out */
        for (int32_t y = 0; y < out_height_px; y++)
            row_horizontal(out->rgb + (size_t)y * out->stride_bytes, in->rgb + (size_t)y * in->stride_bytes,
                           out_width_px, &ch);
        goto done;
    }
    if ((st = coeffs_init(&cv, in->height_px, out_height_px, alloc, err))) goto done;
    if (!(acc = oc_mem_alloc(alloc, acc_bytes))) {
        st = oc_fail(err, OC_ERR_NOMEM, "resize: cannot allocate a %zu-byte row accumulator", acc_bytes);
        goto done;
    }
    if (need_h && (!oc_mul_size((size_t)cv.ksize, (size_t)out_width_px * 3, &ring_bytes) ||
                   !(ring = oc_mem_alloc(alloc, ring_bytes)))) {
        st = oc_fail(err, OC_ERR_NOMEM, "resize: cannot allocate %d intermediate rows of %d pixels", (int)cv.ksize,
                     (int)out_width_px);
        goto done;
    }
    pass_vertical(out, in, need_h ? &ch : NULL, ring, &cv, acc);
done:
    if (ring) oc_mem_free(alloc, ring, ring_bytes);
    if (acc) oc_mem_free(alloc, acc, acc_bytes);
    coeffs_free(&cv, alloc);
    coeffs_free(&ch, alloc);
    if (st) oc_image_free(out);
    return st;
}
