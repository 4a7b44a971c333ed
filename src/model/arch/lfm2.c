/* lfm2.c — Liquid LFM2 (llama.cpp's llm_build_lfm2), a hybrid stack: each layer is a gated
 * short-convolution block or a GQA attention block (chosen by the per-layer
 * lfm2.attention.head_count_kv, 0 = convolution), then a SwiGLU FFN. Attention has
 * per-head Q/K RMS norms and NeoX rotary pairs; the final norm is token_embd_norm; the
 * output is tied to token_embd. The convolution (lfm2.shortconv.l_cache taps) carries a
 * state per sequence across forward calls. */
#include "core/error.h"
#include "model/arch/blocks.h"

static cera_status lfm2_hparams(const cera_loader *ld, cera_hparams *hp) {
    return cera_load_lfm2_l_cache(ld, hp);
}

static cera_status lfm2_layer(const cera_loader *ld, int il, cera_layer *L) {
    const cera_status st = cera_bind_lfm2_mixer(ld, il, L);
    return st ? st : cera_bind_ffn(ld, il, L);
}

cera_status cera_build_lfm2_stack(const cera_model *m, cera_graph *g, cera_error *err) {
    cera_builder b = {m, g, err, CERA_OK};
    cera_emit_embed(&b);
    for (int il = 0; il < m->hp.n_layer; il++) {
        if (m->layers[il].n_head_kv > 0)
            cera_emit_attention(&b, il);
        else
            cera_emit_shortconv(&b, il);
        if (m->layers[il].moe.n_expert)
            cera_emit_ffn_moe(&b, il);
        else
            cera_emit_ffn_swiglu(&b, il);
    }
    cera_emit_output(&b, &m->output_norm);
    return b.st;
}

const cera_arch_def cera_arch_lfm2 = {
    .id = CERA_ARCH_LFM2,
    .name = "lfm2",
    .rope_style = CERA_ROPE_NEOX,
    .conv_layers = true,
    .output_norm = "token_embd_norm.weight",
    .hparams = lfm2_hparams,
    .layer = lfm2_layer,
    .build = cera_build_lfm2_stack,
};
