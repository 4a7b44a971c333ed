/*
 * test_context_shift.c — context shift (cera_session_shift, cera_generate's context_shift).
 *
 *   - against llama.cpp: stories260K, n_ctx 256, greedy, 700 tokens after "Once upon a time"
 *     with the context shifted whenever it fills (four times), keeping 5 positions (--keep 4
 *     plus BOS) and 1 (--keep 0): the text must be llama.cpp's. The references in
 *     tests/model/data/stories260k.shift-keep{4,0}.llama-completion.txt are the output of
 *     llama.cpp 34af94cd's `llama-completion -m stories260K.gguf -p "Once upon a time" -n 700
 *     -c 256 --temp 0 --ignore-eos --context-shift --keep K -no-cnv -t 2`, less the echoed
 *     prompt and the final newlines;
 *   - against a fresh evaluation: a session that read 70 tokens and dropped 40 after the first
 *     6, against one that read only the 30 kept ones: in the first layer (whose rows depend only
 *     on the token and, for K, its position) the kept rows and every V row are the same bits and
 *     the moved K rows, rotated for their old positions and then by the delta, are within 4e-3
 *     of the largest |K| (CPU: the rows are read from host storage); deeper layers saw the
 *     dropped tokens, so they differ by design, as in llama.cpp;
 *   - a fork taken before the shift shares the old blocks and is untouched by it: its next
 *     logits equal, bit for bit, those of a session that never shifted;
 *   - refusals leave the session as it was: bad ranges (CERA_ERR_INVALID_ARG), and models that
 *     cannot shift, synth LFM2 (a recurrent state) and synth Gemma 3 (sliding-window layers):
 *     CERA_ERR_UNSUPPORTED, and their generation with context_shift ends at the full context.
 * With the argument "cuda" (tests/cuda's build of this file; exit 77 without a GPU) the same on
 * the CUDA backend, whose blocks are moved through the host.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "engine_util.h"
#include "core/fp16.h"
#include "engine/engine_impl.h"
#include "kv/kv_cache.h"
#include "testutil.h"

static cera_device device = CERA_DEVICE_CPU;

static cera_engine *open_ctx(const char *rel, int n_ctx) {
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    ep.device = device;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(shared_path(rel), &ep, &e, &err) == CERA_OK, "%s: %s", rel, err.message);
    return e;
}

static cera_session *greedy_session(cera_engine *e) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0;
    cera_session *s = NULL;
    cera_error err = {0};
    CHECK(cera_session_create(e, &sp, &s, &err) == CERA_OK, "session: %s", err.message);
    return s;
}

typedef struct text_buf {
    char *p;
    size_t n, cap;
} text_buf;

static bool collect(cera_token t, const char *piece, size_t len, void *user) {
    (void)t;
    text_buf *b = user;
    if (b->n + len + 1 > b->cap) {
        b->cap = (b->n + len + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) return false;
    }
    memcpy(b->p + b->n, piece, len);
    b->n += len;
    b->p[b->n] = 0;
    return true;
}

static void rstrip_newlines(char *s) {
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '\n') s[--n] = 0;
}

/* 700 greedy tokens with the context shifted as it fills, against llama.cpp's text. */
static void check_llama(int keep, const char *golden) {
    cera_engine *e = open_ctx("models/stories260K.gguf", 256);
    if (!e) return;
    cera_session *s = greedy_session(e);
    cera_token prompt[64];
    size_t n = 0;
    cera_error err = {0};
    CHECK(cera_tokenize(e, "Once upon a time", 16, true, false, prompt, 64, &n, &err) == CERA_OK,
          "tokenize: %s", err.message);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 700;
    gp.ignore_eog = true;
    gp.context_shift = true;
    gp.n_keep = keep + (prompt[0] == cera_engine_bos(e) ? 1 : 0); /* llama.cpp keeps BOS too */
    text_buf out = {0};
    int n_gen = 0;
    CHECK(cera_generate(s, prompt, n, &gp, collect, &out, &n_gen, &err) == CERA_OK, "generate: %s",
          err.message);
    CHECK(n_gen == 700, "--keep %d: %d tokens generated, 700 asked (the context is 256)", keep, n_gen);
    CHECK(cera_session_n_past(s) < 256, "--keep %d: n_past %d", keep, cera_session_n_past(s));
    size_t n_ref = 0;
    char *ref = read_file(shared_path(golden), &n_ref); /* NUL-terminated */
    CHECK(ref != NULL, "%s missing", golden);
    if (ref && out.p) {
        rstrip_newlines(ref);
        rstrip_newlines(out.p);
        size_t i = 0;
        while (ref[i] && ref[i] == out.p[i]) i++;
        CHECK(!ref[i] && !out.p[i], "--keep %d: the text leaves llama.cpp's at byte %zu of %zu (cera %zu)",
              keep, i, strlen(ref), strlen(out.p));
    }
    free(ref);
    free(out.p);
    cera_session_free(s);
    cera_engine_close(e);
}

static void logits_of(cera_session *s, float *out, int nv) {
    const float *l = cera_session_logits(s, -1);
    CHECK(l != NULL, "no logits");
    if (l) memcpy(out, l, (size_t)nv * sizeof *out);
}

/* The first layer's rows of a shifted session against those of a session that read only the
 * kept tokens (host storage): the kept positions' K and V and the moved positions' V are the
 * same bits (the first layer's rows depend only on the token and, for K, its position); a moved
 * K was rotated for its old position, stored in F16, then rotated by the delta and stored
 * again, so it is within a few F16 roundings of the fresh one. Deeper layers saw the dropped
 * tokens, so they differ by design (llama.cpp's shift keeps them too). */
static void check_rows(cera_session *s, cera_session *fresh, int keep) {
    const cera_kv_pool *p = s->seq.pool;
    const int row = p->layers[0].row, n = s->seq.n_pos;
    const bool f16 = p->fmt.k == CERA_KV_F16 && p->fmt.v == CERA_KV_F16;
    CHECK(f16 && n == fresh->seq.n_pos, "types %d/%d, %d vs %d positions", (int)p->fmt.k, (int)p->fmt.v, n,
          fresh->seq.n_pos);
    if (!f16 || n != fresh->seq.n_pos) return;
    int exact = 1;
    float worst = 0, big = 0;
    for (int pos = 0; pos < n; pos++) {
        const cera_f16 *k = cera_kv_row(&s->seq, 0, 0, pos), *kf = cera_kv_row(&fresh->seq, 0, 0, pos);
        const cera_f16 *v = cera_kv_row(&s->seq, 0, 1, pos), *vf = cera_kv_row(&fresh->seq, 0, 1, pos);
        exact &= !memcmp(v, vf, (size_t)row * sizeof *v);
        if (pos < keep) exact &= !memcmp(k, kf, (size_t)row * sizeof *k);
        for (int i = 0; pos >= keep && i < row; i++) {
            worst = fmaxf(worst, fabsf(cera_f16_to_f32(k[i]) - cera_f16_to_f32(kf[i])));
            big = fmaxf(big, fabsf(cera_f16_to_f32(kf[i])));
        }
    }
    CHECK(exact, "kept rows or first-layer V rows differ from a fresh evaluation");
    CHECK(worst <= 4e-3f * big, "moved K rows: %g off, of the largest %g", worst, big);
    printf("moved first-layer K rows: max |diff| %.3g = %.2e of the largest\n", worst, worst / big);
}

/* A shifted session against one that read only the kept tokens; a fork left as it was. */
static void check_fresh(void) {
    cera_engine *e = open_ctx("models/stories260K.gguf", 256);
    if (!e) return;
    const int nv = cera_engine_n_vocab(e), n_tok = 70, keep = 6, drop = 40;
    cera_token toks[70], kept[31];
    uint32_t r = 99;
    for (int i = 0; i < n_tok; i++) {
        r = r * 1664525u + 1013904223u;
        toks[i] = (cera_token)(3 + (r >> 8) % (uint32_t)(nv - 3));
    }
    const cera_token next = toks[n_tok - 1];
    int nk = 0;
    for (int i = 0; i < n_tok; i++)
        if (i < keep || i >= keep + drop) kept[nk++] = toks[i];
    kept[nk++] = next;
    cera_error err = {0};
    float *a = malloc((size_t)nv * sizeof *a), *c = malloc((size_t)nv * sizeof *c);
    float *d = malloc((size_t)nv * sizeof *d);

    cera_session *s = greedy_session(e), *f = NULL, *fresh = greedy_session(e), *plain = greedy_session(e);
    CHECK(cera_session_eval(s, toks, (size_t)n_tok, false, &err) == CERA_OK, "eval: %s", err.message);
    CHECK(cera_session_fork(s, &f, &err) == CERA_OK, "fork: %s", err.message);
    CHECK(cera_session_shift(s, keep, drop, &err) == CERA_OK, "shift: %s", err.message);
    CHECK(cera_session_n_past(s) == n_tok - drop, "n_past %d after the shift", cera_session_n_past(s));
    CHECK(cera_session_eval(s, &next, 1, false, &err) == CERA_OK, "eval after the shift: %s", err.message);
    logits_of(s, a, nv);
    CHECK(cera_session_eval(fresh, kept, (size_t)nk, false, &err) == CERA_OK, "fresh: %s", err.message);
    if (device == CERA_DEVICE_CPU) check_rows(s, fresh, keep);

    /* the fork keeps the unshifted timeline: as a session that never shifted */
    CHECK(f && cera_session_n_past(f) == n_tok, "fork n_past %d", f ? cera_session_n_past(f) : -1);
    CHECK(f && cera_session_eval(f, &next, 1, false, &err) == CERA_OK, "fork eval: %s", err.message);
    if (f) logits_of(f, c, nv);
    CHECK(cera_session_eval(plain, toks, (size_t)n_tok, false, &err) == CERA_OK, "plain: %s", err.message);
    CHECK(cera_session_eval(plain, &next, 1, false, &err) == CERA_OK, "plain next: %s", err.message);
    logits_of(plain, d, nv);
    CHECK(!memcmp(c, d, (size_t)nv * sizeof *c), "the fork's logits moved with the shift");

    /* refusals change nothing: the next token's logits stay those of the fork */
    const int before = cera_session_n_past(plain);
    CHECK(cera_session_shift(plain, 0, 0, &err) == CERA_ERR_INVALID_ARG, "drop 0: %d", err.status);
    CHECK(cera_session_shift(plain, -1, 4, &err) == CERA_ERR_INVALID_ARG, "keep -1: %d", err.status);
    CHECK(cera_session_shift(plain, 60, 20, &err) == CERA_ERR_INVALID_ARG, "past the end: %d", err.status);
    CHECK(cera_session_shift(NULL, 0, 1, &err) == CERA_ERR_INVALID_ARG, "NULL: %d", err.status);
    CHECK(cera_session_n_past(plain) == before, "n_past moved: %d", cera_session_n_past(plain));
    CHECK(cera_session_truncate(plain, before - 1, &err) == CERA_OK, "truncate: %s", err.message);
    CHECK(cera_session_eval(plain, &next, 1, false, &err) == CERA_OK, "again: %s", err.message);
    logits_of(plain, d, nv);
    CHECK(!memcmp(c, d, (size_t)nv * sizeof *c), "a refused shift changed the session");
    free(a);
    free(c);
    free(d);
    cera_session_free(s);
    cera_session_free(f);
    cera_session_free(fresh);
    cera_session_free(plain);
    cera_engine_close(e);
}

/* Models whose context cannot shift: refused, and generation ends at the full context. */
static void check_unsupported(const char *rel) {
    cera_engine *e = open_ctx(rel, 64);
    if (!e) return;
    cera_session *s = greedy_session(e);
    cera_token toks[20];
    for (int i = 0; i < 20; i++) toks[i] = (cera_token)(10 + i);
    cera_error err = {0};
    CHECK(cera_session_eval(s, toks, 20, false, &err) == CERA_OK, "%s eval: %s", rel, err.message);
    CHECK(cera_session_shift(s, 2, 8, &err) == CERA_ERR_UNSUPPORTED, "%s: %d (%s)", rel, err.status,
          err.message);
    CHECK(cera_session_n_past(s) == 20, "%s: n_past %d after a refused shift", rel, cera_session_n_past(s));
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 100;
    gp.ignore_eog = true;
    gp.context_shift = true;
    int n_gen = 0;
    CHECK(cera_generate(s, NULL, 0, &gp, NULL, NULL, &n_gen, &err) == CERA_OK, "%s generate: %s", rel,
          err.message);
    CHECK(n_gen > 0 && n_gen < 100 && cera_session_n_past(s) <= 64, "%s: %d generated, n_past %d", rel, n_gen,
          cera_session_n_past(s));
    cera_session_free(s);
    cera_engine_close(e);
}

int main(int argc, char **argv) {
    const int dev = test_device_arg(argc, argv);
    if (dev < 0) return TEST_SKIP_CODE;
    device = (cera_device)dev;
    check_llama(4, "data/stories260k.shift-keep4.llama-completion.txt");
    check_llama(0, "data/stories260k.shift-keep0.llama-completion.txt");
    check_fresh();
    check_unsupported("golden/synth-lfm2-q8_0.gguf");
    check_unsupported("golden/synth-gemma3-q8_0.gguf");
    return test_finish();
}
