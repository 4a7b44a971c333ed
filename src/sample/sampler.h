/*
 * sampler.h — the sampler chain: turns one position's logits into a token.
 *
 * llama.cpp's default order and semantics: logit bias, penalties (repeat, frequency,
 * presence over the last N accepted tokens), top-k, typical-p, top-p, min-p,
 * temperature, then a seeded draw; greedy (argmax) at temperature <= 0.
 * One sampler per sequence: it owns its RNG and penalty history, and allocates
 * only at creation (nothing per token).
 */
#ifndef CERA_SAMPLE_SAMPLER_H
#define CERA_SAMPLE_SAMPLER_H

#include <stdint.h>

#include "cera.h"

typedef struct cera_sampler cera_sampler;

/* params->logit_bias is copied. */
cera_status cera_sampler_new(const cera_sampler_params *params, int n_vocab, cera_sampler **out,
                             cera_error *err);
void cera_sampler_free(cera_sampler *s);

/* Picks a token from n_vocab logits (not modified). */
cera_token cera_sampler_sample(cera_sampler *s, const float *logits);

/* Records a token that entered the sequence (prompt or generated) for the penalties. */
void cera_sampler_accept(cera_sampler *s, cera_token token);

/* Clears the penalty history and reseeds the RNG from the parameters. */
void cera_sampler_reset(cera_sampler *s);

#endif
