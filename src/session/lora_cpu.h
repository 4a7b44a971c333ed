/*
 * lora_cpu.h — the CPU backend's LoRA hook: a batch plan's adapters applied to a
 * projection's output (before bias, norms and rope, as llama.cpp), fused into the
 * projection's own matmul job (cera_matmul_ex's hook) so an adapter costs no extra
 * wake-up of the thread pool.
 *
 * forward.c's proj_matmul does
 *
 *   cera_lora_cpu_job lj;
 *   const cera_matmul_hook *h = cera_lora_cpu_hook(&lj, pool, plan, layer, proj, x, xs, y, ys);
 *   cera_matmul_ex(pool, w, ops, x, n_rows, y, ys, act, h);
 *   cera_lora_cpu_after(&lj);
 */
#ifndef CERA_SESSION_LORA_CPU_H
#define CERA_SESSION_LORA_CPU_H

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/threadpool.h"
#include "session/lora.h"

/* One projection's adapter work (the caller's stack; nothing is allocated). */
typedef struct cera_lora_cpu_job {
    cera_matmul_hook hook;
    const cera_lora_batch *b;
    const cera_cpu_type_ops *ops; /* the F32 kernels */
    int tr, tc;                   /* factor rows and activation rows per kernel call */
    int layer;
    cera_proj proj;
    const float *x;
    size_t x_stride;
    float *y;
    size_t y_stride;
    int64_t per_pre; /* A·x items per pre chunk */
    int a_rows;      /* A rows per A·x item (<= tr) */
    bool after;      /* cera_lora_cpu_after has the work (the portable kernels) */
    bool bt16;       /* B·t with cera_lora_bt16_avx512 */
} cera_lora_cpu_job;

/* Prepares y[r] += s_r · B(A·x[r]) for every adapter of every row of the plan b (NULL: no
 * adapters) on (layer, proj); x [n_rows, k] and y [n_rows, d], x_stride / y_stride floats
 * between rows. Returns the hook for the projection's cera_matmul_ex (which must compute
 * exactly y = x·Wᵀ over the same rows), or NULL when there is nothing to fuse. */
const cera_matmul_hook *cera_lora_cpu_hook(cera_lora_cpu_job *j, const cera_pool *pool,
                                           const cera_lora_batch *b, int layer, cera_proj proj,
                                           const float *x, size_t x_stride, float *y, size_t y_stride);

/* After the matmul: applies the adapters with the portable kernels when they could not be
 * fused (no A·x scratch: growing it failed), else nothing. */
void cera_lora_cpu_after(const cera_lora_cpu_job *j);

/* The same contribution added to an already computed y, over the pool (its own jobs: the
 * A·x chunks, then the output tiles): the fused path's arithmetic without a matmul, bit for
 * bit, for tests and benchmarks. */
void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride);

/* u[c * u_stride + i] = dot(b row i, t row c) for i < nr <= 16 and c < nc, rows of n
 * floats (b rows n apart, t rows t_stride apart), each rounded exactly as the AVX-512 F32
 * tile rounds it (lora_cpu_avx512.c; x86 only, callable only where the CPU has AVX-512). */
void cera_lora_bt16_avx512(int64_t n, float *u, size_t u_stride, const float *b, int nr, const float *t,
                           size_t t_stride, int nc);

#endif
