/* quantize.h: a GGUF file (text model or mmproj) rewritten with its matrices in Q8_0 or Q4_0, the
 * role of llama.cpp's llama-quantize (quantize.c says which tensors change). `ocellus quantize`
 * (examples/cli/cmd_quantize.c) is its command. */
#ifndef OC_TOOLS_QUANTIZE_H
#define OC_TOOLS_QUANTIZE_H

#include "ocellus_gguf.h"

#include <stdint.h>

/* Reads in (not mapped: out may replace a file in maps), writes out with dtype (OC_DTYPE_Q8_0 or
 * OC_DTYPE_Q4_0) matrices; *n_quantized and *n_tensors (may be NULL) count what changed. */
oc_status oc_quantize_gguf(const char *in, const char *out, int32_t dtype, int64_t *n_quantized,
                           int64_t *n_tensors, oc_error *err);

#endif
