/* cmd_info.c: `ocellus info FILE.gguf`: the header, every key (arrays abbreviated to their first
 * elements) and the tensor table of a GGUF file, plus how long opening it took. For checking
 * files by hand and for error messages on broken ones. */
#include "tools/tools.h"
#include "ocellus.h"
#include "ocellus_gguf.h"
#include "port.h"

#include <stdio.h>
#include <string.h>

#define SHOW_ELEMS 6
#define SHOW_CHARS 60

static const char *const type_names[] = { "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                          "string", "array", "u64", "i64", "f64" };

static void print_str(oc_str s) {
    putchar('"');
    size_t n = s.len < SHOW_CHARS ? s.len : SHOW_CHARS;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
    if (s.len > n) printf("...(%zu bytes)", s.len);
}

static void print_scalar(const oc_gguf *g, const char *key, oc_gguf_type t) {
    int64_t i64; double d; oc_str s; uint64_t u64;
    if (t == OC_GGUF_STRING && oc_gguf_get_str(g, key, &s, NULL) == OC_OK) print_str(s);
    else if (t == OC_GGUF_U64 && oc_gguf_get_u64(g, key, &u64, NULL) == OC_OK) printf("%llu", (unsigned long long)u64);
    else if (oc_gguf_get_int(g, key, &i64, NULL) == OC_OK) printf("%lld", (long long)i64);
    else if (oc_gguf_get_float(g, key, &d, NULL) == OC_OK) printf("%.9g", d);
}

static void print_array(const oc_gguf *g, int64_t k, const char *key) {
    oc_gguf_type et;
    uint64_t n;
    if (oc_gguf_get_arr(g, key, &et, &n, NULL) != OC_OK) return;
    printf("[%llu x %s] [", (unsigned long long)n, (unsigned)et < 13 ? type_names[et] : "?");
    for (uint64_t i = 0; i < n && i < SHOW_ELEMS; i++) {
        if (i) printf(", ");
        if (et == OC_GGUF_STRING) print_str(oc_gguf_arr_str(g, k, i));
        else if (et == OC_GGUF_F32 || et == OC_GGUF_F64) printf("%.9g", oc_gguf_arr_float(g, k, i));
        else printf("%lld", (long long)oc_gguf_arr_int(g, k, i));
    }
    printf("%s]", n > SHOW_ELEMS ? ", ..." : "");
}

int oc_tool_info(int argc, char **argv) {
    if (argc > 2 || (argc == 2 && argv[1][0] == '-' && strcmp(argv[1], "--help") && strcmp(argv[1], "-h"))) {
        fprintf(stderr, "ocellus info: unexpected argument '%s' (usage: ocellus info FILE.gguf)\n", argv[argc > 2 ? 2 : 1]);
        return 2;
    }
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fprintf(argc == 2 ? stdout : stderr, "usage: ocellus info FILE.gguf\n"
                "Prints the keys (arrays abbreviated) and the tensor table of a GGUF file.\n");
        return argc == 2 ? 0 : 2;
    }
    oc_gguf *g;
    oc_error e;
    uint64_t t0 = oc_port_now_ns();
    if (oc_gguf_open(&g, argv[1], NULL, &e) != OC_OK) {
        fprintf(stderr, "ocellus info: %s\n", e.message);
        return 1;
    }
    double open_ms = (double)(oc_port_now_ns() - t0) / 1e6;
    printf("%s: GGUF v%u, alignment %u, %lld keys, %lld tensors (opened in %.2f ms)\n", argv[1],
           oc_gguf_version(g), oc_gguf_alignment(g), (long long)oc_gguf_n_keys(g),
           (long long)oc_gguf_n_tensors(g), open_ms);
    for (int64_t k = 0; k < oc_gguf_n_keys(g); k++) {
        oc_str name = oc_gguf_key_name(g, k);
        char key[512];
        snprintf(key, sizeof key, "%.*s", (int)name.len, name.ptr);
        oc_gguf_type t = oc_gguf_key_type(g, k);
        printf("  %-48s %-7s ", key, type_names[t]);
        if (t == OC_GGUF_ARRAY) print_array(g, k, key);
        else print_scalar(g, key, t);
        putchar('\n');
    }
    uint64_t total = 0;
    if (oc_gguf_n_tensors(g)) printf("  %5s %-40s %-7s %-28s %12s %12s\n", "#", "tensor", "type", "ne", "offset", "bytes");
    for (int64_t i = 0; i < oc_gguf_n_tensors(g); i++) {
        const oc_gguf_tensor *t = oc_gguf_tensor_at(g, i);
        char ne[96];
        int len = snprintf(ne, sizeof ne, "[");
        for (uint32_t d = 0; d < t->n_dims && len < (int)sizeof ne; d++)
            len += snprintf(ne + len, sizeof ne - (size_t)len, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        if (len < (int)sizeof ne) snprintf(ne + len, sizeof ne - (size_t)len, "]");
        printf("  %5lld %-40.*s %-7s %-28s %12llu %12llu\n", (long long)i, (int)t->name.len, t->name.ptr,
               oc_dtype_name(t->dtype), ne, (unsigned long long)t->offset_bytes,
               (unsigned long long)t->size_bytes);
        total += t->size_bytes;
    }
    if (oc_gguf_n_tensors(g)) printf("  tensor data: %llu bytes\n", (unsigned long long)total);
    oc_gguf_close(g);
    return 0;
}
