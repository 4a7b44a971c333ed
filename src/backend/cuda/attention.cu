/*
 * attention.cu — RoPE + KV-cache store, and attention over the F16 KV cache.
 *
 * cu_rope_store: one block per (token, head slot): the optional per-head RMS norm
 * (qwen3), the rotation (NORM or NEOX pairs, llama-3 frequency factors and YaRN through
 * the host-made tables), then Q to a f32 buffer and K/V into the cache at the token's slot.
 *
 * cu_attention (flash-decoding): one block per (KV head, split, token) takes a contiguous
 * chunk of the KV slots 0..pos (at most one split per 64-slot tile is used: a short context
 * is a single block, with no partials to merge) and serves every query head of its group, so each K/V row
 * is read once per group. Tiles of 64 slots: the block stages the tile's K and V rows in
 * shared memory (all loads independent and coalesced: the cache is read at bandwidth, not
 * at latency), a thread per (slot, head) computes a score, the online softmax runs per
 * head, then threads over head dims accumulate p·V. Splits write (max, sum, unnormalized output) partials;
 * the last block of a head to finish (an atomic counter, reset for the next launch) merges them, writes the
 * output and quantizes it for the O projection. Q is rounded to F16 first, as llama.cpp's CPU flash attention
 * does before its F16 dot products.
 */
#include <float.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lora.cuh"
#include "backend/cuda/quant.cuh"

#define ATT_THREADS 128
#define ATT_TILE    64

/* Row `pos` of K (which = 0) or V (1) of token tok's sequence, in the kv's layer. */
static __device__ __forceinline__ __half *kv_row(const cu_kv &kv, int tok, int64_t pos, int which) {
    const int64_t b = kv.tables[kv.tok_table[tok] + pos / CU_KV_BLOCK];
    return static_cast<__half *>(kv.base) +
           (((b * kv.n_layer + kv.layer) * 2 + which) * CU_KV_BLOCK + pos % CU_KV_BLOCK) * (int64_t)kv.kv_dim;
}

template <bool LORA>
__global__ void __launch_bounds__(64)
    k_rope_store(const float *q_in, const float *k_in, const float *v_in, int64_t in_stride,
                 const int32_t *pos, int n_head, int n_head_kv, int hd, const float *q_norm,
                 const float *k_norm, float eps, cu_rope rope, float *q_out, cu_kv kv, cu_lora_plan lp,
                 int layer) {
    cu_pdl_enter();
    const int tok = blockIdx.x, slot = blockIdx.y;
    const int kind = slot < n_head ? 0 : slot < n_head + n_head_kv ? 1 : 2;
    const int h = kind == 0 ? slot : kind == 1 ? slot - n_head : slot - n_head - n_head_kv;
    const float *src = (kind == 0 ? q_in : kind == 1 ? k_in : v_in) + tok * in_stride + (int64_t)h * hd;
    const int64_t p = pos[tok];
    __shared__ float buf[512];
    __shared__ float red[2];
    __shared__ lora_stage st;
    if (LORA) lora_stage_load(lp, layer, kind, &st); // Q, K, V: projections 0..2 (decode: one token)
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float v = src[d];
        if (LORA) v += lora_stage_delta(&st, (int64_t)h * hd + d);
        buf[d] = v;
    }
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
    const cu_lora_plan none = {};
    return cu_launch(k_rope_store<false>, grid, 64, 0, st, q_in, k_in, v_in, in_stride, pos, n_head,
                     n_head_kv, hd, q_norm, k_norm, eps, *rope, q_out, *kv, none, 0);
}

extern "C" cudaError_t cu_rope_store_lora(cudaStream_t st, const float *q_in, const float *k_in,
                                          const float *v_in, const int32_t *pos, int n_head, int n_head_kv,
                                          int hd, const float *q_norm, const float *k_norm, float eps,
                                          const cu_rope *rope, float *q_out, const cu_kv *kv,
                                          const cu_lora_plan *p, int layer) {
    if (hd > 512) return cudaErrorInvalidValue;
    const dim3 grid(1, n_head + 2 * n_head_kv);
    return cu_launch(k_rope_store<true>, grid, 64, 0, st, q_in, k_in, v_in, (int64_t)0, pos, n_head,
                     n_head_kv, hd, q_norm, k_norm, eps, *rope, q_out, *kv, *p, layer);
}

struct att_params {
    const float *q;
    const int32_t *pos;
    int n_tok, n_head, n_head_kv, hd, G, QT;
    cu_kv kv;
    float scale;
    int n_splits;
    cu_attn_scratch scr;
    cu_act out;
};

/* Rows: QT query tokens x G heads (R <= ATT_RMAX). Shared memory: K tile [ATT_TILE][hd + 8]
 * f16 | V tile (same) | q [R][hd] f32 | scores [R][ATT_TILE] | m, l, corr [ATT_RMAX] |
 * out [R * hd] | row offsets [ATT_TILE]. */
#define ATT_RMAX 16
static size_t att_smem(int R, int hd) {
    return sizeof(float) * ((size_t)R * hd * 2 + (size_t)R * ATT_TILE + 3 * ATT_RMAX) +
           2 * sizeof(__half) * ATT_TILE * (size_t)(hd + 8) + sizeof(int64_t) * ATT_TILE;
}

__global__ void __launch_bounds__(ATT_THREADS) k_attention(const att_params p) {
    cu_pdl_enter();
    extern __shared__ __align__(16) uint8_t smem[];
    const int kvh = blockIdx.x, split = blockIdx.y, tok0 = blockIdx.z * p.QT;
    const int G = p.G, hd = p.hd, tid = threadIdx.x, hs = hd + 8; // K/V rows padded: no bank conflicts
    const int QT = min(p.QT, p.n_tok - tok0), R = QT * G;
    __half *ks = reinterpret_cast<__half *>(smem);
    __half *vs = ks + ATT_TILE * hs;
    float *qs = reinterpret_cast<float *>(vs + ATT_TILE * hs);
    float *sc = qs + p.QT * G * hd;
    float *mrow = sc + p.QT * G * ATT_TILE;
    float *lrow = mrow + ATT_RMAX;
    float *crow = lrow + ATT_RMAX;
    float *obuf = crow + ATT_RMAX;
    int64_t *rowoff = reinterpret_cast<int64_t *>(obuf + p.QT * G * hd);
    __shared__ bool is_last;

    // the block's slots: up to the furthest of its tokens; each row masks past its own
    int n_kv = 0;
    for (int qi = 0; qi < QT; qi++) n_kv = max(n_kv, p.pos[tok0 + qi] + 1);
    // splits in use: no more than one per tile of slots, so a short context is one block
    // that normalizes its own output (no partials, no merge) instead of n_splits slivers
    const int ns = min(p.n_splits, (n_kv + ATT_TILE - 1) / ATT_TILE);
    if (split >= ns) return; // the whole block
    const int chunk = (n_kv + ns - 1) / ns;
    const int start = split * chunk, end = min(n_kv, start + chunk);
    const int h0 = kvh * G, CH = hd / 8;
    const int64_t vskip = (int64_t)CU_KV_BLOCK * p.kv.kv_dim; // V follows K in a block's layer
    const __half *kvbase = static_cast<const __half *>(p.kv.base);
    const int32_t *table = p.kv.tables + p.kv.tok_table[tok0]; // the host groups one sequence's tokens

    for (int i = tid; i < R * hd; i += ATT_THREADS) {
        const int r = i / hd, d = i % hd;
        qs[i] = __half2float(__float2half(p.q[((int64_t)(tok0 + r / G) * p.n_head + h0 + r % G) * hd + d]));
    }
    if (tid < R) mrow[tid] = -FLT_MAX, lrow[tid] = 0.0f;

    // V accumulation mapping: groups of hd threads over slots (hd <= 128), or 2 dims a thread
    const int groups = hd <= ATT_THREADS ? ATT_THREADS / hd : 1;
    const int grp = hd <= ATT_THREADS ? tid / hd : 0;
    const int dim = hd <= ATT_THREADS ? tid % hd : tid;
    const bool vact = grp < groups;
    float acc[ATT_RMAX][2];
#pragma unroll
    for (int r = 0; r < ATT_RMAX; r++) acc[r][0] = acc[r][1] = 0.0f;

    for (int t0 = start; t0 < end; t0 += ATT_TILE) {
        const int nt = min(ATT_TILE, end - t0);
        if (tid < nt) {
            const int64_t pos = t0 + tid, b = table[pos / CU_KV_BLOCK];
            rowoff[tid] =
                (((b * p.kv.n_layer + p.kv.layer) * 2) * CU_KV_BLOCK + pos % CU_KV_BLOCK) * p.kv.kv_dim +
                (int64_t)kvh * hd;
        }
        __syncthreads();
        // stage the tile's K and V rows: every 16-byte load independent, coalesced per row
#pragma unroll 4
        for (int i = tid; i < nt * CH; i += ATT_THREADS) {
            const int t = i / CH, c = i % CH;
            const __half *src = kvbase + rowoff[t] + c * 8;
            *reinterpret_cast<int4 *>(ks + t * hs + c * 8) = __ldg(reinterpret_cast<const int4 *>(src));
            *reinterpret_cast<int4 *>(vs + t * hs + c * 8) =
                __ldg(reinterpret_cast<const int4 *>(src + vskip));
        }
        __syncthreads();
        // scores: consecutive threads take consecutive slots of one row; causal mask per token
        for (int i = tid; i < nt * R; i += ATT_THREADS) {
            const int r = i / nt, t = i % nt;
            float s = -INFINITY;
            if (t0 + t <= p.pos[tok0 + r / G]) {
                const float *qg = qs + r * hd;
                const __half *kr = ks + t * hs;
                s = 0.0f;
                for (int d = 0; d < hd; d += 8) {
                    const int4 raw = *reinterpret_cast<const int4 *>(kr + d);
                    const __half2 *h2 = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        const float2 f = __half22float2(h2[j]);
                        s += qg[d + 2 * j] * f.x + qg[d + 2 * j + 1] * f.y;
                    }
                }
                s *= p.scale;
            }
            sc[r * ATT_TILE + t] = s;
        }
        __syncthreads();
        // online softmax per row: warp w takes rows w, w + 4, ...
        const int warp = tid / 32, lane = tid % 32;
        for (int r = warp; r < R; r += ATT_THREADS / 32) {
            float mx = -FLT_MAX;
            for (int t = lane; t < nt; t += 32) mx = fmaxf(mx, sc[r * ATT_TILE + t]);
            mx = cu_warp_max(mx);
            const float m_old = mrow[r], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int t = lane; t < nt; t += 32) {
                const float e = expf(sc[r * ATT_TILE + t] - m_new);
                sc[r * ATT_TILE + t] = e;
                sum += e;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            __syncwarp();
            if (lane == 0) {
                const float corr = expf(m_old - m_new);
                crow[r] = corr;
                lrow[r] = lrow[r] * corr + sum;
                mrow[r] = m_new;
            }
        }
        __syncthreads();
        if (vact) {
#pragma unroll
            for (int r = 0; r < ATT_RMAX; r++)
                if (r < R) acc[r][0] *= crow[r], acc[r][1] *= crow[r];
            const bool two = hd > ATT_THREADS && dim + ATT_THREADS < hd;
            for (int t = grp; t < nt; t += groups) {
                const float v0 = __half2float(vs[t * hs + dim]);
                const float v1 = two ? __half2float(vs[t * hs + dim + ATT_THREADS]) : 0.0f;
#pragma unroll
                for (int r = 0; r < ATT_RMAX; r++) {
                    if (r < R) {
                        const float pr = sc[r * ATT_TILE + t];
                        acc[r][0] += pr * v0;
                        acc[r][1] += pr * v1;
                    }
                }
            }
        }
        __syncthreads();
    }

    // fold the slot groups: obuf[r * hd + d] = unnormalized output of this chunk
    for (int i = tid; i < R * hd; i += ATT_THREADS) obuf[i] = 0.0f;
    __syncthreads();
    for (int gi = 0; gi < groups; gi++) {
        if (vact && grp == gi) {
#pragma unroll
            for (int r = 0; r < ATT_RMAX; r++) {
                if (r < R) {
                    obuf[r * hd + dim] += acc[r][0];
                    if (hd > ATT_THREADS && dim + ATT_THREADS < hd)
                        obuf[r * hd + dim + ATT_THREADS] += acc[r][1];
                }
            }
        }
        __syncthreads();
    }

    if (ns > 1) {
        // partial of row r: token tok0 + r / G, head h0 + r % G
        for (int i = tid; i < R * hd; i += ATT_THREADS) {
            const int r = i / hd, d = i % hd;
            const int64_t row = ((int64_t)(tok0 + r / G) * p.n_head + h0 + r % G) * p.n_splits + split;
            p.scr.part_acc[row * hd + d] = obuf[i];
        }
        if (tid < R) {
            const int64_t row = ((int64_t)(tok0 + tid / G) * p.n_head + h0 + tid % G) * p.n_splits + split;
            p.scr.part_ml[row * 2 + 0] = lrow[tid] > 0.0f ? mrow[tid] : -FLT_MAX;
            p.scr.part_ml[row * 2 + 1] = lrow[tid];
        }
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            int32_t *cnt = p.scr.counters + (int64_t)blockIdx.z * p.n_head_kv + kvh;
            const int done = atomicAdd(cnt, 1);
            is_last = done == ns - 1;
            if (is_last) *cnt = 0; // ready for the next launch (graph replays)
        }
        __syncthreads();
        if (!is_last) return;
        __threadfence();
        // merge the splits of every row (each thread its own elements)
        for (int i = tid; i < R * hd; i += ATT_THREADS) {
            const int r = i / hd, d = i % hd;
            const int64_t row0 = ((int64_t)(tok0 + r / G) * p.n_head + h0 + r % G) * p.n_splits;
            const float *ml = p.scr.part_ml + row0 * 2;
            float M = -FLT_MAX;
            for (int s = 0; s < ns; s++)
                if (__ldcg(ml + 2 * s + 1) > 0.0f) M = fmaxf(M, __ldcg(ml + 2 * s));
            float L = 0.0f, o = 0.0f;
            for (int s = 0; s < ns; s++) {
                const float l = __ldcg(ml + 2 * s + 1);
                if (l <= 0.0f) continue;
                const float w = expf(__ldcg(ml + 2 * s) - M);
                L += l * w;
                o += __ldcg(p.scr.part_acc + (row0 + s) * hd + d) * w;
            }
            obuf[i] = o / L;
        }
    } else {
        for (int i = tid; i < R * hd; i += ATT_THREADS) obuf[i] = obuf[i] / lrow[i / hd];
    }
    __syncthreads();
    for (int i = tid; i < R * hd; i += ATT_THREADS) {
        const int qi = i / (G * hd), j = i % (G * hd);
        p.out.f[(int64_t)(tok0 + qi) * p.out.k_pad + (int64_t)h0 * hd + j] = obuf[i];
    }
    if (p.out.q && (hd % 32) == 0) {
        // each token's group outputs are whole quant blocks of the O projection's input
        const int warp = tid / 32, lane = tid % 32;
        const int64_t nblk = p.out.k_pad / 32, blk0 = (int64_t)h0 * hd / 32;
        const int bpt = G * hd / 32; // blocks per token
        for (int b = warp; b < QT * bpt; b += ATT_THREADS / 32) {
            const int64_t tok = tok0 + b / bpt;
            cu_quant_block32(obuf[b * 32 + lane], p.out.q + tok * p.out.k_pad, p.out.d + tok * nblk,
                             p.out.s + tok * nblk, blk0 + b % bpt, lane);
        }
    }
}

extern "C" cudaError_t cu_attention(cudaStream_t st, const float *q, int n_tok, const int32_t *pos,
                                    int n_head, int n_head_kv, int hd, const cu_kv *kv, float scale,
                                    int n_splits, int qt, const cu_attn_scratch *scr, const cu_act *out) {
    const int G = n_head / n_head_kv;
    if (G > ATT_RMAX || G * n_head_kv != n_head || hd > 2 * ATT_THREADS || hd % 8 || n_splits < 1 ||
        n_splits > scr->max_splits || qt < 1)
        return cudaErrorInvalidValue;
    if (qt * G > ATT_RMAX) qt = ATT_RMAX / G;
    if (qt > n_tok) qt = n_tok;
    att_params p;
    p.q = q;
    p.pos = pos;
    p.n_tok = n_tok;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.hd = hd;
    p.G = G;
    p.QT = qt;
    p.kv = *kv;
    p.scale = scale;
    p.n_splits = n_splits;
    p.scr = *scr;
    p.out = *out;
    const size_t smem = att_smem(qt * G, hd);
    if (smem > 48 * 1024) {
        cudaError_t e =
            cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const dim3 grid(n_head_kv, n_splits, (n_tok + qt - 1) / qt);
    return cu_launch(k_attention, grid, ATT_THREADS, smem, st, p);
}
