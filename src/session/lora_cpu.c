/*
 * lora_cpu.c — the CPU backend's LoRA hook: runs cera_lora_batch_apply_part over the
 * engine's thread pool right after a projection's matmul (forward.c, proj_matmul).
 *
 * The work is cut by cera_lora_batch_apply_part, which computes every output element
 * the same way whatever the split, so results do not depend on the thread count.
 */
#include "session/lora_cpu.h"

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

void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride) {
    if (!b || !cera_lora_batch_targets(b, layer, proj)) return;
    lora_job j = {b, layer, proj, x, x_stride, y, y_stride};
    cera_pool_run(pool, lora_worker, &j);
}
