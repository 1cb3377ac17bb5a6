/* pool.h: a small fixed thread pool. One call runs n_tasks independent tasks; tasks are handed out
 * dynamically (an atomic counter) so uneven tasks balance, and the calling thread works too.
 * Determinism rule for every user: a task's result must depend only on its index, never on which
 * thread ran it or how many threads exist; then results are bitwise identical for any thread count.
 * oc_pool_run allocates nothing. */
#ifndef OC_POOL_H
#define OC_POOL_H

#include "core/core.h"

typedef struct oc_pool oc_pool;

/* task: 0..n_tasks-1; thread: 0..n_threads-1 (index for per-thread scratch). */
typedef void (*oc_task_fn)(void *ctx, int64_t task, int thread);

/* n_threads <= 0 selects the number of online CPUs. A pool of 1 thread starts no threads. */
oc_status oc_pool_open(oc_pool **out, int n_threads, const oc_allocator *alloc, oc_error *err);
/* What oc_pool_open(n_threads) takes from its allocator (0: every online CPU). */
size_t oc_pool_memory_bytes(int n_threads);
void oc_pool_close(oc_pool *pool);
int oc_pool_n_threads(const oc_pool *pool);
/* Runs fn for every task and returns when all are done. pool may be NULL: runs serially.
 * Not reentrant: one oc_pool_run at a time per pool. */
void oc_pool_run(oc_pool *pool, int64_t n_tasks, oc_task_fn fn, void *ctx);

#endif
