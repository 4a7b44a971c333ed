/*
 * lora_cpu.c — the CPU backend's LoRA hook: runs cera_lora_batch_apply_part over the
 * engine's thread pool right after a projection's matmul (forward.c, proj_matmul).
 *
 * A batch of many rows is cut by rows (cera_lora_batch_apply_part); one of few rows, a
 * decode step, in two phases (the rank·rows dots of A·x, then the output columns of B·t),
 * so that every thread has work. Every output element is computed the same way in both
 * forms, so results depend neither on the thread count nor on the batch.
 */
#include "session/lora_cpu.h"

#include <stdint.h>

/* Multiply-adds below which one thread applies an adapter to a projection alone. */
#define CERA_LORA_CPU_SERIAL_WORK (1 << 19)

typedef struct lora_job {
    const cera_lora_batch *b;
    int layer;
    cera_proj proj;
    const float *x;
    size_t x_stride;
    float *y;
    size_t y_stride;
} lora_job;

static void lora_worker(void *arg, int ith, int nth) {
    const lora_job *j = arg;
    cera_lora_batch_apply_part(j->b, j->layer, j->proj, j->x, j->x_stride, j->y, j->y_stride, ith, nth);
}

static void phase_a_worker(void *arg, int ith, int nth) {
    const lora_job *j = arg;
    cera_lora_batch_phase_a(j->b, j->layer, j->proj, j->x, j->x_stride, ith, nth);
}

static void phase_b_worker(void *arg, int ith, int nth) {
    const lora_job *j = arg;
    cera_lora_batch_phase_b(j->b, j->layer, j->proj, j->y, j->y_stride, ith, nth);
}

void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride) {
    if (!b || !cera_lora_batch_targets(b, layer, proj)) return;
    /* Small work (a decode step's rank·(k+d) multiply-adds) is done by the calling thread:
     * waking the pool twice would cost more than the arithmetic. */
    int64_t work = 0;
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_pair *p = cera_lora_pair_get(b->groups[g].adapter, layer, proj);
        if (p) work += (int64_t)b->groups[g].n_rows * p->rank * (p->k + p->d);
    }
    if (work < CERA_LORA_CPU_SERIAL_WORK || cera_pool_size(pool) == 1) {
        cera_lora_batch_apply(b, layer, proj, x, x_stride, y, y_stride, 0, INT64_MAX);
        return;
    }
    lora_job j = {b, layer, proj, x, x_stride, y, y_stride};
    if (b->n_rows >= 2 * cera_pool_size(pool) || !cera_lora_batch_two_phase(b)) {
        cera_pool_run(pool, lora_worker, &j); /* enough rows: each thread its own rows */
    } else {
        /* few rows (decode): spread the A·x dots, then the output columns */
        cera_pool_run(pool, phase_a_worker, &j);
        cera_pool_run(pool, phase_b_worker, &j);
    }
}
