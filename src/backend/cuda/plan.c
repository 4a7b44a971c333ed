/*
 * plan.c — the CUDA backend's compile step: at open, the model's op list (model/graph.h)
 * becomes a list of CUDA steps (cuda_state.h: cu_step) that forward.c runs for a one-token
 * decode step, a decode step of several sequences and a prompt chunk. Nothing here knows an
 * architecture: the fusions that make decode fast are rules over the ops, applied wherever
 * the pattern appears:
 *   - NORM: the RMS norm also quantizes its output for the next matmul (every NORM step);
 *   - LINEAR of one segment, then an ADD of its output into another buffer: the matvec's
 *     residual-add epilogue (scale and bias in the epilogue);
 *   - LINEAR of two segments of one shape, then the SwiGLU of their outputs: the SwiGLU
 *     epilogue, into the quantized activation the next matmul reads (a GEGLU is a step of
 *     its own);
 *   - per-head NORMs of Q and K, then ROPE_KV: the norms run inside the rope + KV-store
 *     kernel (which also writes the rotated queries the attention reads);
 *   - MOE (routed experts), then an ADD of its output into another buffer: the weighted sum
 *     of the experts adds itself there (forward.c: step_moe);
 *   - LoRA on a LINEAR's segments: in a one-token decode step, B·t goes into the kernel that
 *     reads the output next (rope + KV store after Q/K/V, the SwiGLU after gate/up, the next
 *     RMS norm after a residual add); anywhere else it is added right after the matmul.
 * An op that fits no rule gets a step of its own (STORE matmuls, ADD, GLU). A LINEAR's
 * segments are stored side by side in one row of their first output's home, so Q, K and V
 * reach the rope kernel with one stride. Weights are uploaded as the compile meets them,
 * each once (a tied output reuses the embedding's copy; a 3-D expert tensor is one weight,
 * every expert's matrix after the other's).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"

static int64_t pad32(int64_t k) { return (k + 31) / 32 * 32; }

static bool present(const cera_cuda_state *s, const cera_weight *w) {
    return w->t || w->data || (s->prm.synthetic_weights && w->n > 0);
}

static size_t raw_bytes(const cera_weight *w) { return cera_row_size(w->type, w->k) * (size_t)w->n; }

size_t cu_plan_staging_bytes(const cera_model *m) {
    const cera_graph *g = m->graph;
    size_t most = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const cera_op *op = &g->ops[i];
        for (int j = 0; j < op->n_seg; j++)
            most = raw_bytes(op->seg[j].w) > most ? raw_bytes(op->seg[j].w) : most;
        if (op->kind == CERA_OP_EMBED && raw_bytes(op->w) > most) most = raw_bytes(op->w);
        if (op->kind == CERA_OP_OUTPUT && raw_bytes(op->w2) > most) most = raw_bytes(op->w2);
        if (op->kind == CERA_OP_MOE) { /* the router, and each stacked expert tensor whole */
            const cera_experts *ex = op->moe;
            const cera_weight *stk[3] = {&ex->gate[0], &ex->up[0], &ex->down[0]};
            most = raw_bytes(&ex->router) > most ? raw_bytes(&ex->router) : most;
            for (int j = 0; j < 3; j++) {
                const size_t b = raw_bytes(stk[j]) * (size_t)ex->n_expert;
                most = b > most ? b : most;
            }
        }
    }
    return most;
}

typedef struct compiler {
    cera_cuda_state *s;
    const cera_model *m;
    const cera_graph *g;
    void *staging;
    cera_error *err;
    cu_loc loc[CERA_BUF_COUNT];               /* where each buffer's rows are at this point of the plan */
    const cera_op *head_norm[CERA_BUF_COUNT]; /* per-head norms waiting for the next ROPE_KV */
    int *kv_of_layer;                         /* [n_layer]: the KV slot of a layer's ROPE_KV, or -1 */
    int op_index;
} compiler;

/* A name for messages: the tensor's own, else what the op says. */
static void weight_name(const cera_weight *w, const char *what, int layer, char *buf, size_t cap) {
    if (w->t)
        gguf_str_copy(w->t->name, buf, cap);
    else if (layer >= 0)
        snprintf(buf, cap, "blk.%d.%s", layer, what);
    else
        snprintf(buf, cap, "%s", what);
}

/* The device copy of mw, uploaded the first time a step uses it. */
static cera_status use_weight(compiler *c, const cera_weight *mw, const char *what, int layer, bool streamed,
                              const cu_weight **out, cera_error *err) {
    cera_cuda_state *s = c->s;
    for (int i = 0; i < s->n_wts; i++) {
        cu_wentry *e = &s->wts[i];
        // a row range of a fused tensor (phi3's attn_qkv, ffn_up) is its own weight
        const bool same = e->mw == mw ||
                          (mw->t && e->mw->t == mw->t && e->mw->row0 == mw->row0 && e->mw->n == mw->n) ||
                          (mw->data && e->mw->data == mw->data && e->mw->type == mw->type &&
                           e->mw->k == mw->k && e->mw->n == mw->n);
        if (same) {
            e->streamed = e->streamed || streamed;
            *out = &e->w;
            return CERA_OK;
        }
    }
    char name[128];
    weight_name(mw, what, layer, name, sizeof name);
    if (!present(s, mw)) return cera_fail(err, CERA_ERR_NOT_FOUND, "cuda: the model has no tensor %s", name);
    if (s->n_wts == s->cap_wts) return cera_fail(err, CERA_ERR_INTERNAL, "cuda: plan: weight table full");
    cu_wentry *e = &s->wts[s->n_wts];
    memset(e, 0, sizeof *e);
    e->mw = mw;
    e->streamed = streamed;
    CERA_TRY(cu_upload_weight(s, mw, name, &e->w, c->staging, err));
    s->n_wts++;
    *out = &e->w;
    return CERA_OK;
}

/* The device copy of expert tensor j (0 gate, 1 up, 2 down) of ex, every expert's matrix in
 * one weight (rows of expert e from e times the rows per expert), uploaded once. */
static cera_status use_experts(compiler *c, const cera_experts *ex, int j, int layer, const cu_weight **out) {
    cera_cuda_state *s = c->s;
    static const char *const names[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    const cera_weight *w0 = j == 0 ? &ex->gate[0] : j == 1 ? &ex->up[0] : &ex->down[0];
    cera_weight *stk = &s->moe_mw[3 * layer + j];
    *stk = *w0;
    stk->n = w0->n * ex->n_expert;
    stk->row0 = 0;
    CERA_TRY(use_weight(c, stk, names[j], layer, false, out, c->err));
    cu_wentry *e = &s->wts[s->n_wts - 1];
    if (&e->w == *out) {
        e->expert_rows = w0->n;
        e->share = (double)ex->n_used / (double)ex->n_expert;
    }
    return CERA_OK;
}

/* The device copy of a vector of n floats (NULL mw: none). */
static cera_status use_vec(compiler *c, const cera_weight *mw, const char *what, int layer, int64_t n,
                           float fill, const float **out, cera_error *err) {
    cera_cuda_state *s = c->s;
    *out = NULL;
    if (!mw) return CERA_OK;
    if (s->n_vecs == s->cap_vecs) return cera_fail(err, CERA_ERR_INTERNAL, "cuda: plan: vector table full");
    char name[128];
    weight_name(mw, what, layer, name, sizeof name);
    float *d = NULL;
    CERA_TRY(cu_upload_vec(s, mw, name, n, fill, &d, err));
    if (d) s->vecs[s->n_vecs++] = d;
    *out = d;
    return CERA_OK;
}

static void need(cera_cuda_state *s, int st, int64_t width) {
    if (s->store[st].width < width) s->store[st].width = width;
}

/* Every buffer whose rows live in home st is gone (st is about to be written). */
static void claim(compiler *c, int st) {
    for (int b = 0; b < CERA_BUF_COUNT; b++)
        if (c->loc[b].st == st) c->loc[b].st = -1;
}

static cu_loc act_loc(compiler *c, cera_buf b, int64_t k) {
    const cu_loc l = {CU_ST_ACT(b), 0, pad32(k), k};
    need(c->s, l.st, l.stride);
    return l;
}

static bool same_loc(cu_loc a, cu_loc b) {
    return a.st == b.st && a.off == b.off && a.stride == b.stride && a.k == b.k;
}

static bool is_act(cu_loc l) { return l.st >= CU_ST_ACT(0) && l.st < CU_ST_ROT; }
static bool is_f32(cu_loc l) { return l.st >= 0 && l.st < CU_ST_ACT(0); }

static cera_status reads(compiler *c, cera_buf b, cu_loc *out) {
    *out = c->loc[b];
    if (out->st < 0)
        return cera_fail(c->err, CERA_ERR_UNSUPPORTED,
                         "cuda: plan: op %d (%s) reads buffer %d, which no earlier step left there",
                         c->op_index, cera_op_name(c->g->ops[c->op_index].kind), (int)b);
    return CERA_OK;
}

static cera_status push(compiler *c, const cu_step *st) {
    cera_cuda_state *s = c->s;
    if (s->n_steps >= c->g->n_ops) return cera_fail(c->err, CERA_ERR_INTERNAL, "cuda: plan: too many steps");
    s->steps[s->n_steps++] = *st;
    return CERA_OK;
}

static cera_status unsupported(compiler *c, const char *why) {
    return cera_fail(c->err, CERA_ERR_UNSUPPORTED, "cuda: plan: op %d (%s): %s", c->op_index,
                     cera_op_name(c->g->ops[c->op_index].kind), why);
}

/* Whether op reads buffer b as the RMS norm of a next step (a NORM over whole rows, or the
 * OUTPUT's): the norm that can add a residual add's pending B·t. */
static bool norm_reads(const cera_op *op, cera_buf b) {
    return op && op->src == b &&
           ((op->kind == CERA_OP_NORM && op->head_dim == 0) || op->kind == CERA_OP_OUTPUT);
}

/* Whether op nx adds buffer b (k values a row, written into home) into another buffer of
 * F32 rows of that width outside home: an add the producing step can do in its epilogue. */
static bool adds_out(const compiler *c, const cera_op *nx, cera_buf b, int home, int64_t k) {
    return nx && nx->kind == CERA_OP_ADD && nx->src == b && nx->dst != b && is_f32(c->loc[nx->dst]) &&
           c->loc[nx->dst].st != home && c->loc[nx->dst].k == k;
}

/* LINEAR, with the epilogue rules: ops[i + 1] may be taken into it (then *used = 2). */
static cera_status compile_linear(compiler *c, const cera_op *op, const cera_op *nx, const cera_op *nx2,
                                  int *used) {
    cera_cuda_state *s = c->s;
    cera_error *err = c->err;
    *used = 1;
    cu_step st;
    memset(&st, 0, sizeof st);
    st.kind = CU_STEP_LINEAR;
    st.layer = op->layer;
    st.n_seg = op->n_seg;
    st.scale = 1.0f;
    CERA_TRY(reads(c, op->src, &st.src));
    if (!is_act(st.src)) return unsupported(c, "a matmul reads rows no norm, attention, conv or GLU wrote");
    if (op->n_seg < 1 || op->n_seg > 3) return unsupported(c, "1 to 3 segments");
    int64_t total = 0;
    for (int j = 0; j < op->n_seg; j++) {
        const cera_linear_seg *sg = &op->seg[j];
        cu_seg *cs = &st.seg[j];
        const char *pn = cera_proj_name(sg->proj);
        CERA_TRY(use_weight(c, sg->w, pn, op->layer, true, &cs->w, err));
        if (sg->w->k != st.src.k) return unsupported(c, "a segment's input length is not its input's");
        CERA_TRY(use_vec(c, sg->b, pn, op->layer, sg->w->n, 0.0f, &cs->bias, err));
        cs->proj = sg->proj;
        total += sg->w->n;
        if (pad32(cs->w->k) > s->k_max) s->k_max = pad32(cs->w->k);
    }
    // every segment's rows side by side in its first output's home
    const int home = CU_ST_F32(op->seg[0].dst);
    need(s, home, total);
    int64_t off = 0;
    for (int j = 0; j < op->n_seg; j++) {
        st.seg[j].y = (cu_loc){home, off, total, op->seg[j].w->n};
        off += op->seg[j].w->n;
    }
    st.epi = CU_MV_STORE;
    st.lora_at = CU_LORA_AT_ONCE;
    claim(c, home);
    const cu_weight *w0 = st.seg[0].w, *w1 = op->n_seg > 1 ? st.seg[1].w : NULL;
    if (op->n_seg == 1 && adds_out(c, nx, op->seg[0].dst, home, w0->n)) {
        // the residual add in the matvec's epilogue; the projection's own rows exist in
        // prefill only, so no later op may read them
        st.epi = CU_MV_ADD;
        st.dst = c->loc[nx->dst];
        st.scale = nx->scale;
        *used = 2;
        if (norm_reads(nx2, nx->dst) && st.dst.st == CU_ST_F32(CERA_BUF_X) &&
            cu_lora_slot(op->seg[0].proj) == 0)
            st.lora_at = CU_LORA_AT_NORM;
    } else if (op->n_seg == 2 && nx && nx->kind == CERA_OP_GLU && nx->src == op->seg[0].dst &&
               nx->src2 == op->seg[1].dst && w0->type == w1->type && w0->k == w1->k && w0->n == w1->n &&
               nx->act == CERA_GLU_SILU && st.src.st != CU_ST_ACT(nx->dst)) {
        st.epi = CU_MV_SWIGLU;
        claim(c, CU_ST_ACT(nx->dst));
        st.dst = act_loc(c, nx->dst, w0->n);
        c->loc[nx->dst] = st.dst;
        *used = 2;
        if (op->seg[0].proj == CERA_PROJ_GATE && op->seg[1].proj == CERA_PROJ_UP &&
            cu_lora_slot(CERA_PROJ_GATE) == 0 && cu_lora_slot(CERA_PROJ_UP) == 1)
            st.lora_at = CU_LORA_AT_SWIGLU;
    } else {
        for (int j = 0; j < op->n_seg; j++) c->loc[op->seg[j].dst] = st.seg[j].y;
    }
    return push(c, &st);
}

static cera_status compile_rope(compiler *c, const cera_op *op) {
    cera_cuda_state *s = c->s;
    cera_error *err = c->err;
    cu_step st;
    memset(&st, 0, sizeof st);
    st.kind = CU_STEP_ROPE_KV;
    st.layer = op->layer;
    st.rope = op->rope && s->hp.n_rot > 0;
    st.rope_swa = op->rope_swa;
    st.scale = op->scale != 0.0f ? op->scale : 1.0f;
    if (st.rope && st.rope_swa && !s->rope_tab_swa)
        return unsupported(c, "the sliding layers' rope base without a sliding window");
    CERA_TRY(reads(c, op->src, &st.src));
    CERA_TRY(reads(c, CERA_BUF_K, &st.k));
    CERA_TRY(reads(c, CERA_BUF_V, &st.v));
    if (!is_f32(st.src) || st.k.stride != st.src.stride || st.v.stride != st.src.stride)
        return unsupported(c, "Q, K and V must come from one matmul");
    if (op->layer < 0 || op->layer >= s->hp.n_layer || c->kv_of_layer[op->layer] >= 0)
        return unsupported(c, "one KV store per model layer");
    const cera_layer *L = &c->m->layers[op->layer];
    const int n_head_kv = L->n_head_kv > 0 ? L->n_head_kv : s->hp.n_head_kv;
    if (st.src.k != s->n_q || st.k.k != (int64_t)n_head_kv * s->hd || st.v.k != st.k.k)
        return unsupported(c, "Q, K and V widths are not the attention's heads");
    if (L->kv_index != s->n_kv_layer)
        return unsupported(c, "the KV stores are not in the KV pool's layer order");
    const cera_op *qn = c->head_norm[op->src], *kn = c->head_norm[CERA_BUF_K];
    st.eps = qn ? qn->eps : kn ? kn->eps : s->hp.rms_eps;
    if (qn) CERA_TRY(use_vec(c, qn->w, "attn_q_norm", op->layer, s->hd, 1.0f, &st.w, err));
    if (kn) CERA_TRY(use_vec(c, kn->w, "attn_k_norm", op->layer, s->hd, 1.0f, &st.w2, err));
    c->head_norm[op->src] = c->head_norm[CERA_BUF_K] = NULL;
    for (int b = 0; b < CERA_BUF_COUNT; b++)
        if (c->head_norm[b]) return unsupported(c, "a per-head norm of a buffer rope does not read");
    st.kv = c->kv_of_layer[op->layer] = s->n_kv_layer++;
    s->kvl[st.kv] = (cu_kv_slot){L->swa ? CERA_KV_SWA : CERA_KV_FULL, n_head_kv, n_head_kv * s->hd, 0};
    // the matmul just before stored Q, K and V: their adapters' B·t can go into this kernel
    cu_step *prev = s->n_steps > 0 ? &s->steps[s->n_steps - 1] : NULL;
    if (prev && prev->kind == CU_STEP_LINEAR && prev->epi == CU_MV_STORE && prev->n_seg == 3 &&
        prev->layer == op->layer && prev->seg[0].proj == CERA_PROJ_Q && prev->seg[1].proj == CERA_PROJ_K &&
        prev->seg[2].proj == CERA_PROJ_V && same_loc(prev->seg[0].y, st.src) &&
        same_loc(prev->seg[1].y, st.k) && same_loc(prev->seg[2].y, st.v))
        prev->lora_at = CU_LORA_AT_ROPE;
    claim(c, CU_ST_ROT);
    st.dst = (cu_loc){CU_ST_ROT, 0, s->n_q, s->n_q};
    need(s, CU_ST_ROT, s->n_q);
    c->loc[op->src] = st.dst;
    c->loc[CERA_BUF_K].st = -1; // rotated into the cache only
    return push(c, &st);
}

/* MOE: the router's matvec and choice, each chosen expert's SwiGLU FFN and the weighted
 * sum, from the normed rows (ACT) into the F32 home of dst (forward.c: step_moe); when the
 * next op adds dst into another buffer (the residual), the weighted sum adds itself there
 * (epi CU_MV_ADD, as a LINEAR's epilogue) and dst's own rows are never written. */
static cera_status compile_moe(compiler *c, const cera_op *op, const cera_op *nx, int *used) {
    cera_cuda_state *s = c->s;
    cera_error *err = c->err;
    const cera_experts *ex = op->moe;
    cu_step st;
    memset(&st, 0, sizeof st);
    st.kind = CU_STEP_MOE;
    st.layer = op->layer;
    st.moe = ex;
    st.n_seg = 3;
    CERA_TRY(reads(c, op->src, &st.src));
    if (!is_act(st.src)) return unsupported(c, "the experts read rows no norm wrote");
    if (op->layer < 0 || op->layer >= s->hp.n_layer) return unsupported(c, "experts outside the layers");
    const int64_t n_embd = ex->gate[0].k, n_ff = ex->gate[0].n;
    if (n_embd != st.src.k || ex->down[0].k != n_ff || ex->down[0].n != n_embd || ex->router.k != n_embd ||
        ex->router.n != ex->n_expert)
        return unsupported(c, "the experts' shapes do not chain");
    if (ex->n_used < 1 || ex->n_used > ex->n_expert) return unsupported(c, "experts used per token");
    if (ex->n_expert > CU_MOE_MAX_EXPERT) return unsupported(c, "more than 256 experts in a block");
    CERA_TRY(use_weight(c, &ex->router, "ffn_gate_inp", op->layer, true, &st.mw, err));
    CERA_TRY(use_vec(c, &ex->sel_bias, "exp_probs_b", op->layer, ex->n_expert, 0.0f, &st.bias, err));
    for (int j = 0; j < 3; j++) CERA_TRY(use_experts(c, ex, j, op->layer, &st.seg[j].w));
    if (pad32(n_ff) > s->k_max) s->k_max = pad32(n_ff);
    if (ex->n_used > s->moe_k) s->moe_k = ex->n_used;
    if (ex->n_expert > s->moe_ne) s->moe_ne = ex->n_expert;
    if (pad32(n_ff) > s->moe_ff_pad) s->moe_ff_pad = pad32(n_ff);
    if (pad32(n_embd) > s->moe_embd_pad) s->moe_embd_pad = pad32(n_embd);
    const int home = CU_ST_F32(op->dst);
    claim(c, home);
    st.epi = CU_MV_STORE;
    st.scale = 1.0f;
    if (adds_out(c, nx, op->dst, home, n_embd)) {
        st.epi = CU_MV_ADD;
        st.dst = c->loc[nx->dst];
        st.scale = nx->scale;
        *used = 2;
        return push(c, &st);
    }
    st.dst = (cu_loc){home, 0, pad32(n_embd), n_embd};
    need(s, home, st.dst.stride);
    c->loc[op->dst] = st.dst;
    return push(c, &st);
}

static cera_status compile_op(compiler *c, int i, int *used) {
    cera_cuda_state *s = c->s;
    cera_error *err = c->err;
    const cera_op *ops = c->g->ops, *op = &ops[i];
    const int n = c->g->n_ops;
    *used = 1;
    if (op->kind != CERA_OP_ROPE_KV && !(op->kind == CERA_OP_NORM && op->head_dim > 0))
        for (int b = 0; b < CERA_BUF_COUNT; b++)
            if (c->head_norm[b]) return unsupported(c, "a per-head norm must come right before rope");
    cu_step st;
    memset(&st, 0, sizeof st);
    st.layer = op->layer;
    st.scale = op->scale;
    st.eps = op->eps;
    switch (op->kind) {
    case CERA_OP_EMBED: {
        st.kind = CU_STEP_EMBED;
        CERA_TRY(use_weight(c, op->w, "token_embd", -1, false, &st.mw, err));
        const int home = CU_ST_F32(op->dst);
        claim(c, home);
        st.dst = (cu_loc){home, 0, pad32(op->w->k), op->w->k};
        need(s, home, st.dst.stride);
        c->loc[op->dst] = st.dst;
        return push(c, &st);
    }
    case CERA_OP_NORM:
        if (op->head_dim > 0) {
            if (op->src != op->dst || op->head_dim != s->hd)
                return unsupported(c, "a per-head norm is in place, over the attention's heads");
            c->head_norm[op->src] = op;
            return CERA_OK;
        }
        st.kind = CU_STEP_NORM;
        CERA_TRY(reads(c, op->src, &st.src));
        if (st.src.st == CU_ST_ACT(op->dst)) return unsupported(c, "a norm in place");
        if (op->w->k != st.src.k) return unsupported(c, "the norm's weight is not its rows' width");
        CERA_TRY(use_vec(c, op->w, "norm", op->layer, st.src.k, 1.0f, &st.w, err));
        claim(c, CU_ST_ACT(op->dst));
        st.dst = act_loc(c, op->dst, st.src.k);
        c->loc[op->dst] = st.dst;
        return push(c, &st);
    case CERA_OP_LINEAR:
        return compile_linear(c, op, i + 1 < n ? &ops[i + 1] : NULL, i + 2 < n ? &ops[i + 2] : NULL, used);
    case CERA_OP_ROPE_KV: return compile_rope(c, op);
    case CERA_OP_ATTEND:
        st.kind = CU_STEP_ATTEND;
        CERA_TRY(reads(c, op->src, &st.src));
        if (st.src.st != CU_ST_ROT) return unsupported(c, "attention reads the queries rope wrote");
        if (op->layer < 0 || op->layer >= s->hp.n_layer || c->kv_of_layer[op->layer] < 0)
            return unsupported(c, "attention before its layer's KV store");
        st.kv = c->kv_of_layer[op->layer];
        st.window = op->window;
        // a sliding layer's KV blocks before its window are gone: it must not look further back
        if (s->kvl[st.kv].group == CERA_KV_SWA && (op->window <= 0 || op->window > s->hp.n_swa))
            return unsupported(c, "a sliding layer's attention reaches past the window its KV cache keeps");
        claim(c, CU_ST_ACT(op->dst));
        st.dst = act_loc(c, op->dst, s->n_q);
        c->loc[op->dst] = st.dst;
        return push(c, &st);
    case CERA_OP_ADD:
        st.kind = CU_STEP_ADD;
        CERA_TRY(reads(c, op->src, &st.src));
        CERA_TRY(reads(c, op->dst, &st.dst));
        if (!is_f32(st.dst) || st.src.k != st.dst.k) return unsupported(c, "an add into rows of its width");
        return push(c, &st);
    case CERA_OP_GLU:
        st.kind = CU_STEP_GLU;
        st.gelu = op->act == CERA_GLU_GELU;
        CERA_TRY(reads(c, op->src, &st.src));
        CERA_TRY(reads(c, op->src2, &st.src2));
        if (st.src.stride != st.src2.stride || st.src.k != st.src2.k)
            return unsupported(c, "a GLU's halves must be rows of one matmul");
        claim(c, CU_ST_ACT(op->dst));
        st.dst = act_loc(c, op->dst, st.src.k);
        c->loc[op->dst] = st.dst;
        return push(c, &st);
    case CERA_OP_SHORTCONV: {
        st.kind = CU_STEP_CONV;
        CERA_TRY(reads(c, op->src, &st.src));
        const int64_t w = op->w->n;
        st.lc = (int)op->w->k;
        if (!is_f32(st.src) || st.src.k != 3 * w || st.lc < 2)
            return unsupported(c, "a conv reads B | C | X rows of three times its width");
        CERA_TRY(use_vec(c, op->w, "shortconv.conv", op->layer, st.lc * w, 0.0f, &st.w, err));
        st.state_off = s->conv_state_slot;
        s->conv_state_slot += (int64_t)(st.lc - 1) * w;
        s->n_conv++;
        claim(c, CU_ST_ACT(op->dst));
        st.dst = act_loc(c, op->dst, w);
        c->loc[op->dst] = st.dst;
        return push(c, &st);
    }
    case CERA_OP_OUTPUT:
        st.kind = CU_STEP_OUTPUT;
        CERA_TRY(reads(c, op->src, &st.src));
        if (op->w->k != st.src.k || op->w2->k != st.src.k)
            return unsupported(c, "the output's weights are not its rows' width");
        CERA_TRY(use_vec(c, op->w, "output_norm", -1, st.src.k, 1.0f, &st.w, err));
        CERA_TRY(use_weight(c, op->w2, "output", -1, true, &st.mw, err));
        CERA_TRY(use_vec(c, op->b, "output.bias", -1, op->w2->n, 0.0f, &st.bias, err));
        if (pad32(op->w2->k) > s->k_max) s->k_max = pad32(op->w2->k);
        s->n_vocab = (int)op->w2->n;
        claim(c, CU_ST_ACT(op->dst));
        st.dst = act_loc(c, op->dst, st.src.k);
        c->loc[op->dst] = st.dst;
        return push(c, &st);
    case CERA_OP_MOE: return compile_moe(c, op, i + 1 < n ? &ops[i + 1] : NULL, used);
    }
    return unsupported(c, "no CUDA step");
}

/* The most rows a decode step of several sequences takes through the several-row kernels
 * before a batch goes to cuBLAS instead, by weight type (the lowest over the plan's matmuls):
 * Q4_0/Q8_0, which the tensor-core matmul takes from MMA_MIN_ROWS on, up to DEC_ROWS_MAX;
 * F16/BF16 2; F32 7; the others 12. Measured on the H200 (bench/RESULTS.md, the batched
 * table): through cu_matvec_rows Q4_0 decode of 8 sequences 2.1x faster than cuBLAS, of 32
 * and 64 1.6x and 2.9x slower; a 7B's F16 weights faster through it at 2 rows, slower from 4
 * (the speculative decoding table); F32 not measured on a large model. */
static int rows_max(const cera_cuda_state *s) {
    int most = DEC_ROWS_MAX;
    for (int i = 0; i < s->n_steps; i++) {
        const cu_step *st = &s->steps[i];
        for (int j = 0; st->kind == CU_STEP_LINEAR && j < st->n_seg; j++) {
            const cera_type t = st->seg[j].w->type;
            const bool half_w = t == CERA_TYPE_F16 || t == CERA_TYPE_BF16;
            const int m = cu_mma_supported(t) ? DEC_ROWS_MAX : half_w ? 2 : t == CERA_TYPE_F32 ? 7 : 12;
            if (m < most) most = m;
        }
    }
    return most;
}

/* The op variants the CUDA kernels do not implement: refused by name at open, never run as
 * something else. */
static cera_status check_variants(const cera_graph *g, cera_error *err) {
    for (int i = 0; i < g->n_ops; i++) {
        const cera_op *op = &g->ops[i];
        const bool glu_ok = op->act == CERA_GLU_SILU || op->act == CERA_GLU_GELU;
        const char *why = op->kind == CERA_OP_GLU && !glu_ok             ? "a GLU other than SwiGLU or GEGLU"
                          : op->kind == CERA_OP_ATTEND && op->window < 0 ? "a negative attention window"
                          : op->kind == CERA_OP_MOE && op->act != CERA_GLU_SILU
                              ? "experts with a GLU other than SwiGLU"
                              : NULL;
        if (why)
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: plan: op %d (%s): %s; the CPU backend runs it",
                             i, cera_op_name(op->kind), why);
    }
    return CERA_OK;
}

cera_status cu_plan_compile(cera_cuda_state *s, const cera_model *m, void *staging, cera_error *err) {
    const cera_graph *g = m->graph;
    if (!g || g->n_ops == 0) return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: the model has no op list");
    CERA_TRY(check_variants(g, err));
    compiler c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.m = m;
    c.g = g;
    c.staging = staging;
    c.err = err;
    for (int b = 0; b < CERA_BUF_COUNT; b++) c.loc[b].st = -1;
    s->cap_wts = 3 * g->n_ops + 2;
    s->cap_vecs = 3 * g->n_ops + 2;
    s->wts = calloc((size_t)s->cap_wts, sizeof *s->wts);
    s->vecs = calloc((size_t)s->cap_vecs, sizeof *s->vecs);
    s->steps = calloc((size_t)g->n_ops, sizeof *s->steps);
    c.kv_of_layer = malloc(sizeof(int) * (size_t)(s->hp.n_layer > 0 ? s->hp.n_layer : 1));
    s->moe_mw = calloc(3 * (size_t)(s->hp.n_layer > 0 ? s->hp.n_layer : 1), sizeof *s->moe_mw);
    s->kvl = calloc((size_t)(s->hp.n_layer > 0 ? s->hp.n_layer : 1), sizeof *s->kvl);
    if (!s->wts || !s->vecs || !s->steps || !c.kv_of_layer || !s->kvl || !s->moe_mw) {
        free(c.kv_of_layer);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: plan of %d ops", g->n_ops);
    }
    for (int l = 0; l < s->hp.n_layer; l++) c.kv_of_layer[l] = -1;
    cera_status st = CERA_OK;
    for (int i = 0; i < g->n_ops && st == CERA_OK;) {
        int used = 1;
        c.op_index = i;
        st = compile_op(&c, i, &used);
        i += used;
    }
    free(c.kv_of_layer);
    if (st != CERA_OK) return st;
    if (s->n_steps == 0 || s->steps[s->n_steps - 1].kind != CU_STEP_OUTPUT)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: plan: the op list must end with the output");
    if (s->store[CU_ST_F32(CERA_BUF_X)].width == 0)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: plan: no residual stream");
    s->rows_max = rows_max(s);
    for (int i = 0; i < s->n_steps; i++)
        for (int j = 0; s->steps[i].kind == CU_STEP_LINEAR && j < s->steps[i].n_seg; j++)
            if (cu_mma_supported(s->steps[i].seg[j].w->type)) s->mma_any = true;
    // the bytes a decode step streams: every matmul weight once (not the embedding table)
    s->weight_bytes = 0;
    for (int i = 0; i < s->n_wts; i++) {
        if (!s->wts[i].streamed && !s->wts[i].expert_rows) continue;
        int64_t db, sb, kp, rb;
        const cu_weight *w = &s->wts[i].w;
        cu_weight_bytes(w->type, w->k, w->n, &db, &sb, &kp, &rb);
        // a stacked expert tensor: the share of it a token's experts read
        s->weight_bytes +=
            s->wts[i].expert_rows ? (size_t)((double)(db + sb) * s->wts[i].share) : (size_t)(db + sb);
    }
    return CERA_OK;
}

void cu_plan_free(cera_cuda_state *s) {
    for (int i = 0; i < s->n_wts; i++) cu_free_weight(&s->wts[i].w);
    for (int i = 0; i < s->n_vecs; i++) cudaFree(s->vecs[i]);
    free(s->wts);
    free(s->vecs);
    free(s->steps);
    free(s->kvl);
    free(s->moe_mw);
    s->kvl = NULL;
    s->moe_mw = NULL;
    s->wts = NULL;
    s->vecs = NULL;
    s->steps = NULL;
    s->n_wts = s->n_vecs = s->n_steps = 0;
}
