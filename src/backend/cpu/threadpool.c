/*
 * threadpool.c — persistent workers for the CPU backend (see threadpool.h).
 *
 * One atomic word says which job is current and who is in it: its generation, whether
 * it is still open to joiners, and how many workers are inside. A worker joins by a
 * compare-and-swap on that word (only while the job is open), claims chunks from the
 * job's counter, and leaves by decrementing. The caller, once no chunk is left, closes
 * the job and waits only for the workers inside; late workers see it closed and go back
 * to waiting. The job's fields are rewritten only when it is closed and empty.
 */
#include "backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/cpus.h"
#include "core/error.h"

/* A waiting thread first spins with the CPU's pause hint for PAUSE_ITERS rounds (the next
 * job of a forward pass usually comes within microseconds), then keeps polling with
 * sched_yield until SPIN_ITERS rounds in all, then (workers only) sleeps. Yielding matters on
 * a busy machine: a thread that only spins burns its share of the core (the OS then preempts
 * it, often while it holds a chunk the caller must wait for) and can starve the thread that
 * is doing the work on the same core; measured on the shared 2-core machine, SmolLM2 decode
 * on 2 threads went from 42 to 110 tokens/s (1 thread: 65-75). With nothing else runnable,
 * sched_yield returns at once, so on an idle machine a job is still seen within a system call. */
#define PAUSE_ITERS 256
#define SPIN_ITERS  20000

/* state word: [generation:31][open:1][active:32] */
#define ST_ACTIVE_MASK 0xffffffffull
#define ST_OPEN        (1ull << 32)
#define ST_GEN_SHIFT   33

typedef struct worker {
    cera_pool *pool;
    int ith;
    pthread_t thread;
} worker;

struct cera_pool {
    int n_threads;
    worker *workers; /* [n_threads - 1]: the caller is thread 0 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t state;
    atomic_bool stop;
    /* the current job */
    cera_pool_chunk_fn fn;
    void *arg;
    int64_t n_chunks;
    _Atomic int64_t next;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint64_t gen_of(uint64_t s) { return s >> ST_GEN_SHIFT; }

static void run_chunks(cera_pool *pool, int ith) {
    for (;;) {
        const int64_t c = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (c >= pool->n_chunks) return;
        pool->fn(pool->arg, c, ith);
    }
}

static void *worker_main(void *p) {
    worker *w = p;
    cera_pool *pool = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t s = atomic_load_explicit(&pool->state, memory_order_acquire);
        for (int i = 0; gen_of(s) == seen && i < SPIN_ITERS && !atomic_load(&pool->stop); i++) {
            if (i < PAUSE_ITERS)
                cpu_relax();
            else
                sched_yield();
            s = atomic_load_explicit(&pool->state, memory_order_acquire);
        }
        if (gen_of(s) == seen) {
            pthread_mutex_lock(&pool->mu);
            while (gen_of(s = atomic_load(&pool->state)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = gen_of(s);
        /* join while the job is open; a closed job is finished without us */
        bool joined = false;
        while ((s & ST_OPEN) && gen_of(s) == seen) {
            if (atomic_compare_exchange_weak_explicit(&pool->state, &s, s + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                joined = true;
                break;
            }
        }
        if (!joined) continue;
        run_chunks(pool, w->ith);
        atomic_fetch_sub_explicit(&pool->state, 1, memory_order_release);
    }
}

cera_status cera_pool_new(int n_threads, cera_pool **out, cera_error *err) {
    *out = NULL;
    if (n_threads <= 0) {
        n_threads = cera_cpu_count();
    }
    if (n_threads > 512) return cera_fail(err, CERA_ERR_INVALID_ARG, "n_threads %d is too many", n_threads);
    cera_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return cera_fail(err, CERA_ERR_NO_MEMORY, "thread pool");
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    atomic_init(&pool->state, 0);
    atomic_init(&pool->stop, false);
    atomic_init(&pool->next, 0);
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

void cera_pool_for(cera_pool *pool, int64_t n_chunks, cera_pool_chunk_fn fn, void *arg) {
    if (n_chunks <= 0) return;
    if (pool->n_threads == 1 || n_chunks == 1) {
        for (int64_t c = 0; c < n_chunks; c++) fn(arg, c, 0);
        return;
    }
    /* the previous job is closed and empty: its fields are ours to rewrite */
    pool->fn = fn;
    pool->arg = arg;
    pool->n_chunks = n_chunks;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    const uint64_t gen = gen_of(atomic_load_explicit(&pool->state, memory_order_relaxed)) + 1;
    pthread_mutex_lock(&pool->mu);
    atomic_store_explicit(&pool->state, (gen << ST_GEN_SHIFT) | ST_OPEN, memory_order_release);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);

    run_chunks(pool, 0);

    /* close, then wait for the workers still inside */
    atomic_fetch_and_explicit(&pool->state, ~ST_OPEN, memory_order_acq_rel);
    for (int i = 0; atomic_load_explicit(&pool->state, memory_order_acquire) & ST_ACTIVE_MASK; i++) {
        if (i < PAUSE_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}

typedef struct share_job {
    cera_pool_fn fn;
    void *arg;
    int nth;
} share_job;

static void run_share(void *arg, int64_t share, int ith) {
    const share_job *j = arg;
    j->fn(j->arg, (int)share, j->nth);
}

void cera_pool_run(cera_pool *pool, cera_pool_fn fn, void *arg) {
    share_job j = {fn, arg, pool->n_threads};
    cera_pool_for(pool, pool->n_threads, run_share, &j);
}
