/* embed.c: ocellus inside someone else's program, in full: the host's own allocator and thread
 * count, one model, one question about an RGB frame built in memory, the answer printed as it is
 * generated, everything closed, and proof that every byte came back. Uses only <ocellus.h>.
 *   cc embed.c $(pkg-config --cflags --libs ocellus) -o embed && ./embed TEXT.gguf MMPROJ.gguf
 * With the demo model (examples/demo/ocellus-demo.gguf, -mmproj.gguf) the answer is "red". */
#include <ocellus.h>

#include <stdio.h>
#include <stdlib.h>

/* oc_alloc_fn: new_bytes 0 frees, anything else (re)allocates. Firmware would carve a static
 * arena here; this one counts, so the program can show that nothing leaked. */
typedef struct { size_t live_bytes, peak_bytes; } counter;

static void *counting_alloc(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    counter *c = user;
    if (new_bytes == 0) { free(ptr); c->live_bytes -= old_bytes; return NULL; }
    void *p = realloc(ptr, new_bytes);
    if (!p) return NULL;
    c->live_bytes = c->live_bytes - old_bytes + new_bytes;
    if (c->live_bytes > c->peak_bytes) c->peak_bytes = c->live_bytes;
    return p;
}

static int print_piece(void *user, const char *text, size_t n_bytes) {
    (void)user;
    fwrite(text, 1, n_bytes, stdout);
    return 0;   /* nonzero would end the answer here */
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s TEXT.gguf MMPROJ.gguf\n", argv[0]); return 2; }
    static uint8_t rgb[112][112][3];   /* a 112 x 112 frame: dark gray, a red square on the left */
    for (int y = 0; y < 112; y++)
        for (int x = 0; x < 112; x++) {
            int red = x >= 34 && x < 54 && y >= 62 && y < 82;
            rgb[y][x][0] = red ? 230 : 50; rgb[y][x][1] = red ? 25 : 50; rgb[y][x][2] = red ? 25 : 50;
        }
    counter c = { 0, 0 };
    oc_allocator alloc = { counting_alloc, &c };
    /* the calls (include/ocellus.h opens with the same sequence as a whole program) */
    oc_error err = { OC_OK, "" };
    oc_model *model = NULL;
    oc_context *ctx = NULL;
    oc_status st = oc_model_open(&model, argv[1], argv[2], &alloc, &err);
    if (st == OC_OK) {
        oc_context_params params;
        oc_context_params_default(&params);
        params.alloc = &alloc;
        params.n_threads = 2;              /* the cores this program lends to ocellus */
        params.max_context_tokens = 512;   /* the limits fix the memory, all allocated here */
        params.max_image_tokens = 64;
        params.max_image_pixels = 0;       /* frames come as pixels: no buffer to decode files */
        st = oc_context_open(&ctx, model, &params, &err);
    }
    if (st == OC_OK) {
        oc_image_rgb image = { &rgb[0][0][0], 112, 112, sizeof rgb[0] };
        oc_request req;
        oc_request_default(&req);
        req.question = "What color is the square in image 1?";   /* the demo model: "red" */
        req.images = &image;
        req.n_images = 1;
        req.max_new_tokens = 8;
        req.on_text = print_piece;
        printf("answer: ");
        st = oc_ask(ctx, &req, &err);
        printf("\n");
    }
    oc_context_close(ctx);   /* both accept NULL */
    oc_model_close(model);
    if (st != OC_OK) printf("error: %s: %s\n", oc_status_str(st), err.message);
    printf("memory: peak %zu bytes, %zu bytes not freed\n", c.peak_bytes, c.live_bytes);
    return st == OC_OK && c.live_bytes == 0 ? 0 : 1;
}
