/*
 * moe.cu — the routed experts' kernels besides their matvecs (matvec.cu: cu_matvec_moe):
 * the router's choice per token, the gather of a prompt chunk's rows grouped by expert and
 * the weighted sum of each token's expert outputs. Each follows the CPU backend's
 * backend/cpu/moe.c operation for operation (llama.cpp's build_moe_ffn), so a token picks
 * the same experts on both backends but where the router's logits themselves differ.
 */
#include <math.h>

#include "backend/cuda/quant.cuh"

/* One warp per token (lane i takes experts i, i + 32, ...): gating of the logits row (in
 * place: probabilities; softmax's sum in double), then k rounds of a warp argmax of
 * probability + bias over the experts not yet taken (ties: the lower index), the winners'
 * probabilities as weights, normalized (the sum in double, clamped to the smallest normal
 * F16) and scaled, as backend/cpu/moe.c. */
#define ROUTE_WARPS 4

/* Token p's route by one warp, everything in registers (lane i holds experts i, i + 32, ...
 * up to CU_MOE_MAX_EXPERT): gating (the logits read through L2, __ldcg: another block may
 * have written them, k_moe_router), then k rounds of a warp argmax of probability + bias over
 * the experts not yet taken (ties: the lower index), lane 0 writing the winners and their
 * probabilities, then normalizing (the sum in double, in slot order, clamped to the smallest
 * normal F16) and scaling them. */
#define EPL (CU_MOE_MAX_EXPERT / 32)

static __device__ void route_token(const float *p, int n_expert, int k, bool sigmoid, const float *bias,
                                   bool norm_w, float w_scale, int32_t *s, float *w, int lane) {
    float pv[EPL], bs[EPL];
#pragma unroll
    for (int i = 0; i < EPL; i++) {
        const int e = lane + 32 * i;
        pv[i] = e < n_expert ? __ldcg(p + e) : -INFINITY;
        bs[i] = e < n_expert && bias ? bias[e] : 0.0f;
    }
    if (sigmoid) {
#pragma unroll
        for (int i = 0; i < EPL; i++) pv[i] = 1.0f / (1.0f + expf(-pv[i]));
    } else {
        float mx = -INFINITY;
#pragma unroll
        for (int i = 0; i < EPL; i++) mx = fmaxf(mx, pv[i]);
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        double sum = 0;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            pv[i] = lane + 32 * i < n_expert ? expf(pv[i] - mx) : 0.0f;
            sum += (double)pv[i];
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        const float inv = (float)(1.0 / sum);
#pragma unroll
        for (int i = 0; i < EPL; i++) pv[i] *= inv;
    }
    unsigned taken = 0; /* bit i: expert lane + 32 i chosen */
    double wsum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0.0f, bp = 0.0f;
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = lane + 32 * i;
            const float v = pv[i] + bs[i];
            if (e < n_expert && !(taken >> i & 1u) && (best < 0 || v > bv)) best = e, bv = v, bp = pv[i];
        }
        for (int o = 16; o > 0; o >>= 1) {
            const int ob = __shfl_xor_sync(0xffffffffu, best, o);
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o), op = __shfl_xor_sync(0xffffffffu, bp, o);
            if (ob >= 0 && (best < 0 || ov > bv || (ov == bv && ob < best))) best = ob, bv = ov, bp = op;
        }
        if (best % 32 == lane) taken |= 1u << (best / 32);
        if (lane == 0) {
            s[j] = best;
            w[j] = bp;
            wsum += (double)bp;
        }
    }
    if (lane) return;
    float fs = 1.0f;
    if (norm_w) {
        fs = (float)wsum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
    }
    const bool scale = w_scale != 0.0f && w_scale != 1.0f;
    for (int j = 0; j < k && (norm_w || scale); j++) {
        float v = w[j]; /* this thread's own write */
        if (norm_w) v /= fs;
        if (scale) v *= w_scale;
        w[j] = v;
    }
}

__global__ void __launch_bounds__(ROUTE_WARPS * 32)
    k_moe_route(float *logits, int64_t ld, int n_tok, int n_expert, int k, bool sigmoid, const float *bias,
                bool norm_w, float w_scale, int32_t *sel, float *wt) {
    cu_pdl_enter();
    const int lane = threadIdx.x % 32, t = blockIdx.x * ROUTE_WARPS + threadIdx.x / 32;
    if (t >= n_tok) return;
    route_token(logits + (int64_t)t * ld, n_expert, k, sigmoid, bias, norm_w, w_scale, sel + (int64_t)t * k,
                wt + (int64_t)t * k, lane);
}

extern "C" cudaError_t cu_moe_route(cudaStream_t st, float *logits, int64_t ld, int n_tok, int n_expert,
                                    int k, bool sigmoid, const float *bias, bool norm_w, float w_scale,
                                    int32_t *sel, float *wt) {
    if (n_tok < 1 || k < 1 || k > n_expert || n_expert > CU_MOE_MAX_EXPERT) return cudaErrorInvalidValue;
    return cu_launch(k_moe_route, (n_tok + ROUTE_WARPS - 1) / ROUTE_WARPS, ROUTE_WARPS * 32, 0, st, logits,
                     ld, n_tok, n_expert, k, sigmoid, bias, norm_w, w_scale, sel, wt);
}

/* Warp w of the grid computes the logits of expert w for every token (an F32 router row
 * against the token's f32 row, lanes over 4-float units, four loads in flight each); the
 * last block to finish (a counter, reset for the next launch) routes the tokens as
 * k_moe_route, a warp per token. One launch instead of a matvec and a routing, spread over
 * enough blocks that the router's rows stream at bandwidth rather than one SM's latency. */
#define ROUTER_WARPS 4

__global__ void __launch_bounds__(ROUTER_WARPS * 32)
    k_moe_router(const float *wr, int64_t kp, const float *x, int64_t x_stride, int n_tok, int n_expert,
                 int k, bool sigmoid, const float *bias, bool norm_w, float w_scale, float *logits,
                 int32_t *sel, float *wt, int32_t *counter) {
    cu_pdl_enter();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, e = blockIdx.x * ROUTER_WARPS + warp;
    const int64_t units = kp / 4;
    if (e < n_expert) {
        const float4 *wrow = reinterpret_cast<const float4 *>(wr + (int64_t)e * kp);
        for (int t = 0; t < n_tok; t++) {
            const float4 *xr = reinterpret_cast<const float4 *>(x + (int64_t)t * x_stride);
            float v = 0.0f;
#pragma unroll 4
            for (int64_t i = lane; i < units; i += 32) {
                const float4 a = __ldg(wrow + i), b = xr[i];
                v += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) logits[(int64_t)t * n_expert + e] = v;
        }
    }
    __threadfence();
    __syncthreads();
    __shared__ bool last;
    if (threadIdx.x == 0) last = atomicAdd(counter, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int t = warp; t < n_tok; t += ROUTER_WARPS)
        route_token(logits + (int64_t)t * n_expert, n_expert, k, sigmoid, bias, norm_w, w_scale,
                    sel + (int64_t)t * k, wt + (int64_t)t * k, lane);
    if (threadIdx.x == 0) *counter = 0;
}

extern "C" cudaError_t cu_moe_router(cudaStream_t st, const cu_weight *router, const cu_act *x, int n_tok,
                                     int k, bool sigmoid, const float *bias, bool norm_w, float w_scale,
                                     float *logits, int32_t *sel, float *wt, int32_t *counter) {
    const int ne = (int)router->n;
    if (router->type != CERA_TYPE_F32 || router->k_pad != x->k_pad || n_tok < 1 || k < 1 || k > ne ||
        ne > CU_MOE_MAX_EXPERT)
        return cudaErrorInvalidValue;
    return cu_launch(k_moe_router, (ne + ROUTER_WARPS - 1) / ROUTER_WARPS, ROUTER_WARPS * 32, 0, st,
                     static_cast<const float *>(router->data), router->k_pad, x->f, x->k_pad, n_tok, ne, k,
                     sigmoid, bias, norm_w, w_scale, logits, sel, wt, counter);
}

__global__ void k_gather_rows(const float *src, int64_t src_stride, const int32_t *rows, int n, int64_t k,
                              float *dst, int64_t dst_stride) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n * k) return;
    const int64_t r = i / k, c = i % k;
    dst[r * dst_stride + c] = src[rows[r] * src_stride + c];
}

extern "C" cudaError_t cu_gather_rows(cudaStream_t st, const float *src, int64_t src_stride,
                                      const int32_t *rows, int n, int64_t k, float *dst, int64_t dst_stride) {
    const int64_t total = n * k;
    k_gather_rows<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(src, src_stride, rows, n, k, dst,
                                                                   dst_stride);
    return cudaGetLastError();
}

/* y[t] = the sum over j of wt[t k + j] · eo[where[t k + j]] (each product rounded, then added
 * in slot order: llama.cpp's mul, then a chain of adds). */
__global__ void k_moe_combine(const float *eo, int64_t eo_stride, const int32_t *where, const float *wt,
                              int n_tok, int k, int64_t n_embd, float *y, int64_t y_stride, bool add,
                              float scale) {
    cu_pdl_enter();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n_tok * n_embd) return;
    const int64_t t = i / n_embd, c = i % n_embd;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        const int64_t slot = t * k + j, row = where ? where[slot] : slot;
        const float v = __fmul_rn(wt[slot], eo[row * eo_stride + c]); // never fused into the add
        acc = j == 0 ? v : acc + v;
    }
    if (add)
        y[t * y_stride + c] += scale * acc; /* as k_add_scaled adds it */
    else
        y[t * y_stride + c] = acc;
}

extern "C" cudaError_t cu_moe_combine(cudaStream_t st, const float *eo, int64_t eo_stride,
                                      const int32_t *where, const float *wt, int n_tok, int k, int64_t n_embd,
                                      float *y, int64_t y_stride, bool add, float scale) {
    const int64_t total = n_tok * n_embd;
    return cu_launch(k_moe_combine, (unsigned)((total + 255) / 256), 256, 0, st, eo, eo_stride, where, wt,
                     n_tok, k, n_embd, y, y_stride, add, scale);
}
