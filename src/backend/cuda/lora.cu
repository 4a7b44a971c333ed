/*
 * lora.cu — the LoRA kernels (lora_cuda.h): t = A·x per (row, adapter) entry, then
 * y += s·B·t per output, reading F16 factors with f32 accumulation.
 *
 * Both products are thin (rank 8..64 against k or d in the thousands), so they are
 * organised for short launches rather than for arithmetic: A·x runs many small blocks over
 * chunks of the inputs, a warp per rank row (a 16-byte load of eight F16 values per lane),
 * so A is read with many loads in flight; B·t runs a thread per output element, which reads
 * its B row (rank F16 values, 16-byte loads) and the entry's t. A row's entries are summed
 * in plan order (adapter id), so the result does not depend on how rows are spread over
 * blocks. The decode kernels that add B·t inside another step (the SwiGLU, the RMS norm)
 * take the row's terms from the host-made item table (lora.cuh).
 */
#include "backend/cuda/lora.cuh"
#include "backend/cuda/quant.cuh"

#define LORA_A_THREADS 256
#define LORA_B_THREADS 256

/* Block (chunk c, segment, entry e): the partial dots of every rank row of A with x over
 * the chunk's LORA_KC inputs (a warp per rank row: one 16-byte F16 load per lane), into
 * tpart; the last block of (e, segment) to finish (an atomic counter, reset for the next
 * launch) sums the chunks in order into t, so the result does not depend on which block
 * ran when. Many small blocks keep many loads in flight: A is read at bandwidth, not at
 * latency. */
__global__ void __launch_bounds__(LORA_A_THREADS)
    k_lora_a(cu_lora_plan p, int layer, cu_lora_segs segs, const float *x, int64_t x_stride, int64_t k) {
    cu_pdl_enter();
    const int c = blockIdx.x, seg = blockIdx.y, e = blockIdx.z, nc = gridDim.x;
    if (e >= *p.n_ent) return;
    const cu_lora_pair *pr = &p.ent[e].tab[layer * CU_LORA_PROJ + segs.proj[seg]];
    const int rank = pr->rank;
    if (rank == 0) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    const float *xr = x + (int64_t)p.ent[e].row * x_stride;
    const __half *a = static_cast<const __half *>(pr->a);
    const int64_t k0 = (int64_t)c * LORA_KC, k1 = k0 + LORA_KC < k ? k0 + LORA_KC : k;
    const int slot = e * 3 + seg;
    float *tp = p.tpart + (int64_t)slot * p.n_chunk * p.max_rank;
    for (int j = warp; j < rank; j += n_warps) {
        const __half *aj = a + (int64_t)j * k;
        float v = 0.0f;
        const int64_t i = k0 + 8 * lane;
        // the whole warp takes one path: 8 values per lane when the chunk allows it
        const bool vec =
            ((k1 - k0) & 7) == 0 && ((uintptr_t)(aj + k0) & 15) == 0 && ((uintptr_t)(xr + k0) & 15) == 0;
        if (vec) {
            if (i < k1) {
                const uint4 raw = *reinterpret_cast<const uint4 *>(aj + i);
                const __half2 *hp = reinterpret_cast<const __half2 *>(&raw);
                const float4 x0 = __ldg(reinterpret_cast<const float4 *>(xr + i));
                const float4 x1 = __ldg(reinterpret_cast<const float4 *>(xr + i + 4));
                const float2 a0 = __half22float2(hp[0]), a1 = __half22float2(hp[1]);
                const float2 a2 = __half22float2(hp[2]), a3 = __half22float2(hp[3]);
                v = a0.x * x0.x + a0.y * x0.y + a1.x * x0.z + a1.y * x0.w;
                v += a2.x * x1.x + a2.y * x1.y + a3.x * x1.z + a3.y * x1.w;
            }
        } else {
            for (int64_t q = k0 + lane; q < k1; q += 32) v += __half2float(aj[q]) * __ldg(xr + q);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) tp[(int64_t)c * p.max_rank + j] = v;
    }
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&p.count[slot], 1) == nc - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    float *t = p.t + (int64_t)slot * p.max_rank;
    for (int j = threadIdx.x; j < rank; j += blockDim.x) {
        float v = 0.0f;
        for (int q = 0; q < nc; q++) v += __ldcg(tp + (int64_t)q * p.max_rank + j);
        t[j] = v;
    }
    if (threadIdx.x == 0) p.count[slot] = 0;
}

__global__ void __launch_bounds__(LORA_B_THREADS)
    k_lora_b(cu_lora_plan p, int layer, cu_lora_segs segs, float mult) {
    cu_pdl_enter();
    const int seg = blockIdx.z, r = blockIdx.y;
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= segs.d[seg] || p.row_first[r + 1] == p.row_first[r]) return;
    segs.y[seg][r * segs.y_stride + i] += mult * row_delta(p, layer, segs.proj[seg], seg, r, i);
}

static __device__ __forceinline__ float lora_silu(float g) { return g / (1.0f + expf(-g)); }

/* Decode: gate and up (as the matvec stored them) plus their adapters' B·t and bias, then
 * h = silu(g)·u, f32 and quantized (a warp per 32-value block); the grid covers h->k_pad. */
__global__ void __launch_bounds__(LORA_B_THREADS)
    k_lora_swiglu(cu_lora_plan p, int layer, const float *gate, const float *up, const float *bg,
                  const float *bu, cu_act h) {
    cu_pdl_enter();
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32;
    __shared__ lora_stage sg, su;
    lora_stage_load(p, layer, 4, &sg); // gate
    lora_stage_load(p, layer, 5, &su); // up
    if (i - lane >= h.k_pad) return;   // whole warps leave together (k_pad is a multiple of 32)
    float v = 0.0f;
    if (i < h.k) {
        float g = gate[i] + lora_stage_delta(&sg, i), u = up[i] + lora_stage_delta(&su, i);
        if (bg) g += bg[i];
        if (bu) u += bu[i];
        v = lora_silu(g) * u;
    }
    h.f[i] = v;
    if (h.q) cu_quant_block32(v, h.q, h.d, h.s, i / 32, lane);
}

/* Decode: the RMS norm of the residual row x after adding the pending adapter sum of the O
 * or down projection `proj` of `layer`: x + mult·Σ s·B·t, written to x_out (not x: a single
 * block, but the norm reads the whole row first), then normed into out (f32 and quantized).
 * Each thread's B loads are issued together (lora_stage_delta_m). k <= LORA_NORM_MAX. */
#define LORA_NORM_PER 8 /* row values per thread: LORA_NORM_MAX / 1024 */
__global__ void __launch_bounds__(1024)
    k_norm_lora(const float *x, float *x_out, const float *weight, float eps, cu_act out, cu_lora_plan p,
                int layer, int proj, float mult) {
    cu_pdl_enter();
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    __shared__ lora_stage st;
    __shared__ double red[32];
    __shared__ float xs[LORA_NORM_MAX];
    lora_stage_load(p, layer, proj, &st);
    float dl[LORA_NORM_PER];
    lora_stage_delta_m<LORA_NORM_PER>(&st, tid, blockDim.x, out.k, dl);
    double sum = 0.0;
#pragma unroll
    for (int m = 0; m < LORA_NORM_PER; m++) {
        const int64_t i = tid + (int64_t)m * blockDim.x;
        if (i < out.k) {
            const float v = x[i] + mult * dl[m];
            xs[i] = v;
            x_out[i] = v;
            sum += (double)(v * v);
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
    const float scale = 1.0f / sqrtf((float)(red[0] / (double)out.k) + eps);
    for (int64_t b = warp; b < out.k_pad / 32; b += blockDim.x / 32) {
        const int64_t i = b * 32 + lane;
        const float y = i < out.k ? (xs[i] * scale) * weight[i] : 0.0f;
        out.f[i] = y;
        if (out.q) cu_quant_block32(y, out.q, out.d, out.s, b, lane);
    }
}

__global__ void k_lora_to_f16(const float *src, __half *dst, int64_t n, int32_t *n_bad) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = src[i];
    if (!(fabsf(v) <= 65504.0f)) atomicAdd(n_bad, 1);
    dst[i] = __float2half(v);
}

extern "C" cudaError_t cu_lora_a(cudaStream_t st, const cu_lora_plan *p, int layer, const cu_lora_segs *segs,
                                 const float *x, int64_t x_stride, int64_t k, int n_ent) {
    const int64_t nc = (k + LORA_KC - 1) / LORA_KC;
    if (n_ent < 1 || segs->n < 1) return cudaSuccess;
    if (nc > p->n_chunk) return cudaErrorInvalidValue;
    return cu_launch(k_lora_a, dim3((unsigned)nc, (unsigned)segs->n, (unsigned)n_ent), LORA_A_THREADS, 0, st,
                     *p, layer, *segs, x, x_stride, k);
}

extern "C" cudaError_t cu_lora_b(cudaStream_t st, const cu_lora_plan *p, int layer, const cu_lora_segs *segs,
                                 int n_rows, float mult) {
    int64_t d = 0;
    for (int j = 0; j < segs->n; j++) d = segs->d[j] > d ? segs->d[j] : d;
    if (n_rows < 1 || d < 1) return cudaSuccess;
    const dim3 grid((unsigned)((d + LORA_B_THREADS - 1) / LORA_B_THREADS), (unsigned)n_rows,
                    (unsigned)segs->n);
    return cu_launch(k_lora_b, grid, LORA_B_THREADS, 0, st, *p, layer, *segs, mult);
}

extern "C" cudaError_t cu_lora_swiglu(cudaStream_t st, const cu_lora_plan *p, int layer, const float *gate,
                                      const float *up, const float *bg, const float *bu, const cu_act *h) {
    const unsigned grid = (unsigned)((h->k_pad + LORA_B_THREADS - 1) / LORA_B_THREADS);
    return cu_launch(k_lora_swiglu, grid, LORA_B_THREADS, 0, st, *p, layer, gate, up, bg, bu, *h);
}

extern "C" cudaError_t cu_norm_lora(cudaStream_t st, const float *x, float *x_out, const float *weight,
                                    float eps, const cu_act *out, const cu_lora_plan *p, int layer, int proj,
                                    float mult) {
    if (out->k > LORA_NORM_MAX) return cudaErrorInvalidValue;
    return cu_launch(k_norm_lora, 1, 1024, 0, st, x, x_out, weight, eps, *out, *p, layer, proj, mult);
}

extern "C" cudaError_t cu_lora_to_f16(cudaStream_t st, const float *src, void *dst, int64_t n,
                                      int32_t *n_bad) {
    if (n < 1) return cudaSuccess;
    k_lora_to_f16<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(src, static_cast<__half *>(dst), n, n_bad);
    return cudaGetLastError();
}

/* Block per slot: the slot's token's entries in order; for each that targets the layer's
 * MoE target, t = A_e · x (a warp per rank row) into shared memory, then y += s · B_e t (a
 * thread per output). */
__global__ void __launch_bounds__(256)
    k_moe_lora(cu_lora_plan p, int n_layer, int layer, int target, const float *x, int64_t x_stride,
               int x_div, const int32_t *slot_exp, const int32_t *slot_tok, int tok_div, int64_t k, int64_t d,
               float *y, int64_t y_stride) {
    cu_pdl_enter();
    __shared__ float t[1024]; /* CERA_LORA_MAX_RANK */
    const int slot = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
    const int row = slot_tok ? slot_tok[slot] : slot / tok_div;
    const int e = slot_exp ? slot_exp[slot] : 0;
    const float *xr = x + (int64_t)(slot / x_div) * x_stride;
    float *yr = y + (int64_t)slot * y_stride;
    for (int en = p.row_first[row]; en < p.row_first[row + 1]; en++) {
        const cu_lora_pair *pr =
            &p.ent[en].tab[(int64_t)n_layer * CU_LORA_PROJ + layer * CU_LORA_MOE + target];
        const int rank = pr->rank;
        if (rank == 0) continue; /* ranks above CERA_LORA_MAX_RANK are refused at load */
        const __half *a = static_cast<const __half *>(pr->a) + (int64_t)e * rank * k;
        const __half *b = static_cast<const __half *>(pr->b) + (int64_t)e * d * rank;
        const float sc = p.ent[en].scale * pr->factor;
        for (int j = warp; j < rank; j += n_warps) {
            const __half *aj = a + (int64_t)j * k;
            float v = 0.0f;
            for (int64_t q = lane; q < k; q += 32) v += __half2float(aj[q]) * xr[q];
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) t[j] = v;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
            const __half *bi = b + i * rank;
            float v = 0.0f;
            for (int j = 0; j < rank; j++) v += __half2float(bi[j]) * t[j];
            yr[i] += sc * v;
        }
        __syncthreads();
    }
}

extern "C" cudaError_t cu_moe_lora(cudaStream_t st, const cu_lora_plan *p, int n_layer, int layer, int target,
                                   const float *x, int64_t x_stride, int x_div, const int32_t *slot_exp,
                                   const int32_t *slot_tok, int tok_div, int n_slots, int64_t k, int64_t d,
                                   float *y, int64_t y_stride) {
    if (n_slots < 1 || x_div < 1 || tok_div < 1) return cudaErrorInvalidValue;
    return cu_launch(k_moe_lora, n_slots, 256, 0, st, *p, n_layer, layer, target, x, x_stride, x_div,
                     slot_exp, slot_tok, tok_div, k, d, y, y_stride);
}
