/* lfm2moe.c — Liquid LFM2-MoE (llama.cpp's lfm2moe, built by its llm_build_lfm2): LFM2's
 * hybrid stack of short-convolution and attention blocks (lfm2.c), where every block from
 * leading_dense_block_count on replaces the dense SwiGLU FFN by routed experts: a sigmoid
 * router (expert_gating_func), a selection-only bias exp_probs_b, the top expert_used_count
 * experts weighted by their normalized probabilities (llama.cpp always normalizes for this
 * architecture) over 3-D expert tensors. */
#include "core/error.h"
#include "model/arch/blocks.h"

static cera_status lfm2moe_hparams(const cera_loader *ld, cera_hparams *hp) {
    const cera_status st = cera_load_lfm2_l_cache(ld, hp);
    return st ? st : cera_load_moe_hparams(ld, hp);
}

static cera_status lfm2moe_layer(const cera_loader *ld, int il, cera_layer *L) {
    const cera_hparams *hp = &ld->m->hp;
    cera_status st = cera_bind_lfm2_mixer(ld, il, L);
    if (st) return st;
    if (il < hp->n_dense_lead) return cera_bind_ffn(ld, il, L);
    /* llama.cpp's lfm2moe always normalizes and never scales (it reads no such keys) */
    return cera_bind_experts(ld, il, L, true, true, 0.0f);
}

const cera_arch_def cera_arch_lfm2moe = {
    .id = CERA_ARCH_LFM2MOE,
    .name = "lfm2moe",
    .rope_style = CERA_ROPE_NEOX,
    .conv_layers = true,
    .output_norm = "token_embd_norm.weight",
    .hparams = lfm2moe_hparams,
    .layer = lfm2moe_layer,
    .build = cera_build_lfm2_stack,
};
