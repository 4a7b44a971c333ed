/* qwen2.c — Qwen2 (llama.cpp's llm_build_qwen2): the llama stack with Q/K/V biases and
 * NeoX rotary pairs (i, i + n_rot/2). */
#include "model/arch/blocks.h"

static cera_status qwen2_layer(const cera_loader *ld, int il, cera_layer *L) {
    cera_status st = cera_bind_attention(ld, il, L, true, false);
    return st ? st : cera_bind_ffn(ld, il, L);
}

const cera_arch_def cera_arch_qwen2 = {
    .id = CERA_ARCH_QWEN2,
    .name = "qwen2",
    .rope_style = CERA_ROPE_NEOX,
    .layer = qwen2_layer,
    .build = cera_build_llama_stack,
};
