/*
 * stages.h — the stages of the sampler chain, each a function over a candidate array.
 *
 * A candidate array starts as the whole vocabulary in id order (cand[i].id == i) and
 * each stage rewrites, filters or reorders it, as llama.cpp's samplers do with a
 * llama_token_data_array. The `sorted` flag says the array is in descending logit
 * order; stages keep llama.cpp's choices of when to sort and of the order they leave,
 * because the draw walks the array in that order (same order, same draw).
 *
 * Ties between equal logits are broken by the lower id, so every sort is a total
 * order and the result never depends on the sort algorithm. NaN logits sort last.
 *
 * Stages needing scratch space take a cera_sample_scratch sized once for n_vocab
 * candidates; nothing here allocates. sampler.c composes the stages into the chain;
 * the tests call them one by one on small hand-computed arrays.
 */
#ifndef CERA_SAMPLE_STAGES_H
#define CERA_SAMPLE_STAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"

typedef struct cera_candidate {
    cera_token id;
    float logit;
    float p; /* set by the stages that compute probabilities (softmax, top-p, typical, dist) */
} cera_candidate;

typedef struct cera_candidates {
    cera_candidate *data;
    size_t size;
    bool sorted; /* descending by logit (ties: lower id first) */
} cera_candidates;

/* Scratch for the sorting stages: two arrays with room for every candidate. */
typedef struct cera_sample_scratch {
    size_t cap;
    cera_candidate *cand;  /* [cap] */
    cera_candidate *cand2; /* [cap] */
} cera_sample_scratch;

/* Fills c with logits[0..n) in id order (not sorted). */
void cera_cands_from_logits(cera_candidates *c, const float *logits, size_t n);

/* Sorts data[0..n) into the total order (a radix sort: O(n), for whole
 * vocabularies; ws->cand2 is its buffer, so data must not be ws->cand2). */
void cera_cands_sort(cera_candidate *data, size_t n, cera_sample_scratch *ws);

/* Reorders c so that its first k entries are the k highest, sorted descending (a
 * selection, not a full sort, when k is small); the rest follow in any order. With k
 * == size, c is fully sorted and marked so. */
void cera_cands_partial_sort(cera_candidates *c, size_t k, cera_sample_scratch *ws);

/* Softmax of the logits into p, in array order (float exp, float sum, as llama.cpp).
 * With do_sort the array is sorted first. */
void cera_cands_softmax(cera_candidates *c, bool do_sort, cera_sample_scratch *ws);

/* Adds each bias to its token's logit (-INFINITY bans it). Needs id order. */
void cera_stage_logit_bias(cera_candidates *c, const cera_logit_bias *bias, int n_bias);

/* Repetition penalties on the `n` distinct tokens toks[] seen counts[] times in the
 * window: a positive logit is divided by `repeat`, a non-positive one multiplied;
 * then count * freq + present is subtracted. Needs id order. */
void cera_stage_penalties(cera_candidates *c, const int32_t *toks, const int32_t *counts, size_t n,
                          float repeat, float freq, float present);

/* Keeps the k highest logits, sorted. k <= 0 keeps everything. */
void cera_stage_top_k(cera_candidates *c, int k, cera_sample_scratch *ws);

/* Locally typical sampling (Meister et al.): keeps the tokens whose surprisal is
 * closest to the entropy until their mass exceeds p (at least min_keep). Leaves the
 * array unsorted, in closeness order. p >= 1 keeps everything. */
void cera_stage_typical(cera_candidates *c, float p, size_t min_keep, cera_sample_scratch *ws);

/* Nucleus: keeps the smallest sorted prefix whose mass reaches p (at least min_keep).
 * p >= 1 keeps everything. */
void cera_stage_top_p(cera_candidates *c, float p, size_t min_keep, cera_sample_scratch *ws);

/* Keeps the tokens whose probability is at least p times the highest one (at least
 * min_keep). Preserves the order of an unsorted array. p <= 0 keeps everything. */
void cera_stage_min_p(cera_candidates *c, float p, size_t min_keep, cera_sample_scratch *ws);

/* Divides the logits by temp; temp <= 0 leaves only the first highest logit finite. */
void cera_stage_temp(cera_candidates *c, float temp);

/* Unnormalized probabilities exp(logit - max) into p (float, as llama.cpp's dist);
 * returns their sum, accumulated in double. */
double cera_cands_exp(cera_candidates *c);

/* The draw: softmax in array order, then the first candidate where the running sum
 * reaches u * total (u uniform in [0, 1)). Sets p to the normalized probabilities and
 * returns the chosen index into c->data (-1 when c is empty). */
int cera_stage_dist(cera_candidates *c, double u);

#endif
