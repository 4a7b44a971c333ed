/* qwen3.c — Qwen3 (llama.cpp's llm_build_qwen3): the llama stack with per-head RMS norms
 * of Q and K before the rotation, NeoX rotary pairs. */
#include "model/arch/blocks.h"

static cera_status qwen3_layer(const cera_loader *ld, int il, cera_layer *L) {
    cera_status st = cera_bind_attention(ld, il, L, false, true);
    return st ? st : cera_bind_ffn(ld, il, L);
}

const cera_arch_def cera_arch_qwen3 = {
    .id = CERA_ARCH_QWEN3,
    .name = "qwen3",
    .rope_style = CERA_ROPE_NEOX,
    .layer = qwen3_layer,
    .build = cera_build_llama_stack,
};
