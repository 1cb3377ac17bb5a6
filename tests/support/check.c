/* check.c: the harness behind check.h. */
#define _POSIX_C_SOURCE 200809L   /* setenv */
#include "check.h"

#include <stdarg.h>
#include <stdint.h>
#include <sys/stat.h>

check_state check_g;

void check_fail_at(const char *file, int line, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Only the first few failures of a case are printed; the case fails once. */
    if (check_g.case_failed < 5) printf("FAIL %s: %s:%d: %s\n", check_g.case_name, file, line, msg);
    check_g.case_failed++;
    fflush(stdout);
}

void check_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(check_g.skip_reason, sizeof check_g.skip_reason, fmt, ap);
    va_end(ap);
    check_g.case_skipped = 1;
}

void check_run(const char *name, void (*fn)(void)) {
    check_g.case_name = name;
    check_g.case_failed = 0;
    check_g.case_skipped = 0;
    fn();
    if (check_g.case_failed) {
        check_g.n_fail++;
    } else if (check_g.case_skipped) {
        check_g.n_skip++;
        printf("SKIP %s: %s\n", name, check_g.skip_reason);
    } else {
        check_g.n_pass++;
        printf("PASS %s\n", name);
    }
    fflush(stdout);
}

int check_finish(void) {
    printf("# %d passed, %d failed, %d skipped\n", check_g.n_pass, check_g.n_fail, check_g.n_skip);
    return check_g.n_fail ? 1 : 0;
}

int check_emulated(void) {
    const char *slow = getenv("OC_TEST_SLOW");
    return slow && atoi(slow) >= 2;
}

const char *check_shared_data_dir(void) {
    static const char *const candidates[] = { "../shared/data", "../../shared/data" };
    struct stat st;
    const char *env = getenv("OC_SHARED_DATA");
    if (env && stat(env, &st) == 0 && S_ISDIR(st.st_mode)) return env;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (stat(candidates[i], &st) == 0 && S_ISDIR(st.st_mode)) return candidates[i];
    return NULL;
}

void check_poison_f32(float *p, size_t n) {
    const uint32_t nan_bits = 0x7fc0dead;
    for (size_t i = 0; i < n; i++) memcpy(&p[i], &nan_bits, 4);
}

double check_rel_err_f32(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den < 1e-300) return sqrt(num) < 1e-30 ? 0.0 : INFINITY;
    return sqrt(num / den);
}

void check_cpu_features(const char *extra) {
    static char caller[256];
    static int saved;
    if (!saved) {
        const char *v = getenv("OCELLUS_CPU_FEATURES");
        snprintf(caller, sizeof caller, "%s", v ? v : "");
        saved = 1;
    }
    char v[512];
    snprintf(v, sizeof v, "%s%s%s", caller, *caller ? "," : "", extra);
    setenv("OCELLUS_CPU_FEATURES", v, 1);
}
