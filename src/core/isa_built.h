/* isa_built.h: which per-ISA kernel files (*_avx2.c, *_avx512.c, *_neon.c) are linked into this
 * build, for dispatch code that names their symbols: config.h's OC_HAVE_*_KERNELS. The fuzz targets
 * (Makefile FUZZ_LIB_SRC) link the same files, so they run the kernels a context runs on the CPU. */
#ifndef OC_ISA_BUILT_H
#define OC_ISA_BUILT_H

#include "core/core.h"

#define OC_BUILT_AVX2 OC_HAVE_AVX2_KERNELS
#define OC_BUILT_AVX512 OC_HAVE_AVX512_KERNELS
#define OC_BUILT_NEON OC_HAVE_NEON_KERNELS

#endif
