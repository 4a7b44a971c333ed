/* llama.c — llama and mistral (llama.cpp's llm_build_llama): pre-norm attention and
 * SwiGLU blocks, rotary pairs (2i, 2i+1), optional biases. qwen2, qwen3 and granite are
 * the same stack with their own traits (their files). */
#include "model/arch/blocks.h"

static cera_status llama_layer(const cera_loader *ld, int il, cera_layer *L) {
    cera_status st = cera_bind_attention(ld, il, L, false, false);
    return st ? st : cera_bind_ffn(ld, il, L);
}

/* The llama stack over the model's layers; shared by qwen2, qwen3 and granite. */
cera_status cera_build_llama_stack(const cera_model *m, cera_graph *g, cera_error *err) {
    cera_builder b = {m, g, err, CERA_OK};
    cera_emit_embed(&b);
    for (int il = 0; il < m->hp.n_layer; il++) {
        cera_emit_attention(&b, il);
        cera_emit_ffn_swiglu(&b, il);
    }
    cera_emit_output(&b, &m->output_norm);
    return b.st;
}

const cera_arch_def cera_arch_llama = {
    .id = CERA_ARCH_LLAMA,
    .name = "llama",
    .rope_style = CERA_ROPE_NORM,
    .layer = llama_layer,
    .build = cera_build_llama_stack,
};
