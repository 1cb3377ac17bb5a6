/* arena.c: the bump allocator of arena.h. Blocks are rounded to 16 bytes, so a raw block keeps
 * malloc's alignment for oc_mem_alloc, which aligns further on top. */
#include "core/arena.h"

#define ARENA_ROUND 16u

static size_t round_up(size_t n) { return (n + ARENA_ROUND - 1) / ARENA_ROUND * ARENA_ROUND; }

size_t oc_arena_bytes_for(size_t payload_bytes, size_t n_blocks) {
    size_t per_block = OC_MEM_ALIGN + 2 * ARENA_ROUND, extra, total;
    if (!oc_mul_size(n_blocks, per_block, &extra) || !oc_add_size(payload_bytes, extra, &total)) return SIZE_MAX;
    return total;
}

static void *arena_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    oc_arena *a = user;
    if (new_bytes == 0) {   /* free: only the last block comes back at once */
        if (ptr && (unsigned char *)ptr + round_up(old_bytes) == a->base + a->used_bytes)
            a->used_bytes -= round_up(old_bytes);
        return NULL;
    }
    if (ptr) return NULL;   /* no resizing: nothing that runs on an arena asks for it */
    size_t n = round_up(new_bytes);
    if (n < new_bytes || n > a->cap_bytes - a->used_bytes) return NULL;
    void *p = a->base + a->used_bytes;
    a->used_bytes += n;
    return p;
}

void oc_arena_init(oc_arena *a, void *base, size_t cap_bytes) {
    size_t skip = (ARENA_ROUND - (uintptr_t)base % ARENA_ROUND) % ARENA_ROUND;
    a->base = (unsigned char *)base + (cap_bytes >= skip ? skip : cap_bytes);
    a->cap_bytes = cap_bytes >= skip ? cap_bytes - skip : 0;
    a->used_bytes = 0;
}

void oc_arena_reset(oc_arena *a) { a->used_bytes = 0; }

oc_allocator oc_arena_allocator(oc_arena *a) {
    oc_allocator al = { arena_fn, a };
    return al;
}
