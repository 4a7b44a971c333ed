/*
 * model.h — the model shared by every backend: hyperparameters, weight handles, and the
 * forward pass written once as a short list of coarse ops (model/graph.h) that each
 * backend compiles into its own plan. Architectures: llama/mistral, qwen2, qwen3,
 * granite, lfm2, lfm2moe, gemma3 and phi3, one file each under model/arch/ (reading their metadata and
 * tensors and emitting their ops from the shared blocks of model/arch/blocks.c).
 *
 * LoRA adapters name their targets with cera_proj. Weights point into the mmapped GGUF
 * file; a backend that keeps its own copy (a GPU's upload, the CPU's repacked rows) keeps
 * it in its own state, found from the weight.
 */
#ifndef CERA_MODEL_H
#define CERA_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "cera.h"
#include "gguf/gguf.h"
#include "tensor/types.h"

typedef enum cera_arch {
    CERA_ARCH_LLAMA,
    CERA_ARCH_QWEN2,
    CERA_ARCH_QWEN3,
    CERA_ARCH_GRANITE,
    CERA_ARCH_LFM2,
    CERA_ARCH_GEMMA3,
    CERA_ARCH_PHI3,
    CERA_ARCH_LFM2MOE,
    CERA_ARCH_COUNT
} cera_arch;

typedef enum cera_rope_style {
    CERA_ROPE_NORM, /* rotate pairs (2i, 2i+1): llama, granite */
    CERA_ROPE_NEOX, /* rotate pairs (i, i + n_rot/2): qwen2, qwen3 */
} cera_rope_style;

/* How router logits become expert probabilities. */
typedef enum cera_gating {
    CERA_GATING_SOFTMAX, /* over the experts */
    CERA_GATING_SIGMOID, /* per expert (LFM2-MoE, DeepSeek-V3) */
} cera_gating;

typedef struct cera_hparams {
    cera_arch arch;
    int n_vocab;
    int n_ctx_train;
    int pooling; /* <arch>.pooling_type (llama.cpp's values; 0 none when absent) */
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;    /* the most of any attention layer (per layer: cera_layer.n_head_kv) */
    int n_kv_layer;   /* layers with a KV cache (attention layers) */
    int n_conv_layer; /* LFM2's short-convolution layers, each with a per-sequence state */
    int conv_l_cache; /* LFM2: taps of the causal convolution (lfm2.shortconv.l_cache) */
    int head_dim;     /* per head, for Q, K and V */
    int n_ff;
    int n_rot; /* rotated dimensions per head (usually head_dim) */
    float rms_eps;
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    cera_rope_style rope_style;
    bool use_rope;          /* false only for granite files with rope.scaling.finetuned = false */
    float rope_ext_factor;  /* YaRN extrapolation mix: 1 with yarn scaling, else 0 */
    float rope_attn_factor; /* magnitude factor on cos/sin (YaRN's mscale correction), usually 1 */
    float rope_beta_fast, rope_beta_slow;
    int rope_n_ctx_orig; /* the training context YaRN's correction dims are computed from */
    /* granite's multipliers; 1 (and attn_scale 1/sqrt(head_dim)) elsewhere */
    float embd_scale;
    float residual_scale;
    float attn_scale;
    float logit_scale; /* logits are divided by this */
    bool tied_output;  /* output reuses token_embd */
    /* Gemma 3: Q is multiplied by attn_scale after the rotation (then the scores by 1),
     * which rounds differently from scaling the scores */
    bool attn_scale_on_q;
    /* sliding-window attention (Gemma 3's local layers, cera_layer.swa): a query at p sees
     * keys p - n_swa + 1 .. p; those layers rotate with their own base and no scaling */
    int n_swa; /* 0: no layer slides */
    float rope_base_swa;
    /* routed experts (MoE): blocks n_dense_lead .. n_layer - 1 route each token to n_expert_used
     * of n_expert experts of n_ff_exp each (cera_layer.moe); n_expert 0: none */
    int n_expert, n_expert_used, n_ff_exp, n_dense_lead;
    cera_gating expert_gating;
} cera_hparams;

typedef struct cera_weight {
    const gguf_tensor *t; /* NULL when absent */
    cera_type type;
    int64_t k;        /* ne[0]: input length (row length) */
    int64_t n;        /* ne[1]: output count (rows) */
    const void *data; /* row-major, n rows of cera_row_size(type, k) bytes */
    int64_t row0;     /* its first row within t: a row range of a fused tensor (phi3's attn_qkv), else 0 */
} cera_weight;

/* The seven projections a LoRA adapter may target, in llama.cpp's tensor names. */
typedef enum cera_proj {
    CERA_PROJ_Q,        /* attn_q      [n_embd] -> [n_head * head_dim] */
    CERA_PROJ_K,        /* attn_k      [n_embd] -> [n_head_kv * head_dim] */
    CERA_PROJ_V,        /* attn_v      [n_embd] -> [n_head_kv * head_dim] */
    CERA_PROJ_O,        /* attn_output [n_head * head_dim] -> [n_embd] */
    CERA_PROJ_GATE,     /* ffn_gate    [n_embd] -> [n_ff] */
    CERA_PROJ_UP,       /* ffn_up      [n_embd] -> [n_ff] */
    CERA_PROJ_DOWN,     /* ffn_down    [n_ff] -> [n_embd] */
    CERA_PROJ_CONV_IN,  /* shortconv.in_proj  [n_embd] -> [3 n_embd] (LFM2: B | C | X) */
    CERA_PROJ_CONV_OUT, /* shortconv.out_proj [n_embd] -> [n_embd] */
    CERA_PROJ_COUNT
} cera_proj;

/* "attn_q", "attn_k", ... (the GGUF tensor name without "blk.N." and ".weight"). */
const char *cera_proj_name(cera_proj p);

/* A block's routed experts, llama.cpp's build_moe_ffn: probs = gating(router · h); the
 * n_used experts with the largest probs + sel_bias win (the bias steers the choice only);
 * their weights are their probs, divided by their sum when norm_w, times w_scale when it is
 * not 0 or 1; the output is the weighted sum of the winners' SwiGLU FFNs. */
typedef struct cera_experts {
    int n_expert; /* 0: a dense block */
    int n_used;
    cera_gating gating;
    bool norm_w;
    float w_scale;
    cera_weight router;   /* ffn_gate_inp [n_expert rows of n_embd] */
    cera_weight sel_bias; /* exp_probs_b [n_expert], or absent */
    /* expert e's matrices, views into the 3-D ffn_{gate,up,down}_exps ([n_expert] each):
     * gate, up [n_ff_exp rows of n_embd], down [n_embd rows of n_ff_exp] */
    cera_weight *gate, *up, *down;
} cera_experts;

/* The 3 n_expert + 1 matrices of x by index: the router, then every gate, up, down. */
static inline const cera_weight *cera_experts_matrix(const cera_experts *x, int i) {
    const int n = x->n_expert;
    return i == 0       ? &x->router
           : i <= n     ? &x->gate[i - 1]
           : i <= 2 * n ? &x->up[i - n - 1]
                        : &x->down[i - 2 * n - 1];
}

typedef struct cera_layer {
    int n_head_kv;         /* 0: no attention in this layer (an LFM2 conv block) */
    int kv_index;          /* its slot among the KV layers (kv/kv_cache.h), or -1 */
    int conv_index;        /* its slot among the conv layers' states, or -1 */
    cera_weight attn_norm; /* [n_embd] */
    cera_weight proj[CERA_PROJ_COUNT];
    cera_weight bq, bk, bv;     /* qwen2's QKV biases, or absent */
    cera_weight q_norm, k_norm; /* qwen3's per-head RMS norms [head_dim], or absent */
    cera_weight ffn_norm;       /* [n_embd] */
    /* optional biases llama.cpp also accepts for llama (rare), or absent */
    cera_weight bo, b_gate, b_up, b_down;
    cera_weight conv; /* LFM2 shortconv.conv [n_embd rows of conv_l_cache taps], or absent */
    cera_weight post_attn_norm, post_ffn_norm; /* Gemma 3's norms of each branch [n_embd], or absent */
    bool swa;                                  /* a sliding-window layer (hparams n_swa) */
    cera_experts moe;                          /* routed experts instead of ffn_{gate,up,down} */
} cera_layer;

struct cera_graph;

typedef struct cera_model {
    cera_hparams hp;
    struct cera_graph *graph; /* the forward pass (model/graph.h), built at load */
    const gguf_file *file;
    cera_weight tok_embd;    /* [n_vocab rows of n_embd] */
    cera_weight output_norm; /* [n_embd] */
    cera_weight output;      /* [n_vocab rows of n_embd]; == tok_embd when tied */
    cera_weight output_b;    /* qwen2's optional output bias [n_vocab], or absent */
    cera_weight rope_freqs;  /* llama-3 rope factors [n_rot/2], or absent */
    /* LongRoPE factors [n_rot/2] (phi3), or absent: long for contexts past rope_n_ctx_orig */
    cera_weight rope_long, rope_short;
    cera_layer *layers; /* [n_layer] */
} cera_model;

/* The GGUF `general.architecture` name of an arch ("llama", "qwen2", ...). */
const char *cera_arch_name(cera_arch a);

/* Reads hyperparameters, binds weights from a validated GGUF file (every shape is
 * checked) and builds the forward pass. An unsupported architecture is an error naming it. */
cera_status cera_model_load(const gguf_file *f, cera_model *m, cera_error *err);
/* The divisors of the rotation angles [n_rot/2] for a context of n_ctx positions per
 * sequence, or NULL: rope_freqs when the file has it, else LongRoPE's long factors past
 * the original context and the short ones within it (as llama.cpp picks them). */
const float *cera_model_rope_factors(const cera_model *m, int n_ctx);
void cera_model_free(cera_model *m);

#endif
