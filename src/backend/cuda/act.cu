/*
 * act.cu — the small kernels around the matrix products: embedding lookup, RMS norm
 * (fused with the int8 quantization of its output), activation quantization, SwiGLU,
 * residual adds, F16/BF16 conversion for cuBLAS, weight dequantization to F16, argmax.
 *
 * The quantization mirrors llama.cpp's quantize_row_q8_0: per 32 values, d = amax / 127,
 * q = round(x / d), and d is kept as its F16 rounding (block_q8_0 stores d as F16), so the
 * int8 dot products give llama.cpp's integer sums.
 */
#include <float.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/quant.cuh"

template <int T>
__global__ void k_get_rows(cu_wview w, const int32_t *rows, int n_rows, float *out, int64_t out_stride,
                           float scale) {
    cu_pdl_enter();
    const int64_t units = w.k_pad / 32;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_rows * units) return;
    const int r = (int)(i / units);
    const int64_t u = i % units;
    int64_t row = rows[r];
    if (row < 0 || row >= w.n) row = 0; // the host validates ids; never read out of bounds
    float v[32];
    cu_deq<T>::unit(w, row, u, v);
    float *o = out + r * out_stride + u * 32;
#pragma unroll
    for (int j = 0; j < 32; j++) o[j] = v[j] * scale;
}

extern "C" cudaError_t cu_get_rows(cudaStream_t st, const cu_weight *w, const int32_t *rows, int n_rows,
                                   float *out, int64_t out_stride, float scale) {
    const int64_t total = n_rows * (w->k_pad / 32);
    const unsigned grid = (unsigned)((total + 127) / 128);
    const cu_wview v = cu_view(w);
    switch (w->type) {
#define CU_CASE(T)                                                                                           \
    case T: return cu_launch(k_get_rows<T>, grid, 128, 0, st, v, rows, n_rows, out, out_stride, scale);
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* One block of 1024 threads per row; a thread owns 4 consecutive elements per 4096, so the
 * row comes in with one round of independent 16-byte loads (a single block is otherwise
 * a chain of dependent load latencies). The sum of squares is kept in double, as ggml's;
 * then y = (x * scale) * weight, and the 8 threads owning a 32-element block quantize it. */
__global__ void __launch_bounds__(1024)
    k_rmsnorm_act(const float *x, int64_t x_stride, const float *weight, float eps, cu_act out) {
    cu_pdl_enter();
    const int row = blockIdx.x, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const float *xr = x + row * x_stride;
    __shared__ double red[32];
    double sum = 0.0;
#pragma unroll 4
    for (int64_t i = 4 * tid; i < out.k; i += 4096) {
        if (i + 4 <= out.k && ((x_stride | (int64_t)(uintptr_t)xr) & 3) == 0 && ((uintptr_t)xr & 15) == 0) {
            const float4 v = *reinterpret_cast<const float4 *>(xr + i);
            sum += (double)(v.x * v.x) + (double)(v.y * v.y) + (double)(v.z * v.z) + (double)(v.w * v.w);
        } else {
            for (int64_t j = i; j < i + 4 && j < out.k; j++) sum += (double)(xr[j] * xr[j]);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        double t = lane < (int)(blockDim.x / 32) ? red[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
        if (lane == 0) red[0] = t;
    }
    __syncthreads();
    const float mean = (float)(red[0] / (double)out.k);
    const float scale = 1.0f / sqrtf(mean + eps);
    float *of = out.f + row * out.k_pad;
    const int64_t nblk = out.k_pad / 32;
    for (int64_t i0 = 0; i0 < out.k_pad; i0 += 4096) { // the same trip count for every thread
        const int64_t i = i0 + 4 * tid;
        const bool on = i < out.k_pad; // whole 8-thread groups (k_pad is a multiple of 32)
        float v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) v[j] = on && i + j < out.k ? (xr[i + j] * scale) * weight[i + j] : 0.0f;
        if (on) *reinterpret_cast<float4 *>(of + i) = make_float4(v[0], v[1], v[2], v[3]);
        if (out.q) {
            // the 8 lanes of a 32-element block: amax, quantize, sum of the quants
            float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
            const float dd = amax / 127.0f;
            const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
            int qi[4], qs = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) qi[j] = (int)roundf(v[j] * id), qs += qi[j];
#pragma unroll
            for (int o = 4; o > 0; o >>= 1) qs += __shfl_xor_sync(0xffffffffu, qs, o);
            if (on) {
                const char4 c = make_char4((signed char)qi[0], (signed char)qi[1], (signed char)qi[2],
                                           (signed char)qi[3]);
                *reinterpret_cast<char4 *>(out.q + row * out.k_pad + i) = c;
                if ((tid & 7) == 0) {
                    out.d[row * nblk + i / 32] = __half2float(__float2half(dd));
                    out.s[row * nblk + i / 32] = qs;
                }
            }
        }
    }
}

extern "C" cudaError_t cu_rmsnorm_act(cudaStream_t st, const float *x, int64_t x_stride, int n_rows,
                                      const float *weight, float eps, const cu_act *out) {
    return cu_launch(k_rmsnorm_act, n_rows, 1024, 0, st, x, x_stride, weight, eps, *out);
}

__global__ void k_quantize_act(cu_act a, int n_rows) {
    cu_pdl_enter();
    const int64_t nblk = a.k_pad / 32;
    const int64_t b = blockIdx.x * (int64_t)(blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (b >= nblk * n_rows) return;
    const int64_t row = b / nblk, bi = b % nblk;
    const int64_t i = bi * 32 + lane;
    const float v = i < a.k ? a.f[row * a.k_pad + i] : 0.0f;
    cu_quant_block32(v, a.q + row * a.k_pad, a.d + row * nblk, a.s + row * nblk, bi, lane);
}

extern "C" cudaError_t cu_quantize_act(cudaStream_t st, const cu_act *act, int n_rows) {
    const int64_t warps = n_rows * (act->k_pad / 32);
    return cu_launch(k_quantize_act, (unsigned)((warps + 7) / 8), 256, 0, st, *act, n_rows);
}

__global__ void k_convert_rows(const float *src, int64_t src_stride, int n_rows, int64_t k, int64_t k_pad,
                               void *dst, bool bf16) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_rows * k_pad) return;
    const int64_t r = i / k_pad, c = i % k_pad;
    const float v = c < k ? src[r * src_stride + c] : 0.0f;
    if (bf16)
        static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16(v);
    else
        static_cast<__half *>(dst)[i] = __float2half(v);
}

extern "C" cudaError_t cu_convert_rows(cudaStream_t st, const float *src, int64_t src_stride, int n_rows,
                                       int64_t k, int64_t k_pad, void *dst, bool bf16) {
    const int64_t total = n_rows * k_pad;
    k_convert_rows<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(src, src_stride, n_rows, k, k_pad, dst,
                                                                    bf16);
    return cudaGetLastError();
}

__global__ void k_add_scaled(float *x, int64_t x_stride, const float *y, int64_t y_stride, const float *bias,
                             int n_rows, int64_t k, float scale) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_rows * k) return;
    const int64_t r = i / k, c = i % k;
    const float v = y[r * y_stride + c] + (bias ? bias[c] : 0.0f);
    x[r * x_stride + c] += scale * v;
}

extern "C" cudaError_t cu_add_scaled(cudaStream_t st, float *x, int64_t x_stride, const float *y,
                                     int64_t y_stride, const float *bias, int n_rows, int64_t k,
                                     float scale) {
    const int64_t total = n_rows * k;
    k_add_scaled<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(x, x_stride, y, y_stride, bias, n_rows, k,
                                                                  scale);
    return cudaGetLastError();
}

static __device__ __forceinline__ float cu_silu(float g) { return g / (1.0f + expf(-g)); }

/* GELU's tanh approximation as llama.cpp's CPU computes it: the input rounded to F16, the
 * result (from 1 + 0.044715 x² contracted to one fused multiply-add) rounded to F16, and
 * the tails 0 and x past ±10 (its table covers the F16 range; the goldens come from it). */
static __device__ __forceinline__ float cu_gelu(float g) {
    if (g <= -10.0f) return 0.0f;
    if (g >= 10.0f) return g;
    const float x = __half2float(__float2half(g));
    const float inner = fmaf(0.044715f * x, x, 1.0f);
    const float y = 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * inner));
    return __half2float(__float2half(y));
}

__global__ void k_glu(const float *g, const float *u, int64_t gu_stride, const float *bg, const float *bu,
                      int n_rows, bool gelu, cu_act h) {
    cu_pdl_enter();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_rows * h.k_pad) return;
    const int64_t r = i / h.k_pad, c = i % h.k_pad;
    float v = 0.0f;
    if (c < h.k) {
        const float gv = g[r * gu_stride + c] + (bg ? bg[c] : 0.0f);
        const float uv = u[r * gu_stride + c] + (bu ? bu[c] : 0.0f);
        v = (gelu ? cu_gelu(gv) : cu_silu(gv)) * uv;
    }
    h.f[i] = v;
}

extern "C" cudaError_t cu_glu(cudaStream_t st, const float *g, const float *u, int64_t gu_stride,
                              const float *bg, const float *bu, int n_rows, bool gelu, const cu_act *h) {
    const int64_t total = n_rows * h->k_pad;
    return cu_launch(k_glu, (unsigned)((total + 255) / 256), 256, 0, st, g, u, gu_stride, bg, bu, n_rows,
                     gelu, *h);
}

__global__ void k_bias_scale(float *y, int64_t stride, const float *bias, int n_rows, int64_t k,
                             float scale) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_rows * k) return;
    const int64_t r = i / k, c = i % k;
    y[r * stride + c] = (y[r * stride + c] + (bias ? bias[c] : 0.0f)) * scale;
}

extern "C" cudaError_t cu_bias_scale(cudaStream_t st, float *y, int64_t stride, const float *bias, int n_rows,
                                     int64_t k, float scale) {
    const int64_t total = n_rows * k;
    k_bias_scale<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(y, stride, bias, n_rows, k, scale);
    return cudaGetLastError();
}

__global__ void __launch_bounds__(1024) k_argmax(const float *x, int n, int32_t *out) {
    cu_pdl_enter();
    float best = -FLT_MAX;
    int bi = 0x7fffffff;
    // independent loads (unrolled), lowest index kept on ties
#pragma unroll 8
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = x[i];
        if (v > best || (v == best && i < bi)) best = v, bi = i;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) best = ov, bi = oi;
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sv[warp] = best, si[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / 32); w++)
            if (sv[w] > best || (sv[w] == best && si[w] < bi)) best = sv[w], bi = si[w];
        *out = bi == 0x7fffffff ? 0 : bi;
    }
}

extern "C" cudaError_t cu_argmax(cudaStream_t st, const float *x, int n, int32_t *out) {
    return cu_launch(k_argmax, 1, 1024, 0, st, x, n, out);
}

/* A thread decodes one 32-element unit; the block's 128 consecutive units (contiguous in
 * dst) meet in shared memory and leave as coalesced 16-byte stores: per-thread 64-byte
 * stores would touch every sector of a warp's span once per 4 bytes. */
template <int T> __global__ void __launch_bounds__(128) k_dequant_f16(cu_wview w, __half *dst) {
    constexpr int RS =
        40; // unit stride in halves: 80 bytes keep 8 consecutive 16-byte stores on distinct banks
    __shared__ __align__(16) __half buf[128 * RS];
    const int64_t units = w.k_pad / 32, total = w.n * units;
    const int64_t u0 = blockIdx.x * (int64_t)128, i = u0 + threadIdx.x;
    if (i < total) {
        float v[32];
        cu_deq<T>::unit(w, i / units, i % units, v);
#pragma unroll
        for (int c = 0; c < 4; c++) {
            __half2 h[4];
#pragma unroll
            for (int j = 0; j < 4; j++) h[j] = __floats2half2_rn(v[c * 8 + 2 * j], v[c * 8 + 2 * j + 1]);
            *reinterpret_cast<int4 *>(buf + threadIdx.x * RS + c * 8) = *reinterpret_cast<const int4 *>(h);
        }
    }
    __syncthreads();
    const int64_t n_units = total - u0 < 128 ? total - u0 : 128;
    int4 *out = reinterpret_cast<int4 *>(dst + u0 * 32);
    for (int c = threadIdx.x; c < n_units * 4; c += 128)
        out[c] = *reinterpret_cast<const int4 *>(buf + (c >> 2) * RS + (c & 3) * 8);
}

extern "C" cudaError_t cu_dequant_f16(cudaStream_t st, const cu_weight *w, void *dst) {
    const int64_t total = w->n * (w->k_pad / 32);
    const unsigned grid = (unsigned)((total + 127) / 128);
    const cu_wview v = cu_view(w);
    __half *d = static_cast<__half *>(dst);
    switch (w->type) {
#define CU_CASE(T)                                                                                           \
    case T: k_dequant_f16<T><<<grid, 128, 0, st>>>(v, d); break;
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
