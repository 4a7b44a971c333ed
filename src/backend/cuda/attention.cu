/*
 * attention.cu — RoPE + KV-cache store, and attention over the paged KV cache (F16, BF16, Q8_0
 * or Q4_0).
 *
 * cu_rope_store: one block per (token, head slot): the optional per-head RMS norm
 * (qwen3), the rotation (NORM or NEOX pairs, llama-3 frequency factors and YaRN through
 * the host-made tables), then Q to a f32 buffer and K/V into the cache at the token's slot
 * (rounded to F16 or BF16, or quantized per 32 values as llama.cpp's q8_0 and q4_0). A rotated
 * cache (cu_kv.rot_k, rot_v: llama.cpp's rule, kv/kv_cache.h) turns Q and K, and V, by the
 * Walsh–Hadamard transform first, as the CPU does (backend/cpu/kv_rows.h); att_finish and the
 * tensor-core kernel turn the output back.
 *
 * cu_attention picks one of three kernels. Q is rounded to F16 first in each, as llama.cpp's
 * flash attention does before its F16 dot products.
 *   - k_attn_dec (decode, one token per block; flash-decoding): a block per (KV head, up to 4
 *     of its query heads, split, token) streams a contiguous chunk of the slots 0..pos
 *     straight into registers, 16 bytes a lane, several rows in flight per warp, with the
 *     online softmax per row group in registers; at most one split per 64 slots (a short
 *     context is one block).
 *   - k_attn_mma (prefill: several tokens of one sequence, head size a multiple of 16 up to
 *     128): flash attention on tensor cores (WMMA), 64 queries of one head per block.
 *   - k_attention (the rest): tiles of 64 slots staged in shared memory and shared by up to 16
 *     query rows (tokens x heads of a group), CUDA-core math.
 * Splits write (max, sum, unnormalized output) partials; the last block of a head to finish
 * (an atomic counter, reset for the next launch) merges them, writes the output and
 * quantizes it for the O projection (att_finish).
 */
#include <float.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mma.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lora.cuh"
#include "backend/cuda/quant.cuh"

#define ATT_THREADS 128
#define ATT_TILE    64
#define ATT_RMAX    16 /* query rows (tokens x heads) of one block */

/* Start of the section (block b, the kv's layer, K when which = 0 or V) in the cache. */
static __device__ __forceinline__ uint8_t *kv_section(const cu_kv &kv, int64_t b, int which) {
    return static_cast<uint8_t *>(kv.base) + b * kv.block_bytes + kv.offset +
           which * cu_kv_section_bytes(kv.type, kv.kv_dim);
}

/* The first slot a query at pos sees (its window's start, 0 without a window). */
static __device__ __forceinline__ int att_first(const cu_kv &kv, int pos) {
    return kv.window > 0 && pos - kv.window + 1 > 0 ? pos - kv.window + 1 : 0;
}

/* Stores buf[0..hd) as head h's row of K (which = 0) or V at position pos of token tok's
 * sequence. Called by every thread of the block (the block types quantize a warp per 32 values,
 * as llama.cpp: q8_0 d = amax / 127, q = round(x / d); q4_0 d = the largest-magnitude value
 * (the first of equals) / -8, q = min(15, trunc(x / d + 8.5)), rounded as the CPU's reference
 * quantizer: no contraction). */
static __device__ void kv_store(const cu_kv &kv, int tok, int64_t pos, int which, int h, int hd,
                                const float *buf) {
    const int64_t b = kv.tables[kv.tok_table[tok] + pos / CU_KV_BLOCK];
    const int slot = (int)(pos % CU_KV_BLOCK);
    uint8_t *sec = kv_section(kv, b, which);
    const int64_t col = (int64_t)h * hd;
    if (kv.type == CU_KV_F16 || kv.type == CU_KV_BF16) {
        __half *dst = reinterpret_cast<__half *>(sec) + (int64_t)slot * kv.kv_dim + col;
        __nv_bfloat16 *bdst = reinterpret_cast<__nv_bfloat16 *>(dst);
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            if (kv.type == CU_KV_F16)
                dst[d] = __float2half(buf[d]);
            else
                bdst[d] = __float2bfloat16_rn(buf[d]);
        }
        return;
    }
    const bool q4 = kv.type == CU_KV_Q4;
    const int64_t qbytes = q4 ? (int64_t)CU_KV_BLOCK * kv.kv_dim / 2 : (int64_t)CU_KV_BLOCK * kv.kv_dim;
    __half *sc = reinterpret_cast<__half *>(sec + qbytes) + (int64_t)slot * (kv.kv_dim / 32) + col / 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    for (int g = warp; g < hd / 32; g += nw) {
        const float v = buf[g * 32 + lane];
        if (!q4) {
            int8_t *q = reinterpret_cast<int8_t *>(sec) + (int64_t)slot * kv.kv_dim + col;
            const float d = cu_warp_max(fabsf(v)) / 127.0f;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            q[g * 32 + lane] = (int8_t)roundf(v * id);
            if (lane == 0) sc[g] = __float2half(d);
            continue;
        }
        // the first lane holding the largest magnitude, and its signed value
        const float a = fabsf(v);
        const float amax = cu_warp_max(a);
        const unsigned first = __ffs(__ballot_sync(0xffffffffu, a == amax)) - 1;
        const float mx = __shfl_sync(0xffffffffu, v, first);
        const float d = __fdiv_rn(mx, -8.0f);
        const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
        const int qi = min(15, (int)__fadd_rn(__fmul_rn(v, id), 8.5f));
        const int hi = __shfl_down_sync(0xffffffffu, qi, 1);
        uint8_t *q = sec + ((int64_t)slot * kv.kv_dim + col) / 2;
        if (lane % 2 == 0) q[(g * 32 + lane) / 2] = (uint8_t)(qi | hi << 4);
        if (lane == 0) sc[g] = __float2half(d);
    }
}

/* The Walsh–Hadamard transform of rows x[r * stride .. + n) (r < rows) in pieces of `piece`
 * values, in place, as backend/cpu/kv_rows.c's cera_fwht_f32 (a scale by 1/sqrt(piece), then the
 * butterflies of widths 1, 2, ...). Called by every thread of the block. */
static __device__ void fwht_rows(float *x, int rows, int stride, int n, int piece) {
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn((float)piece));
    for (int i = threadIdx.x; i < rows * n; i += blockDim.x) x[(i / n) * stride + i % n] *= scale;
    __syncthreads();
    const int half = n / 2;
    for (int w = 1; w < piece; w <<= 1) {
        for (int i = threadIdx.x; i < rows * half; i += blockDim.x) {
            const int r = i / half, k = i % half;
            float *p = x + (int64_t)r * stride + (k / w) * 2 * w + k % w;
            const float u = p[0], v = p[w];
            p[0] = __fadd_rn(u, v);
            p[w] = __fsub_rn(u, v);
        }
        __syncthreads();
    }
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
        if (kv.rot_v) fwht_rows(buf, 1, hd, hd, kv.rot_v);
        kv_store(kv, tok, p, 1, h, hd, buf);
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
        if (kv.rot_k) { // the scale first, as the CPU (Gemma 3's Q scale comes before the attention)
            for (int d = threadIdx.x; d < hd; d += blockDim.x) buf[d] *= rope.q_scale;
            __syncthreads();
            fwht_rows(buf, 1, hd, hd, kv.rot_k);
            for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = buf[d];
        } else {
            for (int d = threadIdx.x; d < hd; d += blockDim.x) dst[d] = buf[d] * rope.q_scale;
        }
    } else {
        if (kv.rot_k) fwht_rows(buf, 1, hd, hd, kv.rot_k);
        kv_store(kv, tok, p, 0, h, hd, buf);
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

/* The end of both attention kernels. obuf [R][hd] holds a block's unnormalized outputs and
 * mrow/lrow [R] their running max and sum (shared memory); row r is token tok0 + r / Gr, head
 * h0 + r % Gr. With one split they are normalized and written; with ns splits each block
 * writes its partials and the last of them to finish (counter: its atomic, left zero for
 * the next launch) merges them. Then the rows are quantized for the O projection. */
static __device__ void att_finish(const att_params &p, float *obuf, const float *mrow, const float *lrow,
                                  int R, int Gr, int tok0, int h0, int split, int ns, int32_t *counter) {
    __shared__ bool is_last;
    const int tid = threadIdx.x, nt = blockDim.x, hd = p.hd;
    if (ns > 1) {
        for (int i = tid; i < R * hd; i += nt) {
            const int r = i / hd, d = i % hd;
            const int64_t row = ((int64_t)(tok0 + r / Gr) * p.n_head + h0 + r % Gr) * p.n_splits + split;
            p.scr.part_acc[row * hd + d] = obuf[i];
        }
        if (tid < R) {
            const int64_t row = ((int64_t)(tok0 + tid / Gr) * p.n_head + h0 + tid % Gr) * p.n_splits + split;
            p.scr.part_ml[row * 2 + 0] = lrow[tid] > 0.0f ? mrow[tid] : -FLT_MAX;
            p.scr.part_ml[row * 2 + 1] = lrow[tid];
        }
        __threadfence();
        __syncthreads();
        if (tid == 0) {
            const int done = atomicAdd(counter, 1);
            is_last = done == ns - 1;
            if (is_last) *counter = 0; // ready for the next launch (graph replays)
        }
        __syncthreads();
        if (!is_last) return;
        __threadfence();
        // merge the splits of every row: the rows' maxima, weights and sums first, a thread per row
        // over the splits' (max, sum) staged in shared memory, then each thread its own elements
        // with the splits' partial outputs loaded independently of one another (the serial merge
        // of 64 splits, each load waiting on the last, was latency-bound: ~2 L2 round trips a
        // split and element)
        __shared__ float sw[ATT_RMAX][CU_ATT_MAX_SPLITS], sl[ATT_RMAX];
        for (int i = tid; i < R * ns; i += nt) {
            const int r = i / ns, sp = i % ns;
            const int64_t row0 = ((int64_t)(tok0 + r / Gr) * p.n_head + h0 + r % Gr) * p.n_splits;
            const float l = __ldcg(p.scr.part_ml + (row0 + sp) * 2 + 1);
            sw[r][sp] = l > 0.0f ? __ldcg(p.scr.part_ml + (row0 + sp) * 2) : -FLT_MAX;
        }
        __syncthreads();
        if (tid < R) {
            const int64_t row0 = ((int64_t)(tok0 + tid / Gr) * p.n_head + h0 + tid % Gr) * p.n_splits;
            float M = -FLT_MAX, L = 0.0f;
            for (int sp = 0; sp < ns; sp++) M = fmaxf(M, sw[tid][sp]);
            for (int sp = 0; sp < ns; sp++) {
                const float l = __ldcg(p.scr.part_ml + (row0 + sp) * 2 + 1);
                float w = -1.0f; // an empty split: no weight
                if (l > 0.0f) {
                    w = expf(sw[tid][sp] - M);
                    L += l * w;
                }
                sw[tid][sp] = w;
            }
            sl[tid] = L;
        }
        __syncthreads();
        for (int i = tid; i < R * hd; i += nt) {
            const int r = i / hd, d = i % hd;
            const int64_t row0 = ((int64_t)(tok0 + r / Gr) * p.n_head + h0 + r % Gr) * p.n_splits;
            const float *pa = p.scr.part_acc + row0 * hd + d;
            float o = 0.0f;
#pragma unroll 8
            for (int sp = 0; sp < ns; sp++) {
                const float a = __ldcg(pa + (int64_t)sp * hd), w = sw[r][sp];
                o += w >= 0.0f ? a * w : 0.0f; // o is never -0, so + 0 leaves it as it is
            }
            obuf[i] = o / sl[r];
        }
    } else {
        for (int i = tid; i < R * hd; i += nt) obuf[i] = obuf[i] / lrow[i / hd];
    }
    __syncthreads();
    if (p.kv.rot_v) fwht_rows(obuf, R, hd, hd, p.kv.rot_v); // a rotated V's output turned back
    const int QT = R / Gr;
    for (int i = tid; i < R * hd; i += nt) {
        const int qi = i / (Gr * hd), j = i % (Gr * hd);
        p.out.f[(int64_t)(tok0 + qi) * p.out.k_pad + (int64_t)h0 * hd + j] = obuf[i];
    }
    if (p.out.q && (hd % 32) == 0) {
        // each token's rows are whole quant blocks of the O projection's input
        const int warp = tid / 32, lane = tid % 32;
        const int64_t nblk = p.out.k_pad / 32, blk0 = (int64_t)h0 * hd / 32;
        const int bpt = Gr * hd / 32; // blocks per token
        for (int b = warp; b < QT * bpt; b += nt / 32) {
            const int64_t tok = tok0 + b / bpt;
            cu_quant_block32(obuf[b * 32 + lane], p.out.q + tok * p.out.k_pad, p.out.d + tok * nblk,
                             p.out.s + tok * nblk, blk0 + b % bpt, lane);
        }
    }
}

/* The slots a split covers among lo..hi-1: at most one split per tile of slots, so that a
 * short context is one block that normalizes its own output (no partials, no merge) instead
 * of n_splits slivers. */
static __device__ __forceinline__ void att_chunk(int lo, int hi, int n_splits, int split, int *ns, int *start,
                                                 int *end) {
    const int n_kv = hi - lo;
    *ns = min(n_splits, (n_kv + ATT_TILE - 1) / ATT_TILE);
    const int chunk = (n_kv + *ns - 1) / *ns;
    *start = lo + split * chunk;
    *end = min(hi, *start + chunk);
}

/* Rows: QT query tokens x G heads (R <= ATT_RMAX). Shared memory: K tile [ATT_TILE][hd + 8]
 * f16 | V tile (same) | q [R][hd] f32 | scores [R][ATT_TILE] | m, l, corr [ATT_RMAX] |
 * out [R * hd] | section offsets [ATT_TILE]. */
static size_t att_smem(int R, int hd) {
    return sizeof(float) * ((size_t)R * hd * 2 + (size_t)R * ATT_TILE + 3 * ATT_RMAX) +
           2 * sizeof(__half) * ATT_TILE * (size_t)(hd + 8) + sizeof(int64_t) * ATT_TILE;
}

/* 8 consecutive values (the first at column col of row slot) of the K (w = 0) or V section of
 * a block, as F16 for the tiled kernels' shared-memory tiles: ksec is the block's K section,
 * sec a section's bytes. A BF16 value beyond F16's range would not fit (an F16 cache's range). */
template <int KT>
static __device__ __forceinline__ int4 kv_stage8(const uint8_t *ksec, int64_t sec, int slot, int64_t col,
                                                 int kv_dim, int w) {
    const uint8_t *src = ksec + w * sec;
    const int64_t el = (int64_t)slot * kv_dim + col;
    if (KT == CU_KV_F16) return __ldg(reinterpret_cast<const int4 *>(src + el * 2));
    __align__(16) __half h8[8];
    if (KT == CU_KV_BF16) {
        const int4 raw = __ldg(reinterpret_cast<const int4 *>(src + el * 2));
        const uint32_t *u = reinterpret_cast<const uint32_t *>(&raw);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            h8[2 * j] = __float2half(__uint_as_float(u[j] << 16));
            h8[2 * j + 1] = __float2half(__uint_as_float(u[j] & 0xffff0000u));
        }
    } else {
        const int64_t qbytes =
            KT == CU_KV_Q4 ? (int64_t)CU_KV_BLOCK * kv_dim / 2 : (int64_t)CU_KV_BLOCK * kv_dim;
        const float d = __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short *>(
            src + qbytes + ((int64_t)slot * (kv_dim / 32) + col / 32) * 2))));
        if (KT == CU_KV_Q8) {
            const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(src + el));
            const int8_t *q8 = reinterpret_cast<const int8_t *>(&raw);
#pragma unroll
            for (int j = 0; j < 8; j++) h8[j] = __float2half((float)q8[j] * d);
        } else {
            const uint32_t raw = __ldg(reinterpret_cast<const unsigned int *>(src + el / 2));
#pragma unroll
            for (int j = 0; j < 8; j++) h8[j] = __float2half((float)((int)((raw >> (4 * j)) & 15u) - 8) * d);
        }
    }
    return *reinterpret_cast<const int4 *>(h8);
}

/* The tiled kernel (prefill: QT tokens of one sequence share each staged tile). The cache's
 * rows of another type than F16 are converted to F16 as they are staged (kv_stage8). */
template <int KT> __global__ void __launch_bounds__(ATT_THREADS) k_attention(const att_params p) {
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

    // the block's slots: up to the furthest of its tokens; each row masks past its own
    int lo = INT_MAX, hi = 0;
    for (int qi = 0; qi < QT; qi++) {
        lo = min(lo, att_first(p.kv, p.pos[tok0 + qi]));
        hi = max(hi, p.pos[tok0 + qi] + 1);
    }
    int ns, start, end;
    att_chunk(lo, hi, p.n_splits, split, &ns, &start, &end);
    if (split >= ns) return; // the whole block
    const int h0 = kvh * G, CH = hd / 8;
    const int64_t sec = cu_kv_section_bytes(KT, p.kv.kv_dim); // V's section follows K's
    const uint8_t *kvbase = static_cast<const uint8_t *>(p.kv.base);
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
            rowoff[tid] = b * p.kv.block_bytes + p.kv.offset; // the K section of the slot's block
        }
        __syncthreads();
        // stage the tile's K and V rows: every load independent, coalesced per row
#pragma unroll 4
        for (int i = tid; i < nt * CH; i += ATT_THREADS) {
            const int t = i / CH, c = i % CH, slot = (t0 + t) % CU_KV_BLOCK;
            const int64_t col = (int64_t)kvh * hd + c * 8;
            const uint8_t *ksec = kvbase + rowoff[t];
            *reinterpret_cast<int4 *>(ks + t * hs + c * 8) =
                kv_stage8<KT>(ksec, sec, slot, col, p.kv.kv_dim, 0);
            *reinterpret_cast<int4 *>(vs + t * hs + c * 8) =
                kv_stage8<KT>(ksec, sec, slot, col, p.kv.kv_dim, 1);
        }
        __syncthreads();
        // scores: consecutive threads take consecutive slots of one row; causal mask per token
        for (int i = tid; i < nt * R; i += ATT_THREADS) {
            const int r = i / nt, t = i % nt;
            float s = -INFINITY;
            const int rp = p.pos[tok0 + r / G];
            if (t0 + t <= rp && t0 + t >= att_first(p.kv, rp)) {
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
    att_finish(p, obuf, mrow, lrow, R, G, tok0, h0, split, ns,
               p.scr.counters + (int64_t)blockIdx.z * p.n_head_kv + kvh);
}

/* Four int8 values (the bytes of w) as floats without the int-to-float unit (a quarter of the
 * FMA rate, the Q8_0 cache's bottleneck): each biased byte becomes the low mantissa bits of
 * 2^23 (a byte permute), and 2^23 + 128 is subtracted. Exact for every int8. */
static __device__ __forceinline__ void i8x4_to_f32(uint32_t w, float *f) {
    const uint32_t u = w ^ 0x80808080u; // x + 128 per byte
#pragma unroll
    for (int i = 0; i < 4; i++) f[i] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540u + i)) - 8388736.0f;
}

/* A decode lane's EPL values from its 16-byte load (Q4_0: the first 8 bytes), as floats: F16,
 * BF16 (8 each), Q8_0 or Q4_0 (16, still to be scaled by the block's d). */
template <int KT, int EPL> static __device__ __forceinline__ void kv_unpack(const int4 &raw, float *f) {
    const uint32_t *w = reinterpret_cast<const uint32_t *>(&raw);
    if (KT == CU_KV_F16) {
        const __half2 *h2 = reinterpret_cast<const __half2 *>(&raw);
#pragma unroll
        for (int j = 0; j < EPL / 2; j++) {
            const float2 v = __half22float2(h2[j]);
            f[2 * j] = v.x, f[2 * j + 1] = v.y;
        }
    } else if (KT == CU_KV_BF16) {
#pragma unroll
        for (int j = 0; j < EPL / 2; j++)
            f[2 * j] = __uint_as_float(w[j] << 16), f[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
    } else if (KT == CU_KV_Q8) {
#pragma unroll
        for (int j = 0; j < EPL / 4; j++) i8x4_to_f32(w[j], f + 4 * j);
    } else { // nibble n of word j: value 8j + n; 2^23 + q as a float's bits, less 2^23 + 8
#pragma unroll
        for (int j = 0; j < EPL / 8; j++)
#pragma unroll
            for (int n = 0; n < 8; n++)
                f[8 * j + n] = __uint_as_float(0x4B000000u | ((w[j] >> (4 * n)) & 15u)) - 8388616.0f;
    }
}

/* The decode kernel: one query token per block, read at bandwidth. Each warp streams rows of
 * its split's slots straight into registers (no shared-memory staging, no block barrier in the
 * loop): a row is LPR lanes of EPL values (16 bytes each: 8 F16 or 16 int8 + the block's scale),
 * so a warp loads 32 / LPR rows per instruction, U of them in flight. Every row group keeps its
 * own online softmax over the rows it saw (max, sum and output per head, in registers); the
 * groups are merged by shuffles, the warps through shared memory, then att_finish. HB query
 * heads of the KV head's group share each row (a block per HB heads). */
#define DEC_U 4
template <int HB, int KT> __global__ void __launch_bounds__(ATT_THREADS) k_attn_dec(const att_params p) {
    cu_pdl_enter();
    constexpr bool QB = KT == CU_KV_Q8 || KT == CU_KV_Q4; // a block type: a scale per 32 values
    constexpr int EPL = QB ? 16 : 8;
    __shared__ float wm[ATT_THREADS / 32][HB], wl[ATT_THREADS / 32][HB];
    __shared__ float mrow[HB], lrow[HB];
    extern __shared__ __align__(16) uint8_t smem[];
    float *wacc = reinterpret_cast<float *>(smem); // [warps][HB][hd]
    float *obuf = wacc + (ATT_THREADS / 32) * HB * p.hd;
    const int hd = p.hd, LPR = hd / EPL, RPW = 32 / LPR;
    const int nhg = (p.G + HB - 1) / HB;
    const int kvh = blockIdx.x / nhg, hg = blockIdx.x % nhg, split = blockIdx.y, tok = blockIdx.z;
    const int h0 = kvh * p.G + hg * HB, nh = min(HB, p.G - hg * HB);
    int ns, start, end;
    att_chunk(att_first(p.kv, p.pos[tok]), p.pos[tok] + 1, p.n_splits, split, &ns, &start, &end);
    if (split >= ns) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int lr = lane % LPR, n_groups = (ATT_THREADS / 32) * RPW;
    const int64_t col = (int64_t)kvh * hd + lr * EPL; // this lane's first value in a row
    const int64_t sec = cu_kv_section_bytes(KT, p.kv.kv_dim);
    const int64_t qbytes =
        KT == CU_KV_Q4 ? (int64_t)CU_KV_BLOCK * p.kv.kv_dim / 2 : (int64_t)CU_KV_BLOCK * p.kv.kv_dim;
    const uint8_t *kvbase = static_cast<const uint8_t *>(p.kv.base);
    const int32_t *table = p.kv.tables + p.kv.tok_table[tok];
    const int64_t lsec = p.kv.offset, bsec = p.kv.block_bytes;

    float q[HB][EPL], acc[HB][EPL], m[HB], l[HB];
#pragma unroll
    for (int h = 0; h < HB; h++) {
        m[h] = -FLT_MAX, l[h] = 0.0f;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            acc[h][e] = 0.0f;
            q[h][e] =
                h < nh
                    ? __half2float(__float2half(p.q[((int64_t)tok * p.n_head + h0 + h) * hd + lr * EPL + e]))
                    : 0.0f;
        }
    }
    // the loop runs alike for every lane of a warp (its shuffles need all 32): rows past the end
    // are masked, not skipped
    for (int r0 = start + warp * RPW; r0 < end; r0 += DEC_U * n_groups) {
        int4 kr[DEC_U], vr[DEC_U];
        float kd[DEC_U], vd[DEC_U];
        bool ok[DEC_U];
#pragma unroll
        for (int u = 0; u < DEC_U; u++) {
            const int r = r0 + lane / LPR + u * n_groups;
            ok[u] = r < end;
            kr[u] = vr[u] = make_int4(0, 0, 0, 0);
            kd[u] = vd[u] = 0.0f;
            if (ok[u]) {
                const int slot = r % CU_KV_BLOCK;
                const uint8_t *ks = kvbase + (int64_t)table[r / CU_KV_BLOCK] * bsec + lsec;
                if (!QB) {
                    const int64_t off = ((int64_t)slot * p.kv.kv_dim + col) * 2;
                    kr[u] = __ldg(reinterpret_cast<const int4 *>(ks + off));
                    vr[u] = __ldg(reinterpret_cast<const int4 *>(ks + sec + off));
                } else {
                    const int64_t off = (int64_t)slot * p.kv.kv_dim + col;
                    const int64_t soff = qbytes + ((int64_t)slot * (p.kv.kv_dim / 32) + col / 32) * 2;
                    if (KT == CU_KV_Q8) {
                        kr[u] = __ldg(reinterpret_cast<const int4 *>(ks + off));
                        vr[u] = __ldg(reinterpret_cast<const int4 *>(ks + sec + off));
                    } else { // 16 values in 8 bytes
                        const uint2 k2 = __ldg(reinterpret_cast<const uint2 *>(ks + off / 2));
                        const uint2 v2 = __ldg(reinterpret_cast<const uint2 *>(ks + sec + off / 2));
                        kr[u] = make_int4((int)k2.x, (int)k2.y, 0, 0);
                        vr[u] = make_int4((int)v2.x, (int)v2.y, 0, 0);
                    }
                    kd[u] = __half2float(
                        __ushort_as_half(__ldg(reinterpret_cast<const unsigned short *>(ks + soff))));
                    vd[u] = __half2float(
                        __ushort_as_half(__ldg(reinterpret_cast<const unsigned short *>(ks + sec + soff))));
                }
            }
        }
        float sc[DEC_U][HB];
#pragma unroll
        for (int u = 0; u < DEC_U; u++) {
            float kv[EPL];
            kv_unpack<KT, EPL>(kr[u], kv);
#pragma unroll
            for (int h = 0; h < HB; h++) {
                float s = 0.0f;
#pragma unroll
                for (int e = 0; e < EPL; e++) s += q[h][e] * kv[e];
                if (QB) s *= kd[u]; // this lane's 32-value block's scale, before the lanes are summed
                for (int o = LPR / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
                sc[u][h] = ok[u] ? s * p.scale : -INFINITY;
            }
        }
#pragma unroll
        for (int h = 0; h < HB; h++) {
            float mx = m[h];
#pragma unroll
            for (int u = 0; u < DEC_U; u++) mx = fmaxf(mx, sc[u][h]);
            const float corr = expf(m[h] - mx);
            m[h] = mx;
            l[h] *= corr;
#pragma unroll
            for (int e = 0; e < EPL; e++) acc[h][e] *= corr;
#pragma unroll
            for (int u = 0; u < DEC_U; u++) {
                const float pr = expf(sc[u][h] - mx);
                l[h] += pr;
                float vv[EPL];
                kv_unpack<KT, EPL>(vr[u], vv);
                const float pv = QB ? pr * vd[u] : pr;
#pragma unroll
                for (int e = 0; e < EPL; e++) acc[h][e] += pv * vv[e];
            }
        }
    }
    // merge the row groups of a warp (lanes LPR apart hold the same dims)
    for (int o = LPR; o < 32; o <<= 1) {
#pragma unroll
        for (int h = 0; h < HB; h++) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m[h], o),
                        l2 = __shfl_xor_sync(0xffffffffu, l[h], o);
            const float M = fmaxf(m[h], m2), c1 = expf(m[h] - M), c2 = expf(m2 - M);
            l[h] = l[h] * c1 + l2 * c2;
#pragma unroll
            for (int e = 0; e < EPL; e++) {
                const float a2 = __shfl_xor_sync(0xffffffffu, acc[h][e], o);
                acc[h][e] = acc[h][e] * c1 + a2 * c2;
            }
            m[h] = M;
        }
    }
    if (lane < LPR) {
#pragma unroll
        for (int h = 0; h < HB; h++) {
#pragma unroll
            for (int e = 0; e < EPL; e++) wacc[(warp * HB + h) * hd + lr * EPL + e] = acc[h][e];
            if (lane == 0) wm[warp][h] = m[h], wl[warp][h] = l[h];
        }
    }
    __syncthreads();
    // merge the warps: obuf [nh][hd] unnormalized, mrow / lrow
    for (int i = threadIdx.x; i < nh * hd; i += ATT_THREADS) {
        const int h = i / hd, d = i % hd;
        float M = -FLT_MAX;
        for (int w = 0; w < ATT_THREADS / 32; w++) M = fmaxf(M, wm[w][h]);
        float L = 0.0f, o = 0.0f;
        for (int w = 0; w < ATT_THREADS / 32; w++) {
            const float c = expf(wm[w][h] - M);
            L += wl[w][h] * c;
            o += wacc[(w * HB + h) * hd + d] * c;
        }
        obuf[i] = o;
        if (d == 0) mrow[h] = M, lrow[h] = L;
    }
    __syncthreads();
    att_finish(p, obuf, mrow, lrow, nh, nh, tok, h0, split, ns,
               p.scr.counters + ((int64_t)tok * p.n_head_kv + kvh) * nhg + hg);
}

/* CERA_CUDA_ATT_DEC=0 sends decode through the tiled kernel too (comparisons). */
static bool use_dec_kernel() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CERA_CUDA_ATT_DEC");
        on = !(e && !strcmp(e, "0"));
    }
    return on != 0;
}

/* The prefill kernel on tensor cores (flash attention): a block takes 64 consecutive query
 * tokens of one sequence for one head; each warp owns 16 of them. Per tile of 64 cache slots
 * (staged as F16 in shared memory, the other types converted there): S = Q·Kᵀ on WMMA (F16 inputs, F32
 * sums), the causal mask and the online softmax per row in F32 (two lanes a row), P rounded to
 * F16 (as llama.cpp's CUDA flash attention), then O += P·V on WMMA into F32 rows in shared
 * memory, rescaled per row first. Slots past the tile's last position are never read. */
#define FA_Q    64 /* query rows per block */
#define FA_K    64 /* cache slots per tile */
#define FA_PADH 8  /* F16 row padding (bank spread; keeps 16-byte row starts) */
#define FA_PADF 4  /* F32 row padding */

static size_t fa_smem(int hd) {
    return sizeof(__half) * ((size_t)3 * 64 * (hd + FA_PADH) + (size_t)FA_Q * (FA_K + FA_PADH)) +
           sizeof(float) * ((size_t)FA_Q * (FA_K + FA_PADF) + (size_t)FA_Q * (hd + FA_PADF) + 3 * FA_Q);
}

template <int KT> __global__ void __launch_bounds__(128) k_attn_mma(const att_params p) {
    using namespace nvcuda;
    cu_pdl_enter();
    extern __shared__ __align__(128) uint8_t smem[]; // WMMA tiles need 32-byte aligned starts
    const int hd = p.hd, hs = hd + FA_PADH, ps = FA_K + FA_PADH, ss = FA_K + FA_PADF, os = hd + FA_PADF;
    __half *qs = reinterpret_cast<__half *>(smem);         // [FA_Q][hs]
    __half *ks = qs + FA_Q * hs;                           // [FA_K][hs]
    __half *vs = ks + FA_K * hs;                           // [FA_K][hs]
    __half *pm = vs + FA_K * hs;                           // [FA_Q][ps]
    float *sm = reinterpret_cast<float *>(pm + FA_Q * ps); // [FA_Q][ss]
    float *om = sm + FA_Q * ss;                            // [FA_Q][os]
    float *mrow = om + FA_Q * os, *lrow = mrow + FA_Q, *crow = lrow + FA_Q;
    const int h = blockIdx.x, q0 = blockIdx.y * FA_Q, kvh = h / p.G;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int nq = min(FA_Q, p.n_tok - q0);
    const int64_t sec = cu_kv_section_bytes(KT, p.kv.kv_dim);
    const uint8_t *kvbase = static_cast<const uint8_t *>(p.kv.base);
    const int32_t *table = p.kv.tables + p.kv.tok_table[q0];
    const int kv_end = p.pos[q0 + nq - 1] + 1;    // positions increase along the sequence's tokens
    const int kv_lo = att_first(p.kv, p.pos[q0]); // and so do their windows' starts
    const int CH = hd / 8;

    for (int i = tid; i < FA_Q * CH; i += 128) {
        const int r = i / CH, c = i % CH;
        __align__(16) __half h8[8];
        const float *src = p.q + ((int64_t)(q0 + r) * p.n_head + h) * hd + c * 8;
#pragma unroll
        for (int j = 0; j < 8; j++) h8[j] = __float2half(r < nq ? src[j] : 0.0f);
        *reinterpret_cast<int4 *>(qs + r * hs + c * 8) = *reinterpret_cast<const int4 *>(h8);
    }
    for (int i = tid; i < FA_Q * os; i += 128) om[i] = 0.0f;
    if (tid < FA_Q) mrow[tid] = -FLT_MAX, lrow[tid] = 0.0f;
    // the two lanes of each of the warp's 16 rows: columns half * 32 .. + 32
    const int row = warp * 16 + lane / 2, half = lane % 2;
    const int rpos = row < nq ? p.pos[q0 + row] : -1; // -1: a padding row sees nothing
    const int rlo = row < nq ? att_first(p.kv, rpos) : 0;

    for (int t0 = kv_lo; t0 < kv_end; t0 += FA_K) {
        __syncthreads(); // the previous tile's K/V are no longer read
        for (int i = tid; i < FA_K * CH; i += 128) {
            const int t = i / CH, c = i % CH, pos = t0 + t;
            int4 kq = make_int4(0, 0, 0, 0), vq = kq;
            if (pos < kv_end) {
                const uint8_t *ksec =
                    kvbase + (int64_t)table[pos / CU_KV_BLOCK] * p.kv.block_bytes + p.kv.offset;
                const int slot = pos % CU_KV_BLOCK;
                const int64_t col = (int64_t)kvh * hd + c * 8;
                kq = kv_stage8<KT>(ksec, sec, slot, col, p.kv.kv_dim, 0);
                vq = kv_stage8<KT>(ksec, sec, slot, col, p.kv.kv_dim, 1);
            }
            *reinterpret_cast<int4 *>(ks + t * hs + c * 8) = kq;
            *reinterpret_cast<int4 *>(vs + t * hs + c * 8) = vq;
        }
        __syncthreads();
        // S = Q·Kᵀ for the warp's 16 rows
        {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FA_K / 16];
#pragma unroll
            for (int n = 0; n < FA_K / 16; n++) wmma::fill_fragment(acc[n], 0.0f);
            for (int k = 0; k < hd; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::load_matrix_sync(a, qs + warp * 16 * hs + k, hs);
#pragma unroll
                for (int n = 0; n < FA_K / 16; n++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
                    wmma::load_matrix_sync(b, ks + n * 16 * hs + k, hs);
                    wmma::mma_sync(acc[n], a, b, acc[n]);
                }
            }
#pragma unroll
            for (int n = 0; n < FA_K / 16; n++)
                wmma::store_matrix_sync(sm + warp * 16 * ss + n * 16, acc[n], ss, wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax: the row's max and sum over its two lanes
        {
            float *srow = sm + row * ss + half * 32;
            float mx = -FLT_MAX;
            for (int c = 0; c < 32; c++) {
                const int pos = t0 + half * 32 + c;
                const float v = pos <= rpos && pos >= rlo ? srow[c] * p.scale : -INFINITY;
                srow[c] = v;
                mx = fmaxf(mx, v);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = mrow[row], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            __half *prow = pm + row * ps + half * 32;
            for (int c = 0; c < 32; c++) {
                const float e = expf(srow[c] - m_new);
                prow[c] = __float2half(e);
                sum += e;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            __syncwarp();
            if (half == 0) {
                const float corr = expf(m_old - m_new);
                crow[row] = corr;
                lrow[row] = lrow[row] * corr + sum;
                mrow[row] = m_new;
            }
        }
        __syncwarp();
        for (int i = lane; i < 16 * hd; i += 32) {
            const int r = warp * 16 + i / hd;
            om[r * os + i % hd] *= crow[r];
        }
        __syncwarp();
        // O += P·V for the warp's 16 rows
        for (int n = 0; n < hd; n += 16) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> o;
            wmma::load_matrix_sync(o, om + warp * 16 * os + n, os, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < FA_K; k += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
                wmma::load_matrix_sync(a, pm + warp * 16 * ps + k, ps);
                wmma::load_matrix_sync(b, vs + k * hs + n, hs);
                wmma::mma_sync(o, a, b, o);
            }
            wmma::store_matrix_sync(om + warp * 16 * os + n, o, os, wmma::mem_row_major);
        }
    }
    __syncthreads();
    if (p.kv.rot_v) { // a rotated V's output turned back
        for (int i = tid; i < nq * hd; i += 128) om[(i / hd) * os + i % hd] /= lrow[i / hd];
        __syncthreads();
        fwht_rows(om, nq, os, hd, p.kv.rot_v);
        for (int i = tid; i < nq * hd; i += 128)
            p.out.f[(int64_t)(q0 + i / hd) * p.out.k_pad + (int64_t)h * hd + i % hd] =
                om[(i / hd) * os + i % hd];
        return;
    }
    for (int i = tid; i < nq * hd; i += 128) {
        const int r = i / hd, d = i % hd;
        p.out.f[(int64_t)(q0 + r) * p.out.k_pad + (int64_t)h * hd + d] = om[r * os + d] / lrow[r];
    }
}

/* CERA_CUDA_ATT_MMA=0 keeps prefill on the tiled kernel (comparisons). */
static bool use_mma_kernel() {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("CERA_CUDA_ATT_MMA");
        on = !(e && !strcmp(e, "0"));
    }
    return on != 0;
}

template <int HB, int KT> static cudaError_t launch_dec(cudaStream_t st, const att_params &p) {
    const int nhg = (p.G + HB - 1) / HB;
    const size_t smem = sizeof(float) * ((ATT_THREADS / 32) * HB * p.hd + HB * p.hd);
    const dim3 grid(p.n_head_kv * nhg, p.n_splits, p.n_tok);
    return cu_launch(k_attn_dec<HB, KT>, grid, ATT_THREADS, smem, st, p);
}

template <int KT> static cudaError_t launch_dec_g(cudaStream_t st, const att_params &p) {
    // the heads per block of cu_att_dec_heads (the host sizes the splits with it)
    return p.G == 1   ? launch_dec<1, KT>(st, p)
           : p.G == 2 ? launch_dec<2, KT>(st, p)
                      : launch_dec<4, KT>(st, p);
}
typedef void (*att_kernel)(const att_params);

extern "C" cudaError_t cu_attention(cudaStream_t st, const float *q, int n_tok, const int32_t *pos,
                                    int n_head, int n_head_kv, int hd, const cu_kv *kv, float scale,
                                    int n_splits, int qt, const cu_attn_scratch *scr, const cu_act *out) {
    const int G = n_head / n_head_kv;
    const bool qb = kv->type == CU_KV_Q8 || kv->type == CU_KV_Q4; // scales per 32 values
    if (G > ATT_RMAX || G * n_head_kv != n_head || hd > 2 * ATT_THREADS || hd % 8 || n_splits < 1 ||
        n_splits > scr->max_splits || n_splits > CU_ATT_MAX_SPLITS || qt < 1 || (qb && hd % 32) ||
        (kv->rot_v && hd % kv->rot_v) || kv->type < CU_KV_F16 || kv->type > CU_KV_BF16)
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
    // one token per block, rows of a power-of-two count of 16-byte loads: the streaming decode kernel
    const int lpr = qb ? hd / 16 : hd / 8;
    const int t = kv->type;
    if (qt == 1 && lpr <= 32 && (lpr & (lpr - 1)) == 0 && hd % (qb ? 16 : 8) == 0 && use_dec_kernel())
        return t == CU_KV_Q8     ? launch_dec_g<CU_KV_Q8>(st, p)
               : t == CU_KV_Q4   ? launch_dec_g<CU_KV_Q4>(st, p)
               : t == CU_KV_BF16 ? launch_dec_g<CU_KV_BF16>(st, p)
                                 : launch_dec_g<CU_KV_F16>(st, p);
    // several tokens of one sequence, F32 output only (the GEMM path's): tensor cores
    if (qt > 1 && hd % 16 == 0 && hd <= 128 && !out->q && use_mma_kernel()) {
        const att_kernel k = t == CU_KV_Q8     ? k_attn_mma<CU_KV_Q8>
                             : t == CU_KV_Q4   ? k_attn_mma<CU_KV_Q4>
                             : t == CU_KV_BF16 ? k_attn_mma<CU_KV_BF16>
                                               : k_attn_mma<CU_KV_F16>;
        const size_t smem = fa_smem(hd);
        const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        return cu_launch(k, dim3(n_head, (n_tok + FA_Q - 1) / FA_Q), 128, smem, st, p);
    }
    const size_t smem = att_smem(qt * G, hd);
    const att_kernel k = t == CU_KV_Q8     ? k_attention<CU_KV_Q8>
                         : t == CU_KV_Q4   ? k_attention<CU_KV_Q4>
                         : t == CU_KV_BF16 ? k_attention<CU_KV_BF16>
                                           : k_attention<CU_KV_F16>;
    if (smem > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    const dim3 grid(n_head_kv, n_splits, (n_tok + qt - 1) / qt);
    return cu_launch(k, grid, ATT_THREADS, smem, st, p);
}
