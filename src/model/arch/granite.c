/* granite.c — IBM Granite 3 (llama.cpp's llm_build_granite): the llama stack with four
 * multipliers (embedding, residual, attention scale, logits) and rotary embedding that the
 * file may turn off (rope.scaling.finetuned = false). */
#include <stdio.h>

#include "core/error.h"
#include "model/arch/blocks.h"

static cera_status granite_layer(const cera_loader *ld, int il, cera_layer *L) {
    cera_status st = cera_bind_attention(ld, il, L, false, false);
    return st ? st : cera_bind_ffn(ld, il, L);
}

#define TRY(expr)                                                                                            \
    do {                                                                                                     \
        cera_status st_ = (expr);                                                                            \
        if (st_ != CERA_OK) return st_;                                                                      \
    } while (0)

static cera_status granite_hparams(const cera_loader *ld, cera_hparams *hp) {
    char k2[160];
    snprintf(k2, sizeof k2, "%s.logit_scale", ld->arch);
    if (!gguf_find_kv(ld->f, k2)) return cera_fail(ld->err, CERA_ERR_NOT_FOUND, "missing key '%s'", k2);
    TRY(cera_load_float(ld, "logit_scale", 1.0f, &hp->logit_scale));
    if (hp->logit_scale == 0.0f) return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s' is zero", k2);
    TRY(cera_load_float(ld, "residual_scale", 1.0f, &hp->residual_scale));
    if (hp->residual_scale == 0.0f) hp->residual_scale = 1.0f; /* llama.cpp: 0 means unset */
    TRY(cera_load_float(ld, "embedding_scale", 1.0f, &hp->embd_scale));
    if (hp->embd_scale == 0.0f) hp->embd_scale = 1.0f;
    float as;
    TRY(cera_load_float(ld, "attention.scale", 0.0f, &as));
    if (as != 0.0f) hp->attn_scale = as;
    bool ft = true;
    snprintf(k2, sizeof k2, "%s.rope.scaling.finetuned", ld->arch);
    if (gguf_find_kv(ld->f, k2) && !gguf_get_bool(ld->f, k2, &ft))
        return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': expected a bool", k2);
    hp->use_rope = ft;
    return CERA_OK;
}

const cera_arch_def cera_arch_granite = {
    .id = CERA_ARCH_GRANITE,
    .name = "granite",
    .rope_style = CERA_ROPE_NORM,
    .hparams = granite_hparams,
    .layer = granite_layer,
    .build = cera_build_llama_stack,
};
