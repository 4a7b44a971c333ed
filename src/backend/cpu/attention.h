/*
 * attention.h — causal self-attention over the paged KV cache, flash-attention style:
 * each (token, head) row streams its sequence's K/V block by block with an online
 * softmax, so no n x n score matrix is ever formed.
 *
 * Two accumulation modes mirror the two paths of llama.cpp's CPU flash attention
 * (ggml_compute_forward_flash_attn_ext_f16), which made the goldens:
 *   - F16 (F16 KV cache; every decode step and batches under 64 tokens): Q is rounded
 *     to F16 before the K·Q dot products and the V accumulator is kept in F16, rounded
 *     after every update (one key at a time, online softmax);
 *   - F32 (batches of 64 tokens or more with a head size that is a multiple of 16, or an
 *     F32 KV cache): Q, the scores and the accumulator in F32, keys taken in tiles of 64
 *     with one softmax rescale per tile, as llama.cpp's tiled path.
 * Within each mode the summation orders, fused multiply-adds and exp are llama.cpp's
 * (AVX-512 build), so on equal inputs the output is bit-identical, and greedy
 * continuations stay identical to llama.cpp's.
 */
#ifndef CERA_BACKEND_CPU_ATTENTION_H
#define CERA_BACKEND_CPU_ATTENTION_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_cache.h"

/* Batches of at least this many tokens take llama.cpp's tiled F32 path, when the head
 * size is a multiple of its float vector width (16 on the AVX-512 build of the goldens). */
#define CERA_ATTN_F32_MIN_TOKENS    64
#define CERA_ATTN_F32_HEAD_MULTIPLE 16

typedef struct cera_attn_args {
    const float *q; /* [n_tokens, n_head * head_dim], roped */
    float *out;     /* [n_tokens, n_head * head_dim] */
    int n_tokens, n_head, n_head_kv, head_dim;
    const int32_t *pos;       /* [n_tokens] */
    const int32_t *seq;       /* [n_tokens]: index into seqs */
    cera_kv_seq *const *seqs; /* K/V of every position <= pos already written */
    int layer;
    float scale;    /* applied to K·Q before the softmax */
    bool f16_accum; /* the F16 mode above (requires an F16 pool) */
} cera_attn_args;

/* Bytes of per-thread scratch cera_attention_chunk needs. */
size_t cera_attention_scratch_size(int head_dim);

/* The work is cut into chunks for the thread pool: in the F16 mode one (token, head) row
 * each; in the F32 mode one head for up to 64 consecutive tokens, which share the keys
 * they read (converted once per tile). All tokens' K and V must be in the cache. */
int64_t cera_attention_n_chunks(const cera_attn_args *a);
void cera_attention_chunk(const cera_attn_args *a, int64_t chunk, void *scratch);

#endif
