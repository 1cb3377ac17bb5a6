/* alloc.c: the tests' one allocator (check.h check_alloc): counts what is live so a test can prove
 * every failure path frees what it took, counts calls so a test can prove a path allocates
 * nothing, and fails on demand (the k-th allocating call, or every one from the k-th on) so a test
 * can walk every allocation of an operation, as SQLite's and Lua's test allocators do. */
#include "check.h"

void *check_alloc_fn(void *user, void *ptr, size_t old_bytes, size_t new_bytes) {
    check_alloc *c = user;
    c->n_calls++;
    if (new_bytes == 0) {
        if (ptr) {
            c->n_live--;
            c->bytes_live -= old_bytes;
        }
        free(ptr);
        return NULL;
    }
    c->n_allocs++;
    if (c->fail_at && (c->n_allocs == c->fail_at || (c->persistent && c->n_allocs > c->fail_at))) return NULL;
    void *p = realloc(ptr, new_bytes);
    if (p) {
        if (!ptr) c->n_live++;
        c->bytes_live += new_bytes - old_bytes;
    }
    return p;
}
