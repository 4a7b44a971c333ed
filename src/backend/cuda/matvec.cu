/*
 * matvec.cu — the decode matrix-vector products, the part of a decode step that streams
 * the weights and so sets its speed.
 *
 * One block of 16 warps computes 32 consecutive output rows (2 per warp; for the SwiGLU
 * epilogue 2 gate and 2 up rows per warp). Within a warp the lanes walk the row in
 * 16-byte units, so each load instruction reads 512 contiguous bytes of a row; weights are
 * loaded with the streaming cache hint (read once, must not evict the activation), the
 * activation through the read-only path (every warp reads it).
 *   Q4_0 / Q8_0: split layout, int8 activations, dp4a (one instruction per 4 weights);
 *                the Q4_0 offset of 8 is applied through the activation block's quant sum.
 *   Q4_K / Q6_K: int8 activations and dp4a too (Q6_K split at upload into aligned quants
 *                and a scale array), the per-block mins/offsets through the quant sums.
 *   F16 / BF16 / F32: 8 (4) weights per lane-step against the f32 activation.
 *   other types: each lane decodes whole 32-element units (quant.cuh) against f32.
 * The 32 results meet in shared memory and one warp runs the epilogue: store, residual
 * add, or SwiGLU with the int8 quantization of its 32 outputs (one quant block), so the
 * next matvec reads a ready activation.
 *
 * Two kernels do this. k_matvec (variants 0 and 1, every type) gives each block one tile
 * and keeps the loads in flight in registers: each block is one round trip to memory and
 * DRAM idles while blocks start and drain. k_matvec_ring (variants 2 and 3; Q4_0, Q8_0,
 * F16, BF16, the default for these) runs persistent blocks whose warps stream all their
 * tiles through a cp.async ring in shared memory, several steps deep and across tile
 * boundaries, starting before the previous kernel has finished (see there). mv_variant
 * has the measurements that chose the defaults.
 */
#include <stdlib.h>

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
};

static __device__ __forceinline__ int4 ld_stream(const void *p) {
    return __ldcs(static_cast<const int4 *>(p));
}

/* acc[r] += dot(row rows[r] of (r < NA ? wa : wb), x), partial per lane. */
template <int T> struct mv_dot {
    template <int NR, int NA, int MV_U>
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

/* The fast paths below issue the loads of U steps before using any of them, so each
 * lane keeps U * NR 16-byte weight loads in flight (the decode matvec is latency-bound
 * otherwise: a 4096-row matrix gives only ~16 warps per SM). Out-of-range steps load the
 * last valid unit again (an L1 hit) and are masked out of the sums. */

#define MV_ROW_PTRS(W)                                                                                       \
    const uint8_t *q[NR];                                                                                    \
    _Pragma("unroll") for (int r = 0; r < NR; r++) {                                                         \
        const cu_wview &w = r < NA ? wa : wb;                                                                \
        q[r] = w.data + rows[r] * (W);                                                                       \
    }

template <> struct mv_dot<CERA_TYPE_Q4_0> {
    template <int NR, int NA, int MV_U>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const int64_t nb = p.k_pad / 32;
        MV_ROW_PTRS(nb * 16)
        const __half *d[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) d[r] = (r < NA ? wa : wb).scales + rows[r] * nb;
        for (int64_t b0 = lane; b0 < nb; b0 += 32 * MV_U) {
            int4 wq[MV_U][NR], xa[MV_U], xb[MV_U];
            float wd[MV_U][NR], xd[MV_U];
            int xs[MV_U];
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                const int64_t b = min(b0 + 32 * u, nb - 1);
                xa[u] = __ldg(reinterpret_cast<const int4 *>(p.xq + b * 32));
                xb[u] = __ldg(reinterpret_cast<const int4 *>(p.xq + b * 32 + 16));
                xd[u] = __ldg(p.xd + b);
                xs[u] = 8 * __ldg(p.xs + b);
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    wq[u][r] = ld_stream(q[r] + b * 16);
                    wd[u][r] = __half2float(__ldcs(d[r] + b));
                }
            }
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                if (b0 + 32 * u >= nb) break;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const int4 w = wq[u][r];
                    int s = __dp4a(w.x & 0x0F0F0F0F, xa[u].x, 0);
                    s = __dp4a(w.y & 0x0F0F0F0F, xa[u].y, s);
                    s = __dp4a(w.z & 0x0F0F0F0F, xa[u].z, s);
                    s = __dp4a(w.w & 0x0F0F0F0F, xa[u].w, s);
                    s = __dp4a((w.x >> 4) & 0x0F0F0F0F, xb[u].x, s);
                    s = __dp4a((w.y >> 4) & 0x0F0F0F0F, xb[u].y, s);
                    s = __dp4a((w.z >> 4) & 0x0F0F0F0F, xb[u].z, s);
                    s = __dp4a((w.w >> 4) & 0x0F0F0F0F, xb[u].w, s);
                    acc[r] += (float)(s - xs[u]) * wd[u][r] * xd[u];
                }
            }
        }
    }
};

template <> struct mv_dot<CERA_TYPE_Q8_0> {
    template <int NR, int NA, int MV_U>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const int64_t nb = p.k_pad / 32, nh = 2 * nb;
        MV_ROW_PTRS(nb * 32)
        const __half *d[NR];
#pragma unroll
        for (int r = 0; r < NR; r++) d[r] = (r < NA ? wa : wb).scales + rows[r] * nb;
        // a lane takes half a block (16 quants) per step: 16-byte loads, consecutive across lanes
        for (int64_t h0 = lane; h0 < nh; h0 += 32 * MV_U) {
            int4 wq[MV_U][NR], xa[MV_U];
            float wd[MV_U][NR], xd[MV_U];
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                const int64_t hb = min(h0 + 32 * u, nh - 1);
                xa[u] = __ldg(reinterpret_cast<const int4 *>(p.xq + hb * 16));
                xd[u] = __ldg(p.xd + (hb >> 1));
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    wq[u][r] = ld_stream(q[r] + hb * 16);
                    wd[u][r] = __half2float(__ldg(d[r] + (hb >> 1)));
                }
            }
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                if (h0 + 32 * u >= nh) break;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    int s = __dp4a(wq[u][r].x, xa[u].x, 0);
                    s = __dp4a(wq[u][r].y, xa[u].y, s);
                    s = __dp4a(wq[u][r].z, xa[u].z, s);
                    s = __dp4a(wq[u][r].w, xa[u].w, s);
                    acc[r] += (float)s * (wd[u][r] * xd[u]);
                }
            }
        }
    }
};

/* F16 / BF16: 8 weights (16 bytes) per lane-step against 8 f32 activations. */
template <bool BF> struct mv_dot_half {
    static __device__ __forceinline__ float dot8(const int4 w, const float4 x0, const float4 x1) {
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
    template <int NR, int NA, int MV_U>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        MV_ROW_PTRS(wa.row_bytes)
        const int64_t n8 = p.k_pad / 8;
        for (int64_t i0 = lane; i0 < n8; i0 += 32 * MV_U) {
            int4 wq[MV_U][NR];
            float4 x0[MV_U], x1[MV_U];
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                const int64_t i = min(i0 + 32 * u, n8 - 1);
                x0[u] = __ldg(reinterpret_cast<const float4 *>(p.xf + i * 8));
                x1[u] = __ldg(reinterpret_cast<const float4 *>(p.xf + i * 8 + 4));
#pragma unroll
                for (int r = 0; r < NR; r++) wq[u][r] = ld_stream(q[r] + i * 16);
            }
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                if (i0 + 32 * u >= n8) break;
#pragma unroll
                for (int r = 0; r < NR; r++) acc[r] += dot8(wq[u][r], x0[u], x1[u]);
            }
        }
    }
};
template <> struct mv_dot<CERA_TYPE_F16> : mv_dot_half<false> {};
template <> struct mv_dot<CERA_TYPE_BF16> : mv_dot_half<true> {};

template <> struct mv_dot<CERA_TYPE_F32> {
    template <int NR, int NA, int MV_U>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        MV_ROW_PTRS(wa.row_bytes)
        const int64_t n4 = p.k_pad / 4;
        for (int64_t i0 = lane; i0 < n4; i0 += 32 * MV_U) {
            float4 wv[MV_U][NR], xv[MV_U];
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                const int64_t i = min(i0 + 32 * u, n4 - 1);
                xv[u] = __ldg(reinterpret_cast<const float4 *>(p.xf + i * 4));
#pragma unroll
                for (int r = 0; r < NR; r++)
                    wv[u][r] = __ldcs(reinterpret_cast<const float4 *>(q[r] + i * 16));
            }
#pragma unroll
            for (int u = 0; u < MV_U; u++) {
                if (i0 + 32 * u >= n4) break;
#pragma unroll
                for (int r = 0; r < NR; r++)
                    acc[r] += wv[u][r].x * xv[u].x + wv[u][r].y * xv[u].y + wv[u][r].z * xv[u].z +
                              wv[u][r].w * xv[u].w;
            }
        }
    }
};

/* Q4_K with int8 activations: per 32-element unit, d*sc * sum(q * xq) - dmin*m * sum(xq),
 * times the activation block's scale. A unit's quants are 32 aligned bytes of its
 * 144-byte super-block, whose 16-byte header (d, dmin, packed scales) the 8 lanes of a
 * super-block read together. */
template <> struct mv_dot<CERA_TYPE_Q4_K> {
    template <int NR, int NA, int MV_U>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        MV_ROW_PTRS(wa.row_bytes)
        const int64_t nu = p.k_pad / 32;
        for (int64_t u0 = lane; u0 < nu; u0 += 32 * 2) {
            int4 hd[2][NR], qa[2][NR], qb[2][NR], xa[2], xb[2];
            float xd[2];
            int xs[2];
#pragma unroll
            for (int v = 0; v < 2; v++) {
                const int64_t u = min(u0 + 32 * v, nu - 1);
                xa[v] = __ldg(reinterpret_cast<const int4 *>(p.xq + u * 32));
                xb[v] = __ldg(reinterpret_cast<const int4 *>(p.xq + u * 32 + 16));
                xd[v] = __ldg(p.xd + u);
                xs[v] = __ldg(p.xs + u);
                const int64_t blk = u >> 3, s = u & 7;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const uint8_t *b = q[r] + blk * 144;
                    hd[v][r] = __ldg(reinterpret_cast<const int4 *>(b));
                    qa[v][r] = ld_stream(b + 16 + (s >> 1) * 32);
                    qb[v][r] = ld_stream(b + 32 + (s >> 1) * 32);
                }
            }
#pragma unroll
            for (int v = 0; v < 2; v++) {
                if (u0 + 32 * v >= nu) break;
                const int s = (int)((u0 + 32 * v) & 7), sh = (s & 1) * 4;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    // get_scale_min_k4 on the header's words (no byte array: it would go to local memory)
                    const uint32_t w0 = hd[v][r].y, w1 = hd[v][r].z, w2 = hd[v][r].w;
                    const int i = s & 3, sb = 8 * i;
                    int sc, m;
                    if (s < 4) {
                        sc = (w0 >> sb) & 63;
                        m = (w1 >> sb) & 63;
                    } else {
                        sc = ((w2 >> sb) & 0xF) | (((w0 >> sb) & 0xFF) >> 6 << 4);
                        m = ((w2 >> sb) & 0xFF) >> 4 | (((w1 >> sb) & 0xFF) >> 6 << 4);
                    }
                    const float d = __half2float(__ushort_as_half((unsigned short)(hd[v][r].x & 0xffff)));
                    const float dmin =
                        __half2float(__ushort_as_half((unsigned short)((uint32_t)hd[v][r].x >> 16)));
                    const int4 a = qa[v][r], c = qb[v][r];
                    int t = __dp4a((a.x >> sh) & 0x0F0F0F0F, xa[v].x, 0);
                    t = __dp4a((a.y >> sh) & 0x0F0F0F0F, xa[v].y, t);
                    t = __dp4a((a.z >> sh) & 0x0F0F0F0F, xa[v].z, t);
                    t = __dp4a((a.w >> sh) & 0x0F0F0F0F, xa[v].w, t);
                    t = __dp4a((c.x >> sh) & 0x0F0F0F0F, xb[v].x, t);
                    t = __dp4a((c.y >> sh) & 0x0F0F0F0F, xb[v].y, t);
                    t = __dp4a((c.z >> sh) & 0x0F0F0F0F, xb[v].z, t);
                    t = __dp4a((c.w >> sh) & 0x0F0F0F0F, xb[v].w, t);
                    acc[r] += xd[v] * (d * sc * (float)t - dmin * m * (float)xs[v]);
                }
            }
        }
    }
};

/* Q6_K in the split layout (ql | qh: 192 aligned bytes per super-block; scales and d
 * apart) with int8 activations; the unit's two 16-element halves have their own scales. */
template <> struct mv_dot<CERA_TYPE_Q6_K> {
    template <int NR, int NA, int MV_U>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float *acc) {
        const int64_t nu = p.k_pad / 32, nsb = p.k_pad / 256;
        MV_ROW_PTRS(nsb * 192)
        const uint8_t *aux[NR];
#pragma unroll
        for (int r = 0; r < NR; r++)
            aux[r] = reinterpret_cast<const uint8_t *>((r < NA ? wa : wb).scales) + rows[r] * nsb * 18;
        for (int64_t u0 = lane; u0 < nu; u0 += 32 * 2) {
            int4 l0[2][NR], l1[2][NR], h0[2][NR], h1[2][NR], xa[2], xb[2];
            float xd[2], dd[2][NR];
            int sc0[2][NR], sc1[2][NR];
#pragma unroll
            for (int v = 0; v < 2; v++) {
                const int64_t u = min(u0 + 32 * v, nu - 1);
                xa[v] = __ldg(reinterpret_cast<const int4 *>(p.xq + u * 32));
                xb[v] = __ldg(reinterpret_cast<const int4 *>(p.xq + u * 32 + 16));
                xd[v] = __ldg(p.xd + u);
                const int64_t blk = u >> 3;
                const int s = (int)(u & 7), half = s >> 2, qq = s & 3;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const uint8_t *b = q[r] + blk * 192;
                    l0[v][r] = ld_stream(b + half * 64 + (qq & 1) * 32);
                    l1[v][r] = ld_stream(b + half * 64 + (qq & 1) * 32 + 16);
                    h0[v][r] = ld_stream(b + 128 + half * 32);
                    h1[v][r] = ld_stream(b + 128 + half * 32 + 16);
                    const uint8_t *a = aux[r] + blk * 18;
                    sc0[v][r] = (int8_t)__ldg(a + half * 8 + 2 * qq);
                    sc1[v][r] = (int8_t)__ldg(a + half * 8 + 2 * qq + 1);
                    dd[v][r] = __half2float(__ldg(reinterpret_cast<const __half *>(a + 16)));
                }
            }
#pragma unroll
            for (int v = 0; v < 2; v++) {
                if (u0 + 32 * v >= nu) break;
                const int qq = (int)((u0 + 32 * v) & 3), ns = (qq >> 1) * 4, hs = 2 * qq;
                int xs0 = __dp4a(0x01010101, xa[v].x, 0);
                xs0 = __dp4a(0x01010101, xa[v].y, xs0);
                xs0 = __dp4a(0x01010101, xa[v].z, xs0);
                xs0 = __dp4a(0x01010101, xa[v].w, xs0);
                int xs1 = __dp4a(0x01010101, xb[v].x, 0);
                xs1 = __dp4a(0x01010101, xb[v].y, xs1);
                xs1 = __dp4a(0x01010101, xb[v].z, xs1);
                xs1 = __dp4a(0x01010101, xb[v].w, xs1);
#pragma unroll
                for (int r = 0; r < NR; r++) {
#define Q6(L, H) ((((L) >> ns) & 0x0F0F0F0F) | ((((H) >> hs) & 0x03030303) << 4))
                    const int4 a = l0[v][r], b = l1[v][r], c = h0[v][r], e = h1[v][r];
                    int t0 = __dp4a(Q6(a.x, c.x), xa[v].x, 0);
                    t0 = __dp4a(Q6(a.y, c.y), xa[v].y, t0);
                    t0 = __dp4a(Q6(a.z, c.z), xa[v].z, t0);
                    t0 = __dp4a(Q6(a.w, c.w), xa[v].w, t0);
                    int t1 = __dp4a(Q6(b.x, e.x), xb[v].x, 0);
                    t1 = __dp4a(Q6(b.y, e.y), xb[v].y, t1);
                    t1 = __dp4a(Q6(b.z, e.z), xb[v].z, t1);
                    t1 = __dp4a(Q6(b.w, e.w), xb[v].w, t1);
#undef Q6
                    acc[r] +=
                        dd[v][r] * xd[v] * (float)(sc0[v][r] * (t0 - 32 * xs0) + sc1[v][r] * (t1 - 32 * xs1));
                }
            }
        }
    }
};

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The epilogue of one 32-row tile, run by one warp (lane = row in the tile) once the
 * tile's dot products are in res ([gate/first, up][row]). */
template <int EPI>
static __device__ __forceinline__ void mv_epilogue(const mv_params &p, const float (*res)[MV_TILE], int tile,
                                                   int lane) {
    int seg = 0;
    while (seg + 1 < p.n_segs && tile >= p.tile_start[seg + 1]) seg++;
    const int64_t tile_row0 = (int64_t)(tile - p.tile_start[seg]) * MV_TILE;
    const int64_t row = tile_row0 + lane;
    const bool valid = row < p.w[seg].n;
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

/* V selects the latency-hiding shape: 0 = 4-deep prefetch, one 16-warp block per SM (up to
 * 128 registers); 1 = 2-deep prefetch in 64 registers, two blocks per SM (a block's
 * reduction and epilogue then overlap the other's loads). 2 and 3 are k_matvec_ring. */
template <int T, int EPI, int V>
__global__ void __launch_bounds__(MV_WARPS * 32, V == 1 ? 2 : 1) k_matvec(const mv_params p) {
    cu_pdl_enter();
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
    mv_dot<T>::template run<NR, NA, V == 1 ? 2 : 4>(wa, wb, rows, p, lane, acc);

    __shared__ float res[2][MV_TILE];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) res[r / MV_ROWS][warp * MV_ROWS + (r % MV_ROWS)] = v;
    }
    __syncthreads();
    if (warp == 0) mv_epilogue<EPI>(p, res, (int)blockIdx.x, lane);
}

/* ---- Ring kernels (variants 2 and 3) -----------------------------------------------------
 * Persistent blocks (as many as fit at once) take tiles blockIdx.x, + gridDim.x, ...; each
 * warp streams its rows of all its tiles, one after the other, through a ring of S stages
 * in shared memory filled by cp.async: a lane copies its 16 bytes of each row per step
 * (a warp: 512 contiguous bytes per row) and later reads back exactly those, so a lane
 * only waits for its own copies (cp.async.wait_group) and no barrier is needed between
 * the warps. A stage is refilled as soon as it is read, S steps ahead, across the tile
 * boundaries, so the bytes in flight stay constant (S * rows * 512 per warp) without
 * holding registers, and the first S steps are issued before griddepcontrol.wait: the
 * weights are never written by the decode kernels, so they can stream while the previous
 * kernel finishes. At the end of each tile the block reduces and one warp runs the
 * epilogue while the ring keeps filling.
 *   Variant 2: 16 stage-rows per warp (128 KB of ring per block), one block per SM.
 *   Variant 3: 12 stage-rows per warp (96 KB), 64 registers, two blocks per SM.
 * Either way the grid fills every SM, so a matvec that follows another one only gets its
 * blocks resident (and its prologue streaming) as the previous one's blocks leave; the
 * overlap is full after the small kernels (norm, RoPE), which leave the SMs free. Variant 3
 * with CERA_CUDA_MV_GRID at the SM count would leave room beside each block: not measured. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MV_CP_ASYNC 1
#endif

/* 16 bytes from global to shared memory, asynchronously; zeros when !valid. */
static __device__ __forceinline__ void mv_cp16(int4 *smem, const void *gmem, bool valid) {
#ifdef MV_CP_ASYNC
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(gmem), "r"(valid ? 16 : 0)
                 : "memory");
#else
    *smem = valid ? *static_cast<const int4 *>(gmem) : make_int4(0, 0, 0, 0);
#endif
}

static __device__ __forceinline__ void mv_cp_commit() {
#ifdef MV_CP_ASYNC
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> static __device__ __forceinline__ void mv_cp_wait() {
#ifdef MV_CP_ASYNC
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* Per type: a row is `chunks` 16-byte chunks; the activation a chunk needs (X); its scale
 * (SC: an F16 per chunk, index sidx) and the chunk's dot product. */
template <int T> struct mv_ring_type;

template <> struct mv_ring_type<CERA_TYPE_Q4_0> {
    static constexpr bool SC = true;
    struct X {
        int4 a, b;
        float d;
        int s;
    };
    static __device__ __forceinline__ int64_t chunks(int64_t k) { return k / 32; }
    static __device__ __forceinline__ int64_t sidx(int64_t c) { return c; }
    static __device__ __forceinline__ X load_x(const mv_params &p, int64_t c) {
        X x;
        x.a = __ldg(reinterpret_cast<const int4 *>(p.xq + c * 32));
        x.b = __ldg(reinterpret_cast<const int4 *>(p.xq + c * 32 + 16));
        x.d = __ldg(p.xd + c);
        x.s = 8 * __ldg(p.xs + c);
        return x;
    }
    static __device__ __forceinline__ float dot(const int4 w, const X &x, float d) {
        int s = __dp4a(w.x & 0x0F0F0F0F, x.a.x, 0);
        s = __dp4a(w.y & 0x0F0F0F0F, x.a.y, s);
        s = __dp4a(w.z & 0x0F0F0F0F, x.a.z, s);
        s = __dp4a(w.w & 0x0F0F0F0F, x.a.w, s);
        s = __dp4a((w.x >> 4) & 0x0F0F0F0F, x.b.x, s);
        s = __dp4a((w.y >> 4) & 0x0F0F0F0F, x.b.y, s);
        s = __dp4a((w.z >> 4) & 0x0F0F0F0F, x.b.z, s);
        s = __dp4a((w.w >> 4) & 0x0F0F0F0F, x.b.w, s);
        return (float)(s - x.s) * d * x.d;
    }
};

template <> struct mv_ring_type<CERA_TYPE_Q8_0> { // a chunk is half a block
    static constexpr bool SC = true;
    struct X {
        int4 a;
        float d;
    };
    static __device__ __forceinline__ int64_t chunks(int64_t k) { return k / 16; }
    static __device__ __forceinline__ int64_t sidx(int64_t c) { return c >> 1; }
    static __device__ __forceinline__ X load_x(const mv_params &p, int64_t c) {
        X x;
        x.a = __ldg(reinterpret_cast<const int4 *>(p.xq + c * 16));
        x.d = __ldg(p.xd + (c >> 1));
        return x;
    }
    static __device__ __forceinline__ float dot(const int4 w, const X &x, float d) {
        int s = __dp4a(w.x, x.a.x, 0);
        s = __dp4a(w.y, x.a.y, s);
        s = __dp4a(w.z, x.a.z, s);
        s = __dp4a(w.w, x.a.w, s);
        return (float)s * (d * x.d);
    }
};

template <bool BF> struct mv_ring_half { // 8 weights per chunk
    static constexpr bool SC = false;
    struct X {
        float4 a, b;
    };
    static __device__ __forceinline__ int64_t chunks(int64_t k) { return k / 8; }
    static __device__ __forceinline__ int64_t sidx(int64_t c) { return c; }
    static __device__ __forceinline__ X load_x(const mv_params &p, int64_t c) {
        X x;
        x.a = __ldg(reinterpret_cast<const float4 *>(p.xf + c * 8));
        x.b = __ldg(reinterpret_cast<const float4 *>(p.xf + c * 8 + 4));
        return x;
    }
    static __device__ __forceinline__ float dot(const int4 w, const X &x, float) {
        return mv_dot_half<BF>::dot8(w, x.a, x.b);
    }
};
template <> struct mv_ring_type<CERA_TYPE_F16> : mv_ring_half<false> {};
template <> struct mv_ring_type<CERA_TYPE_BF16> : mv_ring_half<true> {};

static constexpr bool mv_ring_ok(int t) {
    return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0 || t == CERA_TYPE_F16 || t == CERA_TYPE_BF16;
}

/* Stage-rows per warp of the ring variants (stages = this / rows per warp). */
static constexpr int mv_ring_slots(int v) { return v == 3 ? 12 : 16; }

/* Row pointers of a warp's NR rows in tile t (data and, for the split types, scales). */
template <int T, int EPI, int NR>
static __device__ __forceinline__ void mv_ring_rows(const mv_params &p, int t, int warp, const uint8_t **q,
                                                    const __half **sc) {
    int seg = 0;
    while (seg + 1 < p.n_segs && t >= p.tile_start[seg + 1]) seg++;
    const cu_wview &wa = p.w[seg];
    const cu_wview &wb = EPI == CU_MV_SWIGLU ? p.w[1] : p.w[seg];
    const int64_t row0 = (int64_t)(t - p.tile_start[seg]) * MV_TILE + warp * MV_ROWS;
    const int64_t nb = p.k_pad / 32;
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const cu_wview &w = r < MV_ROWS ? wa : wb;
        const int64_t row = min(row0 + r % MV_ROWS, w.n - 1); // clamped rows compute, results dropped
        q[r] = w.data + row * w.row_bytes;
        if (mv_ring_type<T>::SC) sc[r] = w.scales + row * nb;
    }
}

template <int T, int EPI, int V>
__global__ void __launch_bounds__(MV_WARPS * 32, V == 3 ? 2 : 1) k_matvec_ring(const mv_params p) {
    using R = mv_ring_type<T>;
    constexpr int NR = EPI == CU_MV_SWIGLU ? 2 * MV_ROWS : MV_ROWS;
    constexpr int S = mv_ring_slots(V) / NR;
    extern __shared__ int4 mv_ring_smem[]; // [MV_WARPS][S][NR][32 lanes]
    __shared__ float res[2][2][MV_TILE];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int4 *ring = mv_ring_smem + warp * (S * NR * 32) + lane;
    const int64_t nch = R::chunks(p.k_pad), steps = (nch + 31) / 32;
    const int G = (int)gridDim.x, tiles = p.tile_start[p.n_segs];
    const int my_tiles = (tiles - (int)blockIdx.x + G - 1) / G;
    const int64_t total = my_tiles * steps; // this warp's stream of steps

    // the refill side: stream position (tile rk, step rj) and its row pointers
    const uint8_t *q[NR];
    const __half *sc[NR];
    __half sv[S][NR]; // scales of the chunks in the ring (raw: converted when used)
    int rk = 0;
    int64_t rj = 0, ri = 0;
    mv_ring_rows<T, EPI, NR>(p, (int)blockIdx.x, warp, q, sc);
    auto refill = [&](int s) {
        if (ri < total) {
            const int64_t c = rj * 32 + lane;
            const bool ok = c < nch;
            const int64_t cc = ok ? c : 0;
#pragma unroll
            for (int r = 0; r < NR; r++) mv_cp16(ring + (s * NR + r) * 32, q[r] + cc * 16, ok);
            if constexpr (R::SC) {
#pragma unroll
                for (int r = 0; r < NR; r++) sv[s][r] = __ldcs(sc[r] + R::sidx(cc));
            }
            ri++;
            if (++rj == steps) {
                rj = 0;
                if (++rk < my_tiles) mv_ring_rows<T, EPI, NR>(p, (int)blockIdx.x + rk * G, warp, q, sc);
            }
        }
        mv_cp_commit(); // one group per stage, empty past the end, so the wait count holds
    };
#pragma unroll
    for (int s = 0; s < S; s++) refill(s);
    cu_pdl_enter(); // the activation and the outputs only from here

    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    int ck = 0, buf = 0;
    int64_t cj = 0;
    for (int64_t i0 = 0; i0 < total; i0 += S) {
#pragma unroll
        for (int s = 0; s < S; s++) {
            if (i0 + s >= total) break;
            mv_cp_wait<S - 1>(); // this lane's copies of stage s have landed
            const int64_t c = cj * 32 + lane;
            if (c < nch) {
                const typename R::X x = R::load_x(p, c);
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const int4 w = ring[(s * NR + r) * 32];
                    acc[r] += R::dot(w, x, R::SC ? __half2float(sv[s][r]) : 0.0f);
                }
            }
            refill(s);
            if (++cj == steps) { // end of a tile: reduce, then one warp stores
                cj = 0;
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const float v = warp_sum(acc[r]);
                    if (lane == 0) res[buf][r / MV_ROWS][warp * MV_ROWS + (r % MV_ROWS)] = v;
                    acc[r] = 0.0f;
                }
                __syncthreads(); // res[buf] complete; warp 0 read res[buf ^ 1] before this barrier
                if (warp == 0) mv_epilogue<EPI>(p, res[buf], (int)blockIdx.x + ck * G, lane);
                buf ^= 1;
                ck++;
            }
        }
    }
    mv_cp_wait<0>();
}

/* Measured on an H200 (Llama-2-7B shape, tg128 with all four variants in one session):
 * Q4_0 431 / 419 / 467 / 451 tok/s for variants 0 / 1 / 2 / 3, Q8_0 312 / 310 / 339 / 348,
 * F16 209 / 216 / 222 / 223, BF16 210 / 215 / 222 / 223 (2 then leads at depth 4096 by
 * 2-3 %). CERA_CUDA_MV=0..3 forces one for every type (2 and 3 only where mv_ring_ok; the
 * other types then take 0, their own loops). */
static int mv_variant(int t) {
    static int forced = -2;
    if (forced == -2) {
        const char *e = getenv("CERA_CUDA_MV");
        forced = e && *e >= '0' && *e <= '3' && !e[1] ? *e - '0' : -1;
    }
    if (forced >= 0) return forced;
    switch (t) {
    case CERA_TYPE_Q4_0:
    case CERA_TYPE_F16:
    case CERA_TYPE_BF16: return 2;
    case CERA_TYPE_Q8_0: return 3;
    default: return 0;
    }
}

/* The ring kernels' largest grid: blocks per SM times the multiprocessor count of the
 * current device, or CERA_CUDA_MV_GRID (tests: a few blocks then stream many tiles each). */
static int mv_ring_grid(int per_sm) {
    static int n = 0, forced = -1;
    if (forced < 0) {
        const char *e = getenv("CERA_CUDA_MV_GRID");
        forced = e ? atoi(e) : 0;
        if (forced < 0) forced = 0;
    }
    if (forced > 0) return forced;
    if (n == 0) {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0)
            return per_sm * 132;
        n = v;
    }
    return per_sm * n;
}

template <int T, int EPI, int V>
static cudaError_t launch_ring(cudaStream_t st, const mv_params &p, int tiles) {
    constexpr size_t smem = (size_t)MV_WARPS * mv_ring_slots(V) * 32 * 16;
    static bool attr_set = false; // above 48 KB a kernel must ask for its dynamic shared memory
    if (!attr_set) {
        const cudaError_t e = cudaFuncSetAttribute(k_matvec_ring<T, EPI, V>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    const int most = mv_ring_grid(V == 3 ? 2 : 1);
    const int grid = tiles < most ? tiles : most;
    return cu_launch(k_matvec_ring<T, EPI, V>, grid, MV_WARPS * 32, smem, st, p);
}

template <int T, int V>
static cudaError_t launch_mv_v(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int grid) {
    if constexpr (V >= 2) {
        switch (epi) {
        case CU_MV_STORE: return launch_ring<T, CU_MV_STORE, V>(st, p, grid);
        case CU_MV_ADD: return launch_ring<T, CU_MV_ADD, V>(st, p, grid);
        case CU_MV_SWIGLU: return launch_ring<T, CU_MV_SWIGLU, V>(st, p, grid);
        }
    } else {
        switch (epi) {
        case CU_MV_STORE: return cu_launch(k_matvec<T, CU_MV_STORE, V>, grid, MV_WARPS * 32, 0, st, p);
        case CU_MV_ADD: return cu_launch(k_matvec<T, CU_MV_ADD, V>, grid, MV_WARPS * 32, 0, st, p);
        case CU_MV_SWIGLU: return cu_launch(k_matvec<T, CU_MV_SWIGLU, V>, grid, MV_WARPS * 32, 0, st, p);
        }
    }
    return cudaErrorInvalidValue;
}

template <int T>
static cudaError_t launch_mv(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int grid) {
    if constexpr (mv_ring_ok(T)) {
        switch (mv_variant(T)) {
        case 1: return launch_mv_v<T, 1>(st, p, epi, grid);
        case 2: return launch_mv_v<T, 2>(st, p, epi, grid);
        case 3: return launch_mv_v<T, 3>(st, p, epi, grid);
        default: break;
        }
    }
    return launch_mv_v<T, 0>(st, p, epi, grid);
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
    case T: return launch_mv<T>(st, p, epi, tiles);
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
