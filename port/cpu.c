/* cpu.c: which SIMD extensions this CPU and OS support, for run-time kernel dispatch.
 * x86-64: cpuid leaves 1 and 7 plus xgetbv (the OS must save YMM/ZMM state).
 * aarch64 Linux: getauxval(AT_HWCAP). armv7 Linux: AT_HWCAP NEON + VFPv4 bits. Elsewhere: nothing. */
#define _GNU_SOURCE
#include "port.h"

#include <stdlib.h>
#include <string.h>

static void apply_env(oc_cpu_features *f);

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

void oc_port_cpu_features(oc_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    unsigned max_leaf = a;
    memcpy(f->vendor + 0, &b, 4);
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    f->vendor[12] = 0;
    __get_cpuid(1, &a, &b, &c, &d);
    /* family: base 0xF plus the extended family field (CPUID 1 EAX bits 8-11 and 20-27) */
    unsigned family = ((a >> 8) & 0xf) == 0xf ? 0xf + ((a >> 20) & 0xff) : (a >> 8) & 0xf;
    int osxsave = (c >> 27) & 1;
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    int ymm_ok = (xcr0 & 0x6) == 0x6;            /* SSE + AVX state */
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0; /* opmask + ZMM_Hi256 + Hi16_ZMM */
    f->fma = ymm_ok && ((c >> 12) & 1);
    f->f16c = ymm_ok && ((c >> 29) & 1);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f->avx2 = ymm_ok && ((b >> 5) & 1);
        f->avx512f = zmm_ok && ((b >> 16) & 1);
        f->avx512dq = zmm_ok && ((b >> 17) & 1);
        f->avx512bw = zmm_ok && ((b >> 30) & 1);
        f->avx512vl = zmm_ok && ((b >> 31) & 1);
        f->avx512vnni = zmm_ok && ((c >> 11) & 1);
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        f->avx512bf16 = zmm_ok && ((a1 >> 5) & 1);
        f->avxvnni = ymm_ok && ((a1 >> 4) & 1);
        (void)b1; (void)c1; (void)d1;
    }
    /* port.h: vdpbf16ps at twice the FMA rate on Zen 4 / Zen 5 (AMD family 0x19 / 0x1A) */
    f->bf16_fast = f->avx512bf16 && !strcmp(f->vendor, "AuthenticAMD") && (family == 0x19 || family == 0x1a);
    apply_env(f);
}

#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

void oc_port_cpu_features(oc_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f->neon = 1;                       /* Advanced SIMD is mandatory on AArch64 */
    f->fp16 = (hw >> 10) & 1;          /* HWCAP_ASIMDHP */
    f->dotprod = (hw >> 20) & 1;       /* HWCAP_ASIMDDP */
    f->i8mm = (hw2 >> 13) & 1;         /* HWCAP2_I8MM */
    f->bf16 = (hw2 >> 14) & 1;         /* HWCAP2_BF16 */
    strcpy(f->vendor, "arm64");
    apply_env(f);
}

#elif defined(__aarch64__)
void oc_port_cpu_features(oc_cpu_features *f) {
    memset(f, 0, sizeof *f);
    f->neon = 1;
    strcpy(f->vendor, "arm64");
    apply_env(f);
}

#elif defined(__arm__) && defined(__linux__)
#include <sys/auxv.h>

void oc_port_cpu_features(oc_cpu_features *f) {
    memset(f, 0, sizeof *f);
    /* The NEON kernels use fused multiply-add (vfma) and f16 conversions: Advanced SIMDv2, which
     * comes with VFPv4. Cortex-A8/A9 have NEON without it and run the scalar kernels. */
    unsigned long hw = getauxval(AT_HWCAP);
    f->neon = ((hw >> 12) & 1) && ((hw >> 16) & 1) && ((hw >> 1) & 1);  /* NEON, VFPv4, HALF */
    strcpy(f->vendor, "arm");
    apply_env(f);
}

#else
void oc_port_cpu_features(oc_cpu_features *f) {
    memset(f, 0, sizeof *f);
    strcpy(f->vendor, "unknown");
    apply_env(f);
}
#endif

/* OCELLUS_CPU_FEATURES (port.h): bit-fields cannot be addressed, so each name has a setter. */
#define FEATURES(X) X(avx2) X(fma) X(f16c) X(avx512f) X(avx512bw) X(avx512vl) X(avx512dq) X(avx512vnni) \
                    X(avx512bf16) X(avxvnni) X(bf16_fast) X(neon) X(dotprod) X(fp16) X(i8mm) X(bf16)

static int set_feature(oc_cpu_features *f, const char *name, size_t len, unsigned on) {
#define SET(n) if (len == sizeof #n - 1 && memcmp(name, #n, len) == 0) { f->n = on; return 1; }
    FEATURES(SET)
#undef SET
    return 0;
}

static void apply_env(oc_cpu_features *f) {
    const char *s = getenv("OCELLUS_CPU_FEATURES");
    while (s && *s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len > 1 && (s[0] == '+' || s[0] == '-')) set_feature(f, s + 1, len - 1, s[0] == '+');
        s = end ? end + 1 : NULL;
    }
}
