/* check.h: the test harness shared by every tests/test_*.c program.
 * A program runs named cases with CHECK_RUN; each prints one line
 *   PASS name | FAIL name: file:line: what | SKIP name: why
 * and main returns check_finish(), which prints the program's counts. tests/run.sh adds up the
 * lines of all programs and prints the one summary line of `make check`. */
#ifndef OC_CHECK_H
#define OC_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct check_state {
    int n_pass, n_fail, n_skip;
    int case_failed, case_skipped;
    const char *case_name;
    char skip_reason[256];
} check_state;

extern check_state check_g;

void check_fail_at(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void check_skip(const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
void check_run(const char *name, void (*fn)(void));
int check_finish(void);

/* The allocator every test passes where it checks memory (tests/support/alloc.c). Use it as
 * oc_allocator a = { check_alloc_fn, &c } with a zeroed check_alloc c. */
typedef struct check_alloc {
    long n_live;          /* blocks allocated and not yet freed: 0 after every close or failure */
    size_t bytes_live;    /* their bytes */
    long n_calls;         /* every call, frees included: a path that allocates nothing adds none */
    long n_allocs;        /* calls that allocate or resize: the ones fail_at counts */
    long fail_at;         /* 0: never fail; k: the k-th allocating call returns NULL */
    int persistent;       /* with fail_at: every allocating call from the k-th on returns NULL */
} check_alloc;
void *check_alloc_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes);

/* A decompression bomb (tests/support/png_bomb.c): width x height black RGB pixels in a PNG of a
 * few KB, written row by row. 0 when it could not be written or the build has no libpng. */
int check_write_png_bomb(const char *path, unsigned width_px, unsigned height_px);

/* A progressive (progressive != 0) or baseline JPEG of width x height flat grey pixels, 4:2:0,
 * written by libjpeg (tests/support/jpeg_bomb.c). 0 when it could not be written or the build has
 * no libjpeg. */
int check_write_jpeg_bomb(const char *path, unsigned width_px, unsigned height_px, int progressive);

/* Is the test running under an emulator (tests/run.sh sets OC_TEST_SLOW=2 for a TARGET_EXEC such as
 * qemu)? There the randomized cases run a subset that still covers every shape kind, ISA table and
 * thread count: an emulated instruction costs 10-50x a native one, and the native configurations
 * run every case. */
int check_emulated(void);

/* Does ../shared/data exist? Returns the directory or NULL. */
const char *check_shared_data_dir(void);

/* Fill with a value that is NaN as float: kernels must overwrite every output they own. */
void check_poison_f32(float *p, size_t n);
/* Sets OCELLUS_CPU_FEATURES (port.h) to what the test was started with plus `extra` (e.g.
 * "-bf16_fast": later items win), for the rest of the process. Parity tests with f32 bounds pin the
 * exact FP32 GEMM path this way where the CPU would take the BF16 path (matmul.h). */
void check_cpu_features(const char *extra);

/* Relative error ||a-b|| / max(||b||, tiny) in double; returns INFINITY if any value is NaN/Inf
 * in a (so NaN never passes a tolerance test). */
double check_rel_err_f32(const float *a, const double *ref, size_t n);

/* Deterministic random numbers (xorshift64*), seeded per case. */
typedef struct { unsigned long long s; } check_rng;
static inline unsigned long long check_rng_u64(check_rng *r) {
    r->s ^= r->s >> 12; r->s ^= r->s << 25; r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ULL;
}
static inline double check_rng_unit(check_rng *r) { return (double)(check_rng_u64(r) >> 11) / 9007199254740992.0; }
static inline float check_rng_uniform(check_rng *r, float lo, float hi) { return lo + (hi - lo) * (float)check_rng_unit(r); }
static inline int check_rng_int(check_rng *r, int lo, int hi) { return lo + (int)(check_rng_u64(r) % (unsigned long long)(hi - lo + 1)); }

#define CHECK(cond) do { if (!(cond)) check_fail_at(__FILE__, __LINE__, "%s", #cond); } while (0)
#define CHECKF(cond, ...) do { if (!(cond)) check_fail_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)
/* Stop the case on failure. */
#define REQUIRE(cond) do { if (!(cond)) { check_fail_at(__FILE__, __LINE__, "%s", #cond); return; } } while (0)
#define REQUIREF(cond, ...) do { if (!(cond)) { check_fail_at(__FILE__, __LINE__, __VA_ARGS__); return; } } while (0)
#define CHECK_RUN(fn) check_run(#fn, fn)

#endif
