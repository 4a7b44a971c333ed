/*
 * cuda_state.h — the CUDA backend's private state, shared by its host files:
 * init.c (upload and allocation), forward.c (decode and prefill), gemm.c (the cuBLAS
 * path) and hooks.c (measurement and test entry points).
 */
#ifndef CERA_BACKEND_CUDA_STATE_H
#define CERA_BACKEND_CUDA_STATE_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/error.h"

/* Checks a CUDA runtime call or launch; on failure returns CERA_ERR_DEVICE naming it. */
#define CU_TRY(call)                                                                                         \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            return cera_fail(err, CERA_ERR_DEVICE, "cuda: %s failed: %s (%s:%d)", #call,                     \
                             cudaGetErrorString(e_), __FILE__, __LINE__);                                    \
    } while (0)

#define CUBLAS_TRY(call)                                                                                     \
    do {                                                                                                     \
        cublasStatus_t s_ = (call);                                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                                     \
            return cera_fail(err, CERA_ERR_DEVICE, "cublas: %s failed: status %d (%s:%d)", #call, (int)s_,   \
                             __FILE__, __LINE__);                                                            \
    } while (0)

#define CERA_TRY(call)                                                                                       \
    do {                                                                                                     \
        cera_status st_ = (call);                                                                            \
        if (st_ != CERA_OK) return st_;                                                                      \
    } while (0)

#define DEC_BUCKETS 1 /* decode graphs (one: see run_decode) */

/* Room for attention partials: (token, split) pairs per query head in one launch. */
#define ATT_TOK_SPLITS 1024

typedef struct cu_layer {
    cu_weight wq, wk, wv, wo, wgate, wup, wdown;
    float *attn_norm, *ffn_norm;                    /* [n_embd] */
    float *bq, *bk, *bv, *bo, *bgate, *bup, *bdown; /* or NULL */
    float *q_norm, *k_norm;                         /* [head_dim] or NULL */
} cu_layer;

struct cera_cuda_state {
    cera_hparams hp;
    cera_cuda_params prm;
    int n_sm, cc_major;
    cudaStream_t st;
    cublasHandle_t blas;

    cu_weight tok_embd, output; /* output shares tok_embd's memory when tied */
    bool output_tied;
    float *output_norm, *output_b;
    cu_layer *layers;
    cu_rope rope;
    float *rope_tab; /* inv_freq | ramp */

    int n_embd, n_q, n_kv, n_ff, n_vocab, hd;
    int64_t embd_pad, q_pad, ff_pad;

    float *x;                          /* residual stream [n_batch, embd_pad] */
    cu_act a_embd;                     /* normed stream [n_batch, embd_pad] (+ int8) */
    cu_act a_attn;                     /* attention output [n_batch, q_pad] (+ int8) */
    cu_act a_ff;                       /* SwiGLU output [n_batch, ff_pad] (+ int8) */
    float *qkv;                        /* [n_batch, n_q + 2 n_kv] projections before RoPE */
    float *qr;                         /* [n_batch, n_q] rotated queries */
    float *gate, *up;                  /* [n_batch, n_ff] (prefill, or mixed gate/up types) */
    float *tmp;                        /* [n_batch, n_embd] (prefill projection outputs) */
    float *logits;                     /* [n_batch, n_vocab] */
    void *half_act;                    /* [n_batch, max k_pad] F16/BF16 GEMM operand */
    void *deq;                         /* the largest weight dequantized to F16 (GEMM operand) */
    int32_t *d_tok, *d_pos, *d_argmax; /* device [n_batch], [n_batch], [1] */
    int32_t *h_io;                     /* pinned: tokens [n_batch] | positions [n_batch] | token tables
                                        * [n_batch] | argmax | block tables [tables_cap] */
    int32_t *d_tok_tbl;                /* device [n_batch]: each token's block table offset */
    int32_t *d_tables;                 /* device [tables_cap]: the batch's block tables */
    int tables_cap;

    void *kv_base; /* the KV blocks the current batch uses */
    void *own_kv;  /* the standalone API's KV blocks (identity block table) */
    int own_blocks;
    cu_attn_scratch att;
    int dec_splits;

    /* the decode graph; it bakes in the KV base it was captured with and is re-captured
     * when that moves (a new session's pool) */
    cudaGraphExec_t graph[DEC_BUCKETS];
    void *graph_kv_base[DEC_BUCKETS];
    bool graph_ready[DEC_BUCKETS];
    size_t weight_bytes;
};

/* init.c: a device weight of this model weight (uploaded, or random when synthetic). */
cera_status cu_upload_weight(cera_cuda_state *s, const cera_weight *mw, const char *what, cu_weight *out,
                             void *staging, cera_error *err);
void cu_free_weight(cu_weight *w);

/* gemm.c: Y[m, w->n] (row stride ldy) = A[m, :] · W^T through cuBLAS; A's f32 rows. */
cera_status cu_gemm(cera_cuda_state *s, const cu_weight *w, const cu_act *a, int m, float *y, int64_t ldy,
                    cera_error *err);

/* forward.c: one batch. tok_tbl[i] is the offset of token i's block table in tables (host
 * arrays); out_rows lists the tokens whose logits go to logits (row after row); argmax,
 * when set, receives the argmax of the last of them. */
cera_status cu_forward(cera_cuda_state *s, const int32_t *tokens, const int32_t *pos, int n,
                       const int32_t *tok_tbl, const int32_t *tables, int n_tables, void *kv_base,
                       const int32_t *out_rows, int n_out, float *logits, int32_t *argmax, cera_error *err);

/* init.c: bytes of one KV block (every layer's K and V for CU_KV_BLOCK positions, F16). */
size_t cu_kv_block_bytes(const cera_cuda_state *s);

#endif
