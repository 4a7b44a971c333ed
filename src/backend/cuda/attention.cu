/*
 * attention.cu — RoPE + KV-cache store, and attention over the F16 KV cache.
 *
 * cu_rope_store: one block per (token, head slot): the optional per-head RMS norm
 * (qwen3), the rotation (NORM or NEOX pairs, llama-3 frequency factors and YaRN through
 * the host-made tables), then Q to a f32 buffer and K/V into the cache at the token's slot.
 *
 * cu_attention (flash-decoding): one block per (KV head, split, token) takes a contiguous
 * chunk of the KV slots 0..pos and serves every query head of its group, so each K/V row
 * is read once per group. Tiles of 128 slots: a thread per slot computes the scores
 * against all the group's heads, the online softmax runs per head, then threads over
 * head dims accumulate p·V. Splits write (max, sum, unnormalized output) partials; the
 * last block of a head to finish (an atomic counter, reset for the next launch) merges
 * them, writes the output and quantizes it for the O projection. Q is rounded to F16
 * first, as llama.cpp's CPU flash attention does before its F16 dot products.
 */
#include <float.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/quant.cuh"

#define ATT_THREADS 128
#define ATT_TILE    128
#define ATT_GMAX    16 /* query heads per KV head */

/* Row `pos` of K (which = 0) or V (1) of token tok's sequence, in the kv's layer. */
static __device__ __forceinline__ __half *kv_row(const cu_kv &kv, int tok, int64_t pos, int which) {
    const int64_t b = kv.tables[kv.tok_table[tok] + pos / CU_KV_BLOCK];
    return static_cast<__half *>(kv.base) +
           (((b * kv.n_layer + kv.layer) * 2 + which) * CU_KV_BLOCK + pos % CU_KV_BLOCK) * (int64_t)kv.kv_dim;
}

__global__ void __launch_bounds__(64)
    k_rope_store(const float *q_in, const float *k_in, const float *v_in, int64_t in_stride,
                 const int32_t *pos, int n_head, int n_head_kv, int hd, const float *q_norm,
                 const float *k_norm, float eps, cu_rope rope, float *q_out, cu_kv kv) {
    const int tok = blockIdx.x, slot = blockIdx.y;
    const int kind = slot < n_head ? 0 : slot < n_head + n_head_kv ? 1 : 2;
    const int h = kind == 0 ? slot : kind == 1 ? slot - n_head : slot - n_head - n_head_kv;
    const float *src = (kind == 0 ? q_in : kind == 1 ? k_in : v_in) + tok * in_stride + (int64_t)h * hd;
    const int64_t p = pos[tok];
    __shared__ float buf[512];
    __shared__ float red[2];
    for (int d = threadIdx.x; d < hd; d += blockDim.x) buf[d] = src[d];
    __syncthreads();
    if (kind == 2) {
        __half *dst = kv_row(kv, tok, p, 1) + (int64_t)h * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = __float2half(buf[d]);
        return;
    }
    const float *nw = kind == 0 ? q_norm : k_norm;
    if (nw) {
        float s = 0.0f;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) s += buf[d] * buf[d];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
        __syncthreads();
        const float mean = (red[0] + (blockDim.x > 32 ? red[1] : 0.0f)) / hd;
        const float scale = 1.0f / sqrtf(mean + eps);
        __syncthreads();
        for (int d = threadIdx.x; d < hd; d += blockDim.x) buf[d] = (buf[d] * scale) * nw[d];
        __syncthreads();
    }
    if (rope.enabled) {
        const int half = rope.n_rot / 2;
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            const int a = rope.neox ? i : 2 * i, b = rope.neox ? i + half : 2 * i + 1;
            const float theta_extrap = (float)p * rope.inv_freq[i];
            const float theta_interp = rope.freq_scale * theta_extrap;
            const float ramp = rope.ramp[i];
            const float theta = theta_interp * (1.0f - ramp) + theta_extrap * ramp;
            const float c = cosf(theta) * rope.mscale, s = sinf(theta) * rope.mscale;
            const float x0 = buf[a], x1 = buf[b];
            buf[a] = x0 * c - x1 * s;
            buf[b] = x0 * s + x1 * c;
        }
        __syncthreads();
    }
    if (kind == 0) {
        float *dst = q_out + (int64_t)tok * n_head * hd + (int64_t)h * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = buf[d];
    } else {
        __half *dst = kv_row(kv, tok, p, 0) + (int64_t)h * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = __float2half(buf[d]);
    }
}

extern "C" cudaError_t cu_rope_store(cudaStream_t st, const float *q_in, const float *k_in, const float *v_in,
                                     int64_t in_stride, int n_tok, const int32_t *pos, int n_head,
                                     int n_head_kv, int hd, const float *q_norm, const float *k_norm,
                                     float eps, const cu_rope *rope, float *q_out, const cu_kv *kv) {
    if (hd > 512) return cudaErrorInvalidValue;
    const dim3 grid(n_tok, n_head + 2 * n_head_kv);
    k_rope_store<<<grid, 64, 0, st>>>(q_in, k_in, v_in, in_stride, pos, n_head, n_head_kv, hd, q_norm, k_norm,
                                      eps, *rope, q_out, *kv);
    return cudaGetLastError();
}

struct att_params {
    const float *q;
    const int32_t *pos;
    int n_head, n_head_kv, hd, G;
    cu_kv kv;
    float scale;
    int n_splits;
    cu_attn_scratch scr;
    cu_act out;
};

/* Shared memory: q [G][hd] | scores [G][ATT_TILE] | m, l, corr [G] | out/combine [max(G*hd, 128*G)]. */
__global__ void __launch_bounds__(ATT_THREADS) k_attention(const att_params p) {
    extern __shared__ float sm[];
    const int kvh = blockIdx.x, split = blockIdx.y, tok = blockIdx.z;
    const int G = p.G, hd = p.hd, tid = threadIdx.x;
    float *qs = sm;
    float *sc = qs + G * hd;
    float *mrow = sc + G * ATT_TILE;
    float *lrow = mrow + ATT_GMAX;
    float *crow = lrow + ATT_GMAX;
    float *obuf = crow + ATT_GMAX;
    __shared__ bool is_last;

    const int n_kv = p.pos[tok] + 1;
    const int chunk = (n_kv + p.n_splits - 1) / p.n_splits;
    const int start = split * chunk, end = min(n_kv, start + chunk);
    const int h0 = kvh * G;

    for (int i = tid; i < G * hd; i += ATT_THREADS)
        qs[i] = __half2float(__float2half(p.q[((int64_t)tok * p.n_head + h0) * hd + i]));
    if (tid < G) mrow[tid] = -FLT_MAX, lrow[tid] = 0.0f;

    // V accumulation mapping: groups of hd threads over slots (hd <= 128), or 2 dims a thread
    const int groups = hd <= ATT_THREADS ? ATT_THREADS / hd : 1;
    const int grp = hd <= ATT_THREADS ? tid / hd : 0;
    const int dim = hd <= ATT_THREADS ? tid % hd : tid;
    const bool vact = grp < groups;
    float acc[ATT_GMAX][2];
#pragma unroll
    for (int g = 0; g < ATT_GMAX; g++) acc[g][0] = acc[g][1] = 0.0f;
    __syncthreads();

    for (int t0 = start; t0 < end; t0 += ATT_TILE) {
        const int nt = min(ATT_TILE, end - t0);
        // scores: a thread per slot
        if (tid < nt) {
            const __half *kr = kv_row(p.kv, tok, t0 + tid, 0) + (int64_t)kvh * hd;
            float s[ATT_GMAX];
#pragma unroll
            for (int g = 0; g < ATT_GMAX; g++) s[g] = 0.0f;
            if ((hd & 7) == 0) {
                for (int d = 0; d < hd; d += 8) {
                    const int4 raw = __ldg(reinterpret_cast<const int4 *>(kr + d));
                    const __half2 *h2 = reinterpret_cast<const __half2 *>(&raw);
                    float kv[8];
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const float2 f = __half22float2(h2[j]);
                        kv[2 * j] = f.x, kv[2 * j + 1] = f.y;
                    }
#pragma unroll
                    for (int g = 0; g < ATT_GMAX; g++) {
                        if (g < G) {
                            const float *qg = qs + g * hd + d;
#pragma unroll
                            for (int j = 0; j < 8; j++) s[g] += qg[j] * kv[j];
                        }
                    }
                }
            } else {
                for (int d = 0; d < hd; d++) {
                    const float kv = __half2float(kr[d]);
#pragma unroll
                    for (int g = 0; g < ATT_GMAX; g++)
                        if (g < G) s[g] += qs[g * hd + d] * kv;
                }
            }
#pragma unroll
            for (int g = 0; g < ATT_GMAX; g++)
                if (g < G) sc[g * ATT_TILE + tid] = s[g] * p.scale;
        }
        __syncthreads();
        // online softmax per head: warp w takes heads w, w + 4, ...
        const int warp = tid / 32, lane = tid % 32;
        for (int g = warp; g < G; g += ATT_THREADS / 32) {
            float mx = -FLT_MAX;
            for (int t = lane; t < nt; t += 32) mx = fmaxf(mx, sc[g * ATT_TILE + t]);
            mx = cu_warp_max(mx);
            const float m_old = mrow[g], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int t = lane; t < nt; t += 32) {
                const float e = expf(sc[g * ATT_TILE + t] - m_new);
                sc[g * ATT_TILE + t] = e;
                sum += e;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                const float corr = expf(m_old - m_new);
                crow[g] = corr;
                lrow[g] = lrow[g] * corr + sum;
                mrow[g] = m_new;
            }
        }
        __syncthreads();
        if (vact) {
#pragma unroll
            for (int g = 0; g < ATT_GMAX; g++)
                if (g < G) acc[g][0] *= crow[g], acc[g][1] *= crow[g];
            for (int t = grp; t < nt; t += groups) {
                const __half *vr = kv_row(p.kv, tok, t0 + t, 1) + (int64_t)kvh * hd;
                const float v0 = __half2float(vr[dim]);
                const float v1 =
                    (hd > ATT_THREADS && dim + ATT_THREADS < hd) ? __half2float(vr[dim + ATT_THREADS]) : 0.0f;
#pragma unroll
                for (int g = 0; g < ATT_GMAX; g++) {
                    if (g < G) {
                        const float pg = sc[g * ATT_TILE + t];
                        acc[g][0] += pg * v0;
                        acc[g][1] += pg * v1;
                    }
                }
            }
        }
        __syncthreads();
    }

    // fold the slot groups: obuf[g * hd + d] = unnormalized output of this chunk
    for (int i = tid; i < G * hd; i += ATT_THREADS) obuf[i] = 0.0f;
    __syncthreads();
    for (int gi = 0; gi < groups; gi++) {
        if (vact && grp == gi) {
#pragma unroll
            for (int g = 0; g < ATT_GMAX; g++) {
                if (g < G) {
                    obuf[g * hd + dim] += acc[g][0];
                    if (hd > ATT_THREADS && dim + ATT_THREADS < hd)
                        obuf[g * hd + dim + ATT_THREADS] += acc[g][1];
                }
            }
        }
        __syncthreads();
    }

    float *out_row = p.out.f + (int64_t)tok * p.out.k_pad + (int64_t)h0 * hd;
    if (p.n_splits > 1) {
        const int64_t base = ((int64_t)tok * p.n_head + h0) * p.n_splits;
        for (int i = tid; i < G * hd; i += ATT_THREADS) {
            const int g = i / hd, d = i % hd;
            p.scr.part_acc[(base + (int64_t)g * p.n_splits + split) * hd + d] = obuf[i];
        }
        if (tid < G) {
            p.scr.part_ml[(base + (int64_t)tid * p.n_splits + split) * 2 + 0] =
                start < end ? mrow[tid] : -FLT_MAX;
            p.scr.part_ml[(base + (int64_t)tid * p.n_splits + split) * 2 + 1] =
                start < end ? lrow[tid] : 0.0f;
        }
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            int32_t *cnt = p.scr.counters + (int64_t)tok * p.n_head_kv + kvh;
            const int done = atomicAdd(cnt, 1);
            is_last = done == p.n_splits - 1;
            if (is_last) *cnt = 0; // ready for the next launch (graph replays)
        }
        __syncthreads();
        if (!is_last) return;
        __threadfence();
        // merge the splits of every head of the group
        for (int i = tid; i < G * hd; i += ATT_THREADS) {
            const int g = i / hd, d = i % hd;
            const float *ml = p.scr.part_ml + (base + (int64_t)g * p.n_splits) * 2;
            float M = -FLT_MAX;
            for (int s = 0; s < p.n_splits; s++)
                if (__ldcg(ml + 2 * s + 1) > 0.0f) M = fmaxf(M, __ldcg(ml + 2 * s));
            float L = 0.0f, o = 0.0f;
            for (int s = 0; s < p.n_splits; s++) {
                const float l = __ldcg(ml + 2 * s + 1);
                if (l <= 0.0f) continue;
                const float w = expf(__ldcg(ml + 2 * s) - M);
                L += l * w;
                o += __ldcg(p.scr.part_acc + (base + (int64_t)g * p.n_splits + s) * hd + d) * w;
            }
            obuf[i] = o / L;
        }
    } else {
        for (int i = tid; i < G * hd; i += ATT_THREADS) obuf[i] = obuf[i] / lrow[i / hd];
    }
    __syncthreads();
    for (int i = tid; i < G * hd; i += ATT_THREADS) out_row[i] = obuf[i];
    if (p.out.q && (hd % 32) == 0) {
        // the group's outputs are whole quant blocks of the O projection's input
        const int warp = tid / 32, lane = tid % 32;
        const int64_t nblk = p.out.k_pad / 32, blk0 = (int64_t)h0 * hd / 32;
        for (int b = warp; b < G * hd / 32; b += ATT_THREADS / 32)
            cu_quant_block32(obuf[b * 32 + lane], p.out.q + (int64_t)tok * p.out.k_pad, p.out.d + tok * nblk,
                             p.out.s + tok * nblk, blk0 + b, lane);
    }
}

extern "C" cudaError_t cu_attention(cudaStream_t st, const float *q, int n_tok, const int32_t *pos,
                                    int n_head, int n_head_kv, int hd, const cu_kv *kv, float scale,
                                    int n_splits, const cu_attn_scratch *scr, const cu_act *out) {
    const int G = n_head / n_head_kv;
    if (G > ATT_GMAX || G * n_head_kv != n_head || hd > 2 * ATT_THREADS || n_splits < 1 ||
        n_splits > scr->max_splits)
        return cudaErrorInvalidValue;
    att_params p;
    p.q = q;
    p.pos = pos;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.hd = hd;
    p.G = G;
    p.kv = *kv;
    p.scale = scale;
    p.n_splits = n_splits;
    p.scr = *scr;
    p.out = *out;
    const size_t smem = sizeof(float) * ((size_t)G * hd * 2 + (size_t)G * ATT_TILE + 3 * ATT_GMAX);
    if (smem > 48 * 1024) return cudaErrorInvalidValue;
    const dim3 grid(n_head_kv, n_splits, n_tok);
    k_attention<<<grid, ATT_THREADS, smem, st>>>(p);
    return cudaGetLastError();
}
