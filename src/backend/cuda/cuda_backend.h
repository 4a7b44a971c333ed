/*
 * cuda_backend.h — the CUDA backend's C interface: the forward pass of any model whose op
 * list (model/graph.h) is made of the ops the plan knows, on one NVIDIA GPU, from the
 * shared model description in model/model.h.
 *
 * cera_cuda_init compiles the op list into the backend's plan of CUDA steps (plan.c), uploads
 * every weight the steps use once, in its GGUF type (Q4_0 and Q8_0 are
 * repacked at upload into split quant/scale arrays so the decode kernels read them with
 * 16-byte coalesced loads; float rows are padded to 32 elements), and allocates the KV
 * cache (F16 or Q8_0) and every scratch buffer for n_ctx positions and n_batch tokens: nothing
 * is allocated per token.
 *
 * cera_cuda_forward evaluates n tokens of one sequence at the given positions. One token
 * runs the decode path (int8 dot-product matvec kernels with fused epilogues, split-K
 * attention, the whole step replayed as one CUDA graph); more tokens run the prefill path
 * (weights dequantized to F16 tiles, cuBLAS GEMM, flash attention on tensor cores). Only what is asked
 * for comes back: the logits (all positions or the last) and/or the argmax of the last
 * position, computed on the GPU.
 *
 * The engine reaches it through cera_cuda_backend_open (backend.c, the backend/backend.h
 * contract: paged KV through block tables, batches of several sequences); the functions
 * here are the standalone form used by tests and benchmarks (one sequence whose KV
 * blocks the state owns).
 */
#ifndef CERA_BACKEND_CUDA_BACKEND_H
#define CERA_BACKEND_CUDA_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cera_cuda_state cera_cuda_state;

typedef struct cera_cuda_params {
    int n_ctx;              /* KV cache positions (the sequence's context) */
    int n_batch;            /* most tokens per cera_cuda_forward call */
    int device;             /* CUDA device ordinal */
    cera_kv_type kv_type;   /* K's and V's: CERA_KV_F16 (default), _BF16, _Q8_0 or _Q4_0 */
    int kv_rot_k, kv_rot_v; /* the Walsh–Hadamard pieces of a rotated cache (kv/kv_cache.h), 0: none */
    bool no_graph;          /* run decode steps as plain launches instead of a CUDA graph */
    bool no_pdl;            /* capture the decode graph without programmatic dependent launch */
    bool external_kv;       /* KV blocks come from the engine's pools (backend.c); none of our own */
    bool force_gemm;        /* every batch of 2+ tokens through the cuBLAS path, decode steps of several
                             * sequences and short prompt chunks included (comparisons;
                             * CERA_CUDA_DECODE_ROWS=0 at open) */
    bool no_prefill_mma;    /* short prompt chunks through cuBLAS too (CERA_CUDA_PREFILL_MMA=0 at open) */
    /* Benchmarks only: ignore the weights' data and fill the device copies with random
     * valid blocks on the GPU (weights of any size without a file or host memory). */
    bool synthetic_weights;
    uint64_t synthetic_seed;
} cera_cuda_params;

cera_cuda_params cera_cuda_default_params(void);

/* True when the CUDA runtime finds at least one GPU. Never fails. */
bool cera_cuda_available(void);

/* The device's name and its memory in bytes (for logs and benchmark tables). */
cera_status cera_cuda_device_info(int device, char *name, size_t cap, size_t *mem_bytes, cera_error *err);

cera_status cera_cuda_init(const cera_model *m, const cera_cuda_params *p, cera_cuda_state **out,
                           cera_error *err);
void cera_cuda_free(cera_cuda_state *s);

/* Evaluates tokens[0..n) at positions[0..n) (each < n_ctx; a position overwrites its KV
 * slot, so truncating a sequence is just reusing positions). Token i attends to the KV
 * slots 0..positions[i].
 *   logits:     NULL, or n_vocab floats per returned position (all n when all_logits,
 *               else only the last)
 *   argmax_out: NULL, or receives the argmax of the last position's logits
 * n must be in 1..n_batch. */
cera_status cera_cuda_forward(cera_cuda_state *s, const int32_t *tokens, const int32_t *positions, int n,
                              float *logits, bool all_logits, int32_t *argmax_out, cera_error *err);

/* Device bytes of the resident weights (what one decode step streams, embedding excluded). */
size_t cera_cuda_weight_bytes(const cera_cuda_state *s);

/* ---- Measurement and test hooks (bench/cuda, tests/cuda) ----------------------------- */

/* Device-to-device copy bandwidth over a buffer of `bytes`, counting bytes read plus bytes
 * written (GB/s), and the read-only streaming bandwidth of a 128-bit load kernel. */
cera_status cera_cuda_measure_bandwidth(size_t bytes, double *copy_gbps, double *read_gbps, cera_error *err);

/* Times the matvec of one weight type alone: n rows of k, weights random on the GPU, reps
 * launches replayed from a graph; returns the weight bytes streamed per second (GB/s). */
cera_status cera_cuda_bench_matvec(cera_type type, int64_t k, int64_t n, int reps, double *gbps,
                                   cera_error *err);

/* Runs the decode matvec path (activation quantized as the kernels do) on host data:
 * y[n] = W[n, k] · x[k]; w in GGUF layout. */
cera_status cera_cuda_test_matvec(cera_type type, int64_t k, int64_t n, const void *w, const float *x,
                                  float *y, cera_error *err);

/* One case of the several-row decode matvec (cu_matvec_rows), on host data. */
typedef struct cera_cuda_mvrows_case {
    cera_type type;
    int64_t k;
    int n_segs;        /* 1..3 weights in one launch; SWIGLU: 2 (gate, up) of equal n */
    int64_t n[3];      /* rows of each */
    const void *w;     /* their GGUF rows, one weight after the other: [sum n][k] */
    const float *bias; /* [sum n] or NULL */
    int n_rows;        /* activation rows */
    const float *x;    /* [n_rows][k] */
    int epi;           /* 0 store, 1 residual add, 2 SwiGLU (cu_mv_epilogue) */
    float scale;
    const float *y0; /* ADD: the outputs before, [n_rows][sum n] */
} cera_cuda_mvrows_case;

/* Runs c through cu_matvec_rows into index 0 of the outputs and through cu_matvec, one launch
 * per activation row, into index 1. STORE/ADD: y[i] is [n_rows][sum n] (the segments side by
 * side: y_stride sum n). SWIGLU: y[i] is h [n_rows][hk] (hk = n rounded up to 32), hq[i]
 * [n_rows][hk] and hd[i] [n_rows][hk / 32] its int8 quants and scales (hq, hd unused else). */
cera_status cera_cuda_test_matvec_rows(const cera_cuda_mvrows_case *c, float *y[2], int8_t *hq[2],
                                       float *hd[2], cera_error *err);

/* Times cu_matvec_rows alone: n_rows activation rows against one weight of n rows of k (swiglu:
 * two, gate and up, with the SwiGLU epilogue), weights random on the GPU, reps launches replayed
 * from a graph; *us: microseconds per launch, *gbps: the weight bytes a launch reads per second. */
cera_status cera_cuda_bench_matvec_rows(cera_type type, int64_t k, int64_t n, int n_rows, bool swiglu,
                                        int reps, double *us, double *gbps, cera_error *err);

/* Runs cu_mma_q8 (the tensor-core matmul, Q4_0 / Q8_0) on host data: y_mma [n_rows][n] =
 * scale * W · x_r (add: y0 + scale * W · x_r, y0 [n_rows][n]), x [n_rows][k] quantized as the
 * kernels see it; and y_mv [n_rows][n] = W · x_r from cu_matvec, one launch per row. */
cera_status cera_cuda_test_mma(cera_type type, int64_t k, int64_t n, int n_rows, const void *w,
                               const float *x, bool add, float scale, const float *y0, float *y_mma,
                               float *y_mv, cera_error *err);

/* Times cu_mma_q8 alone (n_rows 1: cu_matvec) as cera_cuda_bench_matvec_rows times its kernel:
 * *us per launch, *gbps the weight bytes read per second (once per 64 rows). */
cera_status cera_cuda_bench_mma(cera_type type, int64_t k, int64_t n, int n_rows, int reps, double *us,
                                double *gbps, cera_error *err);

/* Runs the prefill path: Y[m, n] = X[m, k] · W[n, k]^T through dequantize + cuBLAS. */
cera_status cera_cuda_test_gemm(cera_type type, int64_t k, int64_t n, int64_t m, const void *w,
                                const float *x, float *y, cera_error *err);

/* Dequantizes rows[0..nr) of W[n, k] on the GPU (the embedding lookup's path). */
cera_status cera_cuda_test_get_rows(cera_type type, int64_t k, int64_t n, const void *w, const int32_t *rows,
                                    int nr, float *out, cera_error *err);

/* Attention through the forward pass's kernels on host data: the K and V rows of positions
 * 0..n_kv-1 (f32 [n_kv][n_head_kv * hd] each) are stored by the RoPE/KV-store kernel (no
 * rotation) into a paged cache of kv_type whose block table is not the identity; then the
 * queries q [n_tok][n_head * hd] of one sequence, at positions pos[] (< n_kv), attend with
 * n_splits splits and qt tokens per block (qt 1: the decode kernel). window > 0: a query at p
 * sees p - window + 1 .. p only, and the blocks wholly before the first query's window leave
 * the block table (-1, as a sliding group drops them) before the attention runs. out:
 * [n_tok][n_head * hd]. */
cera_status cera_cuda_test_attention(int n_head, int n_head_kv, int hd, cera_kv_type kv_type, int n_kv,
                                     const float *k, const float *v, int n_tok, const int32_t *pos,
                                     const float *q, float scale, int n_splits, int qt, int window,
                                     float *out, cera_error *err);

#ifdef __cplusplus
}
#endif
#endif
