/*
 * serve_cache.c — automatic prefix reuse across the requests of `cera serve`.
 *
 * A finished sequence's session is not freed at once: it stays in a small LRU cache
 * (--cache-slots sessions, beside the --parallel running ones) with its timeline's tokens and
 * its adapter set. A new sequence with the same adapter set starts from the entry sharing the
 * longest token prefix with its prompt: the entry itself when the whole entry is a prefix of
 * the prompt, otherwise a cera_session_fork of it (KV blocks shared, not copied) cut back with
 * cera_session_truncate. At least the prompt's last token is always evaluated again, for its
 * logits. A prefix is reused only as far as it gives exactly the tokens a fresh evaluation
 * gives (the attention's rounding depends on how many tokens of a sequence one forward call
 * holds: see SERVE_ATTN_WIDE_MIN), unless --cache-any asks for the longest prefix whatever.
 * A model whose sessions cannot be cut in the middle (LFM2's recurrent state: only to
 * 0 or the end) reuses only whole entries, as forks that leave the entry in place; there the
 * scheduler also keeps snapshots of prompts at their chunk boundaries (forks: the KV blocks
 * shared, the recurrent state copied), so that a shared beginning (a system prompt) is reused
 * where truncation cannot give it. A model with sliding-window layers can be cut back only
 * to where its window is still held: the first cut that fails turns the snapshots on, and
 * the request takes a whole entry instead. Entries go oldest first when the cache is full, and
 * all at once when the KV pool runs out of blocks. With --cache-dir a disk tier sits under this
 * cache (serve_disk.c): the scheduler asks it for a prefix when it gives clearly more than
 * serve_cache_peek says this cache would.
 *
 * Only the scheduler thread calls these functions.
 */
#include <stdlib.h>
#include <string.h>

#include "serve_cache.h"

size_t serve_plan_chunk(size_t n, size_t chunk_max) {
    if (n == 0) return 0;
    const size_t k = (n + chunk_max - 1) / chunk_max;
    return (n + k - 1) / k;
}

int serve_plan_mode(size_t n, size_t chunk_max) {
    const size_t c = serve_plan_chunk(n, chunk_max);
    if (c == 0) return SERVE_MODE_NARROW;
    const size_t last = n - (n - 1) / c * c; /* the last chunk's length */
    const int m0 = c >= SERVE_ATTN_WIDE_MIN, m1 = last >= SERVE_ATTN_WIDE_MIN;
    return m0 == m1 ? m0 : SERVE_MODE_MIXED;
}

size_t serve_mode_extent(int mode, size_t n, size_t n_prompt) {
    /* generated tokens come one at a time (narrow): a narrow prompt's timeline is narrow
     * throughout, a wide one's only up to its end */
    return mode == SERVE_MODE_NARROW ? n : mode == SERVE_MODE_WIDE ? (n_prompt < n ? n_prompt : n) : 0;
}

void serve_cache_init(serve_cache *c, int cap, size_t chunk_max, bool any) {
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->any = any;
    c->chunk_max = chunk_max;
    c->e = cap > 0 ? calloc((size_t)cap, sizeof *c->e) : NULL;
    if (!c->e) c->cap = 0;
}

static void entry_drop(serve_cache *c, int i) {
    cera_session_free(c->e[i].s);
    free(c->e[i].tokens);
    c->e[i] = c->e[--c->n];
}

void serve_cache_clear(serve_cache *c) {
    while (c->n) entry_drop(c, c->n - 1);
}

void serve_cache_free(serve_cache *c) {
    serve_cache_clear(c);
    free(c->e);
    memset(c, 0, sizeof *c);
}

static bool same_set(const serve_adapter_set *a, const serve_adapter_set *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (a->adapter[i] != b->adapter[i] || a->scale[i] != b->scale[i]) return false;
    return true;
}

void serve_cache_put(serve_cache *c, cera_session *s, const cera_token *timeline, size_t n_timeline,
                     const serve_adapter_set *set, int mode, size_t n_prompt) {
    const size_t n = (size_t)cera_session_n_past(s);
    if (c->cap == 0 || n == 0 || n > n_timeline) {
        cera_session_free(s);
        return;
    }
    cera_token *t = malloc(n * sizeof *t);
    if (!t) {
        cera_session_free(s);
        return;
    }
    memcpy(t, timeline, n * sizeof *t);
    if (c->n == c->cap) { /* the least recently used goes */
        int old = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].last_use < c->e[old].last_use) old = i;
        entry_drop(c, old);
    }
    const size_t n_mode = serve_mode_extent(mode, n, n_prompt);
    c->e[c->n++] = (serve_cache_entry){
        .s = s, .tokens = t, .n = n, .set = *set, .mode = mode, .n_mode = n_mode, .last_use = ++c->clock};
}

/* The longest usable part of a common prefix of length l with entry e: rounded as a fresh
 * evaluation of the prompt would be, and leaving a rest that is cut the same way. */
static size_t usable(const serve_cache *c, const serve_cache_entry *e, size_t l, size_t n_prompt, int fresh) {
    size_t use = l < n_prompt ? l : n_prompt - 1; /* the last prompt token gives the logits */
    if (c->any) return use;
    if (fresh == SERVE_MODE_MIXED || e->mode != fresh) return 0;
    if (use > e->n_mode) use = e->n_mode;
    while (use > 0 && serve_plan_mode(n_prompt - use, c->chunk_max) != fresh) use--;
    return use;
}

void serve_cache_snapshot(serve_cache *c, cera_session *s, const cera_token *timeline, size_t n,
                          const serve_adapter_set *set, int mode) {
    if (c->cap == 0 || n == 0) return;
    for (int i = 0; i < c->n; i++) {
        serve_cache_entry *e = &c->e[i];
        if (e->n == n && same_set(&e->set, set) && !memcmp(e->tokens, timeline, n * sizeof *timeline)) {
            e->last_use = ++c->clock;
            return;
        }
    }
    cera_session *f = NULL;
    if (cera_session_fork(s, &f, NULL) != CERA_OK) return;
    serve_cache_put(c, f, timeline, n, set, mode, n);
}

/* The entry giving the longest usable prefix of prompt (only whole entries when whole), the
 * most recently used of equals: its index and *use, or -1. */
static int pick(const serve_cache *c, const cera_token *prompt, size_t n_prompt, const serve_adapter_set *set,
                int fresh, bool whole, size_t *use_out) {
    int best = -1;
    size_t best_use = 0;
    for (int i = 0; i < c->n; i++) {
        const serve_cache_entry *e = &c->e[i];
        if (!same_set(&e->set, set)) continue;
        size_t l = 0;
        while (l < e->n && l < n_prompt && e->tokens[l] == prompt[l]) l++;
        const size_t use = usable(c, e, l, n_prompt, fresh);
        if (whole && use != e->n) continue;
        if (use > best_use ||
            (use == best_use && best >= 0 && use > 0 && e->last_use > c->e[best].last_use)) {
            best = i;
            best_use = use;
        }
    }
    *use_out = best_use;
    return best_use > 0 ? best : -1;
}

size_t serve_cache_peek(const serve_cache *c, const cera_token *prompt, size_t n_prompt,
                        const serve_adapter_set *set) {
    size_t use = 0;
    pick(c, prompt, n_prompt, set, serve_plan_mode(n_prompt, c->chunk_max), c->whole_only, &use);
    return use;
}

size_t serve_cache_get(serve_cache *c, const cera_token *prompt, size_t n_prompt,
                       const serve_adapter_set *set, const cera_sampler_params *sp, cera_session **out,
                       int *mode) {
    *out = NULL;
    const int fresh = serve_plan_mode(n_prompt, c->chunk_max);
    *mode = fresh;
    size_t use = 0;
    int best = pick(c, prompt, n_prompt, set, fresh, c->whole_only, &use);
    if (best < 0) return 0;
    serve_cache_entry *e = &c->e[best];
    cera_session *s = NULL;
    if (use == e->n && !c->snapshots) { /* the whole entry: taken out of the cache */
        s = e->s;
        e->s = NULL;
        free(e->tokens);
        c->e[best] = c->e[--c->n];
    } else {
        e->last_use = ++c->clock;
        if (cera_session_fork(e->s, &s, NULL) != CERA_OK) return 0;
        if (use < e->n && cera_session_truncate(s, (int)use, NULL) != CERA_OK) {
            /* cut back past what a sliding window still holds: from now on prompts leave
             * snapshots, and here a whole entry is the way */
            cera_session_free(s);
            s = NULL;
            c->snapshots = true;
            if ((best = pick(c, prompt, n_prompt, set, fresh, true, &use)) < 0) return 0;
            e = &c->e[best];
            e->last_use = ++c->clock;
            if (cera_session_fork(e->s, &s, NULL) != CERA_OK) return 0;
        }
    }
    if (cera_session_set_sampler(s, sp, NULL) != CERA_OK) {
        cera_session_free(s);
        return 0;
    }
    c->hits++;
    *out = s;
    if (c->any) *mode = SERVE_MODE_MIXED; /* its rounding is no longer known */
    return use;
}
