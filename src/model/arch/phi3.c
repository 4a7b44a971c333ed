/* phi3.c — Microsoft Phi-3 (llama.cpp's llama_model_phi3): the llama stack with fused
 * projections, NeoX rotary pairs, Q scaled by 1/√head_dim after the rotation, and an
 * untied output (tied when the file has none).
 *
 * Fused weights: attn_qkv holds the rows of Q | K | V, and ffn_up 2 × n_ff rows, gate |
 * up (silu of the first half times the second). Each part is bound as a row range of the
 * one tensor (cera_weight_rows), so the op list is the llama stack's and every backend
 * sees three (two) ordinary projections; a file with separate attn_q/k/v loads too.
 *
 * LongRoPE (the 128k models): rope_factors_long/short divide the rotation angles, the long
 * ones when a session's context exceeds rope.scaling.original_context_length
 * (cera_model_rope_factors), and rope.scaling.attn_factor scales cos/sin (model.c).
 *
 * phi3.attention.sliding_window is read and not applied: llama.cpp turns Phi-3's window
 * off (its converters write a window the models were not run with), and cera computes what
 * llama.cpp computes from the same file. */
#include "core/error.h"
#include "model/arch/blocks.h"

static cera_status phi3_hparams(const cera_loader *ld, cera_hparams *hp) {
    cera_status st;
    int window;
    if ((st = cera_load_int(ld, "attention.sliding_window", false, 0, &window)) ||
        (st = cera_load_rope_factors(ld, "rope_factors_long.weight", &ld->m->rope_long)) ||
        (st = cera_load_rope_factors(ld, "rope_factors_short.weight", &ld->m->rope_short)))
        return st;
    if (!ld->m->rope_long.data != !ld->m->rope_short.data)
        return cera_fail(ld->err, CERA_ERR_FORMAT,
                         "phi3: the file has rope_factors_%s.weight without rope_factors_%s.weight",
                         ld->m->rope_long.data ? "long" : "short", ld->m->rope_long.data ? "short" : "long");
    hp->attn_scale_on_q = true;
    return CERA_OK;
}

static cera_status phi3_layer(const cera_loader *ld, int il, cera_layer *L) {
    const cera_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff, n_q = (int64_t)hp->head_dim * hp->n_head,
                  n_kv = (int64_t)hp->head_dim * L->n_head_kv;
    cera_weight qkv, up;
    cera_status st;
    if ((st = cera_load_layer_tensor(ld, il, "attn_qkv.weight", n_embd, n_q + 2 * n_kv, false, &qkv)))
        return st;
    if (!qkv.data) {
        if ((st = cera_bind_attention(ld, il, L, false, false))) return st;
    } else {
        if ((st = cera_load_layer_tensor(ld, il, "attn_norm.weight", n_embd, 0, true, &L->attn_norm)) ||
            (st = cera_load_layer_tensor(ld, il, "attn_output.weight", n_q, n_embd, true,
                                         &L->proj[CERA_PROJ_O])))
            return st;
        cera_weight_rows(&qkv, 0, n_q, &L->proj[CERA_PROJ_Q]);
        cera_weight_rows(&qkv, n_q, n_kv, &L->proj[CERA_PROJ_K]);
        cera_weight_rows(&qkv, n_q + n_kv, n_kv, &L->proj[CERA_PROJ_V]);
    }
    if ((st = cera_load_layer_tensor(ld, il, "ffn_norm.weight", n_embd, 0, true, &L->ffn_norm)) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_up.weight", n_embd, 2 * n_ff, true, &up)) ||
        (st =
             cera_load_layer_tensor(ld, il, "ffn_down.weight", n_ff, n_embd, true, &L->proj[CERA_PROJ_DOWN])))
        return st;
    cera_weight_rows(&up, 0, n_ff, &L->proj[CERA_PROJ_GATE]);
    cera_weight_rows(&up, n_ff, n_ff, &L->proj[CERA_PROJ_UP]);
    return CERA_OK;
}

const cera_arch_def cera_arch_phi3 = {
    .id = CERA_ARCH_PHI3,
    .name = "phi3",
    .rope_style = CERA_ROPE_NEOX,
    .hparams = phi3_hparams,
    .layer = phi3_layer,
    .build = cera_build_llama_stack,
};
