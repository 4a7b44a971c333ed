/*
 * forward.c — the CPU backend: executes the model's op list (model/graph.h) over a batch
 * of tokens from any number of sequences, computing each op as llama.cpp does (the graphs
 * of its src/models folder, the roundings of ggml's CPU kernels).
 *
 * At open the op list is compiled into steps: a LINEAR becomes one matmul per segment
 * (proj_matmul: the one place a per-sequence adapter, LoRA, hooks in) followed by its
 * biases; ATTEND, SHORTCONV and OUTPUT are steps of their own; and every run of row-local
 * ops (embedding, norms, biases, rope + KV store, residual adds, GLU) between them is one
 * step whose ops run token by token in a single pass of the thread pool, so that a layer
 * takes as few pool jobs as the matmuls need. Every buffer is sized at open from n_batch;
 * forward allocates nothing.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/lora.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/repack.h"
#include "backend/cpu/threadpool.h"
#include "core/error.h"
#include "core/fp16.h"
#include "model/graph.h"

typedef enum step_kind { STEP_ROWS, STEP_MATMUL, STEP_ATTEND, STEP_CONV, STEP_MOE, STEP_OUTPUT } step_kind;

/* A row-local op of a ROWS step: one of the graph's, or a LINEAR segment's bias. */
typedef struct row_op {
    const cera_op *op;
    const cera_weight *bias; /* set: y[dst] += bias (a LINEAR's), op unused */
    cera_buf dst;
} row_op;

typedef struct step {
    step_kind kind;
    const cera_op *op;
    int seg;                                 /* MATMUL: the LINEAR's segment */
    const cera_packed_weight *pk;            /* MATMUL, OUTPUT: the weight's repacked copy, or NULL */
    int first, n_rows;                       /* ROWS: its ops, rows[first .. first + n_rows) */
    const cera_packed_weight *const *moe_pk; /* MOE: its matrices' repacked copies (moe.h) */
} step;

typedef struct cpu_backend {
    cera_backend base;
    const cera_model *m;
    cera_pool *pool;
    int n_batch;
    cera_rope rope;
    cera_rope rope_swa; /* the sliding layers' (Gemma 3), when a layer slides */
    step *steps;
    int n_steps;
    row_op *rows;
    int n_rows;
    float *buf[CERA_BUF_COUNT]; /* activations, [n_batch rows of graph.width[b]] */
    float *rope_cache;          /* [n_batch, n_rot] cos/sin per token */
    float *rope_cache_swa;      /* [n_batch, n_rot] the same with rope_swa, or NULL */
    float *conv_bx;             /* [n_batch, n_embd]: a conv block's B ⊙ X (LFM2) */
    float *conv_state;          /* [n_batch, (l_cache - 1) * n_embd]: new states before they are kept */
    int32_t *out_rows;          /* [n_batch] tokens that want logits */
    int32_t *seq_count;         /* [n_batch] tokens of each of the batch's sequences */
    int32_t *seq_first;         /* [n_batch] each batch sequence's first position in the batch */
    int32_t *seq_start;         /* [n_batch + 1] where each sequence's tokens start in by_seq */
    int32_t *by_seq;            /* [n_batch] token indices by sequence, then position */
    cera_attn_span *spans;      /* [n_batch] the attention's spans (attention.h) */
    void *act;                  /* activation scratch of the largest matmul */
    uint8_t *attn_tmp;          /* per-thread attention scratch */
    size_t attn_tmp_size;
    cera_packed_set *packed;           /* weights repacked at open (repack.h), found by cera_packed_find */
    cera_cpu_moe moe;                  /* the routed experts' scratch (moe.h) */
    const cera_packed_weight **moe_pk; /* every MOE step's repacked copies, one block */
} cpu_backend;

static int64_t width(const cpu_backend *be, cera_buf b) { return be->m->graph->width[b]; }

/* ---- projections ------------------------------------------------------------ */

typedef struct proj_ctx {
    cpu_backend *be;
    const cera_lora_batch *lora; /* the batch's rows grouped by adapter, or NULL */
} proj_ctx;

/* y[n_rows, w.n] = x[n_rows, w.k] · Wᵀ for projection `proj` of layer `il`.
 * LoRA hook: after this matmul and before any bias, norm or rope, an adapter adds
 * y[r] += scale · B(A · x[r]) for the adapters attached to row r's sequence (the
 * batch's plan groups the rows by adapter). Every projection goes through here, so that is the one place; the
 * adapter work runs inside the matmul's own pool job (backend/cpu/lora.h). */
static void proj_matmul(const proj_ctx *ctx, int il, cera_proj proj, const cera_weight *w,
                        const cera_packed_weight *pk, const float *x, float *y, int64_t y_stride,
                        int n_rows) {
    cpu_backend *be = ctx->be;
    cera_lora_cpu_job lj;
    const cera_matmul_hook *hook =
        cera_lora_cpu_hook(&lj, be->pool, ctx->lora, il, proj, x, (size_t)w->k, y, (size_t)y_stride);
    cera_matmul_ex(be->pool, w, pk, cera_cpu_ops(w->type), x, n_rows, y, (size_t)y_stride, be->act, hook);
    cera_lora_cpu_after(&lj);
}

/* ---- attention job ------------------------------------------------------------ */

typedef struct attn_job {
    cera_attn_args args;
    cpu_backend *be;
} attn_job;

static void attn_chunk(void *arg, int64_t c, int ith) {
    attn_job *j = arg;
    cera_attention_chunk(&j->args, c, j->be->attn_tmp + (size_t)ith * j->be->attn_tmp_size);
}

/* ---- row-local ops ------------------------------------------------------------ */

static void embed_row(const cera_weight *e, cera_token tok, float *out) {
    const size_t rs = cera_row_size(e->type, e->k);
    const uint8_t *row = (const uint8_t *)e->data + (size_t)tok * rs;
    if (e->type == CERA_TYPE_F32)
        memcpy(out, row, (size_t)e->k * sizeof(float));
    else
        cera_type_get(e->type)->to_float(row, out, e->k);
}

static void store_kv(cera_kv_seq *seq, int il, int kv, int pos, const float *src, int n) {
    cera_cpu_kv_store(kv ? seq->pool->fmt.v : seq->pool->fmt.k, src, cera_kv_row(seq, il, kv, pos), n);
}

static void add_bias_row(float *y, const cera_weight *b) {
    const float *bv = b->data;
    for (int64_t i = 0; i < b->k; i++) y[i] += bv[i];
}

typedef struct rows_job {
    cpu_backend *be;
    const cera_batch *b;
    const row_op *ops;
    int n_ops;
} rows_job;

/* Token t through one row-local op. */
static void row_exec(cpu_backend *be, const cera_batch *b, const row_op *r, size_t t) {
    const cera_hparams *hp = &be->m->hp;
    if (r->bias) {
        add_bias_row(be->buf[r->dst] + t * width(be, r->dst), r->bias);
        return;
    }
    const cera_op *op = r->op;
    float *dst = be->buf[op->dst] + t * width(be, op->dst);
    switch (op->kind) {
    case CERA_OP_EMBED:
        embed_row(op->w, b->token[t], dst);
        if (op->scale != 1.0f)
            for (int64_t i = 0; i < op->w->k; i++) dst[i] *= op->scale;
        if (hp->use_rope) cera_rope_cache(&be->rope, b->pos[t], be->rope_cache + t * hp->n_rot);
        if (be->rope_cache_swa) cera_rope_cache(&be->rope_swa, b->pos[t], be->rope_cache_swa + t * hp->n_rot);
        break;
    case CERA_OP_NORM: {
        const float *src = be->buf[op->src] + t * width(be, op->src);
        if (op->head_dim == 0) {
            cera_rms_norm_f32(dst, src, op->w->data, (int)op->w->k, op->eps);
            break;
        }
        const int n_heads = (int)(width(be, op->dst) / op->head_dim);
        for (int h = 0; h < n_heads; h++)
            cera_rms_norm_f32(dst + h * op->head_dim, src + h * op->head_dim, op->w->data, op->head_dim,
                              op->eps);
        break;
    }
    case CERA_OP_ROPE_KV: {
        const cera_layer *L = &be->m->layers[op->layer];
        const int hd = hp->head_dim, n_kv = L->n_head_kv * hd;
        float *qt = be->buf[CERA_BUF_Q] + t * width(be, CERA_BUF_Q);
        float *kt = be->buf[CERA_BUF_K] + t * width(be, CERA_BUF_K);
        float *vt = be->buf[CERA_BUF_V] + t * width(be, CERA_BUF_V);
        if (op->rope) {
            const cera_rope *ro = op->rope_swa ? &be->rope_swa : &be->rope;
            const float *rc = (op->rope_swa ? be->rope_cache_swa : be->rope_cache) + t * hp->n_rot;
            cera_rope_apply(ro, rc, qt, hp->n_head, hd);
            cera_rope_apply(ro, rc, kt, L->n_head_kv, hd);
        }
        if (op->scale != 0.0f)
            for (int i = 0; i < hp->n_head * hd; i++) qt[i] *= op->scale;
        cera_kv_seq *s = b->seqs[b->seq[t]];
        const cera_kv_format *f = &s->pool->fmt;
        if (f->rot_k) { /* a rotated block-type cache: Q and K turn alike, so Q·K stays (kv_rows.h) */
            cera_fwht_f32(qt, hp->n_head * hd, f->rot_k);
            cera_fwht_f32(kt, n_kv, f->rot_k);
        }
        if (f->rot_v) cera_fwht_f32(vt, n_kv, f->rot_v); /* the attention turns its output back */
        store_kv(s, L->kv_index, 0, b->pos[t], kt, n_kv);
        store_kv(s, L->kv_index, 1, b->pos[t], vt, n_kv);
        break;
    }
    case CERA_OP_ADD:
        cera_add_scaled_f32(dst, be->buf[op->src] + t * width(be, op->src), op->scale, (int)hp->n_embd);
        break;
    case CERA_OP_GLU: {
        const float *g = be->buf[op->src] + t * width(be, op->src),
                    *u = be->buf[op->src2] + t * width(be, op->src2);
        if (op->act == CERA_GLU_GELU)
            cera_geglu_f32(dst, g, u, hp->n_ff);
        else
            cera_swiglu_f32(dst, g, u, hp->n_ff);
        break;
    }
    default: break; /* not row-local: never in a ROWS step */
    }
}

static void rows_work(void *arg, int64_t ti, int ith) {
    const rows_job *j = arg;
    (void)ith;
    for (int i = 0; i < j->n_ops; i++) row_exec(j->be, j->b, &j->ops[i], (size_t)ti);
}

/* ---- the short convolution (LFM2) ------------------------------------------------ */

typedef struct conv_job {
    cpu_backend *be;
    const cera_batch *b;
    const cera_op *op;
} conv_job;

/* bx = B ⊙ X of token t (src row B | C | X). */
static void conv_bx_work(void *arg, int64_t ti, int ith) {
    const conv_job *j = arg;
    (void)ith;
    cpu_backend *be = j->be;
    const int n = be->m->hp.n_embd;
    const float *src = be->buf[j->op->src] + (size_t)ti * width(be, j->op->src);
    float *bx = be->conv_bx + (size_t)ti * n;
    for (int c = 0; c < n; c++) bx[c] = src[c] * src[2 * n + c];
}

/* Row c of B ⊙ X at position q of batch sequence s: from the batch, or (before its first
 * position) from the sequence's state, which holds the l_cache - 1 rows before it. */
static const float *conv_input(const cpu_backend *be, const cera_batch *b, const cera_op *op, int s, int q) {
    const cera_hparams *hp = &be->m->hp;
    const int first = be->seq_first[s];
    if (q >= first) return be->conv_bx + (size_t)be->by_seq[be->seq_start[s] + (q - first)] * hp->n_embd;
    const float *state = cera_kv_seq_state(b->seqs[s]);
    const int row = q - first + (hp->conv_l_cache - 1);
    return state +
           ((size_t)be->m->layers[op->layer].conv_index * (hp->conv_l_cache - 1) + (size_t)row) * hp->n_embd;
}

/* y = C ⊙ conv(bx) of token t: per channel, the taps over positions pos - (l_cache - 1) .. pos
 * summed in that order with fused multiply-adds (ggml's ssm_conv, compiled with contraction). */
static void conv_out_work(void *arg, int64_t ti, int ith) {
    const conv_job *j = arg;
    (void)ith;
    cpu_backend *be = j->be;
    const cera_hparams *hp = &be->m->hp;
    const int n = hp->n_embd, lc = hp->conv_l_cache;
    const size_t t = (size_t)ti;
    const int s = j->b->seq[t], pos = j->b->pos[t];
    const float *src = be->buf[j->op->src] + t * width(be, j->op->src);
    float *dst = be->buf[j->op->dst] + t * width(be, j->op->dst);
    const float *w = j->op->w->data; /* [n rows of lc taps] */
    const float *in[64];
    for (int k = 0; k < lc; k++) in[k] = conv_input(be, j->b, j->op, s, pos - (lc - 1) + k);
    for (int c = 0; c < n; c++) {
        float sum = 0.0f;
        for (int k = 0; k < lc; k++) sum = fmaf(in[k][c], w[(size_t)c * lc + k], sum);
        dst[c] = src[n + c] * sum;
    }
}

static void run_conv(cpu_backend *be, const cera_batch *b, const cera_op *op) {
    conv_job j = {be, b, op};
    cera_pool_for(be->pool, b->n_tokens, conv_bx_work, &j);
    cera_pool_for(be->pool, b->n_tokens, conv_out_work, &j);
    /* each sequence's new state: the rows before its next position, read before any is written */
    const cera_hparams *hp = &be->m->hp;
    const int n = hp->n_embd, keep = hp->conv_l_cache - 1;
    const size_t rows = (size_t)keep * n;
    for (int s = 0; s < b->n_seqs; s++) {
        if (!be->seq_count[s]) continue;
        const int next = be->seq_first[s] + be->seq_count[s];
        float *tmp = be->conv_state + (size_t)s * rows;
        for (int r = 0; r < keep; r++)
            memcpy(tmp + (size_t)r * n, conv_input(be, b, op, s, next - keep + r), (size_t)n * sizeof(float));
    }
    for (int s = 0; s < b->n_seqs; s++) {
        if (!be->seq_count[s]) continue;
        float *state =
            (float *)cera_kv_seq_state(b->seqs[s]) + (size_t)be->m->layers[op->layer].conv_index * rows;
        memcpy(state, be->conv_state + (size_t)s * rows, rows * sizeof(float));
    }
}

/* ---- forward ------------------------------------------------------------------ */

/* Per batch sequence: its token count, first position, and its tokens by position. */
static void index_sequences(cpu_backend *be, const cera_batch *b) {
    for (int s = 0; s < b->n_seqs; s++) be->seq_count[s] = 0, be->seq_first[s] = INT32_MAX;
    for (int t = 0; t < b->n_tokens; t++) {
        const int s = b->seq[t];
        be->seq_count[s]++;
        if (b->pos[t] < be->seq_first[s]) be->seq_first[s] = b->pos[t];
    }
    be->seq_start[0] = 0;
    for (int s = 0; s < b->n_seqs; s++) be->seq_start[s + 1] = be->seq_start[s] + be->seq_count[s];
    for (int t = 0; t < b->n_tokens; t++) {
        const int s = b->seq[t];
        be->by_seq[be->seq_start[s] + (b->pos[t] - be->seq_first[s])] = t;
    }
}

static void run_output(cpu_backend *be, const cera_batch *b, const step *st, float *logits) {
    const cera_op *op = st->op;
    const cera_hparams *hp = &be->m->hp;
    const int n_embd = hp->n_embd;
    int n_out = 0;
    /* embeddings: the normed rows are the output, packed [n_out, n_embd] */
    float *h = b->embd ? logits : be->buf[op->dst];
    const size_t h_width = b->embd ? (size_t)n_embd : (size_t)width(be, op->dst);
    for (int t = 0; t < b->n_tokens; t++)
        if (b->want_logits[t]) {
            cera_rms_norm_f32(h + (size_t)n_out * h_width, be->buf[op->src] + (size_t)t * width(be, op->src),
                              op->w->data, n_embd, op->eps);
            be->out_rows[n_out++] = t;
        }
    if (n_out == 0 || b->embd) return;
    const cera_weight *wo = op->w2;
    cera_matmul_ex(be->pool, wo, st->pk, cera_cpu_ops(wo->type), h, n_out, logits, (size_t)hp->n_vocab,
                   be->act, NULL);
    if (op->b)
        for (int r = 0; r < n_out; r++) add_bias_row(logits + (size_t)r * hp->n_vocab, op->b);
    if (op->scale != 1.0f) /* llama.cpp multiplies by the reciprocal */
        for (size_t i = 0; i < (size_t)n_out * hp->n_vocab; i++) logits[i] *= op->scale;
}

static cera_status cpu_forward(cera_backend *base, const cera_batch *b, float *logits, cera_error *err) {
    cpu_backend *be = (cpu_backend *)base;
    const cera_model *m = be->m;
    const cera_hparams *hp = &m->hp;
    const int n = b->n_tokens;
    if (n <= 0 || n > be->n_batch)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "batch of %d tokens (1..%d allowed)", n, be->n_batch);
    if (b->n_seqs < 1 || b->n_seqs > be->n_batch)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "batch of %d sequences (1..%d allowed)", b->n_seqs,
                         be->n_batch);
    for (int t = 0; t < n; t++) {
        if (b->token[t] < 0 || b->token[t] >= hp->n_vocab)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "token id %d out of range (vocabulary %d)",
                             b->token[t], hp->n_vocab);
        if (b->seq[t] < 0 || b->seq[t] >= b->n_seqs)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "token %d: sequence %d out of range", t, b->seq[t]);
        const cera_kv_seq *s = b->seqs[b->seq[t]];
        if (b->pos[t] < 0 || b->pos[t] >= s->n_blocks * CERA_KV_BLOCK)
            return cera_fail(err, CERA_ERR_INTERNAL, "token %d: position %d outside its reserved KV blocks",
                             t, b->pos[t]);
    }
    index_sequences(be, b);
    for (int s = 0; s < b->n_seqs; s++)
        if (be->seq_count[s] && be->seq_start[s + 1] - be->seq_start[s] != be->seq_count[s])
            return cera_fail(err, CERA_ERR_INTERNAL, "sequence %d: its batch positions are not consecutive",
                             s);
    const proj_ctx pc = {be, b->lora};
    attn_job aj = {
        .args = {.q = be->buf[CERA_BUF_Q],
                 .out = be->buf[CERA_BUF_ATT],
                 .n_tokens = n,
                 .n_head = hp->n_head,
                 .n_head_kv = hp->n_head_kv,
                 .head_dim = hp->head_dim,
                 .pos = b->pos,
                 .seq = b->seq,
                 .seqs = b->seqs,
                 .spans = be->spans},
        .be = be,
    };
    aj.args.n_spans = cera_attention_spans(&aj.args, be->seq_count, be->spans);
    for (int i = 0; i < be->n_steps; i++) {
        const step *st = &be->steps[i];
        const cera_op *op = st->op;
        switch (st->kind) {
        case STEP_ROWS: {
            rows_job j = {be, b, be->rows + st->first, st->n_rows};
            cera_pool_for(be->pool, n, rows_work, &j);
            break;
        }
        case STEP_MATMUL: {
            const cera_linear_seg *sg = &op->seg[st->seg];
            proj_matmul(&pc, op->layer, sg->proj, sg->w, st->pk, be->buf[op->src], be->buf[sg->dst],
                        width(be, sg->dst), n);
            break;
        }
        case STEP_ATTEND:
            aj.args.layer = m->layers[op->layer].kv_index;
            aj.args.n_head_kv = m->layers[op->layer].n_head_kv;
            aj.args.scale = op->scale;
            aj.args.window = op->window;
            cera_pool_for(be->pool, cera_attention_n_chunks(&aj.args), attn_chunk, &aj);
            break;
        case STEP_CONV: run_conv(be, b, op); break;
        case STEP_MOE:
            cera_cpu_moe_run(&be->moe, be->pool, op->moe, st->moe_pk, be->buf[op->src], n, be->buf[op->dst],
                             (size_t)width(be, op->dst), be->act, b->lora, op->layer);
            break;
        case STEP_OUTPUT: run_output(be, b, st, logits); break;
        }
    }
    return CERA_OK;
}

/* ---- compile -------------------------------------------------------------------- */

static bool row_local(cera_op_kind k) {
    return k == CERA_OP_EMBED || k == CERA_OP_NORM || k == CERA_OP_ROPE_KV || k == CERA_OP_ADD ||
           k == CERA_OP_GLU;
}

/* A row op appended to the ROWS step at the end of the plan (a new one if the last step
 * is not ROWS). */
static void push_row(cpu_backend *be, row_op r) {
    if (be->n_steps == 0 || be->steps[be->n_steps - 1].kind != STEP_ROWS)
        be->steps[be->n_steps++] = (step){STEP_ROWS, NULL, 0, NULL, be->n_rows, 0, NULL};
    be->rows[be->n_rows++] = r;
    be->steps[be->n_steps - 1].n_rows++;
}

/* The plan of the model's ops; steps and rows were sized for the worst case. */
static void compile(cpu_backend *be) {
    const cera_graph *g = be->m->graph;
    int n_pk = 0; /* moe_pk entries taken */
    for (int i = 0; i < g->n_ops; i++) {
        const cera_op *op = &g->ops[i];
        if (row_local(op->kind)) {
            push_row(be, (row_op){op, NULL, op->dst});
            continue;
        }
        switch (op->kind) {
        case CERA_OP_LINEAR:
            for (int k = 0; k < op->n_seg; k++)
                be->steps[be->n_steps++] =
                    (step){STEP_MATMUL, op, k, cera_packed_find(be->packed, op->seg[k].w), 0, 0, NULL};
            for (int k = 0; k < op->n_seg; k++)
                if (op->seg[k].b) push_row(be, (row_op){op, op->seg[k].b, op->seg[k].dst});
            break;
        case CERA_OP_ATTEND: be->steps[be->n_steps++] = (step){STEP_ATTEND, op, 0, NULL, 0, 0, NULL}; break;
        case CERA_OP_SHORTCONV: be->steps[be->n_steps++] = (step){STEP_CONV, op, 0, NULL, 0, 0, NULL}; break;
        case CERA_OP_MOE: {
            const int n_mat = 3 * op->moe->n_expert + 1;
            const cera_packed_weight **pk = be->moe_pk + n_pk;
            for (int j = 0; j < n_mat; j++)
                pk[j] = cera_packed_find(be->packed, cera_experts_matrix(op->moe, j));
            n_pk += n_mat;
            be->steps[be->n_steps++] = (step){STEP_MOE, op, 0, NULL, 0, 0, pk};
            break;
        }
        case CERA_OP_OUTPUT:
            be->steps[be->n_steps++] =
                (step){STEP_OUTPUT, op, 0, cera_packed_find(be->packed, op->w2), 0, 0, NULL};
            break;
        default: break;
        }
    }
}

/* ---- open / free ---------------------------------------------------------------- */

static void cpu_free(cera_backend *base) {
    cpu_backend *be = (cpu_backend *)base;
    if (!be) return;
    cera_pool_free(be->pool);
    for (int b = 0; b < CERA_BUF_COUNT; b++) free(be->buf[b]);
    free(be->steps);
    free(be->rows);
    free(be->rope_cache);
    free(be->rope_cache_swa);
    free(be->conv_bx);
    free(be->conv_state);
    free(be->out_rows);
    free(be->seq_count);
    free(be->seq_first);
    free(be->seq_start);
    free(be->by_seq);
    free(be->spans);
    free(be->act);
    free(be->attn_tmp);
    cera_cpu_repack_free(be->packed);
    cera_cpu_moe_free(&be->moe);
    free(be->moe_pk);
    free(be);
}

static cera_status check_kernels(const cera_weight *w, const char *what, int il, cera_error *err) {
    if (cera_cpu_ops(w->type)) return CERA_OK;
    const cera_type_traits *tt = cera_type_get(w->type);
    char name[128];
    if (w->t)
        gguf_str_copy(w->t->name, name, sizeof name);
    else if (il >= 0)
        snprintf(name, sizeof name, "blk.%d.%s.weight", il, what);
    else
        snprintf(name, sizeof name, "%s", what);
    return cera_fail(err, CERA_ERR_UNSUPPORTED, "tensor '%s': type %s has no CPU kernels", name,
                     tt ? tt->name : "?");
}

static const char *output_name(const cera_model *m) {
    return m->hp.tied_output ? "token_embd.weight" : "output.weight";
}

cera_status cera_cpu_backend_check(const cera_model *m, cera_error *err) {
    const cera_graph *g = m->graph;
    for (int i = 0; i < g->n_ops; i++) {
        const cera_op *op = &g->ops[i];
        cera_status st = CERA_OK;
        for (int k = 0; k < op->n_seg && !st; k++)
            st = check_kernels(op->seg[k].w, cera_proj_name(op->seg[k].proj), op->layer, err);
        if (op->kind == CERA_OP_OUTPUT && !st) st = check_kernels(op->w2, output_name(m), -1, err);
        if (op->kind == CERA_OP_MOE && !st)
            st = check_kernels(&op->moe->router, "ffn_gate_inp", op->layer, err);
        for (int e = 0; op->kind == CERA_OP_MOE && e < op->moe->n_expert && !st; e++)
            if (!(st = check_kernels(&op->moe->gate[e], "ffn_gate_exps", op->layer, err)) &&
                !(st = check_kernels(&op->moe->up[e], "ffn_up_exps", op->layer, err)))
                st = check_kernels(&op->moe->down[e], "ffn_down_exps", op->layer, err);
        if (st) return st;
    }
    return CERA_OK;
}

static cera_status check_weight(const cera_weight *w, const char *what, int il, size_t *act_max, int n_batch,
                                cera_error *err) {
    cera_status st = check_kernels(w, what, il, err);
    if (!st) st = cera_matmul_prepare(w, err);
    if (st) return st;
    const size_t s = cera_matmul_scratch_size(w->type, w->k, n_batch);
    if (s > *act_max) *act_max = s;
    return CERA_OK;
}

cera_status cera_cpu_backend_open(const cera_model *m, const cera_engine_params *params, cera_backend **out,
                                  cera_error *err) {
    *out = NULL;
    const cera_hparams *hp = &m->hp;
    cera_kv_format kvf; /* every type is kept here; the pool is made to this format */
    cera_status st = cera_kv_format_of(params, hp->head_dim, true, &kvf, err);
    if (st) return st;
    const cera_graph *g = m->graph;
    const int nb = params->n_batch > 0 ? params->n_batch : 512;
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return cera_fail(err, CERA_ERR_NO_MEMORY, "CPU backend");
    be->base.name = "cpu";
    be->base.variant = cera_cpu_tier_name();
    be->base.kv_on_host = true;
    be->base.kv_rotates = true;
    be->base.exact_run_max = CERA_ATTN_F32_MIN_TOKENS - 1;
    be->base.forward = cpu_forward;
    be->base.free = cpu_free;
    be->m = m;
    be->n_batch = nb;
    const float *rope_factors = cera_model_rope_factors(m, params->n_ctx);
    cera_rope_init(&be->rope, hp, rope_factors);
    if (hp->n_swa) { /* llama.cpp: the sliding layers' own base, without the model's rope scaling */
        cera_hparams hs = *hp;
        hs.rope_base = hp->rope_base_swa;
        hs.rope_freq_scale = 1.0f;
        cera_rope_init(&be->rope_swa, &hs, rope_factors);
    }
    cera_gelu_init();

    size_t act_max = 0;
    int max_steps = 0, max_rows = 0;
    for (int i = 0; i < g->n_ops && !st; i++) {
        const cera_op *op = &g->ops[i];
        max_steps += op->kind == CERA_OP_LINEAR ? op->n_seg + 1 : 1;
        max_rows += op->kind == CERA_OP_LINEAR ? op->n_seg : 1;
        for (int k = 0; k < op->n_seg && !st; k++)
            st = check_weight(op->seg[k].w, cera_proj_name(op->seg[k].proj), op->layer, &act_max, nb, err);
        if (op->kind == CERA_OP_OUTPUT && !st)
            st = check_weight(op->w2, output_name(m), -1, &act_max, nb, err);
        if (op->kind == CERA_OP_MOE && !st)
            st = check_weight(&op->moe->router, "ffn_gate_inp", op->layer, &act_max, nb, err);
        for (int e = 0; op->kind == CERA_OP_MOE && e < op->moe->n_expert && !st; e++)
            if (!(st = check_weight(&op->moe->gate[e], "ffn_gate_exps", op->layer, &act_max, nb, err)) &&
                !(st = check_weight(&op->moe->up[e], "ffn_up_exps", op->layer, &act_max, nb, err)))
                st = check_weight(&op->moe->down[e], "ffn_down_exps", op->layer, &act_max, nb, err);
    }
    if (!st) st = cera_cpu_moe_init(&be->moe, g, nb, err);
    if (st) goto fail;
    if ((st = cera_pool_new(params->n_threads, &be->pool, err))) goto fail;
    if ((st = cera_cpu_repack_model(m, be->pool, &be->packed, err))) goto fail;

    be->steps = malloc((size_t)max_steps * sizeof *be->steps);
    size_t n_moe_pk = 1;
    for (int i = 0; i < g->n_ops; i++)
        if (g->ops[i].kind == CERA_OP_MOE) n_moe_pk += 3 * (size_t)g->ops[i].moe->n_expert + 1;
    be->moe_pk = calloc(n_moe_pk, sizeof *be->moe_pk);
    be->rows = malloc((size_t)max_rows * sizeof *be->rows);
    const size_t rows = (size_t)nb;
    bool ok = be->steps && be->rows && be->moe_pk;
    for (int b = 0; b < CERA_BUF_COUNT && ok; b++)
        if (g->width[b]) ok = (be->buf[b] = malloc(rows * (size_t)g->width[b] * sizeof(float))) != NULL;
    be->rope_cache = malloc(rows * hp->n_rot * sizeof(float));
    if (hp->n_swa) ok = ok && (be->rope_cache_swa = malloc(rows * hp->n_rot * sizeof(float))) != NULL;
    if (hp->n_conv_layer) {
        be->conv_bx = malloc(rows * hp->n_embd * sizeof(float));
        be->conv_state = malloc(rows * (size_t)(hp->conv_l_cache - 1) * hp->n_embd * sizeof(float));
        ok = ok && be->conv_bx && be->conv_state;
    }
    be->out_rows = malloc(rows * sizeof(int32_t));
    be->seq_count = malloc(rows * sizeof(int32_t));
    be->seq_first = malloc(rows * sizeof(int32_t));
    be->seq_start = malloc((rows + 1) * sizeof(int32_t));
    be->by_seq = malloc(rows * sizeof(int32_t));
    be->spans = malloc(rows * sizeof *be->spans);
    be->act = malloc(act_max ? act_max : 1);
    be->attn_tmp_size = (cera_attention_scratch_size(hp->head_dim) + 63) & ~(size_t)63;
    be->attn_tmp = malloc(be->attn_tmp_size * (size_t)cera_pool_size(be->pool));
    if (!ok || !be->rope_cache || !be->out_rows || !be->seq_count || !be->seq_first || !be->seq_start ||
        !be->by_seq || !be->spans || !be->act || !be->attn_tmp) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "CPU backend buffers for a batch of %d tokens", nb);
        goto fail;
    }
    compile(be);
    *out = &be->base;
    return CERA_OK;
fail:
    cpu_free(&be->base);
    return st;
}
