/*
 * lora_cpu.c — the CPU backend's LoRA hook: applies a batch plan over the engine's thread
 * pool right after a projection's matmul (forward.c, proj_matmul).
 *
 * The work is done in two phases over the pool (the rank·rows dots of A·x, then the
 * output columns of B·t), so that every thread has work even for one row and every factor
 * row is read from memory about once; tiny work (stories260K-sized) stays on the calling
 * thread. Every output element is computed the same way in all forms, so results depend
 * neither on the thread count nor on the batch.
 */
#include "session/lora_cpu.h"

#include <stdint.h>

/* Multiply-adds below which one thread applies an adapter to a projection alone. */
#define CERA_LORA_CPU_SERIAL_WORK (1 << 15)

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
    /* Tiny work is done by the calling thread: waking the pool twice would cost more. */
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
    if (cera_lora_batch_two_phase(b)) {
        /* every factor row read about once overall: the A·x dots, then the B·t columns */
        cera_pool_run(pool, phase_a_worker, &j);
        cera_pool_run(pool, phase_b_worker, &j);
    } else {
        cera_pool_run(pool, lora_worker, &j); /* no scratch: each thread its own rows */
    }
}
