/*
 * attention.h — causal self-attention over the paged KV cache, flash-attention style:
 * each (token, head) row streams its sequence's K/V block by block with an online
 * softmax, so no n x n score matrix is ever formed.
 *
 * Two modes mirror the two paths of llama.cpp's CPU flash attention
 * (ggml_compute_forward_flash_attn_ext_f16), which made the goldens. llama.cpp picks one
 * by the number of queries in its batch; cera picks it per sequence, by that sequence's
 * number of tokens in the batch (its run), so that a sequence's rows never depend on the
 * other sequences of a batch (a sliding-window layer, window W, sees only keys
 * pos - W + 1 .. pos; masked keys are skipped as llama.cpp skips -inf mask entries, and
 * in the F32 mode tiles stay aligned to position 0, as llama.cpp's cache cells):
 *   - one token at a time (every decode step and runs under 64 tokens of an F16 cache, and
 *     every token of a cache that is not F16 or F32 throughout), one key at a time with an
 *     online softmax: Q is converted to K's dot type (F16, BF16, or Q8_0 for a Q8_0 or Q4_0
 *     K) and each score is that type's dot product (kernels.h); the V accumulator is F16,
 *     rounded after every update, for an F16 V, else F32 over V rows converted to float;
 *   - F32 (runs of 64 tokens or more with a head size that is a multiple of 16, or an
 *     F32 KV cache): Q, the scores and the accumulator in F32, keys taken in tiles of 64
 *     with one softmax rescale per tile, as llama.cpp's tiled path.
 * Within each mode the summation orders, fused multiply-adds and exp are llama.cpp's
 * (AVX-512 build), so on equal inputs the output is bit-identical, and greedy
 * continuations stay identical to llama.cpp's. A cache whose V is rotated (cera_kv_format)
 * has each output row turned back by the same transform (kv_rows.h).
 */
#ifndef CERA_BACKEND_CPU_ATTENTION_H
#define CERA_BACKEND_CPU_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_cache.h"

/* Runs of at least this many tokens take llama.cpp's tiled F32 path, when the head size
 * is a multiple of its float vector width (16 on the AVX-512 build of the goldens). */
#define CERA_ATTN_F32_MIN_TOKENS    64
#define CERA_ATTN_F32_HEAD_MULTIPLE 16

/* Consecutive tokens t0..t1-1 of one sequence in one mode: one token in the one-at-a-time
 * mode, up to 64 consecutive ones (sharing the keys they read) in the F32 mode. */
typedef struct cera_attn_span {
    int32_t t0, t1;
    bool one; /* one token at a time */
} cera_attn_span;

typedef struct cera_attn_args {
    const float *q; /* [n_tokens, n_head * head_dim], roped */
    float *out;     /* [n_tokens, n_head * head_dim] */
    int n_tokens, n_head, n_head_kv, head_dim;
    const int32_t *pos;          /* [n_tokens] */
    const int32_t *seq;          /* [n_tokens]: index into seqs */
    cera_kv_seq *const *seqs;    /* K/V of every position <= pos already written */
    int layer;                   /* the KV layer: its rows' width is pool->layers[layer].row */
    float scale;                 /* applied to K·Q before the softmax */
    int window;                  /* a sliding window (positions), 0: every earlier position */
    const cera_attn_span *spans; /* the batch's tokens, in order (cera_attention_spans) */
    int n_spans;
} cera_attn_args;

/* Cuts the batch into spans: each token's mode from its sequence's count in the batch
 * (seq_count[seq], counted by the caller), F32 runs of consecutive tokens of one
 * sequence cut at 64. spans has room for n_tokens; returns the count. */
int cera_attention_spans(const cera_attn_args *a, const int32_t *seq_count, cera_attn_span *spans);

/* Bytes of per-thread scratch cera_attention_chunk needs. */
size_t cera_attention_scratch_size(int head_dim);

/* The work is cut into chunks for the thread pool: one (span, head) each. All tokens' K
 * and V must be in the cache. */
int64_t cera_attention_n_chunks(const cera_attn_args *a);
void cera_attention_chunk(const cera_attn_args *a, int64_t chunk, void *scratch);

#endif
