/*
 * serve_cache.h — the prefix cache of `cera serve` (serve_cache.c): finished sessions kept
 * by their timeline's tokens and adapter set, so that a new request adopts the KV of the
 * longest cached prefix of its prompt.
 */
#ifndef CERA_CLI_SERVE_CACHE_H
#define CERA_CLI_SERVE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"
#include "serve_api.h"

/* The adapters of a sequence, in the order they were attached, with their scales. */
typedef struct serve_adapter_set {
    cera_adapter *adapter[SERVE_LORA_MAX];
    float scale[SERVE_LORA_MAX];
    int n;
} serve_adapter_set;

/* How the CPU backend's attention rounds a sequence's run of tokens in one forward call:
 * runs of at least SERVE_ATTN_WIDE_MIN tokens one way (llama.cpp's batched path), shorter
 * ones another (backend/cpu/attention.h, CERA_ATTN_F32_MIN_TOKENS). A token's KV depends on
 * which: a cached prefix gives exactly the tokens of a fresh evaluation only when every
 * position is rounded the same way in both. */
#define SERVE_ATTN_WIDE_MIN 64

enum { SERVE_MODE_MIXED = -1, SERVE_MODE_NARROW = 0, SERVE_MODE_WIDE = 1 };

/* The rounding of every chunk of an n-token prompt cut into equal chunks of at most chunk_max
 * (the scheduler's cut): SERVE_MODE_NARROW or _WIDE when all chunks agree, else _MIXED; and
 * the chunk size. */
int serve_plan_mode(size_t n, size_t chunk_max);
size_t serve_plan_chunk(size_t n, size_t chunk_max);

/* How far a timeline of n positions (the first n_prompt its prompt's) is rounded as its prompt's
 * mode says: all of it for a narrow prompt (its generated tokens came one at a time, narrow
 * too), the prompt for a wide one, nothing for a mixed one. */
size_t serve_mode_extent(int mode, size_t n, size_t n_prompt);

typedef struct serve_cache_entry {
    cera_session *s;
    cera_token *tokens; /* the session's evaluated tokens */
    size_t n;
    serve_adapter_set set;
    int mode;      /* how its first n_mode positions were rounded */
    size_t n_mode; /* (a wide prompt's generated tokens came one at a time: narrow) */
    uint64_t last_use;
} serve_cache_entry;

typedef struct serve_cache {
    serve_cache_entry *e;
    int n, cap;
    bool any;        /* reuse the longest prefix even where its rounding differs (--cache-any) */
    bool whole_only; /* sessions cannot be cut back (a recurrent state): only whole entries are
                        reused */
    bool snapshots;  /* prompts leave snapshots, and whole entries are reused as forks (they stay):
                        set with whole_only, or once a cut back fails (a sliding window) */
    size_t chunk_max;
    uint64_t clock;
    uint64_t hits;
} serve_cache;

void serve_cache_init(serve_cache *c, int cap, size_t chunk_max, bool any);
void serve_cache_free(serve_cache *c);
/* Frees every entry's session (their KV blocks go back to the pool). */
void serve_cache_clear(serve_cache *c);
/* Keeps a finished session (the cache owns it from now on, and frees it when it cannot keep
 * it); timeline holds at least its n_past tokens. */
void serve_cache_put(serve_cache *c, cera_session *s, const cera_token *timeline, size_t n_timeline,
                     const serve_adapter_set *set, int mode, size_t n_prompt);
/* A snapshot of a sequence part-way through its prompt (the first n tokens of timeline
 * evaluated): a fork of s kept as an entry, so that later prompts sharing those n tokens
 * start from there where sessions cannot be cut back (snapshots). Nothing when one with the
 * same tokens and adapters is there already (it is then the most recently used). */
void serve_cache_snapshot(serve_cache *c, cera_session *s, const cera_token *timeline, size_t n,
                          const serve_adapter_set *set, int mode);
/* A session holding the longest cached prefix of prompt (at most n_prompt - 1 tokens) for the
 * adapter set, with the sampler sp: its length, with *out the session; 0 (and *out NULL)
 * when nothing fits. Unless the cache reuses any prefix, the prefix and the rest of the
 * prompt (cut by serve_plan_chunk) are rounded as a fresh evaluation would round them.
 * *mode receives the rounding of the prompt's positions as evaluated. */
size_t serve_cache_get(serve_cache *c, const cera_token *prompt, size_t n_prompt,
                       const serve_adapter_set *set, const cera_sampler_params *sp, cera_session **out,
                       int *mode);

/* The length serve_cache_get would give for prompt (the rounding rules and whole entries
 * alike), without taking anything. */
size_t serve_cache_peek(const serve_cache *c, const cera_token *prompt, size_t n_prompt,
                        const serve_adapter_set *set);

#endif
