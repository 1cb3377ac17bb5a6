/* test_harden.c: regression tests for what a hostile file, a long-running host and odd paths found
 * (issue 21). Each case names the finding it guards; each failed on the code before its fix:
 *  1. a vocabulary that marks <|image_pad|> USER_DEFINED lets plain text place image tokens, which
 *     read image-embedding rows that no image wrote;
 *  4. a FIFO given as a model, image or plan path hung in open();
 *  5. a model file truncated while mapped killed the process (SIGBUS): the model can now be read
 *     into memory instead (OC_LOAD_READ);
 *  2. decompression bombs: image files are decoded by oc_ask into the context's budget, reduced;
 *  6. -c beyond the model's context, and image references beyond the images given;
 *  7. NFD text tokenized unlike Hugging Face (whose Qwen2 tokenizer normalizes to NFC). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "config.h"
#include "image/image.h"
#include "ocellus.h"
#include "port.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#define DIR "tests/data/models/"

static unsigned char *read_all(const char *path, size_t *n_bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *b = NULL;
    long n = -1;
    if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)n)) &&
        fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *n_bytes = (size_t)n;
    return b;
}

static int write_all(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Offset of the int32 elements of array key `key` in a GGUF image (the key's name is written once, as
 * its length then its bytes, followed by type 9 (array), element type 5 (int32) and the count). */
static size_t int32_array_at(const unsigned char *b, size_t n, const char *key, uint64_t *count) {
    size_t k = strlen(key);
    for (size_t i = 8; i + k + 16 <= n; i++) {
        uint64_t len;
        memcpy(&len, b + i - 8, 8);
        if (len != k || memcmp(b + i, key, k)) continue;
        uint32_t type, elem;
        memcpy(&type, b + i + k, 4);
        memcpy(&elem, b + i + k + 4, 4);
        memcpy(count, b + i + k + 8, 8);
        if (type == 9 && elem == 5) return i + k + 16;
    }
    return 0;
}

static int find_token(const oc_gguf *g, const char *text) {
    int64_t key = oc_gguf_find_key(g, "tokenizer.ggml.tokens");
    oc_gguf_type et;
    uint64_t n = 0;
    if (key < 0 || oc_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, NULL)) return -1;
    for (uint64_t i = 0; i < n; i++) {
        oc_str s = oc_gguf_arr_str(g, key, i);
        if (s.len == strlen(text) && !memcmp(s.ptr, text, s.len)) return (int)i;
    }
    return -1;
}

/* Finding 1: the fixture's text model with <|image_pad|> marked USER_DEFINED (4): 300 pads typed as
 * text, no image. Before the fix each consumed one row of the image-embedding store (ASan: a read
 * past the context's buffer; -O2: garbage rows silently); now the prompt is refused. */
static void test_text_cannot_place_image_tokens(void) {
    const char *crafted = "build/tests/harden_pad.gguf";
    size_t n;
    unsigned char *b = read_all(DIR "qwen2vl/text.gguf", &n);
    REQUIRE(b);
    oc_gguf *g;
    oc_error e;
    REQUIREF(oc_gguf_open_bytes(&g, b, n, NULL, &e) == OC_OK, "%s", e.message);
    int pad = find_token(g, "<|image_pad|>");
    oc_gguf_close(g);
    uint64_t count = 0;
    size_t at = int32_array_at(b, n, "tokenizer.ggml.token_type", &count);
    REQUIRE(pad > 0 && at && (uint64_t)pad < count);
    int32_t user_defined = 4;
    memcpy(b + at + 4 * (size_t)pad, &user_defined, 4);
    REQUIRE(write_all(crafted, b, n));
    free(b);

    oc_model *m;
    REQUIREF(oc_model_open(&m, crafted, NULL, NULL, &e) == OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.n_threads = 1;
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    char q[300 * 13 + 1];
    for (int i = 0; i < 300; i++) memcpy(q + 13 * i, "<|image_pad|>", 13);
    q[sizeof q - 1] = '\0';
    oc_request r;
    oc_request_default(&r);
    r.question = q;
    r.max_new_tokens = 1;
    oc_status st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_INVALID && strstr(e.message, "image placeholder"), "status %d: %s", st, e.message);
    /* the same context still answers a plain question */
    r.question = "hi";
    CHECKF(oc_ask(c, &r, &e) == OC_OK, "%s", e.message);
    oc_context_close(c);
    oc_model_close(m);
    remove(crafted);
}

/* Finding 4: every path the library opens goes through one port function, which used to open() a
 * FIFO before looking at its type and so waited for a writer forever. The alarm turns a hang into a
 * failure (the process dies with SIGALRM and the runner reports it). */
static void test_fifo_paths_do_not_hang(void) {
    const char *fifo = "build/tests/harden.fifo";
    remove(fifo);
    if (mkfifo(fifo, 0600) != 0) {
        check_skip("mkfifo: %s", strerror(errno));
        return;
    }
    alarm(20);
    oc_error e;
    oc_model *m = NULL;
    CHECKF(oc_model_open(&m, fifo, NULL, NULL, &e) == OC_ERR_IO && strstr(e.message, "not a regular file"), "%s",
           e.message);
    oc_gguf *g = NULL;
    CHECK(oc_gguf_open(&g, fifo, NULL, &e) == OC_ERR_IO);
    REQUIREF(oc_model_open(&m, DIR "qwen2vl/text.gguf", fifo, NULL, &e) == OC_ERR_IO, "%s", e.message);
    REQUIREF(oc_model_open(&m, DIR "qwen2vl/text.gguf", NULL, NULL, &e) == OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 64;
    cp.n_threads = 1;
    cp.plan_path = fifo;
    oc_context *c = NULL;
    CHECKF(oc_context_open(&c, m, &cp, &e) == OC_ERR_IO && strstr(e.message, "not a regular file"), "%s", e.message);
    oc_model_close(m);
    oc_image img;
    CHECKF(oc_image_load(&img, fifo, NULL, NULL, &e) == OC_ERR_IO, "%s", e.message);
    alarm(0);
    remove(fifo);
}

/* Finding 6: a context asked for more tokens than the model's context length gets the model's
 * length (before: -c 16777216 reserved a KV cache for 16M positions). */
static void test_context_clamped_to_model(void) {
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, DIR "qwen2vl/text.gguf", NULL, NULL, &e) == OC_OK, "%s", e.message);
    oc_model_info info;
    oc_model_get_info(m, &info);
    REQUIRE(info.n_ctx_train >= 16);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.n_threads = 1;
    size_t at_model = 0, huge = 0;
    cp.max_context_tokens = info.n_ctx_train;
    REQUIRE(oc_context_memory_bytes(m, &cp, &at_model, &e) == OC_OK);
    cp.max_context_tokens = 1 << 24;
    REQUIREF(oc_context_memory_bytes(m, &cp, &huge, &e) == OC_OK, "%s", e.message);
    CHECKF(huge == at_model, "-c 16777216 needs %zu bytes, the model's %d tokens %zu", huge, info.n_ctx_train,
           at_model);
    oc_context *c;
    CHECKF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    oc_context_close(c);
    oc_model_close(m);
}

/* Finding 6: "image 5" with one image given was answered about some image without a word. */
static void test_reference_to_missing_image(void) {
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", NULL,
                           &e) == OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 256;
    cp.max_images = 2;
    cp.n_threads = 1;
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    uint8_t px[3 * 56 * 56];
    memset(px, 90, sizeof px);
    oc_image_rgb img = { px, 56, 56, 3 * 56 };
    oc_request r;
    oc_request_default(&r);
    r.images = &img;
    r.n_images = 1;
    r.max_new_tokens = 2;
    r.question = "What color is the circle in image 5?";
    oc_status st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_INVALID && strstr(e.message, "image 5"), "status %d: %s", st, e.message);
    r.question = "How many shapes are in Picture #2?";
    st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_INVALID && strstr(e.message, "image 2"), "status %d: %s", st, e.message);
    r.question = "What color is the circle in image 1?";
    CHECKF(oc_ask(c, &r, &e) == OC_OK, "%s", e.message);
    r.question = "Is this a multiimage3 test?";   /* not a reference: part of a word */
    CHECKF(oc_ask(c, &r, &e) == OC_OK, "%s", e.message);
    /* issue 40, finding 4: before, the check ran only with an image given, and "image 0" passed */
    r.question = "What color is image 0?";
    st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_INVALID && strstr(e.message, "image 0"), "status %d: %s", st, e.message);
    r.images = NULL;
    r.n_images = 0;
    r.question = "What color is the circle in image 1?";
    st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_INVALID && strstr(e.message, "no image was given"), "status %d: %s", st, e.message);
    r.question = "What is an image?";   /* no number: a text question */
    CHECKF(oc_ask(c, &r, &e) == OC_OK, "%s", e.message);
    oc_context_close(c);
    oc_model_close(m);
}

/* Asks "hi" through a fresh context on m; returns the status. */
static oc_status ask_hi(oc_model *m, oc_error *e) {
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 64;
    cp.n_threads = 1;
    oc_context *c;
    oc_status st = oc_context_open(&c, m, &cp, e);
    if (st) return st;
    oc_request r;
    oc_request_default(&r);
    r.question = "hi";
    r.max_new_tokens = 3;
    st = oc_ask(c, &r, e);
    oc_context_close(c);
    return st;
}

/* Opens a copy of the fixture's text model in mode load, truncates the copy to nothing, then asks.
 * Runs in a child process: returns the child's wait status. */
static int truncate_then_ask(oc_load_mode load) {
    const char *copy = "build/tests/harden_trunc.gguf";
    size_t n;
    unsigned char *b = read_all(DIR "qwen2vl/text.gguf", &n);
    if (!b || !write_all(copy, b, n)) { free(b); return -1; }
    free(b);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        oc_model_params mp;
        oc_model_params_default(&mp);
        mp.text_path = copy;
        mp.load = load;
        oc_model *m;
        oc_error e;
        if (oc_model_open_params(&m, &mp, &e)) _exit(3);
        if (truncate(copy, 0) != 0) _exit(4);
        oc_status st = ask_hi(m, &e);
        oc_model_close(m);
        _exit(st == OC_OK ? 0 : 5);
    }
    int status = -1;
    if (pid > 0) waitpid(pid, &status, 0);
    remove(copy);
    return status;
}

/* Finding 5: a model file truncated while in use. Mapped (the default) it kills the process with
 * SIGBUS, which the header now says; read into memory (OC_LOAD_READ, ask/eval --no-mmap), which
 * did not exist before, the model answers as if nothing happened. */
static void test_model_survives_truncation_when_read(void) {
    int st = truncate_then_ask(OC_LOAD_READ);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "read copy: wait status %#x", st);
    st = truncate_then_ask(OC_LOAD_MAP);
    /* SIGBUS, or a sanitizer's report of it (ASan catches SIGBUS and exits 1) */
    CHECKF((WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS) || (WIFEXITED(st) && WEXITSTATUS(st) == 1),
           "mapped: wait status %#x (expected SIGBUS)", st);
    /* the read path gives its memory back and reports like the mapped one */
    oc_model_params mp;
    oc_model_params_default(&mp);
    mp.text_path = "no/such/model.gguf";
    mp.load = OC_LOAD_READ;
    oc_model *m;
    oc_error e;
    CHECK(oc_model_open_params(&m, &mp, &e) == OC_ERR_IO && strstr(e.message, "no/such/model.gguf"));
    mp.load = (oc_load_mode)7;
    CHECK(oc_model_open_params(&m, &mp, &e) == OC_ERR_INVALID);
}

#if OC_HAVE_LIBPNG
typedef struct live_count { size_t n_calls, live_bytes, peak_bytes; } live_count;

static void *live_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    live_count *c = user;
    c->n_calls++;
    c->live_bytes = c->live_bytes - old_bytes + new_bytes;
    if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
    if (new_bytes == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, new_bytes);
}
#endif

/* Finding 2: a 2048 x 2048 PNG bomb (12 MiB of pixels) asked about through image_paths: oc_ask
 * decodes it itself, reduced to the context's pixel budget (256 x 256), inside the context's
 * image buffer, so the embedder's allocator never sees the pixels; before, the CLI decoded every
 * image whole before the model opened. */
static void test_image_bomb_stays_in_budget(void) {
#if !OC_HAVE_LIBPNG
    check_skip("built without libpng");
#else
    const char *bomb = "build/tests/harden_bomb.png";
    REQUIRE(check_write_png_bomb(bomb, 2048, 2048));
    live_count cnt = { 0, 0, 0 };
    oc_allocator a = { live_fn, &cnt };
    oc_model_params mp;
    oc_model_params_default(&mp);
    mp.text_path = "examples/demo/ocellus-demo.gguf";
    mp.mmproj_path = "examples/demo/ocellus-demo-mmproj.gguf";
    mp.alloc = &a;
    oc_model *m;
    oc_error e;
    REQUIREF(oc_model_open_params(&m, &mp, &e) == OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 1;
    cp.max_image_tokens = 64;
    cp.max_image_pixels = 256 * 256;
    cp.n_threads = 1;
    cp.alloc = &a;
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    size_t before = cnt.live_bytes;
    cnt.peak_bytes = before;
    oc_request r;
    oc_request_default(&r);
    r.question = "What color is the square in image 1?";
    r.image_paths = &bomb;
    r.n_images = 1;
    r.max_new_tokens = 2;
    REQUIREF(oc_ask(c, &r, &e) == OC_OK, "%s", e.message);
    oc_stats st;
    oc_context_get_stats(c, &st);
    CHECKF(st.n_image_tokens > 0 && st.n_image_tokens <= 64, "%d image tokens", st.n_image_tokens);
    CHECKF(cnt.peak_bytes - before < (size_t)2048 * 2048 * 3 / 8, "ask took %zu bytes beyond the context",
           cnt.peak_bytes - before);
    /* the smallest budget the CLI allows (784 pixels): 2048 / 74 gives 28 x 28 */
    cp.max_image_pixels = 784;
    oc_context *small;
    REQUIREF(oc_context_open(&small, m, &cp, &e) == OC_OK, "%s", e.message);
    CHECKF(oc_ask(small, &r, &e) == OC_OK, "%s", e.message);
    oc_context_close(small);
    oc_context_close(c);
    oc_model_close(m);
    CHECK(cnt.live_bytes == 0);
    remove(bomb);
#endif
}

/* Issue 40, finding 1: a progressive JPEG keeps every coefficient of the whole image while it
 * decodes. Before, a 2048 x 2048 one asked about under a 256 x 256 budget was decoded with 12 MiB
 * of coefficients from libjpeg's malloc, outside the context's stated memory (the CLI's 16384 x
 * 16384 one: 1,558 MiB against a stated 199 MiB); now it is refused from its header, and a
 * progressive file within the budget is decoded inside the context's memory: oc_ask makes no
 * allocator call. */
static void test_progressive_jpeg_bomb(void) {
#if !OC_HAVE_LIBJPEG
    check_skip("built without libjpeg");
#else
    const char *bomb = "build/tests/harden_bomb.jpg", *ok = "build/tests/harden_prog.jpg";
    REQUIRE(check_write_jpeg_bomb(bomb, 2048, 2048, 1) && check_write_jpeg_bomb(ok, 256, 256, 1));
    check_alloc cnt = { 0 };
    oc_allocator a = { check_alloc_fn, &cnt };
    oc_model *m;
    oc_error e;
    REQUIREF(oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", &a, &e) ==
             OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 1;
    cp.max_image_tokens = 64;
    cp.max_image_pixels = 256 * 256;
    cp.n_threads = 1;
    cp.alloc = &a;
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    long calls = cnt.n_calls;
    oc_request r;
    oc_request_default(&r);
    r.question = "What color is image 1?";
    r.image_paths = &bomb;
    r.n_images = 1;
    r.max_new_tokens = 2;
    oc_status st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_RANGE && strstr(e.message, "progressive") && strstr(e.message, "harden_bomb.jpg"),
           "status %d: %s", (int)st, e.message);
    r.image_paths = &ok;
    st = oc_ask(c, &r, &e);
    CHECKF(st == OC_OK, "status %d: %s", (int)st, e.message);
    CHECKF(cnt.n_calls == calls, "oc_ask made %ld allocator calls", cnt.n_calls - calls);
    oc_context_close(c);
    oc_model_close(m);
    CHECK(cnt.n_live == 0);
    remove(bomb);
    remove(ok);
#endif
}

/* Issue 40, finding 5: a context overflow is found from the images' sizes (a file's header) before
 * any image is decoded or encoded: before, 1,000 1x1 images were all encoded (14.6 s) before the
 * refusal. Finding 8: at the model's context length (where -c was clamped) the message no longer
 * says to raise the context size. */
static void test_overflow_found_before_encoding(void) {
    oc_error e;
    oc_model *m;
    REQUIREF(oc_model_open(&m, "examples/demo/ocellus-demo.gguf", "examples/demo/ocellus-demo-mmproj.gguf", NULL,
                           &e) == OC_OK, "%s", e.message);
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 1000;
    cp.max_image_tokens = 16;
    cp.n_threads = 1;
    oc_context *c;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    static uint8_t px[3 * 64 * 64];
    static oc_image_rgb views[1000];
    for (int i = 0; i < 1000; i++) views[i] = (oc_image_rgb){ px, 1, 1, 3 };
    oc_request r;
    oc_request_default(&r);
    r.images = views;
    r.n_images = 1000;
    r.max_new_tokens = 1;
    r.question = "Which one is red?";
    uint64_t t0 = oc_port_now_ns();
    oc_status st = oc_ask(c, &r, &e);
    double s = (double)(oc_port_now_ns() - t0) / 1e9;
    CHECKF(st == OC_ERR_RANGE && strstr(e.message, "context overflow"), "status %d: %s", (int)st, e.message);
    oc_stats stats;
    oc_context_get_stats(c, &stats);
    CHECKF(stats.n_image_tokens == 0 && s < 2.0, "%d image tokens encoded, %.1f s before the refusal",
           stats.n_image_tokens, s);
#if OC_HAVE_LIBPNG
    /* files: counted from their headers (a 64x64 PNG is 4 tokens here; 200 of them overflow) */
    const char *png = "build/tests/harden_small.png";
    REQUIRE(check_write_png_bomb(png, 64, 64));
    static const char *paths[200];
    for (int i = 0; i < 200; i++) paths[i] = png;
    cp.max_image_pixels = 64 * 64;
    oc_context *cf;
    REQUIREF(oc_context_open(&cf, m, &cp, &e) == OC_OK, "%s", e.message);
    r.images = NULL;
    r.image_paths = paths;
    r.n_images = 200;
    st = oc_ask(cf, &r, &e);
    oc_context_get_stats(cf, &stats);
    CHECKF(st == OC_ERR_RANGE && strstr(e.message, "context overflow") && stats.n_image_tokens == 0,
           "status %d, %d image tokens: %s", (int)st, stats.n_image_tokens, e.message);
    r.n_images = 2;   /* and two of them fit */
    CHECKF(oc_ask(cf, &r, &e) == OC_OK, "%s", e.message);
    oc_context_close(cf);
    remove(png);
#endif
    oc_context_close(c);
    /* finding 8: -c above the model's 4096 tokens is clamped to them; the overflow says so */
    cp.max_context_tokens = 1 << 24;
    cp.max_images = 1;
    REQUIREF(oc_context_open(&c, m, &cp, &e) == OC_OK, "%s", e.message);
    size_t n = 6 * 5000;
    char *q = malloc(n + 1);
    REQUIRE(q);
    for (size_t i = 0; i < n; i += 6) memcpy(q + i, "word. ", 6);
    q[n] = '\0';
    r.images = NULL;
    r.image_paths = NULL;
    r.n_images = 0;
    r.question = q;
    st = oc_ask(c, &r, &e);
    CHECKF(st == OC_ERR_RANGE && strstr(e.message, "the model's context length") && !strstr(e.message, "raise"),
           "status %d: %s", (int)st, e.message);
    free(q);
    oc_context_close(c);
    oc_model_close(m);
}

/* `test_harden --write-bomb png|jpeg|progressive PATH W H` writes a bomb for the shell tests
 * (tests/test_harden_cli.sh), built at run time, never committed; exits 0 when written, 77 when the
 * build lacks the library. */
static int write_bomb(char **argv) {
    unsigned w = (unsigned)strtoul(argv[4], NULL, 10), h = (unsigned)strtoul(argv[5], NULL, 10);
    int ok = !strcmp(argv[2], "png") ? check_write_png_bomb(argv[3], w, h)
                                     : check_write_jpeg_bomb(argv[3], w, h, !strcmp(argv[2], "progressive"));
    if (ok) return 0;
    return !strcmp(argv[2], "png") ? (OC_HAVE_LIBPNG ? 1 : 77) : (OC_HAVE_LIBJPEG ? 1 : 77);
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "--write-bomb")) return write_bomb(argv);
    CHECK_RUN(test_text_cannot_place_image_tokens);
    CHECK_RUN(test_fifo_paths_do_not_hang);
    CHECK_RUN(test_context_clamped_to_model);
    CHECK_RUN(test_reference_to_missing_image);
    CHECK_RUN(test_model_survives_truncation_when_read);
    CHECK_RUN(test_image_bomb_stays_in_budget);
    CHECK_RUN(test_progressive_jpeg_bomb);
    CHECK_RUN(test_overflow_found_before_encoding);
    return check_finish();
}
