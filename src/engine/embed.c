/*
 * embed.c — embeddings (include/cera.h): the final hidden states of a batch of sessions,
 * pooled and normalized as llama.cpp's llama-embedding gives them.
 *
 * The evaluation is batch.c's, in its embeddings mode (the backend writes each position's
 * row after the output norm instead of computing logits: backend.h, cera_batch.embd); here
 * the rows are pooled per item (mean, first, last) and normalized (common_embd_normalize's
 * arithmetic: the norm summed in double, the vector scaled by its float reciprocal).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

int cera_engine_n_embd(const cera_engine *e) { return e ? e->model.hp.n_embd : 0; }

cera_pooling cera_engine_pooling(const cera_engine *e) {
    if (!e) return CERA_POOLING_NONE;
    const int p = e->model.hp.pooling;
    return p >= CERA_POOLING_NONE && p <= CERA_POOLING_LAST ? (cera_pooling)p : CERA_POOLING_NONE;
}

bool cera_embd_normalize(float *v, int n, int norm) {
    if (!v || n < 0 || norm < -1) return false;
    double sum = 0.0;
    switch (norm) {
    case -1: return true;
    case 0: /* max absolute, into the int16 range */
        for (int i = 0; i < n; i++)
            if (sum < fabsf(v[i])) sum = fabsf(v[i]);
        sum /= 32760.0;
        break;
    case 2:
        for (int i = 0; i < n; i++) sum += v[i] * v[i];
        sum = sqrt(sum);
        break;
    default: /* the p-norm (taxicab for 1) */
        for (int i = 0; i < n; i++) sum += pow(fabs((double)v[i]), norm);
        sum = pow(sum, 1.0 / norm);
        break;
    }
    const float scale = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int i = 0; i < n; i++) v[i] *= scale;
    return true;
}

/* One vector from rows [n, d] by the pooling, into out [d]. */
static void pool_rows(const float *rows, size_t n, int d, cera_pooling pooling, float *out) {
    if (pooling == CERA_POOLING_CLS || pooling == CERA_POOLING_LAST) {
        memcpy(out, rows + (pooling == CERA_POOLING_CLS ? 0 : (n - 1) * (size_t)d),
               (size_t)d * sizeof(float));
        return;
    }
    /* the mean as llama.cpp's pooling matmul: each row weighted by 1/n, summed in float */
    const float w = 1.0f / (float)n;
    for (int j = 0; j < d; j++) out[j] = 0.0f;
    for (size_t t = 0; t < n; t++)
        for (int j = 0; j < d; j++) out[j] += rows[t * (size_t)d + j] * w;
}

cera_status cera_embd_pool(const float *rows, size_t n, int d, cera_pooling pooling, int norm, float *out,
                           cera_error *err) {
    cera_error_clear(err);
    if (!rows || !out || n == 0 || d <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_embd_pool: no rows or no output");
    if (pooling != CERA_POOLING_MEAN && pooling != CERA_POOLING_CLS && pooling != CERA_POOLING_LAST)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_embd_pool: pooling %d is not mean, cls or last",
                         (int)pooling);
    if (norm < -1) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_embd_pool: normalization %d", norm);
    pool_rows(rows, n, d, pooling, out);
    cera_embd_normalize(out, d, norm);
    return CERA_OK;
}

cera_status cera_batch_embed(cera_engine *e, const cera_batch_item *items, int n_items, cera_pooling pooling,
                             int norm, float *const *out, cera_error *err) {
    cera_error_clear(err);
    if (!e || n_items < 0 || (n_items > 0 && (!items || !out)))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_batch_embed: NULL argument");
    if (pooling == CERA_POOLING_MODEL) pooling = cera_engine_pooling(e);
    if (pooling < CERA_POOLING_NONE || pooling > CERA_POOLING_LAST)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_batch_embed: unknown pooling %d", (int)pooling);
    if (norm < -1)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_batch_embed: normalization %d (-1 or more)", norm);
    if (n_items > e->params.n_seq_max)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "cera_batch_embed: %d items (the engine has %d sequences)", n_items,
                         e->params.n_seq_max);
    const int d = e->model.hp.n_embd;
    size_t total = 0;
    for (int i = 0; i < n_items; i++) {
        if (!out[i]) return cera_fail(err, CERA_ERR_INVALID_ARG, "batch item %d: NULL output", i);
        if (items[i].n_tokens == 0)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "batch item %d: no tokens to embed", i);
        if (items[i].n_tokens > (size_t)e->params.n_ctx)
            return cera_fail(err, CERA_ERR_CONTEXT_FULL, "batch item %d: %zu tokens exceed n_ctx %d", i,
                             items[i].n_tokens, e->params.n_ctx);
        total += items[i].n_tokens;
    }
    if (n_items == 0) return CERA_OK;
    /* per-token rows go straight to the caller's buffers; pooled ones through scratch */
    float **rows = malloc((size_t)n_items * sizeof *rows);
    float *scratch = pooling == CERA_POOLING_NONE ? NULL : malloc(total * (size_t)d * sizeof(float));
    if (!rows || (pooling != CERA_POOLING_NONE && !scratch)) {
        free(rows);
        free(scratch);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "embeddings of %zu tokens", total);
    }
    size_t off = 0;
    for (int i = 0; i < n_items; i++) {
        rows[i] = scratch ? scratch + off * (size_t)d : out[i];
        off += items[i].n_tokens;
    }
    cera_status st = cera_batch_run(e, items, n_items, rows, err);
    for (int i = 0; i < n_items && !st; i++) {
        const size_t n = items[i].n_tokens;
        if (scratch) {
            st = cera_embd_pool(rows[i], n, d, pooling, norm, out[i], err);
        } else {
            for (size_t t = 0; t < n; t++) cera_embd_normalize(out[i] + t * (size_t)d, d, norm);
        }
    }
    free(rows);
    free(scratch);
    return st;
}

cera_status cera_session_embed(cera_session *s, const cera_token *tokens, size_t n_tokens,
                               cera_pooling pooling, int norm, float *out, cera_error *err) {
    cera_error_clear(err);
    if (!s || (!tokens && n_tokens) || !out)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_embed: NULL argument");
    const cera_batch_item it = {s, tokens, n_tokens, false, 0};
    return cera_batch_embed(s->engine, &it, 1, pooling, norm, &out, err);
}
