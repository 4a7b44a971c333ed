/*
 * cuda_state.h — the CUDA backend's private state, shared by its host files:
 * init.c (upload and allocation), plan.c (the model's op list compiled into CUDA steps),
 * forward.c (running the steps: decode and prefill), gemm.c (the cuBLAS path) and hooks.c
 * (measurement and test entry points).
 */
#ifndef CERA_BACKEND_CUDA_STATE_H
#define CERA_BACKEND_CUDA_STATE_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lora_cuda.h"
#include "core/error.h"
#include "kv/kv_cache.h"
#include "lora/lora.h"
#include "model/graph.h"

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

/* Decode graphs, one per row count: bucket 0 is the one-token step (with its LoRA
 * launches), bucket B - 1 a step of B tokens of B sequences (forward.c: RUN_ROWS). */
#define DEC_ROWS_MAX 64
#define DEC_BUCKETS  DEC_ROWS_MAX
/* Decode steps of at least this many rows run their Q4_0/Q8_0 projections without a bias on
 * the tensor cores (cu_mma_q8), fewer through cu_matvec_rows (each row the one-row kernel's
 * bits): measured on the H200 (bench/RESULTS.md), mma at 8 rows about matches the several-row
 * matvec and from 16 rows on beats it 2-4x. */
#define MMA_MIN_ROWS 8

/* Room for attention partials: (token, split) pairs per query head in one launch (a
 * decode step of DEC_ROWS_MAX rows may need more: init.c sizes them for both). */
#define ATT_TOK_SPLITS 1024

/* What a decode step's LoRA item table depends on: batch row 0's adapters (ids, in plan
 * order) and their scales; unused slots stay zero so keys compare with memcmp. */
typedef struct cu_lora_items_key {
    int n;
    uint64_t id[CU_LORA_ROW_MAX];
    float scale[CU_LORA_ROW_MAX];
} cu_lora_items_key;

/* ---- The plan (plan.c) ------------------------------------------------------------
 * The model's op list (model/graph.h) compiled at open into CUDA steps. Every graph buffer
 * b has two device homes: CU_ST_F32(b), where a matmul stores its rows (a LINEAR's
 * segments side by side in one row), and CU_ST_ACT(b), rows a matmul reads (f32 and the
 * int8 quantization: a norm's, the attention's, the conv's or the SwiGLU's output);
 * CU_ST_ROT holds the rotated queries. A step names its rows by home, offset and stride;
 * the homes are allocated after the compile, sized for n_batch rows of their widest use. */
#define CU_ST_F32(b) ((int)(b))
#define CU_ST_ACT(b) (CERA_BUF_COUNT + (int)(b))
#define CU_ST_ROT    (2 * CERA_BUF_COUNT)
#define CU_ST_COUNT  (2 * CERA_BUF_COUNT + 1)

typedef struct cu_store {
    float *f;  /* [n_batch, width] */
    int8_t *q; /* ACT homes: [n_batch, width] quants; d, s per 32 of them */
    float *d;
    int32_t *s;
    int64_t width; /* floats per row (ACT homes: the widest k_pad) */
} cu_store;

/* Rows of a buffer: home st (-1: not written yet), the first row at off floats, rows
 * stride apart, k values each. In an ACT home off is 0 and stride the k_pad of k. */
typedef struct cu_loc {
    int st;
    int64_t off, stride, k;
} cu_loc;

typedef enum cu_step_kind {
    CU_STEP_EMBED,   /* dst rows = tok_embd[token] · scale */
    CU_STEP_NORM,    /* dst (ACT) = rms_norm(src) · w, quantized */
    CU_STEP_LINEAR,  /* segments from src (ACT): stored, added into dst, or SwiGLU'd into dst */
    CU_STEP_ROPE_KV, /* per-head norms of Q/K (w, w2), rope, K/V into the cache; Q into dst (ROT) */
    CU_STEP_ATTEND,  /* dst (ACT) = attention of the queries src over the KV slot */
    CU_STEP_ADD,     /* dst += src · scale (an ADD no matmul epilogue took) */
    CU_STEP_GLU,     /* dst (ACT) = act(src) ⊙ src2 (a GLU no matmul epilogue took; GEGLU always) */
    CU_STEP_CONV,    /* dst (ACT) = the short convolution of src (B | C | X), state slot conv */
    CU_STEP_OUTPUT,  /* logits = (rms_norm(src) · w into dst) · mw (+ bias) · scale */
    CU_STEP_MOE,     /* dst = routed experts of src (ACT): router mw, sel_bias bias, the stacked
                      * gate/up/down in seg[0..2] (forward.c: step_moe) */
} cu_step_kind;

/* Where a one-token decode step adds an adapter's B·t of a LINEAR (the others add it right
 * after the matmul): in the kernel that reads the output anyway. */
typedef enum cu_lora_at {
    CU_LORA_AT_ONCE,   /* cu_lora_b after the matmul */
    CU_LORA_AT_ROPE,   /* Q/K/V: cu_rope_store_lora */
    CU_LORA_AT_SWIGLU, /* gate/up: cu_lora_swiglu */
    CU_LORA_AT_NORM,   /* a residual add's: the next RMS norm (cu_norm_lora) */
} cu_lora_at;

typedef struct cu_seg {
    const cu_weight *w;
    const float *bias; /* [w->n] or NULL */
    cu_loc y;          /* where the matmul stores it (prefill, and decode without the epilogue) */
    cera_proj proj;    /* the LoRA target */
} cu_seg;

typedef struct cu_step {
    cu_step_kind kind;
    int layer; /* the model layer (LoRA), -1 outside them */
    cu_loc src, src2, dst;
    int n_seg; /* LINEAR */
    cu_seg seg[3];
    cu_mv_epilogue epi;
    cu_lora_at lora_at;
    cu_loc k, v;             /* ROPE_KV: keys and values (rows as src's) */
    const float *w, *w2;     /* NORM, OUTPUT, CONV: the weight; ROPE_KV: the Q and K norms or NULL */
    const cu_weight *mw;     /* EMBED: the table; OUTPUT: the output weight */
    const float *bias;       /* OUTPUT */
    float scale, eps;        /* ROPE_KV: scale multiplies Q after the rotation (1: none) */
    bool rope;               /* ROPE_KV: rotate */
    bool rope_swa;           /* ROPE_KV: with the sliding layers' tables (rope_swa) */
    bool gelu;               /* GLU: GEGLU (else SwiGLU) */
    int kv;                  /* ROPE_KV, ATTEND: the KV slot */
    int window;              /* ATTEND: the sliding window (0: none) */
    int lc;                  /* CONV: taps */
    int64_t state_off;       /* CONV: its rows in a sequence's state */
    const cera_experts *moe; /* MOE: counts, gating and weighting (model.h) */
} cu_step;

/* Where a KV slot (the plan's ROPE_KV order, which is the engine's KV-layer order) keeps
 * its rows on the device: its group's blocks (kv/kv_cache.h), its K section at offset. */
typedef struct cu_kv_slot {
    int group;      /* CERA_KV_FULL or CERA_KV_SWA (a layer with a sliding window) */
    int n_head_kv;  /* the layer's KV heads */
    int kv_dim;     /* n_head_kv * head_dim */
    int64_t offset; /* bytes from its group's block start to its K section */
} cu_kv_slot;

/* A model weight's device copy, uploaded once (a tied output is token_embd's entry). */
typedef struct cu_wentry {
    const cera_weight *mw;
    cu_weight w;
    bool streamed;       /* read whole per token (a matmul's) */
    int64_t expert_rows; /* a stacked expert tensor: rows per expert (0: not one) */
    double share;        /* a stacked expert tensor: the part a token reads (n_used / n_expert) */
} cu_wentry;

struct cera_cuda_state {
    cera_hparams hp;
    cera_cuda_params prm;
    int n_sm, cc_major;
    cudaStream_t st;
    cublasHandle_t blas;

    /* the plan (plan.c) and what it uploaded */
    cu_step *steps;
    int n_steps;
    cu_store store[CU_ST_COUNT];
    cu_wentry *wts; /* the weights the plan's steps point at */
    int n_wts, cap_wts;
    float **vecs; /* norms, biases, conv taps (device) */
    int n_vecs, cap_vecs;
    int rows_max;  /* the most rows of a several-sequence decode step (forward.c: use_decode_rows) */
    bool mma_any;  /* a matmul's weight is one cu_mma_q8 takes (short prompt chunks use it) */
    int64_t k_max; /* the widest k_pad a matmul reads */
    /* rope_swa: the sliding layers' (their own base, no frequency scaling), when one slides */
    cu_rope rope, rope_swa;
    float *rope_tab, *rope_tab_swa; /* inv_freq | ramp */

    int n_embd, n_q, n_kv, n_vocab, hd; /* the residual width; Q's, the widest K/V row */
    int n_kv_layer;                     /* KV slots (the plan's ROPE_KV steps) */
    cu_kv_slot *kvl;                    /* [n_kv_layer] */
    int64_t kv_block[CERA_KV_GROUPS];   /* bytes of a block of each group (0: a group without layers) */
    int n_conv;                         /* conv steps (their states) */
    int32_t *d_first, *d_slot, *d_last; /* device [n_batch]: per token, for the conv (conv.cu) */
    int32_t *h_conv;                    /* pinned [3 n_batch]: their staging */
    float *conv_state;                  /* the sequences' conv states: slot s at s * conv_state_slot floats */
    int64_t conv_state_slot;            /* floats per slot: every conv step's (lc - 1) rows */
    float *own_state;                   /* the standalone API's one slot */
    /* routed experts (forward.c: step_moe), sized for n_batch tokens of the widest MoE step */
    int moe_k, moe_ne;                /* most experts used per token; most experts */
    int64_t moe_ff_pad, moe_embd_pad; /* the widest expert FFN and output row (padded to 32) */
    float *moe_logits;                /* [n_batch, moe_ne] */
    float *moe_wt;                    /* [n_batch * moe_k]: each slot's weight */
    int32_t *moe_counter;             /* cu_moe_router's blocks done (zero between launches) */
    int32_t *moe_sel;                 /* [n_batch * moe_k]: each slot's expert */
    int32_t *moe_where;               /* [3 n_batch moe_k]: a prompt chunk's grouped row of each
                                       * slot, then each grouped row's token and expert */
    int32_t *h_moe;                   /* pinned: their staging, then the groups' counts */
    float *moe_g, *moe_u, *moe_eo;    /* gate, up; the expert outputs [n_batch * moe_k rows] */
    cu_store moe_x;                   /* a prompt chunk's rows gathered by expert (quantized) */
    cu_store moe_h;                   /* the SwiGLU rows, quantized [n_batch * moe_k] */
    cera_weight *moe_mw;              /* [3 n_layer]: the stacked tensors the plan uploaded */
    void *moe_half;                   /* [n_batch * moe_k, the widest k_pad] F16/BF16 GEMM rows */
    void **moe_ptr;                   /* device [3 moe_ne]: a grouped GEMM's A, B, C pointers */
    const void **h_moe_ptr;           /* pinned: their staging */
    int *h_moe_dims;                  /* host [6 moe_ne]: its m, n, k, lda/ldb, ldc, group sizes */
    cublasOperation_t *h_moe_ops;     /* host [2 moe_ne] */
    float *h_moe_ab;                  /* host [2 moe_ne]: alphas, betas */
    bool moe_no_grouped;              /* cuBLAS refused the grouped call: one GEMM per expert */
    float *mma_work; /* cu_mma_q8's split-K partials for DEC_ROWS_MAX rows (a decode step, a short chunk) */
    int64_t mma_work_bytes;
    int64_t embd_pad;

    float *x;       /* the residual stream X's home [n_batch, embd_pad] (store[CU_ST_F32(X)].f) */
    float *x2;      /* decode with adapters: the residual row's other home [embd_pad] */
    float *logits;  /* [n_batch, n_vocab] */
    void *half_act; /* [n_batch, k_max] F16/BF16 GEMM operand */
    void *deq;      /* the largest weight dequantized to F16 (GEMM operand) */
    int32_t *d_tok, *d_pos, *d_argmax; /* device [n_batch], [n_batch], [1] */
    int32_t *h_io;                     /* pinned: tokens [n_batch] | positions [n_batch] | token tables
                                        * [n_batch] | argmax | block tables [2][tables_cap] */
    int32_t *d_tok_tbl;                /* device [n_batch]: each token's block table offset */
    int32_t *d_tables;                 /* device [2][tables_cap]: the batch's block tables, the full
                                        * group's, then the sliding group's at the same offsets */
    int tables_cap;

    void *kv_base[CERA_KV_GROUPS]; /* each group's KV blocks the current batch uses */
    void *own_kv[CERA_KV_GROUPS];  /* the standalone API's KV blocks (identity block tables) */
    int own_blocks;
    cu_attn_scratch att;
    int dec_splits;

    /* the decode graph; it bakes in the KV base it was captured with and is re-captured
     * when that moves (a new session's pool) */
    cudaGraphExec_t graph[DEC_BUCKETS];
    void *graph_kv_base[DEC_BUCKETS][CERA_KV_GROUPS];
    bool graph_ready[DEC_BUCKETS];
    unsigned graph_lora_mask[DEC_BUCKETS]; /* the LoRA launches it was captured with */
    float *graph_lora_t[DEC_BUCKETS];
    int graph_lora_nent[DEC_BUCKETS];
    size_t weight_bytes;

    /* LoRA (lora.c): the device plan, its pinned staging and the current batch's summary */
    cu_lora_plan lora;
    void *lora_dev, *lora_host; /* head (n_ent, row_first) | entries */
    size_t lora_head_bytes;
    int32_t *lora_fill;                         /* host [n_batch + 1] */
    int lora_max_ent, lora_n_ent, lora_cap_ent; /* entries: most a batch can have, this one's, room in t */
    unsigned lora_mask;                         /* projections the batch's adapters target (0: no adapter) */
    bool lora_joined;                           /* the side stream's last A·x has been waited for */
    bool lora_uniform;              /* every group covers all rows at one scale (prefill: cuBLAS) */
    const cera_lora_batch *lora_lb; /* the current batch's plan (host) */
    /* the adapters uploaded so far (lora.c), by adapter id */
    struct cu_lora_dev **lora_devs;
    uint64_t *lora_dev_ids;
    int n_lora_devs, cap_lora_devs;
    void *lora_items_dev;          /* decode: the item table (lora.items, lora.item_n) */
    cu_lora_item *lora_items_host; /* pinned: its staging */
    size_t lora_items_bytes;
    cu_lora_items_key lora_items_key; /* the row-0 adapters it was made for (n = -1: none yet) */
    bool profile;                     /* CERA_CUDA_PROFILE: time the prefill's phases (forward.c) */
    /* the forward in flight gives embeddings (backend.h, cera_batch.embd): the output step
     * writes the normed rows [n_out, n_embd] into `logits` instead of multiplying them */
    bool embd;
    bool lora_fork;    /* decode graphs run A·x on the side stream (CERA_CUDA_LORA_FORK=0: off) */
    cudaStream_t side; /* decode: A·x beside the matvec */
    cudaEvent_t ev_fork, ev_join;
};

/* plan.c: compiles m->graph into s->steps, uploading the weights the steps use; sizes
 * s->store (allocated by init.c after). */
cera_status cu_plan_compile(cera_cuda_state *s, const cera_model *m, void *staging, cera_error *err);
/* plan.c: the bytes of the largest raw weight the graph uploads (the staging buffer). */
size_t cu_plan_staging_bytes(const cera_model *m);
void cu_plan_free(cera_cuda_state *s);

/* init.c: n floats of a model vector (a norm, a bias, conv taps) on the device; fill when the
 * weights are synthetic; *out NULL when the weight is absent (and fill is 0). */
cera_status cu_upload_vec(cera_cuda_state *s, const cera_weight *mw, const char *what, int64_t n, float fill,
                          float **out, cera_error *err);
/* init.c: a device weight of this model weight (uploaded, or random when synthetic). */
cera_status cu_upload_weight(cera_cuda_state *s, const cera_weight *mw, const char *what, cu_weight *out,
                             void *staging, cera_error *err);
void cu_free_weight(cu_weight *w);

/* gemm.c: for each expert e of the stacked weight w (rows_per_expert rows each), the rows
 * start[e] .. start[e + 1] of y (ldy apart) = those rows of a (f32) · W_e^T: a prompt chunk's
 * rows grouped by expert. */
cera_status cu_gemm_experts(cera_cuda_state *s, const cu_weight *w, int64_t rows_per_expert,
                            const int32_t *start, int ne, const cu_act *a, float *y, int64_t ldy,
                            cera_error *err);
/* gemm.c: Y[m, w->n] (row stride ldy) = A[m, :] · W^T through cuBLAS; A's f32 rows. */
cera_status cu_gemm(cera_cuda_state *s, const cu_weight *w, const cu_act *a, int m, float *y, int64_t ldy,
                    cera_error *err);

/* forward.c: one batch. tok_tbl[i] is the offset of token i's block table in tables (host
 * arrays; a model with sliding layers has the sliding group's tables at tables + n_tables,
 * at the same offsets), kv_base each group's blocks, tok_slot[i] its sequence's slot (conv states; NULL: slot
 * 0); out_rows lists the tokens whose logits go to logits (row after row); argmax, when set, receives the
 * argmax of the last of them; lora: the batch's rows grouped by adapter, or NULL. */
cera_status cu_forward(cera_cuda_state *s, const int32_t *tokens, const int32_t *pos, int n,
                       const int32_t *tok_tbl, const int32_t *tables, int n_tables, void *const *kv_base,
                       const int32_t *tok_slot, const int32_t *out_rows, int n_out, float *logits,
                       int32_t *argmax, const cera_lora_batch *lora, cera_error *err);

/* forward.c: cera_cuda_forward (the standalone sequence) with adapters (benchmarks). */
cera_status cu_forward_own(cera_cuda_state *s, const int32_t *tokens, const int32_t *positions, int n,
                           float *logits, bool all_logits, int32_t *argmax_out, const cera_lora_batch *lora,
                           cera_error *err);

/* lora.c: the plan storage (init/free), and per batch: uploads the adapters it uses the
 * first time, then copies its plan to the device (lora_mask 0 when lb is NULL or empty). */
cera_status cu_lora_init(cera_cuda_state *s, cera_error *err);
void cu_lora_free(cera_cuda_state *s);
/* Frees the upload of adapter id, if there is one. */
void cu_lora_forget(cera_cuda_state *s, uint64_t id);
cera_status cu_lora_prepare(cera_cuda_state *s, const cera_lora_batch *lb, int n, cera_error *err);
/* The targeted segments among proj[0..n) (outputs y[j] of width d[j], rows y_stride apart);
 * n = 0 in the result when the batch's adapters target none of them. */
cu_lora_segs cu_lora_group(const cera_cuda_state *s, const cera_proj *proj, float *const *y, const int64_t *d,
                           int n, int64_t y_stride);
/* The plan segment (slot in t) of projection p's A·x in a group: a kernel that adds B·t
 * for the decode step (cu_rope_store_lora, cu_lora_swiglu, cu_norm_lora) finds it there. */
int cu_lora_slot(cera_proj p);
/* t = A·x for the group's segments; fork: on the side stream, joined by cu_lora_join. */
cera_status cu_lora_apply_a(cera_cuda_state *s, int layer, const cu_lora_segs *g, const cu_act *x, bool fork,
                            cera_error *err);
cera_status cu_lora_join(cera_cuda_state *s, cera_error *err);
/* Prefill of a uniform plan (lora_uniform) through cuBLAS: per adapter and segment,
 * T = X·Aᵀ (F16; X is half_act, rows of x->k_pad) then Y += s·T·Bᵀ (F32). */
cera_status cu_lora_prefill_gemm(cera_cuda_state *s, int layer, const cu_lora_segs *g, const cu_act *x, int n,
                                 cera_error *err);

/* init.c: lays the KV slots out in their groups' blocks (s->kvl offsets, s->kv_block). */
void cu_kv_layout(cera_cuda_state *s);

/* The device cache type of a KV type (cuda_kernels.h's layout; -1: not kept on the GPU). */
static inline int cu_kv_type_of(cera_kv_type t) {
    return t == CERA_KV_F16    ? CU_KV_F16
           : t == CERA_KV_Q8_0 ? CU_KV_Q8
           : t == CERA_KV_Q4_0 ? CU_KV_Q4
           : t == CERA_KV_BF16 ? CU_KV_BF16
                               : -1;
}

#endif
