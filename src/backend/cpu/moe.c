/* moe.c — the CPU backend's routed experts (see moe.h). */
#include "backend/cpu/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

cera_status cera_cpu_moe_init(cera_cpu_moe *s, const cera_graph *g, int n_batch, cera_error *err) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < g->n_ops; i++) {
        const cera_experts *ex = g->ops[i].kind == CERA_OP_MOE ? g->ops[i].moe : NULL;
        if (!ex) continue;
        if (ex->n_expert > s->max_expert) s->max_expert = ex->n_expert;
        if (ex->n_used > s->max_used) s->max_used = ex->n_used;
        if (ex->gate[0].k > s->n_embd) s->n_embd = ex->gate[0].k;
        if (ex->gate[0].n > s->n_ff) s->n_ff = ex->gate[0].n;
    }
    if (!s->max_expert) return CERA_OK;
    s->n_batch = n_batch;
    const size_t nb = (size_t)n_batch, slots = nb * (size_t)s->max_used;
    s->logits = malloc(nb * (size_t)s->max_expert * sizeof(float));
    s->sel = malloc(slots * sizeof(int32_t));
    s->wt = malloc(slots * sizeof(float));
    s->start = malloc(((size_t)s->max_expert + 1) * sizeof(int32_t));
    s->order = malloc(slots * sizeof(int32_t));
    s->where = malloc(slots * sizeof(int32_t));
    s->xg = malloc(nb * (size_t)s->n_embd * sizeof(float));
    s->g = malloc(nb * (size_t)s->n_ff * sizeof(float));
    s->u = malloc(nb * (size_t)s->n_ff * sizeof(float));
    s->eo = malloc(slots * (size_t)s->n_embd * sizeof(float));
    s->tok_n = malloc(nb * sizeof(int32_t));
    s->tok_g = malloc(nb * CERA_LORA_MAX_SET * sizeof(int32_t));
    s->tok_s = malloc(nb * CERA_LORA_MAX_SET * sizeof(float));
    s->row_tok = malloc(nb * sizeof(int32_t));
    if (!s->logits || !s->sel || !s->wt || !s->start || !s->order || !s->where || !s->xg || !s->g || !s->u ||
        !s->eo || !s->tok_n || !s->tok_g || !s->tok_s || !s->row_tok) {
        cera_cpu_moe_free(s);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "CPU backend: expert buffers for a batch of %d tokens",
                         n_batch);
    }
    return CERA_OK;
}

void cera_cpu_moe_free(cera_cpu_moe *s) {
    free(s->logits);
    free(s->sel);
    free(s->wt);
    free(s->start);
    free(s->order);
    free(s->where);
    free(s->xg);
    free(s->g);
    free(s->u);
    free(s->eo);
    free(s->tok_n);
    free(s->tok_g);
    free(s->tok_s);
    free(s->row_tok);
    memset(s, 0, sizeof *s);
}

/* Token t's probabilities in place of its logits, its chosen experts and their weights. */
static void route(const cera_cpu_moe *s, const cera_experts *ex, int t) {
    const int ne = ex->n_expert, k = ex->n_used;
    float *p = s->logits + (size_t)t * ne;
    if (ex->gating == CERA_GATING_SIGMOID) {
        for (int e = 0; e < ne; e++) p[e] = 1.0f / (1.0f + expf(-p[e])); /* ggml's op_sigmoid */
    } else {
        float mx = -INFINITY;
        for (int e = 0; e < ne; e++) mx = p[e] > mx ? p[e] : mx;
        double sum = 0;
        for (int e = 0; e < ne; e++) sum += (double)(p[e] = expf(p[e] - mx));
        const float inv = (float)(1.0 / sum);
        for (int e = 0; e < ne; e++) p[e] *= inv;
    }
    const float *bias = ex->sel_bias.data;
    int32_t *sel = s->sel + (size_t)t * k;
    float *w = s->wt + (size_t)t * k;
    /* top k by p + bias, largest first (a selection over the few experts; ties: lower index) */
    for (int j = 0; j < k; j++) {
        int best = -1;
        float bv = 0;
        for (int e = 0; e < ne; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = sel[i] == e;
            if (taken) continue;
            const float v = bias ? p[e] + bias[e] : p[e];
            if (best < 0 || v > bv) best = e, bv = v;
        }
        sel[j] = best;
        w[j] = p[best];
    }
    if (ex->norm_w) {
        double sum = 0; /* ggml's sum_rows sums in double */
        for (int j = 0; j < k; j++) sum += (double)w[j];
        float fs = (float)sum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f; /* llama.cpp's clamp: the smallest normal F16 */
        for (int j = 0; j < k; j++) w[j] /= fs;
    }
    if (ex->w_scale != 0.0f && ex->w_scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] *= ex->w_scale;
}

/* Each token's adapter groups of the batch's plan; false when no group targets this layer's
 * experts or router. */
static bool lora_index(cera_cpu_moe *s, const cera_lora_batch *lb, int layer, int n) {
    bool any = false;
    for (int g = 0; lb && g < lb->n_groups && !any; g++)
        for (int t = 0; t < CERA_LORA_MOE_COUNT && !any; t++)
            any = cera_lora_moe_get(lb->groups[g].adapter, layer, (cera_lora_moe)t) != NULL;
    if (!any) return false;
    for (int t = 0; t < n; t++) s->tok_n[t] = 0;
    for (int g = 0; g < lb->n_groups; g++)
        for (int i = 0; i < lb->groups[g].n_rows; i++) {
            const int t = lb->groups[g].rows[i];
            if (t < 0 || t >= n || s->tok_n[t] >= CERA_LORA_MAX_SET) continue;
            s->tok_g[t * CERA_LORA_MAX_SET + s->tok_n[t]] = g;
            s->tok_s[t * CERA_LORA_MAX_SET + s->tok_n[t]++] = lb->groups[g].scales[i];
        }
    return true;
}

/* y[i] += s·B(A·x[i]) for rows i < m (of token tok[i], or i when tok is NULL) and every adapter of
 * that token targeting (layer, tgt); expert e's factors, or the router's when e < 0. */
static void lora_rows(const cera_cpu_moe *s, const cera_lora_batch *lb, int layer, cera_lora_moe tgt, int e,
                      const int32_t *tok, int m, const float *x, int64_t ldx, float *y, int64_t ldy) {
    for (int i = 0; i < m; i++) {
        const int t = tok ? tok[i] : i;
        for (int j = 0; j < s->tok_n[t]; j++) {
            const cera_adapter *a = lb->groups[s->tok_g[t * CERA_LORA_MAX_SET + j]].adapter;
            const cera_lora_pair *q = cera_lora_moe_get(a, layer, tgt);
            if (!q) continue;
            const cera_lora_pair p = e < 0 ? *q : cera_lora_expert(q, e);
            const float sc = cera_lora_scale(a, q, s->tok_s[t * CERA_LORA_MAX_SET + j]);
            cera_lora_apply_row(&p, sc, x + (size_t)i * (size_t)ldx, y + (size_t)i * (size_t)ldy, 0, p.d);
        }
    }
}

typedef struct glu_job {
    float *g;
    const float *u;
    int64_t n_ff;
} glu_job;

static void glu_row(void *arg, int64_t r, int ith) {
    const glu_job *j = arg;
    (void)ith;
    cera_swiglu_f32(j->g + r * j->n_ff, j->g + r * j->n_ff, j->u + r * j->n_ff, (int)j->n_ff);
}

void cera_cpu_moe_run(cera_cpu_moe *s, cera_pool *pool, const cera_experts *ex,
                      const struct cera_packed_weight *const *pk, const float *x, int n, float *y, size_t ldy,
                      void *act, const cera_lora_batch *lora, int layer) {
    const int ne = ex->n_expert, k = ex->n_used;
    const bool with_lora = lora_index(s, lora, layer, n);
    const int64_t n_embd = ex->gate[0].k, n_ff = ex->gate[0].n;
    const cera_weight *r = &ex->router;
    cera_matmul_ex(pool, r, pk[0], cera_cpu_ops(r->type), x, n, s->logits, (size_t)ne, act, NULL);
    if (with_lora) lora_rows(s, lora, layer, CERA_LORA_MOE_ROUTER, -1, NULL, n, x, n_embd, s->logits, ne);
    for (int t = 0; t < n; t++) route(s, ex, t);

    /* group the slots by expert, in token order within each */
    for (int e = 0; e <= ne; e++) s->start[e] = 0;
    for (int i = 0; i < n * k; i++) s->start[s->sel[i] + 1]++;
    for (int e = 0; e < ne; e++) s->start[e + 1] += s->start[e];
    for (int i = 0; i < n * k; i++) {
        const int e = s->sel[i];
        s->where[i] = s->start[e];
        s->order[s->start[e]++] = i;
    }
    for (int e = ne; e > 0; e--) s->start[e] = s->start[e - 1];
    s->start[0] = 0;

    for (int e = 0; e < ne; e++) {
        const int first = s->start[e], m = s->start[e + 1] - first;
        if (!m) continue; /* an expert no token chose is never read */
        for (int i = 0; i < m; i++) {
            s->row_tok[i] = s->order[first + i] / k;
            memcpy(s->xg + (size_t)i * n_embd, x + (size_t)s->row_tok[i] * n_embd,
                   (size_t)n_embd * sizeof(float));
        }
        const cera_weight *wg = &ex->gate[e], *wu = &ex->up[e], *wd = &ex->down[e];
        cera_matmul_ex(pool, wg, pk[1 + e], cera_cpu_ops(wg->type), s->xg, m, s->g, (size_t)n_ff, act, NULL);
        cera_matmul_ex(pool, wu, pk[1 + ne + e], cera_cpu_ops(wu->type), s->xg, m, s->u, (size_t)n_ff, act,
                       NULL);
        if (with_lora) {
            lora_rows(s, lora, layer, CERA_LORA_MOE_UP, e, s->row_tok, m, s->xg, n_embd, s->u, n_ff);
            lora_rows(s, lora, layer, CERA_LORA_MOE_GATE, e, s->row_tok, m, s->xg, n_embd, s->g, n_ff);
        }
        glu_job gj = {s->g, s->u, n_ff};
        cera_pool_for(pool, m, glu_row, &gj);
        float *eo = s->eo + (size_t)first * n_embd;
        cera_matmul_ex(pool, wd, pk[1 + 2 * ne + e], cera_cpu_ops(wd->type), s->g, m, eo, (size_t)n_embd, act,
                       NULL);
        if (with_lora)
            lora_rows(s, lora, layer, CERA_LORA_MOE_DOWN, e, s->row_tok, m, s->g, n_ff, eo, n_embd);
    }

    /* each product rounded, then the slots added in order (llama.cpp: mul, then a chain of adds) */
    for (int t = 0; t < n; t++) {
        float *yt = y + (size_t)t * ldy;
        for (int j = 0; j < k; j++) {
            float *o = s->eo + (size_t)s->where[t * k + j] * n_embd;
            const float w = s->wt[t * k + j];
            for (int64_t c = 0; c < n_embd; c++) o[c] *= w;
        }
        memcpy(yt, s->eo + (size_t)s->where[t * k] * n_embd, (size_t)n_embd * sizeof(float));
        for (int j = 1; j < k; j++) {
            const float *o = s->eo + (size_t)s->where[t * k + j] * n_embd;
            for (int64_t c = 0; c < n_embd; c++) yt[c] += o[c];
        }
    }
}
