/*
 * sampler.h — the sampler chain: turns one position's logits into a token.
 *
 * llama.cpp's default order and semantics: logit bias, penalties (repeat, frequency,
 * presence over the last N accepted tokens), top-k, typical-p, top-p, min-p,
 * temperature, then a seeded draw; greedy (argmax) at temperature <= 0.
 * One sampler per sequence: it owns its RNG and penalty history, and allocates
 * only at creation (nothing per token).
 *
 * The draw uses MT19937 seeded with the seed (a seed below 2^32 is used as is, as
 * llama.cpp's uint32 seed) and one uniform double per token, as llama.cpp's dist
 * sampler, so a chain with the same parameters over the same logits makes the same
 * draws as llama.cpp (tests/sample checks it against llama.cpp's chain). The same
 * seed always gives the same sequence. One difference: penalty_last_n = -1 means the
 * whole history here, where llama.cpp's library treats it as 0 (its CLI first turns
 * -1 into the context size, which is the same thing within one context).
 */
#ifndef CERA_SAMPLE_SAMPLER_H
#define CERA_SAMPLE_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "sample/mt19937.h"
#include "sample/stages.h"

typedef struct cera_sampler cera_sampler;

/* Checks the parameters (ranges, NaNs, logit-bias tokens within n_vocab, biases that do not
 * ban every token) and
 * allocates every buffer. params->logit_bias is copied. */
cera_status cera_sampler_new(const cera_sampler_params *params, int n_vocab, cera_sampler **out,
                             cera_error *err);
void cera_sampler_free(cera_sampler *s);

/* Picks a token from n_vocab logits (not modified). A temperature so small that a logit
 * divided by it overflows picks as greedy does. */
cera_token cera_sampler_sample(cera_sampler *s, const float *logits);

/* cera_sampler_sample over only the tokens a mask allows (bit i%32 of mask[i/32] for token
 * i; a grammar's mask, src/grammar): the others are dropped before the chain (as logits of
 * -inf, llama.cpp's grammar sampler, but without carrying them through the stages). Makes
 * the same single draw. Returns -1 when no allowed token is left (the mask is empty, or
 * logit biases of -inf ban every allowed token). */
cera_token cera_sampler_sample_masked(cera_sampler *s, const float *logits, const uint32_t *mask);

/* Records a token that entered the sequence (prompt or generated) for the penalties. */
void cera_sampler_accept(cera_sampler *s, cera_token token);

/* The draw's RNG state, copied out or in (a saved session's, engine/state.c). */
void cera_sampler_rng_get(const cera_sampler *s, cera_mt19937 *out);
void cera_sampler_rng_set(cera_sampler *s, const cera_mt19937 *in);

/* Clears the penalty history and reseeds the RNG from the parameters. */
void cera_sampler_reset(cera_sampler *s);

/* A copy with the same parameters and state (penalty window, RNG position), for a
 * forked sequence: both then draw the same tokens from the same logits. */
cera_status cera_sampler_clone(const cera_sampler *s, cera_sampler **out, cera_error *err);

/* Runs the chain on n_vocab logits up to, not including, the draw, and returns the
 * surviving candidates with the probabilities the draw would use (in the order it
 * walks them). Valid until the next call on s; consumes no randomness. For tests,
 * logprob output and speculative decoding. */
const cera_candidate *cera_sampler_candidates(cera_sampler *s, const float *logits, size_t *n);

/* The parameters the sampler was made with (logit_bias points at its copy). */
const cera_sampler_params *cera_sampler_params_of(const cera_sampler *s);

/* ---- For a chain run elsewhere (a device backend, src/backend/cuda/sample.cu) ----
 * cera_sampler_sample is: bias and penalties, one draw, then greedy or the filters. A
 * backend that runs the same chain on its own copy of the logits takes the draw and the
 * penalty window from here, so its tokens and the RNG sequence are the CPU sampler's. */

/* Whether the chain is the greedy one: the argmax after bias and penalties. */
static inline bool cera_sampler_params_greedy(const cera_sampler_params *p) {
    return p->temp <= 0.0f && p->typical_p >= 1.0f;
}

/* The draw cera_sampler_sample would make now (one uniform double in [0, 1)); advances
 * the RNG exactly as one cera_sampler_sample call does. */
double cera_sampler_draw(cera_sampler *s);

/* The penalty window as cera_sampler_sample applies it: *tokens[j] (distinct, in no
 * particular order) occurred *counts[j] > 0 times. Returns how many; 0 when the penalties
 * are off (neutral values or penalty_last_n = 0) or the window is empty. The arrays are
 * the sampler's, valid until its next call. */
size_t cera_sampler_penalty_window(cera_sampler *s, const int32_t **tokens, const int32_t **counts);

#endif
