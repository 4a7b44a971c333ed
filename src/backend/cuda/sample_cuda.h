/*
 * sample_cuda.h — the sampler chain on the GPU (sample.cu): the launch that turns one row
 * of logits kept on the device into a token, and the test hooks that check it against
 * the CPU sampler (src/sample).
 *
 * The chain is cera_sampler_sample's (sampler.c, stages.c) for the cases a single block
 * runs: logit bias (list order), penalties, then either the argmax (greedy) or top-k with
 * 1 <= k <= CERA_DEVICE_TOPK_MAX followed by top-p, min-p, temperature and the draw, with
 * the same float/double operations in the same order as stages.c's sorted paths, and
 * expf computed as glibc's (so the probabilities are the host's bit for bit). The draw u
 * comes from the host sampler's RNG, drawn once per token exactly when the CPU sampler
 * draws it, so both give the same tokens and stay in step.
 *
 * A grammar's token mask (cera_sampler_sample_masked) applies after the bias and the
 * penalties: a token whose bit is clear gets -inf, which the chain treats as the host
 * treats a candidate it removed (never the argmax, zero probability); when no token is
 * left above -inf the kernel answers -1.
 *
 * Device argument layout (one int32 array, uploaded once per sample from pinned staging):
 *   [n_bias] bias tokens | [n_bias] bias values (float bits) | [n_pen] penalty tokens |
 *   [n_pen] their counts (> 0) | [n_mask] mask words (bit t of word t / 32: token t allowed)
 */
#ifndef CERA_BACKEND_CUDA_SAMPLE_CUDA_H
#define CERA_BACKEND_CUDA_SAMPLE_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "cera.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CERA_DEVICE_TOPK_MAX 1024 /* the candidates one block sorts in shared memory */
#define CERA_DEVICE_BIAS_MAX 1024 /* logit biases the device chain takes */

typedef struct cu_sample_cfg {
    int greedy;      /* 1: the argmax after bias and penalties; the fields below unused */
    int top_k;       /* 1..CERA_DEVICE_TOPK_MAX */
    float top_p;     /* >= 1: off */
    float min_p;     /* <= 0: off */
    float log_min_p; /* logf(min_p) from the host's libm (min_p > 0) */
    float temp;      /* > 0 */
    float repeat, freq, present;
    int n_bias, n_pen;
    int n_mask; /* (n_vocab + 31) / 32 with a mask, else 0 */
    double u;   /* the draw, in [0, 1) */
} cu_sample_cfg;

/* scratch [n_vocab] = logits [n_vocab] (device), then the chain on scratch; the token goes
 * to out [1] (device). args: the layout above (device; NULL when n_bias + n_pen == 0).
 * Asynchronous on st. */
cudaError_t cu_sample_chain(cudaStream_t st, const float *logits, float *scratch, int n_vocab,
                            const int32_t *args, const cu_sample_cfg *cfg, int32_t *out);

/* out[0] (device) = how many of x[0..n) (device) are NaN or +Inf. */
cudaError_t cu_count_nonfinite(cudaStream_t st, const float *x, int n, int32_t *out);

/* y[i] = glibc's expf(x[i]) on the device, for i < n (device arrays; the test hook). */
cudaError_t cu_sample_expf(cudaStream_t st, const float *x, float *y, int n);

/* ---- Test hooks (backend.c; tests/cuda/test_cuda_sample.c) ---------------------------- */

typedef struct cera_sampler cera_sampler;

/* Runs smp's chain on the device over host logits [n_vocab] (smp's vocabulary) and
 * returns the token in *out, drawing from smp as cera_sampler_sample would (as
 * cera_sampler_sample_masked within mask when not NULL; -1: the mask leaves nothing; the
 * token is not accepted). CERA_ERR_UNSUPPORTED, with nothing drawn, for a chain the device
 * does not run. */
cera_status cera_cuda_test_sample(cera_sampler *smp, const float *logits, int n_vocab, const uint32_t *mask,
                                  cera_token *out, cera_error *err);

/* y[i] = the device's expf(x[i]) for n host values. */
cera_status cera_cuda_test_expf(const float *x, float *y, size_t n, cera_error *err);

#ifdef __cplusplus
}
#endif
#endif
