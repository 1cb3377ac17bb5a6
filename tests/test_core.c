/* test_core.c: port layer, allocator, status strings, f16/bf16 conversion, thread pool. */
#include "check.h"
#include "core/core.h"
#include "core/f16.h"
#include "core/isa.h"
#include "core/pool.h"
#include "port.h"

#include <stdatomic.h>

static void test_status_strings(void) {
    for (int s = OC_OK; s <= OC_ERR_ABORTED; s++) {
        const char *str = oc_status_str((oc_status)s);
        CHECKF(str && strcmp(str, "unknown status") != 0, "status %d has no name", s);
    }
    oc_error e;
    CHECK(oc_fail(&e, OC_ERR_FORMAT, "x=%d", 42) == OC_ERR_FORMAT);
    CHECK(e.status == OC_ERR_FORMAT && strcmp(e.message, "x=42") == 0);
    CHECK(oc_fail(NULL, OC_ERR_IO, "ignored") == OC_ERR_IO);
}

/* A counting allocator proves oc_mem_* pair every allocation with a free of the same size. */

static void test_alloc_alignment(void) {
    check_alloc c = { 0 };
    oc_allocator a = { check_alloc_fn, &c };
    void *ptrs[50];
    for (int i = 0; i < 50; i++) {
        ptrs[i] = oc_mem_alloc(&a, (size_t)i * 7 + 1);
        REQUIRE(ptrs[i]);
        CHECK((uintptr_t)ptrs[i] % OC_MEM_ALIGN == 0);
        memset(ptrs[i], 0xab, (size_t)i * 7 + 1);
    }
    CHECK(c.n_live == 50);
    for (int i = 0; i < 50; i++) oc_mem_free(&a, ptrs[i], (size_t)i * 7 + 1);
    CHECK(c.n_live == 0 && c.bytes_live == 0);
    CHECK(oc_mem_alloc(&a, SIZE_MAX - 10) == NULL);   /* overflow is refused, not wrapped */
}

/* Every one of the 65536 halves converts to float and back to itself (NaNs stay NaN). */
static void test_f16_roundtrip_exhaustive(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = oc_f16_to_f32((uint16_t)h);
        uint16_t back = oc_f32_to_f16(f);
        int is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (is_nan) CHECKF(isnan(f) && ((back >> 10) & 0x1f) == 0x1f && (back & 0x3ff), "nan %04x", h);
        else CHECKF(back == h, "half %04x -> %g -> %04x", h, (double)f, back);
    }
    /* rounding: halfway cases go to even, overflow to inf, tiny to zero */
    CHECK(oc_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00);          /* tie, even stays */
    CHECK(oc_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02);          /* tie, odd rounds up */
    CHECK(oc_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(oc_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(oc_f32_to_f16(1e-9f) == 0);
    CHECK(oc_f32_to_f16(-5.9604645e-8f) == 0x8001);              /* smallest subnormal */
    CHECK(oc_bf16_to_f32(oc_f32_to_bf16(1.0f)) == 1.0f);
    CHECK(oc_f32_to_bf16(1.00390625f) == 0x3f80);                /* tie to even */
    CHECK(isnan(oc_bf16_to_f32(oc_f32_to_bf16(NAN))));
}

static void test_map_file(void) {
    oc_port_mapping m;
    char msg[256];
    CHECK(oc_port_map_file("tests/check.h", &m, msg, sizeof msg) == 0);
    CHECK(m.n_bytes > 100 && memcmp(m.data, "/* check.h", 10) == 0);
    oc_port_unmap_file(&m);
    CHECK(oc_port_map_file("tests/no-such-file", &m, msg, sizeof msg) != 0);
    CHECKF(strstr(msg, "tests/no-such-file") != NULL, "message '%s' names the path", msg);
    CHECK(oc_port_map_file("tests", &m, msg, sizeof msg) != 0);   /* a directory */
}

static void test_clock_and_cpu(void) {
    uint64_t a = oc_port_now_ns(), b = oc_port_now_ns();
    CHECK(b >= a);
    oc_cpu_features f;
    oc_port_cpu_features(&f);
    printf("# cpu %s: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d vnni=%d bf16=%d neon=%d dotprod=%d; best isa %s\n",
           f.vendor, f.avx2, f.fma, f.f16c, f.avx512f, f.avx512bw, f.avx512vl, f.avx512vnni, f.avx512bf16,
           f.neon, f.dotprod, oc_isa_name(oc_isa_best(&f)));
    CHECK(oc_isa_runs(OC_ISA_SCALAR, &f));
    CHECK(oc_port_n_cpus() >= 1);
}

typedef struct { atomic_int hits[1000]; double out[1000]; } pool_job;
static void pool_task(void *ctx, int64_t task, int thread) {
    pool_job *j = ctx;
    (void)thread;
    atomic_fetch_add(&j->hits[task], 1);
    double s = 0;
    for (int i = 0; i < 1000 + (int)task * 10; i++) s += 1.0 / (1.0 + i + (double)task);
    j->out[task] = s;
}

static void test_pool_runs_each_task_once(void) {
    static pool_job ref, job;
    memset(&ref, 0, sizeof ref);
    oc_pool_run(NULL, 1000, pool_task, &ref);   /* serial */
    for (int n = 1; n <= 5; n++) {
        oc_pool *p;
        oc_error e;
        REQUIREF(oc_pool_open(&p, n, NULL, &e) == OC_OK, "%s", e.message);
        CHECK(oc_pool_n_threads(p) == n);
        for (int rep = 0; rep < 20; rep++) {
            memset(&job, 0, sizeof job);
            oc_pool_run(p, 1000, pool_task, &job);
            for (int i = 0; i < 1000; i++) CHECKF(atomic_load(&job.hits[i]) == 1, "task %d ran %d times", i, atomic_load(&job.hits[i]));
            CHECK(memcmp(job.out, ref.out, sizeof ref.out) == 0);
        }
        oc_pool_run(p, 0, pool_task, &job);
        oc_pool_close(p);
    }
    oc_pool_close(NULL);
}

int main(void) {
    CHECK_RUN(test_status_strings);
    CHECK_RUN(test_alloc_alignment);
    CHECK_RUN(test_f16_roundtrip_exhaustive);
    CHECK_RUN(test_map_file);
    CHECK_RUN(test_clock_and_cpu);
    CHECK_RUN(test_pool_runs_each_task_once);
    return check_finish();
}
