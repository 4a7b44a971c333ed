/*
 * matvec_ring.cu — the ring kernels of the decode matvec (variants 2 and 3 of matvec.cu; Q4_0,
 * Q8_0, F16, BF16): persistent blocks that stream the weights through cp.async rings in
 * shared memory. NX activation rows (cu_matvec_rows) share each weight chunk a lane reads
 * from its ring: per row the same operations in the same order as with one, so every row's
 * result is the one-row kernel's bit for bit.
 */
#include <stdlib.h>

#include "backend/cuda/matvec.cuh"

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
 * with CERA_CUDA_MV_GRID at the SM count leaves room beside each block for the next matvec's:
 * measured slower than either default (bench/RESULTS.md, "Hiding the decode step's small
 * kernels"), as were the norm run in this kernel's prologue and an earlier launch_dependents. */
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
    static __device__ __forceinline__ X load_x(const mv_params &p, int64_t c, int j) {
        const int8_t *xq = p.xq + j * p.k_pad;
        const int64_t o = j * (p.k_pad / 32) + c;
        X x;
        x.a = __ldg(reinterpret_cast<const int4 *>(xq + c * 32));
        x.b = __ldg(reinterpret_cast<const int4 *>(xq + c * 32 + 16));
        x.d = __ldg(p.xd + o);
        x.s = 8 * __ldg(p.xs + o);
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
    static __device__ __forceinline__ X load_x(const mv_params &p, int64_t c, int j) {
        X x;
        x.a = __ldg(reinterpret_cast<const int4 *>(p.xq + j * p.k_pad + c * 16));
        x.d = __ldg(p.xd + j * (p.k_pad / 32) + (c >> 1));
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
    static __device__ __forceinline__ X load_x(const mv_params &p, int64_t c, int j) {
        const float *xf = p.xf + j * p.k_pad;
        X x;
        x.a = __ldg(reinterpret_cast<const float4 *>(xf + c * 8));
        x.b = __ldg(reinterpret_cast<const float4 *>(xf + c * 8 + 4));
        return x;
    }
    static __device__ __forceinline__ float dot(const int4 w, const X &x, float) {
        return mv_dot8<BF>(w, x.a, x.b);
    }
};
template <> struct mv_ring_type<CERA_TYPE_F16> : mv_ring_half<false> {};
template <> struct mv_ring_type<CERA_TYPE_BF16> : mv_ring_half<true> {};

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

template <int T, int EPI, int V, int NX>
__global__ void __launch_bounds__(MV_WARPS * 32, V == 3 ? 2 : 1) k_matvec_ring(const mv_params p) {
    using R = mv_ring_type<T>;
    constexpr int NR = EPI == CU_MV_SWIGLU ? 2 * MV_ROWS : MV_ROWS;
    constexpr int S = mv_ring_slots(V) / NR;
    static_assert(NX >= 1 && NX <= MV_WARPS, "one epilogue warp per activation row");
    extern __shared__ int4 mv_ring_smem[];   // [MV_WARPS][S][NR][32 lanes]
    __shared__ float res[2][2][NX][MV_TILE]; // [buffer][gate/first, up][x-row][tile row]
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

    float acc[NX][NR]; // [x-row][weight row]
#pragma unroll
    for (int j = 0; j < NX; j++)
#pragma unroll
        for (int r = 0; r < NR; r++) acc[j][r] = 0.0f;
    int ck = 0, buf = 0;
    int64_t cj = 0;
    for (int64_t i0 = 0; i0 < total; i0 += S) {
#pragma unroll
        for (int s = 0; s < S; s++) {
            if (i0 + s >= total) break;
            mv_cp_wait<S - 1>(); // this lane's copies of stage s have landed
            const int64_t c = cj * 32 + lane;
            if (c < nch) {
                int4 w[NR];
                float wd[NR];
#pragma unroll
                for (int r = 0; r < NR; r++) {
                    w[r] = ring[(s * NR + r) * 32];
                    wd[r] = R::SC ? __half2float(sv[s][r]) : 0.0f;
                }
                // each x-row: the same operations, in the same order, as the one-row kernel's
#pragma unroll
                for (int j = 0; j < NX; j++) {
                    if (j > 0 && j >= p.n_x) break;
                    const typename R::X x = R::load_x(p, c, j);
#pragma unroll
                    for (int r = 0; r < NR; r++) acc[j][r] += R::dot(w[r], x, wd[r]);
                }
            }
            refill(s);
            if (++cj == steps) { // end of a tile: reduce, then the epilogue warps store
                cj = 0;
#pragma unroll
                for (int j = 0; j < NX; j++) {
                    if (j > 0 && j >= p.n_x) break;
#pragma unroll
                    for (int r = 0; r < NR; r++) {
                        const float v = warp_sum(acc[j][r]);
                        if (lane == 0) res[buf][r / MV_ROWS][j][warp * MV_ROWS + (r % MV_ROWS)] = v;
                        acc[j][r] = 0.0f;
                    }
                }
                // res[buf] complete; the epilogue warps read res[buf ^ 1] before this barrier
                __syncthreads();
                if (warp < NX && warp < p.n_x) // warp j runs x-row j's epilogue
                    mv_epilogue<EPI>(p, res[buf][0][warp], res[buf][1][warp], (int)blockIdx.x + ck * G, lane,
                                     warp);
                buf ^= 1;
                ck++;
            }
        }
    }
    mv_cp_wait<0>();
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

template <int T, int EPI, int V, int NX>
static cudaError_t launch_ring(cudaStream_t st, const mv_params &p, int tiles) {
    constexpr size_t smem = (size_t)MV_WARPS * mv_ring_slots(V) * 32 * 16;
    static bool attr_set = false; // above 48 KB a kernel must ask for its dynamic shared memory
    if (!attr_set) {
        const cudaError_t e = cudaFuncSetAttribute(k_matvec_ring<T, EPI, V, NX>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        attr_set = true;
    }
    const int most = mv_ring_grid(V == 3 ? 2 : 1);
    const int grid = tiles < most ? tiles : most;
    return cu_launch(k_matvec_ring<T, EPI, V, NX>, grid, MV_WARPS * 32, smem, st, p);
}

template <int T, int EPI, int V>
static cudaError_t ring_nx(cudaStream_t st, const mv_params &p, int nx, int tiles) {
    if constexpr (V == 3) { // 64 registers: one row only
        if (nx == 1) return launch_ring<T, EPI, V, 1>(st, p, tiles);
    } else {
        switch (nx) {
        case 1: return launch_ring<T, EPI, V, 1>(st, p, tiles);
        case 2: return launch_ring<T, EPI, V, 2>(st, p, tiles);
        case 4: return launch_ring<T, EPI, V, 4>(st, p, tiles);
        case 8: return launch_ring<T, EPI, V, 8>(st, p, tiles);
        case 16:
            if constexpr (EPI != CU_MV_SWIGLU) return launch_ring<T, EPI, V, 16>(st, p, tiles);
            break;
        default: break;
        }
    }
    return cudaErrorInvalidValue;
}

template <int T, int V>
static cudaError_t ring_epi(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int nx, int tiles) {
    switch (epi) {
    case CU_MV_STORE: return ring_nx<T, CU_MV_STORE, V>(st, p, nx, tiles);
    case CU_MV_ADD: return ring_nx<T, CU_MV_ADD, V>(st, p, nx, tiles);
    case CU_MV_SWIGLU: return ring_nx<T, CU_MV_SWIGLU, V>(st, p, nx, tiles);
    }
    return cudaErrorInvalidValue;
}

template <int T>
static cudaError_t ring_v(cudaStream_t st, const mv_params &p, cu_mv_epilogue epi, int v, int nx, int tiles) {
    if (v == 3) return ring_epi<T, 3>(st, p, epi, nx, tiles);
    if (v == 2) return ring_epi<T, 2>(st, p, epi, nx, tiles);
    return cudaErrorInvalidValue;
}

cudaError_t mv_launch_ring(cudaStream_t st, const mv_params &p, cera_type t, cu_mv_epilogue epi, int v,
                           int nx, int tiles) {
    switch (t) {
    case CERA_TYPE_Q4_0: return ring_v<CERA_TYPE_Q4_0>(st, p, epi, v, nx, tiles);
    case CERA_TYPE_Q8_0: return ring_v<CERA_TYPE_Q8_0>(st, p, epi, v, nx, tiles);
    case CERA_TYPE_F16: return ring_v<CERA_TYPE_F16>(st, p, epi, v, nx, tiles);
    case CERA_TYPE_BF16: return ring_v<CERA_TYPE_BF16>(st, p, epi, v, nx, tiles);
    default: return cudaErrorInvalidValue;
    }
}
