/* lfm2.c — Liquid LFM2 (llama.cpp's llm_build_lfm2), a hybrid stack: each layer is a gated
 * short-convolution block or a GQA attention block (chosen by the per-layer
 * lfm2.attention.head_count_kv, 0 = convolution), then a SwiGLU FFN. Attention has
 * per-head Q/K RMS norms and NeoX rotary pairs; the final norm is token_embd_norm; the
 * output is tied to token_embd. The convolution (lfm2.shortconv.l_cache taps) carries a
 * state per sequence across forward calls. */
#include "core/error.h"
#include "model/arch/blocks.h"

static cera_status lfm2_hparams(const cera_loader *ld, cera_hparams *hp) {
    cera_status st = cera_load_int(ld, "shortconv.l_cache", hp->n_conv_layer > 0, 3, &hp->conv_l_cache);
    if (st) return st;
    if (hp->conv_l_cache < 2 || hp->conv_l_cache > 64)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "lfm2: shortconv.l_cache %d not supported (2..64)",
                         hp->conv_l_cache);
    return CERA_OK;
}

static cera_status lfm2_layer(const cera_loader *ld, int il, cera_layer *L) {
    const cera_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd;
    cera_status st;
    if (L->n_head_kv > 0) {
        if ((st = cera_bind_attention(ld, il, L, false, true))) return st;
    } else if ((st = cera_load_layer_tensor(ld, il, "attn_norm.weight", n_embd, 0, true, &L->attn_norm)) ||
               (st = cera_load_layer_tensor(ld, il, "shortconv.in_proj.weight", n_embd, 3 * n_embd, true,
                                            &L->proj[CERA_PROJ_CONV_IN])) ||
               (st = cera_load_layer_tensor(ld, il, "shortconv.out_proj.weight", n_embd, n_embd, true,
                                            &L->proj[CERA_PROJ_CONV_OUT])) ||
               (st = cera_load_layer_tensor(ld, il, "shortconv.conv.weight", hp->conv_l_cache, n_embd, true,
                                            &L->conv))) {
        return st;
    } else if (L->conv.type != CERA_TYPE_F32) {
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "tensor 'blk.%d.shortconv.conv.weight': only f32",
                         il);
    }
    return cera_bind_ffn(ld, il, L);
}

static cera_status lfm2_build(const cera_model *m, cera_graph *g, cera_error *err) {
    cera_builder b = {m, g, err, CERA_OK};
    cera_emit_embed(&b);
    for (int il = 0; il < m->hp.n_layer; il++) {
        if (m->layers[il].n_head_kv > 0)
            cera_emit_attention(&b, il);
        else
            cera_emit_shortconv(&b, il);
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
    .build = lfm2_build,
};
