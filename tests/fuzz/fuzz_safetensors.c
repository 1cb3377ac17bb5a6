/* fuzz_safetensors.c: libFuzzer target for the safetensors validator: open the input as a file
 * image, then touch the first and last byte of every tensor (ASan catches any range the validator
 * let through) and look up names and metadata. */
#include "tools/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oc_safetensors *st;
    oc_error e;
    if (oc_safetensors_open_bytes(&st, data, size, NULL, &e) != OC_OK) return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < oc_safetensors_n_tensors(st); i++) {
        const oc_st_tensor *t = oc_safetensors_tensor_at(st, i);
        if (t->n_bytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->n_bytes - 1];
        if (oc_safetensors_find(st, t->name.ptr) == NULL && t->name.len == __builtin_strlen(t->name.ptr)) __builtin_trap();
    }
    oc_str s;
    (void)oc_safetensors_metadata(st, "format", &s, &e);
    (void)sink;
    oc_safetensors_close(st);
    return 0;
}
