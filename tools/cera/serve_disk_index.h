/*
 * serve_disk_index.h — what the disk tier (serve_disk.c) knows of its folder, in memory: the
 * prefix files by name, and every block-boundary prefix each one holds, so that a prompt finds
 * the file that shares the longest beginning with it even where the file goes on past where
 * the prompt departs from it. Keys and tables only: no I/O and no locking (the caller's).
 *
 * A file is named by two hashes: its context (the engine's fingerprint, the adapters with their
 * scales, the rounding mode) and its tokens. A prefix of l tokens in a context has the key
 * sdx_pkey(ctx, sdx_tok_key of its first l tokens), and a file of n positions is registered
 * under the key of each of its prefixes at a multiple of SDX_BLOCK (its own id the last).
 */
#ifndef CERA_CLI_SERVE_DISK_INDEX_H
#define CERA_CLI_SERVE_DISK_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cera.h"

/* positions per KV block (CERA_KV_BLOCK): files hold whole blocks */
#define SDX_BLOCK 32

/* ---- Keys ------------------------------------------------------------------------------ */

/* The context of a file: what it is tied to beyond its tokens. */
uint64_t sdx_ctx(uint64_t engine_fp, const uint64_t *adapter_fp, const float *scale, int n_adapters,
                 int mode);
/* A running hash of tokens: started, fed, and the key of the n tokens fed so far. */
uint64_t sdx_tok_start(void);
void sdx_tok_feed(uint64_t *h, const cera_token *t, size_t n);
uint64_t sdx_tok_key(uint64_t h, size_t n);
/* The key of a prefix in a context. */
uint64_t sdx_pkey(uint64_t ctx, uint64_t tok);

/* ---- The index ------------------------------------------------------------------------- */

typedef struct sdx_file {
    uint64_t id;     /* sdx_pkey(ctx, tok) */
    uint64_t ctx;    /* the name's two halves */
    uint64_t tok;    /* the key of all its tokens */
    uint64_t size;   /* bytes */
    int64_t used;    /* last use: ns since the epoch (the file's modification time) */
    int32_t n_pos;   /* positions (-1: unknown, a file this process cannot use) */
    int busy;        /* loads reading it */
    bool pending;    /* being written */
    uint64_t *pkeys; /* [n_pos / SDX_BLOCK]: the keys it is registered under */
    int n_pkeys;
} sdx_file;

typedef struct sdx_slot {
    uint64_t pkey, id;
} sdx_slot;

typedef struct sdx {
    sdx_file *f; /* sorted by id */
    size_t n, cap;
    sdx_slot *slot; /* open addressing: prefix key -> file id (several per key) */
    size_t n_slot, used_slot, dead_slot;
    uint64_t total; /* bytes of the files */
} sdx;

void sdx_free(sdx *x);
sdx_file *sdx_get(sdx *x, uint64_t id);
/* Adds a file (or replaces the one of its id), taking pkeys (malloc'ed, n_pkeys keys; NULL
 * with 0). NULL when out of memory (pkeys freed). */
sdx_file *sdx_add(sdx *x, const sdx_file *file, uint64_t *pkeys, int n_pkeys);
void sdx_remove(sdx *x, uint64_t id);
/* The file to load for the prefix pkey: the shortest of those holding it that are written (with
 * pending, also those being written), the most recently used of equals; NULL when none. */
sdx_file *sdx_holding(sdx *x, uint64_t pkey, bool pending);
/* The least recently used file that no load reads and none writes; NULL when none. */
sdx_file *sdx_lru(sdx *x);

#endif
