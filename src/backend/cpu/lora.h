/*
 * lora.h — the CPU backend's LoRA hook: a batch plan's adapters applied to a
 * projection's output (before bias, norms and rope, as llama.cpp), fused into the
 * projection's own matmul job (cera_matmul_ex's hook) so an adapter costs no extra
 * wake-up of the thread pool.
 *
 * forward.c's proj_matmul does
 *
 *   cera_lora_cpu_job lj;
 *   const cera_matmul_hook *h = cera_lora_cpu_hook(&lj, pool, plan, layer, proj, x, xs, y, ys);
 *   cera_matmul_ex(pool, w, pk, ops, x, n_rows, y, ys, act, h);
 *   cera_lora_cpu_after(&lj);
 */
#ifndef CERA_BACKEND_CPU_LORA_H
#define CERA_BACKEND_CPU_LORA_H

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/threadpool.h"
#include "lora/lora.h"

/* The forms (cera_lora_cpu_set_fusion's modes; every one gives the same bits):
 *   0 after the matmul: two pool jobs of its own after each projection's matmul job, A·x
 *     and then B·t over long contiguous runs of B;
 *   1 fused, B·t on each tile: A·x as the matmul job's first chunks, y += s·B·t on each
 *     output tile as it finishes (no wait but for A·x; B read 32 rows at a time between
 *     weight tiles);
 *   2 fused, B·t post: A·x first, B·t over long runs of B in the job's last chunks, which
 *     wait for the tiles (the threads are in the job already: no wake-up).
 * Fusing saves the two pool synchronisations per projection that the adapter cost at 16
 * threads (form 0 below). Reading B in 32-row pieces between weight
 * tiles streams it about half as fast as long runs (one thread: 2.7 ms vs 1.6 ms per token
 * for the 24 MB of B of the 1B shape). Measured on the loaded 2-core machine, 1B Q4_0,
 * decode cost with 1 thread: form 0 +10 %, 1 +19 %, 2 +4 %; 2 threads (noisy): 0 +8..34 %,
 * 1 +23..40 %, 2 +7..24 %. On the H200 host's Xeon with 16 threads (tinyllama-1.1b Q4_0,
 * two runs): form 0 +24.1 / +22.8 %, 1 +7.0 / +6.0 %, 2 +9.9 / +11.9 %; there the tiles are
 * short and many threads share B's reads, while the post chunks wait for the slowest tile.
 * Default: form 1 from CERA_LORA_CPU_FUSE_TILE_THREADS threads, form 2 below; lora_bench
 * measures all three. */
#define CERA_LORA_CPU_FUSE_TILE_THREADS 8

/* The form used with n_threads threads when none is set (the rule above). */
int cera_lora_cpu_default_form(int n_threads);

enum { CERA_LORA_AFTER_NOTHING, CERA_LORA_AFTER_SWEEP, CERA_LORA_AFTER_PORTABLE };

/* One projection's adapter work (the caller's stack; nothing is allocated). */
typedef struct cera_lora_cpu_job {
    cera_matmul_hook hook;
    cera_pool *pool;
    const cera_lora_batch *b;
    const cera_cpu_type_ops *ops; /* the F32 kernels */
    int tr, tc;                   /* factor rows and activation rows per kernel call */
    int layer;
    cera_proj proj;
    const float *x;
    size_t x_stride;
    float *y;
    size_t y_stride;
    int64_t d;       /* output columns */
    int64_t cols;    /* output columns per B·t run (unfused and post forms) */
    int64_t per_pre; /* A·x items per pre chunk */
    int a_rows;      /* A rows per A·x item (<= tr) */
    int after;       /* CERA_LORA_AFTER_*: what cera_lora_cpu_after does */
    bool bt16;       /* B·t with cera_lora_bt16_avx512 */
} cera_lora_cpu_job;

/* Prepares y[r] += s_r · B(A·x[r]) for every adapter of every row of the plan b (NULL: no
 * adapters) on (layer, proj); x [n_rows, k] and y [n_rows, d], x_stride / y_stride floats
 * between rows. Returns the hook for the projection's cera_matmul_ex (which must compute
 * exactly y = x·Wᵀ over the same rows), or NULL when there is nothing to fuse. */
const cera_matmul_hook *cera_lora_cpu_hook(cera_lora_cpu_job *j, cera_pool *pool, const cera_lora_batch *b,
                                           int layer, cera_proj proj, const float *x, size_t x_stride,
                                           float *y, size_t y_stride);

/* After the matmul: the adapters' work when it was not fused (form 0 set, or no A·x
 * scratch: growing it failed, then with the portable kernels), else nothing. */
void cera_lora_cpu_after(cera_lora_cpu_job *j);

/* The form: -1 the default (cera_lora_cpu_default_form), else 0, 1 or 2 (above).
 * Process-wide, for benchmarks and tests; results are the same bits either way. */
void cera_lora_cpu_set_fusion(int mode);

/* The same contribution added to an already computed y, over the pool (the unfused form:
 * its own jobs, the A·x chunks, then output column ranges), bit for bit as fused. */
void cera_lora_cpu_apply(cera_pool *pool, const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                         size_t x_stride, float *y, size_t y_stride);

/* u[c * u_stride + i] = dot(b row i, t row c) for i < nr <= 16 and c < nc, rows of n
 * floats (b rows n apart, t rows t_stride apart), each rounded exactly as the AVX-512 F32
 * tile rounds it (backend/cpu/x86/lora_avx512.c: x86-64 builds only, callable only where
 * the CPU has AVX-512). */
void cera_lora_bt16_avx512(int64_t n, float *u, size_t u_stride, const float *b, int nr, const float *t,
                           size_t t_stride, int nc);

#endif
