/*
 * sampler.c — the sampler chain (see sampler.h): parameter checks, the penalty
 * history and the order of the stages (stages.c).
 *
 * The penalty history keeps, for the last N accepted tokens, a ring of their ids, a
 * count per vocabulary entry and the list of distinct tokens in the window, so that
 * applying the penalties costs one step per distinct recent token, not a scan of
 * the vocabulary. With penalty_last_n = -1 the window is everything accepted since
 * the last reset (no ring, nothing ever leaves it).
 */
#include "sample/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sample/mt19937.h"

struct cera_sampler {
    cera_sampler_params params; /* .logit_bias points at bias */
    cera_logit_bias *bias;      /* [n_logit_bias] */
    int n_vocab;

    cera_candidates cur;    /* .data: [n_vocab] */
    cera_sample_scratch ws; /* .cand, .cand2: [n_vocab] */
    bool penalties_on;

    /* penalty window */
    int32_t *count;        /* [n_vocab] occurrences in the window */
    int32_t *distinct;     /* [n_vocab] tokens with count > 0, in no particular order */
    int32_t *distinct_pos; /* [n_vocab] index of a token in distinct, or -1 */
    int32_t *distinct_cnt; /* [n_vocab] count of distinct[i], filled before each use */
    size_t n_distinct;
    int32_t *ring; /* [penalty_last_n] the window's tokens, oldest at ring_head */
    int ring_cap, ring_head, ring_size;

    cera_mt19937 rng;
};

cera_sampler_params cera_sampler_default_params(void) {
    return (cera_sampler_params){
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .typical_p = 1.0f,
        .repeat_penalty = 1.0f,
        .freq_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .penalty_last_n = 64,
        .seed = 0,
        .logit_bias = NULL,
        .n_logit_bias = 0,
    };
}

static cera_status check_unit(float v, const char *name, cera_error *err) {
    if (!(v >= 0.0f && v <= 1.0f)) /* also catches NaN */
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: %s = %g is outside [0, 1]", name, (double)v);
    return CERA_OK;
}

static cera_status check_params(const cera_sampler_params *p, int n_vocab, cera_error *err) {
    cera_status st;
    if (n_vocab <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: n_vocab = %d must be > 0", n_vocab);
    if (isnan(p->temp)) return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: temp is NaN");
    if (isinf(p->temp) && p->temp > 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: temp is infinite");
    if ((st = check_unit(p->top_p, "top_p", err)) != CERA_OK) return st;
    if ((st = check_unit(p->min_p, "min_p", err)) != CERA_OK) return st;
    if ((st = check_unit(p->typical_p, "typical_p", err)) != CERA_OK) return st;
    if (!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: repeat_penalty = %g must be finite and > 0",
                         (double)p->repeat_penalty);
    if (!isfinite(p->freq_penalty))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: freq_penalty = %g is not finite",
                         (double)p->freq_penalty);
    if (!isfinite(p->presence_penalty))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: presence_penalty = %g is not finite",
                         (double)p->presence_penalty);
    if (p->penalty_last_n < -1)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "sampler: penalty_last_n = %d must be >= 0, or -1 for the whole context",
                         p->penalty_last_n);
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: %d logit biases given without an array",
                         p->n_logit_bias);
    int n_banned = 0; /* distinct tokens with a -inf bias */
    for (int i = 0; i < p->n_logit_bias; i++) {
        const cera_logit_bias *b = &p->logit_bias[i];
        if (b->token < 0 || b->token >= n_vocab)
            return cera_fail(err, CERA_ERR_INVALID_ARG,
                             "sampler: logit bias %d names token %d, outside the vocabulary [0, %d)", i,
                             (int)b->token, n_vocab);
        if (isnan(b->bias) || (isinf(b->bias) && b->bias > 0))
            return cera_fail(err, CERA_ERR_INVALID_ARG,
                             "sampler: logit bias %d for token %d is %g (only finite values or -inf)", i,
                             (int)b->token, (double)b->bias);
        if (isinf(b->bias)) n_banned++; /* isinf may return -1 for -inf */
    }
    if (n_banned >= n_vocab) {
        /* perhaps every token: count them once each */
        uint8_t *ban = calloc((size_t)n_vocab, 1);
        if (!ban) return cera_fail(err, CERA_ERR_NO_MEMORY, "sampler: out of memory");
        n_banned = 0;
        for (int i = 0; i < p->n_logit_bias; i++)
            if (isinf(p->logit_bias[i].bias) && !ban[p->logit_bias[i].token]) {
                ban[p->logit_bias[i].token] = 1;
                n_banned++;
            }
        free(ban);
    }
    if (n_banned >= n_vocab)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "sampler: the logit biases ban every token of the vocabulary (%d): nothing could be "
                         "sampled",
                         n_vocab);
    return CERA_OK;
}

void cera_sampler_free(cera_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->cur.data);
    free(s->ws.cand);
    free(s->ws.cand2);
    free(s->count);
    free(s->distinct);
    free(s->distinct_pos);
    free(s->distinct_cnt);
    free(s->ring);
    free(s);
}

cera_status cera_sampler_new(const cera_sampler_params *params, int n_vocab, cera_sampler **out,
                             cera_error *err) {
    *out = NULL;
    if (!params) return cera_fail(err, CERA_ERR_INVALID_ARG, "sampler: no parameters");
    cera_status st = check_params(params, n_vocab, err);
    if (st != CERA_OK) return st;

    cera_sampler *s = calloc(1, sizeof(*s));
    if (!s) return cera_fail(err, CERA_ERR_NO_MEMORY, "sampler: out of memory");
    s->params = *params;
    s->n_vocab = n_vocab;
    const size_t nv = (size_t)n_vocab;
    s->cur.data = malloc(nv * sizeof(cera_candidate));
    s->ws.cand = malloc(nv * sizeof(cera_candidate));
    s->ws.cand2 = malloc(nv * sizeof(cera_candidate));
    s->ws.cap = nv;
    s->count = calloc(nv, sizeof(int32_t));
    s->distinct = malloc(nv * sizeof(int32_t));
    s->distinct_pos = malloc(nv * sizeof(int32_t));
    s->distinct_cnt = malloc(nv * sizeof(int32_t));
    s->ring_cap = params->penalty_last_n > 0 ? params->penalty_last_n : 0;
    if (s->ring_cap) s->ring = malloc((size_t)s->ring_cap * sizeof(int32_t));
    if (params->n_logit_bias > 0) {
        s->bias = malloc((size_t)params->n_logit_bias * sizeof(cera_logit_bias));
        if (s->bias)
            memcpy(s->bias, params->logit_bias, (size_t)params->n_logit_bias * sizeof(cera_logit_bias));
    }
    s->params.logit_bias = s->bias;
    if (!s->cur.data || !s->ws.cand || !s->ws.cand2 || !s->count || !s->distinct || !s->distinct_pos ||
        !s->distinct_cnt || (s->ring_cap && !s->ring) || (params->n_logit_bias > 0 && !s->bias)) {
        cera_sampler_free(s);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "sampler: out of memory for %d candidates", n_vocab);
    }
    s->penalties_on =
        params->penalty_last_n != 0 &&
        (params->repeat_penalty != 1.0f || params->freq_penalty != 0.0f || params->presence_penalty != 0.0f);
    cera_sampler_reset(s);
    *out = s;
    return CERA_OK;
}

const cera_sampler_params *cera_sampler_params_of(const cera_sampler *s) { return &s->params; }

void cera_sampler_reset(cera_sampler *s) {
    for (size_t i = 0; i < s->n_distinct; i++) s->count[s->distinct[i]] = 0;
    memset(s->distinct_pos, 0xff, (size_t)s->n_vocab * sizeof(int32_t));
    s->n_distinct = 0;
    s->ring_head = s->ring_size = 0;
    /* llama.cpp's seed is 32-bit: seeds that fit are used as is, so both agree. */
    const uint64_t seed = s->params.seed;
    cera_mt_seed(&s->rng, (uint32_t)(seed ^ (seed >> 32)));
}

cera_status cera_sampler_clone(const cera_sampler *s, cera_sampler **out, cera_error *err) {
    cera_status st = cera_sampler_new(&s->params, s->n_vocab, out, err);
    if (st) return st;
    cera_sampler *c = *out;
    const size_t nv = (size_t)s->n_vocab;
    memcpy(c->count, s->count, nv * sizeof(int32_t));
    memcpy(c->distinct, s->distinct, s->n_distinct * sizeof(int32_t));
    memcpy(c->distinct_pos, s->distinct_pos, nv * sizeof(int32_t));
    c->n_distinct = s->n_distinct;
    if (s->ring_cap) memcpy(c->ring, s->ring, (size_t)s->ring_cap * sizeof(int32_t));
    c->ring_head = s->ring_head;
    c->ring_size = s->ring_size;
    c->rng = s->rng;
    return CERA_OK;
}

static void window_add(cera_sampler *s, cera_token t) {
    if (s->count[t]++ == 0) {
        s->distinct_pos[t] = (int32_t)s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
}

static void window_remove(cera_sampler *s, cera_token t) {
    if (--s->count[t] == 0) {
        const int32_t pos = s->distinct_pos[t];
        const int32_t last = s->distinct[--s->n_distinct];
        s->distinct[pos] = last;
        s->distinct_pos[last] = pos;
        s->distinct_pos[t] = -1;
    }
}

void cera_sampler_accept(cera_sampler *s, cera_token token) {
    if (!s->penalties_on || token < 0 || token >= s->n_vocab) return;
    if (s->ring_cap) {
        if (s->ring_size == s->ring_cap) { /* full: the oldest leaves the window */
            window_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_size++) % s->ring_cap] = token;
        }
    }
    window_add(s, token);
}

size_t cera_sampler_penalty_window(cera_sampler *s, const int32_t **tokens, const int32_t **counts) {
    *tokens = s->distinct;
    *counts = s->distinct_cnt;
    if (!s->penalties_on) return 0;
    for (size_t i = 0; i < s->n_distinct; i++) s->distinct_cnt[i] = s->count[s->distinct[i]];
    return s->n_distinct;
}

double cera_sampler_draw(cera_sampler *s) { return cera_mt_uniform(&s->rng); }

/* Copies the logits in and applies the stages that work in id order. */
static void chain_begin(cera_sampler *s, const float *logits) {
    cera_cands_from_logits(&s->cur, logits, (size_t)s->n_vocab);
    cera_stage_logit_bias(&s->cur, s->bias, s->params.n_logit_bias);
    const int32_t *toks, *counts;
    const size_t n = cera_sampler_penalty_window(s, &toks, &counts);
    if (n)
        cera_stage_penalties(&s->cur, toks, counts, n, s->params.repeat_penalty, s->params.freq_penalty,
                             s->params.presence_penalty);
}

/* The filters and the temperature, in llama.cpp's default order. */
static void chain_filter(cera_sampler *s) {
    const cera_sampler_params *p = &s->params;
    cera_stage_top_k(&s->cur, p->top_k, &s->ws);
    cera_stage_typical(&s->cur, p->typical_p, 0, &s->ws);
    cera_stage_top_p(&s->cur, p->top_p, 0, &s->ws);
    cera_stage_min_p(&s->cur, p->min_p, 0, &s->ws);
    cera_stage_temp(&s->cur, p->temp);
}

/* The first highest logit in array order (NaN never wins; index 0 when none is
 * above -inf). */
static size_t argmax(const cera_candidates *c) {
    size_t best = 0;
    float best_l = -INFINITY;
    for (size_t i = 0; i < c->size; i++) {
        const float v = c->data[i].logit;
        if (v > best_l) {
            best_l = v;
            best = i;
        }
    }
    return best;
}

cera_token cera_sampler_sample(cera_sampler *s, const float *logits) {
    chain_begin(s, logits);
    /* llama.cpp's dist stage draws once per token even when greedy; so does cera, so
     * switching temperature mid-sequence keeps the draws in step with it. */
    const double u = cera_sampler_draw(s);
    if (cera_sampler_params_greedy(&s->params)) {
        /* Greedy: top-k, top-p and min-p all keep the most likely token, so the
         * answer is the argmax after bias and penalties, found in one pass. Typical-p
         * may drop it, so it takes the full chain below. */
        return s->cur.data[argmax(&s->cur)].id;
    }
    chain_filter(s);
    const int i = cera_stage_dist(&s->cur, u);
    return i >= 0 ? s->cur.data[i].id : 0;
}

cera_token cera_sampler_sample_masked(cera_sampler *s, const float *logits, const uint32_t *mask) {
    chain_begin(s, logits);
    /* the candidates are still in id order here: keep the allowed ones that bias left alive */
    size_t n = 0;
    for (size_t i = 0; i < s->cur.size; i++) {
        const cera_candidate c = s->cur.data[i];
        if ((mask[(uint32_t)c.id >> 5] >> ((uint32_t)c.id & 31)) & 1u && c.logit > -INFINITY)
            s->cur.data[n++] = c;
    }
    s->cur.size = n;
    const double u = cera_sampler_draw(s);
    if (n == 0) return -1;
    if (cera_sampler_params_greedy(&s->params)) return s->cur.data[argmax(&s->cur)].id;
    chain_filter(s);
    const int i = cera_stage_dist(&s->cur, u);
    return i >= 0 ? s->cur.data[i].id : s->cur.data[0].id;
}

const cera_candidate *cera_sampler_candidates(cera_sampler *s, const float *logits, size_t *n) {
    chain_begin(s, logits);
    chain_filter(s);
    const double sum = cera_cands_exp(&s->cur);
    for (size_t i = 0; i < s->cur.size; i++) s->cur.data[i].p = (float)(s->cur.data[i].p / sum);
    *n = s->cur.size;
    return s->cur.data;
}

void cera_sampler_rng_get(const cera_sampler *s, cera_mt19937 *out) { *out = s->rng; }
void cera_sampler_rng_set(cera_sampler *s, const cera_mt19937 *in) { s->rng = *in; }
