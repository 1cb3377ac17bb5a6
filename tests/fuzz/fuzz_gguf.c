/* fuzz_gguf.c: libFuzzer target for the GGUF reader. Opens the input with oc_gguf_open_bytes and,
 * when it opens, walks every key through every getter, every array element through every
 * accessor, and touches the first and last byte of every tensor, so ASan sees any access the
 * validation let through. Invariants the reader promises are checked with __builtin_trap.
 * Seeds: tests/fuzz/corpus/fuzz_gguf/ (made by tests/fuzz/gen_gguf_seeds.c). */
#include "ocellus.h"
#include "ocellus_gguf.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk_key(const oc_gguf *g, int64_t k) {
    oc_str name = oc_gguf_key_name(g, k);
    char key[256];
    if (name.len >= sizeof key || memchr(name.ptr, 0, name.len)) return;
    memcpy(key, name.ptr, name.len);
    key[name.len] = '\0';
    if (oc_gguf_find_key(g, key) != k) __builtin_trap();   /* names are unique */
    oc_error e;
    uint32_t u32; int32_t i32; uint64_t u64; float f32; int b; oc_str s; int64_t i64; double d;
    oc_gguf_type et; uint64_t n;
    int n_ok = 0;
    n_ok += oc_gguf_get_u32(g, key, &u32, &e) == OC_OK;
    n_ok += oc_gguf_get_i32(g, key, &i32, &e) == OC_OK;
    n_ok += oc_gguf_get_u64(g, key, &u64, &e) == OC_OK;
    n_ok += oc_gguf_get_f32(g, key, &f32, &e) == OC_OK;
    n_ok += oc_gguf_get_bool(g, key, &b, &e) == OC_OK;
    n_ok += oc_gguf_get_str(g, key, &s, &e) == OC_OK;
    n_ok += oc_gguf_get_arr(g, key, &et, &n, &e) == OC_OK;
    if (n_ok > 1) __builtin_trap();                         /* exactly one strict getter fits */
    if (oc_gguf_get_str(g, key, &s, &e) == OC_OK && s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
    if (oc_gguf_get_int(g, key, &i64, &e) == OC_OK) sink += (uint64_t)i64;
    if (oc_gguf_get_float(g, key, &d, &e) == OC_OK) sink += (uint64_t)(d == d);
    if (oc_gguf_get_arr(g, key, &et, &n, &e) != OC_OK) return;
    for (uint64_t i = 0; i <= n; i++) {   /* one past the end too: must be empty / 0 */
        oc_str x = oc_gguf_arr_str(g, k, i);
        if (!x.ptr) __builtin_trap();
        if (x.len) sink += (uint8_t)x.ptr[0] + (uint8_t)x.ptr[x.len - 1];
        sink += (uint64_t)oc_gguf_arr_int(g, k, i);
        sink += (uint64_t)(oc_gguf_arr_float(g, k, i) != 0);
        if (i == n && (x.len || oc_gguf_arr_int(g, k, i))) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_gguf *g = NULL;
    oc_error e;
    oc_status s = oc_gguf_open_bytes(&g, data, size, NULL, &e);
    if (s != OC_OK) {
        if (g || e.status != s || strlen(e.message) == 0 || strchr(e.message, '\n')) __builtin_trap();
        return 0;
    }
    for (int64_t k = 0; k < oc_gguf_n_keys(g); k++) walk_key(g, k);
    uint32_t align = oc_gguf_alignment(g);
    if (!align || (align & (align - 1))) __builtin_trap();
    for (int64_t t = 0; t < oc_gguf_n_tensors(g); t++) {
        const oc_gguf_tensor *ti = oc_gguf_tensor_at(g, t);
        const uint8_t *p = ti->data;
        if (p < data || p > data + size || ti->size_bytes > (uint64_t)(data + size - p)) __builtin_trap();
        if (ti->offset_bytes % align || ti->n_dims < 1 || ti->n_dims > OC_GGUF_MAX_DIMS) __builtin_trap();
        if (ti->size_bytes) sink += p[0] + p[ti->size_bytes - 1];
        char name[256];
        if (ti->name.len < sizeof name && !memchr(ti->name.ptr, 0, ti->name.len)) {
            memcpy(name, ti->name.ptr, ti->name.len);
            name[ti->name.len] = '\0';
            if (oc_gguf_find_tensor(g, name) != ti) __builtin_trap();
        }
    }
    if (oc_gguf_tensor_at(g, oc_gguf_n_tensors(g)) || oc_gguf_key_type(g, oc_gguf_n_keys(g)) != OC_GGUF_NONE)
        __builtin_trap();
    oc_gguf_close(g);
    return 0;
}
