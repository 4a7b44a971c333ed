/* blocks.c — the shared blocks of the architectures (see blocks.h). */
#include "model/arch/blocks.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

cera_status cera_bind_attention(const cera_loader *ld, int il, cera_layer *L, bool qkv_bias, bool qk_norm) {
    const cera_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd, hd = hp->head_dim, n_q = hd * hp->n_head, n_kv = hd * L->n_head_kv;
    cera_status st;
    if ((st = cera_load_layer_tensor(ld, il, "attn_norm.weight", n_embd, 0, true, &L->attn_norm)) ||
        (st = cera_load_layer_tensor(ld, il, "attn_q.weight", n_embd, n_q, true, &L->proj[CERA_PROJ_Q])) ||
        (st = cera_load_layer_tensor(ld, il, "attn_k.weight", n_embd, n_kv, true, &L->proj[CERA_PROJ_K])) ||
        (st = cera_load_layer_tensor(ld, il, "attn_v.weight", n_embd, n_kv, true, &L->proj[CERA_PROJ_V])) ||
        (st = cera_load_layer_tensor(ld, il, "attn_output.weight", n_q, n_embd, true,
                                     &L->proj[CERA_PROJ_O])) ||
        (st = cera_load_layer_tensor(ld, il, "attn_q.bias", n_q, 0, qkv_bias, &L->bq)) ||
        (st = cera_load_layer_tensor(ld, il, "attn_k.bias", n_kv, 0, qkv_bias, &L->bk)) ||
        (st = cera_load_layer_tensor(ld, il, "attn_v.bias", n_kv, 0, qkv_bias, &L->bv)) ||
        (st = cera_load_layer_tensor(ld, il, "attn_output.bias", n_embd, 0, false, &L->bo)) ||
        (st = cera_load_layer_tensor(ld, il, "attn_q_norm.weight", hd, 0, qk_norm, &L->q_norm)) ||
        (st = cera_load_layer_tensor(ld, il, "attn_k_norm.weight", hd, 0, qk_norm, &L->k_norm)))
        return st;
    return CERA_OK;
}

cera_status cera_bind_ffn(const cera_loader *ld, int il, cera_layer *L) {
    const cera_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff;
    cera_status st;
    if ((st = cera_load_layer_tensor(ld, il, "ffn_norm.weight", n_embd, 0, true, &L->ffn_norm)) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_gate.weight", n_embd, n_ff, true,
                                     &L->proj[CERA_PROJ_GATE])) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_up.weight", n_embd, n_ff, true, &L->proj[CERA_PROJ_UP])) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_down.weight", n_ff, n_embd, true,
                                     &L->proj[CERA_PROJ_DOWN])) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_gate.bias", n_ff, 0, false, &L->b_gate)) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_up.bias", n_ff, 0, false, &L->b_up)) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_down.bias", n_embd, 0, false, &L->b_down)))
        return st;
    return CERA_OK;
}

cera_status cera_load_lfm2_l_cache(const cera_loader *ld, cera_hparams *hp) {
    cera_status st = cera_load_int(ld, "shortconv.l_cache", hp->n_conv_layer > 0, 3, &hp->conv_l_cache);
    if (st) return st;
    if (hp->conv_l_cache < 2 || hp->conv_l_cache > 64)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "%s: shortconv.l_cache %d not supported (2..64)",
                         ld->arch, hp->conv_l_cache);
    return CERA_OK;
}

cera_status cera_bind_lfm2_mixer(const cera_loader *ld, int il, cera_layer *L) {
    const cera_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd;
    cera_status st;
    if (L->n_head_kv > 0) return cera_bind_attention(ld, il, L, false, true);
    if ((st = cera_load_layer_tensor(ld, il, "attn_norm.weight", n_embd, 0, true, &L->attn_norm)) ||
        (st = cera_load_layer_tensor(ld, il, "shortconv.in_proj.weight", n_embd, 3 * n_embd, true,
                                     &L->proj[CERA_PROJ_CONV_IN])) ||
        (st = cera_load_layer_tensor(ld, il, "shortconv.out_proj.weight", n_embd, n_embd, true,
                                     &L->proj[CERA_PROJ_CONV_OUT])) ||
        (st = cera_load_layer_tensor(ld, il, "shortconv.conv.weight", hp->conv_l_cache, n_embd, true,
                                     &L->conv)))
        return st;
    if (L->conv.type != CERA_TYPE_F32)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "tensor 'blk.%d.shortconv.conv.weight': only f32",
                         il);
    return CERA_OK;
}

cera_status cera_load_moe_hparams(const cera_loader *ld, cera_hparams *hp) {
    int gating;
    cera_status st;
    if ((st = cera_load_int(ld, "expert_count", true, 0, &hp->n_expert)) ||
        (st = cera_load_int(ld, "expert_used_count", true, 0, &hp->n_expert_used)) ||
        (st = cera_load_int(ld, "expert_feed_forward_length", true, 0, &hp->n_ff_exp)) ||
        (st = cera_load_int(ld, "leading_dense_block_count", false, 0, &hp->n_dense_lead)) ||
        (st = cera_load_int(ld, "expert_gating_func", true, 0, &gating)))
        return st;
    if (hp->n_expert < 1 || hp->n_expert > 4096 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "%s: %d of %d experts used per token (1..expert_count)",
                         ld->arch, hp->n_expert_used, hp->n_expert);
    if (hp->n_ff_exp < 1 || hp->n_ff_exp > (1 << 22))
        return cera_fail(ld->err, CERA_ERR_FORMAT, "%s: expert_feed_forward_length %d out of range", ld->arch,
                         hp->n_ff_exp);
    if (hp->n_dense_lead > hp->n_layer)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "%s: leading_dense_block_count %d > block_count %d",
                         ld->arch, hp->n_dense_lead, hp->n_layer);
    if (gating != 1 && gating != 2) /* llama.cpp's softmax and sigmoid */
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "%s: expert_gating_func %d not supported (1, 2)",
                         ld->arch, gating);
    hp->expert_gating = gating == 2 ? CERA_GATING_SIGMOID : CERA_GATING_SOFTMAX;
    return CERA_OK;
}

cera_status cera_bind_experts(const cera_loader *ld, int il, cera_layer *L, bool with_bias, bool norm_w,
                              float w_scale) {
    const cera_hparams *hp = &ld->m->hp;
    const int64_t n_embd = hp->n_embd, n_ff = hp->n_ff_exp;
    const int ne = hp->n_expert;
    cera_experts *x = &L->moe;
    cera_status st;
    if ((st = cera_load_layer_tensor(ld, il, "ffn_norm.weight", n_embd, 0, true, &L->ffn_norm)) ||
        (st = cera_load_layer_tensor(ld, il, "ffn_gate_inp.weight", n_embd, ne, true, &x->router)) ||
        (st = cera_load_layer_tensor(ld, il, "exp_probs_b.bias", ne, 0, with_bias, &x->sel_bias)))
        return st;
    x->gate = calloc((size_t)3 * (size_t)ne, sizeof *x->gate); /* freed by cera_model_free */
    if (!x->gate) return cera_fail(ld->err, CERA_ERR_NO_MEMORY, "experts of block %d", il);
    x->up = x->gate + ne;
    x->down = x->up + ne;
    x->n_expert = ne;
    x->n_used = hp->n_expert_used;
    x->gating = hp->expert_gating;
    x->norm_w = norm_w;
    x->w_scale = w_scale;
    if ((st = cera_load_layer_experts(ld, il, "ffn_gate_exps.weight", n_embd, n_ff, ne, x->gate)) ||
        (st = cera_load_layer_experts(ld, il, "ffn_up_exps.weight", n_embd, n_ff, ne, x->up)) ||
        (st = cera_load_layer_experts(ld, il, "ffn_down_exps.weight", n_ff, n_embd, ne, x->down)))
        return st;
    if (x->gate[0].type != x->up[0].type)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED,
                         "block %d: ffn_gate_exps and ffn_up_exps differ in type", il);
    return CERA_OK;
}

static void emit(cera_builder *b, const cera_op *op) {
    if (b->st == CERA_OK) b->st = cera_graph_push(b->g, op, b->err);
}

/* A weight when the file has it, else NULL (optional biases and norms). */
static const cera_weight *opt(const cera_weight *w) { return w && w->data ? w : NULL; }

static void emit_norm(cera_builder *b, int il, cera_buf src, cera_buf dst, const cera_weight *w,
                      int head_dim) {
    emit(b, &(cera_op){.kind = CERA_OP_NORM,
                       .layer = il,
                       .src = src,
                       .dst = dst,
                       .w = w,
                       .eps = b->m->hp.rms_eps,
                       .head_dim = head_dim});
}

static void emit_linear1(cera_builder *b, int il, cera_buf src, cera_proj p, const cera_weight *bias,
                         cera_buf dst) {
    const cera_layer *L = &b->m->layers[il];
    emit(b, &(cera_op){.kind = CERA_OP_LINEAR,
                       .layer = il,
                       .src = src,
                       .n_seg = 1,
                       .seg = {{&L->proj[p], opt(bias), dst, p}}});
}

static void emit_residual(cera_builder *b, int il) {
    emit(b, &(cera_op){.kind = CERA_OP_ADD,
                       .layer = il,
                       .src = CERA_BUF_O,
                       .dst = CERA_BUF_X,
                       .scale = b->m->hp.residual_scale});
}

void cera_emit_embed(cera_builder *b) {
    emit(b, &(cera_op){.kind = CERA_OP_EMBED,
                       .layer = -1,
                       .dst = CERA_BUF_X,
                       .w = &b->m->tok_embd,
                       .scale = b->m->hp.embd_scale});
}

void cera_emit_attention(cera_builder *b, int il) {
    const cera_hparams *hp = &b->m->hp;
    const cera_layer *L = &b->m->layers[il];
    emit_norm(b, il, CERA_BUF_X, CERA_BUF_H, &L->attn_norm, 0);
    emit(b, &(cera_op){.kind = CERA_OP_LINEAR,
                       .layer = il,
                       .src = CERA_BUF_H,
                       .n_seg = 3,
                       .seg = {{&L->proj[CERA_PROJ_Q], opt(&L->bq), CERA_BUF_Q, CERA_PROJ_Q},
                               {&L->proj[CERA_PROJ_K], opt(&L->bk), CERA_BUF_K, CERA_PROJ_K},
                               {&L->proj[CERA_PROJ_V], opt(&L->bv), CERA_BUF_V, CERA_PROJ_V}}});
    if (L->q_norm.data) emit_norm(b, il, CERA_BUF_Q, CERA_BUF_Q, &L->q_norm, hp->head_dim);
    if (L->k_norm.data) emit_norm(b, il, CERA_BUF_K, CERA_BUF_K, &L->k_norm, hp->head_dim);
    emit(b, &(cera_op){.kind = CERA_OP_ROPE_KV,
                       .layer = il,
                       .src = CERA_BUF_Q,
                       .rope = hp->use_rope,
                       .rope_swa = L->swa,
                       .scale = hp->attn_scale_on_q ? hp->attn_scale : 0.0f});
    emit(b, &(cera_op){.kind = CERA_OP_ATTEND,
                       .layer = il,
                       .src = CERA_BUF_Q,
                       .dst = CERA_BUF_ATT,
                       .scale = hp->attn_scale_on_q ? 1.0f : hp->attn_scale,
                       .window = L->swa ? hp->n_swa : 0});
    if (b->st == CERA_OK) cera_graph_need(b->g, CERA_BUF_ATT, (int64_t)hp->n_head * hp->head_dim);
    emit_linear1(b, il, CERA_BUF_ATT, CERA_PROJ_O, &L->bo, CERA_BUF_O);
    if (L->post_attn_norm.data) emit_norm(b, il, CERA_BUF_O, CERA_BUF_O, &L->post_attn_norm, 0);
    emit_residual(b, il);
}

void cera_emit_ffn_swiglu(cera_builder *b, int il) { cera_emit_ffn_glu(b, il, CERA_GLU_SILU); }

void cera_emit_ffn_glu(cera_builder *b, int il, cera_glu_act act) {
    const cera_layer *L = &b->m->layers[il];
    emit_norm(b, il, CERA_BUF_X, CERA_BUF_H, &L->ffn_norm, 0);
    emit(b, &(cera_op){.kind = CERA_OP_LINEAR,
                       .layer = il,
                       .src = CERA_BUF_H,
                       .n_seg = 2,
                       .seg = {{&L->proj[CERA_PROJ_GATE], opt(&L->b_gate), CERA_BUF_GATE, CERA_PROJ_GATE},
                               {&L->proj[CERA_PROJ_UP], opt(&L->b_up), CERA_BUF_UP, CERA_PROJ_UP}}});
    emit(b, &(cera_op){.kind = CERA_OP_GLU,
                       .layer = il,
                       .src = CERA_BUF_GATE,
                       .src2 = CERA_BUF_UP,
                       .dst = CERA_BUF_GATE,
                       .act = act});
    emit_linear1(b, il, CERA_BUF_GATE, CERA_PROJ_DOWN, &L->b_down, CERA_BUF_O);
    if (L->post_ffn_norm.data) emit_norm(b, il, CERA_BUF_O, CERA_BUF_O, &L->post_ffn_norm, 0);
    emit_residual(b, il);
}

void cera_emit_ffn_moe(cera_builder *b, int il) {
    const cera_layer *L = &b->m->layers[il];
    emit_norm(b, il, CERA_BUF_X, CERA_BUF_H, &L->ffn_norm, 0);
    emit(b, &(cera_op){.kind = CERA_OP_MOE,
                       .layer = il,
                       .src = CERA_BUF_H,
                       .dst = CERA_BUF_O,
                       .act = CERA_GLU_SILU,
                       .moe = &L->moe});
    if (b->st == CERA_OK) cera_graph_need(b->g, CERA_BUF_O, b->m->hp.n_embd);
    emit_residual(b, il);
}

void cera_emit_shortconv(cera_builder *b, int il) {
    const cera_layer *L = &b->m->layers[il];
    emit_norm(b, il, CERA_BUF_X, CERA_BUF_H, &L->attn_norm, 0);
    emit_linear1(b, il, CERA_BUF_H, CERA_PROJ_CONV_IN, NULL, CERA_BUF_UP);
    emit(b,
         &(cera_op){
             .kind = CERA_OP_SHORTCONV, .layer = il, .src = CERA_BUF_UP, .dst = CERA_BUF_ATT, .w = &L->conv});
    if (b->st == CERA_OK) cera_graph_need(b->g, CERA_BUF_ATT, b->m->hp.n_embd);
    emit_linear1(b, il, CERA_BUF_ATT, CERA_PROJ_CONV_OUT, NULL, CERA_BUF_O);
    emit_residual(b, il);
}

void cera_emit_output(cera_builder *b, const cera_weight *norm) {
    const cera_model *m = b->m;
    emit(b, &(cera_op){.kind = CERA_OP_OUTPUT,
                       .layer = -1,
                       .src = CERA_BUF_X,
                       .dst = CERA_BUF_H,
                       .w = norm,
                       .w2 = &m->output,
                       .b = opt(&m->output_b),
                       .scale = 1.0f / m->hp.logit_scale,
                       .eps = m->hp.rms_eps});
}
