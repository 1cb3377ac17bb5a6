/* alloc.c: the default allocator (libc) and aligned allocation on top of any oc_allocator.
 * This is the only library file that calls malloc/realloc/free. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static void *libc_alloc(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    (void)user;
    (void)old_bytes;
    if (new_bytes == 0) {
        free(ptr);
        return NULL;
    }
    return realloc(ptr, new_bytes);
}

static const oc_allocator default_allocator = { libc_alloc, NULL };

const oc_allocator *oc_default_allocator(void) { return &default_allocator; }

/* Over-allocate by OC_MEM_ALIGN and keep the distance to the raw block in the byte before the
 * aligned pointer, so any allocator that returns malloc-aligned memory works. */
void *oc_mem_alloc(const oc_allocator *alloc, size_t n_bytes) {
    if (!alloc || !alloc->fn) alloc = &default_allocator;
    size_t total;
    if (!oc_add_size(n_bytes, OC_MEM_ALIGN, &total)) return NULL;
    unsigned char *raw = alloc->fn(alloc->user, NULL, 0, total);
    if (!raw) return NULL;
    size_t shift = OC_MEM_ALIGN - ((uintptr_t)raw % OC_MEM_ALIGN);   /* 1..OC_MEM_ALIGN */
    unsigned char *p = raw + shift;
    p[-1] = (unsigned char)shift;
    return p;
}

void *oc_mem_calloc(const oc_allocator *alloc, size_t n_bytes) {
    void *p = oc_mem_alloc(alloc, n_bytes);
    if (p) memset(p, 0, n_bytes);
    return p;
}

void oc_mem_free(const oc_allocator *alloc, void *p, size_t n_bytes) {
    if (!p) return;
    if (!alloc || !alloc->fn) alloc = &default_allocator;
    unsigned char *q = p;
    size_t shift = q[-1];
    alloc->fn(alloc->user, q - shift, n_bytes + OC_MEM_ALIGN, 0);
}
