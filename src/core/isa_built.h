/* isa_built.h: which per-ISA kernel files (*_avx2.c, *_avx512.c, *_neon.c) are linked into this
 * build, for dispatch code that names their symbols. Normally config.h's OC_HAVE_*_KERNELS; the fuzz
 * targets (Makefile FUZZ_LIB_SRC, built with -DOC_FUZZING) compile only the portable sources, so
 * there none are, whatever config.h says. */
#ifndef OC_ISA_BUILT_H
#define OC_ISA_BUILT_H

#include "core/core.h"

#ifdef OC_FUZZING
#define OC_BUILT_AVX2 0
#define OC_BUILT_AVX512 0
#define OC_BUILT_NEON 0
#else
#define OC_BUILT_AVX2 OC_HAVE_AVX2_KERNELS
#define OC_BUILT_AVX512 OC_HAVE_AVX512_KERNELS
#define OC_BUILT_NEON OC_HAVE_NEON_KERNELS
#endif

#endif
