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
    case T: k_get_rows<T><<<grid, 128, 0, st>>>(v, rows, n_rows, out, out_stride, scale); break;
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

/* One block per row: sum of squares in double (as ggml), then y = (x * scale) * weight. */
__global__ void __launch_bounds__(256)
    k_rmsnorm_act(const float *x, int64_t x_stride, const float *weight, float eps, cu_act out) {
    const int row = blockIdx.x;
    const float *xr = x + row * x_stride;
    __shared__ double red[8];
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < out.k; i += blockDim.x) sum += (double)(xr[i] * xr[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int i = 0; i < (int)(blockDim.x / 32); i++) t += red[i];
        red[0] = t;
    }
    __syncthreads();
    const float mean = (float)(red[0] / (double)out.k);
    const float scale = 1.0f / sqrtf(mean + eps);
    float *of = out.f + row * out.k_pad;
    const int64_t nblk = out.k_pad / 32;
    // each warp takes whole 32-element blocks so it can quantize them
    for (int64_t b = warp; b < nblk; b += blockDim.x / 32) {
        const int64_t i = b * 32 + lane;
        const float v = i < out.k ? (xr[i] * scale) * weight[i] : 0.0f;
        of[i] = v;
        if (out.q)
            cu_quant_block32(v, out.q + row * out.k_pad, out.d + row * nblk, out.s + row * nblk, b, lane);
    }
}

extern "C" cudaError_t cu_rmsnorm_act(cudaStream_t st, const float *x, int64_t x_stride, int n_rows,
                                      const float *weight, float eps, const cu_act *out) {
    k_rmsnorm_act<<<n_rows, 256, 0, st>>>(x, x_stride, weight, eps, *out);
    return cudaGetLastError();
}

__global__ void k_quantize_act(cu_act a, int n_rows) {
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
    k_quantize_act<<<(unsigned)((warps + 7) / 8), 256, 0, st>>>(*act, n_rows);
    return cudaGetLastError();
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

__global__ void k_swiglu(const float *g, const float *u, int64_t gu_stride, const float *bg, const float *bu,
                         int n_rows, cu_act h) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_rows * h.k_pad) return;
    const int64_t r = i / h.k_pad, c = i % h.k_pad;
    float v = 0.0f;
    if (c < h.k) {
        const float gv = g[r * gu_stride + c] + (bg ? bg[c] : 0.0f);
        const float uv = u[r * gu_stride + c] + (bu ? bu[c] : 0.0f);
        v = cu_silu(gv) * uv;
    }
    h.f[i] = v;
}

extern "C" cudaError_t cu_swiglu(cudaStream_t st, const float *g, const float *u, int64_t gu_stride,
                                 const float *bg, const float *bu, int n_rows, const cu_act *h) {
    const int64_t total = n_rows * h->k_pad;
    k_swiglu<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(g, u, gu_stride, bg, bu, n_rows, *h);
    return cudaGetLastError();
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
    float best = -FLT_MAX;
    int bi = 0x7fffffff;
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
    k_argmax<<<1, 1024, 0, st>>>(x, n, out);
    return cudaGetLastError();
}

template <int T> __global__ void k_dequant_f16(cu_wview w, __half *dst) {
    const int64_t units = w.k_pad / 32;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= w.n * units) return;
    float v[32];
    cu_deq<T>::unit(w, i / units, i % units, v);
    __half2 *o = reinterpret_cast<__half2 *>(dst + i * 32);
#pragma unroll
    for (int j = 0; j < 16; j++) o[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
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
