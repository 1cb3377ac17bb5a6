/* test_gguf.c: the GGUF reader and writer: the shared Qwen2 vocab file, hand-built files, getters,
 * and a corruption corpus generated here from a valid file (every truncation, bogus counts,
 * lengths, types, alignment, tensor shapes and offsets), each failing with its exact message and
 * leaving no allocation behind. */
#include "check.h"
#include "core/dtype.h"
#include "ocellus.h"
#include "ocellus_gguf.h"

#include <stdint.h>

/* ---- a counting allocator: live allocations must return to zero after every close/failure ---- */

/* ---- a byte builder for hand-made (and deliberately broken) files ---- */
typedef struct { unsigned char b[1 << 16]; size_t n; } buf;
static void put(buf *f, const void *p, size_t n) {
    if (f->n + n > sizeof f->b) { check_fail_at(__FILE__, __LINE__, "builder overflow"); return; }
    memcpy(f->b + f->n, p, n);
    f->n += n;
}
static void put_u8(buf *f, uint8_t v) { put(f, &v, 1); }
static void put_u32(buf *f, uint32_t v) { unsigned char b[4]; for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i)); put(f, b, 4); }
static void put_u64(buf *f, uint64_t v) { unsigned char b[8]; for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i)); put(f, b, 8); }
static void put_str(buf *f, const char *s) { put_u64(f, strlen(s)); put(f, s, strlen(s)); }
static void put_header(buf *f, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(f, "GGUF", 4); put_u32(f, version); put_u64(f, n_tensors); put_u64(f, n_kv);
}
static void put_pad(buf *f, size_t align) { while (f->n % align) put_u8(f, 0); }
/* tensor info: name, n_dims, ne..., type, offset */
static void put_tinfo(buf *f, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t offset) {
    put_str(f, name); put_u32(f, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) put_u64(f, (uint64_t)ne[d]);
    put_u32(f, type); put_u64(f, offset);
}

/* Open bytes with a counting allocator; on failure check status and that msg_part is in the
 * message; either way, after close nothing may be left allocated. */
static oc_status open_expect(const void *bytes, size_t n, oc_status want, const char *msg_part, int line) {
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_gguf *g = (oc_gguf *)1;
    oc_error e = { OC_OK, "" };
    oc_status s = oc_gguf_open_bytes(&g, bytes, n, &a, &e);
    if (s != want) check_fail_at(__FILE__, line, "status %d (%s), want %d; message '%s'", s, oc_status_str(s), want, e.message);
    if (s != OC_OK && g != NULL) check_fail_at(__FILE__, line, "*out not NULL on failure");
    if (s != OC_OK && msg_part && !strstr(e.message, msg_part))
        check_fail_at(__FILE__, line, "message '%s' lacks '%s'", e.message, msg_part);
    if (s != OC_OK && s == e.status && !strncmp(e.message, "gguf: ", 6)) { /* ok */ }
    else if (s != OC_OK) check_fail_at(__FILE__, line, "message '%s' should start with 'gguf: '", e.message);
    oc_gguf_close(s == OC_OK ? g : NULL);
    if (c.n_live != 0 || c.bytes_live != 0)
        check_fail_at(__FILE__, line, "%ld allocations (%zu bytes) left", c.n_live, c.bytes_live);
    return s;
}
#define EXPECT_FORMAT(f, part) open_expect((f)->b, (f)->n, OC_ERR_FORMAT, part, __LINE__)

/* ---- the shared Qwen2 vocabulary file -------------------------------------------------------- */

static void test_vocab_qwen2(void) {
    const char *dir = check_shared_data_dir();
    if (!dir) { check_skip("../shared/data not found (set OC_SHARED_DATA)"); return; }
    char path[512];
    snprintf(path, sizeof path, "%s/qwen2-tokenizer/vocab-qwen2.gguf", dir);
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_gguf *g;
    oc_error e;
    REQUIREF(oc_gguf_open(&g, path, &a, &e) == OC_OK, "%s", e.message);
    CHECK(oc_gguf_version(g) == 3);
    CHECK(oc_gguf_n_tensors(g) == 0);
    oc_str s;
    REQUIRE(oc_gguf_get_str(g, "tokenizer.ggml.model", &s, &e) == OC_OK);
    CHECK(s.len == 4 && !memcmp(s.ptr, "gpt2", 4));
    REQUIRE(oc_gguf_get_str(g, "tokenizer.ggml.pre", &s, &e) == OC_OK);
    CHECK(s.len == 5 && !memcmp(s.ptr, "qwen2", 5));
    oc_gguf_type et;
    uint64_t n;
    REQUIRE(oc_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &e) == OC_OK);
    CHECK(et == OC_GGUF_STRING && n == 151936);
    int64_t ki = oc_gguf_find_key(g, "tokenizer.ggml.tokens");
    REQUIRE(ki >= 0);
    s = oc_gguf_arr_str(g, ki, 0);
    CHECKF(s.len == 1 && s.ptr[0] == '!', "token 0 is '%.*s'", (int)s.len, s.ptr);
    s = oc_gguf_arr_str(g, ki, 151643);
    CHECKF(s.len == 13 && !memcmp(s.ptr, "<|endoftext|>", 13), "token 151643 is '%.*s'", (int)s.len, s.ptr);
    s = oc_gguf_arr_str(g, ki, 151936);   /* out of range: empty */
    CHECK(s.len == 0 && s.ptr && s.ptr[0] == '\0');
    REQUIRE(oc_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &e) == OC_OK);
    CHECK(et == OC_GGUF_STRING && n == 151387);
    s = oc_gguf_arr_str(g, oc_gguf_find_key(g, "tokenizer.ggml.merges"), 0);
    CHECKF(s.len == 5 && !memcmp(s.ptr, "\xc4\xa0 \xc4\xa0", 5), "merge 0 '%.*s'", (int)s.len, s.ptr);
    REQUIRE(oc_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &e) == OC_OK);
    CHECK(et == OC_GGUF_I32 && n == 151936);
    int64_t ti = oc_gguf_find_key(g, "tokenizer.ggml.token_type");
    CHECK(oc_gguf_arr_int(g, ti, 0) == 1);        /* normal */
    CHECK(oc_gguf_arr_int(g, ti, 151643) == 3);   /* control */
    int64_t v;
    CHECK(oc_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v, &e) == OC_OK && v == 151643);   /* this vocab file sets eos = <|endoftext|> */
    CHECK(oc_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", NULL, &e) == OC_OK);
    /* type mismatch names key and both types */
    int32_t i32;
    CHECK(oc_gguf_get_i32(g, "tokenizer.ggml.eos_token_id", &i32, &e) == OC_ERR_TYPE);
    CHECKF(strstr(e.message, "'tokenizer.ggml.eos_token_id' has type u32, not i32") != NULL, "%s", e.message);
    CHECK(oc_gguf_get_str(g, "tokenizer.ggml.tokens", &s, &e) == OC_ERR_TYPE);
    CHECKF(strstr(e.message, "has type array of string, not string") != NULL, "%s", e.message);
    CHECK(oc_gguf_get_u32(g, "no.such.key", NULL, &e) == OC_ERR_NOT_FOUND);
    CHECKF(strstr(e.message, "'no.such.key' not found") != NULL, "%s", e.message);
    oc_gguf_close(g);
    CHECK(c.n_live == 0 && c.bytes_live == 0);
}

/* ---- a hand-built file ------------------------------------------------------------------------- */

/* Two keys of each scalar kind the getters read, an i32 array, a string array, and three tensors:
 * f32 [3,2] at 0, q8_0 [32] at 32, f16 [1,1,1,5] at 96 (gap before it). */
static size_t small_marks[4];   /* build_small: start of key #7, tensor info #0, #2, data */
static void build_small(buf *f, uint32_t version) {
    f->n = 0;
    put_header(f, version, 3, 8);
    put_str(f, "general.architecture"); put_u32(f, OC_GGUF_STRING); put_str(f, "qwen2vl");
    put_str(f, "a.u32"); put_u32(f, OC_GGUF_U32); put_u32(f, 7);
    put_str(f, "a.i32"); put_u32(f, OC_GGUF_I32); put_u32(f, (uint32_t)-5);
    put_str(f, "a.f32"); put_u32(f, OC_GGUF_F32); { float x = 1.5f; uint32_t u; memcpy(&u, &x, 4); put_u32(f, u); }
    put_str(f, "a.bool"); put_u32(f, OC_GGUF_BOOL); put_u8(f, 1);
    put_str(f, "a.u64"); put_u32(f, OC_GGUF_U64); put_u64(f, UINT64_MAX);
    put_str(f, "a.arr"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_I32); put_u64(f, 4);
    for (int i = 0; i < 4; i++) put_u32(f, (uint32_t)(i * 10 - 10));
    small_marks[0] = f->n;
    put_str(f, "a.strs"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_STRING); put_u64(f, 3);
    put_str(f, "x"); put_str(f, ""); put_str(f, "h\xc3\xa9llo");
    int64_t ne_a[2] = { 3, 2 }, ne_b[1] = { 32 }, ne_c[4] = { 1, 1, 1, 5 };
    small_marks[1] = f->n;
    put_tinfo(f, "t.a", 2, ne_a, 0, 0);
    put_tinfo(f, "t.b", 1, ne_b, 8, 32);
    small_marks[2] = f->n;
    put_tinfo(f, "t.c", 4, ne_c, 1, 96);
    put_pad(f, 32);
    small_marks[3] = f->n;
    for (int i = 0; i < 96 + 10; i++) put_u8(f, (uint8_t)i);
}

static void test_small_file(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    for (uint32_t version = 2; version <= 3; version++) {
        build_small(f, version);
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_gguf *g;
        oc_error e;
        REQUIREF(oc_gguf_open_bytes(&g, f->b, f->n, &a, &e) == OC_OK, "%s", e.message);
        CHECK(oc_gguf_version(g) == version && oc_gguf_alignment(g) == 32);
        CHECK(oc_gguf_n_keys(g) == 8 && oc_gguf_n_tensors(g) == 3);
        uint32_t u32; int32_t i32; float f32; int b; uint64_t u64; int64_t i64; double d; oc_str s;
        CHECK(oc_gguf_get_u32(g, "a.u32", &u32, &e) == OC_OK && u32 == 7);
        CHECK(oc_gguf_get_i32(g, "a.i32", &i32, &e) == OC_OK && i32 == -5);
        CHECK(oc_gguf_get_f32(g, "a.f32", &f32, &e) == OC_OK && f32 == 1.5f);
        CHECK(oc_gguf_get_float(g, "a.f32", &d, &e) == OC_OK && d == 1.5);
        CHECK(oc_gguf_get_bool(g, "a.bool", &b, &e) == OC_OK && b == 1);
        CHECK(oc_gguf_get_u64(g, "a.u64", &u64, &e) == OC_OK && u64 == UINT64_MAX);
        CHECK(oc_gguf_get_int(g, "a.u32", &i64, &e) == OC_OK && i64 == 7);
        CHECK(oc_gguf_get_int(g, "a.i32", &i64, &e) == OC_OK && i64 == -5);
        CHECK(oc_gguf_get_int(g, "a.bool", &i64, &e) == OC_OK && i64 == 1);
        CHECK(oc_gguf_get_int(g, "a.u64", &i64, &e) == OC_ERR_RANGE);
        CHECK(oc_gguf_get_int(g, "a.f32", &i64, &e) == OC_ERR_TYPE);
        CHECKF(strstr(e.message, "'a.f32' has type f32, not an integer") != NULL, "%s", e.message);
        CHECK(oc_gguf_get_float(g, "a.u32", &d, &e) == OC_ERR_TYPE);
        CHECK(oc_gguf_get_u32(g, "a.i32", &u32, &e) == OC_ERR_TYPE);
        CHECKF(strstr(e.message, "'a.i32' has type i32, not u32") != NULL, "%s", e.message);
        CHECK(oc_gguf_get_f32(g, "a.u32", &f32, &e) == OC_ERR_TYPE);
        CHECK(oc_gguf_get_bool(g, "a.u32", &b, &e) == OC_ERR_TYPE);
        CHECK(oc_gguf_get_u64(g, "a.u32", &u64, &e) == OC_ERR_TYPE);
        CHECK(oc_gguf_get_str(g, "a.u32", &s, &e) == OC_ERR_TYPE);
        CHECK(oc_gguf_get_arr(g, "a.u32", NULL, NULL, &e) == OC_ERR_TYPE);
        CHECKF(strstr(e.message, "'a.u32' has type u32, not array") != NULL, "%s", e.message);
        CHECK(oc_gguf_get_str(g, "general.architecture", &s, &e) == OC_OK && s.len == 7 && !memcmp(s.ptr, "qwen2vl", 7));
        /* keys in file order */
        for (int64_t i = 0; i < oc_gguf_n_keys(g); i++) {
            oc_str k = oc_gguf_key_name(g, i);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)k.len, k.ptr);
            CHECK(oc_gguf_find_key(g, name) == i);
        }
        CHECK(oc_gguf_key_type(g, 6) == OC_GGUF_ARRAY && oc_gguf_key_type(g, 8) == OC_GGUF_NONE);
        CHECK(oc_gguf_key_type(g, -1) == OC_GGUF_NONE && oc_gguf_key_name(g, 99).len == 0);
        oc_gguf_type et; uint64_t n;
        CHECK(oc_gguf_get_arr(g, "a.arr", &et, &n, &e) == OC_OK && et == OC_GGUF_I32 && n == 4);
        for (uint64_t i = 0; i < 4; i++) {
            CHECK(oc_gguf_arr_int(g, 6, i) == (int64_t)i * 10 - 10);
            CHECK(oc_gguf_arr_float(g, 6, i) == (double)i * 10 - 10);
        }
        CHECK(oc_gguf_arr_int(g, 6, 4) == 0 && oc_gguf_arr_int(g, 7, 0) == 0 && oc_gguf_arr_int(g, 1, 0) == 0);
        CHECK(oc_gguf_arr_str(g, 6, 0).len == 0);
        s = oc_gguf_arr_str(g, 7, 0); CHECK(s.len == 1 && s.ptr[0] == 'x');
        s = oc_gguf_arr_str(g, 7, 1); CHECK(s.len == 0);
        s = oc_gguf_arr_str(g, 7, 2); CHECK(s.len == 6 && !memcmp(s.ptr, "h\xc3\xa9llo", 6));
        s = oc_gguf_arr_str(g, 7, 3); CHECK(s.len == 0 && s.ptr && !*s.ptr);
        s = oc_gguf_arr_str(g, -3, 0); CHECK(s.len == 0 && s.ptr);
        /* tensors */
        const oc_gguf_tensor *t = oc_gguf_find_tensor(g, "t.c");
        REQUIRE(t && t == oc_gguf_tensor_at(g, 2));
        CHECK(t->n_dims == 4 && t->ne[3] == 5 && t->dtype == 1 && t->size_bytes == 10 && t->offset_bytes == 96);
        const unsigned char *data = (const unsigned char *)oc_gguf_tensor_at(g, 0)->data;
        CHECK(data && data[0] == 0 && (const unsigned char *)t->data - data == 96 && ((const unsigned char *)t->data)[0] == 96);
        CHECK(oc_gguf_tensor_at(g, 0)->size_bytes == 24 && oc_gguf_tensor_at(g, 0)->ne[2] == 1);
        CHECK(oc_gguf_tensor_at(g, 1)->size_bytes == 34);
        CHECK(oc_gguf_find_tensor(g, "t.d") == NULL && oc_gguf_tensor_at(g, 3) == NULL);
        oc_gguf_close(g);
        CHECK(c.n_live == 0);
    }
    free(f);
}

/* A file missing general.alignment uses 32; a tokenizer-only file may end right after its keys. */
static void test_minimal_files(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    put_header(f, 3, 0, 0);
    CHECK(open_expect(f->b, f->n, OC_OK, NULL, __LINE__) == OC_OK);
    f->n = 0;
    put_header(f, 3, 0, 1);
    put_str(f, "general.alignment"); put_u32(f, OC_GGUF_U32); put_u32(f, 64);
    oc_gguf *g;
    oc_error e;
    REQUIRE(oc_gguf_open_bytes(&g, f->b, f->n, NULL, &e) == OC_OK);
    CHECK(oc_gguf_alignment(g) == 64);
    oc_gguf_close(g);
    oc_gguf_close(NULL);
    CHECK(oc_gguf_open_bytes(NULL, f->b, f->n, NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_open(&g, "tests/no-such.gguf", NULL, &e) == OC_ERR_IO && g == NULL);
    CHECKF(strstr(e.message, "tests/no-such.gguf") != NULL, "%s", e.message);
    CHECK(oc_gguf_open(&g, "tests/check.h", NULL, &e) == OC_ERR_FORMAT && g == NULL);
    CHECKF(strstr(e.message, "tests/check.h: gguf: bad magic") != NULL, "%s", e.message);
    free(f);
}

/* ---- the corruption corpus ----------------------------------------------------------------- */

/* One f32 tensor [8] "t" after nk keys; the writer-free base of most corruption cases. */
static void tail_one_tensor(buf *f, uint32_t type, uint32_t n_dims, const int64_t *ne, uint64_t offset) {
    put_tinfo(f, "t", n_dims, ne, type, offset);
    put_pad(f, 32);
    for (int i = 0; i < 64; i++) put_u8(f, 0);
}

static void test_corrupt_header(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    EXPECT_FORMAT(f, "gguf: magic runs past end of file (needs 4 bytes at byte 0, file is 0 bytes)");
    put(f, "GGUX", 4); put_u32(f, 3); put_u64(f, 0); put_u64(f, 0);
    EXPECT_FORMAT(f, "bad magic 'GGUX'");
    f->n = 0; put_header(f, 1, 0, 0);
    EXPECT_FORMAT(f, "version 1 is not supported");
    f->n = 0; put_header(f, 4, 0, 0);
    EXPECT_FORMAT(f, "unknown version 4");
    f->n = 0; put_header(f, 0, 0, 0);
    EXPECT_FORMAT(f, "unknown version 0");
    f->n = 0; put_header(f, 0x03000000u, 0, 0);
    EXPECT_FORMAT(f, "version field 0x03000000 looks byte-swapped: big-endian GGUF files are not supported");
    f->n = 0; put_header(f, 3, 0, (uint64_t)-1);
    EXPECT_FORMAT(f, "n_kv = -1 is negative");
    f->n = 0; put_header(f, 3, (uint64_t)-5, 0);
    EXPECT_FORMAT(f, "n_tensors = -5 is negative");
    f->n = 0; put_header(f, 3, 0, 1ull << 40);
    EXPECT_FORMAT(f, "n_kv = 1099511627776 is implausible: 0 bytes remain after the header");
    f->n = 0; put_header(f, 3, 0, 3); put_str(f, "abcdefghijklm"); put_u32(f, 0); put_u8(f, 1);
    EXPECT_FORMAT(f, "n_kv = 3 is implausible: 26 bytes remain after the header, each key/value needs at least 13");
    f->n = 0; put_header(f, 3, INT64_MAX, 0);
    EXPECT_FORMAT(f, "n_tensors = 9223372036854775807 is implausible");
    free(f);
}

static void test_corrupt_keys(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    /* (c) huge lengths */
    put_header(f, 3, 0, 1); put_u64(f, 1ull << 63); put(f, "abcdefgh", 8);
    EXPECT_FORMAT(f, "gguf: key #0: name (9223372036854775808 bytes) runs past end of file (needs 9223372036854775808 bytes at byte 32, file is 40 bytes)");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "k"); put_u32(f, OC_GGUF_STRING); put_u64(f, UINT64_MAX); put_u8(f, 'x');
    EXPECT_FORMAT(f, "gguf: key #0 'k': string value (18446744073709551615 bytes) runs past end of file");
    /* (d) huge array counts */
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "tokenizer.ggml.tokens"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_STRING); put_u64(f, 151936);
    put_str(f, "a"); put_str(f, "b");
    EXPECT_FORMAT(f, "gguf: key #0 'tokenizer.ggml.tokens': array of 151936 strings runs past end of file at byte 69 (file is 87 bytes)");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "a"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_I32); put_u64(f, 1ull << 62); put_u32(f, 0);
    EXPECT_FORMAT(f, "gguf: key #0 'a': array of 4611686018427387904 i32 runs past end of file at byte 49 (file is 53 bytes)");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "a"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_STRING); put_u64(f, 3);
    put_str(f, "x"); put_u64(f, 50); put(f, "abcdefghijkl", 12);   /* string #1 is cut short */
    EXPECT_FORMAT(f, "gguf: key #0 'a': string #1 of 3 (50 bytes) runs past end of file (needs 50 bytes at byte 66, file is 78 bytes)");
    /* (e) nested array, (f) unknown types */
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "a"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_ARRAY); put_u64(f, 0);
    EXPECT_FORMAT(f, "gguf: key #0 'a': nested arrays are not supported");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "a"); put_u32(f, 13); put_u64(f, 0);
    EXPECT_FORMAT(f, "gguf: key #0 'a': unknown value type 13");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "a"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, 99); put_u64(f, 0);
    EXPECT_FORMAT(f, "gguf: key #0 'a': unknown array element type 99");
    /* (g) duplicate key */
    f->n = 0; put_header(f, 3, 0, 3);
    put_str(f, "a"); put_u32(f, OC_GGUF_U8); put_u8(f, 1);
    put_str(f, "b"); put_u32(f, OC_GGUF_U8); put_u8(f, 1);
    put_str(f, "a"); put_u32(f, OC_GGUF_I8); put_u8(f, 2);
    EXPECT_FORMAT(f, "gguf: key #2 'a' duplicates key #0");
    /* (h) alignment of the wrong type, not a power of two */
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "general.alignment"); put_u32(f, OC_GGUF_I32); put_u32(f, 32);
    EXPECT_FORMAT(f, "gguf: key #0 'general.alignment': alignment must be u32, not i32");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "general.alignment"); put_u32(f, OC_GGUF_U32); put_u32(f, 48);
    EXPECT_FORMAT(f, "gguf: key #0 'general.alignment': alignment 48 is not a power of two");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "general.alignment"); put_u32(f, OC_GGUF_U32); put_u32(f, 0);
    EXPECT_FORMAT(f, "alignment 0 is not a power of two");
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "general.alignment"); put_u32(f, OC_GGUF_ARRAY); put_u32(f, OC_GGUF_U32); put_u64(f, 0);
    EXPECT_FORMAT(f, "alignment must be u32, not an array");
    /* control characters in names are shown as '?' so the message stays one line */
    f->n = 0; put_header(f, 3, 0, 1); put_str(f, "a\nb"); put_u32(f, 77);
    EXPECT_FORMAT(f, "gguf: key #0 'a?b': unknown value type 77");
    free(f);
}

static void test_corrupt_tensors(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    int64_t ne8[1] = { 8 };
    /* base case opens */
    put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 1, ne8, 0);
    CHECK(open_expect(f->b, f->n, OC_OK, NULL, __LINE__) == OC_OK);
    /* (i) misaligned offset, (j) out of range, overflowing */
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 1, ne8, 4);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': offset 4 is not a multiple of alignment 32");
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 1, ne8, 64);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': data (offset 64 + 32 bytes, data section at byte 64) runs past end of file (file is 128 bytes)");
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 1, ne8, UINT64_MAX - 31);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': data (offset 18446744073709551584 + 32 bytes");
    /* (k) n_dims 0 and 5 */
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 0, ne8, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': n_dims 0 is not in 1..4");
    int64_t ne5[5] = { 1, 1, 1, 1, 1 };
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 5, ne5, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': n_dims 5 is not in 1..4");
    /* (l) element count / byte size overflow, negative ne */
    int64_t big[2] = { 1ll << 32, 1ll << 32 };
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 2, big, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': element count of ne = [4294967296, 4294967296, 1, 1] overflows int64");
    int64_t big1[1] = { 1ll << 62 };
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 1, big1, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': byte size of f32 ne = [4611686018427387904, 1, 1, 1] overflows");
    int64_t neg[2] = { 8, -1 };
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 0, 2, neg, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': ne[1] = -1 is negative");
    /* (m) unknown type, (n) ne[0] not a multiple of the block */
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 99, 1, ne8, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': unknown tensor type 99");
    int64_t ne33[1] = { 33 };
    f->n = 0; put_header(f, 3, 1, 0); tail_one_tensor(f, 8, 1, ne33, 0);
    EXPECT_FORMAT(f, "gguf: tensor #0 't': ne[0] = 33 is not a multiple of the q8_0 block size 32");
    /* duplicate tensor names; data section beyond the end */
    f->n = 0; put_header(f, 3, 2, 0); put_tinfo(f, "t", 1, ne8, 0, 0); tail_one_tensor(f, 0, 1, ne8, 32);
    EXPECT_FORMAT(f, "gguf: tensor #1 't' duplicates the name of tensor #0");
    f->n = 0; put_header(f, 3, 1, 0); put_tinfo(f, "t", 1, ne8, 0, 0);
    EXPECT_FORMAT(f, "gguf: data section starts at byte 64 (tensor infos end at 57, alignment 32), past end of file (file is 57 bytes)");
    /* zero-sized tensors and overlapping tensors are accepted */
    int64_t ne0[2] = { 8, 0 };
    f->n = 0; put_header(f, 3, 2, 0); put_tinfo(f, "z", 2, ne0, 0, 64); tail_one_tensor(f, 0, 1, ne8, 0);
    CHECK(open_expect(f->b, f->n, OC_OK, NULL, __LINE__) == OC_OK);
    f->n = 0; put_header(f, 3, 2, 0); put_tinfo(f, "u", 1, ne8, 0, 0); tail_one_tensor(f, 0, 1, ne8, 0);
    CHECK(open_expect(f->b, f->n, OC_OK, NULL, __LINE__) == OC_OK);
    free(f);
}

/* (a) Every prefix of a valid file shorter than its last tensor's end fails with a message naming
 * the field being read; longer prefixes (cutting only the final padding) open. */
static void test_truncation_every_byte(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    build_small(f, 3);
    oc_gguf *g;
    oc_error e;
    REQUIRE(oc_gguf_open_bytes(&g, f->b, f->n, NULL, &e) == OC_OK);
    const oc_gguf_tensor *last = oc_gguf_tensor_at(g, 2);
    size_t need = (size_t)((const unsigned char *)last->data - f->b) + (size_t)last->size_bytes;
    oc_gguf_close(g);
    static const char *const fields[] = { "magic", "version", "n_tensors", "n_kv", "length of name",
        "name (", "value type", "value", "array element type", "array count", "strings",
        "string #", "n_dims", "ne[", "type", "offset", "data section", "data (offset", "n_kv =", "n_tensors =" };
    for (size_t n = 0; n < f->n; n++) {
        check_alloc c = { 0 };
        oc_allocator a = { check_alloc_fn, &c };
        oc_status s = oc_gguf_open_bytes(&g, f->b, n, &a, &e);
        if (n >= need) {
            CHECKF(s == OC_OK, "prefix %zu of %zu: %s", n, f->n, e.message);
            oc_gguf_close(g);
        } else {
            CHECKF(s == OC_ERR_FORMAT && g == NULL, "prefix %zu: status %d", n, s);
            int named = 0;
            for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) named |= strstr(e.message, fields[i]) != NULL;
            CHECKF(named && (strstr(e.message, "past end of file") || strstr(e.message, "is implausible")),
                   "prefix %zu: '%s'", n, e.message);
        }
        CHECKF(c.n_live == 0, "prefix %zu leaks %ld", n, c.n_live);
    }
    /* spot checks of the exact field (cuts early in the file are caught by the count check) */
    size_t k7 = small_marks[0], t0 = small_marks[1], t2 = small_marks[2], d = small_marks[3];
    char m[8][160];
    snprintf(m[0], 160, "gguf: key #7: length of name runs past end of file (needs 8 bytes at byte %zu, file is %zu bytes)", k7, k7 + 3);
    snprintf(m[1], 160, "gguf: key #7: name (6 bytes) runs past end of file (needs 6 bytes at byte %zu", k7 + 8);
    snprintf(m[2], 160, "gguf: key #7 'a.strs': value type runs past end of file (needs 4 bytes at byte %zu", k7 + 14);
    snprintf(m[3], 160, "gguf: key #7 'a.strs': array element type runs past");
    snprintf(m[4], 160, "gguf: key #7 'a.strs': array count runs past");
    snprintf(m[5], 160, "gguf: tensor #0 't.a': n_dims runs past end of file (needs 4 bytes at byte %zu", t0 + 11);
    snprintf(m[6], 160, "gguf: tensor #2 't.c': ne[3] runs past end of file (needs 8 bytes at byte %zu", t2 + 11 + 4 + 24);
    snprintf(m[7], 160, "gguf: tensor #2 't.c': data (offset 96 + 10 bytes, data section at byte %zu) runs past end of file (file is %zu bytes)", d, d + 100);
    struct { size_t n; const char *msg; } cuts[] = {
        { 2, "gguf: magic runs past end of file (needs 4 bytes at byte 0, file is 2 bytes)" },
        { 6, "gguf: version runs past" }, { 12, "gguf: n_tensors runs past" }, { 20, "gguf: n_kv runs past" },
        { k7 + 3, m[0] }, { k7 + 9, m[1] }, { k7 + 15, m[2] }, { k7 + 19, m[3] }, { k7 + 25, m[4] },
        { t0 + 12, m[5] }, { t2 + 11 + 4 + 24 + 1, m[6] }, { d + 100, m[7] },
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) open_expect(f->b, cuts[i].n, OC_ERR_FORMAT, cuts[i].msg, __LINE__);
    free(f);
}

/* Out-of-memory at every allocation of an open: NOMEM, nothing leaked. */
static void test_reader_nomem(void) {
    buf *f = calloc(1, sizeof *f);
    REQUIRE(f);
    build_small(f, 3);
    int saw_ok = 0;
    for (long k = 1; k < 20 && !saw_ok; k++) {
        check_alloc c = { .fail_at = k };
        oc_allocator a = { check_alloc_fn, &c };
        oc_gguf *g;
        oc_error e;
        oc_status s = oc_gguf_open_bytes(&g, f->b, f->n, &a, &e);
        CHECKF(s == OC_OK || s == OC_ERR_NOMEM, "fail_at %ld: %d %s", k, s, e.message);
        saw_ok = s == OC_OK;
        oc_gguf_close(g);
        CHECKF(c.n_live == 0, "fail_at %ld leaks", k);
    }
    CHECK(saw_ok);
    free(f);
}

/* ---- writer ---------------------------------------------------------------------------------- */

#define TMP_PATH "build/tests/test_gguf.tmp.gguf"

static int read_file(const char *path, unsigned char **out, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *out = malloc((size_t)len + 1);
    *n = fread(*out, 1, (size_t)len, fp);
    fclose(fp);
    return *n == (size_t)len;
}

/* Streamed tensor content: byte j of row r is (r * 7 + j) & 255. */
typedef struct { uint64_t row_bytes; long n_calls; int fail; } fill_ctx;
static oc_status fill_rows(void *user, void *dst, uint64_t first_row, uint64_t n_rows, oc_error *err) {
    fill_ctx *c = user;
    c->n_calls++;
    if (c->fail) { oc_fail(err, OC_ERR_UNSUPPORTED, "fill says no"); return OC_ERR_UNSUPPORTED; }
    unsigned char *p = dst;
    for (uint64_t r = 0; r < n_rows; r++)
        for (uint64_t j = 0; j < c->row_bytes; j++) p[r * c->row_bytes + j] = (unsigned char)((first_row + r) * 7 + j);
    return OC_OK;
}

static const int32_t all_dtypes[] = { 0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20, 23, 24, 25, 26, 27, 28, 30, 39 };

static void test_writer_roundtrip(void) {
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_gguf_writer *w;
    oc_error e;
    REQUIRE(oc_gguf_writer_open(&w, &a, &e) == OC_OK);
    /* every scalar type, with edge values */
    uint8_t u8 = 255; int8_t i8 = -128; uint16_t u16 = 65535; int16_t i16 = -32768;
    uint32_t u32 = 4294967295u; int32_t i32 = INT32_MIN; float f32 = -0.0f; uint8_t bl = 1;
    uint64_t u64 = UINT64_MAX; int64_t i64 = INT64_MIN; double f64 = 5e-324;
    const void *vals[] = { &u8, &i8, &u16, &i16, &u32, &i32, &f32, &bl, NULL, NULL, &u64, &i64, &f64 };
    for (int t = 0; t <= 12; t++) {
        char key[32];
        snprintf(key, sizeof key, "s.%d", t);
        if (vals[t]) CHECKF(oc_gguf_writer_add_scalar(w, key, (oc_gguf_type)t, vals[t], &e) == OC_OK, "%s", e.message);
        else CHECK(oc_gguf_writer_add_scalar(w, key, (oc_gguf_type)t, &u8, &e) == OC_ERR_INVALID);
    }
    CHECK(oc_gguf_writer_add_u32(w, "w.u32", 123, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_i32(w, "w.i32", -123, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_u64(w, "w.u64", 1ull << 40, &e) == OC_OK);
    float nanf; uint32_t nan_bits = 0x7fc01234u; memcpy(&nanf, &nan_bits, 4);
    CHECK(oc_gguf_writer_add_f32(w, "w.f32", nanf, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_bool(w, "w.bool", 7, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_str(w, "w.str", "", &e) == OC_OK);
    CHECK(oc_gguf_writer_add_str(w, "w.utf8", "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", &e) == OC_OK);
    /* arrays of each fixed type: 5 elements with extremes */
    int64_t ints[5] = { 0, 1, -1, INT64_MAX, INT64_MIN };
    for (int t = 0; t <= 12; t++) {
        if (t == OC_GGUF_STRING || t == OC_GGUF_ARRAY) continue;
        unsigned char raw[5 * 8];
        for (int i = 0; i < 5; i++) {
            int64_t v = ints[i];
            switch (t) {
            case 0: case 7: { uint8_t x = (uint8_t)(t == 7 ? (v & 1) : v); memcpy(raw + i, &x, 1); break; }
            case 1: { int8_t x = (int8_t)v; memcpy(raw + i, &x, 1); break; }
            case 2: { uint16_t x = (uint16_t)v; memcpy(raw + 2 * i, &x, 2); break; }
            case 3: { int16_t x = (int16_t)v; memcpy(raw + 2 * i, &x, 2); break; }
            case 4: { uint32_t x = (uint32_t)v; memcpy(raw + 4 * i, &x, 4); break; }
            case 5: { int32_t x = (int32_t)v; memcpy(raw + 4 * i, &x, 4); break; }
            case 6: { float x = (float)v * 0.5f; memcpy(raw + 4 * i, &x, 4); break; }
            case 10: { uint64_t x = (uint64_t)v; memcpy(raw + 8 * i, &x, 8); break; }
            case 11: memcpy(raw + 8 * i, &v, 8); break;
            case 12: { double x = (double)v * 0.25; memcpy(raw + 8 * i, &x, 8); break; }
            }
        }
        char key[32];
        snprintf(key, sizeof key, "a.%d", t);
        CHECKF(oc_gguf_writer_add_arr(w, key, (oc_gguf_type)t, raw, 5, &e) == OC_OK, "%s", e.message);
    }
    CHECK(oc_gguf_writer_add_arr(w, "a.empty", OC_GGUF_F32, NULL, 0, &e) == OC_OK);
    const char *strs[] = { "", "a", "\xc4\xa0h\xc3\xa9", "with\nnewline" };
    CHECK(oc_gguf_writer_add_arr_str(w, "a.str", strs, 4, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_arr_str(w, "a.str0", NULL, 0, &e) == OC_OK);
    CHECK(oc_gguf_writer_set_alignment(w, 64, &e) == OC_OK);
    /* a tensor of every known dtype with odd shapes; data is random */
    check_rng rng = { 0x9e3779b97f4a7c15ull };
    enum { NT = sizeof all_dtypes / sizeof all_dtypes[0] };
    unsigned char *data[NT];
    uint64_t sizes[NT];
    int64_t shapes[NT][4];
    for (int i = 0; i < NT; i++) {
        const oc_dtype_traits *tr = oc_dtype_get(all_dtypes[i]);
        REQUIRE(tr);
        int64_t ne[4] = { tr->block_elems * (1 + i % 3), 1 + i % 5, 3, 1 + i % 2 };
        memcpy(shapes[i], ne, sizeof ne);
        uint32_t n_dims = 1 + (uint32_t)(i % 4);
        for (uint32_t d = n_dims; d < 4; d++) shapes[i][d] = 1;
        sizes[i] = oc_dtype_row_bytes(all_dtypes[i], (uint64_t)ne[0]) * (uint64_t)(shapes[i][1] * shapes[i][2] * shapes[i][3]);
        data[i] = malloc(sizes[i]);
        for (uint64_t j = 0; j < sizes[i]; j++) data[i][j] = (unsigned char)check_rng_u64(&rng);
        char name[32];
        snprintf(name, sizeof name, "t.%s", tr->name);
        CHECKF(oc_gguf_writer_add_tensor(w, name, all_dtypes[i], n_dims, shapes[i], data[i], &e) == OC_OK, "%s", e.message);
    }
    int64_t ne_empty[2] = { 32, 0 };
    CHECK(oc_gguf_writer_add_tensor(w, "t.empty", OC_DTYPE_Q8_0, 2, ne_empty, NULL, &e) == OC_OK);
    /* streamed: q4_0 [64, 3, 5]: rows of 36 bytes */
    int64_t ne_s[3] = { 64, 3, 5 };
    fill_ctx fc = { 36, 0, 0 };
    CHECK(oc_gguf_writer_add_tensor_fn(w, "t.streamed", OC_DTYPE_Q4_0, 3, ne_s, fill_rows, &fc, &e) == OC_OK);
    /* streamed and bigger than one 4 MiB chunk: f16 [4096, 700], 512 rows per chunk */
    int64_t ne_big[2] = { 4096, 700 };
    fill_ctx fc_big = { 8192, 0, 0 };
    CHECK(oc_gguf_writer_add_tensor_fn(w, "t.big", OC_DTYPE_F16, 2, ne_big, fill_rows, &fc_big, &e) == OC_OK);
    REQUIREF(oc_gguf_writer_write(w, TMP_PATH, &e) == OC_OK, "%s", e.message);
    CHECK(fc.n_calls == 1 && fc_big.n_calls == 2);
    oc_gguf_writer_close(w);
    CHECK(c.n_live == 0);

    /* read back: the file as bytes (layout) and through the reader */
    unsigned char *file;
    size_t n_file;
    REQUIRE(read_file(TMP_PATH, &file, &n_file));
    oc_gguf *g;
    REQUIREF(oc_gguf_open(&g, TMP_PATH, &a, &e) == OC_OK, "%s", e.message);
    CHECK(oc_gguf_version(g) == 3 && oc_gguf_alignment(g) == 64);
    CHECK(oc_gguf_n_keys(g) == 11 + 7 + 11 + 3 + 1 && oc_gguf_n_tensors(g) == NT + 3);
    CHECK(!memcmp(oc_gguf_key_name(g, 0).ptr, "s.0", 3) && !memcmp(oc_gguf_key_name(g, 32).ptr, "general.alignment", 17));
    int64_t v;
    for (int t = 0; t <= 12; t++) {
        char key[32];
        snprintf(key, sizeof key, "s.%d", t);
        if (!vals[t]) { CHECK(oc_gguf_find_key(g, key) < 0); continue; }
        CHECK(oc_gguf_key_type(g, oc_gguf_find_key(g, key)) == (oc_gguf_type)t);
    }
    CHECK(oc_gguf_get_int(g, "s.0", &v, &e) == OC_OK && v == 255);
    CHECK(oc_gguf_get_int(g, "s.1", &v, &e) == OC_OK && v == -128);
    CHECK(oc_gguf_get_int(g, "s.2", &v, &e) == OC_OK && v == 65535);
    CHECK(oc_gguf_get_int(g, "s.3", &v, &e) == OC_OK && v == -32768);
    uint32_t ru32; int32_t ri32; uint64_t ru64; float rf32; double rf64; int rb; oc_str rs;
    CHECK(oc_gguf_get_u32(g, "s.4", &ru32, &e) == OC_OK && ru32 == u32);
    CHECK(oc_gguf_get_i32(g, "s.5", &ri32, &e) == OC_OK && ri32 == i32);
    CHECK(oc_gguf_get_f32(g, "s.6", &rf32, &e) == OC_OK && !memcmp(&rf32, &f32, 4));
    CHECK(oc_gguf_get_bool(g, "s.7", &rb, &e) == OC_OK && rb == 1);
    CHECK(oc_gguf_get_u64(g, "s.10", &ru64, &e) == OC_OK && ru64 == u64);
    CHECK(oc_gguf_get_int(g, "s.11", &v, &e) == OC_OK && v == INT64_MIN);
    CHECK(oc_gguf_get_float(g, "s.12", &rf64, &e) == OC_OK && !memcmp(&rf64, &f64, 8));
    CHECK(oc_gguf_get_u32(g, "w.u32", &ru32, &e) == OC_OK && ru32 == 123);
    CHECK(oc_gguf_get_i32(g, "w.i32", &ri32, &e) == OC_OK && ri32 == -123);
    CHECK(oc_gguf_get_u64(g, "w.u64", &ru64, &e) == OC_OK && ru64 == 1ull << 40);
    CHECK(oc_gguf_get_f32(g, "w.f32", &rf32, &e) == OC_OK && !memcmp(&rf32, &nan_bits, 4));
    CHECK(oc_gguf_get_bool(g, "w.bool", &rb, &e) == OC_OK && rb == 1);
    CHECK(oc_gguf_get_str(g, "w.str", &rs, &e) == OC_OK && rs.len == 0);
    CHECK(oc_gguf_get_str(g, "w.utf8", &rs, &e) == OC_OK && rs.len == 11 && !memcmp(rs.ptr, "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80", 11));
    for (int t = 0; t <= 12; t++) {
        if (t == OC_GGUF_STRING || t == OC_GGUF_ARRAY) continue;
        char key[32];
        snprintf(key, sizeof key, "a.%d", t);
        oc_gguf_type et; uint64_t n;
        REQUIRE(oc_gguf_get_arr(g, key, &et, &n, &e) == OC_OK);
        CHECK(et == (oc_gguf_type)t && n == 5);
        int64_t ki = oc_gguf_find_key(g, key);
        for (int i = 0; i < 5; i++) {
            int64_t x = ints[i], got = oc_gguf_arr_int(g, ki, (uint64_t)i);
            double gf = oc_gguf_arr_float(g, ki, (uint64_t)i);
            switch (t) {
            case 0: CHECK(got == (uint8_t)x); break;
            case 7: CHECK(got == (x & 1)); break;
            case 1: CHECK(got == (int8_t)x); break;
            case 2: CHECK(got == (uint16_t)x); break;
            case 3: CHECK(got == (int16_t)x); break;
            case 4: CHECK(got == (uint32_t)x); break;
            case 5: CHECK(got == (int32_t)x); break;
            case 6: { float want = (float)x * 0.5f, gotf = (float)gf; CHECK(!memcmp(&want, &gotf, 4) && got == 0); break; }
            case 10: CHECK(got == ((uint64_t)x > INT64_MAX ? INT64_MAX : x) && gf == (double)(uint64_t)x); break;
            case 11: CHECK(got == x); break;
            case 12: { double want = (double)x * 0.25; CHECK(!memcmp(&want, &gf, 8)); break; }
            }
        }
    }
    oc_gguf_type et; uint64_t n;
    CHECK(oc_gguf_get_arr(g, "a.empty", &et, &n, &e) == OC_OK && et == OC_GGUF_F32 && n == 0);
    CHECK(oc_gguf_get_arr(g, "a.str0", &et, &n, &e) == OC_OK && et == OC_GGUF_STRING && n == 0);
    int64_t si = oc_gguf_find_key(g, "a.str");
    for (uint64_t i = 0; i < 4; i++) {
        oc_str x = oc_gguf_arr_str(g, si, i);
        CHECK(x.len == strlen(strs[i]) && !memcmp(x.ptr, strs[i], x.len));
    }
    /* tensors: layout exactly as llama.cpp writes it */
    uint64_t offset = 0;
    const unsigned char *data0 = oc_gguf_tensor_at(g, 0)->data;
    for (int i = 0; i < NT + 3; i++) {
        const oc_gguf_tensor *t = oc_gguf_tensor_at(g, i);
        REQUIRE(t);
        CHECKF(t->offset_bytes == offset, "tensor %d offset %llu, want %llu", i, (unsigned long long)t->offset_bytes, (unsigned long long)offset);
        CHECK((const unsigned char *)t->data == data0 + offset);
        offset += (t->size_bytes + 63) / 64 * 64;
        if (i < NT) {
            CHECK(t->dtype == all_dtypes[i] && t->n_dims == 1 + (uint32_t)(i % 4));
            CHECK(!memcmp(t->ne, shapes[i], sizeof shapes[i]));
            CHECKF(t->size_bytes == sizes[i] && !memcmp(t->data, data[i], sizes[i]), "tensor %d data", i);
        }
    }
    const oc_gguf_tensor *ts = oc_gguf_find_tensor(g, "t.streamed");
    REQUIRE(ts && ts->size_bytes == 15 * 36 && ts->ne[2] == 5);
    for (uint64_t r = 0; r < 15; r++)
        for (uint64_t j = 0; j < 36; j++)
            CHECK(((const unsigned char *)ts->data)[r * 36 + j] == (unsigned char)(r * 7 + j));
    CHECK(oc_gguf_find_tensor(g, "t.empty")->size_bytes == 0);
    const oc_gguf_tensor *tb = oc_gguf_find_tensor(g, "t.big");
    REQUIRE(tb && tb->size_bytes == 700 * 8192 && tb == oc_gguf_tensor_at(g, NT + 2));
    int bad_bytes = 0;
    for (uint64_t r = 0; r < 700; r++)
        for (uint64_t j = 0; j < 8192; j++)
            bad_bytes += ((const unsigned char *)tb->data)[r * 8192 + j] != (unsigned char)(r * 7 + j);
    CHECK(bad_bytes == 0);
    CHECKF(n_file % 64 == 0, "file size %zu padded to the alignment", n_file);
    CHECK((size_t)((const unsigned char *)tb->data - data0) + tb->size_bytes == offset);
    oc_gguf_close(g);
    CHECK(c.n_live == 0);
    /* the same bytes through open_bytes: data pointers relative to the buffer */
    REQUIRE(oc_gguf_open_bytes(&g, file, n_file, NULL, &e) == OC_OK);
    CHECK((size_t)((const unsigned char *)oc_gguf_tensor_at(g, 0)->data - file) % 64 == 0);
    CHECK((size_t)((const unsigned char *)oc_gguf_tensor_at(g, 0)->data - file) + offset == n_file);
    oc_gguf_close(g);
    for (int i = 0; i < NT; i++) free(data[i]);
    free(file);
    remove(TMP_PATH);
}

static void test_writer_errors(void) {
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_gguf_writer *w;
    oc_error e;
    REQUIRE(oc_gguf_writer_open(&w, &a, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_u32(w, "k", 1, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_i32(w, "k", 1, &e) == OC_ERR_INVALID);
    CHECKF(strstr(e.message, "duplicate key 'k'") != NULL, "%s", e.message);
    CHECK(oc_gguf_writer_add_str(w, "s", NULL, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_arr(w, "arr", OC_GGUF_STRING, "x", 1, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_arr(w, "arr", OC_GGUF_ARRAY, "x", 1, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_arr(w, "arr", OC_GGUF_U8, NULL, 1, &e) == OC_ERR_INVALID);
    const char *bad[] = { "a", NULL };
    CHECK(oc_gguf_writer_add_arr_str(w, "arr", bad, 2, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_set_alignment(w, 48, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_set_alignment(w, 0, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_str(w, "general.alignment", "32", &e) == OC_ERR_INVALID);
    CHECKF(strstr(e.message, "general.alignment must be u32, not string") != NULL, "%s", e.message);
    CHECK(oc_gguf_writer_add_u32(w, "general.alignment", 12, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_u32(w, "general.alignment", 16, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_u32(w, "general.alignment", 16, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_set_alignment(w, 8, &e) == OC_OK);   /* updates the key in place */
    float x[64] = { 0 };
    int64_t ne[4] = { 32, 2, 1, 1 };
    CHECK(oc_gguf_writer_add_tensor(w, "t", OC_DTYPE_F32, 2, ne, x, &e) == OC_OK);
    CHECK(oc_gguf_writer_add_tensor(w, "t", OC_DTYPE_F32, 2, ne, x, &e) == OC_ERR_INVALID);
    CHECKF(strstr(e.message, "duplicate tensor name 't'") != NULL, "%s", e.message);
    CHECK(oc_gguf_writer_add_tensor(w, "u", OC_DTYPE_F32, 2, ne, NULL, &e) == OC_ERR_INVALID);
    CHECKF(strstr(e.message, "tensor 'u': NULL data for 256 bytes") != NULL, "%s", e.message);
    CHECK(oc_gguf_writer_add_tensor(w, "u", 99, 2, ne, x, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_tensor(w, "u", OC_DTYPE_F32, 0, ne, x, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_tensor(w, "u", OC_DTYPE_F32, 5, ne, x, &e) == OC_ERR_INVALID);
    int64_t ne_bad[1] = { 31 };
    CHECK(oc_gguf_writer_add_tensor(w, "u", OC_DTYPE_Q4_K, 1, ne_bad, x, &e) == OC_ERR_INVALID);
    CHECKF(strstr(e.message, "ne[0] = 31 is not a multiple of the q4_k block size 256") != NULL, "%s", e.message);
    int64_t ne_neg[2] = { 32, -2 };
    CHECK(oc_gguf_writer_add_tensor(w, "u", OC_DTYPE_F32, 2, ne_neg, x, &e) == OC_ERR_INVALID);
    int64_t ne_huge[2] = { 1ll << 40, 1ll << 40 };
    CHECK(oc_gguf_writer_add_tensor(w, "u", OC_DTYPE_F32, 2, ne_huge, x, &e) == OC_ERR_INVALID);
    CHECK(oc_gguf_writer_add_tensor_fn(w, "u", OC_DTYPE_F32, 2, ne, NULL, NULL, &e) == OC_ERR_INVALID);
    /* I/O errors name the path and the reason */
    CHECK(oc_gguf_writer_write(w, "build/no-such-dir/x.gguf", &e) == OC_ERR_IO);
    CHECKF(strstr(e.message, "build/no-such-dir/x.gguf: cannot create: No such file or directory") != NULL, "%s", e.message);
    /* the valid part still writes, with alignment 8 */
    REQUIREF(oc_gguf_writer_write(w, TMP_PATH, &e) == OC_OK, "%s", e.message);
    oc_gguf *g;
    REQUIRE(oc_gguf_open(&g, TMP_PATH, NULL, &e) == OC_OK);
    CHECK(oc_gguf_alignment(g) == 8 && oc_gguf_n_keys(g) == 2 && oc_gguf_n_tensors(g) == 1);
    oc_gguf_close(g);
    /* a failing fill fails the write, keeps its message and removes the partial file */
    fill_ctx fc = { 128, 0, 1 };
    CHECK(oc_gguf_writer_add_tensor_fn(w, "f", OC_DTYPE_F32, 2, ne, fill_rows, &fc, &e) == OC_OK);
    CHECK(oc_gguf_writer_write(w, TMP_PATH, &e) == OC_ERR_UNSUPPORTED);
    CHECKF(strstr(e.message, "fill says no") != NULL, "%s", e.message);
    FILE *fp = fopen(TMP_PATH, "rb");
    CHECK(fp == NULL);
    if (fp) fclose(fp);
    oc_gguf_writer_close(w);
    oc_gguf_writer_close(NULL);
    CHECK(c.n_live == 0);
    /* out of memory at every allocation of a writer's life: NOMEM and no leak */
    int saw_ok = 0;
    for (long k = 1; k < 40 && !saw_ok; k++) {
        check_alloc c2 = { .fail_at = k };
        oc_allocator a2 = { check_alloc_fn, &c2 };
        oc_status s = oc_gguf_writer_open(&w, &a2, &e);
        if (s == OC_OK) s = oc_gguf_writer_add_str(w, "general.name", "x", &e);
        if (s == OC_OK) s = oc_gguf_writer_add_arr_str(w, "toks", bad, 1, &e);
        if (s == OC_OK) s = oc_gguf_writer_add_tensor(w, "t", OC_DTYPE_F32, 2, ne, x, &e);
        if (s == OC_OK) s = oc_gguf_writer_add_tensor_fn(w, "f", OC_DTYPE_F32, 2, ne, fill_rows, &fc, &e);
        fc.fail = 0;
        if (s == OC_OK) s = oc_gguf_writer_write(w, TMP_PATH, &e);
        CHECKF(s == OC_OK || s == OC_ERR_NOMEM, "fail_at %ld: %d %s", k, s, e.message);
        saw_ok = s == OC_OK;
        oc_gguf_writer_close(w);
        w = NULL;
        CHECKF(c2.n_live == 0, "fail_at %ld leaks %ld", k, c2.n_live);
    }
    CHECK(saw_ok);
    remove(TMP_PATH);
}

/* Copying every key of the vocab file (written by llama.cpp's gguf-py) through our writer gives
 * the same bytes: same key encoding and the same padding. */
static void test_writer_reproduces_vocab(void) {
    const char *dir = check_shared_data_dir();
    if (!dir) { check_skip("../shared/data not found (set OC_SHARED_DATA)"); return; }
    char path[512];
    snprintf(path, sizeof path, "%s/qwen2-tokenizer/vocab-qwen2.gguf", dir);
    oc_gguf *g;
    oc_gguf_writer *w;
    oc_error e;
    REQUIREF(oc_gguf_open(&g, path, NULL, &e) == OC_OK, "%s", e.message);
    REQUIRE(oc_gguf_writer_open(&w, NULL, &e) == OC_OK);
    for (int64_t k = 0; k < oc_gguf_n_keys(g); k++) {
        oc_str name = oc_gguf_key_name(g, k);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)name.len, name.ptr);
        oc_gguf_type t = oc_gguf_key_type(g, k);
        oc_status st = OC_OK;
        if (t == OC_GGUF_STRING) {
            oc_str v;
            oc_gguf_get_str(g, key, &v, &e);
            char *c = calloc(1, v.len + 1);
            memcpy(c, v.ptr, v.len);
            st = oc_gguf_writer_add_str(w, key, c, &e);
            free(c);
        } else if (t == OC_GGUF_ARRAY) {
            oc_gguf_type et; uint64_t n;
            oc_gguf_get_arr(g, key, &et, &n, &e);
            if (et == OC_GGUF_STRING) {
                char **strs = calloc(n, sizeof *strs);
                for (uint64_t i = 0; i < n; i++) {
                    oc_str x = oc_gguf_arr_str(g, k, i);
                    strs[i] = calloc(1, x.len + 1);
                    memcpy(strs[i], x.ptr, x.len);
                }
                st = oc_gguf_writer_add_arr_str(w, key, (const char *const *)strs, n, &e);
                for (uint64_t i = 0; i < n; i++) free(strs[i]);
                free(strs);
            } else {
                REQUIRE(et == OC_GGUF_I32);
                int32_t *vals = calloc(n, sizeof *vals);
                for (uint64_t i = 0; i < n; i++) vals[i] = (int32_t)oc_gguf_arr_int(g, k, i);
                st = oc_gguf_writer_add_arr(w, key, et, vals, n, &e);
                free(vals);
            }
        } else if (t == OC_GGUF_F32) {
            float v; oc_gguf_get_f32(g, key, &v, &e);
            st = oc_gguf_writer_add_f32(w, key, v, &e);
        } else {
            int64_t v;
            REQUIREF(oc_gguf_get_int(g, key, &v, &e) == OC_OK, "%s", e.message);
            unsigned char raw[8];
            uint8_t u8 = (uint8_t)v; uint32_t u32 = (uint32_t)v;
            if (t == OC_GGUF_BOOL || t == OC_GGUF_U8) memcpy(raw, &u8, 1);
            else { REQUIRE(t == OC_GGUF_U32); memcpy(raw, &u32, 4); }
            st = oc_gguf_writer_add_scalar(w, key, t, raw, &e);
        }
        CHECKF(st == OC_OK, "%s: %s", key, e.message);
    }
    oc_gguf_close(g);
    REQUIREF(oc_gguf_writer_write(w, TMP_PATH, &e) == OC_OK, "%s", e.message);
    oc_gguf_writer_close(w);
    unsigned char *a, *b;
    size_t na, nb;
    REQUIRE(read_file(path, &a, &na) && read_file(TMP_PATH, &b, &nb));
    CHECKF(na == nb, "sizes %zu vs %zu", na, nb);
    size_t first = 0;
    while (first < na && first < nb && a[first] == b[first]) first++;
    CHECKF(first == na, "first difference at byte %zu", first);
    free(a);
    free(b);
    remove(TMP_PATH);
}

int main(void) {
    CHECK_RUN(test_vocab_qwen2);
    CHECK_RUN(test_small_file);
    CHECK_RUN(test_minimal_files);
    CHECK_RUN(test_corrupt_header);
    CHECK_RUN(test_corrupt_keys);
    CHECK_RUN(test_corrupt_tensors);
    CHECK_RUN(test_truncation_every_byte);
    CHECK_RUN(test_reader_nomem);
    CHECK_RUN(test_writer_roundtrip);
    CHECK_RUN(test_writer_errors);
    CHECK_RUN(test_writer_reproduces_vocab);
    return check_finish();
}
