/*
 * engine_util.h — helpers for tests that run whole models through the public API (the
 * golden, LoRA and CUDA engine tests): a session's logits for a token sequence with
 * adapters attached, and the files of one of llama.cpp's golden cases (../shared/golden,
 * README.md there).
 */
#ifndef CERA_TEST_ENGINE_UTIL_H
#define CERA_TEST_ENGINE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>
#include <string.h>

#include "cera.h"

/* An engine for a file under ../shared (2 threads, a context of 256), or NULL after a
 * failed CHECK. */
cera_engine *test_open_engine(const char *rel, cera_device device);
/* An adapter (GGUF file or PEFT folder under ../shared) for e, or NULL (a failed CHECK when e
 * is set). */
cera_adapter *test_load_adapter(cera_engine *e, const char *rel);

typedef struct test_attach {
    cera_adapter *a;
    float scale;
} test_attach;

/* The logits of every position of tokens[0..n) in a new session of e with the adapters
 * attached: the tokens as one batch, or one at a time (decode). malloc'ed [n, n_vocab], or
 * NULL after a failed CHECK. */
float *test_session_logits(cera_engine *e, const test_attach *at, int n_at, const int32_t *tokens, size_t n,
                           bool one_by_one);

/* The rows of several sequences interleaved into one batch, round robin, each sequence's
 * positions 0..len[i]-1 in order, every row wanting logits (mixed-batch tests). */
typedef struct test_mixed {
    int n;
    cera_token *tok;
    int32_t *pos, *seq;
    bool *want;
} test_mixed;
/* tok[i][0..len[i]) for sequences i < n_seq; false (a failed CHECK) when out of memory. */
bool test_mixed_make(int n_seq, const int32_t *const *tok, const int *len, test_mixed *m);
void test_mixed_free(test_mixed *m);

/* The index of the largest value (the lowest on ties). */
int test_argmax(const float *v, int n);
/* True when both are set and hold the same n floats bit for bit. */
bool test_same_bits(const float *a, const float *b, size_t n);

/* One golden case: its prompt tokens, llama.cpp's logits of every position and its greedy
 * continuation (NULL when the case has none). */
typedef struct test_golden {
    int32_t *tokens;
    size_t n_tokens;
    float *logits; /* [n_tokens, n_vocab] */
    int32_t *greedy;
    size_t n_greedy;
} test_golden;

/* Loads golden/<name>.{tokens,logits.f32,greedy} (testutil.h golden_path); CHECKs that they are there and of
 * the right size. */
bool test_golden_load(const char *name, int n_vocab, test_golden *g);
void test_golden_free(test_golden *g);

/* For tests built twice (tests/cuda adds the argument "cuda" and defines CERA_TEST_CUDA):
 * CERA_DEVICE_CUDA with that argument when a GPU is there, -1 (print "skipped", exit
 * TEST_SKIP_CODE) with it when none is, CERA_DEVICE_CPU without it. */
#ifdef CERA_TEST_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
static inline int test_device_arg(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "cuda") != 0) return CERA_DEVICE_CPU;
#ifdef CERA_TEST_CUDA
    if (cera_cuda_available()) return CERA_DEVICE_CUDA;
#endif
    printf("no CUDA device: skipped\n");
    return -1;
}

#endif
