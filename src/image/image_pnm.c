/* image_pnm.c: our own strict Netpbm reader (PPM and PGM, raw P6/P5 and plain P3/P2) into RGB8.
 * Grammar (netpbm.sourceforge.net/doc/ppm.html): magic, then width, height and maxval as ASCII
 * decimals separated by whitespace (blank, TAB, CR, LF, VT, FF) or '#' comments running to the
 * end of the line; after maxval exactly one whitespace character, then the raster. Raw samples
 * are 1 byte (maxval < 256) or 2 bytes big-endian; plain samples are decimals separated by
 * whitespace. Every read is bounds-checked; sizes are checked against the limits before the
 * pixel buffer is allocated; a sample above maxval is an error. Bytes after the first image are
 * ignored (Netpbm allows several images in one stream). */
#include "image/image.h"

#include <string.h>

typedef struct pnm_reader {
    const uint8_t *p;
    size_t n, pos;
} pnm_reader;

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

/* Skip whitespace and comments between header tokens; returns how many separator bytes it
 * consumed, so callers can insist on at least one. */
static size_t skip_separators(pnm_reader *r) {
    size_t start = r->pos;
    while (r->pos < r->n) {
        uint8_t c = r->p[r->pos];
        if (is_ws(c)) {
            r->pos++;
        } else if (c == '#') {
            while (r->pos < r->n && r->p[r->pos] != '\n' && r->p[r->pos] != '\r') r->pos++;
        } else {
            break;
        }
    }
    return r->pos - start;
}

/* An unsigned decimal header field; values above `max` are reported as "too large". */
static oc_status read_header_uint(pnm_reader *r, const char *what, int64_t max, int64_t *out,
                                  oc_error *err) {
    if (skip_separators(r) == 0 && r->pos < r->n)
        return oc_fail(err, OC_ERR_FORMAT, "pnm: expected whitespace before the %s at byte %zu", what, r->pos);
    if (r->pos >= r->n)
        return oc_fail(err, OC_ERR_FORMAT, "pnm: file ends before the %s", what);
    if (!is_digit(r->p[r->pos]))
        return oc_fail(err, OC_ERR_FORMAT, "pnm: expected a decimal %s at byte %zu, found 0x%02x",
                       what, r->pos, r->p[r->pos]);
    int64_t v = 0;
    size_t start = r->pos;
    while (r->pos < r->n && is_digit(r->p[r->pos])) {
        if (v <= max) v = v * 10 + (r->p[r->pos] - '0');   /* stops growing once past max */
        r->pos++;
    }
    if (v > max) {
        return oc_fail(err, OC_ERR_RANGE, "pnm: %s %.*s at byte %zu is too large (limit %lld)", what,
                       (int)OC_MIN(r->pos - start, (size_t)24), (const char *)r->p + start, start,
                       (long long)max);
    }
    *out = v;
    return OC_OK;
}

/* Scale a sample in 0..maxval to 0..255 with rounding (identity for maxval 255). */
static uint8_t scale_sample(uint32_t v, uint32_t maxval) {
    if (maxval == 255) return (uint8_t)v;
    return (uint8_t)((v * 255u + maxval / 2) / maxval);
}

oc_status oc_image_decode_pnm(oc_image *out, const void *bytes, size_t n_bytes,
                              const oc_image_limits *limits, const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "pnm: NULL output");
    memset(out, 0, sizeof *out);
    if (!bytes && n_bytes) return oc_fail(err, OC_ERR_INVALID, "pnm: NULL input");
    pnm_reader r = { bytes, n_bytes, 0 };
    if (n_bytes < 2 || r.p[0] != 'P' || r.p[1] < '1' || r.p[1] > '7')
        return oc_fail(err, OC_ERR_FORMAT, "pnm: missing magic number P1..P7");
    char kind = (char)r.p[1];
    switch (kind) {
    case '2': case '3': case '5': case '6': break;
    case '1': case '4':
        return oc_fail(err, OC_ERR_UNSUPPORTED, "pnm: P%c (PBM bitmap) is not supported; use PPM (P6/P3) or PGM (P5/P2)", kind);
    default:
        return oc_fail(err, OC_ERR_UNSUPPORTED, "pnm: P%c (PAM) is not supported; use PPM (P6/P3) or PGM (P5/P2)", kind);
    }
    r.pos = 2;
    if (r.pos < r.n && !is_ws(r.p[r.pos]) && r.p[r.pos] != '#')
        return oc_fail(err, OC_ERR_FORMAT, "pnm: expected whitespace after the magic number P%c", kind);

    oc_image_limits def;
    if (!limits) {
        oc_image_limits_default(&def);
        limits = &def;
    }
    int64_t width, height, maxval;
    oc_status st;
    /* width/height above the limits are refused while parsing, so huge numbers never overflow */
    if ((st = read_header_uint(&r, "width", OC_MAX(limits->max_width_px, 0), &width, err))) return st;
    if ((st = read_header_uint(&r, "height", OC_MAX(limits->max_height_px, 0), &height, err))) return st;
    if (width == 0 || height == 0)
        return oc_fail(err, OC_ERR_FORMAT, "pnm: image size %lldx%lld is empty", (long long)width, (long long)height);
    if ((st = oc_image_check_size(width, height, limits, err))) return st;
    if ((st = read_header_uint(&r, "maxval", 65535, &maxval, err))) {
        if (st == OC_ERR_RANGE) return oc_fail(err, OC_ERR_FORMAT, "pnm: maxval is out of range 1..65535");
        return st;
    }
    if (maxval == 0) return oc_fail(err, OC_ERR_FORMAT, "pnm: maxval 0 is out of range 1..65535");

    /* exactly one whitespace character ends the header; a comment may come before it */
    if (r.pos < r.n && r.p[r.pos] == '#') {
        while (r.pos < r.n && r.p[r.pos] != '\n' && r.p[r.pos] != '\r') r.pos++;
    }
    if (r.pos >= r.n) return oc_fail(err, OC_ERR_FORMAT, "pnm: file ends before the raster");
    if (!is_ws(r.p[r.pos]))
        return oc_fail(err, OC_ERR_FORMAT, "pnm: expected whitespace after maxval at byte %zu, found 0x%02x",
                       r.pos, r.p[r.pos]);
    r.pos++;

    const int is_plain = kind == '2' || kind == '3';
    const size_t n_channels = (kind == '3' || kind == '6') ? 3 : 1;
    const size_t bytes_per_sample = maxval < 256 ? 1 : 2;
    const size_t n_samples = (size_t)width * (size_t)height * n_channels;  /* bounded by the limits */
    const size_t remaining = r.n - r.pos;
    if (!is_plain) {
        size_t need;
        if (!oc_mul_size(n_samples, bytes_per_sample, &need) || need > remaining)
            return oc_fail(err, OC_ERR_FORMAT, "pnm: raster truncated: %lldx%lld needs %zu bytes, %zu present",
                           (long long)width, (long long)height, n_samples * bytes_per_sample, remaining);
    } else if (n_samples > remaining / 2 + remaining % 2) {
        /* each plain sample takes a digit and a separator: refuse before allocating */
        return oc_fail(err, OC_ERR_FORMAT, "pnm: raster truncated: %lldx%lld needs %zu samples, %zu bytes present",
                       (long long)width, (long long)height, n_samples, remaining);
    }

    if ((st = oc_image_alloc(out, (int32_t)width, (int32_t)height, limits, alloc, err))) return st;

    const uint32_t mv = (uint32_t)maxval;
    for (size_t y = 0; y < (size_t)height; y++) {
        uint8_t *row = out->rgb + y * out->stride_bytes;
        for (size_t i = 0; i < (size_t)width * n_channels; i++) {
            uint32_t v;
            if (!is_plain) {
                v = r.p[r.pos++];
                if (bytes_per_sample == 2) v = (v << 8) | r.p[r.pos++];
            } else {
                while (r.pos < r.n && is_ws(r.p[r.pos])) r.pos++;
                if (r.pos >= r.n) {
                    oc_image_free(out);
                    return oc_fail(err, OC_ERR_FORMAT, "pnm: raster truncated at pixel (%zu, %zu)", i / n_channels, y);
                }
                if (!is_digit(r.p[r.pos])) {
                    uint8_t c = r.p[r.pos];
                    oc_image_free(out);
                    return oc_fail(err, OC_ERR_FORMAT, "pnm: expected a decimal sample at byte %zu, found 0x%02x",
                                   r.pos, c);
                }
                v = 0;
                while (r.pos < r.n && is_digit(r.p[r.pos])) {
                    if (v <= 65535) v = v * 10 + (uint32_t)(r.p[r.pos] - '0');
                    r.pos++;
                }
                if (r.pos < r.n && !is_ws(r.p[r.pos])) {
                    uint8_t c = r.p[r.pos];
                    oc_image_free(out);
                    return oc_fail(err, OC_ERR_FORMAT, "pnm: expected whitespace after a sample at byte %zu, found 0x%02x",
                                   r.pos, c);
                }
            }
            if (v > 65535) {
                oc_image_free(out);
                return oc_fail(err, OC_ERR_FORMAT, "pnm: sample at pixel (%zu, %zu) is larger than 65535",
                               i / n_channels, y);
            }
            if (v > mv) {
                oc_image_free(out);
                return oc_fail(err, OC_ERR_FORMAT, "pnm: sample %u at pixel (%zu, %zu) exceeds maxval %u",
                               v, i / n_channels, y, mv);
            }
            uint8_t s = scale_sample(v, mv);
            if (n_channels == 3) {
                row[i] = s;
            } else {
                row[3 * i] = row[3 * i + 1] = row[3 * i + 2] = s;   /* grey -> RGB */
            }
        }
    }
    return OC_OK;
}
