/*
 * matvec.cu — the decode matrix-vector products, the part of a decode step that streams
 * the weights and so sets its speed.
 *
 * One block of 8 warps computes 32 consecutive output rows (4 per warp; for the SwiGLU
 * epilogue 4 gate and 4 up rows per warp). Within a warp the lanes walk the row in
 * 16-byte units, so each load instruction reads 512 contiguous bytes of a row; weights are
 * loaded with the streaming cache hint (read once, must not evict the activation), the
 * activation through the read-only path (every warp reads it).
 *   Q4_0 / Q8_0: split layout, int8 activations, dp4a (one instruction per 4 weights);
 *                the Q4_0 offset of 8 is applied through the activation block's quant sum.
 *   F16 / BF16 / F32: 8 (4) weights per lane-step against the f32 activation.
 *   other types: each lane decodes whole 32-element units (quant.cuh) against f32.
 * The 32 results meet in shared memory and one warp runs the epilogue: store, residual
 * add, or SwiGLU with the int8 quantization of its 32 outputs (one quant block), so the
 * next matvec reads a ready activation.
 */
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/quant.cuh"

#define MV_WARPS 8
#define MV_ROWS  4 /* rows per warp (per segment) */
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
};

static __device__ __forceinline__ int4 ld_stream(const void *p) {
    return __ldcs(static_cast<const int4 *>(p));
}

/* acc[r] += dot(row rows[r] of (r < NA ? wa : wb), x), partial per lane. */
template <int T> struct mv_dot {
    template <int NR, int NA>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const int64_t units = p.k_pad / 32;
        for (int64_t u = lane; u < units; u += 32) {
            float x[32];
            const float4 *xp = reinterpret_cast<const float4 *>(p.xf + u * 32);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float4 f = __ldg(xp + i);
                x[4 * i] = f.x, x[4 * i + 1] = f.y, x[4 * i + 2] = f.z, x[4 * i + 3] = f.w;
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                float v[32];
                cu_deq<T>::unit(r < NA ? wa : wb, rows[r], u, v);
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < 32; j++) s += v[j] * x[j];
                acc[r] += s;
            }
        }
    }
};

template <> struct mv_dot<CERA_TYPE_Q4_0> {
    template <int NR, int NA>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const int64_t nb = p.k_pad / 32;
        const uint8_t *q[NR];
        const __half *d[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const cu_wview &w = r < NA ? wa : wb;
            q[r] = w.data + rows[r] * nb * 16;
            d[r] = w.scales + rows[r] * nb;
        }
#pragma unroll 2
        for (int64_t b = lane; b < nb; b += 32) {
            const int4 xa = __ldg(reinterpret_cast<const int4 *>(p.xq + b * 32));
            const int4 xb = __ldg(reinterpret_cast<const int4 *>(p.xq + b * 32 + 16));
            const float xd = __ldg(p.xd + b);
            const int xs8 = 8 * __ldg(p.xs + b);
            int4 wq[NR];
            float wd[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                wq[r] = ld_stream(q[r] + b * 16);
                wd[r] = __half2float(__ldcs(d[r] + b));
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const int4 w = wq[r];
                int s = __dp4a(w.x & 0x0F0F0F0F, xa.x, 0);
                s = __dp4a(w.y & 0x0F0F0F0F, xa.y, s);
                s = __dp4a(w.z & 0x0F0F0F0F, xa.z, s);
                s = __dp4a(w.w & 0x0F0F0F0F, xa.w, s);
                s = __dp4a((w.x >> 4) & 0x0F0F0F0F, xb.x, s);
                s = __dp4a((w.y >> 4) & 0x0F0F0F0F, xb.y, s);
                s = __dp4a((w.z >> 4) & 0x0F0F0F0F, xb.z, s);
                s = __dp4a((w.w >> 4) & 0x0F0F0F0F, xb.w, s);
                acc[r] += (float)(s - xs8) * wd[r] * xd;
            }
        }
    }
};

template <> struct mv_dot<CERA_TYPE_Q8_0> {
    template <int NR, int NA>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const int64_t nb = p.k_pad / 32, nh = 2 * nb;
        const uint8_t *q[NR];
        const __half *d[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const cu_wview &w = r < NA ? wa : wb;
            q[r] = w.data + rows[r] * nb * 32;
            d[r] = w.scales + rows[r] * nb;
        }
        // a lane takes half a block (16 quants) per step: 16-byte loads, consecutive across lanes
#pragma unroll 2
        for (int64_t hb = lane; hb < nh; hb += 32) {
            const int4 xa = __ldg(reinterpret_cast<const int4 *>(p.xq + hb * 16));
            const float xd = __ldg(p.xd + (hb >> 1));
            int4 wq[NR];
            float wd[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                wq[r] = ld_stream(q[r] + hb * 16);
                wd[r] = __half2float(__ldg(d[r] + (hb >> 1)));
            }
#pragma unroll
            for (int r = 0; r < NR; r++) {
                int s = __dp4a(wq[r].x, xa.x, 0);
                s = __dp4a(wq[r].y, xa.y, s);
                s = __dp4a(wq[r].z, xa.z, s);
                s = __dp4a(wq[r].w, xa.w, s);
                acc[r] += (float)s * (wd[r] * xd);
            }
        }
    }
};

template <> struct mv_dot<CERA_TYPE_F16> {
    template <int NR, int NA>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const uint8_t *q[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const cu_wview &w = r < NA ? wa : wb;
            q[r] = w.data + rows[r] * w.row_bytes;
        }
#pragma unroll 2
        for (int64_t i = lane * 8; i < p.k_pad; i += 256) {
            const float4 x0 = __ldg(reinterpret_cast<const float4 *>(p.xf + i));
            const float4 x1 = __ldg(reinterpret_cast<const float4 *>(p.xf + i + 4));
            int4 wq[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) wq[r] = ld_stream(q[r] + i * 2);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const __half2 *h = reinterpret_cast<const __half2 *>(&wq[r]);
                const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
                const float2 c = __half22float2(h[2]), e = __half22float2(h[3]);
                acc[r] += a.x * x0.x + a.y * x0.y + b.x * x0.z + b.y * x0.w + c.x * x1.x + c.y * x1.y +
                          e.x * x1.z + e.y * x1.w;
            }
        }
    }
};

template <> struct mv_dot<CERA_TYPE_BF16> {
    template <int NR, int NA>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const uint8_t *q[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const cu_wview &w = r < NA ? wa : wb;
            q[r] = w.data + rows[r] * w.row_bytes;
        }
#pragma unroll 2
        for (int64_t i = lane * 8; i < p.k_pad; i += 256) {
            const float4 x0 = __ldg(reinterpret_cast<const float4 *>(p.xf + i));
            const float4 x1 = __ldg(reinterpret_cast<const float4 *>(p.xf + i + 4));
            int4 wq[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) wq[r] = ld_stream(q[r] + i * 2);
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint32_t u0 = wq[r].x, u1 = wq[r].y, u2 = wq[r].z, u3 = wq[r].w;
                acc[r] += __uint_as_float(u0 << 16) * x0.x + __uint_as_float(u0 & 0xffff0000u) * x0.y +
                          __uint_as_float(u1 << 16) * x0.z + __uint_as_float(u1 & 0xffff0000u) * x0.w +
                          __uint_as_float(u2 << 16) * x1.x + __uint_as_float(u2 & 0xffff0000u) * x1.y +
                          __uint_as_float(u3 << 16) * x1.z + __uint_as_float(u3 & 0xffff0000u) * x1.w;
            }
        }
    }
};

template <> struct mv_dot<CERA_TYPE_F32> {
    template <int NR, int NA>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const uint8_t *q[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const cu_wview &w = r < NA ? wa : wb;
            q[r] = w.data + rows[r] * w.row_bytes;
        }
#pragma unroll 2
        for (int64_t i = lane * 4; i < p.k_pad; i += 128) {
            const float4 x = __ldg(reinterpret_cast<const float4 *>(p.xf + i));
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const float4 w = __ldcs(reinterpret_cast<const float4 *>(q[r] + i * 4));
                acc[r] += w.x * x.x + w.y * x.y + w.z * x.z + w.w * x.w;
            }
        }
    }
};

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int T, int EPI> __global__ void __launch_bounds__(MV_WARPS * 32) k_matvec(const mv_params p) {
    constexpr int NR = EPI == CU_MV_SWIGLU ? 2 * MV_ROWS : MV_ROWS;
    constexpr int NA = MV_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int seg = 0;
    while (seg + 1 < p.n_segs && (int)blockIdx.x >= p.tile_start[seg + 1]) seg++;
    if (EPI == CU_MV_SWIGLU) seg = 0;
    const cu_wview &wa = p.w[seg];
    const cu_wview &wb = EPI == CU_MV_SWIGLU ? p.w[1] : p.w[seg];
    const int64_t tile_row0 = (int64_t)(blockIdx.x - p.tile_start[seg]) * MV_TILE;
    int64_t rows[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int64_t row = tile_row0 + warp * MV_ROWS + (r % MV_ROWS);
        rows[r] = row < wa.n ? row : wa.n - 1; // clamped rows compute, their results are dropped
    }
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    mv_dot<T>::template run<NR, NA>(wa, wb, rows, p, lane, acc);

    __shared__ float res[2][MV_TILE];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) res[r / MV_ROWS][warp * MV_ROWS + (r % MV_ROWS)] = v;
    }
    __syncthreads();
    if (warp != 0) return;
    const int64_t row = tile_row0 + lane;
    const bool valid = row < wa.n;
    if (EPI == CU_MV_SWIGLU) {
        float v = 0.0f;
        if (valid) {
            const float g = res[0][lane] + (p.bias[0] ? p.bias[0][row] : 0.0f);
            const float u = res[1][lane] + (p.bias[1] ? p.bias[1][row] : 0.0f);
            v = g / (1.0f + expf(-g)) * u;
        }
        p.h.f[row] = v;
        if (p.h.q) cu_quant_block32(v, p.h.q, p.h.d, p.h.s, tile_row0 / 32, lane);
        return;
    }
    if (!valid) return;
    const float v = res[0][lane] + (p.bias[seg] ? p.bias[seg][row] : 0.0f);
    if (EPI == CU_MV_ADD)
        p.y[seg][row] += p.scale * v;
    else
        p.y[seg][row] = p.scale * v;
}

template <int T> static void launch_mv(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int grid) {
    switch (epi) {
    case CU_MV_STORE: k_matvec<T, CU_MV_STORE><<<grid, MV_WARPS * 32, 0, st>>>(p); break;
    case CU_MV_ADD: k_matvec<T, CU_MV_ADD><<<grid, MV_WARPS * 32, 0, st>>>(p); break;
    case CU_MV_SWIGLU: k_matvec<T, CU_MV_SWIGLU><<<grid, MV_WARPS * 32, 0, st>>>(p); break;
    }
}

extern "C" cudaError_t cu_matvec(cudaStream_t st, const cu_mv_seg *segs, int n_segs, const cu_act *x,
                                 cu_mv_epilogue epi, float scale, const cu_act *h_out) {
    if (n_segs < 1 || n_segs > 3 || (epi == CU_MV_SWIGLU && (n_segs != 2 || !h_out)))
        return cudaErrorInvalidValue;
    mv_params p = {};
    const cera_type t = segs[0].w->type;
    int tiles = 0;
    for (int i = 0; i < n_segs; i++) {
        if (segs[i].w->type != t || segs[i].w->k_pad != x->k_pad) return cudaErrorInvalidValue;
        p.w[i] = cu_view(segs[i].w);
        p.y[i] = segs[i].y;
        p.bias[i] = segs[i].bias;
        p.tile_start[i] = tiles;
        if (epi != CU_MV_SWIGLU || i == 0) tiles += (int)((segs[i].w->n + MV_TILE - 1) / MV_TILE);
    }
    p.tile_start[n_segs] = tiles;
    p.n_segs = n_segs;
    p.xf = x->f;
    p.xq = x->q;
    p.xd = x->d;
    p.xs = x->s;
    p.k_pad = x->k_pad;
    p.scale = scale;
    if (h_out) p.h = *h_out;
    if (cu_type_uses_q8_act(t) && !x->q) return cudaErrorInvalidValue;
    switch (t) {
#define CU_CASE(T)                                                                                           \
    case T: launch_mv<T>(st, p, epi, tiles); break;
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
