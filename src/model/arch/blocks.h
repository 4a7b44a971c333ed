/*
 * blocks.h — the blocks architectures are made of, shared by the files in model/arch/:
 * binding a block's tensors and emitting its ops (model/graph.h). A new architecture
 * is a few lines over these plus, for a genuinely new block, one more here.
 */
#ifndef CERA_MODEL_ARCH_BLOCKS_H
#define CERA_MODEL_ARCH_BLOCKS_H

#include "model/loader.h"

/* attn_norm, attn_{q,k,v,output}, their optional biases (required: qkv_bias) and the
 * optional per-head attn_{q,k}_norm (required: qk_norm). */
cera_status cera_bind_attention(const cera_loader *ld, int il, cera_layer *L, bool qkv_bias, bool qk_norm);
/* ffn_norm, ffn_{gate,up,down} and their optional biases. */
cera_status cera_bind_ffn(const cera_loader *ld, int il, cera_layer *L);
/* LFM2's mixer of layer il: a conv block (attn_norm, shortconv.{in_proj,out_proj,conv}) when
 * the layer has no KV heads, else attention with per-head Q/K norms. */
cera_status cera_bind_lfm2_mixer(const cera_loader *ld, int il, cera_layer *L);
/* LFM2's shortconv.l_cache (the conv taps), checked. */
cera_status cera_load_lfm2_l_cache(const cera_loader *ld, cera_hparams *hp);
/* The MoE hyperparameters (expert_count, expert_used_count, expert_feed_forward_length,
 * leading_dense_block_count, expert_gating_func), checked. */
cera_status cera_load_moe_hparams(const cera_loader *ld, cera_hparams *hp);
/* ffn_norm and the routed experts of block il (cera_experts: ffn_gate_inp, exp_probs_b when
 * with_bias, ffn_{gate,up,down}_exps) with the file's gating; weight normalization and scale
 * as given. */
cera_status cera_bind_experts(const cera_loader *ld, int il, cera_layer *L, bool with_bias, bool norm_w,
                              float w_scale);

typedef struct cera_builder {
    const cera_model *m;
    cera_graph *g;
    cera_error *err;
    cera_status st; /* the first failure; later emits do nothing */
} cera_builder;

/* X = tok_embd[token] · embd_scale. */
void cera_emit_embed(cera_builder *b);
/* x += attention(rms_norm(x) · attn_norm) · residual_scale, as llama.cpp's llm_build_llama:
 * Q/K/V (+ biases), per-head Q/K norms when the layer has them, rope (the sliding layers'
 * base on a sliding layer), the KV store, GQA attention scaled by attn_scale (on Q after
 * the rotation when hparams attn_scale_on_q) within the layer's window, the output
 * projection (+ bias), then the layer's post_attn_norm when it has one (Gemma 3). */
void cera_emit_attention(cera_builder *b, int il);
/* x += down(silu(gate(h)) ⊙ up(h)) · residual_scale, h = rms_norm(x) · ffn_norm. */
void cera_emit_ffn_swiglu(cera_builder *b, int il);
/* The same with the gate's activation act, and the layer's post_ffn_norm on the branch
 * when it has one (Gemma 3: GELU, normed). */
void cera_emit_ffn_glu(cera_builder *b, int il, cera_glu_act act);
/* x += moe(h) · residual_scale, h = rms_norm(x) · ffn_norm: the block's routed experts. */
void cera_emit_ffn_moe(cera_builder *b, int il);
/* LFM2's gated short convolution: x += out_proj(C ⊙ conv(B ⊙ X)), B | C | X = in_proj(h),
 * h = rms_norm(x) · attn_norm. */
void cera_emit_shortconv(cera_builder *b, int il);
/* The llama stack (embed; per layer attention then SwiGLU FFN; output), which llama,
 * qwen2, qwen3 and granite share (arch/llama.c). */
cera_status cera_build_llama_stack(const cera_model *m, cera_graph *g, cera_error *err);
/* The LFM2 stack (embed; per layer attention or the short convolution, then the dense
 * SwiGLU FFN or, where the layer has them, the routed experts; output), which lfm2 and
 * lfm2moe share (arch/lfm2.c). */
cera_status cera_build_lfm2_stack(const cera_model *m, cera_graph *g, cera_error *err);

/* logits = (rms_norm(x) · norm) · outputᵀ (+ output.bias) / logit_scale. */
void cera_emit_output(cera_builder *b, const cera_weight *norm);

#endif
