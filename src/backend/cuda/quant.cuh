/*
 * quant.cuh — device-side decoding of every weight type, 32 elements at a time.
 *
 * dequant_unit<T>(w, row, u, v) writes elements [32u, 32u + 32) of row `row` of the
 * device weight w into v, with the same float operations as ggml's scalar dequantizers
 * (so the embedding lookup and the prefill path see llama.cpp's values). The fast decode
 * kernels (matvec.cu) have their own int8 paths for Q4_0 and Q8_0 and vector paths for the
 * float types; every other type goes through these functions.
 *
 * Block layouts are GGUF's (ggml-common.h), except the split Q4_0/Q8_0/Q6_K layouts
 * described in cuda_kernels.h.
 */
#ifndef CERA_BACKEND_CUDA_QUANT_CUH
#define CERA_BACKEND_CUDA_QUANT_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

/* IQ4_NL's 16 levels, looked up from immediates (a __constant__ table serializes when
 * the lanes of a warp ask for different entries). */
static __device__ __forceinline__ int cu_iq4nl(int n) {
    // bytes of -127 -104 -83 -65 | -49 -35 -22 -10 | 1 13 25 38 | 53 69 89 113, little-endian
    const uint32_t w = n < 8 ? (n < 4 ? 0xBFAD9881u : 0xF6EADDCFu) : (n < 12 ? 0x26190D01u : 0x71594535u);
    return (int)(int8_t)(w >> (8 * (n & 3)));
}

static __device__ __forceinline__ float cu_h2f(const uint8_t *p) {
    // F16 fields in GGUF blocks are only 2-byte aligned
    return __half2float(*reinterpret_cast<const __half *>(p));
}

/* Kernel parameters carry weights by value: the pointers and sizes a kernel needs. */
struct cu_wview {
    const uint8_t *data;
    const __half *scales;
    int64_t row_bytes;
    int64_t k_pad;
    int64_t n;
};

static inline cu_wview cu_view(const cu_weight *w) {
    cu_wview v;
    v.data = static_cast<const uint8_t *>(w->data);
    v.scales = static_cast<const __half *>(w->scales);
    v.row_bytes = w->row_bytes;
    v.k_pad = w->k_pad;
    v.n = w->n;
    return v;
}

/* scale(is) of Q3_K's 16 packed 6-bit scales (ggml's aux-word unpacking, per index). */
static __device__ __forceinline__ int cu_q3k_scale(const uint8_t *sc, int is) {
    const int g = is >> 2, i = is & 3;
    int lo;
    switch (g) {
    case 0: lo = sc[i] & 15; break;
    case 1: lo = sc[4 + i] & 15; break;
    case 2: lo = sc[i] >> 4; break;
    default: lo = sc[4 + i] >> 4; break;
    }
    const int hi = (sc[8 + i] >> (2 * g)) & 3;
    return (int)(int8_t)(lo | (hi << 4)) - 32;
}

/* ggml's get_scale_min_k4 (Q4_K, Q5_K). */
static __device__ __forceinline__ void cu_scale_min_k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

template <int T> struct cu_deq;

template <> struct cu_deq<CERA_TYPE_F32> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const float4 *p = reinterpret_cast<const float4 *>(w.data + row * w.row_bytes) + u * 8;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 f = p[i];
            v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
        }
    }
};

template <> struct cu_deq<CERA_TYPE_F16> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const __half2 *p = reinterpret_cast<const __half2 *>(w.data + row * w.row_bytes) + u * 16;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const float2 f = __half22float2(p[i]);
            v[2 * i] = f.x, v[2 * i + 1] = f.y;
        }
    }
};

template <> struct cu_deq<CERA_TYPE_BF16> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint32_t *p = reinterpret_cast<const uint32_t *>(w.data + row * w.row_bytes) + u * 16;
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const uint32_t x = p[i];
            v[2 * i] = __uint_as_float(x << 16), v[2 * i + 1] = __uint_as_float(x & 0xffff0000u);
        }
    }
};

/* Split Q4_0: quants [n][nb][16], scales [n][nb]. */
template <> struct cu_deq<CERA_TYPE_Q4_0> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const int64_t nb = w.k_pad / 32;
        const uint8_t *q = w.data + (row * nb + u) * 16;
        const float d = __half2float(w.scales[row * nb + u]);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = ((q[j] & 0x0F) - 8) * d;
            v[j + 16] = ((q[j] >> 4) - 8) * d;
        }
    }
};

/* Split Q8_0: quants [n][nb][32], scales [n][nb]. */
template <> struct cu_deq<CERA_TYPE_Q8_0> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const int64_t nb = w.k_pad / 32;
        const int8_t *q = reinterpret_cast<const int8_t *>(w.data + (row * nb + u) * 32);
        const float d = __half2float(w.scales[row * nb + u]);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = q[j] * d;
    }
};

template <> struct cu_deq<CERA_TYPE_Q4_1> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + u * 20;
        const float d = cu_h2f(b), m = cu_h2f(b + 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = (b[4 + j] & 0x0F) * d + m;
            v[j + 16] = (b[4 + j] >> 4) * d + m;
        }
    }
};

template <> struct cu_deq<CERA_TYPE_Q5_0> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + u * 22;
        const float d = cu_h2f(b);
        const uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | ((uint32_t)b[5] << 24);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
            v[j] = (((b[6 + j] & 0x0F) | xh0) - 16) * d;
            v[j + 16] = (((b[6 + j] >> 4) | xh1) - 16) * d;
        }
    }
};

template <> struct cu_deq<CERA_TYPE_Q5_1> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + u * 24;
        const float d = cu_h2f(b), m = cu_h2f(b + 2);
        const uint32_t qh = b[4] | (b[5] << 8) | (b[6] << 16) | ((uint32_t)b[7] << 24);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
            v[j] = ((b[8 + j] & 0x0F) | xh0) * d + m;
            v[j + 16] = ((b[8 + j] >> 4) | xh1) * d + m;
        }
    }
};

template <> struct cu_deq<CERA_TYPE_IQ4_NL> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + u * 18;
        const float d = cu_h2f(b);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = d * cu_iq4nl(b[2 + j] & 0xF);
            v[j + 16] = d * cu_iq4nl(b[2 + j] >> 4);
        }
    }
};

/* Q2_K: scales[16] | qs[64] | d | dmin (84 bytes per 256). */
template <> struct cu_deq<CERA_TYPE_Q2_K> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + (u >> 3) * 84;
        const int s = (int)(u & 7), half = s >> 2, j = s & 3, shift = 2 * j;
        const float d = cu_h2f(b + 80), dmin = cu_h2f(b + 82);
        const uint8_t *q = b + 16 + half * 32;
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const uint8_t sc = b[half * 8 + j * 2 + part];
            const float dl = d * (sc & 0xF), ml = dmin * (sc >> 4);
#pragma unroll
            for (int l = 0; l < 16; l++)
                v[part * 16 + l] = dl * ((int8_t)((q[part * 16 + l] >> shift) & 3)) - ml;
        }
    }
};

/* Q3_K: hmask[32] | qs[64] | scales[12] | d (110 bytes per 256). */
template <> struct cu_deq<CERA_TYPE_Q3_K> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + (u >> 3) * 110;
        const int s = (int)(u & 7), half = s >> 2, j = s & 3, shift = 2 * j;
        const uint8_t m = (uint8_t)(1u << (half * 4 + j));
        const float d_all = cu_h2f(b + 108);
        const uint8_t *q = b + 32 + half * 32;
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const float dl = d_all * cu_q3k_scale(b + 96, half * 8 + j * 2 + part);
#pragma unroll
            for (int l = 0; l < 16; l++) {
                const int hb = (b[part * 16 + l] & m) ? 0 : 4;
                v[part * 16 + l] = dl * ((int8_t)((q[part * 16 + l] >> shift) & 3) - hb);
            }
        }
    }
};

/* Q4_K: d | dmin | scales[12] | qs[128] (144 bytes per 256). */
template <> struct cu_deq<CERA_TYPE_Q4_K> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + (u >> 3) * 144;
        const int s = (int)(u & 7);
        const float d = cu_h2f(b), dmin = cu_h2f(b + 2);
        int sc, m;
        cu_scale_min_k4(s, b + 4, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        const uint8_t *q = b + 16 + (s >> 1) * 32;
        const int shift = (s & 1) * 4;
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = d1 * ((q[l] >> shift) & 0xF) - m1;
    }
};

/* Q5_K: d | dmin | scales[12] | qh[32] | qs[128] (176 bytes per 256). */
template <> struct cu_deq<CERA_TYPE_Q5_K> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + (u >> 3) * 176;
        const int s = (int)(u & 7);
        const float d = cu_h2f(b), dmin = cu_h2f(b + 2);
        int sc, m;
        cu_scale_min_k4(s, b + 4, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        const uint8_t *qh = b + 16, *q = b + 48 + (s >> 1) * 32;
        const int shift = (s & 1) * 4;
        const uint8_t hm = (uint8_t)(1u << s);
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = d1 * (((q[l] >> shift) & 0xF) + (qh[l] & hm ? 16 : 0)) - m1;
    }
};

/* Q6_K, split at upload: ql[128] | qh[64] per super-block in data (192 aligned bytes),
 * scales[16] (int8) | d in the aux array (18 bytes) — the GGUF block's two parts. */
template <> struct cu_deq<CERA_TYPE_Q6_K> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const int64_t nsb = w.k_pad / 256, blk = row * nsb + (u >> 3);
        const uint8_t *b = w.data + blk * 192;
        const uint8_t *aux = reinterpret_cast<const uint8_t *>(w.scales) + blk * 18;
        const int s = (int)(u & 7), half = s >> 2, qq = s & 3;
        const float d = cu_h2f(aux + 16);
        const uint8_t *ql = b + half * 64 + (qq & 1) * 32, *qh = b + 128 + half * 32;
        const int8_t *sc = reinterpret_cast<const int8_t *>(aux) + half * 8 + 2 * qq;
        const int nshift = (qq >> 1) * 4, hshift = 2 * qq;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int q = (int)(int8_t)(((ql[l] >> nshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
            v[l] = d * sc[l >> 4] * q;
        }
    }
};

/* IQ4_XS: d | scales_h (u16) | scales_l[4] | qs[128] (136 bytes per 256). */
template <> struct cu_deq<CERA_TYPE_IQ4_XS> {
    static __device__ __forceinline__ void unit(const cu_wview &w, int64_t row, int64_t u, float *v) {
        const uint8_t *b = w.data + row * w.row_bytes + (u >> 3) * 136;
        const int ib = (int)(u & 7);
        const float d = cu_h2f(b);
        const int scales_h = b[2] | (b[3] << 8);
        const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
        const float dl = d * (ls - 32);
        const uint8_t *q = b + 8 + ib * 16;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = dl * cu_iq4nl(q[j] & 0xf);
            v[j + 16] = dl * cu_iq4nl(q[j] >> 4);
        }
    }
};

/* ---- Programmatic dependent launch (decode) ------------------------------------------
 * Decode kernels start with cu_pdl_enter(): wait until the previous kernel in the stream
 * has finished and its writes are visible (a no-op when launched without the attribute),
 * then let the next kernel be launched right away, so its launch and block scheduling
 * overlap this kernel's run instead of following it. Every access to global memory comes
 * after the wait, so the stream order of reads and writes is unchanged; the one exception
 * is the weights, which no decode kernel writes: the ring matvec (matvec.cu) starts
 * copying them before its wait. */
static __device__ __forceinline__ void cu_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

extern "C" bool cu_pdl_on(void);

/* kernel<<<grid, block, smem, st>>>(args...), with the programmatic-serialization attribute
 * while cu_set_pdl(true) is in force. Returns the launch's error. */
template <typename... KArgs, typename... Args>
static cudaError_t cu_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                             Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    if (cu_pdl_on()) {
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
    }
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* ---- Warp helpers: one 32-value block of llama.cpp's Q8_0, one value per lane. ---- */

static __device__ __forceinline__ float cu_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ int cu_warp_sum_i(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The whole warp quantizes 32 consecutive values (one per lane) into block `blk` of act. */
static __device__ __forceinline__ void cu_quant_block32(float v, int8_t *q, float *d, int32_t *s, int64_t blk,
                                                        int lane) {
    const float amax = cu_warp_max(fabsf(v));
    const float dd = amax / 127.0f;
    const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
    const int qi = (int)roundf(v * id);
    q[blk * 32 + lane] = (int8_t)qi;
    const int sum = cu_warp_sum_i(qi);
    if (lane == 0) {
        d[blk] = __half2float(__float2half(dd));
        s[blk] = sum;
    }
}

/* X(type) for every weight type the backend has kernels for (dispatch switches). */
#define CU_TYPE_LIST(X)                                                                                      \
    X(CERA_TYPE_F32)                                                                                         \
    X(CERA_TYPE_F16)                                                                                         \
    X(CERA_TYPE_BF16)                                                                                        \
    X(CERA_TYPE_Q4_0)                                                                                        \
    X(CERA_TYPE_Q4_1)                                                                                        \
    X(CERA_TYPE_Q5_0)                                                                                        \
    X(CERA_TYPE_Q5_1)                                                                                        \
    X(CERA_TYPE_Q8_0)                                                                                        \
    X(CERA_TYPE_Q2_K)                                                                                        \
    X(CERA_TYPE_Q3_K)                                                                                        \
    X(CERA_TYPE_Q4_K)                                                                                        \
    X(CERA_TYPE_Q5_K)                                                                                        \
    X(CERA_TYPE_Q6_K)                                                                                        \
    X(CERA_TYPE_IQ4_NL)                                                                                      \
    X(CERA_TYPE_IQ4_XS)

#endif
