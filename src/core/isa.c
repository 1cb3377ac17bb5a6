/* isa.c: maps CPU features (port/cpu.c) and the kernels this build contains to an ISA choice. */
#include "core/isa.h"
#include "core/isa_built.h"

const char *oc_isa_name(oc_isa isa) {
    switch (isa) {
    case OC_ISA_SCALAR: return "scalar";
    case OC_ISA_AVX2: return "avx2";
    case OC_ISA_AVX512: return "avx512";
    case OC_ISA_NEON: return "neon";
    case OC_ISA_COUNT: break;
    }
    return "unknown";
}

int oc_isa_runs(oc_isa isa, const oc_cpu_features *cpu) {
    switch (isa) {
    case OC_ISA_SCALAR: return 1;
    case OC_ISA_AVX2: return OC_BUILT_AVX2 && cpu->avx2 && cpu->fma && cpu->f16c;
    case OC_ISA_AVX512:
        return OC_BUILT_AVX512 && cpu->avx2 && cpu->fma && cpu->f16c && cpu->avx512f &&
               cpu->avx512bw && cpu->avx512vl && cpu->avx512dq;
    case OC_ISA_NEON: return OC_BUILT_NEON && cpu->neon;
    case OC_ISA_COUNT: break;
    }
    return 0;
}

oc_isa oc_isa_best(const oc_cpu_features *cpu) {
    static const oc_isa order[] = { OC_ISA_AVX512, OC_ISA_AVX2, OC_ISA_NEON };
    for (size_t i = 0; i < OC_ARRAY_LEN(order); i++)
        if (oc_isa_runs(order[i], cpu)) return order[i];
    return OC_ISA_SCALAR;
}
