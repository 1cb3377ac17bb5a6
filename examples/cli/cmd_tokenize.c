/* cmd_tokenize.c: `ocellus tokenize`: tokenizes a text with a model's GGUF vocabulary and prints
 * the tokens, or only their ids. --time reports the encode time (a benchmark, not a test). */
#include "tools/tools.h"
#include "ocellus.h"
#include "port.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: ocellus tokenize -m MODEL.gguf [--no-special] [--ids] [--no-nfc] [--time [N]] (-f FILE | TEXT)\n"
            "  -m FILE       GGUF file with the tokenizer.ggml.* keys (a model or a vocab-only file)\n"
            "  -f FILE       tokenize the contents of FILE instead of TEXT\n"
            "  --no-special  control-token text such as <|im_start|> is tokenized as plain text\n"
            "  --ids         print only the ids, one per line\n"
            "  --no-nfc      take the text as is (llama.cpp's ids); by default a Qwen2 tokenizer\n"
            "                normalizes to NFC first, as Hugging Face's does\n"
            "  --time [N]    encode N times (default 1) and print the fastest time in ms to stderr\n");
}

/* Print bytes inside single quotes with C-style escapes for anything not printable ASCII, except
 * that UTF-8 multi-byte sequences are printed as they are. */
static void print_piece(const char *p, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

int oc_tool_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    int flags = OC_TOK_PARSE_SPECIAL, ids_only = 0, n_time = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "--no-special")) flags &= ~OC_TOK_PARSE_SPECIAL;
        else if (!strcmp(argv[i], "--ids")) ids_only = 1;
        else if (!strcmp(argv[i], "--nfc")) continue;   /* the default now; kept for old scripts */
        else if (!strcmp(argv[i], "--no-nfc")) flags |= OC_TOK_NO_NFC;
        else if (!strcmp(argv[i], "--time")) {
            n_time = 1;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
                if (!oc_tool_int_arg("tokenize", "--time", argv[i + 1], 1, 1000000, &n_time)) return 2;
                i++;
            } else if (i + 1 < argc && argv[i + 1][0] == '-' && argv[i + 1][1] >= '0' && argv[i + 1][1] <= '9') {
                oc_tool_int_arg("tokenize", "--time", argv[i + 1], 1, 1000000, &n_time);
                return 2;
            }
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "ocellus tokenize: unknown option '%s' (ocellus tokenize --help lists them)\n", argv[i]); return 2; }
        else if (!text) text = argv[i];
        else { fprintf(stderr, "tokenize: more than one TEXT\n"); return 2; }
    }
    if (model && file && text) {
        fprintf(stderr, "ocellus tokenize: give -f FILE or a TEXT, not both\n");
        return 2;
    }
    if (!model || (!file == !text)) { usage(stderr); return 2; }

    oc_error err = { OC_OK, "" };
    oc_gguf *g = NULL;
    oc_tokenizer *tok = NULL;
    oc_port_mapping map = { NULL, 0, 0 };
    int rc = 1;
    int32_t *ids = NULL;
    uint64_t t_open = oc_port_now_ns();
    if (oc_gguf_open(&g, model, NULL, &err) || oc_tokenizer_open_gguf(&tok, g, NULL, &err)) {
        fprintf(stderr, "tokenize: %s\n", err.message);
        goto done;
    }
    double open_ms = (double)(oc_port_now_ns() - t_open) / 1e6;
    oc_gguf_close(g);
    g = NULL;

    const char *src = text;
    size_t n_src = text ? strlen(text) : 0;
    if (file) {
        char msg[256];
        if (oc_port_map_file(file, &map, msg, sizeof msg)) { fprintf(stderr, "tokenize: %s\n", msg); goto done; }
        src = map.data;
        n_src = map.n_bytes;
    }
    /* every token covers at least one byte of the (NFC: at most 3x longer) text */
    size_t max_ids = 3 * n_src + 1, n_ids = 0;
    ids = malloc(max_ids * sizeof *ids);
    if (!ids) { fprintf(stderr, "tokenize: out of memory\n"); goto done; }
    double best_ms = 0;
    for (int r = 0; r < (n_time > 0 ? n_time : 1); r++) {
        uint64_t t0 = oc_port_now_ns();
        if (oc_tokenizer_encode(tok, src, n_src, flags, ids, max_ids, &n_ids, &err)) {
            fprintf(stderr, "tokenize: %s\n", err.message);
            goto done;
        }
        double ms = (double)(oc_port_now_ns() - t0) / 1e6;
        if (r == 0 || ms < best_ms) best_ms = ms;
    }
    if (n_time)
        fprintf(stderr, "tokenize: %zu bytes -> %zu tokens in %.3f ms (best of %d; %.1f MB/s); "
                "opening the vocabulary took %.1f ms\n", n_src, n_ids, best_ms, n_time,
                best_ms > 0 ? (double)n_src / best_ms / 1e3 : 0.0, open_ms);

    for (size_t i = 0; i < n_ids; i++) {
        if (ids_only) {
            printf("%ld\n", (long)ids[i]);
        } else {
            oc_str p = oc_tokenizer_token_bytes(tok, ids[i]);
            printf("%6ld -> ", (long)ids[i]);
            print_piece(p.ptr, p.len);
            putchar('\n');
        }
    }
    rc = fflush(stdout) ? 1 : 0;
done:
    free(ids);
    if (map.data || map.n_bytes) oc_port_unmap_file(&map);
    oc_tokenizer_close(tok);
    oc_gguf_close(g);
    return rc;
}
