/* soak.c: the load test of `make soak` (not part of make check; issue 21): a long-running host's
 * view of the runtime. One model (the demo model) is opened once and shared.
 *  1. Reference answers: every question of a fixed set (text only, one image, two images) asked
 *     once through one context on one thread.
 *  2. N questions (default 10,000) through that one context, cycling the set: every answer must
 *     equal its reference, the allocator must not be called at all (the context allocated
 *     everything at open), the bytes the context holds must be the same after every question, and the peak RSS after the run is reported next
 *     to the one after the first 100 questions (flat memory).
 *  3. 8 contexts on the shared model, one per thread, each asking M questions (default 100):
 *     every answer equal to the single-threaded reference.
 * Built with ./configure --enable-tsan, the same run must give no ThreadSanitizer report.
 * Usage: soak [N [M]] from the repository root. Prints one summary line per phase; exit 0 when
 * everything held. */
#define _POSIX_C_SOURCE 200809L
#include "ocellus.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define TEXT "examples/demo/ocellus-demo.gguf"
#define MMPROJ "examples/demo/ocellus-demo-mmproj.gguf"
#define IMAGE "examples/demo/shapes.ppm"
#define N_THREADS 8

typedef struct item { const char *question; int n_images; } item;
static const item items[] = {
    { "What color is the circle in image 1?", 1 },
    { "How many shapes are in image 1?", 1 },
    { "Is there a square in image 2?", 2 },
    { "Which image has the circle?", 2 },
    { "What is the capital of France?", 0 },
};
#define N_ITEMS (sizeof items / sizeof items[0])

typedef struct answer { char text[256]; size_t n; } answer;
static int collect(void *user, const char *t, size_t n) {
    answer *a = user;
    if (a->n + n < sizeof a->text) {
        memcpy(a->text + a->n, t, n);
        a->n += n;
        a->text[a->n] = '\0';
    }
    return 0;
}

typedef struct live { pthread_mutex_t mu; size_t bytes, calls; } live;
static void *live_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    live *l = user;
    pthread_mutex_lock(&l->mu);
    l->bytes = l->bytes - old_bytes + new_bytes;
    l->calls++;
    pthread_mutex_unlock(&l->mu);
    if (new_bytes == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, new_bytes);
}

static oc_model *model;
static oc_image_rgb views[2];
static answer reference[N_ITEMS];

static double peak_rss_mib(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss / 1024.0 : 0.0;
}

static int ask(oc_context *c, size_t k, answer *out) {
    oc_request r;
    oc_request_default(&r);
    r.question = items[k].question;
    r.images = items[k].n_images ? views : NULL;
    r.n_images = items[k].n_images;
    r.max_new_tokens = 8;
    r.on_text = collect;
    r.user = out;
    out->n = 0;
    out->text[0] = '\0';
    oc_error e;
    if (oc_ask(c, &r, &e) != OC_OK) {
        fprintf(stderr, "soak: %s\n", e.message);
        return 0;
    }
    return 1;
}

static oc_status open_context(oc_context **c, const oc_allocator *a, oc_error *e) {
    oc_context_params cp;
    oc_context_params_default(&cp);
    cp.max_context_tokens = 512;
    cp.max_images = 2;
    cp.n_threads = 1;
    cp.alloc = a;
    return oc_context_open(c, model, &cp, e);
}

typedef struct worker { int index, n_questions, n_wrong, n_failed; } worker;
static void *run_worker(void *arg) {
    worker *w = arg;
    oc_context *c;
    oc_error e;
    if (open_context(&c, NULL, &e) != OC_OK) {
        w->n_failed = w->n_questions;
        return NULL;
    }
    for (int q = 0; q < w->n_questions; q++) {
        size_t k = (size_t)(q + w->index) % N_ITEMS;
        answer a;
        if (!ask(c, k, &a)) w->n_failed++;
        else if (strcmp(a.text, reference[k].text)) w->n_wrong++;
    }
    oc_context_close(c);
    return NULL;
}

int main(int argc, char **argv) {
    long n_questions = argc > 1 ? atol(argv[1]) : 10000, per_thread = argc > 2 ? atol(argv[2]) : 100;
    if (n_questions < 100 || per_thread < 1) { fprintf(stderr, "usage: soak [N >= 100 [M >= 1]]\n"); return 2; }
    oc_error e;
    oc_image img;
    if (oc_model_open(&model, TEXT, MMPROJ, NULL, &e) || oc_image_load(&img, IMAGE, NULL, NULL, &e)) {
        fprintf(stderr, "soak: %s (run from the repository root)\n", e.message);
        return 1;
    }
    /* the second image: the first mirrored left to right */
    uint8_t *mirror = malloc(img.stride_bytes * (size_t)img.height_px);
    if (!mirror) return 1;
    for (int y = 0; y < img.height_px; y++)
        for (int x = 0; x < img.width_px; x++)
            memcpy(mirror + (size_t)y * img.stride_bytes + 3 * (size_t)x,
                   img.rgb + (size_t)y * img.stride_bytes + 3 * (size_t)(img.width_px - 1 - x), 3);
    views[0] = oc_image_view(&img);
    views[1] = views[0];
    views[1].rgb = mirror;

    live l = { PTHREAD_MUTEX_INITIALIZER, 0, 0 };
    oc_allocator a = { live_fn, &l };
    oc_context *c;
    if (open_context(&c, &a, &e)) { fprintf(stderr, "soak: %s\n", e.message); return 1; }
    int ok = 1;
    for (size_t k = 0; k < N_ITEMS; k++) ok &= ask(c, k, &reference[k]);
    for (size_t k = 0; k < N_ITEMS; k++) printf("reference %zu: %s -> '%s'\n", k, items[k].question, reference[k].text);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t held = l.bytes, calls = l.calls;
    long n_wrong = 0, n_failed = 0, n_drift = 0;
    double rss_100 = 0;
    for (long q = 0; q < n_questions; q++) {
        size_t k = (size_t)q % N_ITEMS;
        answer ans;
        if (!ask(c, k, &ans)) n_failed++;
        else if (strcmp(ans.text, reference[k].text)) n_wrong++;
        if (l.bytes != held) n_drift++;
        if (q == 99) rss_100 = peak_rss_mib();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    calls = l.calls - calls;
    printf("one context: %ld questions in %.1f s, %ld answers differ, %ld failed, %zu allocator calls, context "
           "holds %zu bytes (changed after %ld questions), peak RSS %.1f MiB after 100, %.1f MiB after %ld\n",
           n_questions, s, n_wrong, n_failed, calls, held, n_drift, rss_100, peak_rss_mib(), n_questions);
    ok &= !n_wrong && !n_failed && !n_drift && !calls;
    oc_context_close(c);

    pthread_t th[N_THREADS];
    worker w[N_THREADS];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < N_THREADS; i++) {
        w[i] = (worker){ i, (int)per_thread, 0, 0 };
        if (pthread_create(&th[i], NULL, run_worker, &w[i])) return 1;
    }
    long wrong8 = 0, failed8 = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        wrong8 += w[i].n_wrong;
        failed8 += w[i].n_failed;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%d contexts on %d threads, one model: %ld questions in %.1f s, %ld answers differ from the "
           "single-threaded ones, %ld failed, peak RSS %.1f MiB\n", N_THREADS, N_THREADS,
           (long)N_THREADS * per_thread, s, wrong8, failed8, peak_rss_mib());
    ok &= !wrong8 && !failed8;
    free(mirror);
    oc_image_free(&img);
    oc_model_close(model);
    printf("soak: %s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
