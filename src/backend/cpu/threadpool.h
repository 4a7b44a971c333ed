/*
 * threadpool.h — the CPU backend's persistent worker threads.
 *
 * Created once per engine. Every parallel step of a forward pass (a matmul, the
 * attention, ...) is one cera_pool_for: the work is cut into chunks that the caller's
 * thread and the workers claim one at a time from a shared counter, so a worker that
 * the OS has not scheduled yet simply finds no chunk left (on a busy machine the caller
 * does the work itself instead of waiting for it). Workers spin briefly after a job (the
 * next op usually follows within microseconds), then poll while yielding the core to other
 * threads, then sleep on a condition variable so an idle engine costs no CPU.
 */
#ifndef CERA_BACKEND_CPU_THREADPOOL_H
#define CERA_BACKEND_CPU_THREADPOOL_H

#include <stdint.h>

#include "cera.h"

typedef struct cera_pool cera_pool;

/* One chunk of a job. ith identifies the thread (0 = the caller, 1..n-1 the workers)
 * for per-thread scratch; it does not say which chunks a thread gets. */
typedef void (*cera_pool_chunk_fn)(void *arg, int64_t chunk, int ith);

/* n_threads <= 0: one per online core. */
cera_status cera_pool_new(int n_threads, cera_pool **out, cera_error *err);
void cera_pool_free(cera_pool *pool);

int cera_pool_size(const cera_pool *pool);

/* Runs fn for chunks 0 .. n_chunks-1, each exactly once, spread over the threads, and
 * returns when all are done. Not reentrant: one job at a time per pool. */
void cera_pool_for(cera_pool *pool, int64_t n_chunks, cera_pool_chunk_fn fn, void *arg);

/* A job cut into exactly cera_pool_size(pool) shares: fn(arg, share, nth) runs once for
 * every share 0..nth-1, on whichever thread claims it (a share index, not a thread:
 * scratch indexed by it is still private to the share). */
typedef void (*cera_pool_fn)(void *arg, int ith, int nth);
void cera_pool_run(cera_pool *pool, cera_pool_fn fn, void *arg);

#endif
