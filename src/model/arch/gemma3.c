/* gemma3.c — Google Gemma 3 (llama.cpp's llama_model_gemma3), text only: embeddings scaled
 * by √n_embd, pre-norm attention with per-head Q/K RMS norms, NeoX rotary pairs and Q
 * scaled by 1/√head_dim after the rotation, a GELU-gated FFN, and an RMS norm on each
 * branch's output (post_attention_norm, post_ffw_norm) before its residual add; the output
 * is tied to token_embd unless the file has one. With gemma3.attention.sliding_window,
 * layers slide in a period (attention.sliding_window_pattern, 6 by default: layers with
 * il % 6 < 5 see only the window, every sixth attends globally), and sliding layers rotate
 * with rope.freq_base_swa (10000 by default) and no rope scaling; the KV pool keeps only
 * their window (kv/kv_cache.h). */
#include <math.h>

#include "core/error.h"
#include "model/arch/blocks.h"

static cera_status gemma3_hparams(const cera_loader *ld, cera_hparams *hp) {
    cera_status st;
    int window, period;
    if ((st = cera_load_int(ld, "attention.sliding_window", false, 0, &window)) ||
        (st = cera_load_int(ld, "attention.sliding_window_pattern", false, 6, &period)) ||
        (st = cera_load_float(ld, "rope.freq_base_swa", 10000.0f, &hp->rope_base_swa)))
        return st;
    if (hp->rope_base_swa <= 0)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "gemma3: rope.freq_base_swa %g <= 0",
                         (double)hp->rope_base_swa);
    float softcap;
    if ((st = cera_load_float(ld, "final_logit_softcapping", 0.0f, &softcap))) return st;
    if (softcap != 0.0f)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "gemma3: final_logit_softcapping %g not supported",
                         (double)softcap);
    hp->n_swa = window;
    for (int il = 0; il < hp->n_layer; il++)
        ld->m->layers[il].swa = window > 0 && (period == 0 || il % period < period - 1);
    hp->embd_scale = sqrtf((float)hp->n_embd);
    /* llama.cpp: 1/√head_dim, but 1/√(n_embd / n_head) for the 27B model (62 layers) */
    hp->attn_scale = 1.0f / sqrtf((float)(hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim));
    hp->attn_scale_on_q = true;
    return CERA_OK;
}

static cera_status gemma3_layer(const cera_loader *ld, int il, cera_layer *L) {
    const int64_t n_embd = ld->m->hp.n_embd;
    cera_status st;
    if ((st = cera_bind_attention(ld, il, L, false, true)) ||
        (st = cera_load_layer_tensor(ld, il, "post_attention_norm.weight", n_embd, 0, true,
                                     &L->post_attn_norm)) ||
        (st = cera_bind_ffn(ld, il, L)) ||
        (st = cera_load_layer_tensor(ld, il, "post_ffw_norm.weight", n_embd, 0, true, &L->post_ffn_norm)))
        return st;
    return CERA_OK;
}

static cera_status gemma3_build(const cera_model *m, cera_graph *g, cera_error *err) {
    cera_builder b = {m, g, err, CERA_OK};
    cera_emit_embed(&b);
    for (int il = 0; il < m->hp.n_layer; il++) {
        cera_emit_attention(&b, il);
        cera_emit_ffn_glu(&b, il, CERA_GLU_GELU);
    }
    cera_emit_output(&b, &m->output_norm);
    return b.st;
}

const cera_arch_def cera_arch_gemma3 = {
    .id = CERA_ARCH_GEMMA3,
    .name = "gemma3",
    .rope_style = CERA_ROPE_NEOX,
    .hparams = gemma3_hparams,
    .layer = gemma3_layer,
    .build = gemma3_build,
};
