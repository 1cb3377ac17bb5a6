/* test_json.c: the strict JSON parser: valid documents and navigation, string unescaping with
 * surrogate pairs, UTF-8 validation, number conversion (exact integers, correctly rounded
 * doubles against strtod), limits (depth, size, node count), every syntax error with its exact
 * message, truncation at every byte, and leak-freedom of every failure path. */
#include "check.h"
#include "tools/json.h"


static oc_json *parse(const char *s, oc_error *e) {
    oc_json *d = NULL;
    if (oc_json_parse(&d, s, strlen(s), NULL, NULL, e) != OC_OK) return NULL;
    return d;
}

static void test_basic_document(void) {
    oc_error e;
    const char *text =
        "{\n  \"model_type\": \"qwen2_vl\",\n  \"hidden_size\": 1536,\n  \"rms_norm_eps\": 1e-06,\n"
        "  \"tie_word_embeddings\": true, \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [16, 24, 24]},\n"
        "  \"nothing\": null, \"flag\": false, \"empty\": {}, \"list\": [], \"a/b\": 1, \"m~n\": 2\n}\n";
    oc_json *d = parse(text, &e);
    REQUIREF(d, "%s", e.message);
    uint32_t root = oc_json_root(d);
    CHECK(oc_json_type_of(d, root) == OC_JSON_OBJECT && oc_json_count(d, root) == 11);
    oc_str s;
    REQUIRE(oc_json_str(d, oc_json_get(d, root, "model_type"), &s, &e) == OC_OK);
    CHECK(s.len == 8 && strcmp(s.ptr, "qwen2_vl") == 0);
    int64_t i;
    REQUIRE(oc_json_i64(d, oc_json_get(d, root, "hidden_size"), &i, &e) == OC_OK);
    CHECK(i == 1536);
    double v;
    REQUIRE(oc_json_f64(d, oc_json_get(d, root, "rms_norm_eps"), &v, &e) == OC_OK);
    CHECK(v == 1e-06);
    CHECK(oc_json_i64(d, oc_json_get(d, root, "rms_norm_eps"), &i, &e) == OC_ERR_TYPE);
    CHECKF(strcmp(e.message, "json: number 9.9999999999999995e-07 at byte 71 is not an integer that fits in 64 bits") == 0,
           "%s", e.message);
    int b;
    REQUIRE(oc_json_bool(d, oc_json_get(d, root, "tie_word_embeddings"), &b, &e) == OC_OK && b == 1);
    REQUIRE(oc_json_bool(d, oc_json_get(d, root, "flag"), &b, &e) == OC_OK && b == 0);
    CHECK(oc_json_type_of(d, oc_json_get(d, root, "nothing")) == OC_JSON_NULL);
    CHECK(oc_json_get(d, root, "absent") == OC_JSON_NONE);
    CHECK(oc_json_str(d, oc_json_get(d, root, "absent"), &s, &e) == OC_ERR_NOT_FOUND);
    CHECK(oc_json_str(d, oc_json_get(d, root, "hidden_size"), &s, &e) == OC_ERR_TYPE);
    CHECKF(strcmp(e.message, "json: value at byte 47 is a number, expected a string") == 0, "%s", e.message);
    CHECK(oc_json_f64(d, oc_json_get(d, root, "rope_scaling"), &v, &e) == OC_ERR_TYPE);
    CHECKF(strstr(e.message, "is an object, expected a number") != NULL, "%s", e.message);

    uint32_t sec = oc_json_pointer(d, root, "/rope_scaling/mrope_section");
    CHECK(oc_json_type_of(d, sec) == OC_JSON_ARRAY && oc_json_count(d, sec) == 3);
    int64_t want[3] = { 16, 24, 24 }, k = 0;
    for (uint32_t it = oc_json_first(d, sec); it != OC_JSON_NONE; it = oc_json_next(d, it), k++) {
        REQUIRE(oc_json_i64(d, it, &i, &e) == OC_OK);
        CHECK(k < 3 && i == want[k]);
    }
    CHECK(k == 3);
    CHECK(oc_json_i64(d, oc_json_pointer(d, root, "/rope_scaling/mrope_section/2"), &i, &e) == OC_OK && i == 24);
    CHECK(oc_json_pointer(d, root, "/rope_scaling/mrope_section/3") == OC_JSON_NONE);
    CHECK(oc_json_pointer(d, root, "/rope_scaling/mrope_section/01") == OC_JSON_NONE);
    CHECK(oc_json_pointer(d, root, "/rope_scaling/mrope_section/-") == OC_JSON_NONE);
    CHECK(oc_json_pointer(d, root, "rope_scaling") == OC_JSON_NONE);
    CHECK(oc_json_pointer(d, root, "") == root);
    CHECK(oc_json_i64(d, oc_json_pointer(d, root, "/a~1b"), &i, &e) == OC_OK && i == 1);
    CHECK(oc_json_i64(d, oc_json_pointer(d, root, "/m~0n"), &i, &e) == OC_OK && i == 2);
    CHECK(oc_json_pointer(d, root, "/m~2n") == OC_JSON_NONE);
    CHECK(oc_json_at(d, sec, 1) != OC_JSON_NONE && oc_json_at(d, sec, 3) == OC_JSON_NONE);
    CHECK(oc_json_first(d, oc_json_get(d, root, "empty")) == OC_JSON_NONE);
    CHECK(oc_json_first(d, oc_json_get(d, root, "list")) == OC_JSON_NONE);

    /* iterate members in order */
    const char *keys[11] = { "model_type", "hidden_size", "rms_norm_eps", "tie_word_embeddings", "rope_scaling",
                             "nothing", "flag", "empty", "list", "a/b", "m~n" };
    k = 0;
    for (uint32_t key = oc_json_first(d, root); key != OC_JSON_NONE; key = oc_json_next(d, key), k++)
        CHECKF(k < 11 && oc_json_str_eq(d, key, keys[k]), "member %d", (int)k);
    CHECK(k == 11);
    CHECK(oc_json_value(d, oc_json_first(d, root)) == oc_json_get(d, root, "model_type"));
    CHECK(oc_json_value(d, oc_json_get(d, root, "model_type")) == OC_JSON_NONE);   /* not a key */
    oc_json_free(d);
    oc_json_free(NULL);
    /* NONE and NULL documents are safe everywhere */
    CHECK(oc_json_type_of(NULL, 0) == OC_JSON_NULL && oc_json_count(NULL, 0) == 0);
    CHECK(oc_json_next(NULL, OC_JSON_NONE) == OC_JSON_NONE && oc_json_get(NULL, 0, "x") == OC_JSON_NONE);
}

static void test_scalars_and_duplicates(void) {
    oc_error e;
    oc_json *d = parse(" \t\r\n 42 \n", &e);
    REQUIREF(d, "%s", e.message);
    int64_t i;
    CHECK(oc_json_i64(d, 0, &i, &e) == OC_OK && i == 42);
    oc_json_free(d);
    d = parse("\xef\xbb\xbf\"bom\"", &e);   /* a leading BOM is skipped */
    REQUIREF(d, "%s", e.message);
    CHECK(oc_json_str_eq(d, 0, "bom"));
    oc_json_free(d);
    d = parse("{\"k\": 1, \"k\": 2, \"x\": {\"k\": 3}}", &e);
    REQUIREF(d, "%s", e.message);
    CHECK(oc_json_i64(d, oc_json_get(d, 0, "k"), &i, &e) == OC_OK && i == 2);   /* last wins */
    oc_json_free(d);
    /* keys with NUL inside */
    d = parse("{\"a\\u0000b\": 5}", &e);
    REQUIREF(d, "%s", e.message);
    CHECK(oc_json_get(d, 0, "a") == OC_JSON_NONE);
    CHECK(oc_json_i64(d, oc_json_get_n(d, 0, "a\0b", 3), &i, &e) == OC_OK && i == 5);
    oc_json_free(d);
}

static void test_strings(void) {
    oc_error e;
    oc_json *d = parse("[\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\", \"\\u00e9\\u20ac\", \"\\ud83d\\ude00x\", "
                       "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", \"\", \"\\u0041\\u00DF\", \"\xf4\x8f\xbf\xbf\"]", &e);
    REQUIREF(d, "%s", e.message);
    oc_str s;
    REQUIRE(oc_json_str(d, oc_json_at(d, 0, 0), &s, &e) == OC_OK);
    CHECK(s.len == 12 && memcmp(s.ptr, "a\"b\\c/d\b\f\n\r\t", 12) == 0);
    REQUIRE(oc_json_str(d, oc_json_at(d, 0, 1), &s, &e) == OC_OK);
    CHECK(strcmp(s.ptr, "\xc3\xa9\xe2\x82\xac") == 0);
    REQUIRE(oc_json_str(d, oc_json_at(d, 0, 2), &s, &e) == OC_OK);
    CHECK(strcmp(s.ptr, "\xf0\x9f\x98\x80x") == 0);   /* U+1F600 from a surrogate pair */
    REQUIRE(oc_json_str(d, oc_json_at(d, 0, 3), &s, &e) == OC_OK);
    CHECK(strcmp(s.ptr, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80") == 0);
    REQUIRE(oc_json_str(d, oc_json_at(d, 0, 4), &s, &e) == OC_OK);
    CHECK(s.len == 0 && s.ptr[0] == 0);
    REQUIRE(oc_json_str(d, oc_json_at(d, 0, 5), &s, &e) == OC_OK);
    CHECK(strcmp(s.ptr, "A\xc3\x9f") == 0);
    oc_json_free(d);
}

static void test_numbers(void) {
    oc_error e;
    oc_json *d = parse("[0, -0, 9223372036854775807, -9223372036854775808, 9223372036854775808, 1.5, -2.25e3, "
                       "1E2, 0.1, 123456789012345678901234567890, 1e-320, 3.141592653589793238462643383279, "
                       "1e22, 1e23, 0e99999, 5e-324, 1.7976931348623157e308]", &e);
    REQUIREF(d, "%s", e.message);
    int64_t i;
    double v;
    CHECK(oc_json_i64(d, oc_json_at(d, 0, 0), &i, &e) == OC_OK && i == 0);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 1), &v, &e) == OC_OK && v == 0 && signbit(v));
    CHECK(oc_json_i64(d, oc_json_at(d, 0, 2), &i, &e) == OC_OK && i == INT64_MAX);
    CHECK(oc_json_i64(d, oc_json_at(d, 0, 3), &i, &e) == OC_OK && i == INT64_MIN);
    CHECK(oc_json_i64(d, oc_json_at(d, 0, 4), &i, &e) == OC_ERR_TYPE);   /* 2^63 does not fit */
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 4), &v, &e) == OC_OK && v == 9223372036854775808.0);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 5), &v, &e) == OC_OK && v == 1.5);
    CHECK(oc_json_i64(d, oc_json_at(d, 0, 5), &i, &e) == OC_ERR_TYPE);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 6), &v, &e) == OC_OK && v == -2250.0);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 7), &v, &e) == OC_OK && v == 100.0);
    CHECK(oc_json_i64(d, oc_json_at(d, 0, 7), &i, &e) == OC_ERR_TYPE);   /* 1E2 is not written as an integer */
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 8), &v, &e) == OC_OK && v == 0.1);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 9), &v, &e) == OC_OK && v == 123456789012345678901234567890.0);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 10), &v, &e) == OC_OK && v == 1e-320);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 11), &v, &e) == OC_OK && v == 3.141592653589793);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 12), &v, &e) == OC_OK && v == 1e22);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 13), &v, &e) == OC_OK && v == 1e23);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 14), &v, &e) == OC_OK && v == 0.0);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 15), &v, &e) == OC_OK && v == 5e-324);
    CHECK(oc_json_f64(d, oc_json_at(d, 0, 16), &v, &e) == OC_OK && v == 1.7976931348623157e308);
    oc_json_free(d);

    /* random decimals: our conversion equals strtod's correctly rounded one */
    check_rng rng = { 2024 };
    int bad = 0;
    for (int t = 0; t < 20000; t++) {
        char buf[64];
        int n_digits = check_rng_int(&rng, 1, 17), point = check_rng_int(&rng, 0, n_digits);
        int exp = check_rng_int(&rng, -30, 30), len = 0;
        if (check_rng_u64(&rng) & 1) buf[len++] = '-';
        for (int k = 0; k < n_digits; k++) {
            if (k == point && k > 0) buf[len++] = '.';
            buf[len++] = (char)('0' + (k == 0 ? check_rng_int(&rng, 1, 9) : check_rng_int(&rng, 0, 9)));
        }
        len += snprintf(buf + len, sizeof buf - (size_t)len, "e%d", exp);
        oc_json *dd = NULL;
        if (oc_json_parse(&dd, buf, (size_t)len, NULL, NULL, &e) != OC_OK) { bad++; continue; }
        double got;
        oc_json_f64(dd, 0, &got, &e);
        if (got != strtod(buf, NULL)) { if (bad < 3) printf("# %s -> %.17g\n", buf, got); bad++; }
        oc_json_free(dd);
    }
    CHECKF(bad == 0, "%d conversions differ from strtod", bad);
}

typedef struct { const char *text; oc_status st; const char *msg; } bad_case;

static void test_errors(void) {
    static const bad_case cases[] = {
        { "", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected end of input (expected a value)" },
        { "   ", OC_ERR_FORMAT, "json: line 1, column 4 (byte 3): unexpected end of input (expected a value)" },
        { "{", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): expected a string key, found end of input" },
        { "{\"a\" 1}", OC_ERR_FORMAT, "json: line 1, column 6 (byte 5): expected ':' after an object key, found '1'" },
        { "{\"a\":1,}", OC_ERR_FORMAT, "json: line 1, column 8 (byte 7): expected a string key, found '}'" },
        { "{\"a\":1 \"b\":2}", OC_ERR_FORMAT, "json: line 1, column 8 (byte 7): expected ',' or '}' after an object member, found '\"'" },
        { "{a:1}", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): expected a string key, found 'a'" },
        { "[1,]", OC_ERR_FORMAT, "json: line 1, column 4 (byte 3): unexpected ']' (expected a value)" },
        { "[1 2]", OC_ERR_FORMAT, "json: line 1, column 4 (byte 3): expected ',' or ']' after an array element, found '2'" },
        { "[1,\n2,\n  x]", OC_ERR_FORMAT, "json: line 3, column 3 (byte 9): unexpected 'x' (expected a value)" },
        { "[", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): unexpected end of input (expected a value)" },
        { "1 2", OC_ERR_FORMAT, "json: line 1, column 3 (byte 2): unexpected '2' after the JSON value" },
        { "{} x", OC_ERR_FORMAT, "json: line 1, column 4 (byte 3): unexpected 'x' after the JSON value" },
        { "tru", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected 't' (expected a value)" },
        { "nul1", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected 'n' (expected a value)" },
        { "True", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected 'T' (expected a value)" },
        { "NaN", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected 'N' (expected a value)" },
        { "01", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): invalid number: leading zero" },
        { "-", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): invalid number: expected a digit" },
        { "+1", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected '+' (expected a value)" },
        { ".5", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected '.' (expected a value)" },
        { "1.", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): invalid number: expected a digit after '.'" },
        { "1e", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): invalid number: expected a digit in the exponent" },
        { "1e+", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): invalid number: expected a digit in the exponent" },
        { "-Infinity", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): invalid number: expected a digit" },
        { "1e400", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): number out of range" },
        { "0x10", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): unexpected 'x' after the JSON value" },
        { "\"abc", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unterminated string" },
        { "\"a\\", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unterminated string" },
        { "\"a\nb\"", OC_ERR_FORMAT, "json: line 1, column 3 (byte 2): control character 0x0a in a string (must be escaped)" },
        { "\"a\tb\"", OC_ERR_FORMAT, "json: line 1, column 3 (byte 2): control character 0x09 in a string (must be escaped)" },
        { "\"\\x\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid escape \\ followed by 'x'" },
        { "\"\\'\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid escape \\ followed by '''" },
        { "\"\\u12\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid \\u escape (expected 4 hex digits)" },
        { "\"\\u12G4\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid \\u escape (expected 4 hex digits)" },
        { "\"\\ud800\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): unpaired high surrogate \\ud800" },
        { "\"\\ud800\\u0041\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): unpaired high surrogate \\ud800" },
        { "\"\\udc00\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): unpaired low surrogate \\udc00" },
        { "\"\xc3\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0xc3 in a string" },
        { "\"\xc0\xaf\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0xc0 in a string" },
        { "\"\xe0\x80\xaf\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0xe0 in a string" },
        { "\"\xed\xa0\x80\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0xed in a string" },
        { "\"\xf4\x90\x80\x80\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0xf4 in a string" },
        { "\"\xff\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0xff in a string" },
        { "\"\x80\"", OC_ERR_FORMAT, "json: line 1, column 2 (byte 1): invalid UTF-8 byte 0x80 in a string" },
        { "\xc3\xa9", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected byte 0xc3 (expected a value)" },
        { "[1]\x00", OC_ERR_FORMAT, "json: line 1, column 4 (byte 3): unexpected byte 0x00 after the JSON value" },
        { "\xef\xbb", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected byte 0xef (expected a value)" },
        { "// c\n1", OC_ERR_FORMAT, "json: line 1, column 1 (byte 0): unexpected '/' (expected a value)" },
        { "[1]\f", OC_ERR_FORMAT, "json: line 1, column 4 (byte 3): unexpected byte 0x0c after the JSON value" },
    };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_json *d = (oc_json *)1;
        oc_error e = { OC_OK, "" };
        /* case "[1]\x00" has an embedded NUL: its length is 4, not strlen */
        size_t n = strlen(cases[i].text) + (strcmp(cases[i].text, "[1]") == 0 ? 1 : 0);
        oc_status st = oc_json_parse(&d, cases[i].text, n, NULL, &a, &e);
        CHECKF(st == cases[i].st, "case %zu: status %d (%s)", i, st, e.message);
        CHECKF(strcmp(e.message, cases[i].msg) == 0, "case %zu: '%s'\n      want '%s'", i, e.message, cases[i].msg);
        CHECKF(d == NULL && c.n_live == 0, "case %zu: output or memory left", i);
    }
}

static void test_limits(void) {
    oc_error e;
    char deep[300];
    for (int i = 0; i < 130; i++) { deep[i] = '['; deep[259 - i] = ']'; }
    oc_json *d = NULL;
    CHECK(oc_json_parse(&d, deep, 260, NULL, NULL, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "json: line 1, column 65 (byte 64): nesting deeper than 64 levels") == 0, "%s", e.message);
    CHECK(oc_json_parse(&d, deep + 130 - 64, 128, NULL, NULL, &e) == OC_OK);   /* exactly 64 levels */
    oc_json_free(d);
    oc_json_limits lim;
    oc_json_limits_default(&lim);
    lim.max_depth = 200;
    CHECK(oc_json_parse(&d, deep, 260, &lim, NULL, &e) == OC_OK);
    oc_json_free(d);
    lim.max_depth = 64;
    lim.max_bytes = 10;
    CHECK(oc_json_parse(&d, "[1,2,3,4,5,6]", 13, &lim, NULL, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "json: input of 13 bytes exceeds the limit of 10") == 0, "%s", e.message);
    lim.max_bytes = 1000;
    lim.max_nodes = 4;
    CHECK(oc_json_parse(&d, "[1,2,3]", 7, &lim, NULL, &e) == OC_OK);
    oc_json_free(d);
    CHECK(oc_json_parse(&d, "[1,2,3,4]", 9, &lim, NULL, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "json: line 1, column 8 (byte 7): more than 4 values") == 0, "%s", e.message);
}

/* A big document (growth of the node array) and every prefix of a small one. */
static void test_growth_and_truncation(void) {
    size_t cap = 200000, n = 0;
    char *big = malloc(cap);
    REQUIRE(big);
    n += (size_t)snprintf(big + n, cap - n, "{\"vocab\": {");
    for (int i = 0; i < 5000; i++) n += (size_t)snprintf(big + n, cap - n, "%s\"tok%d\\u00e9\": %d", i ? ", " : "", i, i);
    n += (size_t)snprintf(big + n, cap - n, "}, \"merges\": [");
    for (int i = 0; i < 3000; i++) n += (size_t)snprintf(big + n, cap - n, "%s[\"a%d\", \"b\"]", i ? "," : "", i);
    n += (size_t)snprintf(big + n, cap - n, "]}");
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_json *d;
    oc_error e;
    REQUIRE(oc_json_parse(&d, big, n, NULL, &a, &e) == OC_OK);
    uint32_t vocab = oc_json_get(d, 0, "vocab");
    CHECK(oc_json_count(d, vocab) == 5000);
    int64_t id;
    CHECK(oc_json_i64(d, oc_json_get(d, vocab, "tok4321\xc3\xa9"), &id, &e) == OC_OK && id == 4321);
    CHECK(oc_json_str_eq(d, oc_json_pointer(d, 0, "/merges/2999/0"), "a2999"));
    CHECK(oc_json_n_nodes(d) == 1 + 2 + 10000 + 2 + 3000 * 3);
    oc_json_free(d);
    CHECK(c.n_live == 0);
    free(big);

    static const char small[] = "{\"a\": [1, -2.5e3, \"x\\u00e9\\ud83d\\ude00\"], \"b\": {\"c\": null, \"d\": true}}";
    for (size_t k = 0; k < sizeof small - 1; k++) {
        oc_status st = oc_json_parse(&d, small, k, NULL, &a, &e);
        CHECKF(st == OC_ERR_FORMAT, "prefix %zu: status %d", k, st);
        CHECKF(c.n_live == 0, "prefix %zu leaked", k);
    }
    REQUIRE(oc_json_parse(&d, small, sizeof small - 1, NULL, &a, &e) == OC_OK);
    oc_json_free(d);
    CHECK(c.n_live == 0);
}

int main(void) {
    CHECK_RUN(test_basic_document);
    CHECK_RUN(test_scalars_and_duplicates);
    CHECK_RUN(test_strings);
    CHECK_RUN(test_numbers);
    CHECK_RUN(test_errors);
    CHECK_RUN(test_limits);
    CHECK_RUN(test_growth_and_truncation);
    return check_finish();
}
