/*
 * test_serve_disk_index.c — the disk tier's index (tools/cera/serve_disk_index.c): keys that
 * tell contexts, lengths and tokens apart; files found under every block-boundary prefix they
 * hold, the shortest first and written ones only unless asked; replacing and removing a file;
 * the least recently used among files no load or write holds; and the table against a plain
 * list of what it should hold after many random adds and removes (its rebuilds and marks).
 */
#include <stdlib.h>
#include <string.h>

#include "serve_disk_index.h"
#include "testutil.h"

/* The keys of the block-boundary prefixes of t[0..n) in ctx (malloc'ed), and the key of all n. */
static uint64_t keys_of(uint64_t ctx, const cera_token *t, int n, uint64_t **out) {
    uint64_t *k = malloc(sizeof *k * (size_t)(n / SDX_BLOCK + 1));
    uint64_t h = sdx_tok_start();
    for (int i = 0; i < n; i++) {
        sdx_tok_feed(&h, t + i, 1);
        if ((i + 1) % SDX_BLOCK == 0)
            k[(i + 1) / SDX_BLOCK - 1] = sdx_pkey(ctx, sdx_tok_key(h, (size_t)i + 1));
    }
    *out = k;
    return sdx_tok_key(h, (size_t)n);
}

static sdx_file *add(sdx *x, uint64_t ctx, const cera_token *t, int n, int64_t used, bool pending) {
    uint64_t *k;
    const uint64_t tok = keys_of(ctx, t, n, &k);
    const sdx_file f = {.id = sdx_pkey(ctx, tok),
                        .ctx = ctx,
                        .tok = tok,
                        .size = (uint64_t)n * 10,
                        .used = used,
                        .n_pos = n,
                        .pending = pending};
    return sdx_add(x, &f, k, n / SDX_BLOCK);
}

static uint64_t pkey_at(uint64_t ctx, const cera_token *t, int n) {
    uint64_t h = sdx_tok_start();
    sdx_tok_feed(&h, t, (size_t)n);
    return sdx_pkey(ctx, sdx_tok_key(h, (size_t)n));
}

static void test_keys(void) {
    const uint64_t fp[2] = {11, 12};
    const float sc[2] = {1.0f, 0.5f}, sc2[2] = {1.0f, 0.25f};
    const uint64_t c0 = sdx_ctx(7, NULL, NULL, 0, 0);
    CHECK(c0 == sdx_ctx(7, NULL, NULL, 0, 0), "a context is its inputs' alone");
    CHECK(c0 != sdx_ctx(8, NULL, NULL, 0, 0), "another engine");
    CHECK(c0 != sdx_ctx(7, NULL, NULL, 0, 1) && sdx_ctx(7, NULL, NULL, 0, -1) != sdx_ctx(7, NULL, NULL, 0, 1),
          "another rounding");
    CHECK(sdx_ctx(7, fp, sc, 1, 0) != c0 && sdx_ctx(7, fp, sc, 2, 0) != sdx_ctx(7, fp, sc, 1, 0), "adapters");
    CHECK(sdx_ctx(7, fp, sc, 2, 0) != sdx_ctx(7, fp, sc2, 2, 0), "a scale");
    const uint64_t fq[2] = {12, 11};
    const float sq[2] = {0.5f, 1.0f};
    CHECK(sdx_ctx(7, fp, sc, 2, 0) != sdx_ctx(7, fq, sq, 2, 0), "the adapters' order");
    cera_token a[64], b[64];
    for (int i = 0; i < 64; i++) a[i] = b[i] = i;
    b[63] = 1000;
    CHECK(pkey_at(c0, a, 64) != pkey_at(c0, b, 64) && pkey_at(c0, a, 63) == pkey_at(c0, b, 63), "tokens");
    CHECK(pkey_at(c0, a, 32) != pkey_at(c0, a, 64) && pkey_at(c0, a, 32) != pkey_at(c0 + 1, a, 32),
          "lengths and contexts");
    uint64_t h = sdx_tok_start(), g = sdx_tok_start();
    sdx_tok_feed(&h, a, 64);
    sdx_tok_feed(&g, a, 20);
    sdx_tok_feed(&g, a + 20, 44);
    CHECK(sdx_tok_key(h, 64) == sdx_tok_key(g, 64), "fed in parts or at once");
}

static void test_files(void) {
    sdx x = {0};
    cera_token t[256];
    for (int i = 0; i < 256; i++) t[i] = 3 + i % 97;
    cera_token u[256];
    memcpy(u, t, sizeof u);
    u[100] = 9999; /* u departs from t at 100 */
    const uint64_t ctx = 5;
    sdx_file *f = add(&x, ctx, t, 256, 10, false);
    CHECK(f && x.n == 1 && x.total == 2560, "a file");
    const uint64_t id_t = f->id;
    CHECK(sdx_holding(&x, pkey_at(ctx, t, 96), false) == sdx_get(&x, id_t), "found by a prefix inside");
    CHECK(sdx_holding(&x, pkey_at(ctx, u, 96), false) != NULL, "u shares 96 tokens with t");
    CHECK(!sdx_holding(&x, pkey_at(ctx, u, 128), false), "but not 128");
    CHECK(!sdx_holding(&x, pkey_at(ctx, t, 100), false), "only block boundaries");
    CHECK(!sdx_holding(&x, pkey_at(ctx + 1, t, 96), false), "another context");
    f = add(&x, ctx, t, 128, 5, false); /* a shorter file of the same beginning */
    const uint64_t id_short = f->id;
    CHECK(sdx_holding(&x, pkey_at(ctx, t, 96), false)->id == id_short, "the shortest file holding a prefix");
    CHECK(sdx_holding(&x, pkey_at(ctx, t, 160), false)->id == id_t, "the longer one past it");
    CHECK(sdx_holding(&x, pkey_at(ctx, t, 128), false)->id == id_short, "a file under its own id");
    add(&x, ctx, u, 224, 20, true); /* being written */
    CHECK(!sdx_holding(&x, pkey_at(ctx, u, 224), false) && sdx_holding(&x, pkey_at(ctx, u, 224), true),
          "a file being written counts only when asked");
    CHECK(sdx_lru(&x)->id == id_short, "the least recently used");
    sdx_get(&x, id_short)->busy = 1;
    CHECK(sdx_lru(&x)->id == id_t, "a file a load reads stays");
    sdx_remove(&x, id_short);
    CHECK(x.n == 2 && !sdx_get(&x, id_short) && sdx_holding(&x, pkey_at(ctx, t, 96), false)->id == id_t,
          "removed: its prefixes go to the others");
    f = add(&x, ctx, t, 256, 30, false); /* the same file again: replaced */
    CHECK(f && x.n == 2 && x.total == 2560 + 2240 && sdx_get(&x, id_t)->used == 30, "replaced, not added");
    sdx_remove(&x, id_t);
    sdx_remove(&x, id_t);
    CHECK(x.n == 1 && !sdx_holding(&x, pkey_at(ctx, t, 64), false) &&
              sdx_holding(&x, pkey_at(ctx, t, 64), true),
          "removed twice: once");
    sdx_free(&x);
}

/* Random adds and removes against a list of which files are in. */
static void test_churn(void) {
    enum { FILES = 300, ROUNDS = 4000 };
    static cera_token tok[FILES][96];
    static bool in[FILES];
    uint64_t ids[FILES];
    unsigned seed = 99;
    for (int i = 0; i < FILES; i++)
        for (int k = 0; k < 96; k++) tok[i][k] = (cera_token)((k < 32 ? i % 7 : i) * 131 + k);
    sdx x = {0};
    int bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        seed = seed * 1103515245u + 12345u;
        const int i = (int)((seed >> 8) % FILES);
        if (in[i]) {
            sdx_remove(&x, ids[i]);
            in[i] = false;
        } else {
            sdx_file *f = add(&x, 1, tok[i], 64 + (i % 2) * 32, r, false);
            if (!f) continue;
            ids[i] = f->id;
            in[i] = true;
        }
        if (r % 97) continue;
        for (int j = 0; j < FILES; j++) {
            const sdx_file *h = sdx_holding(&x, pkey_at(1, tok[j], 64), false);
            bad += in[j] != (h != NULL && h->id == ids[j]);
            /* the first block is shared by every seventh file: found while one of them is in */
            bool any = false;
            for (int k = j % 7; k < FILES; k += 7) any = any || in[k];
            bad += any != (sdx_holding(&x, pkey_at(1, tok[j], 32), false) != NULL);
        }
    }
    size_t n_in = 0;
    for (int i = 0; i < FILES; i++) n_in += in[i];
    CHECK(bad == 0 && x.n == n_in, "after %d random adds and removes: %d wrong answers, %zu files of %zu",
          ROUNDS, bad, x.n, n_in);
    sdx_free(&x);
}

int main(void) {
    test_keys();
    test_files();
    test_churn();
    return test_finish();
}
