/* matmul_avx512.c: placeholder (work in progress). */
#include "matmul_kern.h"
const oc_matmul_kernels *oc_matmul_kernels_avx512(const oc_cpu_features *cpu) { (void)cpu; return NULL; }
