/*
 * sample.cu — the sampler chain's kernel (see sample_cuda.h): one block of 1024 threads
 * per sample over a scratch copy of the logits.
 *
 *   1. logit bias (thread 0, in list order: duplicates add twice), then the penalties
 *      (one thread per distinct window token), then a grammar's mask (-inf where it
 *      forbids), on the scratch copy; the kept row stays raw.
 *   2. greedy: a block argmax with sampler.c's rules (first highest, NaN never wins,
 *      index 0 when nothing is above -inf).
 *   3. otherwise top-k: the candidate order of stages.c as a 64-bit key (the logit mapped
 *      so that ascending keys are descending logits, NaN last, -0 as +0; then the id), an
 *      MSB-first radix select of the k-th smallest key (8 bits a pass over the vocabulary,
 *      stopping once the bucket holding it is taken whole), a gather of every key up to
 *      it (exactly k: keys are unique) and a bitonic sort of those k in shared memory.
 *   4. top-p, min-p, temperature and the draw on the k sorted candidates: exps in
 *      parallel, every order-dependent sum by thread 0 in stages.c's order, each float and
 *      double operation spelled as an _rn intrinsic so that nvcc contracts nothing.
 *
 * expf is glibc's algorithm (the one since 2.27: a 32-entry table of 2^(i/32) and a cubic
 * in double, rounded once to float), which the host's expf returns bit for bit; CUDA's own
 * expf is off by an ulp often enough to move a top-p cut or a draw now and then.
 */
#include <cstdint>

#include "backend/cuda/sample_cuda.h"

namespace {

constexpr int BLOCK = 1024;

/* 2^(i/32) as double bits, less i << 47 (the exponent the index adds back). */
__constant__ uint64_t k_exp2_tab[32] = {
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull,
};

/* expf(x) as glibc computes it: x·32/ln2 = k + r, exp(x) = 2^(k/32) · p(r) with a cubic
 * p evaluated in double, rounded to float once. The fused multiply-adds are where the
 * x86-64 FMA build of glibc (the one any AVX2 machine runs) has them: this form equals
 * glibc 2.36's expf on all 2^32 inputs (checked exhaustively on the host); the unfused
 * form differs on two. tests/cuda/test_cuda_sample.c compares it with the host's expf. */
__device__ float glibc_expf(float x) {
    const uint32_t ux = __float_as_uint(x);
    const uint32_t abstop = (ux >> 20) & 0x7ff;
    if (abstop >= (0x42b00000u >> 20)) { /* |x| >= 88, inf or NaN */
        if (ux == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8) return __fadd_rn(x, x);
        if (x > 0x1.62e42ep6f) return __int_as_float(0x7f800000);
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    const double inv_ln2_n = 0x1.71547652b82fep+0 * 32, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                 c2 = 0x1.62e42ff0c52d6p-1 / 32;
    const double xd = (double)x;
    double kd = __fma_rn(inv_ln2_n, xd, shift); /* k in the low bits */
    const uint64_t ki = (uint64_t)__double_as_longlong(kd);
    kd = __dsub_rn(kd, shift);
    const double r = __fma_rn(inv_ln2_n, xd, -kd);
    const uint64_t t = k_exp2_tab[ki % 32] + (ki << 47);
    const double s = __longlong_as_double((long long)t);
    const double p3 = __fma_rn(c0, r, c1);
    const double r2 = __dmul_rn(r, r);
    double y = __fma_rn(c2, r, 1.0);
    y = __fma_rn(p3, r2, y);
    y = __dmul_rn(y, s);
    return __double2float_rn(y);
}

/* stages.c's cand_key, high half: ascending = higher logit first, NaN last, -0 as +0. */
__device__ __forceinline__ uint32_t order_key(float l) {
    if (l != l) return 0xffffffffu;
    uint32_t u = __float_as_uint(l == 0.0f ? 0.0f : l);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

__device__ __forceinline__ uint64_t cand_key(const float *l, int i) {
    return (uint64_t)order_key(l[i]) << 32 | (uint32_t)i;
}

struct best {
    float v;
    int i;
};

/* a is kept over b: higher, or equal and earlier (sentinels: -inf at INT_MAX) */
__device__ __forceinline__ bool best_before(best a, best b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

__device__ int block_argmax(const float *l, int n) {
    __shared__ best part[BLOCK / 32];
    best b = {-__int_as_float(0x7f800000), INT32_MAX};
    for (int i = threadIdx.x; i < n; i += BLOCK) /* increasing i: `>` keeps the first */
        if (l[i] > b.v) b = {l[i], i};
    for (int off = 16; off > 0; off >>= 1) {
        best o;
        o.v = __shfl_down_sync(0xffffffffu, b.v, off);
        o.i = __shfl_down_sync(0xffffffffu, b.i, off);
        if (best_before(o, b)) b = o;
    }
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = b;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < BLOCK / 32; w++)
            if (best_before(part[w], b)) b = part[w];
    }
    return b.i == INT32_MAX ? 0 : b.i; /* meaningful in thread 0 */
}

__global__ void __launch_bounds__(BLOCK)
    k_sample_chain(float *l, int n, const int32_t *args, cu_sample_cfg cfg, int32_t *out) {
    const int tid = threadIdx.x;
    // 1. bias in list order, then penalties (distinct tokens: no two threads on one logit)
    if (cfg.n_bias > 0 && tid == 0) {
        const int32_t *tok = args;
        const float *val = reinterpret_cast<const float *>(args + cfg.n_bias);
        for (int b = 0; b < cfg.n_bias; b++)
            if (tok[b] >= 0 && tok[b] < n) l[tok[b]] = __fadd_rn(l[tok[b]], val[b]);
    }
    __syncthreads();
    if (cfg.n_pen > 0) {
        const int32_t *tok = args + 2 * cfg.n_bias, *cnt = tok + cfg.n_pen;
        for (int j = tid; j < cfg.n_pen; j += BLOCK) {
            const int t = tok[j], c = cnt[j];
            if (t < 0 || t >= n || c <= 0) continue;
            float v = l[t];
            v = v <= 0.0f ? __fmul_rn(v, cfg.repeat) : __fdiv_rn(v, cfg.repeat);
            const float sub = __fadd_rn(__fmul_rn((float)c, cfg.freq), __fmul_rn(1.0f, cfg.present));
            l[t] = __fsub_rn(v, sub);
        }
    }
    __syncthreads();
    if (cfg.n_mask > 0) { /* the grammar's mask: what it forbids is gone */
        const uint32_t *mask = reinterpret_cast<const uint32_t *>(args + 2 * (cfg.n_bias + cfg.n_pen));
        for (int i = tid; i < n; i += BLOCK)
            if (!((mask[i >> 5] >> (i & 31)) & 1u)) l[i] = -INFINITY;
        __syncthreads();
    }

    // 2. greedy
    if (cfg.greedy) {
        const int i = block_argmax(l, n);
        if (tid == 0) *out = cfg.n_mask > 0 && !(l[i] > -INFINITY) ? -1 : i;
        return;
    }

    // 3. top-k: radix select of the k-th smallest key, gather, sort
    __shared__ unsigned int hist[256];
    __shared__ uint64_t sh_prefix;
    __shared__ unsigned int sh_rem, sh_done, sh_count, sh_n_top_p, sh_n_min_p;
    __shared__ uint64_t keys[CERA_DEVICE_TOPK_MAX];
    __shared__ float val[CERA_DEVICE_TOPK_MAX];
    __shared__ float prob[CERA_DEVICE_TOPK_MAX];
    const int k = cfg.top_k < n ? cfg.top_k : n;
    uint64_t prefix = 0, mask = 0;
    unsigned int rem = (unsigned int)k;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = tid; b < 256; b += BLOCK) hist[b] = 0;
        __syncthreads();
        /* whole warps every round (base is uniform), so that lanes with the same digit
         * add once: logits crowd into a few top digits, where one add per element would
         * serialize on a handful of shared counters */
        for (int base = 0; base < n; base += BLOCK) {
            const int i = base + tid;
            const uint64_t key = i < n ? cand_key(l, i) : 0;
            const bool in = i < n && (key & mask) == prefix;
            const unsigned int digit = in ? (unsigned int)(key >> shift) & 0xff : 0x100u;
            const unsigned int peers = __match_any_sync(0xffffffffu, digit);
            if (in && (tid & 31) == __ffs(peers) - 1) atomicAdd(&hist[digit], (unsigned int)__popc(peers));
        }
        __syncthreads();
        if (tid == 0) {
            unsigned int below = 0;
            int b = 0;
            while (b < 255 && below + hist[b] < rem) below += hist[b++];
            sh_prefix = prefix | (uint64_t)b << shift;
            sh_rem = rem - below;
            sh_done = hist[b] == rem - below; /* the bucket is taken whole */
        }
        __syncthreads();
        prefix = sh_prefix;
        mask |= (uint64_t)0xff << shift;
        rem = sh_rem;
        if (sh_done) break; /* uniform: every thread read the same flag */
    }
    const uint64_t kth = prefix | ~mask; /* the keys <= kth are exactly the k best */
    if (tid == 0) sh_count = 0;
    int size = 1;
    while (size < k) size <<= 1;
    for (int i = tid; i < size; i += BLOCK) keys[i] = ~(uint64_t)0;
    __syncthreads();
    for (int i = tid; i < n; i += BLOCK) {
        const uint64_t key = cand_key(l, i);
        if (key <= kth) {
            const unsigned int slot = atomicAdd(&sh_count, 1u);
            if (slot < (unsigned int)k) keys[slot] = key;
        }
    }
    __syncthreads();
    for (int w = 2; w <= size; w <<= 1) /* bitonic sort, ascending */
        for (int j = w >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < size; i += BLOCK) {
                const int p = i ^ j;
                if (p > i) {
                    const uint64_t a = keys[i], b = keys[p];
                    if ((a > b) == ((i & w) == 0)) {
                        keys[i] = b;
                        keys[p] = a;
                    }
                }
            }
            __syncthreads();
        }
    for (int i = tid; i < k; i += BLOCK) val[i] = l[(uint32_t)keys[i]];
    __syncthreads();
    if (cfg.n_mask > 0 && !(val[0] > -INFINITY)) { /* the mask left nothing (uniform) */
        if (tid == 0) *out = -1;
        return;
    }

    // 4. the tail on c[0..m), sorted: stages.c's top_p, min_p, temp, dist
    int m = k;
    if (cfg.top_p < 1.0f) {
        for (int i = tid; i < m; i += BLOCK) prob[i] = glibc_expf(__fsub_rn(val[i], val[0]));
        __syncthreads();
        if (tid == 0) {
            float sum = 0.0f;
            for (int i = 0; i < m; i++) sum = __fadd_rn(sum, prob[i]);
            float cum = 0.0f;
            int last = m;
            for (int i = 0; i < m; i++) {
                cum = __fadd_rn(cum, __fdiv_rn(prob[i], sum));
                if (cum >= cfg.top_p) {
                    last = i + 1;
                    break;
                }
            }
            sh_n_top_p = (unsigned int)last;
        }
        __syncthreads();
        m = (int)sh_n_top_p;
    }
    if (cfg.min_p > 0.0f) {
        if (tid == 0) {
            const float min_logit = __fadd_rn(val[0], cfg.log_min_p);
            int i = 1; /* the first always stays */
            while (i < m && !(val[i] < min_logit)) i++;
            sh_n_min_p = (unsigned int)i;
        }
        __syncthreads();
        m = (int)sh_n_min_p;
    }
    for (int i = tid; i < m; i += BLOCK) val[i] = __fdiv_rn(val[i], cfg.temp);
    __syncthreads();
    if (m == 1) {
        if (tid == 0) *out = (int32_t)(uint32_t)keys[0];
        return;
    }
    for (int i = tid; i < m; i += BLOCK) prob[i] = glibc_expf(__fsub_rn(val[i], val[0]));
    __syncthreads();
    if (tid == 0) {
        double sum = 0.0;
        for (int i = 0; i < m; i++) sum = __dadd_rn(sum, (double)prob[i]);
        const double target = __dmul_rn(sum, cfg.u);
        double run = 0.0;
        int chosen = m - 1; /* only with NaN logits or rounding at u close to 1 */
        for (int i = 0; i < m; i++) {
            run = __dadd_rn(run, (double)prob[i]);
            if (run >= target) {
                chosen = i;
                break;
            }
        }
        *out = (int32_t)(uint32_t)keys[chosen];
    }
}

__global__ void k_expf(const float *x, float *y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = glibc_expf(x[i]);
}

} // namespace

extern "C" cudaError_t cu_sample_chain(cudaStream_t st, const float *logits, float *scratch, int n_vocab,
                                       const int32_t *args, const cu_sample_cfg *cfg, int32_t *out) {
    cudaError_t e =
        cudaMemcpyAsync(scratch, logits, sizeof(float) * (size_t)n_vocab, cudaMemcpyDeviceToDevice, st);
    if (e != cudaSuccess) return e;
    k_sample_chain<<<1, BLOCK, 0, st>>>(scratch, n_vocab, args, *cfg, out);
    return cudaGetLastError();
}

/* out[0] = the number of elements of x[0..n) that are NaN or +Inf (one block writes it). A
 * -Inf logit is a token with probability 0, which the chain handles; NaN or +Inf leave no
 * meaningful distribution (engine/session.c checks host rows the same way). */
__global__ void __launch_bounds__(1024) k_count_nonfinite(const float *x, int n, int32_t *out) {
    int bad = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) bad += isnan(x[i]) || x[i] == INFINITY;
    __shared__ int sum;
    if (threadIdx.x == 0) sum = 0;
    __syncthreads();
    if (bad) atomicAdd(&sum, bad);
    __syncthreads();
    if (threadIdx.x == 0) out[0] = sum;
}

extern "C" cudaError_t cu_count_nonfinite(cudaStream_t st, const float *x, int n, int32_t *out) {
    k_count_nonfinite<<<1, 1024, 0, st>>>(x, n, out);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_sample_expf(cudaStream_t st, const float *x, float *y, int n) {
    if (n <= 0) return cudaSuccess;
    k_expf<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(x, y, n);
    return cudaGetLastError();
}
