/* pool.c: the fixed thread pool (see pool.h). Workers spin briefly on the job generation before
 * sleeping on a condition variable: decode calls the pool hundreds of times per token, and a
 * sleep/wake pair per call would cost more than the work on small matrices. */
#include "core/pool.h"
#include "port.h"

#include <stdatomic.h>

#define SPIN_ITERATIONS 20000

struct oc_pool {
    const oc_allocator *alloc;
    int n_threads;
    int n_allocated;                /* n_threads at open, sizes the allocation */
    oc_port_thread *threads;        /* n_threads - 1 workers */
    oc_port_mutex mutex;
    oc_port_cond wake, done;
    atomic_uint generation;         /* bumped once per job */
    atomic_int n_busy;              /* workers still on the current job */
    atomic_llong next_task;
    int64_t n_tasks;
    oc_task_fn fn;
    void *ctx;
    atomic_int stop;
};

typedef struct { oc_pool *pool; int index; } worker_arg;

static void work(oc_pool *p, int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next_task, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, thread);
    }
}

static void *worker_main(void *arg) {
    oc_pool *p = ((worker_arg *)arg)->pool;
    int index = ((worker_arg *)arg)->index;
    unsigned seen = 0;
    for (;;) {
        unsigned g = 0;
        for (int i = 0; i < SPIN_ITERATIONS; i++) {
            g = atomic_load_explicit(&p->generation, memory_order_acquire);
            if (g != seen) break;
        }
        if (g == seen) {
            oc_port_mutex_lock(&p->mutex);
            while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen && !atomic_load(&p->stop))
                oc_port_cond_wait(&p->wake, &p->mutex);
            oc_port_mutex_unlock(&p->mutex);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        work(p, index);
        if (atomic_fetch_sub_explicit(&p->n_busy, 1, memory_order_acq_rel) == 1) {
            oc_port_mutex_lock(&p->mutex);
            oc_port_cond_broadcast(&p->done);
            oc_port_mutex_unlock(&p->mutex);
        }
    }
}

/* Worker arguments live right after the pool struct. */
static size_t pool_bytes(int n_threads) {
    return sizeof(oc_pool) + (size_t)n_threads * (sizeof(oc_port_thread) + sizeof(worker_arg));
}

size_t oc_pool_memory_bytes(int n_threads) {
    if (n_threads <= 0) n_threads = oc_port_n_cpus();
    return pool_bytes(n_threads) + OC_MEM_ALIGN;
}

oc_status oc_pool_open(oc_pool **out, int n_threads, const oc_allocator *alloc, oc_error *err) {
    *out = NULL;
    if (n_threads <= 0) n_threads = oc_port_n_cpus();
    if (n_threads > 1024) return oc_fail(err, OC_ERR_INVALID, "pool: %d threads is more than 1024", n_threads);
    oc_pool *p = oc_mem_calloc(alloc, pool_bytes(n_threads));
    if (!p) return oc_fail(err, OC_ERR_NOMEM, "pool: out of memory");
    p->alloc = alloc;
    p->n_threads = n_threads;
    p->n_allocated = n_threads;
    p->threads = (oc_port_thread *)(p + 1);
    worker_arg *args = (worker_arg *)(p->threads + n_threads);
    if (oc_port_mutex_init(&p->mutex) || oc_port_cond_init(&p->wake) || oc_port_cond_init(&p->done)) {
        oc_mem_free(alloc, p, pool_bytes(n_threads));
        return oc_fail(err, OC_ERR_NOMEM, "pool: cannot create synchronisation objects");
    }
    for (int i = 1; i < n_threads; i++) {
        args[i].pool = p;
        args[i].index = i;
        if (oc_port_thread_start(&p->threads[i - 1], worker_main, &args[i]) != 0) {
            p->n_threads = i;   /* close() joins the ones that started */
            oc_pool_close(p);
            return oc_fail(err, OC_ERR_NOMEM, "pool: cannot start thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return OC_OK;
}

void oc_pool_close(oc_pool *p) {
    if (!p) return;
    oc_port_mutex_lock(&p->mutex);
    atomic_store(&p->stop, 1);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    oc_port_cond_broadcast(&p->wake);
    oc_port_mutex_unlock(&p->mutex);
    for (int i = 1; i < p->n_threads; i++) oc_port_thread_join(&p->threads[i - 1]);
    oc_port_cond_destroy(&p->done);
    oc_port_cond_destroy(&p->wake);
    oc_port_mutex_destroy(&p->mutex);
    oc_mem_free(p->alloc, p, pool_bytes(p->n_allocated));
}

int oc_pool_n_threads(const oc_pool *p) { return p ? p->n_threads : 1; }

void oc_pool_run(oc_pool *p, int64_t n_tasks, oc_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next_task, 0, memory_order_relaxed);
    atomic_store_explicit(&p->n_busy, p->n_threads - 1, memory_order_relaxed);
    oc_port_mutex_lock(&p->mutex);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    oc_port_cond_broadcast(&p->wake);
    oc_port_mutex_unlock(&p->mutex);
    work(p, 0);
    for (int i = 0; i < SPIN_ITERATIONS && atomic_load_explicit(&p->n_busy, memory_order_acquire) > 0; i++) {
    }
    if (atomic_load_explicit(&p->n_busy, memory_order_acquire) > 0) {
        oc_port_mutex_lock(&p->mutex);
        while (atomic_load_explicit(&p->n_busy, memory_order_acquire) > 0) oc_port_cond_wait(&p->done, &p->mutex);
        oc_port_mutex_unlock(&p->mutex);
    }
}
