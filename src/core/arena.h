/* arena.h: an oc_allocator over one block reserved up front, for work whose memory must come out
 * of a bound stated in advance (oc_ask decoding an image into the context's image buffer). Blocks
 * are handed out in order; freeing the last one gives it back, any other free waits for
 * oc_arena_reset. Past the end it returns NULL, which callers report as OC_ERR_NOMEM: it never
 * falls back to another allocator. Not thread-safe: one arena per context. */
#ifndef OC_ARENA_H
#define OC_ARENA_H

#include "core/core.h"

typedef struct oc_arena {
    unsigned char *base;
    size_t cap_bytes, used_bytes;
} oc_arena;

/* Bytes to reserve so that n_blocks allocations through oc_mem_alloc of payload_bytes in all fit:
 * each block costs its size plus OC_MEM_ALIGN (oc_mem_alloc's header) plus rounding. */
size_t oc_arena_bytes_for(size_t payload_bytes, size_t n_blocks);

void oc_arena_init(oc_arena *a, void *base, size_t cap_bytes);
void oc_arena_reset(oc_arena *a);
/* The allocator that serves from a (a must outlive its use). */
oc_allocator oc_arena_allocator(oc_arena *a);

#endif
