/* blocks.c — the shared blocks of the architectures (see blocks.h). */
#include "model/arch/blocks.h"

#include <string.h>

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
