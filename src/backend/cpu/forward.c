/*
 * forward.c — the CPU backend: the llama-family forward pass (llama, qwen2, qwen3,
 * granite) over a batch of tokens from any number of sequences, as llama.cpp computes
 * it (src/models/llama.cpp and friends):
 *
 *   x = embed(token) · embd_scale
 *   per layer:  h = rms_norm(x) · attn_norm
 *               q, k, v = h·Wq (+bq), h·Wk (+bk), h·Wv (+bv)   [qwen3: per-head RMS norm of q, k]
 *               rope(q, k); append k, v to the sequence's KV blocks
 *               x += attention(q, K, V)·Wo · residual_scale
 *               h = rms_norm(x) · ffn_norm
 *               x += (silu(h·Wgate) ⊙ h·Wup)·Wdown · residual_scale
 *   logits = (rms_norm(x) · output_norm)·Wout (+b) / logit_scale, for the tokens that want them
 *
 * Matmuls, attention rows and the per-token work between them (norms, biases, rope, KV
 * stores, SwiGLU, residuals) all run on the engine's thread pool. Every buffer is sized
 * at open from n_batch; forward allocates nothing. The seven projections all go through
 * proj_matmul, the one place a per-sequence adapter (LoRA) hooks in.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/repack.h"
#include "backend/cpu/threadpool.h"
#include "core/error.h"
#include "core/fp16.h"
#include "backend/backend.h"
#include "backend/cpu/lora.h"

typedef struct cpu_backend {
    cera_backend base;
    const cera_model *m;
    cera_pool *pool;
    int n_batch;
    cera_rope rope;
    /* activations, [n_batch rows of ...] */
    float *x;              /* [n_embd] the residual stream */
    float *h;              /* [n_embd] normed input of a block */
    float *q;              /* [n_head * head_dim] */
    float *k, *v;          /* [n_head_kv * head_dim] */
    float *att;            /* [n_head * head_dim] attention output */
    float *o;              /* [n_embd] a block's output before the residual add */
    float *gate;           /* [n_ff] */
    float *up;             /* [n_ff] */
    float *rope_cache;     /* [n_rot] cos/sin per token */
    int32_t *out_rows;     /* [n_batch] tokens that want logits */
    int32_t *row_seq;      /* [n_batch] sequence of each row (for per-sequence adapters) */
    int32_t *seq_count;    /* [n_batch] tokens of each of the batch's sequences */
    cera_attn_span *spans; /* [n_batch] the attention's spans (attention.h) */
    void *act;             /* activation scratch of the largest matmul */
    uint8_t *attn_tmp;     /* per-thread attention scratch */
    size_t attn_tmp_size;
    cera_packed_set *packed; /* weights repacked at open (repack.h), hung on their dev fields */
} cpu_backend;

/* ---- projections ------------------------------------------------------------ */

typedef struct proj_ctx {
    cpu_backend *be;
    const int32_t *row_seq;      /* [n_rows]: the sequence (index into batch->seqs) of each row */
    const cera_lora_batch *lora; /* the batch's rows grouped by adapter, or NULL */
} proj_ctx;

/* y[n_rows, w.n] = x[n_rows, w.k] · Wᵀ for projection `proj` of layer `il`.
 * LoRA hook: after this matmul and before any bias, norm or rope, an adapter adds
 * y[r] += scale · B(A · x[r]) for the adapters attached to row r's sequence
 * (row_seq[r]). Every projection goes through here, so that is the one place; the
 * adapter work runs inside the matmul's own pool job (backend/cpu/lora.h). */
static void proj_matmul(const proj_ctx *ctx, int il, cera_proj proj, const float *x, float *y, int n_rows) {
    cpu_backend *be = ctx->be;
    const cera_weight *w = &be->m->layers[il].proj[proj];
    cera_lora_cpu_job lj;
    const cera_matmul_hook *hook =
        cera_lora_cpu_hook(&lj, be->pool, ctx->lora, il, proj, x, (size_t)w->k, y, (size_t)w->n);
    cera_matmul_ex(be->pool, w, cera_cpu_ops(w->type), x, n_rows, y, (size_t)w->n, be->act, hook);
    cera_lora_cpu_after(&lj);
}

static void add_bias(float *y, const cera_weight *b, int n_rows) {
    if (!b->data) return;
    const float *bv = b->data;
    const int64_t n = b->k;
    for (int r = 0; r < n_rows; r++)
        for (int64_t i = 0; i < n; i++) y[(size_t)r * n + i] += bv[i];
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

/* ---- forward ------------------------------------------------------------------ */

static void embed_row(const cpu_backend *be, cera_token tok, float *out) {
    const cera_weight *e = &be->m->tok_embd;
    const size_t rs = cera_row_size(e->type, e->k);
    const uint8_t *row = (const uint8_t *)e->data + (size_t)tok * rs;
    if (e->type == CERA_TYPE_F32)
        memcpy(out, row, (size_t)e->k * sizeof(float));
    else
        cera_type_get(e->type)->to_float(row, out, e->k);
}

static void store_kv(cera_kv_seq *seq, int il, int kv, int pos, const float *src, int n) {
    void *dst = cera_kv_row(seq, il, kv, pos);
    if (seq->pool->type == CERA_KV_F16) {
        cera_f16 *d = dst;
        for (int i = 0; i < n; i++) d[i] = cera_f32_to_f16(src[i]);
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* The per-token work between the matmuls, one token per chunk of the thread pool. */
typedef enum tok_stage {
    ST_EMBED,     /* embedding row (x embd_scale), the rotary angles of the position */
    ST_ATTN_NORM, /* h = rms_norm(x) * attn_norm */
    ST_QKV,       /* q, k, v biases; qwen3's per-head norms; rope; K and V into the cache */
    ST_FFN_NORM,  /* x += (o + bo) * residual_scale; h = rms_norm(x) * ffn_norm */
    ST_SWIGLU,    /* gate = silu(gate + b) * (up + b) */
    ST_RESIDUAL,  /* x += (o + b_down) * residual_scale */
} tok_stage;

typedef struct tok_job {
    cpu_backend *be;
    const cera_batch *b;
    const cera_layer *L;
    int il;
    tok_stage stage;
} tok_job;

static void add_bias_row(float *y, const cera_weight *b) {
    if (!b->data) return;
    const float *bv = b->data;
    for (int64_t i = 0; i < b->k; i++) y[i] += bv[i];
}

static void tok_work(void *arg, int64_t ti, int ith) {
    const tok_job *j = arg;
    cpu_backend *be = j->be;
    const cera_hparams *hp = &be->m->hp;
    const cera_layer *L = j->L;
    const size_t t = (size_t)ti;
    const int n_embd = hp->n_embd, hd = hp->head_dim, n_q = hp->n_head * hd, n_kv = hp->n_head_kv * hd;
    float *xt = be->x + t * n_embd, *ht = be->h + t * n_embd, *ot = be->o + t * n_embd;
    switch (j->stage) {
    case ST_EMBED:
        embed_row(be, j->b->token[t], xt);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < n_embd; i++) xt[i] *= hp->embd_scale;
        if (hp->use_rope) cera_rope_cache(&be->rope, j->b->pos[t], be->rope_cache + t * hp->n_rot);
        break;
    case ST_ATTN_NORM: cera_rms_norm_f32(ht, xt, L->attn_norm.data, n_embd, hp->rms_eps); break;
    case ST_QKV: {
        float *qt = be->q + t * n_q, *kt = be->k + t * n_kv, *vt = be->v + t * n_kv;
        add_bias_row(qt, &L->bq);
        add_bias_row(kt, &L->bk);
        add_bias_row(vt, &L->bv);
        if (L->q_norm.data)
            for (int h = 0; h < hp->n_head; h++)
                cera_rms_norm_f32(qt + h * hd, qt + h * hd, L->q_norm.data, hd, hp->rms_eps);
        if (L->k_norm.data)
            for (int h = 0; h < hp->n_head_kv; h++)
                cera_rms_norm_f32(kt + h * hd, kt + h * hd, L->k_norm.data, hd, hp->rms_eps);
        if (hp->use_rope) {
            const float *rc = be->rope_cache + t * hp->n_rot;
            cera_rope_apply(&be->rope, rc, qt, hp->n_head, hd);
            cera_rope_apply(&be->rope, rc, kt, hp->n_head_kv, hd);
        }
        cera_kv_seq *s = j->b->seqs[j->b->seq[t]];
        store_kv(s, j->il, 0, j->b->pos[t], kt, n_kv);
        store_kv(s, j->il, 1, j->b->pos[t], vt, n_kv);
        break;
    }
    case ST_FFN_NORM:
        add_bias_row(ot, &L->bo);
        cera_add_scaled_f32(xt, ot, hp->residual_scale, n_embd);
        cera_rms_norm_f32(ht, xt, L->ffn_norm.data, n_embd, hp->rms_eps);
        break;
    case ST_SWIGLU: {
        float *gt = be->gate + t * hp->n_ff, *ut = be->up + t * hp->n_ff;
        add_bias_row(gt, &L->b_gate);
        add_bias_row(ut, &L->b_up);
        cera_swiglu_f32(gt, gt, ut, hp->n_ff);
        break;
    }
    case ST_RESIDUAL:
        add_bias_row(ot, &L->b_down);
        cera_add_scaled_f32(xt, ot, hp->residual_scale, n_embd);
        break;
    }
}

static void per_token(cpu_backend *be, const cera_batch *b, int il, tok_stage stage) {
    tok_job j = {be, b, il >= 0 ? &be->m->layers[il] : NULL, il, stage};
    cera_pool_for(be->pool, b->n_tokens, tok_work, &j);
}

static cera_status cpu_forward(cera_backend *base, const cera_batch *b, float *logits, cera_error *err) {
    cpu_backend *be = (cpu_backend *)base;
    const cera_model *m = be->m;
    const cera_hparams *hp = &m->hp;
    const int n = b->n_tokens;
    const int n_embd = hp->n_embd, hd = hp->head_dim;
    if (n <= 0 || n > be->n_batch)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "batch of %d tokens (1..%d allowed)", n, be->n_batch);
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
        be->row_seq[t] = b->seq[t];
    }
    if (b->n_seqs > be->n_batch)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "batch of %d sequences (1..%d allowed)", b->n_seqs,
                         be->n_batch);
    for (int q = 0; q < b->n_seqs; q++) be->seq_count[q] = 0;
    for (int t = 0; t < n; t++) be->seq_count[b->seq[t]]++;
    proj_ctx pc = {be, be->row_seq, b->lora};
    per_token(be, b, -1, ST_EMBED);

    attn_job aj = {
        .args = {.q = be->q,
                 .out = be->att,
                 .n_tokens = n,
                 .n_head = hp->n_head,
                 .n_head_kv = hp->n_head_kv,
                 .head_dim = hd,
                 .pos = b->pos,
                 .seq = b->seq,
                 .seqs = b->seqs,
                 .scale = hp->attn_scale,
                 .spans = be->spans},
        .be = be,
    };
    aj.args.n_spans = cera_attention_spans(&aj.args, be->seq_count, be->spans);

    for (int il = 0; il < hp->n_layer; il++) {
        per_token(be, b, il, ST_ATTN_NORM);
        proj_matmul(&pc, il, CERA_PROJ_Q, be->h, be->q, n);
        proj_matmul(&pc, il, CERA_PROJ_K, be->h, be->k, n);
        proj_matmul(&pc, il, CERA_PROJ_V, be->h, be->v, n);
        per_token(be, b, il, ST_QKV);
        aj.args.layer = il;
        cera_pool_for(be->pool, cera_attention_n_chunks(&aj.args), attn_chunk, &aj);
        proj_matmul(&pc, il, CERA_PROJ_O, be->att, be->o, n);
        per_token(be, b, il, ST_FFN_NORM);
        proj_matmul(&pc, il, CERA_PROJ_GATE, be->h, be->gate, n);
        proj_matmul(&pc, il, CERA_PROJ_UP, be->h, be->up, n);
        per_token(be, b, il, ST_SWIGLU);
        proj_matmul(&pc, il, CERA_PROJ_DOWN, be->gate, be->o, n);
        per_token(be, b, il, ST_RESIDUAL);
    }

    /* the output head, only for the tokens that want logits */
    int n_out = 0;
    for (int t = 0; t < n; t++)
        if (b->want_logits[t]) {
            cera_rms_norm_f32(be->h + (size_t)n_out * n_embd, be->x + (size_t)t * n_embd, m->output_norm.data,
                              n_embd, hp->rms_eps);
            be->out_rows[n_out++] = t;
        }
    if (n_out == 0) return CERA_OK;
    const cera_weight *wo = &m->output;
    cera_matmul(be->pool, wo, cera_cpu_ops(wo->type), be->h, n_out, logits, (size_t)hp->n_vocab, be->act);
    add_bias(logits, &m->output_b, n_out);
    if (hp->logit_scale != 1.0f) {
        /* llama.cpp multiplies by the reciprocal */
        const float s = 1.0f / hp->logit_scale;
        for (size_t i = 0; i < (size_t)n_out * hp->n_vocab; i++) logits[i] *= s;
    }
    return CERA_OK;
}

/* ---- open / free ---------------------------------------------------------------- */

static void cpu_free(cera_backend *base) {
    cpu_backend *be = (cpu_backend *)base;
    if (!be) return;
    cera_pool_free(be->pool);
    free(be->x);
    free(be->h);
    free(be->q);
    free(be->k);
    free(be->v);
    free(be->att);
    free(be->o);
    free(be->gate);
    free(be->up);
    free(be->rope_cache);
    free(be->out_rows);
    free(be->row_seq);
    free(be->seq_count);
    free(be->spans);
    free(be->act);
    free(be->attn_tmp);
    cera_cpu_repack_free(be->packed);
    free(be);
}

static cera_status check_weight(const cera_weight *w, const char *what, int il, size_t *act_max, int n_batch,
                                cera_error *err) {
    if (!cera_cpu_ops(w->type)) {
        const cera_type_traits *tt = cera_type_get(w->type);
        if (il >= 0)
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "tensor 'blk.%d.%s.weight': type %s has no CPU kernels", il, what,
                             tt ? tt->name : "?");
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "tensor '%s': type %s has no CPU kernels", what,
                         tt ? tt->name : "?");
    }
    cera_status st = cera_matmul_prepare(w, err);
    if (st) return st;
    const size_t s = cera_matmul_scratch_size(w->type, w->k, n_batch);
    if (s > *act_max) *act_max = s;
    return CERA_OK;
}

cera_status cera_cpu_backend_open(const cera_model *m, const cera_engine_params *params, cera_backend **out,
                                  cera_error *err) {
    *out = NULL;
    if (params->kv_type != CERA_KV_F16 && params->kv_type != CERA_KV_F32)
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "the CPU backend keeps its KV cache in F16 or F32 (asked: %s)",
                         params->kv_type == CERA_KV_Q8_0 ? "Q8_0" : "unknown");
    const cera_hparams *hp = &m->hp;
    const int nb = params->n_batch > 0 ? params->n_batch : 512;
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return cera_fail(err, CERA_ERR_NO_MEMORY, "CPU backend");
    be->base.name = "cpu";
    be->base.kv_on_host = true;
    be->base.forward = cpu_forward;
    be->base.free = cpu_free;
    be->m = m;
    be->n_batch = nb;
    cera_rope_init(&be->rope, hp, m->rope_freqs.data);

    size_t act_max = 0;
    cera_status st;
    for (int il = 0; il < hp->n_layer; il++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++)
            if ((st = check_weight(&m->layers[il].proj[p], cera_proj_name((cera_proj)p), il, &act_max, nb,
                                   err)))
                goto fail;
    if ((st = check_weight(&m->output, hp->tied_output ? "token_embd.weight" : "output.weight", -1, &act_max,
                           nb, err)))
        goto fail;
    if ((st = cera_pool_new(params->n_threads, &be->pool, err))) goto fail;
    if ((st = cera_cpu_repack_model(m, be->pool, &be->packed, err))) goto fail;

    const size_t n_q = (size_t)hp->n_head * hp->head_dim, n_kv = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t rows = (size_t)nb;
    be->x = malloc(rows * hp->n_embd * sizeof(float));
    be->h = malloc(rows * hp->n_embd * sizeof(float));
    be->q = malloc(rows * n_q * sizeof(float));
    be->k = malloc(rows * n_kv * sizeof(float));
    be->v = malloc(rows * n_kv * sizeof(float));
    be->att = malloc(rows * n_q * sizeof(float));
    be->o = malloc(rows * hp->n_embd * sizeof(float));
    be->gate = malloc(rows * hp->n_ff * sizeof(float));
    be->up = malloc(rows * hp->n_ff * sizeof(float));
    be->rope_cache = malloc(rows * hp->n_rot * sizeof(float));
    be->out_rows = malloc(rows * sizeof(int32_t));
    be->row_seq = malloc(rows * sizeof(int32_t));
    be->seq_count = malloc(rows * sizeof(int32_t));
    be->spans = malloc(rows * sizeof *be->spans);
    be->act = malloc(act_max ? act_max : 1);
    be->attn_tmp_size = (cera_attention_scratch_size(hp->head_dim) + 63) & ~(size_t)63;
    be->attn_tmp = malloc(be->attn_tmp_size * (size_t)cera_pool_size(be->pool));
    if (!be->x || !be->h || !be->q || !be->k || !be->v || !be->att || !be->o || !be->gate || !be->up ||
        !be->rope_cache || !be->out_rows || !be->row_seq || !be->seq_count || !be->spans || !be->act ||
        !be->attn_tmp) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "CPU backend buffers for a batch of %d tokens", nb);
        goto fail;
    }
    *out = &be->base;
    return CERA_OK;
fail:
    cpu_free(&be->base);
    return st;
}
