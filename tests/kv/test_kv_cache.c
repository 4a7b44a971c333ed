/*
 * test_kv_cache.c — the KV pool (kv/kv_cache.h) on its own: per-layer row widths and their
 * offsets, the sliding-window group (blocks returned as the window moves, memory bounded by
 * the window), fork with copy on write in both groups, truncations refused and allowed,
 * exhaustion as a status with nothing changed, and every block back in the pool at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cache.h"
#include "testutil.h"

#define WINDOW 40

/* Three KV layers: a full one of 128, a sliding one of 64, a full one of 256 elements per row. */
static const int rows[3] = {128, 64, 256};
static const bool swa[3] = {false, true, false};

static cera_kv_pool *new_pool(int n_full, int n_swa, int n_seq, int max_pos) {
    cera_kv_layout lay = {3, rows, swa, WINDOW, {n_full, n_swa}};
    cera_kv_pool *p = NULL;
    cera_error err = {0};
    CHECK(cera_kv_pool_new(&(cera_kv_format){CERA_KV_F32, CERA_KV_F32, 0, 0}, &lay, n_seq, max_pos, 0, true,
                           &p, &err) == CERA_OK,
          "pool: %s", err.message);
    return p;
}

static bool pool_idle(const cera_kv_pool *p) {
    return p->group[CERA_KV_FULL].n_free == p->group[CERA_KV_FULL].n_blocks &&
           p->group[CERA_KV_SWA].n_free == p->group[CERA_KV_SWA].n_blocks && p->n_free_seq == p->n_seq_max;
}

/* Stamps row pos of every layer with values that say which (layer, kv, pos) they are. */
static void write_rows(cera_kv_seq *s, int from, int to, float tag) {
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < 3; l++)
            for (int kv = 0; kv < 2; kv++) {
                float *r = cera_kv_row(s, l, kv, pos);
                for (int i = 0; i < rows[l]; i++)
                    r[i] = tag + (float)(l * 100000 + kv * 50000 + pos) + i * 1e-3f;
            }
}

static bool rows_ok(const cera_kv_seq *s, int from, int to, float tag) {
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < 3; l++)
            for (int kv = 0; kv < 2; kv++) {
                const float *r = cera_kv_row(s, l, kv, pos);
                for (int i = 0; i < rows[l]; i++)
                    if (r[i] != tag + (float)(l * 100000 + kv * 50000 + pos) + i * 1e-3f) return false;
            }
    return true;
}

static bool advance(cera_kv_seq *s, int n, float tag) {
    cera_kv_copy c;
    int nc;
    cera_error err = {0};
    if (cera_kv_seq_reserve(s, s->n_pos + n, &c, &nc, &err) != CERA_OK) return false;
    write_rows(s, s->n_pos, s->n_pos + n, tag);
    s->n_pos += n;
    return true;
}

static void test_layout(void) {
    cera_kv_pool *p = new_pool(8, 8, 1, 256);
    if (!p) return;
    const size_t full = 2 * CERA_KV_BLOCK * (128 + 256) * 4, sw = 2 * CERA_KV_BLOCK * 64 * 4;
    CHECK(p->group[CERA_KV_FULL].block_bytes == full && p->group[CERA_KV_SWA].block_bytes == sw,
          "block bytes %zu / %zu, expected %zu / %zu", p->group[CERA_KV_FULL].block_bytes,
          p->group[CERA_KV_SWA].block_bytes, full, sw);
    CHECK(p->kv_dim == 0, "a non-uniform pool has no single kv_dim");
    CHECK(p->layers[2].offset == 2 * CERA_KV_BLOCK * 128 * 4 && p->layers[1].offset == 0, "offsets");
    cera_kv_seq s;
    cera_error err = {0};
    CHECK(cera_kv_seq_open(p, &s, &err) == CERA_OK, "open: %s", err.message);
    CHECK(advance(&s, 70, 0.0f), "reserve 70");
    CHECK(rows_ok(&s, 0, 70, 0.0f), "rows of distinct layers overlap");
    cera_kv_seq_close(&s);
    CHECK(pool_idle(p), "the pool is not empty after close");
    cera_kv_pool_free(p);

    /* a uniform pool keeps today's layout: [n_layer][K|V][CERA_KV_BLOCK][kv_dim] */
    const int urow[2] = {96, 96};
    cera_kv_layout lay = {2, urow, NULL, 0, {4, 0}};
    CHECK(cera_kv_pool_new(&(cera_kv_format){CERA_KV_F16, CERA_KV_F16, 0, 0}, &lay, 1, 128, 0, true, &p,
                           &err) == CERA_OK,
          "uniform pool: %s", err.message);
    if (!p) return;
    CHECK(p->kv_dim == 96 && p->n_blocks == 4 && p->group[CERA_KV_SWA].n_layer == 0, "uniform pool fields");
    CHECK(cera_kv_seq_open(p, &s, &err) == CERA_OK, "open: %s", err.message);
    cera_kv_copy c;
    int nc;
    CHECK(cera_kv_seq_reserve(&s, 40, &c, &nc, &err) == CERA_OK, "reserve: %s", err.message);
    const uint8_t *base = p->group[0].data + (size_t)s.blocks[1] * p->group[0].block_bytes;
    CHECK((const uint8_t *)cera_kv_row(&s, 1, 1, 37) ==
              base + ((size_t)(1 * 2 + 1) * CERA_KV_BLOCK + 5) * 96 * 2,
          "uniform row address");
    cera_kv_seq_close(&s);
    cera_kv_pool_free(p);
}

static void test_window(void) {
    cera_kv_pool *p = new_pool(64, 16, 2, 2048);
    if (!p) return;
    const cera_kv_group *G = &p->group[CERA_KV_SWA];
    cera_kv_seq s;
    cera_error err = {0};
    CHECK(cera_kv_seq_open(p, &s, &err) == CERA_OK, "open: %s", err.message);
    /* one token at a time to 1000 positions: the sliding group never holds more than its window */
    int most = 0;
    bool ok = true;
    for (int i = 0; i < 1000 && ok; i++) {
        ok = advance(&s, 1, 0.0f);
        const int held = G->n_blocks - G->n_free;
        if (held > most) most = held;
    }
    CHECK(ok, "decode to 1000 positions");
    const int bound = (WINDOW - 1 + 1 + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK + 1;
    CHECK(most <= bound, "the sliding group held %d blocks (bound %d)", most, bound);
    CHECK(s.first[CERA_KV_SWA] > 0 && s.blocks[s.max_blocks] == -1,
          "blocks before the window were not dropped");
    CHECK(p->group[CERA_KV_FULL].n_blocks - p->group[CERA_KV_FULL].n_free == (1000 + 31) / 32,
          "the full group holds every position");
    /* what the window still holds reads back; truncation inside it works, before it is refused */
    const int lo = 1000 - WINDOW + 1;
    CHECK(rows_ok(&s, lo, 1000, 0.0f), "the window's rows");
    CHECK(!cera_kv_seq_can_truncate(&s, 900), "truncate to 900 allowed though its window is gone");
    CHECK(cera_kv_seq_can_truncate(&s, 0), "truncate to 0 refused");
    /* the last reserve (for position 999) kept the blocks from 960 on: a cut to 999 keeps
     * its window (960..998), one to 998 would need 959 */
    CHECK(!cera_kv_seq_can_truncate(&s, 998), "truncate to 998 allowed though position 959 is gone");
    CHECK(cera_kv_seq_can_truncate(&s, 999), "truncate to 999 refused");
    cera_kv_seq_truncate(&s, 999);
    CHECK(s.n_pos == 999 && advance(&s, 1, 7.0f), "advance after truncation");
    CHECK(rows_ok(&s, 999, 1000, 7.0f) && rows_ok(&s, 960, 999, 0.0f), "rows after truncation");
    cera_kv_seq_truncate(&s, 0);
    CHECK(G->n_free == G->n_blocks && s.first[CERA_KV_SWA] == 0, "truncate to 0 returns the sliding blocks");
    /* a prompt in one piece holds all of it until the next reserve moves the window */
    CHECK(advance(&s, 200, 0.0f), "a 200-position prompt");
    CHECK(G->n_blocks - G->n_free == 7, "a prompt of 200 takes 7 sliding blocks");
    CHECK(advance(&s, 1, 0.0f), "one more");
    CHECK(G->n_blocks - G->n_free == 2, "then the window (161..200) keeps %d blocks, expected 2",
          G->n_blocks - G->n_free);
    cera_kv_seq_close(&s);
    CHECK(pool_idle(p), "the pool is not empty at the end");
    cera_kv_pool_free(p);
}

static void test_fork(void) {
    cera_kv_pool *p = new_pool(64, 16, 3, 2048);
    if (!p) return;
    const cera_kv_group *F = &p->group[CERA_KV_FULL], *G = &p->group[CERA_KV_SWA];
    cera_kv_seq a, b;
    cera_error err = {0};
    CHECK(cera_kv_seq_open(p, &a, &err) == CERA_OK, "open: %s", err.message);
    for (int i = 0; i < 150; i++) advance(&a, 1, 0.0f);
    const int free_f = F->n_free, free_s = G->n_free;
    CHECK(cera_kv_seq_fork(&a, &b, &err) == CERA_OK, "fork: %s", err.message);
    CHECK(F->n_free == free_f && G->n_free == free_s, "a fork took blocks");
    CHECK(b.first[CERA_KV_SWA] == a.first[CERA_KV_SWA] && b.n_pos == 150, "the fork's tables");
    /* the fork writes its own tail (position 150 is in the shared, partly filled block 4):
     * copied in both groups, the source's rows unchanged */
    CHECK(advance(&b, 3, 5.0f), "fork advances");
    CHECK(rows_ok(&a, 111, 150, 0.0f), "the source changed under the fork's write");
    CHECK(rows_ok(&b, 111, 150, 0.0f) && rows_ok(&b, 150, 153, 5.0f), "the fork's rows");
    CHECK(a.blocks[4] != b.blocks[4] && a.blocks[a.max_blocks + 4] != b.blocks[b.max_blocks + 4],
          "the shared tail was not copied");
    CHECK(a.blocks[3] == b.blocks[3] && a.blocks[a.max_blocks + 3] == b.blocks[b.max_blocks + 3],
          "full blocks stay shared");
    /* the source goes on; its window drops blocks the fork still holds (refcounts) */
    for (int i = 0; i < 100; i++) advance(&a, 1, 0.0f);
    CHECK(rows_ok(&b, 114, 150, 0.0f), "the fork lost rows when the source moved on");
    cera_kv_seq_close(&a);
    CHECK(rows_ok(&b, 114, 150, 0.0f), "the fork lost rows when the source closed");
    cera_kv_seq_close(&b);
    CHECK(pool_idle(p), "the pool is not empty at the end");
    cera_kv_pool_free(p);
}

static void test_exhaustion(void) {
    /* 8 full blocks (256 positions), 3 sliding blocks: a prompt of 100 needs 4 of each */
    cera_kv_pool *p = new_pool(8, 3, 2, 1024);
    if (!p) return;
    cera_kv_seq s;
    cera_error err = {0};
    CHECK(cera_kv_seq_open(p, &s, &err) == CERA_OK, "open: %s", err.message);
    cera_kv_copy c;
    int nc;
    const cera_status st = cera_kv_seq_reserve(&s, 100, &c, &nc, &err);
    CHECK(st == CERA_ERR_CONTEXT_FULL && strstr(err.message, "sliding"), "a full sliding group: %d %s",
          (int)st, err.message);
    CHECK(s.n_blocks == 0 && pool_idle(p) == false && p->group[0].n_free == 8 && p->group[1].n_free == 3,
          "a refused reserve changed the pool");
    /* in steps the window keeps it within 3 sliding blocks, until the full group runs out */
    int n = 0;
    while (advance(&s, 1, 0.0f)) n++;
    CHECK(n == 256, "%d positions before the full group ran out (256 expected)", n);
    CHECK(cera_kv_seq_reserve(&s, 257, &c, &nc, &err) == CERA_ERR_CONTEXT_FULL, "exhaustion is a status");
    cera_kv_seq_close(&s);
    CHECK(pool_idle(p), "the pool is not empty at the end");
    cera_kv_pool_free(p);
    /* a device pool keeps both groups: a write into a block shared in each asks for one copy
     * per group */
    cera_kv_layout lay = {3, rows, swa, WINDOW, {4, 4}};
    CHECK(cera_kv_pool_new(&(cera_kv_format){CERA_KV_F16, CERA_KV_F16, 0, 0}, &lay, 2, 128, 0, false, &p,
                           &err) == CERA_OK,
          "device pool: %s", err.message);
    cera_kv_seq a, b;
    cera_kv_copy cp[CERA_KV_GROUPS];
    CHECK(cera_kv_seq_open(p, &a, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_kv_seq_reserve(&a, 40, cp, &nc, &err) == CERA_OK && nc == 0, "reserve");
    a.n_pos = 40;
    CHECK(cera_kv_seq_fork(&a, &b, &err) == CERA_OK, "fork: %s", err.message);
    CHECK(cera_kv_seq_reserve(&b, 41, cp, &nc, &err) == CERA_OK, "reserve: %s", err.message);
    CHECK(nc == 2 && cp[0].group != cp[1].group, "%d copies (one per group expected)", nc);
    cera_kv_seq_close(&b);
    cera_kv_seq_close(&a);
    CHECK(pool_idle(p), "the device pool is not empty at the end");
    cera_kv_pool_free(p);
}

/* Every layer sliding (no full group): only the sliding blocks are taken, and bounded. */
static void test_all_sliding(void) {
    const int r[2] = {64, 32};
    const bool all[2] = {true, true};
    cera_kv_layout lay = {2, r, all, 20, {0, 4}};
    cera_kv_pool *p = NULL;
    cera_error err = {0};
    CHECK(cera_kv_pool_new(&(cera_kv_format){CERA_KV_F16, CERA_KV_F16, 0, 0}, &lay, 1, 4096, 0, true, &p,
                           &err) == CERA_OK,
          "pool: %s", err.message);
    if (!p) return;
    CHECK(p->group[CERA_KV_FULL].n_layer == 0 && p->n_blocks == 4, "groups of an all-sliding pool");
    cera_kv_seq s;
    CHECK(cera_kv_seq_open(p, &s, &err) == CERA_OK, "open: %s", err.message);
    cera_kv_copy c;
    int nc, n = 0;
    while (n < 3000 && cera_kv_seq_reserve(&s, n + 1, &c, &nc, &err) == CERA_OK) s.n_pos = ++n;
    CHECK(n == 3000, "stopped at %d: %s", n, err.message);
    cera_kv_seq_close(&s);
    CHECK(p->group[CERA_KV_SWA].n_free == 4 && p->n_free_seq == 1, "the pool is not empty at the end");
    cera_kv_pool_free(p);
}

int main(void) {
    test_layout();
    test_window();
    test_fork();
    test_exhaustion();
    test_all_sliding();
    return test_finish();
}
