/*
 * threadpool.c — persistent workers for the CPU backend (see threadpool.h).
 *
 * A job is published by bumping a generation counter; workers watch it, spinning a
 * short while and then sleeping on a condition variable. Completion is a counter the
 * caller waits on (spinning, then yielding: the jobs are short).
 */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/error.h"

#define SPIN_ITERS 20000

typedef struct worker {
    cera_pool *pool;
    int ith;
    pthread_t thread;
} worker;

struct cera_pool {
    int n_threads;
    worker *workers; /* [n_threads - 1]: the caller is worker 0 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint generation;
    atomic_int n_done;
    atomic_bool stop;
    cera_pool_fn fn;
    void *arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void *worker_main(void *p) {
    worker *w = p;
    cera_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        for (int i = 0; gen == seen && i < SPIN_ITERS && !atomic_load(&pool->stop); i++) {
            cpu_relax();
            gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&pool->mu);
            while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_acq_rel);
    }
}

cera_status cera_pool_new(int n_threads, cera_pool **out, cera_error *err) {
    *out = NULL;
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 512) return cera_fail(err, CERA_ERR_INVALID_ARG, "n_threads %d is too many", n_threads);
    cera_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return cera_fail(err, CERA_ERR_NO_MEMORY, "thread pool");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    atomic_init(&pool->generation, 0);
    atomic_init(&pool->n_done, 0);
    atomic_init(&pool->stop, false);
    if (n_threads > 1) {
        pool->workers = calloc((size_t)n_threads - 1, sizeof *pool->workers);
        if (!pool->workers) {
            cera_pool_free(pool);
            return cera_fail(err, CERA_ERR_NO_MEMORY, "thread pool");
        }
        for (int i = 1; i < n_threads; i++) {
            worker *w = &pool->workers[i - 1];
            w->pool = pool;
            w->ith = i;
            if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
                pool->n_threads = i; /* only the started ones are joined */
                cera_pool_free(pool);
                return cera_fail(err, CERA_ERR_NO_MEMORY, "cannot start CPU worker thread %d", i);
            }
        }
    }
    *out = pool;
    return CERA_OK;
}

void cera_pool_free(cera_pool *pool) {
    if (!pool) return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    if (pool->workers)
        for (int i = 1; i < pool->n_threads; i++) pthread_join(pool->workers[i - 1].thread, NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->workers);
    free(pool);
}

int cera_pool_size(const cera_pool *pool) { return pool->n_threads; }

void cera_pool_run(cera_pool *pool, cera_pool_fn fn, void *arg) {
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    fn(arg, 0, pool->n_threads);
    const int want = pool->n_threads - 1;
    for (int i = 0; atomic_load_explicit(&pool->n_done, memory_order_acquire) < want; i++) {
        if (i < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}
