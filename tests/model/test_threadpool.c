/*
 * test_threadpool.c — the CPU backend's thread pool: every chunk of every job runs exactly
 * once, with a valid thread index, over many back-to-back jobs of random sizes (the
 * join/close protocol under churn); cera_pool_run gives every share exactly once; a pool
 * of one thread runs inline.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "backend/cpu/threadpool.h"
#include "testutil.h"

typedef struct job {
    _Atomic int *hits;
    _Atomic int bad_ith;
    int n_threads;
} job;

static void chunk(void *arg, int64_t c, int ith) {
    job *j = arg;
    for (volatile int k = 0; k < 500; k++) {
    } /* long enough for the workers to join */
    atomic_fetch_add(&j->hits[c], 1);
    if (ith < 0 || ith >= j->n_threads) atomic_fetch_add(&j->bad_ith, 1);
}

static void share(void *arg, int ith, int nth) {
    job *j = arg;
    atomic_fetch_add(&j->hits[ith], 1);
    if (nth != j->n_threads) atomic_fetch_add(&j->bad_ith, 1);
}

int main(void) {
    const int sizes[] = {1, 3, 4};
    test_rng rng = {12345};
    for (int si = 0; si < 3; si++) {
        cera_pool *pool = NULL;
        cera_error err;
        CHECK(cera_pool_new(sizes[si], &pool, &err) == CERA_OK, "pool of %d", sizes[si]);
        if (!pool) continue;
        CHECK(cera_pool_size(pool) == sizes[si], "size");
        _Atomic int hits[128];
        job j = {hits, 0, sizes[si]};
        int wrong = 0;
        for (int it = 0; it < 3000; it++) {
            const int n = 1 + (int)(test_rng_next(&rng) % 128);
            for (int i = 0; i < n; i++) atomic_init(&hits[i], 0);
            cera_pool_for(pool, n, chunk, &j);
            for (int i = 0; i < n; i++) wrong += atomic_load(&hits[i]) != 1;
        }
        CHECK(wrong == 0, "%d threads: %d chunks ran other than once", sizes[si], wrong);
        for (int i = 0; i < sizes[si]; i++) atomic_init(&hits[i], 0);
        cera_pool_run(pool, share, &j);
        for (int i = 0; i < sizes[si]; i++) wrong += atomic_load(&hits[i]) != 1;
        CHECK(wrong == 0, "%d threads: shares ran other than once", sizes[si]);
        CHECK(atomic_load(&j.bad_ith) == 0, "%d threads: bad thread index or share count", sizes[si]);
        cera_pool_free(pool);
    }
    return test_finish();
}
