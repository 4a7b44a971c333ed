/*
 * mma.cu — the batched decode matmul on the tensor cores: y[r][i] = W_i · x[r] for n_rows
 * activation rows (a decode batch of 2..512 tokens) against a Q4_0 or Q8_0 weight in its split
 * device layout, reading each weight byte once per launch (per 64 activation rows).
 *
 * Why: the decode matvec (matvec.cu) does one dp4a per 4 weights per activation row, so its
 * cost grows with the rows (cu_matvec_rows: 8 rows cost ~3x one row). Here the int8 dot
 * products of a whole 32-element quant block run as one mma.sync m16n8k32 (s8 x s8 -> s32)
 * per 16 weight rows x 8 activation rows, so a step of up to 64 rows stays near the cost of
 * streaming the weights once.
 *
 * Shapes and mapping:
 *   W: n rows of k (nb = k/32 quant blocks per row); quants [n][nb][16 or 32], F16 scales [n][nb].
 *   x: rows of k_pad int8 quants [n_rows][k_pad], F16-rounded scales d [n_rows][nb] (cu_act).
 *   y: row r of the output at y + r * y_stride, n floats (STORE: = scale·dot, ADD: += scale·dot).
 *   A block of 128 threads (4 warps) takes 128 weight rows (each warp two m16 tiles) times one
 *   slice of ksb quant blocks of k (split-K: grid.y slices, as many as fit one wave of resident
 *   blocks, so that a 4096-row weight still fills the GPU and each warp waits on few dependent
 *   loads), for up to 64 activation rows (NT n8 tiles) whose quants and scales for the slice are
 *   copied (cp.async) into shared memory in mma B-fragment order (one 8-byte load per lane),
 *   while the warps' first two steps of weights are already in flight.
 *   A lane loads 16 bytes of weight per weight row per step (4 Q4_0 blocks or 2 Q8_0 blocks
 *   across the 4 lanes of a quad, 512 contiguous bytes per row pair per warp instruction,
 *   streamed with __ldcs) and a 4x4 word transpose inside the quad (4 shuffles) turns them into
 *   mma A fragments: Q4_0 nibbles become int8 q - 8 in registers (so the mma sums are
 *   sum (q - 8) x exactly: the same integer as the matvec's dp4a sum minus 8 * the quant sum).
 *   Each block's int32 sum s is scaled as the matvec does it, acc += ((float)s * d_w) * d_x
 *   (an FMA), in F32 per (weight row, activation row): the terms are the one-row kernel's bit
 *   for bit and only the order of their sum differs (per slice in block order, then the slices
 *   in order). With several slices the partial sums go to a workspace [splits][rows][n] and a
 *   second kernel adds them in slice order and applies the epilogue (deterministic: no atomics).
 *
 * Checked by tests/cuda/test_cuda_mma.c (double reference and cu_matvec per row); timed by
 * cuda_bench --mma (bench/RESULTS.md).
 */
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/quant.cuh"

#define MMA_WARPS         4
#define MMA_MT            2                         /* m16 tiles per warp */
#define MMA_BROWS         (MMA_WARPS * MMA_MT * 16) /* weight rows per block: 128 */
#define MMA_XROWS         64                        /* activation rows per launch */
#define MMA_KSB_MAX       48                        /* quant blocks per k slice, at most */
#define MMA_SMEM(nt, ksb) ((nt)*8 * (ksb)*36)       /* quants (32 B) + scale (4 B) per row per block */

struct mma_params {
    const uint8_t *wq; /* quants [n][nb][BB] */
    const __half *wd;  /* scales [n][nb] */
    int64_t n, nb;
    const int8_t *xq; /* [n_x][k_pad] */
    const float *xd;  /* [n_x][nb] */
    int64_t k_pad;
    int n_x;         /* activation rows of this launch (<= 8 * NT) */
    int ksb, splits; /* quant blocks per slice (a multiple of 4), slices */
    float *y;
    int64_t y_stride;
    float scale;
    bool add;
    float *part; /* splits > 1: [splits][n_x][n] */
};

/* c = A (16x32 s8, row) x B (32x8 s8, col), s32. */
static __device__ __forceinline__ void mma_s8(int c[4], const uint32_t a[4], const uint2 b) {
    c[0] = c[1] = c[2] = c[3] = 0;
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b.x), "r"(b.y));
}

/* In a quad (4 lanes, t = lane & 3) holding 4 words each, M[t][0..3]: returns T[t][j] = M[j][t]
 * (word t of lane j), by two exchanges of 2x2 sub-blocks. */
static __device__ __forceinline__ void quad_transpose(uint32_t v[4], int t) {
    const bool hi = t & 2, odd = t & 1;
    uint32_t s0 = hi ? v[0] : v[2], s1 = hi ? v[1] : v[3];
    uint32_t r0 = __shfl_xor_sync(0xffffffffu, s0, 2), r1 = __shfl_xor_sync(0xffffffffu, s1, 2);
    if (hi)
        v[0] = r0, v[1] = r1;
    else
        v[2] = r0, v[3] = r1;
    s0 = odd ? v[0] : v[1];
    s1 = odd ? v[2] : v[3];
    r0 = __shfl_xor_sync(0xffffffffu, s0, 1);
    r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
    if (odd)
        v[0] = r0, v[2] = r1;
    else
        v[1] = r0, v[3] = r1;
}

/* 4 bytes global -> shared, asynchronously (cp.async.wait_all completes them). */
static __device__ __forceinline__ void cp_async4(void *smem, const void *gmem) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(a), "l"(gmem) : "memory");
}

/* Four Q4_0 nibbles (the low ones of each byte of w & 0x0F0F0F0F) as int8 q - 8, per byte:
 * (q | 0x80) - 8 never borrows across bytes, and ^ 0x80 turns 0x78 + q into q - 8. */
static __device__ __forceinline__ uint32_t q4_s8(uint32_t nib) {
    return ((nib | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
}

/* T: CERA_TYPE_Q4_0 or CERA_TYPE_Q8_0; NT: n8 tiles of activation rows (1, 2, 4 or 8). */
template <int T, int NT> __global__ void __launch_bounds__(MMA_WARPS * 32) mma_q8_kernel(const mma_params p) {
    constexpr bool Q4 = T == CERA_TYPE_Q4_0;
    constexpr int BB = Q4 ? 16 : 32; /* bytes per quant block */
    constexpr int BPS = Q4 ? 4 : 2;  /* quant blocks per 64-byte step of a row */
    extern __shared__ __align__(16) unsigned char mma_smem[];
    uint2 *sq = reinterpret_cast<uint2 *>(mma_smem);                               /* [ksb][NT][32 lanes] */
    float *sd = reinterpret_cast<float *>(mma_smem + (size_t)NT * 8 * p.ksb * 32); /* [ksb][NT][8] */

    const int64_t kb0 = (int64_t)blockIdx.y * p.ksb;
    const int64_t kb_end = min(kb0 + p.ksb, p.nb);

    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int64_t row0 = (int64_t)blockIdx.x * MMA_BROWS + (threadIdx.x >> 5) * (MMA_MT * 16);
    // this lane's 4 weight rows: g, g + 8 of each m16 tile (clamped for the loads)
    const uint8_t *wp[2 * MMA_MT];
    const __half *dp[2 * MMA_MT];
#pragma unroll
    for (int rr = 0; rr < 2 * MMA_MT; rr++) {
        const int64_t row = min(row0 + (rr >> 1) * 16 + (rr & 1) * 8 + g, p.n - 1);
        wp[rr] = p.wq + (row * p.nb + kb0) * BB + 16 * t;
        dp[rr] = p.wd + row * p.nb + kb0;
    }
    float acc[MMA_MT][NT][4];
#pragma unroll
    for (int m = 0; m < MMA_MT; m++)
#pragma unroll
        for (int j = 0; j < NT; j++) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;

    const int steps = (p.ksb + BPS - 1) / BPS;
    // the lane's 16 bytes are of quant block (step * BPS + lb) of the slice
    const int lb = Q4 ? t : t >> 1;
    int4 cur[2 * MMA_MT];
    float dcur[2 * MMA_MT][BPS];
    auto load = [&](int s, int4 *wv, float(*dv)[BPS]) {
        const bool ok = kb0 + s * BPS + lb < kb_end;
#pragma unroll
        for (int rr = 0; rr < 2 * MMA_MT; rr++) {
            wv[rr] =
                ok ? __ldcs(reinterpret_cast<const int4 *>(wp[rr] + (int64_t)s * 64)) : make_int4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < BPS; j++)
                dv[rr][j] = kb0 + s * BPS + j < kb_end ? __half2float(__ldcs(dp[rr] + s * BPS + j)) : 0.0f;
        }
    };
    int4 nxt[2 * MMA_MT];
    float dnxt[2 * MMA_MT][BPS];
    // the weights are no earlier kernel's output: their first two steps' loads go out before
    // the wait and the staging of the activations
    load(0, cur, dcur);
    if (steps > 1) load(1, nxt, dnxt);
    cu_pdl_enter();

    // the slice of every activation row into shared memory (cp.async: every copy in flight at
    // once), zero past the rows and past nb: word w (bytes 4w..4w+3) of block b of row r goes
    // to lane (r % 8) * 4 + w % 4, half w / 4
    {
        uint32_t *sq32 = reinterpret_cast<uint32_t *>(sq);
        for (int r = 0; r < NT * 8; r++)
            for (int j = threadIdx.x; j < p.ksb * 8; j += MMA_WARPS * 32) {
                const int w = j & 7, b = j >> 3;
                uint32_t *dst = sq32 + ((b * NT + (r >> 3)) * 32 + (r & 7) * 4 + (w & 3)) * 2 + (w >> 2);
                if (r < p.n_x && kb0 + b < kb_end)
                    cp_async4(dst, p.xq + r * p.k_pad + (kb0 + b) * 32 + 4 * w);
                else
                    *dst = 0;
            }
        for (int i = threadIdx.x; i < NT * 8 * p.ksb; i += MMA_WARPS * 32) {
            const int b = i % p.ksb, r = i / p.ksb;
            float *dst = sd + (b * NT + (r >> 3)) * 8 + (r & 7);
            if (r < p.n_x && kb0 + b < kb_end)
                cp_async4(dst, p.xd + r * p.nb + kb0 + b);
            else
                *dst = 0.0f;
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
    }
    __syncthreads();

    // step s of the slice from the registers wq / dq (no copies: the two buffers alternate)
    auto compute = [&](int s, const int4 *wq, const float(*dq)[BPS]) {
        uint32_t wv[2 * MMA_MT][4];
#pragma unroll
        for (int rr = 0; rr < 2 * MMA_MT; rr++) {
            wv[rr][0] = wq[rr].x, wv[rr][1] = wq[rr].y, wv[rr][2] = wq[rr].z, wv[rr][3] = wq[rr].w;
            quad_transpose(wv[rr], t); // wv[rr][j] = word t of lane j's 16 bytes
        }
#pragma unroll
        for (int j = 0; j < BPS; j++) {
            const int b = s * BPS + j; // quant block within the slice
            uint32_t a[MMA_MT][4];
#pragma unroll
            for (int m = 0; m < MMA_MT; m++) {
                if (Q4) { // word t of the block: elements 4t..4t+3 (low nibbles), 16+4t.. (high)
                    const uint32_t rg = wv[2 * m][j], rg8 = wv[2 * m + 1][j]; // rows g, g + 8
                    a[m][0] = q4_s8(rg & 0x0F0F0F0Fu);
                    a[m][1] = q4_s8(rg8 & 0x0F0F0F0Fu);
                    a[m][2] = q4_s8((rg >> 4) & 0x0F0F0F0Fu);
                    a[m][3] = q4_s8((rg8 >> 4) & 0x0F0F0F0Fu);
                } else { // words t and 4 + t of the block
                    a[m][0] = wv[2 * m][2 * j];
                    a[m][1] = wv[2 * m + 1][2 * j];
                    a[m][2] = wv[2 * m][2 * j + 1];
                    a[m][3] = wv[2 * m + 1][2 * j + 1];
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint2 bx = sq[(b * NT + nt) * 32 + lane];
                const float2 xd = *reinterpret_cast<const float2 *>(sd + (b * NT + nt) * 8 + 2 * t);
#pragma unroll
                for (int m = 0; m < MMA_MT; m++) {
                    int c[4];
                    mma_s8(c, a[m], bx);
                    // c: (row g, x 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
                    const float d0 = dq[2 * m][j], d1 = dq[2 * m + 1][j];
                    acc[m][nt][0] = fmaf((float)c[0] * d0, xd.x, acc[m][nt][0]);
                    acc[m][nt][1] = fmaf((float)c[1] * d0, xd.y, acc[m][nt][1]);
                    acc[m][nt][2] = fmaf((float)c[2] * d1, xd.x, acc[m][nt][2]);
                    acc[m][nt][3] = fmaf((float)c[3] * d1, xd.y, acc[m][nt][3]);
                }
            }
        }
    };
    for (int s = 0; s < steps; s += 2) {
        compute(s, cur, dcur);
        if (s + 2 < steps) load(s + 2, cur, dcur);
        if (s + 1 < steps) compute(s + 1, nxt, dnxt);
        if (s + 3 < steps) load(s + 3, nxt, dnxt);
    }

    // out: the epilogue (one slice) or this slice's partial sums
#pragma unroll
    for (int m = 0; m < MMA_MT; m++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t row = row0 + m * 16 + g + (i >> 1) * 8;
                const int xr = nt * 8 + 2 * t + (i & 1);
                if (row >= p.n || xr >= p.n_x) continue;
                const float v = acc[m][nt][i];
                if (p.splits > 1) {
                    p.part[((int64_t)blockIdx.y * p.n_x + xr) * p.n + row] = v;
                } else {
                    float *y = p.y + xr * p.y_stride + row;
                    *y = p.add ? *y + p.scale * v : p.scale * v;
                }
            }
}

/* y[r][i] (=, +=) scale * sum over the slices s in order of part[s][r][i]. */
__global__ void mma_reduce_kernel(const mma_params p) {
    cu_pdl_enter();
    const int64_t total = (int64_t)p.n_x * p.n;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < p.splits; s++) v += p.part[s * total + e];
        const int64_t r = e / p.n, i = e % p.n;
        float *y = p.y + r * p.y_stride + i;
        *y = p.add ? *y + p.scale * v : p.scale * v;
    }
}

/* n8 tiles for n_x activation rows. */
static int mma_nt(int n_x) { return n_x <= 8 ? 1 : n_x <= 16 ? 2 : n_x <= 32 ? 4 : 8; }

/* Blocks of mma_q8_kernel<T, NT> resident per multiprocessor (at the largest slice); raises the
 * kernel's shared-memory limit on the first call. */
template <int T, int NT> static int mma_occupancy() {
    static int occ = 0;
    if (occ == 0) {
        const int smem = MMA_SMEM(NT, MMA_KSB_MAX);
        if (cudaFuncSetAttribute(mma_q8_kernel<T, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
                cudaSuccess ||
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, mma_q8_kernel<T, NT>, MMA_WARPS * 32, smem) !=
                cudaSuccess ||
            occ < 1)
            occ = 1;
    }
    return occ;
}

static int mma_occupancy_of(cera_type t, int nt) {
    if (t == CERA_TYPE_Q4_0)
        return nt == 1   ? mma_occupancy<CERA_TYPE_Q4_0, 1>()
               : nt == 2 ? mma_occupancy<CERA_TYPE_Q4_0, 2>()
               : nt == 4 ? mma_occupancy<CERA_TYPE_Q4_0, 4>()
                         : mma_occupancy<CERA_TYPE_Q4_0, 8>();
    return nt == 1   ? mma_occupancy<CERA_TYPE_Q8_0, 1>()
           : nt == 2 ? mma_occupancy<CERA_TYPE_Q8_0, 2>()
           : nt == 4 ? mma_occupancy<CERA_TYPE_Q8_0, 4>()
                     : mma_occupancy<CERA_TYPE_Q8_0, 8>();
}

/* The split-K plan of a weight for n_x (<= 64) activation rows: slices of ksb blocks (a
 * multiple of 4, at most MMA_KSB_MAX), as many as fit one wave of resident blocks (the
 * fewer blocks of k per warp, the shorter the chain of dependent loads each one waits for). */
static void mma_plan(const cu_weight *w, int n_x, int *ksb, int *splits) {
    static int sms = 0;
    if (sms == 0) {
        int dev = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms < 1)
            sms = 132;
    }
    const int64_t nb = w->k_pad / 32, row_blocks = (w->n + MMA_BROWS - 1) / MMA_BROWS;
    const int64_t target = (int64_t)mma_occupancy_of(w->type, mma_nt(n_x)) * sms;
    int64_t s = target / row_blocks; // whole waves: a partial second one would cost a full one
    if (s < 1) s = 1;
    if (s > (nb + 3) / 4) s = (nb + 3) / 4;
    int64_t kb = ((nb + s - 1) / s + 3) / 4 * 4;
    if (kb > MMA_KSB_MAX) kb = MMA_KSB_MAX;
    *ksb = (int)kb;
    *splits = (int)((nb + kb - 1) / kb);
}

extern "C" bool cu_mma_supported(cera_type t) { return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0; }

extern "C" int64_t cu_mma_work_bytes(const cu_weight *w, int n_rows) {
    if (!cu_mma_supported(w->type)) return 0;
    int64_t most = 0;
    for (int r0 = 0; r0 < n_rows; r0 += MMA_XROWS) { // each launch of up to 64 rows has its plan
        const int n_x = n_rows - r0 < MMA_XROWS ? n_rows - r0 : MMA_XROWS;
        int ksb, splits;
        mma_plan(w, n_x, &ksb, &splits);
        const int64_t b = splits > 1 ? (int64_t)splits * n_x * w->n * (int64_t)sizeof(float) : 0;
        if (b > most) most = b;
    }
    return most;
}

template <int T, int NT> static cudaError_t mma_launch(cudaStream_t st, const mma_params &p) {
    mma_occupancy<T, NT>(); // the shared-memory limit
    const dim3 grid((unsigned)((p.n + MMA_BROWS - 1) / MMA_BROWS), (unsigned)p.splits);
    return cu_launch(mma_q8_kernel<T, NT>, grid, dim3(MMA_WARPS * 32), MMA_SMEM(NT, p.ksb), st, p);
}

template <int T> static cudaError_t mma_launch_nt(cudaStream_t st, const mma_params &p) {
    switch (mma_nt(p.n_x)) {
    case 1: return mma_launch<T, 1>(st, p);
    case 2: return mma_launch<T, 2>(st, p);
    case 4: return mma_launch<T, 4>(st, p);
    default: return mma_launch<T, 8>(st, p);
    }
}

extern "C" cudaError_t cu_mma_q8(cudaStream_t st, const cu_weight *w, const cu_act *x, int n_rows, float *y,
                                 int64_t y_stride, bool add, float scale, float *work, int64_t work_bytes) {
    if (!cu_mma_supported(w->type) || !w->split || !x->q || n_rows < 1 || x->k_pad != w->k_pad)
        return cudaErrorInvalidValue;
    if (work_bytes < cu_mma_work_bytes(w, n_rows) ||
        (work_bytes > 0 && !work && cu_mma_work_bytes(w, n_rows)))
        return cudaErrorInvalidValue;
    mma_params p;
    p.wq = static_cast<const uint8_t *>(w->data);
    p.wd = static_cast<const __half *>(w->scales);
    p.n = w->n;
    p.nb = w->k_pad / 32;
    p.k_pad = w->k_pad;
    p.y_stride = y_stride;
    p.scale = scale;
    p.add = add;
    p.part = work;
    for (int r0 = 0; r0 < n_rows; r0 += MMA_XROWS) {
        p.n_x = n_rows - r0 < MMA_XROWS ? n_rows - r0 : MMA_XROWS;
        mma_plan(w, p.n_x, &p.ksb, &p.splits);
        p.xq = x->q + r0 * x->k_pad;
        p.xd = x->d + r0 * (x->k_pad / 32);
        p.y = y + r0 * y_stride;
        cudaError_t e = w->type == CERA_TYPE_Q4_0 ? mma_launch_nt<CERA_TYPE_Q4_0>(st, p)
                                                  : mma_launch_nt<CERA_TYPE_Q8_0>(st, p);
        if (e != cudaSuccess) return e;
        if (p.splits > 1) {
            const int64_t total = (int64_t)p.n_x * p.n;
            int blocks = (int)((total + 255) / 256);
            if (blocks > 1024) blocks = 1024;
            e = cu_launch(mma_reduce_kernel, dim3(blocks), dim3(256), 0, st, p);
            if (e != cudaSuccess) return e;
        }
    }
    return cudaSuccess;
}
