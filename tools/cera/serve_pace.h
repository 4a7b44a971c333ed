/*
 * serve_pace.h — the step-time model behind `cera serve --itl-target`: how long a scheduler
 * step of n tokens takes on this machine, learned from the steps run so far.
 *
 * A decode step's duration is every running stream's inter-token gap, so keeping a step
 * under a target keeps the streams' latency under it. The model keeps one running average
 * per step size (the tokens of all sequences in the step); a size not seen yet is
 * interpolated between the sizes around it, or extrapolated past the largest one below it
 * with the slope of the sizes seen just under that (never flatter than a quarter of their
 * mean cost per token, so that noise cannot make more work look free). Nothing is known
 * before the first step: the scheduler then takes one sequence at a time and learns.
 *
 * The scheduler keeps two models: steps of decode tokens alone and steps with prompt chunks,
 * which on a GPU cost more than their size says (a decode step is one CUDA graph of one-token
 * rows; a chunk takes the prefill path), so that each kind's cost is learned apart.
 *
 * Only the scheduler thread uses a model.
 */
#ifndef CERA_CLI_SERVE_PACE_H
#define CERA_CLI_SERVE_PACE_H

#include <stdbool.h>

typedef struct serve_pace {
    int cap;    /* the largest step size kept (the step's token budget) */
    double *ms; /* [cap + 1]: the average duration of a step of n tokens, in ms */
    int *count; /* [cap + 1]: steps of n tokens seen (0: not seen) */
    int seen;   /* step sizes seen */
} serve_pace;

/* false when out of memory */
bool serve_pace_init(serve_pace *p, int cap);
void serve_pace_free(serve_pace *p);
/* A step of n tokens took ms milliseconds. */
void serve_pace_observe(serve_pace *p, int n, double ms);
/* The predicted duration of a step of n tokens (0 when nothing has been seen yet). */
double serve_pace_predict(const serve_pace *p, int n);
/* Whether no step has been seen yet. */
bool serve_pace_empty(const serve_pace *p);
/* The most tokens (0 to max_more) that a step of base tokens can take on and still be
 * predicted within target_ms. */
int serve_pace_room(const serve_pace *p, int base, int max_more, double target_ms);

#endif
