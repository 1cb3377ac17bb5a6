/* isa.h: the instruction-set paths kernels exist for, and which of them this CPU can run.
 * Each kernel family (matmul, attention ...) offers one table per ISA through a
 * <family>_kernels_for(oc_isa) function that returns NULL when that table was not built;
 * model code takes oc_isa_best(); tests loop over every ISA that oc_isa_runs() accepts. */
#ifndef OC_ISA_H
#define OC_ISA_H

#include "core/core.h"
#include "port.h"

typedef enum oc_isa {
    OC_ISA_SCALAR = 0,   /* portable C, always built: the test oracle */
    OC_ISA_AVX2,         /* x86-64 AVX2 + FMA + F16C */
    OC_ISA_AVX512,       /* x86-64 AVX-512 F/BW/VL/DQ (+VNNI, +BF16 where present) */
    OC_ISA_NEON,         /* AArch64 Advanced SIMD / ARMv7 NEON-VFPv4 */
    OC_ISA_COUNT
} oc_isa;

const char *oc_isa_name(oc_isa isa);
/* 1 when the kernels for isa were built into this library and this CPU can run them. */
int oc_isa_runs(oc_isa isa, const oc_cpu_features *cpu);
/* The fastest ISA that runs here. */
oc_isa oc_isa_best(const oc_cpu_features *cpu);

#endif
