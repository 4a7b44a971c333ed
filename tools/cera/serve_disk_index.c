/*
 * serve_disk_index.c — the disk tier's index of its folder (serve_disk_index.h): the files in
 * an array sorted by id, and an open-addressing table from prefix keys to the files holding
 * them (linear probing; a removed entry leaves a mark until the table is rebuilt).
 */
#include <stdlib.h>
#include <string.h>

#include "serve_disk_index.h"

#define KEY_VERSION 1u
#define SLOT_EMPTY  0u
#define SLOT_DEAD   1u

/* ---- Keys ------------------------------------------------------------------------------ */

static void mix_word(uint64_t *h, uint32_t w) {
    *h = (*h ^ w) * 0x100000001b3ull;
    *h ^= *h >> 32;
}

static uint64_t finish(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t sdx_ctx(uint64_t engine_fp, const uint64_t *adapter_fp, const float *scale, int n_adapters,
                 int mode) {
    uint64_t h = 0xcbf29ce484222325ull;
    mix_word(&h, KEY_VERSION);
    mix_word(&h, (uint32_t)engine_fp);
    mix_word(&h, (uint32_t)(engine_fp >> 32));
    mix_word(&h, (uint32_t)n_adapters);
    for (int i = 0; i < n_adapters; i++) {
        uint32_t bits;
        memcpy(&bits, &scale[i], sizeof bits);
        mix_word(&h, (uint32_t)adapter_fp[i]);
        mix_word(&h, (uint32_t)(adapter_fp[i] >> 32));
        mix_word(&h, bits);
    }
    mix_word(&h, (uint32_t)(mode + 1));
    return finish(h);
}

uint64_t sdx_tok_start(void) { return 0x84222325cbf29ce4ull; }

void sdx_tok_feed(uint64_t *h, const cera_token *t, size_t n) {
    for (size_t i = 0; i < n; i++) mix_word(h, (uint32_t)t[i]);
}

uint64_t sdx_tok_key(uint64_t h, size_t n) { return finish(h ^ (uint64_t)n * 0x9e3779b97f4a7c15ull); }

uint64_t sdx_pkey(uint64_t ctx, uint64_t tok) {
    const uint64_t k = finish(ctx * 0x9e3779b97f4a7c15ull ^ tok);
    return k > SLOT_DEAD ? k : k + 2; /* the table's marks are never keys */
}

/* ---- The table of prefix keys ---------------------------------------------------------- */

static bool table_grow(sdx *x) {
    size_t n = 64;
    while (n < 2 * (x->used_slot + 1)) n *= 2;
    sdx_slot *s = calloc(n, sizeof *s);
    if (!s) return false;
    for (size_t i = 0; i < x->n_slot; i++) {
        if (x->slot[i].pkey <= SLOT_DEAD) continue;
        size_t j = x->slot[i].pkey & (n - 1);
        while (s[j].pkey != SLOT_EMPTY) j = (j + 1) & (n - 1);
        s[j] = x->slot[i];
    }
    free(x->slot);
    x->slot = s;
    x->n_slot = n;
    x->dead_slot = 0;
    return true;
}

static bool table_put(sdx *x, uint64_t pkey, uint64_t id) {
    if ((x->used_slot + x->dead_slot + 1) * 4 > x->n_slot * 3 && !table_grow(x)) return false;
    size_t j = pkey & (x->n_slot - 1);
    while (x->slot[j].pkey > SLOT_DEAD) j = (j + 1) & (x->n_slot - 1);
    if (x->slot[j].pkey == SLOT_DEAD) x->dead_slot--;
    x->slot[j] = (sdx_slot){pkey, id};
    x->used_slot++;
    return true;
}

static void table_del(sdx *x, uint64_t pkey, uint64_t id) {
    if (!x->n_slot) return;
    for (size_t j = pkey & (x->n_slot - 1); x->slot[j].pkey != SLOT_EMPTY; j = (j + 1) & (x->n_slot - 1))
        if (x->slot[j].pkey == pkey && x->slot[j].id == id) {
            x->slot[j].pkey = SLOT_DEAD;
            x->used_slot--;
            x->dead_slot++;
            return;
        }
}

/* ---- The files ------------------------------------------------------------------------- */

static size_t find(const sdx *x, uint64_t id, bool *found) {
    size_t lo = 0, hi = x->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (x->f[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < x->n && x->f[lo].id == id;
    return lo;
}

sdx_file *sdx_get(sdx *x, uint64_t id) {
    bool found;
    const size_t i = find(x, id, &found);
    return found ? &x->f[i] : NULL;
}

void sdx_remove(sdx *x, uint64_t id) {
    bool found;
    const size_t i = find(x, id, &found);
    if (!found) return;
    sdx_file *f = &x->f[i];
    for (int k = 0; k < f->n_pkeys; k++) table_del(x, f->pkeys[k], id);
    free(f->pkeys);
    x->total -= f->size;
    memmove(x->f + i, x->f + i + 1, (x->n - i - 1) * sizeof *x->f);
    x->n--;
}

sdx_file *sdx_add(sdx *x, const sdx_file *file, uint64_t *pkeys, int n_pkeys) {
    sdx_remove(x, file->id);
    if (x->n == x->cap) {
        const size_t cap = x->cap ? 2 * x->cap : 64;
        sdx_file *nf = realloc(x->f, cap * sizeof *nf);
        if (!nf) {
            free(pkeys);
            return NULL;
        }
        x->f = nf;
        x->cap = cap;
    }
    for (int k = 0; k < n_pkeys; k++)
        if (!table_put(x, pkeys[k], file->id)) {
            while (k-- > 0) table_del(x, pkeys[k], file->id);
            free(pkeys);
            return NULL;
        }
    bool found;
    const size_t i = find(x, file->id, &found);
    memmove(x->f + i + 1, x->f + i, (x->n - i) * sizeof *x->f);
    x->f[i] = *file;
    x->f[i].pkeys = pkeys;
    x->f[i].n_pkeys = n_pkeys;
    x->n++;
    x->total += file->size;
    return &x->f[i];
}

sdx_file *sdx_holding(sdx *x, uint64_t pkey, bool pending) {
    sdx_file *best = NULL;
    if (!x->n_slot) return NULL;
    for (size_t j = pkey & (x->n_slot - 1); x->slot[j].pkey != SLOT_EMPTY; j = (j + 1) & (x->n_slot - 1)) {
        if (x->slot[j].pkey != pkey) continue;
        sdx_file *f = sdx_get(x, x->slot[j].id);
        if (!f || (f->pending && !pending)) continue;
        if (!best || f->n_pos < best->n_pos || (f->n_pos == best->n_pos && f->used > best->used)) best = f;
    }
    return best;
}

sdx_file *sdx_lru(sdx *x) {
    sdx_file *old = NULL;
    for (size_t i = 0; i < x->n; i++)
        if (!x->f[i].busy && !x->f[i].pending && (!old || x->f[i].used < old->used)) old = &x->f[i];
    return old;
}

void sdx_free(sdx *x) {
    for (size_t i = 0; i < x->n; i++) free(x->f[i].pkeys);
    free(x->f);
    free(x->slot);
    memset(x, 0, sizeof *x);
}
