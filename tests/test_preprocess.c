/* test_preprocess.c: Qwen2-VL preprocessing: smart_resize against hand-computed values (every
 * branch, Python's round-half-even), bicubic resampling against Pillow references
 * (tests/data/resize, written by tests/reference/make_resize_cases.py, exact equality), identity
 * and constant-image properties, normalization arithmetic, patch order on an image whose pixels
 * encode their coordinates, and HF reference fixtures (tests/data/preprocess, written by
 * tests/reference/make_preprocess_fixtures.py; skipped with a reason when absent). */
#include "check.h"
#include "image/image.h"

#include <errno.h>

/* ---- smart_resize --------------------------------------------------------------------------------- */

typedef struct { int64_t h, w, min_px, max_px; int32_t want_h, want_w; } sr_case;

static void test_smart_resize(void) {
    /* want values computed by hand from HF's formula (and confirmed with Python's math) */
    static const sr_case cases[] = {
        { 84, 112, 3136, 12845056, 84, 112 },      /* already multiples of 28: unchanged */
        { 75, 100, 3136, 12845056, 84, 112 },      /* round(2.68) = 3, round(3.57) = 4 */
        { 200, 300, 3136, 12845056, 196, 308 },    /* round(7.14) = 7, round(10.71) = 11 */
        { 42, 56, 3136, 12845056, 56, 56 },        /* 42/28 = 1.5 rounds to even 2 */
        { 70, 56, 3136, 12845056, 56, 56 },        /* 2.5 rounds to even 2 */
        { 98, 56, 3136, 12845056, 112, 56 },       /* 3.5 rounds to even 4 */
        /* min_pixels branch: beta = sqrt(min / (h * w)), ceil */
        { 84, 56, 12544, 12845056, 140, 112 },     /* beta 1.633: ceil(4.90) = 5, ceil(3.27) = 4 */
        { 30, 45, 3136, 12845056, 56, 84 },        /* beta 1.524: ceil(1.63) = 2, ceil(2.45) = 3 */
        { 14, 14, 3136, 12845056, 56, 56 },        /* round(0.5) = 0 -> area 0 < min; beta 4 */
        { 1, 1, 3136, 12845056, 56, 56 },
        { 1, 200, 3136, 12845056, 28, 812 },       /* aspect exactly 200 is allowed */
        /* max_pixels branch: beta = sqrt(h * w / max), floor, at least 28 */
        { 200, 300, 3136, 15680, 84, 140 },        /* beta 1.956: floor(3.65) = 3, floor(5.48) = 5 */
        { 6000, 8000, 3136, 12845056, 3080, 4116 },/* beta 1.933: floor(110.85), floor(147.80) */
        { 3000, 4000, 3136, 12845056, 2996, 4004 },/* 11995984 <= max: plain rounding */
        { 1080, 1920, 3136, 12845056, 1092, 1932 },
        { 28, 5600, 3136, 1003520, 28, 5600 },     /* 156800 px: within HF's class default max */
        { 100, 10000, 3136, 3136, 28, 560 },       /* floor(0.2) = 0 -> 28 (the clamp lets the area pass max) */
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        int32_t h = -1, w = -1;
        oc_error e;
        oc_status st = oc_qwen2vl_smart_resize(cases[i].h, cases[i].w, 28, cases[i].min_px, cases[i].max_px, &h, &w, &e);
        CHECKF(st == OC_OK, "case %zu: %s", i, e.message);
        CHECKF(h == cases[i].want_h && w == cases[i].want_w, "case %zu (%lldx%lld): got %dx%d, want %dx%d", i,
               (long long)cases[i].h, (long long)cases[i].w, h, w, cases[i].want_h, cases[i].want_w);
    }
    int32_t h, w;
    oc_error e;
    CHECK(oc_qwen2vl_smart_resize(1, 201, 28, 3136, 12845056, &h, &w, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "smart_resize: aspect ratio 201.0 of 201x1 exceeds 200") == 0, "%s", e.message);
    CHECK(oc_qwen2vl_smart_resize(0, 5, 28, 3136, 12845056, &h, &w, &e) == OC_ERR_INVALID);
    CHECK(oc_qwen2vl_smart_resize(5, 5, 0, 3136, 12845056, &h, &w, &e) == OC_ERR_INVALID);
    CHECK(oc_qwen2vl_smart_resize(5, 5, 28, 5000, 4000, &h, &w, &e) == OC_ERR_INVALID);
    /* every result is a multiple of the factor within [min, max] (when achievable) */
    check_rng rng = { 12345 };
    for (int i = 0; i < 2000; i++) {
        int64_t hh = check_rng_int(&rng, 1, 5000), ww = check_rng_int(&rng, 1, 5000);
        if ((hh > ww ? hh : ww) > 200 * (hh > ww ? ww : hh)) continue;
        REQUIRE(oc_qwen2vl_smart_resize(hh, ww, 28, 3136, 1003520, &h, &w, &e) == OC_OK);
        CHECKF(h % 28 == 0 && w % 28 == 0 && h >= 28 && w >= 28, "%lldx%lld -> %dx%d", (long long)hh, (long long)ww, h, w);
        CHECKF((int64_t)h * w <= 1003520, "%lldx%lld -> %dx%d above max", (long long)hh, (long long)ww, h, w);
    }
}

/* ---- bicubic resampling ------------------------------------------------------------------------------- */

static void fill_random(oc_image *img, check_rng *rng) {
    for (int32_t y = 0; y < img->height_px; y++)
        for (size_t i = 0; i < (size_t)img->width_px * 3; i++)
            img->rgb[(size_t)y * img->stride_bytes + i] = (uint8_t)check_rng_u64(rng);
}

static void test_resize_identity_and_constant(void) {
    check_rng rng = { 99 };
    oc_image src, dst;
    oc_error e;
    REQUIRE(oc_image_alloc(&src, 19, 11, NULL, NULL, &e) == OC_OK);
    fill_random(&src, &rng);
    REQUIRE(oc_image_resize_bicubic(&dst, &src, 19, 11, NULL, &e) == OC_OK);
    CHECK(memcmp(dst.rgb, src.rgb, 19 * 11 * 3) == 0);
    oc_image_free(&dst);

    /* constant images stay constant at any size, up or down, one axis or both */
    static const int32_t sizes[][2] = { { 1, 1 }, { 5, 3 }, { 19, 40 }, { 57, 11 }, { 200, 2 }, { 3, 90 } };
    for (int v = 0; v < 3; v++) {
        const uint8_t rgb[3] = { (uint8_t)(v * 120), 255, (uint8_t)(7 + v) };
        for (int32_t y = 0; y < src.height_px; y++)
            for (int32_t x = 0; x < src.width_px; x++) memcpy(src.rgb + (size_t)y * src.stride_bytes + 3 * (size_t)x, rgb, 3);
        for (size_t s = 0; s < OC_ARRAY_LEN(sizes); s++) {
            REQUIRE(oc_image_resize_bicubic(&dst, &src, sizes[s][0], sizes[s][1], NULL, &e) == OC_OK);
            int ok = 1;
            for (int32_t y = 0; y < dst.height_px; y++)
                for (int32_t x = 0; x < dst.width_px; x++) ok &= memcmp(dst.rgb + (size_t)y * dst.stride_bytes + 3 * (size_t)x, rgb, 3) == 0;
            CHECKF(ok, "constant %d not preserved at %dx%d", v, sizes[s][0], sizes[s][1]);
            oc_image_free(&dst);
        }
    }
    /* a strided view as the source gives the same result as a tight copy */
    uint8_t *wide = calloc((size_t)11 * 100, 1);
    REQUIRE(wide);
    fill_random(&src, &rng);
    for (int y = 0; y < 11; y++) memcpy(wide + (size_t)y * 100, src.rgb + (size_t)y * src.stride_bytes, 19 * 3);
    oc_image view, a, b;
    REQUIRE(oc_image_wrap_rgb8(&view, wide, 19, 11, 100, NULL, &e) == OC_OK);
    REQUIRE(oc_image_resize_bicubic(&a, &view, 30, 7, NULL, &e) == OC_OK);
    REQUIRE(oc_image_resize_bicubic(&b, &src, 30, 7, NULL, &e) == OC_OK);
    CHECK(memcmp(a.rgb, b.rgb, 30 * 7 * 3) == 0);
    oc_image_free(&a);
    oc_image_free(&b);
    free(wide);
    oc_image_free(&src);
    CHECK(oc_image_resize_bicubic(&dst, &src, 3, 3, NULL, &e) == OC_ERR_INVALID);
}

/* A small case worked by hand: one row (0, 255) upscaled 2 -> 4 (scale 0.5, support 2).
 * Output 1 samples center 0.75: taps x = 0, 1 at distances 0.25, 0.75 weigh 0.8671875 and
 * 0.2265625; normalized, x = 1 gets 0.2071429 = 868831 / 2^22, and
 * (255 * 868831 + 2^21) >> 22 = 53. Output 0 (center 0.25): x = 1 lies at 1.25, in the negative
 * lobe (-0.0703125), so the sum is negative and clamps to 0. Pillow 9.4 gives 0 53 202 255. */
static void test_resize_hand_case(void) {
    uint8_t px[6] = { 0, 0, 0, 255, 255, 255 };
    oc_image src, dst;
    oc_error e;
    REQUIRE(oc_image_wrap_rgb8(&src, px, 2, 1, 6, NULL, &e) == OC_OK);
    REQUIRE(oc_image_resize_bicubic(&dst, &src, 4, 1, NULL, &e) == OC_OK);
    CHECKF(dst.rgb[0] == 0 && dst.rgb[3] == 53 && dst.rgb[6] == 202 && dst.rgb[9] == 255, "%d %d %d %d",
           dst.rgb[0], dst.rgb[3], dst.rgb[6], dst.rgb[9]);
    oc_image_free(&dst);
    /* (0, 255, 0) -> 5: the peak stays 255, the sides are 101 (Pillow 9.4) */
    uint8_t px3[9] = { 0, 0, 0, 255, 255, 255, 0, 0, 0 };
    REQUIRE(oc_image_wrap_rgb8(&src, px3, 3, 1, 9, NULL, &e) == OC_OK);
    REQUIRE(oc_image_resize_bicubic(&dst, &src, 5, 1, NULL, &e) == OC_OK);
    CHECKF(dst.rgb[0] == 0 && dst.rgb[3] == 101 && dst.rgb[6] == 255 && dst.rgb[9] == 101 && dst.rgb[12] == 0,
           "%d %d %d %d %d", dst.rgb[0], dst.rgb[3], dst.rgb[6], dst.rgb[9], dst.rgb[12]);
    oc_image_free(&dst);
}

static oc_status load(oc_image *img, const char *dir, const char *name, oc_error *e) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return oc_image_load(img, path, NULL, NULL, e);
}

static void test_resize_matches_pillow(void) {
    const char *dir = "tests/data/resize";
    char path[512];
    snprintf(path, sizeof path, "%s/index.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        check_fail_at(__FILE__, __LINE__, "committed fixture %s is missing (tests/reference/make_resize_cases.py makes it)", path);
        return;
    }
    char line[256];
    int n_cases = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64];
        int w, h;
        if (line[0] == '#' || sscanf(line, "%63s %d %d", name, &w, &h) != 3) continue;
        oc_image src, want, got;
        oc_error e;
        char file[128];
        snprintf(file, sizeof file, "%s.in.ppm", name);
        if (load(&src, dir, file, &e)) { CHECKF(0, "%s", e.message); continue; }
        snprintf(file, sizeof file, "%s.%dx%d.ppm", name, w, h);
        if (load(&want, dir, file, &e)) { CHECKF(0, "%s", e.message); oc_image_free(&src); continue; }
        REQUIRE(oc_image_resize_bicubic(&got, &src, w, h, NULL, &e) == OC_OK);
        int n_diff = 0, max_diff = 0;
        for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) {
            int d = abs((int)got.rgb[i] - (int)want.rgb[i]);
            n_diff += d != 0;
            if (d > max_diff) max_diff = d;
        }
        CHECKF(n_diff == 0, "%s %dx%d -> %dx%d: %d values differ from Pillow (max %d)", name, src.width_px,
               src.height_px, w, h, n_diff, max_diff);
        n_cases++;
        oc_image_free(&src);
        oc_image_free(&want);
        oc_image_free(&got);
    }
    fclose(f);
    CHECKF(n_cases >= 20, "only %d resize cases found", n_cases);
}

/* ---- normalization and patches -------------------------------------------------------------------------- */

static void test_normalize_values(void) {
    /* a 28x28 image of one value per channel gives one value per channel everywhere */
    oc_qwen2vl_prep_params p;
    oc_qwen2vl_prep_defaults(&p);
    CHECK(p.max_pixels == 12845056 && p.min_pixels == 3136);
    uint8_t px[28 * 28 * 3];
    float out[4 * 1176];
    for (int v = 0; v < 256; v++) {
        for (int i = 0; i < 28 * 28; i++) { px[3 * i] = (uint8_t)v; px[3 * i + 1] = (uint8_t)(255 - v); px[3 * i + 2] = (uint8_t)(v / 2); }
        oc_image img;
        oc_error e;
        REQUIRE(oc_image_wrap_rgb8(&img, px, 28, 28, 28 * 3, NULL, &e) == OC_OK);
        check_poison_f32(out, 4 * 1176);
        REQUIRE(oc_qwen2vl_patchify(out, 4 * 1176, &img, &p, &e) == OC_OK);
        const int vals[3] = { v, 255 - v, v / 2 };
        for (int c = 0; c < 3; c++) {
            /* HF: float32(float64(u8) / 255 as float64 multiply), then float32 (x - mean) / std */
            float rescaled = (float)((double)vals[c] * (1.0 / 255.0));
            float want = (rescaled - p.image_mean[c]) / p.image_std[c];
            double exact = ((double)vals[c] / 255.0 - (double)p.image_mean[c]) / (double)p.image_std[c];
            const float got = out[c * 2 * 196];
            CHECKF(got == want, "v=%d c=%d: %.9g vs %.9g", vals[c], c, (double)got, (double)want);
            CHECKF(fabs(got - exact) < 1e-6, "v=%d c=%d: %.9g far from %.9g", vals[c], c, (double)got, exact);
        }
        int ok = 1;
        for (int i = 0; i < 4 * 1176; i++) ok &= !isnan(out[i]) && out[i] == out[(i / 392) * 392];
        CHECKF(ok, "v=%d: not every output written / not constant per channel", v);
    }
    /* CLIP constants as float32 */
    CHECK(p.image_mean[0] == 0.48145466f && p.image_std[2] == 0.27577711f);
}

/* Pixels encode their coordinates: R = x, G = y, B = 7. With mean 0 and std 1/255 (so values are
 * the u8 back), patch k must hold the 14x14 block that the merge order assigns to token k. */
static void test_patch_order(void) {
    enum { W = 84, H = 56, PS = 14 };
    uint8_t px[W * H * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) { px[(y * W + x) * 3] = (uint8_t)x; px[(y * W + x) * 3 + 1] = (uint8_t)y; px[(y * W + x) * 3 + 2] = 7; }
    oc_image img;
    oc_error e;
    REQUIRE(oc_image_wrap_rgb8(&img, px, W, H, W * 3, NULL, &e) == OC_OK);
    oc_qwen2vl_prep_params p;
    oc_qwen2vl_prep_defaults(&p);
    p.do_resize = 0;
    for (int c = 0; c < 3; c++) { p.image_mean[c] = 0.0f; p.image_std[c] = 1.0f / 255.0f; }
    oc_qwen2vl_pixels pv;
    REQUIRE(oc_qwen2vl_preprocess(&pv, &img, &p, NULL, &e) == OC_OK);
    CHECK(pv.grid_t == 1 && pv.grid_h == H / PS && pv.grid_w == W / PS && pv.n_patches == 24 && pv.patch_dim == 1176);
    CHECK(pv.resized_height_px == H && pv.resized_width_px == W);
    const int gw = W / PS;
    int bad = 0;
    for (int gy = 0; gy < H / PS; gy++)
        for (int gx = 0; gx < gw; gx++) {
            /* docs/formats.md §2b: token = ((y/2)*(W/2) + x/2)*4 + (y%2)*2 + (x%2) */
            const int token = ((gy / 2) * (gw / 2) + gx / 2) * 4 + (gy % 2) * 2 + (gx % 2);
            const float *patch = pv.data + (size_t)token * 1176;
            for (int c = 0; c < 3; c++)
                for (int t = 0; t < 2; t++)
                    for (int py = 0; py < PS; py++)
                        for (int pxx = 0; pxx < PS; pxx++) {
                            const float v = patch[((c * 2 + t) * PS + py) * PS + pxx];
                            const int want = c == 0 ? gx * PS + pxx : c == 1 ? gy * PS + py : 7;
                            bad += lrintf(v) != want || fabsf(v - (float)want) > 1e-4f;
                        }
        }
    CHECKF(bad == 0, "%d values out of place", bad);
    oc_qwen2vl_pixels_free(&pv);
    oc_qwen2vl_pixels_free(&pv);

    /* without resizing, sides must be multiples of 28 */
    REQUIRE(oc_image_wrap_rgb8(&img, px, 70, 56, W * 3, NULL, &e) == OC_OK);
    CHECK(oc_qwen2vl_preprocess(&pv, &img, &p, NULL, &e) == OC_ERR_INVALID);
    CHECKF(strcmp(e.message, "preprocess: without resizing, the sides must be multiples of 28 (image is 70x56)") == 0,
           "%s", e.message);
    CHECK(pv.data == NULL);
    p.image_std[1] = 0.0f;
    CHECK(oc_qwen2vl_preprocess(&pv, &img, &p, NULL, &e) == OC_ERR_INVALID);
}

static void test_preprocess_resizes(void) {
    check_rng rng = { 7 };
    oc_image img;
    oc_error e;
    REQUIRE(oc_image_alloc(&img, 45, 30, NULL, NULL, &e) == OC_OK);
    fill_random(&img, &rng);
    oc_qwen2vl_pixels pv;
    REQUIRE(oc_qwen2vl_preprocess(&pv, &img, NULL, NULL, &e) == OC_OK);
    CHECK(pv.resized_height_px == 56 && pv.resized_width_px == 84 && pv.grid_h == 4 && pv.grid_w == 6);
    /* the same as resizing first and then patchifying the result */
    oc_image r;
    REQUIRE(oc_image_resize_bicubic(&r, &img, 84, 56, NULL, &e) == OC_OK);
    float *want = malloc(24 * 1176 * sizeof(float));
    REQUIRE(want);
    REQUIRE(oc_qwen2vl_patchify(want, 24 * 1176, &r, NULL, &e) == OC_OK);
    CHECK(memcmp(want, pv.data, 24 * 1176 * sizeof(float)) == 0);
    CHECK(oc_qwen2vl_patchify(want, 24 * 1176 - 1, &r, NULL, &e) == OC_ERR_INVALID);
    free(want);
    oc_image_free(&r);
    oc_qwen2vl_pixels_free(&pv);
    oc_image_free(&img);
}

/* ---- HF fixtures ----------------------------------------------------------------------------------------- */

/* NAME.bin: text header lines ("key value..."), ending with "end\n", then rows*cols float32 LE. */
typedef struct { int64_t rows, cols, grid[3], min_px, max_px; float *data; } fixture;

static int read_fixture(const char *path, fixture *fx, char *why, size_t why_n) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(why, why_n, "cannot open %s: %s", path, strerror(errno)); return 0; }
    memset(fx, 0, sizeof *fx);
    char line[256];
    int ok = 0, magic = 0;
    while (fgets(line, sizeof line, f)) {
        if (!magic) { magic = strcmp(line, "OCELLUS-F32 1\n") == 0; if (!magic) break; continue; }
        if (strcmp(line, "end\n") == 0) { ok = 1; break; }
        long long a, b, c;
        if (sscanf(line, "rows %lld", &a) == 1) fx->rows = a;
        else if (sscanf(line, "cols %lld", &a) == 1) fx->cols = a;
        else if (sscanf(line, "grid %lld %lld %lld", &a, &b, &c) == 3) { fx->grid[0] = a; fx->grid[1] = b; fx->grid[2] = c; }
        else if (sscanf(line, "min_pixels %lld", &a) == 1) fx->min_px = a;
        else if (sscanf(line, "max_pixels %lld", &a) == 1) fx->max_px = a;
    }
    if (!ok || fx->rows <= 0 || fx->cols <= 0 || fx->rows * fx->cols > 100000000) {
        snprintf(why, why_n, "%s: bad header", path);
        fclose(f);
        return 0;
    }
    size_t n = (size_t)(fx->rows * fx->cols);
    fx->data = malloc(n * sizeof(float));
    unsigned char *raw = malloc(n * 4);
    int good = fx->data && raw && fread(raw, 4, n, f) == n && fgetc(f) == EOF;
    for (size_t i = 0; good && i < n; i++) {
        uint32_t u = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 | (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
        memcpy(&fx->data[i], &u, 4);
    }
    free(raw);
    fclose(f);
    if (!good) { free(fx->data); snprintf(why, why_n, "%s: data size does not match the header", path); return 0; }
    return 1;
}

static void test_hf_fixtures(void) {
    const char *dir = "tests/data/preprocess";
    char path[512], why[600];
    snprintf(path, sizeof path, "%s/index.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        check_fail_at(__FILE__, __LINE__, "committed HF fixtures missing in %s (tests/reference/make_preprocess_fixtures.py "
                      "writes them; needs torch + transformers)", dir);
        return;
    }
    char line[256];
    int n_cases = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64], kind[32];
        if (line[0] == '#' || sscanf(line, "%63s %31s", name, kind) != 2) continue;
        oc_image img;
        oc_error e;
        char file[128];
        snprintf(file, sizeof file, "%s.ppm", name);
        if (load(&img, dir, file, &e)) { CHECKF(0, "%s", e.message); continue; }
        fixture fx;
        snprintf(path, sizeof path, "%s/%s.bin", dir, name);
        if (!read_fixture(path, &fx, why, sizeof why)) { CHECKF(0, "%s", why); oc_image_free(&img); continue; }
        oc_qwen2vl_prep_params p;
        oc_qwen2vl_prep_defaults(&p);
        p.min_pixels = fx.min_px;
        p.max_pixels = fx.max_px;
        oc_qwen2vl_pixels pv;
        REQUIRE(oc_qwen2vl_preprocess(&pv, &img, &p, NULL, &e) == OC_OK);
        CHECKF(pv.grid_t == fx.grid[0] && pv.grid_h == fx.grid[1] && pv.grid_w == fx.grid[2],
               "%s: grid %d %d %d, HF %lld %lld %lld", name, pv.grid_t, pv.grid_h, pv.grid_w,
               (long long)fx.grid[0], (long long)fx.grid[1], (long long)fx.grid[2]);
        if (pv.n_patches == fx.rows && pv.patch_dim == fx.cols) {
            double max_diff = 0;
            size_t n_diff = 0, n = (size_t)(fx.rows * fx.cols);
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)pv.data[i] - (double)fx.data[i]);
                if (!(d <= max_diff)) max_diff = d;   /* NaN sticks */
                n_diff += d != 0;
            }
            /* one 8-bit step after normalization is 1 / (255 * min std) = 0.0150 */
            const int resized = strcmp(kind, "none") != 0;
            const double bound = resized ? 1.0 / (255.0 * 0.26130258) + 1e-6 : 0.0;
            printf("# fixture %s (%s, %dx%d -> %dx%d): max |ours - HF| = %.3g, %zu of %zu values differ\n", name,
                   kind, img.width_px, img.height_px, pv.resized_width_px, pv.resized_height_px, max_diff, n_diff, n);
            CHECKF(max_diff <= bound, "%s: max diff %.3g above %.3g", name, max_diff, bound);
        } else {
            CHECKF(0, "%s: shape %lldx%d, HF %lldx%lld", name, (long long)pv.n_patches, pv.patch_dim,
                   (long long)fx.rows, (long long)fx.cols);
        }
        n_cases++;
        oc_qwen2vl_pixels_free(&pv);
        free(fx.data);
        oc_image_free(&img);
    }
    fclose(f);
    CHECKF(n_cases > 0, "index.txt lists no case");
}

int main(void) {
    CHECK_RUN(test_smart_resize);
    CHECK_RUN(test_resize_identity_and_constant);
    CHECK_RUN(test_resize_hand_case);
    CHECK_RUN(test_resize_matches_pillow);
    CHECK_RUN(test_normalize_values);
    CHECK_RUN(test_patch_order);
    CHECK_RUN(test_preprocess_resizes);
    CHECK_RUN(test_hf_fixtures);
    return check_finish();
}
