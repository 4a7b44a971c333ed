/*
 * graph.h — the forward pass of a model, written once: a short list of coarse ops that
 * every backend compiles at open into its own plan (the CPU executor, the CUDA one).
 *
 * The ops are the model's own vocabulary (norm, linear, rope + KV store, attend, add, GLU,
 * short conv, output), never a tensor IR: their dimensions come from the hyperparameters,
 * and each op reads and writes whole rows of named activation buffers, one row per batch
 * token. An op that works on each token by itself (EMBED, NORM, the bias of a LINEAR,
 * ROPE_KV, ADD, GLU) is "row-local": a backend may fuse runs of them into one pass;
 * LINEAR (a matmul), ATTEND and SHORTCONV (which read other tokens of the sequence) and
 * OUTPUT are not, nor is MOE (it groups the batch's tokens by expert so that each expert's
 * weights are read once per batch). The fusions a backend makes (norm into the next matmul's activation
 * quantization, Q/K/V into rope + KV store, residual adds and SwiGLU into matmul epilogues,
 * LoRA folded into the next kernel) are rules of its compile step, never per-architecture
 * code inside the backend.
 *
 * The architecture files (model/arch/ (one file each)) build the list from shared blocks
 * (model/arch/blocks.h).
 */
#ifndef CERA_MODEL_GRAPH_H
#define CERA_MODEL_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

/* Activation buffers, [n_tokens rows] of graph.width[buf] floats each. */
typedef enum cera_buf {
    CERA_BUF_X,    /* the residual stream [n_embd] */
    CERA_BUF_H,    /* a block's normed input [n_embd] */
    CERA_BUF_Q,    /* queries [n_head * head_dim] */
    CERA_BUF_K,    /* keys [n_head_kv * head_dim] */
    CERA_BUF_V,    /* values [n_head_kv * head_dim] */
    CERA_BUF_ATT,  /* attention output [n_head * head_dim]; a conv block's output [n_embd] */
    CERA_BUF_O,    /* a block's output before the residual add [n_embd] */
    CERA_BUF_GATE, /* [n_ff]; then the GLU's output */
    CERA_BUF_UP,   /* [n_ff]; LFM2: in_proj's B | C | X [3 n_embd] */
    CERA_BUF_COUNT,
} cera_buf;

typedef enum cera_op_kind {
    CERA_OP_EMBED,     /* dst = tok_embd[token] · scale (w: the table) */
    CERA_OP_NORM,      /* dst = rms_norm(src) · w, per row, or per head when head_dim > 0 (src == dst) */
    CERA_OP_LINEAR,    /* seg[i].dst = src · seg[i].wᵀ (+ seg[i].b), i < n_seg; LoRA on seg[i].proj */
    CERA_OP_ROPE_KV,   /* rope Q and K at each token's position (when rope), K and V into the cache */
    CERA_OP_ATTEND,    /* dst = softmax(Q Kᵀ · scale) V over the token's sequence, causal, GQA */
    CERA_OP_ADD,       /* dst += src · scale */
    CERA_OP_GLU,       /* dst(= src) = act(src) ⊙ src2, act silu or gelu */
    CERA_OP_SHORTCONV, /* LFM2: dst = C ⊙ conv(B ⊙ X), src = B | C | X, w: the taps; a state per sequence */
    CERA_OP_MOE,       /* dst = routed experts' SwiGLU FFNs of src, weighted (moe: model.h cera_experts) */
    CERA_OP_OUTPUT, /* logits = (rms_norm(src) · w) · w2ᵀ (+ b) · scale, for the tokens that want them */
} cera_op_kind;

/* The gate's activation of a GLU. */
typedef enum cera_glu_act {
    CERA_GLU_SILU, /* SwiGLU */
    CERA_GLU_GELU, /* GEGLU, GELU's tanh approximation (Gemma) */
} cera_glu_act;

typedef struct cera_linear_seg {
    const cera_weight *w; /* [n rows of k] */
    const cera_weight *b; /* [n] bias, or NULL */
    cera_buf dst;
    cera_proj proj; /* the LoRA target */
} cera_linear_seg;

typedef struct cera_op {
    cera_op_kind kind;
    int layer; /* the model layer (KV, LoRA, state), -1 outside them */
    cera_buf src, src2, dst;
    const cera_weight *w, *w2, *b;
    int n_seg;
    cera_linear_seg seg[3];
    float scale;             /* ROPE_KV: Q multiplied by it after the rotation when not 0 (Gemma 3) */
    float eps;               /* NORM, OUTPUT */
    int head_dim;            /* NORM per head: the head size (0: the whole row) */
    bool rope;               /* ROPE_KV: rotate (false only for granite without rope) */
    bool rope_swa;           /* ROPE_KV: with the sliding layers' base (hparams rope_base_swa) */
    int window;              /* ATTEND: a query at p sees keys p - window + 1 .. p (0: every earlier one) */
    cera_glu_act act;        /* GLU */
    const cera_experts *moe; /* MOE */
} cera_op;

typedef struct cera_graph {
    cera_op *ops;
    int n_ops, cap;
    int64_t width[CERA_BUF_COUNT]; /* floats per row; 0 for a buffer no op uses */
} cera_graph;

/* Appends an op (the list grows; the widths of LINEAR, EMBED and NORM outputs follow their
 * weights). */
cera_status cera_graph_push(cera_graph *g, const cera_op *op, cera_error *err);
/* Makes buffer b at least w floats wide (for outputs no weight gives the width of). */
void cera_graph_need(cera_graph *g, cera_buf b, int64_t w);
void cera_graph_free(cera_graph *g);

/* "norm", "linear", ... */
const char *cera_op_name(cera_op_kind k);

#endif
