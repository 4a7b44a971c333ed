/*
 * test_batch.c — the engine-wide KV pool and the public batch API on the CPU.
 *
 *   - batch invariance: cera_batch_eval of sessions doing different things at once (a
 *     long prompt in the attention's F32 mode, short prompts, single decode steps, a
 *     pending generated token) gives every session the logits of the same eval alone, bit
 *     for bit, whatever n_batch cuts the calls into;
 *   - fork: a fork continues its source's timeline (blocks shared, the partly filled tail
 *     copied on first write) and both equal fresh sessions fed the whole token sequence;
 *     cera_batch_sample equals cera_session_sample;
 *   - the pool: 72 sessions (above the 64 the test engine's pool was sized for are
 *     refused by name) created, forked, evaluated and freed in random order, every block
 *     back in the pool at the end; a pool too small for a prompt gives CONTEXT_FULL with
 *     the session unchanged;
 *   - LFM2 (a conv state per sequence slot): the same batch and fork invariance, and a cut
 *     back to a middle position refused by name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "engine/engine_impl.h"
#include "testutil.h"

#define STORIES "models/stories260K.gguf"

static cera_engine *open_model(const char *rel, int n_batch, int n_seq_max, size_t kv_bytes) {
    cera_engine_params p = cera_engine_default_params();
    p.n_threads = 2;
    p.n_ctx = 256;
    p.n_batch = n_batch;
    p.n_seq_max = n_seq_max;
    p.kv_bytes = kv_bytes;
    p.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(shared_path(rel), &p, &e, &err) == CERA_OK, "engine: %s", err.message);
    return e;
}

static cera_engine *open_engine(int n_batch, int n_seq_max, size_t kv_bytes) {
    return open_model(STORIES, n_batch, n_seq_max, kv_bytes);
}

static cera_session *new_session(cera_engine *e) {
    cera_session *s = NULL;
    cera_error err = {0};
    CHECK(cera_session_create(e, NULL, &s, &err) == CERA_OK, "session: %s", err.message);
    return s;
}

static bool same_row(const float *a, const float *b, int nv) {
    return a && b && !memcmp(a, b, (size_t)nv * sizeof(float));
}

/* Pseudo-random tokens of the stories vocabulary. */
static void make_tokens(cera_token *t, int n, unsigned seed, int nv) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 1 + (int)((seed >> 8) % (unsigned)(nv - 1));
    }
}

/* Four sessions, each with a history, then one batch where they do different things. The
 * reference is the same history and the same eval on a session alone. */
static void test_invariance(int n_batch) {
    cera_engine *e = open_engine(n_batch, 8, 0);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_token tok[4][160];
    for (int i = 0; i < 4; i++) make_tokens(tok[i], 160, 7 + i, nv);
    /* history, then the batch's part: 0: nothing, then a 100-token prompt (F32 attention
     * mode); 1: 20 tokens, then one decode step; 2: 5 tokens, then 12 with all logits;
     * 3: 30 tokens and a generated token still pending, then nothing (only the pending) */
    const int hist[4] = {0, 20, 5, 30};
    const size_t part[4] = {100, 1, 12, 0};
    const bool all[4] = {false, false, true, false};
    cera_session *s[4], *ref[4];
    cera_error err = {0};
    for (int i = 0; i < 4; i++) {
        s[i] = new_session(e);
        ref[i] = new_session(e);
        if (!s[i] || !ref[i]) return;
        for (int k = 0; k < 2; k++) {
            cera_session *x = k ? ref[i] : s[i];
            if (hist[i]) CHECK(!cera_session_eval(x, tok[i], (size_t)hist[i], false, &err), "history");
        }
    }
    /* session 3's pending token: a generation of one token leaves it pending */
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 1;
    CHECK(!cera_generate(s[3], NULL, 0, &gp, NULL, NULL, NULL, &err), "generate: %s", err.message);
    CHECK(!cera_generate(ref[3], NULL, 0, &gp, NULL, NULL, NULL, &err), "generate: %s", err.message);
    cera_batch_item items[4];
    for (int i = 0; i < 4; i++) items[i] = (cera_batch_item){s[i], tok[i] + hist[i], part[i], all[i], 0};
    CHECK(cera_batch_eval(e, items, 4, &err) == CERA_OK, "batch (n_batch %d): %s", n_batch, err.message);
    int bad = 0, rows = 0;
    for (int i = 0; i < 4; i++) {
        CHECK(!cera_session_eval(ref[i], tok[i] + hist[i], part[i], all[i], &err), "alone: %s", err.message);
        CHECK(cera_session_n_past(s[i]) == cera_session_n_past(ref[i]), "session %d: n_past %d vs %d", i,
              cera_session_n_past(s[i]), cera_session_n_past(ref[i]));
        const int n_rows = all[i] ? (int)part[i] : 1;
        for (int r = 0; r < n_rows; r++) {
            const int at = all[i] ? r : -1;
            bad += !same_row(cera_session_logits(s[i], at), cera_session_logits(ref[i], at), nv);
            rows++;
        }
        /* and the next sampled tokens agree (same history, same RNG) */
        CHECK(cera_session_sample(s[i]) == cera_session_sample(ref[i]), "session %d: sampled tokens differ",
              i);
    }
    printf("n_batch %3d: %d of %d rows of a mixed batch differ from the same evals alone\n", n_batch, bad,
           rows);
    CHECK(bad == 0, "n_batch %d: %d rows differ from the sessions evaluated alone", n_batch, bad);
    for (int i = 0; i < 4; i++) cera_session_free(s[i]), cera_session_free(ref[i]);
    CHECK(e->kv->group[0].n_free == e->kv->n_blocks, "blocks left taken: %d of %d free",
          e->kv->group[0].n_free, e->kv->n_blocks);
    cera_engine_close(e);
}

/* A fork at a position inside a block; both continue differently and each equals a fresh
 * session fed its whole sequence. */
static void test_fork(void) {
    cera_engine *e = open_engine(64, 8, 0);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_token a[90], b[90];
    make_tokens(a, 90, 99, nv);
    memcpy(b, a, sizeof a);
    make_tokens(b + 45, 45, 1234, nv); /* b shares a's first 45 tokens (block 1 partly filled) */
    cera_error err = {0};
    cera_session *src = new_session(e), *fork = NULL;
    if (!src) return;
    CHECK(!cera_session_eval(src, a, 45, false, &err), "prefix");
    const int free_before = e->kv->group[0].n_free;
    CHECK(!cera_session_fork(src, &fork, &err), "fork: %s", err.message);
    if (!fork) return;
    CHECK(e->kv->group[0].n_free == free_before, "a fork took blocks (%d -> %d free)", free_before,
          e->kv->group[0].n_free);
    CHECK(cera_session_n_past(fork) == 45, "fork n_past %d", cera_session_n_past(fork));
    CHECK(same_row(cera_session_logits(fork, -1), cera_session_logits(src, -1), nv), "fork's logits");
    const cera_batch_item items[2] = {{src, a + 45, 45, true, 0}, {fork, b + 45, 45, true, 0}};
    CHECK(!cera_batch_eval(e, items, 2, &err), "both continue: %s", err.message);
    cera_session *ra = new_session(e), *rb = new_session(e);
    if (!ra || !rb) return;
    CHECK(!cera_session_eval(ra, a, 90, true, &err) && !cera_session_eval(rb, b, 90, true, &err),
          "references");
    int bad = 0;
    for (int i = 0; i < 45; i++) {
        bad += !same_row(cera_session_logits(src, i), cera_session_logits(ra, 45 + i), nv);
        bad += !same_row(cera_session_logits(fork, i), cera_session_logits(rb, 45 + i), nv);
    }
    printf("fork at 45: %d of 90 continued rows differ from fresh sessions\n", bad);
    CHECK(bad == 0, "fork: %d rows differ", bad);
    CHECK(!same_row(cera_session_logits(src, 44), cera_session_logits(fork, 44), nv),
          "the two continuations");
    cera_session *ss[2] = {src, fork};
    cera_token t[2] = {-1, -1};
    const cera_token t0 = cera_session_sample(ra), t1 = cera_session_sample(rb);
    CHECK(!cera_batch_sample(ss, 2, t, &err) && t[0] == t0 && t[1] == t1, "batch sample: %d %d vs %d %d",
          t[0], t[1], t0, t1);
    cera_session_free(src);
    cera_session_free(fork);
    cera_session_free(ra);
    cera_session_free(rb);
    CHECK(e->kv->group[0].n_free == e->kv->n_blocks, "blocks left taken: %d of %d free",
          e->kv->group[0].n_free, e->kv->n_blocks);
    cera_engine_close(e);
}

/* 72 attempts at sessions on a 64-slot engine, in random order of create / fork / eval / free. */
static void test_pool_churn(void) {
    cera_engine *probe = open_engine(32, 1, 0);
    if (!probe) return;
    const size_t block = probe->kv->group[0].block_bytes;
    cera_engine_close(probe);
    cera_engine *e = open_engine(32, 64, 64 * 8 * block); /* every session may fill its context */
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_session *live[64] = {0};
    int n_live = 0, refused = 0, forks = 0, evals = 0;
    unsigned seed = 42;
    cera_error err = {0};
    for (int step = 0; step < 600; step++) {
        seed = seed * 1103515245u + 12345u;
        const unsigned op = (seed >> 16) % 8;
        if (op < 3 || n_live == 0) { /* create: refused past 64 */
            cera_session *s = NULL;
            const cera_status st = cera_session_create(e, NULL, &s, &err);
            if (n_live == 64) {
                CHECK(st == CERA_ERR_NO_MEMORY && strstr(err.message, "n_seq_max"), "65th session: %s",
                      err.message);
                refused++;
            } else {
                CHECK(st == CERA_OK, "create: %s", err.message);
                if (s) live[n_live++] = s;
            }
        } else if (op < 4) { /* fork a random live one */
            cera_session *f = NULL;
            const cera_status st = cera_session_fork(live[(seed >> 3) % (unsigned)n_live], &f, &err);
            if (n_live == 64) {
                CHECK(st == CERA_ERR_NO_MEMORY, "fork past 64: %s", err.message);
            } else {
                CHECK(st == CERA_OK, "fork: %s", err.message);
                if (f) live[n_live++] = f, forks++;
            }
        } else if (op < 6) { /* a batch over some of them */
            cera_batch_item items[8];
            cera_token tok[8][8];
            int n = 0;
            for (int i = (int)((seed >> 5) % (unsigned)n_live); i < n_live && n < 8; i += 3) {
                if (cera_session_n_past(live[i]) > 200) continue;
                make_tokens(tok[n], 8, seed + (unsigned)i, nv);
                items[n] =
                    (cera_batch_item){live[i], tok[n], 1 + (size_t)((seed >> 9) + (unsigned)i) % 8, false, 0};
                n++;
            }
            CHECK(cera_batch_eval(e, items, n, &err) == CERA_OK, "batch: %s", err.message);
            evals++;
        } else { /* free a random one */
            const int i = (int)((seed >> 7) % (unsigned)n_live);
            cera_session_free(live[i]);
            live[i] = live[--n_live];
        }
    }
    while (n_live > 0) cera_session_free(live[--n_live]);
    printf("pool churn: %d batches, %d forks, %d sessions refused past n_seq_max, %d of %d blocks free at "
           "the end\n",
           evals, forks, refused, e->kv->group[0].n_free, e->kv->n_blocks);
    CHECK(e->kv->group[0].n_free == e->kv->n_blocks && e->kv->n_free_seq == e->kv->n_seq_max,
          "the pool is not empty at the end: %d of %d blocks, %d of %d slots free", e->kv->group[0].n_free,
          e->kv->n_blocks, e->kv->n_free_seq, e->kv->n_seq_max);
    cera_engine_close(e);
}

/* A pool of 2 blocks (64 positions): a 70-token prompt is refused, the session unchanged. */
static void test_exhaustion(void) {
    cera_engine *probe = open_engine(64, 2, 0);
    if (!probe) return;
    const size_t block = probe->kv->group[0].block_bytes;
    cera_engine_close(probe);
    cera_engine *e = open_engine(64, 2, 2 * block);
    if (!e) return;
    CHECK(e->kv->n_blocks == 2, "a pool of %d blocks", e->kv->n_blocks);
    const int nv = cera_engine_n_vocab(e);
    cera_token t[70];
    make_tokens(t, 70, 5, nv);
    cera_error err = {0};
    cera_session *s = new_session(e), *s2 = new_session(e);
    if (!s || !s2) return;
    CHECK(!cera_session_eval(s, t, 10, false, &err), "10 tokens");
    const cera_status st = cera_session_eval(s2, t, 60, false, &err);
    CHECK(st == CERA_ERR_CONTEXT_FULL && strstr(err.message, "KV pool"), "a prompt past the pool: %d %s", st,
          err.message);
    CHECK(cera_session_n_past(s2) == 0 && e->kv->group[0].n_free == 1,
          "after the refusal: n_past %d, %d blocks free", cera_session_n_past(s2), e->kv->group[0].n_free);
    CHECK(!cera_session_eval(s2, t, 20, false, &err), "a prompt that fits: %s", err.message);
    cera_session_free(s);
    cera_session_free(s2);
    CHECK(e->kv->group[0].n_free == 2, "blocks back");
    cera_engine_close(e);
}

/* LFM2 (conv state per sequence): a mixed batch and a fork equal the sessions alone, a
 * cut back to a middle position is refused, a cut back to 0 starts afresh. Also LFM2-MoE,
 * whose batch groups the tokens of all its sequences by expert. */
static void test_lfm2(const char *rel, const char *label) {
    cera_engine *e = open_model(rel, 64, 12, 0);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e);
    cera_token t[3][40];
    for (int i = 0; i < 3; i++) make_tokens(t[i], 40, 300 + i, nv);
    cera_error err = {0};
    cera_session *s[3], *r[3];
    for (int i = 0; i < 3; i++) {
        s[i] = new_session(e);
        r[i] = new_session(e);
        if (!s[i] || !r[i]) return;
    }
    /* history: 0 and 1 have 10 tokens, 2 none; then 0 decodes one, 1 and 2 take prompts */
    for (int k = 0; k < 2; k++) {
        CHECK(!cera_session_eval(k ? r[0] : s[0], t[0], 10, false, &err), "history");
        CHECK(!cera_session_eval(k ? r[1] : s[1], t[1], 10, false, &err), "history");
    }
    const cera_batch_item items[3] = {
        {s[0], t[0] + 10, 1, false, 0}, {s[1], t[1] + 10, 20, true, 0}, {s[2], t[2], 7, true, 0}};
    CHECK(!cera_batch_eval(e, items, 3, &err), "batch: %s", err.message);
    CHECK(!cera_session_eval(r[0], t[0] + 10, 1, false, &err) &&
              !cera_session_eval(r[1], t[1] + 10, 20, true, &err) &&
              !cera_session_eval(r[2], t[2], 7, true, &err),
          "alone");
    int bad = !same_row(cera_session_logits(s[0], -1), cera_session_logits(r[0], -1), nv);
    for (int i = 0; i < 20; i++)
        bad += !same_row(cera_session_logits(s[1], i), cera_session_logits(r[1], i), nv);
    for (int i = 0; i < 7; i++)
        bad += !same_row(cera_session_logits(s[2], i), cera_session_logits(r[2], i), nv);
    /* a fork of session 1 goes on differently; both equal fresh sessions fed everything */
    cera_session *f = NULL;
    CHECK(!cera_session_fork(s[1], &f, &err), "fork: %s", err.message);
    cera_token a[40], c[40];
    memcpy(a, t[1], 30 * sizeof *a);
    memcpy(c, t[1], 30 * sizeof *c);
    make_tokens(a + 30, 10, 1, nv);
    make_tokens(c + 30, 10, 2, nv);
    const cera_batch_item go[2] = {{s[1], a + 30, 10, true, 0}, {f, c + 30, 10, true, 0}};
    CHECK(f && !cera_batch_eval(e, go, 2, &err), "fork batch: %s", err.message);
    cera_session *fa = new_session(e), *fc = new_session(e);
    if (!fa || !fc || !f) return;
    CHECK(!cera_session_eval(fa, a, 40, true, &err) && !cera_session_eval(fc, c, 40, true, &err), "fresh");
    for (int i = 0; i < 10; i++) {
        bad += !same_row(cera_session_logits(s[1], i), cera_session_logits(fa, 30 + i), nv);
        bad += !same_row(cera_session_logits(f, i), cera_session_logits(fc, 30 + i), nv);
    }
    printf("%s: %d of 48 rows of a mixed batch and a fork differ from the sessions alone\n", label, bad);
    CHECK(bad == 0, "%s: %d rows differ", label, bad);
    /* cut back: to the middle refused (the state follows the last position), to 0 fresh */
    CHECK(cera_session_truncate(fa, 20, &err) == CERA_ERR_UNSUPPORTED && strstr(err.message, "recurrent"),
          "lfm2 truncate to 20: %s", err.message);
    CHECK(cera_session_n_past(fa) == 40, "the refused cut changed nothing");
    CHECK(!cera_session_truncate(fa, 0, &err) && !cera_session_eval(fa, c, 40, true, &err), "truncate 0");
    bad = 0;
    for (int i = 0; i < 40; i++) bad += !same_row(cera_session_logits(fa, i), cera_session_logits(fc, i), nv);
    CHECK(bad == 0, "after a cut back to 0, %d rows differ from a fresh session", bad);
    for (int i = 0; i < 3; i++) cera_session_free(s[i]), cera_session_free(r[i]);
    cera_session_free(f);
    cera_session_free(fa);
    cera_session_free(fc);
    CHECK(e->kv->group[0].n_free == e->kv->n_blocks, "blocks left taken");
    cera_engine_close(e);
}

/* Gemma 3 (five sliding-window layers of window 16, one global): a session keeps only its
 * window in the sliding group; step-by-step decode, chunks, a mixed batch and a fork give
 * the same bits; a cut back before the window is refused, one inside it works; freed
 * sessions return every block of both groups; a full pool is a status. */
static void test_gemma3(void) {
    cera_engine *e = open_model("golden/synth-gemma3-q8_0.gguf", 32, 8, 0);
    if (!e) return;
    const cera_kv_group *F = &e->kv->group[CERA_KV_FULL], *G = &e->kv->group[CERA_KV_SWA];
    CHECK(F->n_layer == 1 && G->n_layer == 5 && G->window == 16,
          "gemma3 groups: %d full, %d sliding (window %d)", F->n_layer, G->n_layer, G->window);
    const int nv = cera_engine_n_vocab(e);
    enum { N = 160 };
    cera_token a[N], c[N];
    make_tokens(a, N, 77, nv);
    memcpy(c, a, 150 * sizeof *a);
    make_tokens(c + 150, 10, 78, nv);
    cera_error err = {0};
    cera_session *s = new_session(e), *r = new_session(e), *fa = new_session(e), *fc = new_session(e);
    float *steps = malloc((size_t)N * (size_t)nv * sizeof(float));
    if (!s || !r || !fa || !fc || !steps) return;
    /* s: a prompt of 40, then one token at a time; r: chunks of 30 */
    CHECK(!cera_session_eval(s, a, 40, false, &err), "prompt: %s", err.message);
    int most = 0;
    for (int i = 40; i < 150; i++) {
        CHECK(!cera_session_eval(s, a + i, 1, false, &err), "step: %s", err.message);
        const float *l = cera_session_logits(s, -1);
        if (l) memcpy(steps + (size_t)i * nv, l, (size_t)nv * sizeof(float));
        if (G->n_blocks - G->n_free > most) most = G->n_blocks - G->n_free;
    }
    CHECK(most <= 2, "one decoding session held %d sliding blocks (a window of 16 needs at most 2)", most);
    CHECK(F->n_blocks - F->n_free == 5, "the global layer keeps all 150 positions");
    int bad = 0;
    for (int i = 0; i < 150; i += 30) {
        CHECK(!cera_session_eval(r, a + i, 30, true, &err), "chunk: %s", err.message);
        for (int j = 0; j < 30; j++)
            if (i + j >= 40) bad += !same_row(cera_session_logits(r, j), steps + (size_t)(i + j) * nv, nv);
    }
    CHECK(bad == 0, "gemma3: %d of 110 rows of chunks of 30 differ from one-by-one decode", bad);
    /* a fork of s goes on differently in one batch with s; both equal fresh sessions */
    cera_session *f = NULL;
    CHECK(!cera_session_fork(s, &f, &err), "fork: %s", err.message);
    const cera_batch_item go[2] = {{s, a + 150, 10, true, 0}, {f, c + 150, 10, true, 0}};
    CHECK(f && !cera_batch_eval(e, go, 2, &err), "fork batch: %s", err.message);
    for (int i = 0; i < N; i += 32) {
        const size_t m = N - i < 32 ? (size_t)(N - i) : 32;
        CHECK(!cera_session_eval(fa, a + i, m, true, &err) && !cera_session_eval(fc, c + i, m, true, &err),
              "fresh: %s", err.message);
    }
    bad = 0;
    for (int i = 0; i < 10; i++) {
        /* the fresh sessions' last chunk holds positions 128..159 */
        bad += !same_row(cera_session_logits(s, i), cera_session_logits(fa, 22 + i), nv);
        bad += !same_row(cera_session_logits(f, i), cera_session_logits(fc, 22 + i), nv);
    }
    CHECK(bad == 0, "gemma3: %d of 20 rows of a batch with a fork differ from fresh sessions", bad);
    /* cut back: before the window refused, inside it allowed (and the same rows again) */
    CHECK(cera_session_truncate(s, 100, &err) == CERA_ERR_UNSUPPORTED && strstr(err.message, "sliding"),
          "gemma3 truncate to 100: %s", err.message);
    CHECK(cera_session_n_past(s) == N, "the refused cut changed nothing");
    CHECK(!cera_session_truncate(s, 155, &err), "truncate to 155: %s", err.message);
    CHECK(!cera_session_eval(s, a + 155, 5, true, &err), "after the cut: %s", err.message);
    bad = 0;
    for (int i = 0; i < 5; i++)
        bad += !same_row(cera_session_logits(s, i), cera_session_logits(fa, 27 + i), nv);
    CHECK(bad == 0, "gemma3: %d of 5 rows after a cut inside the window differ", bad);
    CHECK(!cera_session_truncate(s, 0, &err) && !cera_session_eval(s, a, 32, true, &err), "truncate to 0");
    cera_session_free(s);
    cera_session_free(r);
    cera_session_free(f);
    cera_session_free(fa);
    cera_session_free(fc);
    free(steps);
    CHECK(F->n_free == F->n_blocks && G->n_free == G->n_blocks, "blocks left taken: %d of %d, %d of %d free",
          F->n_free, F->n_blocks, G->n_free, G->n_blocks);
    const size_t full = F->block_bytes, sw = G->block_bytes;
    cera_engine_close(e);

    /* a pool of 3 blocks in each group (96 positions): a prompt of 100 is refused, the
     * session unchanged; one token at a time the window stays in its blocks until the
     * global layer's run out */
    e = open_model("golden/synth-gemma3-q8_0.gguf", 32, 8, 3 * (full + sw));
    if (!e) return;
    CHECK(e->kv->group[CERA_KV_FULL].n_blocks == 3 && e->kv->group[CERA_KV_SWA].n_blocks == 3,
          "a pool of %d + %d blocks", e->kv->group[CERA_KV_FULL].n_blocks,
          e->kv->group[CERA_KV_SWA].n_blocks);
    s = new_session(e);
    if (!s) return;
    CHECK(cera_session_eval(s, a, 100, false, &err) == CERA_ERR_CONTEXT_FULL && cera_session_n_past(s) == 0,
          "a prompt past the pool: %s", err.message);
    int n = 0;
    while (n < 120 && cera_session_eval(s, a + n, 1, false, &err) == CERA_OK) n++;
    CHECK(n == 96, "%d positions before the pool ran out (96 expected): %s", n, err.message);
    cera_session_free(s);
    CHECK(e->kv->group[CERA_KV_FULL].n_free == 3 && e->kv->group[CERA_KV_SWA].n_free == 3, "blocks back");
    cera_engine_close(e);

    /* one sequence, 6 full blocks and 3 sliding: after 100 positions an eval of 100 more in
     * chunks of 25 runs out of full blocks at its fourth chunk, when the window has moved
     * past position 100: the session cannot go back there and starts over from 0 */
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2, ep.n_ctx = 256, ep.n_batch = 32, ep.n_seq_max = 1, ep.device = CERA_DEVICE_CPU;
    ep.kv_bytes = 6 * full + 3 * sw;
    e = NULL;
    CHECK(cera_engine_open(shared_path("golden/synth-gemma3-q8_0.gguf"), &ep, &e, &err) == CERA_OK,
          "engine: %s", err.message);
    if (!e) return;
    CHECK(e->kv->group[CERA_KV_FULL].n_blocks == 6 && e->kv->group[CERA_KV_SWA].n_blocks == 3,
          "a pool of %d + %d blocks", e->kv->group[CERA_KV_FULL].n_blocks,
          e->kv->group[CERA_KV_SWA].n_blocks);
    s = new_session(e);
    if (!s) return;
    cera_token t[200];
    make_tokens(t, 200, 79, nv);
    CHECK(!cera_session_eval(s, t, 100, false, &err), "100 positions: %s", err.message);
    const cera_status st = cera_session_eval(s, t + 100, 100, false, &err);
    CHECK(st == CERA_ERR_CONTEXT_FULL && strstr(err.message, "reset to 0") && cera_session_n_past(s) == 0,
          "a failed chunk past the window: status %d, n_past %d: %s", (int)st, cera_session_n_past(s),
          err.message);
    CHECK(e->kv->group[CERA_KV_FULL].n_free == 6 && e->kv->group[CERA_KV_SWA].n_free == 3, "blocks back");
    CHECK(!cera_session_eval(s, t, 40, false, &err), "the reset session evaluates again: %s", err.message);
    cera_session_free(s);
    cera_engine_close(e);
}

int main(void) {
    test_invariance(512);
    test_invariance(64);
    test_invariance(24);
    test_fork();
    test_pool_churn();
    test_exhaustion();
    test_lfm2("golden/synth-lfm2-q8_0.gguf", "lfm2");
    test_lfm2("synth/lfm2moe-q8_0.gguf", "lfm2moe q8_0");
    test_lfm2("synth/lfm2moe-f32.gguf", "lfm2moe f32");
    test_lfm2("synth/lfm2moe-q4_0.gguf", "lfm2moe q4_0");
    test_gemma3();
    return test_finish();
}
