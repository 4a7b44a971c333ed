/*
 * conv.cu — LFM2's gated short convolution on the GPU (the CPU's is forward.c's
 * run_conv; the op is model/graph.h's SHORTCONV).
 *
 * For each token of the batch, from its in_proj row B | C | X: bx = B ⊙ X, then per
 * channel c the causal depthwise convolution over the l_cache positions up to the token's,
 * summed tap by tap with fused multiply-adds from 0 (ggml's ssm_conv, compiled with
 * contraction), times C. Positions before the sequence's first token in the batch come from
 * its state (the bx rows of its last l_cache - 1 positions, zero for a new sequence), later
 * ones from the batch, where a sequence's tokens are consecutive rows in position order.
 * A second launch then replaces each sequence's state by the rows before its next position.
 * Both are plain launches (no programmatic dependent launch), so stream order separates them
 * from their neighbours.
 */
#include "backend/cuda/cuda_kernels.h"

/* bx of channel c at position q of token i's sequence (q <= pos[i]). */
static __device__ __forceinline__ float conv_in(const cu_conv_args &a, int i, int q, int c) {
    const int first = a.first[i];
    if (q >= first) {
        const float *row = a.src + (int64_t)(i - (a.pos[i] - q)) * a.src_stride;
        return row[c] * row[2 * a.n_embd + c];
    }
    const float *st = a.state + (int64_t)a.slot[i] * a.state_slot + a.state_off;
    return st[(int64_t)(q - first + a.lc - 1) * a.n_embd + c];
}

__global__ void k_shortconv(cu_conv_args a, cu_act out) {
    const int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)a.n_tok * out.k_pad) return;
    const int i = (int)(idx / out.k_pad), c = (int)(idx % out.k_pad);
    float y = 0.0f;
    if (c < a.n_embd) {
        const int p = a.pos[i];
        float sum = 0.0f;
        for (int k = 0; k < a.lc; k++)
            sum = fmaf(conv_in(a, i, p - (a.lc - 1) + k, c), a.w[(int64_t)c * a.lc + k], sum);
        y = a.src[(int64_t)i * a.src_stride + a.n_embd + c] * sum;
    }
    out.f[(int64_t)i * out.k_pad + c] = y;
}

/* One thread per (last token of a sequence, channel): the new state rows in ascending order
 * (row r reads old row r + count > r, not yet written). */
__global__ void k_shortconv_state(cu_conv_args a) {
    const int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= (int64_t)a.n_tok * a.n_embd) return;
    const int i = (int)(idx / a.n_embd), c = (int)(idx % a.n_embd);
    if (!a.last[i]) return;
    float *st = a.state + (int64_t)a.slot[i] * a.state_slot + a.state_off;
    const int next = a.pos[i] + 1;
    for (int r = 0; r < a.lc - 1; r++)
        st[(int64_t)r * a.n_embd + c] = conv_in(a, i, next - (a.lc - 1) + r, c);
}

extern "C" cudaError_t cu_shortconv(cudaStream_t st, const cu_conv_args *a, const cu_act *out) {
    const int64_t total = (int64_t)a->n_tok * out->k_pad;
    k_shortconv<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(*a, *out);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    const int64_t ts = (int64_t)a->n_tok * a->n_embd;
    k_shortconv_state<<<(unsigned)((ts + 255) / 256), 256, 0, st>>>(*a);
    return cudaGetLastError();
}
