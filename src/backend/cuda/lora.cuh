/*
 * lora.cuh — device helpers of the LoRA kernels (lora_cuda.h), shared by lora.cu and by
 * attention.cu's RoPE, which adds Q/K/V's B·t in a decode step: the dot of a B row with t,
 * a row's adapter sum from the plan's entries (prefill), and the decode form, where a block
 * first stages the (layer, projection)'s terms from the item table and its t in shared
 * memory.
 */
#ifndef CERA_BACKEND_CUDA_LORA_CUH
#define CERA_BACKEND_CUDA_LORA_CUH

#include <cuda_fp16.h>

#include "backend/cuda/lora_cuda.h"

/* dot(b[0..r), t[0..r)) in one thread. */
static __device__ __forceinline__ float thread_dot_h(const __half *b, const float *t, int r) {
    float s = 0.0f;
    if ((r & 7) == 0 && ((uintptr_t)b & 15) == 0) {
        for (int j = 0; j < r; j += 8) {
            const uint4 raw = *reinterpret_cast<const uint4 *>(b + j);
            const __half2 *hp = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float2 f = __half22float2(hp[q]);
                s += f.x * t[j + 2 * q] + f.y * t[j + 2 * q + 1];
            }
        }
    } else {
        for (int j = 0; j < r; j++) s += __half2float(b[j]) * t[j];
    }
    return s;
}

/* Row r's adapter sum for output i of projection proj (plan segment seg), from the plan's
 * entries (prefill with different adapters per row). */
static __device__ __forceinline__ float row_delta(const cu_lora_plan &p, int layer, int proj, int seg, int r,
                                                  int64_t i) {
    float acc = 0.0f;
    const int e1 = p.row_first[r + 1];
    for (int e = p.row_first[r]; e < e1; e++) {
        const cu_lora_pair *pr = &p.ent[e].tab[layer * CU_LORA_PROJ + proj];
        const int rank = pr->rank;
        if (rank == 0) continue;
        const float *t = p.t + ((int64_t)e * 3 + seg) * p.max_rank;
        acc += (p.ent[e].scale * pr->factor) *
               thread_dot_h(static_cast<const __half *>(pr->b) + i * rank, t, rank);
    }
    return acc;
}

/* One row's adapter terms for one projection, staged in shared memory by a whole block
 * before its threads compute outputs: each output then needs only its B row (independent
 * 16-byte loads), not a chain of plan lookups. */
#define LORA_STAGE_T 1024 /* floats of t a stage keeps in shared memory (more: read from global) */
struct lora_stage {
    int n; /* the row's adapters that target the projection */
    cu_lora_item it[CU_LORA_ROW_MAX];
    const float *t[CU_LORA_ROW_MAX]; /* A·x: in tbuf, or the plan's global t when tbuf is full */
    float tbuf[LORA_STAGE_T];
};

/* Decode (batch row 0): stages the terms of (layer, proj) from the host-made item table.
 * Every thread of the block calls it (it synchronizes the block). */
static __device__ void lora_stage_load(const cu_lora_plan &p, int layer, int proj, lora_stage *st) {
    const int idx = layer * CU_LORA_PROJ + proj, tid = threadIdx.x;
    if (tid < CU_LORA_ROW_MAX) {
        const int n = p.item_n[idx];
        if (tid < n) st->it[tid] = p.items[idx * CU_LORA_ROW_MAX + tid];
        if (tid == 0) st->n = n;
    }
    __syncthreads();
    int off = 0;
    for (int k = 0; k < st->n; k++) {
        const int r = st->it[k].rank;
        const float *tg = p.t + (int64_t)st->it[k].slot * p.max_rank;
        const bool fits = off + r <= LORA_STAGE_T;
        if (fits)
            for (int j = tid; j < r; j += blockDim.x) st->tbuf[off + j] = __ldcg(tg + j);
        if (tid == 0) st->t[k] = fits ? st->tbuf + off : tg;
        off += fits ? r : 0;
    }
    __syncthreads();
}

/* Output i's adapter sum for a staged projection: Σ_k s_k · B_k[i] · t_k. */
static __device__ __forceinline__ float lora_stage_delta(const lora_stage *st, int64_t i) {
    float acc = 0.0f;
    for (int k = 0; k < st->n; k++) {
        const int r = st->it[k].rank;
        acc += st->it[k].s * thread_dot_h(static_cast<const __half *>(st->it[k].b) + i * r, st->t[k], r);
    }
    return acc;
}

/* The sums of M outputs i0 + m·stride (m < M; those >= d are left 0) at once: for ranks that
 * are multiples of 8 every B load of the M outputs is issued before any is used, so a
 * thread waits for memory once per 8 ranks instead of once per output. */
template <int M>
static __device__ __forceinline__ void lora_stage_delta_m(const lora_stage *st, int64_t i0, int64_t stride,
                                                          int64_t d, float *out) {
#pragma unroll
    for (int m = 0; m < M; m++) out[m] = 0.0f;
    for (int k = 0; k < st->n; k++) {
        const int r = st->it[k].rank;
        const __half *b = static_cast<const __half *>(st->it[k].b);
        const float *t = st->t[k], s = st->it[k].s;
        if ((r & 7) == 0 && ((uintptr_t)b & 15) == 0) {
            float acc[M];
#pragma unroll
            for (int m = 0; m < M; m++) acc[m] = 0.0f;
            for (int j = 0; j < r; j += 8) {
                uint4 raw[M];
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const int64_t i = i0 + m * stride;
                    raw[m] = i < d ? *reinterpret_cast<const uint4 *>(b + i * r + j) : make_uint4(0, 0, 0, 0);
                }
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const __half2 *hp = reinterpret_cast<const __half2 *>(&raw[m]);
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const float2 f = __half22float2(hp[q]);
                        acc[m] += f.x * t[j + 2 * q] + f.y * t[j + 2 * q + 1];
                    }
                }
            }
#pragma unroll
            for (int m = 0; m < M; m++) out[m] += s * acc[m];
        } else {
#pragma unroll
            for (int m = 0; m < M; m++) {
                const int64_t i = i0 + m * stride;
                if (i < d) out[m] += s * thread_dot_h(b + i * r, t, r);
            }
        }
    }
}

#endif
