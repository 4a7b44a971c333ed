/*
 * lora_cpu.h — the LoRA hook the CPU backend calls after each projection's matmul
 * (on the projection's output, before bias, norms and rope, as llama.cpp).
 */
#ifndef CERA_SESSION_LORA_CPU_H
#define CERA_SESSION_LORA_CPU_H

#include "backend/cpu/threadpool.h"
#include "session/lora.h"

/* y[r] += s_r · B(A·x[r]) for every adapter of every row of the batch plan b (NULL: no
 * adapters), over the pool. x [n_rows, k] and y [n_rows, d], x_stride / y_stride floats
 * between rows. */
void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride);

#endif
