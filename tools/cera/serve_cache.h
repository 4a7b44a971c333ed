/*
 * serve_cache.h — the prefix cache of `cera serve` (serve_cache.c): finished sessions kept
 * by their timeline's tokens and adapter set, so that a new request adopts the KV of the
 * longest cached prefix of its prompt.
 */
#ifndef CERA_CLI_SERVE_CACHE_H
#define CERA_CLI_SERVE_CACHE_H

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

typedef struct serve_cache_entry {
    cera_session *s;
    cera_token *tokens; /* the session's evaluated tokens */
    size_t n;
    serve_adapter_set set;
    uint64_t last_use;
} serve_cache_entry;

typedef struct serve_cache {
    serve_cache_entry *e;
    int n, cap;
    uint64_t clock;
    uint64_t hits;
} serve_cache;

void serve_cache_init(serve_cache *c, int cap);
void serve_cache_free(serve_cache *c);
/* Frees every entry's session (their KV blocks go back to the pool). */
void serve_cache_clear(serve_cache *c);
/* Keeps a finished session (the cache owns it from now on, and frees it when it cannot keep
 * it); timeline holds at least its n_past tokens. */
void serve_cache_put(serve_cache *c, cera_session *s, const cera_token *timeline, size_t n_timeline,
                     const serve_adapter_set *set);
/* A session holding the longest cached prefix of prompt (at most n_prompt - 1 tokens) for the
 * adapter set, with the sampler sp: its length, with *out the session; 0 (and *out NULL)
 * when nothing fits. */
size_t serve_cache_get(serve_cache *c, const cera_token *prompt, size_t n_prompt,
                       const serve_adapter_set *set, const cera_sampler_params *sp, cera_session **out);

#endif
