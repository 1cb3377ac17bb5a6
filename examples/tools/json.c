/* json.c: the strict RFC 8259 parser behind json.h: recursive descent (depth-limited), one node
 * array grown by doubling, one string pool sized from the input (unescaping never lengthens a
 * string: "\u00e9" is 6 bytes in, 2 out; every string's two quotes pay for its NUL), and the
 * accessors. Contents: limits, number conversion, strings and UTF-8, values, accessors. */
#include "tools/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct json_node {
    uint8_t type;        /* oc_json_type */
    uint8_t is_int;      /* numbers: written as an integer that fits in int64 */
    uint8_t is_key;      /* object member keys */
    uint8_t pad;
    uint32_t count;      /* arrays: elements, objects: members */
    uint32_t next;       /* next element, or next member key; OC_JSON_NONE at the end */
    uint32_t offset;     /* byte offset of the value in the source */
    union {
        double num;
        struct { uint32_t off, len; } str;   /* in the pool */
    } u;
    int64_t i;
} json_node;

struct oc_json {
    json_node *nodes;
    uint32_t n_nodes, cap_nodes;
    char *pool;
    size_t pool_bytes, pool_used;
    oc_allocator alloc;
};

void oc_json_limits_default(oc_json_limits *limits) {
    limits->max_depth = 64;
    limits->max_bytes = (size_t)1 << 30;
    limits->max_nodes = (uint32_t)1 << 26;
}

/* ---- parser state and errors --------------------------------------------------------------------- */

typedef struct parser {
    const uint8_t *s;
    size_t n, pos;
    oc_json *doc;
    oc_json_limits lim;
    oc_error *err;
} parser;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 4, 5)))
#endif
static oc_status fail_at(parser *p, size_t at, oc_status st, const char *fmt, ...) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->n; i++) {
        if (p->s[i] == '\n') { line++; col = 1; } else { col++; }
    }
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return oc_fail(p->err, st, "json: line %zu, column %zu (byte %zu): %s", line, col, at, what);
}

/* A readable rendering of the byte at pos for messages. */
static void describe(const parser *p, size_t pos, char *buf, size_t n) {
    if (pos >= p->n) snprintf(buf, n, "end of input");
    else if (p->s[pos] >= 0x20 && p->s[pos] < 0x7f) snprintf(buf, n, "'%c'", p->s[pos]);
    else snprintf(buf, n, "byte 0x%02x", p->s[pos]);
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        uint8_t c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static oc_status new_node(parser *p, oc_json_type type, size_t offset, uint32_t *out) {
    oc_json *d = p->doc;
    if (d->n_nodes >= p->lim.max_nodes)
        return fail_at(p, offset, OC_ERR_RANGE, "more than %u values", p->lim.max_nodes);
    if (d->n_nodes == d->cap_nodes) {
        uint32_t cap = d->cap_nodes ? d->cap_nodes * 2 : 64;
        if (cap > p->lim.max_nodes || cap < d->cap_nodes) cap = p->lim.max_nodes;
        size_t old_bytes = (size_t)d->cap_nodes * sizeof(json_node), new_bytes;
        if (!oc_mul_size(cap, sizeof(json_node), &new_bytes))
            return fail_at(p, offset, OC_ERR_RANGE, "node array overflows");
        json_node *nodes = oc_mem_alloc(&d->alloc, new_bytes);
        if (!nodes) return oc_fail(p->err, OC_ERR_NOMEM, "json: cannot allocate %zu bytes of nodes", new_bytes);
        if (d->nodes) {
            memcpy(nodes, d->nodes, old_bytes);
            oc_mem_free(&d->alloc, d->nodes, old_bytes);
        }
        d->nodes = nodes;
        d->cap_nodes = cap;
    }
    json_node *nd = &d->nodes[d->n_nodes];
    memset(nd, 0, sizeof *nd);
    nd->type = (uint8_t)type;
    nd->next = OC_JSON_NONE;
    nd->offset = (uint32_t)offset;
    *out = d->n_nodes++;
    return OC_OK;
}

/* ---- numbers ---------------------------------------------------------------------------------------- */

static const double pow10_exact[23] = { 1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                        1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22 };

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static oc_status parse_number(parser *p, uint32_t *out) {
    const size_t start = p->pos;
    size_t i = p->pos;
    int neg = 0;
    if (i < p->n && p->s[i] == '-') { neg = 1; i++; }
    if (i >= p->n || !is_digit(p->s[i]))
        return fail_at(p, start, OC_ERR_FORMAT, "invalid number: expected a digit");
    /* significand digits, at most 19 kept exactly; the rest only move the exponent */
    uint64_t mant = 0;
    int n_kept = 0, dropped_nonzero = 0;
    long exp10 = 0;
    if (p->s[i] == '0') {
        i++;
        if (i < p->n && is_digit(p->s[i]))
            return fail_at(p, start, OC_ERR_FORMAT, "invalid number: leading zero");
    } else {
        while (i < p->n && is_digit(p->s[i])) {
            if (n_kept < 19) { mant = mant * 10 + (uint64_t)(p->s[i] - '0'); if (mant) n_kept++; }
            else { exp10++; dropped_nonzero |= p->s[i] != '0'; }
            i++;
        }
    }
    int is_int = 1;
    if (i < p->n && p->s[i] == '.') {
        is_int = 0;
        i++;
        if (i >= p->n || !is_digit(p->s[i]))
            return fail_at(p, start, OC_ERR_FORMAT, "invalid number: expected a digit after '.'");
        while (i < p->n && is_digit(p->s[i])) {
            if (n_kept < 19) { mant = mant * 10 + (uint64_t)(p->s[i] - '0'); exp10--; if (mant) n_kept++; }
            else dropped_nonzero |= p->s[i] != '0';
            i++;
        }
    }
    if (i < p->n && (p->s[i] == 'e' || p->s[i] == 'E')) {
        is_int = 0;
        i++;
        int eneg = 0;
        if (i < p->n && (p->s[i] == '+' || p->s[i] == '-')) { eneg = p->s[i] == '-'; i++; }
        if (i >= p->n || !is_digit(p->s[i]))
            return fail_at(p, start, OC_ERR_FORMAT, "invalid number: expected a digit in the exponent");
        long e = 0;
        while (i < p->n && is_digit(p->s[i])) {
            if (e < 100000) e = e * 10 + (p->s[i] - '0');
            i++;
        }
        exp10 += eneg ? -e : e;
    }
    p->pos = i;
    uint32_t idx;
    oc_status st = new_node(p, OC_JSON_NUMBER, start, &idx);
    if (st) return st;
    json_node *nd = &p->doc->nodes[idx];
    double v;
    if (is_int && n_kept <= 19 && exp10 == 0 && mant <= (uint64_t)INT64_MAX + (uint64_t)neg) {
        nd->is_int = 1;
        nd->i = neg ? (mant == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mant) : (int64_t)mant;
        v = neg ? -(double)mant : (double)mant;   /* one correctly rounded conversion */
    } else if (!dropped_nonzero && mant < ((uint64_t)1 << 53) && exp10 >= -22 && exp10 <= 22) {
        /* both operands exact, so the one IEEE operation rounds correctly (Clinger's fast path) */
        v = exp10 >= 0 ? (double)mant * pow10_exact[exp10] : (double)mant / pow10_exact[-exp10];
        if (neg) v = -v;
    } else if (mant == 0 && !dropped_nonzero) {
        v = neg ? -0.0 : 0.0;
    } else {
        char buf[512];
        size_t len = i - start;
        if (len >= sizeof buf)
            return fail_at(p, start, OC_ERR_FORMAT, "number longer than %zu characters", sizeof buf - 1);
        memcpy(buf, p->s + start, len);
        buf[len] = 0;
        v = strtod(buf, NULL);
    }
    if (v - v != 0.0)   /* inf: the literal is beyond double range */
        return fail_at(p, start, OC_ERR_FORMAT, "number out of range");
    nd->u.num = v;
    *out = idx;
    return OC_OK;
}

/* ---- strings ---------------------------------------------------------------------------------------- */

static int hex4(const uint8_t *s, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        uint8_t c = s[k];
        uint32_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10u;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10u;
        else return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *dst, uint32_t cp) {
    if (cp < 0x80) { dst[0] = (char)cp; return 1; }
    if (cp < 0x800) { dst[0] = (char)(0xc0 | cp >> 6); dst[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        dst[0] = (char)(0xe0 | cp >> 12); dst[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); dst[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    dst[0] = (char)(0xf0 | cp >> 18); dst[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); dst[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Length of the valid UTF-8 sequence starting at s[0] (a byte >= 0x80), or 0 (RFC 3629 table). */
static size_t utf8_len(const uint8_t *s, size_t avail) {
    uint8_t c = s[0];
    size_t n;
    uint8_t lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c == 0xe0) { n = 3; lo = 0xa0; }
    else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) n = 3;
    else if (c == 0xed) { n = 3; hi = 0x9f; }   /* no UTF-16 surrogates */
    else if (c == 0xf0) { n = 4; lo = 0x90; }
    else if (c >= 0xf1 && c <= 0xf3) n = 4;
    else if (c == 0xf4) { n = 4; hi = 0x8f; }   /* nothing above U+10FFFF */
    else return 0;
    if (avail < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < n; k++)
        if (s[k] < 0x80 || s[k] > 0xbf) return 0;
    return n;
}

static oc_status parse_string(parser *p, int is_key, uint32_t *out) {
    const size_t start = p->pos;   /* at the opening quote */
    oc_json *d = p->doc;
    char *dst = d->pool + d->pool_used;
    char *const dst0 = dst;
    size_t i = start + 1;
    char what[32];
    for (;;) {
        if (i >= p->n) return fail_at(p, start, OC_ERR_FORMAT, "unterminated string");
        uint8_t c = p->s[i];
        if (c == '"') break;
        if (c < 0x20) return fail_at(p, i, OC_ERR_FORMAT, "control character 0x%02x in a string (must be escaped)", c);
        if (c < 0x80 && c != '\\') { *dst++ = (char)c; i++; continue; }
        if (c >= 0x80) {
            size_t len = utf8_len(p->s + i, p->n - i);
            if (!len) return fail_at(p, i, OC_ERR_FORMAT, "invalid UTF-8 byte 0x%02x in a string", c);
            memcpy(dst, p->s + i, len);
            dst += len;
            i += len;
            continue;
        }
        /* escape */
        if (i + 1 >= p->n) return fail_at(p, start, OC_ERR_FORMAT, "unterminated string");
        uint8_t e = p->s[i + 1];
        switch (e) {
        case '"': *dst++ = '"'; break;
        case '\\': *dst++ = '\\'; break;
        case '/': *dst++ = '/'; break;
        case 'b': *dst++ = '\b'; break;
        case 'f': *dst++ = '\f'; break;
        case 'n': *dst++ = '\n'; break;
        case 'r': *dst++ = '\r'; break;
        case 't': *dst++ = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (i + 6 > p->n || !hex4(p->s + i + 2, &cp))
                return fail_at(p, i, OC_ERR_FORMAT, "invalid \\u escape (expected 4 hex digits)");
            if (cp >= 0xdc00 && cp <= 0xdfff)
                return fail_at(p, i, OC_ERR_FORMAT, "unpaired low surrogate \\u%04x", cp);
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo;
                if (i + 12 > p->n || p->s[i + 6] != '\\' || p->s[i + 7] != 'u' || !hex4(p->s + i + 8, &lo) ||
                    lo < 0xdc00 || lo > 0xdfff)
                    return fail_at(p, i, OC_ERR_FORMAT, "unpaired high surrogate \\u%04x", cp);
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                i += 6;
            }
            dst += put_utf8(dst, cp);
            i += 4;   /* plus the 2 below */
            break;
        }
        default:
            describe(p, i + 1, what, sizeof what);
            return fail_at(p, i, OC_ERR_FORMAT, "invalid escape \\ followed by %s", what);
        }
        i += 2;
    }
    p->pos = i + 1;
    *dst = 0;
    const size_t len = (size_t)(dst - dst0);
    uint32_t idx;
    oc_status st = new_node(p, OC_JSON_STRING, start, &idx);
    if (st) return st;
    json_node *nd = &d->nodes[idx];
    nd->is_key = (uint8_t)is_key;
    nd->u.str.off = (uint32_t)d->pool_used;
    nd->u.str.len = (uint32_t)len;
    d->pool_used += len + 1;
    *out = idx;
    return OC_OK;
}

/* ---- values ---------------------------------------------------------------------------------------- */

static oc_status parse_value(parser *p, uint32_t depth, uint32_t *out);

static oc_status parse_literal(parser *p, const char *word, oc_json_type type, uint32_t *out) {
    size_t len = strlen(word);
    if (p->n - p->pos < len || memcmp(p->s + p->pos, word, len) != 0) {
        char what[32];
        describe(p, p->pos, what, sizeof what);
        return fail_at(p, p->pos, OC_ERR_FORMAT, "unexpected %s (expected a value)", what);
    }
    size_t start = p->pos;
    p->pos += len;
    return new_node(p, type, start, out);
}

static oc_status parse_container(parser *p, uint32_t depth, int is_object, uint32_t *out) {
    const size_t start = p->pos;
    if (depth >= p->lim.max_depth)
        return fail_at(p, start, OC_ERR_RANGE, "nesting deeper than %u levels", p->lim.max_depth);
    uint32_t self;
    oc_status st = new_node(p, is_object ? OC_JSON_OBJECT : OC_JSON_ARRAY, start, &self);
    if (st) return st;
    p->pos++;   /* '[' or '{' */
    const uint8_t close = is_object ? '}' : ']';
    uint32_t count = 0, prev = OC_JSON_NONE;
    char what[32];
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        *out = self;
        return OC_OK;
    }
    for (;;) {
        uint32_t child;
        if (is_object) {
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') {
                describe(p, p->pos, what, sizeof what);
                return fail_at(p, p->pos, OC_ERR_FORMAT, "expected a string key, found %s", what);
            }
            if ((st = parse_string(p, 1, &child))) return st;
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') {
                describe(p, p->pos, what, sizeof what);
                return fail_at(p, p->pos, OC_ERR_FORMAT, "expected ':' after an object key, found %s", what);
            }
            p->pos++;
            uint32_t value;
            if ((st = parse_value(p, depth + 1, &value))) return st;
        } else {
            if ((st = parse_value(p, depth + 1, &child))) return st;
        }
        if (prev != OC_JSON_NONE) p->doc->nodes[prev].next = child;
        prev = child;
        count++;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == ',') { p->pos++; continue; }
        if (p->pos < p->n && p->s[p->pos] == close) { p->pos++; break; }
        describe(p, p->pos, what, sizeof what);
        return fail_at(p, p->pos, OC_ERR_FORMAT, is_object ? "expected ',' or '}' after an object member, found %s"
                                                           : "expected ',' or ']' after an array element, found %s",
                       what);
    }
    p->doc->nodes[self].count = count;
    *out = self;
    return OC_OK;
}

static oc_status parse_value(parser *p, uint32_t depth, uint32_t *out) {
    skip_ws(p);
    if (p->pos >= p->n) return fail_at(p, p->pos, OC_ERR_FORMAT, "unexpected end of input (expected a value)");
    switch (p->s[p->pos]) {
    case '{': return parse_container(p, depth, 1, out);
    case '[': return parse_container(p, depth, 0, out);
    case '"': return parse_string(p, 0, out);
    case 't': return parse_literal(p, "true", OC_JSON_TRUE, out);
    case 'f': return parse_literal(p, "false", OC_JSON_FALSE, out);
    case 'n': return parse_literal(p, "null", OC_JSON_NULL, out);
    default:
        if (p->s[p->pos] == '-' || is_digit(p->s[p->pos])) return parse_number(p, out);
        break;
    }
    char what[32];
    describe(p, p->pos, what, sizeof what);
    return fail_at(p, p->pos, OC_ERR_FORMAT, "unexpected %s (expected a value)", what);
}

oc_status oc_json_parse(oc_json **out, const char *text, size_t n_bytes, const oc_json_limits *limits,
                        const oc_allocator *alloc, oc_error *err) {
    if (!out) return oc_fail(err, OC_ERR_INVALID, "json: NULL output");
    *out = NULL;
    if (!text && n_bytes) return oc_fail(err, OC_ERR_INVALID, "json: NULL text");
    parser p;
    memset(&p, 0, sizeof p);
    oc_json_limits_default(&p.lim);
    if (limits) p.lim = *limits;
    if (p.lim.max_depth > 1024) p.lim.max_depth = 1024;          /* keeps the recursion bounded */
    if (p.lim.max_bytes > 0xfffffffeu) p.lim.max_bytes = 0xfffffffeu;   /* offsets are 32-bit */
    if (n_bytes > p.lim.max_bytes)
        return oc_fail(err, OC_ERR_RANGE, "json: input of %zu bytes exceeds the limit of %zu", n_bytes, p.lim.max_bytes);
    oc_json *d = oc_mem_calloc(alloc, sizeof *d);
    if (!d) return oc_fail(err, OC_ERR_NOMEM, "json: cannot allocate a document");
    d->alloc = (alloc && alloc->fn) ? *alloc : *oc_default_allocator();
    d->pool_bytes = n_bytes + 1;
    d->pool = oc_mem_alloc(&d->alloc, d->pool_bytes);
    if (!d->pool) {
        oc_json_free(d);
        return oc_fail(err, OC_ERR_NOMEM, "json: cannot allocate %zu bytes for strings", n_bytes + 1);
    }
    p.s = (const uint8_t *)text;
    p.n = n_bytes;
    p.doc = d;
    p.err = err;
    if (n_bytes >= 3 && p.s[0] == 0xef && p.s[1] == 0xbb && p.s[2] == 0xbf) p.pos = 3;   /* BOM */
    uint32_t root;
    oc_status st = parse_value(&p, 0, &root);
    if (!st) {
        skip_ws(&p);
        if (p.pos < p.n) {
            char what[32];
            describe(&p, p.pos, what, sizeof what);
            st = fail_at(&p, p.pos, OC_ERR_FORMAT, "unexpected %s after the JSON value", what);
        }
    }
    if (st) {
        oc_json_free(d);
        return st;
    }
    *out = d;
    return OC_OK;
}

void oc_json_free(oc_json *doc) {
    if (!doc) return;
    oc_allocator a = doc->alloc;
    oc_mem_free(&a, doc->nodes, (size_t)doc->cap_nodes * sizeof(json_node));
    oc_mem_free(&a, doc->pool, doc->pool_bytes);
    oc_mem_free(&a, doc, sizeof *doc);
}

/* ---- accessors --------------------------------------------------------------------------------------- */

static const json_node *node_at(const oc_json *doc, uint32_t node) {
    return (doc && node < doc->n_nodes) ? &doc->nodes[node] : NULL;
}

uint32_t oc_json_root(const oc_json *doc) { return (doc && doc->n_nodes) ? 0 : OC_JSON_NONE; }
uint32_t oc_json_n_nodes(const oc_json *doc) { return doc ? doc->n_nodes : 0; }

oc_json_type oc_json_type_of(const oc_json *doc, uint32_t node) {
    const json_node *nd = node_at(doc, node);
    return nd ? (oc_json_type)nd->type : OC_JSON_NULL;
}

const char *oc_json_type_name(oc_json_type type) {
    switch (type) {
    case OC_JSON_NULL: return "null";
    case OC_JSON_FALSE: case OC_JSON_TRUE: return "boolean";
    case OC_JSON_NUMBER: return "number";
    case OC_JSON_STRING: return "string";
    case OC_JSON_ARRAY: return "array";
    case OC_JSON_OBJECT: return "object";
    }
    return "unknown";
}

size_t oc_json_offset(const oc_json *doc, uint32_t node) {
    const json_node *nd = node_at(doc, node);
    return nd ? nd->offset : 0;
}

uint32_t oc_json_count(const oc_json *doc, uint32_t node) {
    const json_node *nd = node_at(doc, node);
    return (nd && (nd->type == OC_JSON_ARRAY || nd->type == OC_JSON_OBJECT)) ? nd->count : 0;
}

uint32_t oc_json_first(const oc_json *doc, uint32_t node) {
    return oc_json_count(doc, node) ? node + 1 : OC_JSON_NONE;   /* children follow their parent */
}

uint32_t oc_json_next(const oc_json *doc, uint32_t node) {
    const json_node *nd = node_at(doc, node);
    return nd ? nd->next : OC_JSON_NONE;
}

uint32_t oc_json_value(const oc_json *doc, uint32_t key) {
    const json_node *nd = node_at(doc, key);
    return (nd && nd->is_key && key + 1 < doc->n_nodes) ? key + 1 : OC_JSON_NONE;
}

uint32_t oc_json_at(const oc_json *doc, uint32_t array, uint32_t index) {
    if (oc_json_type_of(doc, array) != OC_JSON_ARRAY || index >= oc_json_count(doc, array)) return OC_JSON_NONE;
    uint32_t it = oc_json_first(doc, array);
    while (index-- && it != OC_JSON_NONE) it = oc_json_next(doc, it);
    return it;
}

uint32_t oc_json_get_n(const oc_json *doc, uint32_t object, const char *key, size_t key_len) {
    if (oc_json_type_of(doc, object) != OC_JSON_OBJECT || !key) return OC_JSON_NONE;
    uint32_t found = OC_JSON_NONE;
    for (uint32_t k = oc_json_first(doc, object); k != OC_JSON_NONE; k = oc_json_next(doc, k)) {
        const json_node *nd = &doc->nodes[k];
        if (nd->u.str.len == key_len && memcmp(doc->pool + nd->u.str.off, key, key_len) == 0) found = k + 1;
    }
    return found;
}

uint32_t oc_json_get(const oc_json *doc, uint32_t object, const char *key) {
    return key ? oc_json_get_n(doc, object, key, strlen(key)) : OC_JSON_NONE;
}

uint32_t oc_json_pointer(const oc_json *doc, uint32_t node, const char *pointer) {
    if (!pointer || node_at(doc, node) == NULL) return OC_JSON_NONE;
    const char *s = pointer;
    char token[256];
    while (*s) {
        if (*s != '/') return OC_JSON_NONE;
        s++;
        size_t len = 0;
        while (*s && *s != '/') {
            char c = *s++;
            if (c == '~') {
                if (*s == '0') c = '~';
                else if (*s == '1') c = '/';
                else return OC_JSON_NONE;
                s++;
            }
            if (len + 1 >= sizeof token) return OC_JSON_NONE;
            token[len++] = c;
        }
        token[len] = 0;
        oc_json_type t = oc_json_type_of(doc, node);
        if (t == OC_JSON_OBJECT) {
            node = oc_json_get_n(doc, node, token, len);
        } else if (t == OC_JSON_ARRAY) {
            if (len == 0 || len > 9 || (len > 1 && token[0] == '0')) return OC_JSON_NONE;
            uint32_t idx = 0;
            for (size_t k = 0; k < len; k++) {
                if (!is_digit((uint8_t)token[k])) return OC_JSON_NONE;
                idx = idx * 10 + (uint32_t)(token[k] - '0');
            }
            node = oc_json_at(doc, node, idx);
        } else {
            return OC_JSON_NONE;
        }
        if (node == OC_JSON_NONE) return OC_JSON_NONE;
    }
    return node;
}

static oc_status type_error(const oc_json *doc, uint32_t node, const char *want, oc_error *err) {
    const json_node *nd = node_at(doc, node);
    if (!nd) return oc_fail(err, OC_ERR_NOT_FOUND, "json: no such value (expected %s)", want);
    return oc_fail(err, OC_ERR_TYPE, "json: value at byte %u is %s %s, expected %s", nd->offset,
                   nd->type == OC_JSON_ARRAY || nd->type == OC_JSON_OBJECT ? "an" : "a",
                   oc_json_type_name((oc_json_type)nd->type), want);
}

oc_status oc_json_str(const oc_json *doc, uint32_t node, oc_str *out, oc_error *err) {
    const json_node *nd = node_at(doc, node);
    if (!nd || nd->type != OC_JSON_STRING) return type_error(doc, node, "a string", err);
    out->ptr = doc->pool + nd->u.str.off;
    out->len = nd->u.str.len;
    return OC_OK;
}

oc_status oc_json_f64(const oc_json *doc, uint32_t node, double *out, oc_error *err) {
    const json_node *nd = node_at(doc, node);
    if (!nd || nd->type != OC_JSON_NUMBER) return type_error(doc, node, "a number", err);
    *out = nd->u.num;
    return OC_OK;
}

oc_status oc_json_i64(const oc_json *doc, uint32_t node, int64_t *out, oc_error *err) {
    const json_node *nd = node_at(doc, node);
    if (!nd || nd->type != OC_JSON_NUMBER) return type_error(doc, node, "an integer", err);
    if (!nd->is_int)
        return oc_fail(err, OC_ERR_TYPE, "json: number %.17g at byte %u is not an integer that fits in 64 bits",
                       nd->u.num, nd->offset);
    *out = nd->i;
    return OC_OK;
}

oc_status oc_json_bool(const oc_json *doc, uint32_t node, int *out, oc_error *err) {
    const json_node *nd = node_at(doc, node);
    if (!nd || (nd->type != OC_JSON_TRUE && nd->type != OC_JSON_FALSE)) return type_error(doc, node, "a boolean", err);
    *out = nd->type == OC_JSON_TRUE;
    return OC_OK;
}

int oc_json_str_eq(const oc_json *doc, uint32_t node, const char *s) {
    const json_node *nd = node_at(doc, node);
    if (!nd || nd->type != OC_JSON_STRING || !s) return 0;
    size_t len = strlen(s);
    return nd->u.str.len == len && memcmp(doc->pool + nd->u.str.off, s, len) == 0;
}
