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
 * DRAM idles while blocks start and drain. k_matvec_ring (matvec_ring.cu: variants 2 and 3;
 * Q4_0, Q8_0, F16, BF16, the default for these) runs persistent blocks whose warps stream
 * all their tiles through a cp.async ring in shared memory, several steps deep and across
 * tile boundaries, starting before the previous kernel has finished (see there). mv_variant
 * has the measurements that chose the defaults.
 *
 * Several activation rows (cu_matvec_rows, a decode batch): the same kernels with NX rows
 * of sums per weight row, each weight chunk a lane holds dotted with every row's activation;
 * k_matvec_rows does it for Q4_K and Q6_K, the ring kernel for its types.
 */
#include <stdlib.h>

#include "backend/cuda/matvec.cuh"

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
        return mv_dot8<BF>(w, x0, x1);
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

/* The end of a one-tile block: each warp's sums reduced into shared memory, then warp 0 runs
 * the epilogue of tile blockIdx.x for output row j. */
template <int EPI, int NR>
static __device__ __forceinline__ void mv_finish(const mv_params &p, const float *acc, int warp, int lane,
                                                 int j) {
    __shared__ float res[2][MV_TILE];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) res[r / MV_ROWS][warp * MV_ROWS + (r % MV_ROWS)] = v;
    }
    __syncthreads();
    if (warp == 0) mv_epilogue<EPI>(p, res[0], res[1], (int)blockIdx.x, lane, j);
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
    mv_finish<EPI, NR>(p, acc, warp, lane, 0);
}

/* ---- Several activation rows, K-quants (Q4_K, Q6_K) ------------------------------------
 * The register kernel's loops with NX activation rows: each lane loads its units of the
 * warp's weight rows once and dots them with every x-row, whose int8 units it loads just
 * before use (L1 hits: the block's 16 warps read the same units at about the same time).
 * One unit per lane-step (no prefetch depth): the NX-fold arithmetic per weight byte and
 * the 16 warps per SM keep enough loads in flight, and the registers go to the NX x NR
 * sums. Per x-row the terms and their order are the one-row loops' (mv_dot above): a lane
 * sums units lane, lane + 32, ... and the warp reduces with the same butterfly, so each
 * row's result is the one-row kernel's bit for bit. acc: [NX][NR]. */
template <int T> struct mv_dot_rows;

template <> struct mv_dot_rows<CERA_TYPE_Q4_K> {
    template <int NR, int NA, int NX>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float (*acc)[NR]) {
        MV_ROW_PTRS(wa.row_bytes)
        const int64_t nu = p.k_pad / 32;
        for (int64_t u = lane; u < nu; u += 32) {
            int4 hd[NR], qa[NR], qb[NR];
            const int64_t blk = u >> 3;
            const int s = (int)(u & 7), sh = (s & 1) * 4;
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint8_t *b = q[r] + blk * 144;
                hd[r] = __ldg(reinterpret_cast<const int4 *>(b));
                qa[r] = ld_stream(b + 16 + (s >> 1) * 32);
                qb[r] = ld_stream(b + 32 + (s >> 1) * 32);
            }
            float dsc[NR], dm[NR];
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint32_t w0 = hd[r].y, w1 = hd[r].z, w2 = hd[r].w;
                const int i = s & 3, sb = 8 * i;
                int sc, m;
                if (s < 4) {
                    sc = (w0 >> sb) & 63;
                    m = (w1 >> sb) & 63;
                } else {
                    sc = ((w2 >> sb) & 0xF) | (((w0 >> sb) & 0xFF) >> 6 << 4);
                    m = ((w2 >> sb) & 0xFF) >> 4 | (((w1 >> sb) & 0xFF) >> 6 << 4);
                }
                const float d = __half2float(__ushort_as_half((unsigned short)(hd[r].x & 0xffff)));
                const float dmin = __half2float(__ushort_as_half((unsigned short)((uint32_t)hd[r].x >> 16)));
                dsc[r] = d * sc;
                dm[r] = dmin * m;
            }
#pragma unroll
            for (int j = 0; j < NX; j++) {
                if (j > 0 && j >= p.n_x) break;
                const int8_t *xq = p.xq + j * p.k_pad + u * 32;
                const int4 xa = __ldg(reinterpret_cast<const int4 *>(xq));
                const int4 xb = __ldg(reinterpret_cast<const int4 *>(xq + 16));
                const float xd = __ldg(p.xd + j * nu + u);
                const int xs = __ldg(p.xs + j * nu + u);
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    const int4 a = qa[r], c = qb[r];
                    int t = __dp4a((a.x >> sh) & 0x0F0F0F0F, xa.x, 0);
                    t = __dp4a((a.y >> sh) & 0x0F0F0F0F, xa.y, t);
                    t = __dp4a((a.z >> sh) & 0x0F0F0F0F, xa.z, t);
                    t = __dp4a((a.w >> sh) & 0x0F0F0F0F, xa.w, t);
                    t = __dp4a((c.x >> sh) & 0x0F0F0F0F, xb.x, t);
                    t = __dp4a((c.y >> sh) & 0x0F0F0F0F, xb.y, t);
                    t = __dp4a((c.z >> sh) & 0x0F0F0F0F, xb.z, t);
                    t = __dp4a((c.w >> sh) & 0x0F0F0F0F, xb.w, t);
                    acc[j][r] += xd * (dsc[r] * (float)t - dm[r] * (float)xs);
                }
            }
        }
    }
};

template <> struct mv_dot_rows<CERA_TYPE_Q6_K> {
    template <int NR, int NA, int NX>
    static __device__ __forceinline__ void run(const cu_wview &wa, const cu_wview &wb, const int64_t *rows,
                                               const mv_params &p, int lane, float (*acc)[NR]) {
        const int64_t nu = p.k_pad / 32, nsb = p.k_pad / 256;
        MV_ROW_PTRS(nsb * 192)
        const uint8_t *aux[NR];
#pragma unroll
        for (int r = 0; r < NR; r++)
            aux[r] = reinterpret_cast<const uint8_t *>((r < NA ? wa : wb).scales) + rows[r] * nsb * 18;
        for (int64_t u = lane; u < nu; u += 32) {
            int4 l0[NR], l1[NR], h0[NR], h1[NR];
            float dd[NR];
            int sc0[NR], sc1[NR];
            const int64_t blk = u >> 3;
            const int s = (int)(u & 7), half = s >> 2, qq = s & 3;
#pragma unroll
            for (int r = 0; r < NR; r++) {
                const uint8_t *b = q[r] + blk * 192;
                l0[r] = ld_stream(b + half * 64 + (qq & 1) * 32);
                l1[r] = ld_stream(b + half * 64 + (qq & 1) * 32 + 16);
                h0[r] = ld_stream(b + 128 + half * 32);
                h1[r] = ld_stream(b + 128 + half * 32 + 16);
                const uint8_t *a = aux[r] + blk * 18;
                sc0[r] = (int8_t)__ldg(a + half * 8 + 2 * qq);
                sc1[r] = (int8_t)__ldg(a + half * 8 + 2 * qq + 1);
                dd[r] = __half2float(__ldg(reinterpret_cast<const __half *>(a + 16)));
            }
            const int ns = (qq >> 1) * 4, hs = 2 * qq;
#pragma unroll
            for (int j = 0; j < NX; j++) {
                if (j > 0 && j >= p.n_x) break;
                const int8_t *xq = p.xq + j * p.k_pad + u * 32;
                const int4 xa = __ldg(reinterpret_cast<const int4 *>(xq));
                const int4 xb = __ldg(reinterpret_cast<const int4 *>(xq + 16));
                const float xd = __ldg(p.xd + j * nu + u);
                int xs0 = __dp4a(0x01010101, xa.x, 0);
                xs0 = __dp4a(0x01010101, xa.y, xs0);
                xs0 = __dp4a(0x01010101, xa.z, xs0);
                xs0 = __dp4a(0x01010101, xa.w, xs0);
                int xs1 = __dp4a(0x01010101, xb.x, 0);
                xs1 = __dp4a(0x01010101, xb.y, xs1);
                xs1 = __dp4a(0x01010101, xb.z, xs1);
                xs1 = __dp4a(0x01010101, xb.w, xs1);
#pragma unroll
                for (int r = 0; r < NR; r++) {
#define Q6(L, H) ((((L) >> ns) & 0x0F0F0F0F) | ((((H) >> hs) & 0x03030303) << 4))
                    const int4 a = l0[r], b = l1[r], c = h0[r], e = h1[r];
                    int t0 = __dp4a(Q6(a.x, c.x), xa.x, 0);
                    t0 = __dp4a(Q6(a.y, c.y), xa.y, t0);
                    t0 = __dp4a(Q6(a.z, c.z), xa.z, t0);
                    t0 = __dp4a(Q6(a.w, c.w), xa.w, t0);
                    int t1 = __dp4a(Q6(b.x, e.x), xb.x, 0);
                    t1 = __dp4a(Q6(b.y, e.y), xb.y, t1);
                    t1 = __dp4a(Q6(b.z, e.z), xb.z, t1);
                    t1 = __dp4a(Q6(b.w, e.w), xb.w, t1);
#undef Q6
                    acc[j][r] += dd[r] * xd * (float)(sc0[r] * (t0 - 32 * xs0) + sc1[r] * (t1 - 32 * xs1));
                }
            }
        }
    }
};

/* k_matvec's block and tile with NX activation rows: warp j runs x-row j's epilogue. */
template <int T, int EPI, int NX>
__global__ void __launch_bounds__(MV_WARPS * 32, 1) k_matvec_rows(const mv_params p) {
    cu_pdl_enter();
    static_assert(NX >= 1 && NX <= MV_WARPS, "one epilogue warp per activation row");
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
    float acc[NX][NR];
#pragma unroll
    for (int j = 0; j < NX; j++)
#pragma unroll
        for (int r = 0; r < NR; r++) acc[j][r] = 0.0f;
    mv_dot_rows<T>::template run<NR, NA, NX>(wa, wb, rows, p, lane, acc);

    __shared__ float res[2][NX][MV_TILE];
#pragma unroll
    for (int j = 0; j < NX; j++) {
        if (j > 0 && j >= p.n_x) break;
#pragma unroll
        for (int r = 0; r < NR; r++) {
            const float v = warp_sum(acc[j][r]);
            if (lane == 0) res[r / MV_ROWS][j][warp * MV_ROWS + (r % MV_ROWS)] = v;
        }
    }
    __syncthreads();
    if (warp < NX && warp < p.n_x)
        mv_epilogue<EPI>(p, res[0][warp], res[1][warp], (int)blockIdx.x, lane, warp);
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

template <int T, int V>
static cudaError_t launch_mv_v(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int grid) {
    if constexpr (V >= 2) {
        return mv_launch_ring(st, p, (cera_type)T, epi, V, 1, grid);
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

/* Fills p for a launch over segs (checked: types and lengths agree); returns the tile count
 * or -1. */
static int mv_setup(mv_params &p, const cu_mv_seg *segs, int n_segs, const cu_act *x, cu_mv_epilogue epi,
                    float scale, const cu_act *h_out) {
    if (n_segs < 1 || n_segs > 3 || (epi == CU_MV_SWIGLU && (n_segs != 2 || !h_out))) return -1;
    p = mv_params{};
    const cera_type t = segs[0].w->type;
    int tiles = 0;
    for (int i = 0; i < n_segs; i++) {
        if (segs[i].w->type != t || segs[i].w->k_pad != x->k_pad) return -1;
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
    p.n_x = 1;
    if (cu_type_uses_q8_act(t) && !x->q) return -1;
    return tiles;
}

extern "C" cudaError_t cu_matvec(cudaStream_t st, const cu_mv_seg *segs, int n_segs, const cu_act *x,
                                 cu_mv_epilogue epi, float scale, const cu_act *h_out) {
    mv_params p;
    const int tiles = mv_setup(p, segs, n_segs, x, epi, scale, h_out);
    if (tiles < 0) return cudaErrorInvalidValue;
    switch (segs[0].w->type) {
#define CU_CASE(T)                                                                                           \
    case T: return launch_mv<T>(st, p, epi, tiles);
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
}

/* ---- Several activation rows (cu_matvec_rows) --------------------------------------------
 * NX, the kernels' compile-time row count, is n_rows rounded up to 2, 4, 8 or 16 (the rows
 * past n_rows skip their work: a uniform branch); SwiGLU stops at 8, whose 4 weight rows per
 * warp times 16 sums would not fit in 128 registers (ptxas spills them). The ring types always
 * take variant 2 (128 registers: the NX x NR sums need them; variant 3's 64 would spill). */
#define MV_MAX_NX        16
#define MV_MAX_NX_SWIGLU 8

static constexpr bool mv_rows_ok(int t) {
    return mv_ring_ok(t) || t == CERA_TYPE_Q4_K || t == CERA_TYPE_Q6_K;
}

template <int T, int EPI, int NX>
static cudaError_t launch_rows_nx(cudaStream_t st, const mv_params &p, int tiles) {
    if constexpr (mv_ring_ok(T))
        return mv_launch_ring(st, p, (cera_type)T, (cu_mv_epilogue)EPI, 2, NX, tiles);
    else
        return cu_launch(k_matvec_rows<T, EPI, NX>, tiles, MV_WARPS * 32, 0, st, p);
}

template <int T, int EPI> static cudaError_t launch_rows_epi(cudaStream_t st, const mv_params &p, int tiles) {
    if (p.n_x <= 2) return launch_rows_nx<T, EPI, 2>(st, p, tiles);
    if (p.n_x <= 4) return launch_rows_nx<T, EPI, 4>(st, p, tiles);
    if (p.n_x <= 8) return launch_rows_nx<T, EPI, 8>(st, p, tiles);
    if constexpr (EPI != CU_MV_SWIGLU) return launch_rows_nx<T, EPI, 16>(st, p, tiles);
    return cudaErrorInvalidValue;
}

template <int T>
static cudaError_t launch_rows(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int tiles) {
    if constexpr (mv_rows_ok(T)) {
        switch (epi) {
        case CU_MV_STORE: return launch_rows_epi<T, CU_MV_STORE>(st, p, tiles);
        case CU_MV_ADD: return launch_rows_epi<T, CU_MV_ADD>(st, p, tiles);
        case CU_MV_SWIGLU: return launch_rows_epi<T, CU_MV_SWIGLU>(st, p, tiles);
        }
    }
    return cudaErrorInvalidValue;
}

/* Row r of an activation (or of h_out) as an activation of one row. */
static cu_act act_row(const cu_act *a, int r) {
    cu_act o = *a;
    o.f += r * a->k_pad;
    if (o.q) {
        o.q += r * a->k_pad;
        o.d += r * (a->k_pad / 32);
        o.s += r * (a->k_pad / 32);
    }
    return o;
}

extern "C" cudaError_t cu_matvec_rows(cudaStream_t st, const cu_mv_seg *segs, int n_segs, const cu_act *x,
                                      int n_rows, int64_t y_stride, cu_mv_epilogue epi, float scale,
                                      const cu_act *h_out) {
    if (n_rows < 1) return cudaErrorInvalidValue;
    if (n_rows == 1) return cu_matvec(st, segs, n_segs, x, epi, scale, h_out);
    mv_params p;
    const int tiles = mv_setup(p, segs, n_segs, x, epi, scale, h_out);
    if (tiles < 0) return cudaErrorInvalidValue;
    p.y_stride = y_stride;
    const cera_type t = segs[0].w->type;
    bool fast = false;
    switch (t) {
#define CU_CASE(T)                                                                                           \
    case T: fast = mv_rows_ok(T); break;
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
    // groups of up to MV_MAX_NX rows, each one launch reading the weights once; the types without
    // several-row kernels (F32, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS) take the
    // one-row kernel row by row
    const int group = !fast ? 1 : epi == CU_MV_SWIGLU ? MV_MAX_NX_SWIGLU : MV_MAX_NX;
    for (int r0 = 0; r0 < n_rows; r0 += group) {
        const int nx = n_rows - r0 < group ? n_rows - r0 : group;
        const cu_act xr = act_row(x, r0);
        cu_act hr;
        if (h_out) hr = act_row(h_out, r0);
        cu_mv_seg sr[3];
        for (int i = 0; i < n_segs; i++) {
            sr[i] = segs[i];
            if (sr[i].y) sr[i].y += r0 * y_stride;
        }
        cudaError_t e;
        if (nx == 1) {
            e = cu_matvec(st, sr, n_segs, &xr, epi, scale, h_out ? &hr : NULL);
        } else {
            mv_params q = p;
            for (int i = 0; i < n_segs; i++) q.y[i] = sr[i].y;
            q.xf = xr.f;
            q.xq = xr.q;
            q.xd = xr.d;
            q.xs = xr.s;
            if (h_out) q.h = hr;
            q.n_x = nx;
            switch (t) {
#define CU_CASE(T)                                                                                           \
    case T: e = launch_rows<T>(st, q, epi, tiles); break;
                CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
            default: e = cudaErrorInvalidValue;
            }
        }
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

/* ---- Routed experts (cu_matvec_moe) --------------------------------------------------------
 * k_matvec's loops over one expert's rows per slot: block (tile, slot) reads the rows of
 * expert sel[slot] in the stacked weight (every expert's matrix one after another:
 * rows_per_expert rows each, which is what p.w[].n holds here) and the activation row
 * slot / x_div, and runs the epilogue for output row slot. Variant 1's shape (2-deep
 * prefetch in 64 registers, two blocks per SM): an expert's matrix is a few tiles per slot,
 * so the grid is about one block per SM and two resident blocks overlap one's reduction and
 * epilogue with the other's loads. */
template <int T, int EPI>
__global__ void __launch_bounds__(MV_WARPS * 32, 2)
    k_matvec_moe(const mv_params p, const int32_t *sel, int x_div) {
    cu_pdl_enter();
    constexpr int NR = EPI == CU_MV_SWIGLU ? 2 * MV_ROWS : MV_ROWS;
    constexpr int NA = MV_ROWS;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int slot = (int)blockIdx.y;
    const cu_wview &wa = p.w[0];
    const cu_wview &wb = EPI == CU_MV_SWIGLU ? p.w[1] : p.w[0];
    const int64_t first = (int64_t)__ldg(sel + slot) * wa.n;
    const int64_t tile_row0 = (int64_t)blockIdx.x * MV_TILE;
    int64_t rows[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) {
        const int64_t row = tile_row0 + warp * MV_ROWS + (r % MV_ROWS);
        rows[r] = first + (row < wa.n ? row : wa.n - 1); // clamped rows compute, their results are dropped
    }
    // the slot's activation row, as the loops read it
    mv_params x = {};
    const int64_t xr = slot / x_div, kp = p.k_pad;
    x.k_pad = kp;
    x.xf = p.xf + xr * kp;
    if (p.xq) {
        x.xq = p.xq + xr * kp;
        x.xd = p.xd + xr * (kp / 32);
        x.xs = p.xs + xr * (kp / 32);
    }
    float acc[NR];
#pragma unroll
    for (int r = 0; r < NR; r++) acc[r] = 0.0f;
    mv_dot<T>::template run<NR, NA, 2>(wa, wb, rows, x, lane, acc);
    mv_finish<EPI, NR>(p, acc, warp, lane, slot);
}

template <int T>
static cudaError_t launch_moe(cudaStream_t st, const mv_params &p, bool swiglu, dim3 grid, const int32_t *sel,
                              int x_div) {
    if (swiglu) return cu_launch(k_matvec_moe<T, CU_MV_SWIGLU>, grid, MV_WARPS * 32, 0, st, p, sel, x_div);
    return cu_launch(k_matvec_moe<T, CU_MV_STORE>, grid, MV_WARPS * 32, 0, st, p, sel, x_div);
}

extern "C" cudaError_t cu_matvec_moe(cudaStream_t st, const cu_weight *w, const cu_weight *w_up,
                                     int64_t rows_per_expert, const int32_t *sel, int n_slots, int x_div,
                                     const cu_act *x, float *y, int64_t y_stride, const cu_act *h_out) {
    if (n_slots < 1 || n_slots > 65535 || x_div < 1 || rows_per_expert < 1 || w->n % rows_per_expert)
        return cudaErrorInvalidValue;
    const bool swiglu = w_up != NULL;
    const cu_mv_seg segs[2] = {{w, y, NULL}, {w_up, NULL, NULL}};
    mv_params p;
    if (mv_setup(p, segs, swiglu ? 2 : 1, x, swiglu ? CU_MV_SWIGLU : CU_MV_STORE, 1.0f, h_out) < 0)
        return cudaErrorInvalidValue;
    const int tiles = (int)((rows_per_expert + MV_TILE - 1) / MV_TILE);
    for (int i = 0; i < p.n_segs; i++) p.w[i].n = rows_per_expert;
    p.tile_start[1] = p.tile_start[2] = tiles;
    p.y_stride = y_stride;
    const dim3 grid((unsigned)tiles, (unsigned)n_slots);
    switch (w->type) {
#define CU_CASE(T)                                                                                           \
    case T: return launch_moe<T>(st, p, swiglu, grid, sel, x_div);
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
    default: return cudaErrorInvalidValue;
    }
}
