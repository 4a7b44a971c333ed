/*
 * matvec.cuh — what the decode matvec's two kernel files share: the launch parameters, the
 * epilogue every kernel runs per 32-row tile, and the entry into the ring kernels
 * (matvec_ring.cu) for the dispatch in matvec.cu. Internal to those two files.
 */
#ifndef CERA_BACKEND_CUDA_MATVEC_CUH
#define CERA_BACKEND_CUDA_MATVEC_CUH

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/quant.cuh"

#define MV_WARPS 16
#define MV_ROWS  2 /* rows per warp (per segment) */
#define MV_TILE  (MV_WARPS * MV_ROWS)

struct mv_params {
    cu_wview w[3];
    float *y[3];
    const float *bias[3];
    int tile_start[4]; /* first tile of each segment; tile_start[n_segs] = total */
    int n_segs;
    const float *xf;
    const int8_t *xq;
    const float *xd;
    const int32_t *xs;
    int64_t k_pad;
    float scale;
    cu_act h;
    int n_x;          /* activation rows (cu_matvec_rows; 1 for cu_matvec) */
    int64_t y_stride; /* floats between the output rows of x-row j (STORE/ADD) */
};

static __device__ __forceinline__ int4 ld_stream(const void *p) {
    return __ldcs(static_cast<const int4 *>(p));
}

/* F16 / BF16: the dot product of 8 weights (16 bytes) with 8 f32 activations. */
template <bool BF>
static __device__ __forceinline__ float mv_dot8(const int4 w, const float4 x0, const float4 x1) {
    if (BF) {
        const uint32_t u0 = w.x, u1 = w.y, u2 = w.z, u3 = w.w;
        return __uint_as_float(u0 << 16) * x0.x + __uint_as_float(u0 & 0xffff0000u) * x0.y +
               __uint_as_float(u1 << 16) * x0.z + __uint_as_float(u1 & 0xffff0000u) * x0.w +
               __uint_as_float(u2 << 16) * x1.x + __uint_as_float(u2 & 0xffff0000u) * x1.y +
               __uint_as_float(u3 << 16) * x1.z + __uint_as_float(u3 & 0xffff0000u) * x1.w;
    }
    const __half2 *h = reinterpret_cast<const __half2 *>(&w);
    const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
    const float2 c = __half22float2(h[2]), e = __half22float2(h[3]);
    return a.x * x0.x + a.y * x0.y + b.x * x0.z + b.y * x0.w + c.x * x1.x + c.y * x1.y + e.x * x1.z +
           e.y * x1.w;
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The epilogue of one 32-row tile, run by one warp (lane = row in the tile) once the
 * tile's dot products are in res ([gate/first, up][row]). */
template <int EPI>
static __device__ __forceinline__ void mv_epilogue(const mv_params &p, const float *r0, const float *r1,
                                                   int tile, int lane, int j) {
    int seg = 0;
    while (seg + 1 < p.n_segs && tile >= p.tile_start[seg + 1]) seg++;
    const int64_t tile_row0 = (int64_t)(tile - p.tile_start[seg]) * MV_TILE;
    const int64_t row = tile_row0 + lane;
    const bool valid = row < p.w[seg].n;
    if (EPI == CU_MV_SWIGLU) {
        float v = 0.0f;
        if (valid) {
            const float g = r0[lane] + (p.bias[0] ? p.bias[0][row] : 0.0f);
            const float u = r1[lane] + (p.bias[1] ? p.bias[1][row] : 0.0f);
            v = g / (1.0f + expf(-g)) * u;
        }
        const int64_t hk = p.h.k_pad; // x-row j's output is act row j
        p.h.f[j * hk + row] = v;
        if (p.h.q)
            cu_quant_block32(v, p.h.q + j * hk, p.h.d + j * (hk / 32), p.h.s + j * (hk / 32), tile_row0 / 32,
                             lane);
        return;
    }
    if (!valid) return;
    const float v = r0[lane] + (p.bias[seg] ? p.bias[seg][row] : 0.0f);
    float *y = p.y[seg] + j * p.y_stride;
    if (EPI == CU_MV_ADD)
        y[row] += p.scale * v;
    else
        y[row] = p.scale * v;
}

/* The types with a ring kernel (matvec_ring.cu). */
static constexpr bool mv_ring_ok(int t) {
    return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0 || t == CERA_TYPE_F16 || t == CERA_TYPE_BF16;
}

/* Launches the ring kernel of type t (mv_ring_ok), variant v (2 or 3) for nx activation rows
 * (1, 2, 4, 8 or 16, SwiGLU up to 8; variant 3 only 1) over `tiles` tiles. */
cudaError_t mv_launch_ring(cudaStream_t st, const mv_params &p, cera_type t, cu_mv_epilogue epi, int v,
                           int nx, int tiles);

#endif
