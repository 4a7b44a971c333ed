/*
 * threadpool.h — the CPU backend's persistent worker threads.
 *
 * Created once per engine; every parallel step of a forward pass (a matmul, the
 * attention, ...) is one cera_pool_run: the caller's thread takes part as worker 0,
 * the others wake, run fn(arg, ith, nth) and meet at the end. Workers spin briefly
 * after a job (the next op usually follows within microseconds), then sleep on a
 * condition variable so an idle engine costs no CPU.
 */
#ifndef CERA_BACKEND_CPU_THREADPOOL_H
#define CERA_BACKEND_CPU_THREADPOOL_H

#include "cera.h"

typedef struct cera_pool cera_pool;

/* A job's body: worker ith of nth does its share of the work described by arg. */
typedef void (*cera_pool_fn)(void *arg, int ith, int nth);

/* n_threads <= 0: one per online core. */
cera_status cera_pool_new(int n_threads, cera_pool **out, cera_error *err);
void cera_pool_free(cera_pool *pool);

int cera_pool_size(const cera_pool *pool);

/* Runs fn on every worker (the caller is worker 0) and returns when all are done.
 * Not reentrant: one job at a time per pool. */
void cera_pool_run(cera_pool *pool, cera_pool_fn fn, void *arg);

#endif
