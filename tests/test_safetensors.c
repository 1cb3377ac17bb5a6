/* test_safetensors.c: safetensors files this test writes itself: a valid file (dtypes, scalar and
 * empty tensors, metadata, header padding), every corruption the validator must catch with its
 * message, truncation at every byte, and sharded checkpoints through an index.json (valid, wrong
 * shard, duplicate tensors, unsafe shard names, missing shards). */
#include "check.h"
#include "tools/safetensors.h"

#include <sys/stat.h>


/* file = u64le(len(header)) + header + data */
static unsigned char *make_file(const char *header, const void *data, size_t data_bytes, size_t *n_out) {
    size_t h = strlen(header), n = 8 + h + data_bytes;
    unsigned char *buf = malloc(n ? n : 1);
    for (int k = 0; k < 8; k++) buf[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(buf + 8, header, h);
    if (data_bytes) memcpy(buf + 8 + h, data, data_bytes);
    *n_out = n;
    return buf;
}

static int write_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(bytes, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static const char *tmp_dir(void) {
    mkdir("build", 0777);
    mkdir("build/test-tmp", 0777);
    return "build/test-tmp";
}

static void test_valid_file(void) {
    float w[6] = { 1, 2, 3, 4, 5, 6 };
    unsigned char data[24 + 8 + 4];
    memcpy(data, w, 24);
    for (int i = 0; i < 8; i++) data[24 + i] = (unsigned char)(0x10 + i);
    memcpy(data + 32, "\x01\x02\x03\x04", 4);
    const char *header =
        "{\"__metadata__\": {\"format\": \"pt\"}, "
        "\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}, "
        "\"b.bias\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]}, "
        "\"empty\": {\"dtype\": \"F16\", \"shape\": [0, 5], \"data_offsets\": [32, 32]}, "
        "\"scalar\": {\"dtype\": \"I32\", \"shape\": [], \"data_offsets\": [32, 36]}}       ";
    size_t n;
    unsigned char *file = make_file(header, data, sizeof data, &n);
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_safetensors *st;
    oc_error e;
    REQUIREF(oc_safetensors_open_bytes(&st, file, n, &a, &e) == OC_OK, "%s", e.message);
    CHECK(oc_safetensors_n_tensors(st) == 4);
    const oc_st_tensor *t = oc_safetensors_find(st, "w");
    REQUIRE(t);
    CHECK(t->dtype == OC_ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->n_elements == 6);
    CHECK(t->n_bytes == 24 && memcmp(t->data, w, 24) == 0 && strcmp(t->name.ptr, "w") == 0);
    t = oc_safetensors_find(st, "b.bias");
    REQUIRE(t);
    CHECK(t->dtype == OC_ST_BF16 && t->n_elements == 4 && ((const unsigned char *)t->data)[0] == 0x10);
    t = oc_safetensors_find(st, "empty");
    REQUIRE(t);
    CHECK(t->n_elements == 0 && t->n_bytes == 0);
    t = oc_safetensors_find(st, "scalar");
    REQUIRE(t);
    CHECK(t->n_dims == 0 && t->n_elements == 1 && memcmp(t->data, "\x01\x02\x03\x04", 4) == 0);
    CHECK(oc_safetensors_find(st, "absent") == NULL && oc_safetensors_find(st, "") == NULL);
    /* tensor_at walks names in order */
    const char *order[4] = { "b.bias", "empty", "scalar", "w" };
    for (size_t i = 0; i < 4; i++) CHECK(strcmp(oc_safetensors_tensor_at(st, i)->name.ptr, order[i]) == 0);
    CHECK(oc_safetensors_tensor_at(st, 4) == NULL);
    oc_str s;
    CHECK(oc_safetensors_metadata(st, "format", &s, &e) == OC_OK && strcmp(s.ptr, "pt") == 0);
    CHECK(oc_safetensors_metadata(st, "other", &s, &e) == OC_ERR_NOT_FOUND);
    CHECK(strcmp(oc_st_dtype_name(OC_ST_BF16), "BF16") == 0 && oc_st_dtype_size(OC_ST_F64) == 8);
    oc_safetensors_close(st);
    CHECK(c.n_live == 0);

    /* every proper prefix is refused without leaks */
    for (size_t cut = 0; cut < n; cut++) {
        CHECKF(oc_safetensors_open_bytes(&st, file, cut, &a, &e) != OC_OK, "prefix %zu accepted", cut);
        CHECKF(st == NULL && c.n_live == 0, "prefix %zu leaked", cut);
    }
    /* through a file */
    char path[256];
    snprintf(path, sizeof path, "%s/valid.safetensors", tmp_dir());
    REQUIRE(write_file(path, file, n));
    REQUIRE(oc_safetensors_open(&st, path, &a, &e) == OC_OK);
    CHECK(oc_safetensors_find(st, "w") != NULL);
    oc_safetensors_close(st);
    CHECK(oc_safetensors_open(&st, "build/test-tmp/none.safetensors", &a, &e) == OC_ERR_IO);
    CHECK(c.n_live == 0);
    free(file);
    oc_safetensors_close(NULL);
}

typedef struct { const char *header; size_t data_bytes; oc_status st; const char *msg; } bad_case;

static void test_corrupt_headers(void) {
    static const bad_case cases[] = {
        { "[1]", 0, OC_ERR_FORMAT, "safetensors: the header does not start with '{'" },
        { "{\"a\": ", 0, OC_ERR_FORMAT, "safetensors header: json: line 1, column 7 (byte 6): unexpected end of input (expected a value)" },
        { "{\"t\": 5}", 0, OC_ERR_FORMAT, "safetensors: tensor 't': info is not a JSON object" },
        { "{\"t\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': missing or non-string \"dtype\"" },
        { "{\"t\": {\"dtype\": \"F4\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, OC_ERR_UNSUPPORTED, "safetensors: tensor 't': dtype 'F4' is not supported" },
        { "{\"t\": {\"dtype\": \"f32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, OC_ERR_UNSUPPORTED, "safetensors: tensor 't': dtype 'f32' is not supported" },
        { "{\"t\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': missing or non-array \"shape\"" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': shape entries must be non-negative integers" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [1.0], \"data_offsets\": [0, 4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': shape entries must be non-negative integers" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4, OC_ERR_UNSUPPORTED, "safetensors: tensor 't': 9 dimensions (at most 8 supported)" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': \"data_offsets\" must be two non-negative integers" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, -4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': \"data_offsets\" must be two non-negative integers" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': data_offsets [4, 0) end before they begin" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': data_offsets end 8 is past the data section (4 bytes)" },
        { "{\"t\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 't': data_offsets [0, 4) hold 4 bytes, but 2 F32 elements need 8" },
        { "{\"t\": {\"dtype\": \"F64\", \"shape\": [4611686018427387904, 8], \"data_offsets\": [0, 0]}}", 0, OC_ERR_FORMAT, "safetensors: tensor 't': the shape holds more than 2^64 bytes" },
        { "{\"t\": {\"dtype\": \"U8\", \"shape\": [9223372036854775807, 9223372036854775807, 4], \"data_offsets\": [0, 0]}}", 0, OC_ERR_FORMAT, "safetensors: tensor 't': the shape holds more than 2^64 bytes" },
        { "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [3, 5]}}", 5, OC_ERR_FORMAT, "safetensors: tensor 'b' starts at data byte 3, expected 2 (a gap)" },
        { "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [1, 3]}}", 3, OC_ERR_FORMAT, "safetensors: tensor 'b' starts at data byte 1, expected 2 (an overlap)" },
        { "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [1, 3]}}", 3, OC_ERR_FORMAT, "safetensors: tensor 'a' starts at data byte 1, expected 0 (a gap)" },
        { "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 5, OC_ERR_FORMAT, "safetensors: 3 bytes after the last tensor (the data section has 5)" },
        { "{\"__metadata__\": {}}", 4, OC_ERR_FORMAT, "safetensors: 4 data bytes but no tensors" },
        { "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}, \"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [2, 4]}}", 4, OC_ERR_FORMAT, "safetensors: tensor 'a' is listed twice" },
        { "{\"__metadata__\": {\"n\": 1}}", 0, OC_ERR_FORMAT, "safetensors: \"__metadata__\" values must be strings" },
        { "{\"__metadata__\": [\"x\"]}", 0, OC_ERR_FORMAT, "safetensors: \"__metadata__\" is not a JSON object" },
    };
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    unsigned char zeros[16] = { 0 };
    for (size_t i = 0; i < OC_ARRAY_LEN(cases); i++) {
        size_t n;
        unsigned char *file = make_file(cases[i].header, zeros, cases[i].data_bytes, &n);
        oc_safetensors *st = (oc_safetensors *)1;
        oc_error e = { OC_OK, "" };
        oc_status s = oc_safetensors_open_bytes(&st, file, n, &a, &e);
        CHECKF(s == cases[i].st, "case %zu: status %d (%s)", i, s, e.message);
        CHECKF(strcmp(e.message, cases[i].msg) == 0, "case %zu: '%s'\n      want '%s'", i, e.message, cases[i].msg);
        CHECKF(st == NULL && c.n_live == 0, "case %zu: output or memory left", i);
        free(file);
    }
    /* the length field itself */
    oc_safetensors *st;
    oc_error e;
    unsigned char raw[16] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}' };
    CHECK(oc_safetensors_open_bytes(&st, raw, 10, &a, &e) == OC_ERR_RANGE);
    CHECKF(strcmp(e.message, "safetensors: header length 18446744073709551615 exceeds the limit of 100000000 bytes") == 0, "%s", e.message);
    memset(raw, 0, 8);
    raw[0] = 3;
    CHECK(oc_safetensors_open_bytes(&st, raw, 10, &a, &e) == OC_ERR_FORMAT);
    CHECKF(strcmp(e.message, "safetensors: header length 3 runs past the end of the file (10 bytes)") == 0, "%s", e.message);
    CHECK(oc_safetensors_open_bytes(&st, raw, 7, &a, &e) == OC_ERR_FORMAT);
    CHECKF(strcmp(e.message, "safetensors: 7 bytes are too few for the 8-byte header length") == 0, "%s", e.message);
    raw[0] = 0;
    CHECK(oc_safetensors_open_bytes(&st, raw, 8, &a, &e) == OC_ERR_FORMAT);
    raw[0] = 2;
    CHECK(oc_safetensors_open_bytes(&st, raw, 10, &a, &e) == OC_OK);   /* "{}": no tensors, no data */
    CHECK(oc_safetensors_n_tensors(st) == 0 && oc_safetensors_find(st, "x") == NULL);
    oc_safetensors_close(st);
    CHECK(c.n_live == 0);
}

/* ---- sharded checkpoints ------------------------------------------------------------------------------ */

static void write_shard(const char *dir, const char *name, const char *header, size_t data_bytes) {
    unsigned char data[64];
    for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7);
    size_t n;
    unsigned char *file = make_file(header, data, data_bytes, &n);
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(write_file(path, file, n));
    free(file);
}

static void write_text(const char *dir, const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(write_file(path, text, strlen(text)));
}

static void test_sharded(void) {
    const char *dir = tmp_dir();
    write_shard(dir, "m-1.safetensors",
                "{\"x.a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
                "\"x.b\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [8, 11]}}", 11);
    write_shard(dir, "m-2.safetensors", "{\"y\": {\"dtype\": \"I64\", \"shape\": [1, 1], \"data_offsets\": [0, 8]}}", 8);
    write_text(dir, "ok.index.json",
               "{\"metadata\": {\"total_size\": 19}, \"weight_map\": {\"x.a\": \"m-1.safetensors\", "
               "\"y\": \"m-2.safetensors\", \"x.b\": \"m-1.safetensors\"}}");
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    oc_safetensors_set *set;
    oc_error e;
    char path[256];
    snprintf(path, sizeof path, "%s/ok.index.json", dir);
    REQUIREF(oc_safetensors_set_open(&set, path, &a, &e) == OC_OK, "%s", e.message);
    CHECK(oc_safetensors_set_n_files(set) == 2 && oc_safetensors_set_n_tensors(set) == 3);
    const oc_st_tensor *t = oc_safetensors_set_find(set, "y");
    CHECK(t && t->dtype == OC_ST_I64 && t->n_dims == 2 && ((const unsigned char *)t->data)[1] == 7);
    CHECK(oc_safetensors_set_find(set, "x.b") && oc_safetensors_set_find(set, "x.a"));
    CHECK(oc_safetensors_set_find(set, "x") == NULL);
    CHECK(strcmp(oc_safetensors_set_tensor_at(set, 0)->name.ptr, "x.a") == 0);
    oc_safetensors_set_close(set);
    /* a single file is a set of one */
    snprintf(path, sizeof path, "%s/m-2.safetensors", dir);
    REQUIRE(oc_safetensors_set_open(&set, path, &a, &e) == OC_OK);
    CHECK(oc_safetensors_set_n_files(set) == 1 && oc_safetensors_set_find(set, "y") != NULL);
    oc_safetensors_set_close(set);
    CHECK(c.n_live == 0);

    static const struct { const char *name, *text; oc_status st; const char *msg_part; } bad[] = {
        { "wrong.index.json", "{\"weight_map\": {\"y\": \"m-1.safetensors\"}}", OC_ERR_FORMAT,
          "weight_map puts 'y' in m-1.safetensors, which does not hold it" },
        { "dup.index.json", "{\"weight_map\": {\"x.a\": \"m-1.safetensors\", \"z\": \"m-1b.safetensors\"}}", OC_ERR_FORMAT,
          "safetensors index: tensor 'x.a' is held by two shards" },
        { "slash.index.json", "{\"weight_map\": {\"y\": \"../m-2.safetensors\"}}", OC_ERR_FORMAT,
          "shard name '../m-2.safetensors' is not a plain file name" },
        { "missing.index.json", "{\"weight_map\": {\"y\": \"nope.safetensors\"}}", OC_ERR_IO, "nope.safetensors" },
        { "nomap.index.json", "{\"metadata\": {}}", OC_ERR_FORMAT, "missing \"weight_map\" object" },
        { "num.index.json", "{\"weight_map\": {\"y\": 3}}", OC_ERR_FORMAT, "weight_map entry 'y' is not a file name string" },
        { "syntax.index.json", "{\"weight_map\": ", OC_ERR_FORMAT, "unexpected end of input" },
    };
    write_shard(dir, "m-1b.safetensors", "{\"x.a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1);
    for (size_t i = 0; i < OC_ARRAY_LEN(bad); i++) {
        write_text(dir, bad[i].name, bad[i].text);
        snprintf(path, sizeof path, "%s/%s", dir, bad[i].name);
        set = (oc_safetensors_set *)1;
        oc_status s = oc_safetensors_set_open(&set, path, &a, &e);
        CHECKF(s == bad[i].st, "%s: status %d (%s)", bad[i].name, s, e.message);
        CHECKF(strstr(e.message, bad[i].msg_part) != NULL, "%s: '%s'", bad[i].name, e.message);
        CHECKF(set == NULL && c.n_live == 0, "%s: output or memory left", bad[i].name);
    }
}

int main(void) {
    CHECK_RUN(test_valid_file);
    CHECK_RUN(test_corrupt_headers);
    CHECK_RUN(test_sharded);
    return check_finish();
}
