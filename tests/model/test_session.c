/*
 * test_session.c — the engine/session API and the forward pass's invariants:
 *   - a prompt as one batch and the same tokens one at a time give the same logits
 *     (bit for bit under 64 tokens; at the F16 rounding level for longer batches, whose
 *     attention rounds as llama.cpp's tiled path);
 *   - one thread and several give identical logits (the split never changes arithmetic);
 *   - sessions of one engine evaluated from several threads at once give their logits alone;
 *   - two sequences in one forward batch give what each gives alone (paged KV cache);
 *   - truncating and re-evaluating reproduces the logits; an F32 KV cache stays close;
 *   - errors: unsupported architecture (named), full context, bad token ids;
 *   - cera_generate: greedy ids equal llama.cpp's, stop strings (never passed on; held-back
 *     text all delivered), cancel flag, n_predict; two calls equal one of their total length;
 *   - truncate follows the timeline (pending token, penalty history); set_sampler errors;
 *   - engine open refuses n_ctx/n_batch that would overflow; NaN fails the compare measures;
 *   - tokenization adds BOS as the metadata asks (the golden prompt's tokens);
 *   - the engine's n_ctx, BOS/EOS, EOG set and token pieces (stories260K, SmolLM2).
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cera.h"
#include "compare.h"
#include "engine/engine_impl.h"
#include "testutil.h"

#define STORIES "models/stories260K.gguf"

static cera_engine *open_model(const char *rel, int n_threads, int n_ctx, cera_kv_type kv) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU; /* these compare with llama.cpp CPU outputs */
    ep.n_threads = n_threads;
    ep.n_ctx = n_ctx;
    ep.kv_type = kv;
    cera_engine *e = NULL;
    cera_error err;
    CHECK(cera_engine_open(shared_path(rel), &ep, &e, &err) == CERA_OK, "open %s: %s", rel, err.message);
    return e;
}

/* Logits of every position of tokens: as one batch (step 0) or `step` tokens at a time. */
static float *eval_logits(cera_engine *e, const int32_t *tok, size_t n, size_t step) {
    const size_t nv = (size_t)cera_engine_n_vocab(e);
    float *out = malloc(n * nv * sizeof(float));
    cera_session *s = NULL;
    cera_error err;
    if (!out || cera_session_create(e, NULL, &s, &err) != CERA_OK) {
        CHECK(false, "session: %s", err.message);
        free(out);
        return NULL;
    }
    if (!step) step = n;
    for (size_t i = 0; i < n; i += step) {
        const size_t m = n - i < step ? n - i : step;
        CHECK(cera_session_eval(s, tok + i, m, true, &err) == CERA_OK, "eval: %s", err.message);
        for (size_t j = 0; j < m; j++) {
            const float *l = cera_session_logits(s, (int)j);
            if (l) memcpy(out + (i + j) * nv, l, nv * sizeof(float));
        }
    }
    cera_session_free(s);
    return out;
}

static double worst_diff(const float *a, const float *b, size_t n, int nv) {
    double w = 0;
    for (size_t t = 0; t < n; t++) {
        const double d = rel_max_diff(a + t * (size_t)nv, b + t * (size_t)nv, nv);
        if (d > w) w = d;
    }
    return w;
}

static void test_batch_vs_steps(const char *model, const char *tokens) {
    size_t n = 0;
    int32_t *tok = read_ints(shared_path(tokens), &n);
    cera_engine *e = open_model(model, 1, 256, CERA_KV_F16);
    CHECK(tok, "token file missing");
    if (!tok || !e) goto done;
    const int nv = cera_engine_n_vocab(e);
    float *batch = eval_logits(e, tok, n, 0), *one = eval_logits(e, tok, n, 1),
          *five = eval_logits(e, tok, n, 5);
    if (batch && one && five) {
        /* batches under 64 tokens and single steps take the same attention path, and a
         * single token takes the row dot only where it rounds as the tile: bit-identical */
        const double d1 = worst_diff(one, batch, n, nv), d5 = worst_diff(five, batch, n, nv);
        printf("%s: batch vs one-by-one %.2e, vs chunks of 5 %.2e\n", model, d1, d5);
        CHECK(d1 == 0, "%s: batch vs one token at a time differ by %.3g", model, d1);
        CHECK(d5 == 0, "%s: batch vs chunks of 5 differ by %.3g", model, d5);
        for (size_t t = 0; t < n; t++)
            CHECK(argmax_f32(one + t * nv, nv) == argmax_f32(batch + t * nv, nv), "%s: top token at %zu",
                  model, t);
    }
    free(batch);
    free(one);
    free(five);
done:
    cera_engine_close(e);
    free(tok);
}

/* A batch of 64 tokens or more takes the F32 attention rounding (as llama.cpp's tiled
 * path) while single steps take the F16 one: the same positions then differ by the F16
 * rounding of Q and of the V accumulator, not more. */
static void test_long_batch_vs_steps(const char *model, const char *tokens) {
    size_t n0 = 0;
    int32_t *tok0 = read_ints(shared_path(tokens), &n0);
    cera_engine *e = open_model(model, 1, 256, CERA_KV_F16);
    CHECK(tok0, "token file missing");
    if (!tok0 || !e) goto done;
    int32_t tok[96];
    size_t n = 0;
    for (; n < 80; n++) tok[n] = tok0[n % n0]; /* 80 tokens: the prompt twice and a bit */
    const int nv = cera_engine_n_vocab(e);
    float *batch = eval_logits(e, tok, n, 0), *one = eval_logits(e, tok, n, 1);
    if (batch && one) {
        const double d = worst_diff(one, batch, n, nv);
        int top = 0;
        for (size_t t = 0; t < n; t++) top += argmax_f32(one + t * nv, nv) == argmax_f32(batch + t * nv, nv);
        printf("%s: 80-token batch (F32 attention) vs one-by-one (F16 attention): %.2e, top %d/%zu\n", model,
               d, top, n);
        CHECK(d > 0 && d <= 1e-2, "long batch vs steps differ by %.3g", d);
        CHECK(top >= (int)(0.95 * (double)n), "long batch vs steps: top token equal at %d/%zu", top, n);
    }
    free(batch);
    free(one);
done:
    cera_engine_close(e);
    free(tok0);
}

/* Sessions of one engine evaluated from several threads at once take turns on the
 * backend and give the same logits as alone. */
typedef struct conc_arg {
    cera_engine *e;
    const int32_t *tok;
    size_t n;
    float *out;
} conc_arg;

/* eval_logits without CHECK (the test counters are not for threads): NULL on failure */
static float *eval_quiet(cera_engine *e, const int32_t *tok, size_t n) {
    const size_t nv = (size_t)cera_engine_n_vocab(e);
    float *out = malloc(n * nv * sizeof(float));
    cera_session *s = NULL;
    bool ok = out && cera_session_create(e, NULL, &s, NULL) == CERA_OK;
    for (size_t i = 0; ok && i < n; i += 3) {
        const size_t m = n - i < 3 ? n - i : 3;
        ok = cera_session_eval(s, tok + i, m, true, NULL) == CERA_OK;
        for (size_t j = 0; ok && j < m; j++)
            memcpy(out + (i + j) * nv, cera_session_logits(s, (int)j), nv * sizeof(float));
    }
    cera_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static void *conc_main(void *p) {
    conc_arg *c = p;
    for (int rep = 0; rep < 3; rep++) {
        free(c->out);
        c->out = eval_quiet(c->e, c->tok, c->n);
    }
    return NULL;
}

static void test_concurrent_sessions(void) {
    size_t n = 0;
    int32_t *tok = read_ints(shared_path("golden/stories260K.p3.tokens"), &n);
    cera_engine *e = open_model(STORIES, 2, 256, CERA_KV_F16);
    CHECK(tok, "token file missing");
    if (!tok || !e) goto done;
    const int nv = cera_engine_n_vocab(e);
    float *alone = eval_logits(e, tok, n, 3);
    conc_arg args[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (conc_arg){e, tok, n, NULL};
        pthread_create(&th[i], NULL, conc_main, &args[i]);
    }
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        CHECK(alone && args[i].out && !memcmp(alone, args[i].out, n * (size_t)nv * sizeof(float)),
              "session evaluated on thread %d differs from alone", i);
        free(args[i].out);
    }
    free(alone);
done:
    cera_engine_close(e);
    free(tok);
}

static void test_threads(void) {
    size_t n = 0;
    int32_t *tok = read_ints(shared_path("golden/synth-llama-q4_k_m.tokens"), &n);
    cera_engine *e1 = open_model("golden/synth-llama-q4_k_m.gguf", 1, 128, CERA_KV_F16);
    cera_engine *e3 = open_model("golden/synth-llama-q4_k_m.gguf", 3, 128, CERA_KV_F16);
    CHECK(tok, "token file missing");
    if (tok && e1 && e3) {
        const int nv = cera_engine_n_vocab(e1);
        float *a = eval_logits(e1, tok, n, 0), *b = eval_logits(e3, tok, n, 0);
        CHECK(a && b && !memcmp(a, b, n * (size_t)nv * sizeof(float)),
              "1 and 3 threads give different logits");
        free(a);
        free(b);
    }
    cera_engine_close(e1);
    cera_engine_close(e3);
    free(tok);
}

/* Two sessions in one cera_batch_eval against each evaluated alone: bit for bit (the
 * attention's rounding follows each sequence's own token count, never the batch's). */
static void test_two_sequences(void) {
    size_t na = 0, nb = 0;
    int32_t *ta = read_ints(shared_path("golden/stories260K.p2.tokens"), &na);
    int32_t *tb = read_ints(shared_path("golden/stories260K.p3.tokens"), &nb);
    cera_engine *e = open_model(STORIES, 2, 256, CERA_KV_F16);
    cera_session *sa = NULL, *sb = NULL;
    cera_error err;
    if (!ta || !tb || !e || nb < na || cera_session_create(e, NULL, &sa, &err) ||
        cera_session_create(e, NULL, &sb, &err)) {
        CHECK(false, "setup (prompt lengths %zu and %zu: p3 not shorter)", na, nb);
        goto done;
    }
    const int nv = cera_engine_n_vocab(e);
    float *alone_a = eval_logits(e, ta, na, 0), *alone_b = eval_logits(e, tb, nb, 0);
    const cera_batch_item items[2] = {{sa, ta, na, true, 0}, {sb, tb, nb, true, 0}};
    CHECK(cera_batch_eval(e, items, 2, &err) == CERA_OK, "two-session batch: %s", err.message);
    if (alone_a && alone_b) {
        int diff = 0;
        for (size_t i = 0; i < na; i++) {
            const float *l = cera_session_logits(sa, (int)i);
            diff += !l || memcmp(l, alone_a + i * nv, (size_t)nv * sizeof(float)) != 0;
        }
        for (size_t i = 0; i < nb; i++) {
            const float *l = cera_session_logits(sb, (int)i);
            diff += !l || memcmp(l, alone_b + i * nv, (size_t)nv * sizeof(float)) != 0;
        }
        printf("two sessions in one batch vs alone: %d of %zu rows differ\n", diff, na + nb);
        CHECK(diff == 0, "%d rows of two sessions in one batch differ from each alone", diff);
        CHECK(cera_session_n_past(sa) == (int)na && cera_session_n_past(sb) == (int)nb, "positions");
    }
    free(alone_a);
    free(alone_b);
done:
    cera_session_free(sa);
    cera_session_free(sb);
    cera_engine_close(e);
    free(ta);
    free(tb);
}

static void test_truncate_and_kv_f32(void) {
    size_t n = 0;
    int32_t *tok = read_ints(shared_path("golden/stories260K.p3.tokens"), &n);
    cera_engine *e = open_model(STORIES, 1, 256, CERA_KV_F16);
    cera_engine *e32 = open_model(STORIES, 1, 256, CERA_KV_F32);
    cera_session *s = NULL;
    cera_error err;
    CHECK(tok, "token file missing");
    if (!tok || !e || !e32) goto done;
    if (cera_session_create(e, NULL, &s, &err)) {
        CHECK(0, "session: %s", err.message);
        goto done;
    }
    const int nv = cera_engine_n_vocab(e);
    float *full = eval_logits(e, tok, n, 0);
    /* 40 tokens, back to 10, then the rest: blocks are returned and taken again */
    CHECK(cera_session_eval(s, tok, 40, false, &err) == CERA_OK, "eval 40");
    CHECK(cera_session_truncate(s, 10, &err) == CERA_OK && cera_session_n_past(s) == 10, "truncate to 10");
    CHECK(cera_session_eval(s, tok + 10, n - 10, true, &err) == CERA_OK, "eval rest: %s", err.message);
    double w = 0;
    for (size_t i = 10; i < n && full; i++) {
        const float *l = cera_session_logits(s, (int)(i - 10));
        const double d = l ? rel_max_diff(l, full + i * nv, nv) : 1;
        if (d > w) w = d;
    }
    CHECK(w <= 1e-4, "re-evaluation after truncate differs by %.3g", w);
    float *f32 = eval_logits(e32, tok, n, 0);
    if (full && f32) {
        const double d = worst_diff(f32, full, n, nv);
        printf("KV F32 vs F16: %.2e\n", d);
        CHECK(d <= 5e-2, "F32 KV cache differs from F16 by %.3g", d);
        int top = 0;
        for (size_t t = 0; t < n; t++) top += argmax_f32(f32 + t * nv, nv) == argmax_f32(full + t * nv, nv);
        CHECK(top >= (int)(0.95 * n), "F32 KV: top token equal at %d/%zu", top, n);
    }
    free(full);
    free(f32);
done:
    cera_session_free(s);
    cera_engine_close(e);
    cera_engine_close(e32);
    free(tok);
}

/* An architecture cera does not model: synth-phi3 with every "phi3" renamed "phi9". */
static void test_unsupported_arch(void) {
    size_t size = 0;
    uint8_t *buf = read_file(shared_path("golden/synth-phi3-f32.gguf"), &size);
    CHECK(buf != NULL, "cannot read synth-phi3-f32.gguf");
    if (!buf) return;
    for (size_t i = 0; i + 4 <= size; i++)
        if (!memcmp(buf + i, "phi3", 4)) buf[i + 3] = '9';
    char path[] = "/tmp/cera-test-arch-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) {
        free(buf);
        return;
    }
    CHECK(write(fd, buf, size) == (ssize_t)size, "write %s", path);
    close(fd);
    free(buf);
    cera_engine *e = NULL;
    cera_error err;
    const cera_status st = cera_engine_open(path, NULL, &e, &err);
    CHECK(st == CERA_ERR_UNSUPPORTED && !e, "phi9: status %d", (int)st);
    CHECK(strstr(err.message, "'phi9'") != NULL, "phi9: message does not name it: %s", err.message);
    cera_engine_close(e);
    unlink(path);
}

static void test_errors(void) {
    test_unsupported_arch();
    cera_engine *e = NULL;
    cera_error err;
    CHECK(cera_engine_open(shared_path("golden/no-such-model.gguf"), NULL, &e, &err) == CERA_ERR_IO && !e,
          "missing file: %s", err.message);

    /* a block-type KV cache needs whole blocks per head: stories260K's heads of 8 are refused by
     * name; an unknown type is invalid */
    {
        cera_engine_params ep = cera_engine_default_params();
        ep.device = CERA_DEVICE_CPU;
        ep.kv_type = CERA_KV_F16;
        ep.kv_type_v = CERA_KV_Q4_0;
        cera_status st = cera_engine_open(shared_path(STORIES), &ep, &e, &err);
        CHECK(st == CERA_ERR_UNSUPPORTED && !e && strstr(err.message, "q4_0 V"),
              "CPU Q4_0 V of heads of 8: %d (%s)", (int)st, err.message);
        ep.kv_type_v = (cera_kv_type)9;
        st = cera_engine_open(shared_path(STORIES), &ep, &e, &err);
        CHECK(st == CERA_ERR_INVALID_ARG && !e, "V type 9: %d (%s)", (int)st, err.message);
        ep.kv_type_v = CERA_KV_AS_K;
        ep.kv_type = (cera_kv_type)7;
        st = cera_engine_open(shared_path(STORIES), &ep, &e, &err);
        CHECK(st == CERA_ERR_INVALID_ARG && !e, "KV type 7: %d (%s)", (int)st, err.message);
    }

    /* sizes that would overflow int arithmetic are refused at open */
    const int huge[3][3] = {{INT_MAX, 0, 0}, {256, INT_MAX, 0}, {(1 << 24) + 1, 0, 0}};
    for (int i = 0; i < 3; i++) {
        cera_engine_params ep = cera_engine_default_params();
        ep.device = CERA_DEVICE_CPU;
        ep.n_ctx = huge[i][0];
        ep.n_batch = huge[i][1];
        const cera_status st = cera_engine_open(shared_path(STORIES), &ep, &e, &err);
        CHECK(st == CERA_ERR_INVALID_ARG && !e && strstr(err.message, "exceeds"),
              "n_ctx %d n_batch %d: %d (%s)", ep.n_ctx, ep.n_batch, (int)st, err.message);
        cera_engine_close(e);
        e = NULL;
    }

    e = open_model(STORIES, 1, 32, CERA_KV_F16);
    cera_session *s = NULL;
    if (!e || cera_session_create(e, NULL, &s, &err)) goto done;
    cera_token toks[40];
    for (int i = 0; i < 40; i++) toks[i] = 1 + i;
    CHECK(cera_session_eval(s, toks, 40, false, &err) == CERA_ERR_CONTEXT_FULL && cera_session_n_past(s) == 0,
          "40 tokens into a context of 32");
    CHECK(cera_session_eval(s, toks, 32, false, &err) == CERA_OK && cera_session_n_past(s) == 32,
          "32 tokens fit");
    CHECK(cera_session_eval(s, toks, 1, false, &err) == CERA_ERR_CONTEXT_FULL, "one more token");
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK && cera_session_n_past(s) == 0, "clear");
    const cera_token bad[2] = {5, 100000};
    CHECK(cera_session_eval(s, bad, 2, false, &err) == CERA_ERR_INVALID_ARG && cera_session_n_past(s) == 0,
          "token out of range");
    const cera_token neg = -1;
    CHECK(cera_session_eval(s, &neg, 1, false, &err) == CERA_ERR_INVALID_ARG, "negative token");
    CHECK(cera_session_logits(s, 0) == NULL, "no logits after a failed eval");
done:
    cera_session_free(s);
    cera_engine_close(e);
}

typedef struct collect {
    cera_token ids[512];
    int n;
    char text[8192];
    size_t len;
    volatile int *cancel;
    int cancel_after;
    int n_final; /* calls with token -1 (held-back text after the last token) */
} collect;

static bool on_token(cera_token t, const char *piece, size_t len, void *user) {
    collect *c = user;
    if (t < 0)
        c->n_final++;
    else if (c->n < 512)
        c->ids[c->n++] = t;
    if (c->len + len < sizeof c->text) {
        memcpy(c->text + c->len, piece, len);
        c->len += len;
        c->text[c->len] = '\0';
    }
    if (c->cancel && c->n == c->cancel_after) *c->cancel = 1;
    return true;
}

static void test_generate(void) {
    size_t np = 0, ng = 0;
    int32_t *prompt = read_ints(shared_path("golden/stories260K.p1.tokens"), &np);
    int32_t *greedy = read_ints(shared_path("golden/stories260K.p1.greedy"), &ng);
    cera_engine *e = open_model(STORIES, 1, 512, CERA_KV_F16);
    cera_session *s = NULL;
    cera_error err;
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0;
    if (!prompt || !greedy || !e || cera_session_create(e, &sp, &s, &err)) {
        CHECK(false, "setup");
        goto done;
    }
    /* the tokenizer makes the golden prompt, BOS included */
    const char *text = "Once upon a time";
    cera_token toks[32];
    size_t nt = 0;
    CHECK(cera_tokenize(e, text, strlen(text), true, true, toks, 32, &nt, &err) == CERA_OK && nt == np &&
              !memcmp(toks, prompt, np * sizeof *toks),
          "tokenize \"%s\": %zu tokens", text, nt);

    collect *c = calloc(1, sizeof *c);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = (int)ng;
    int n_gen = 0;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, c, &n_gen, &err) == CERA_OK, "generate: %s",
          err.message);
    CHECK(n_gen == (int)ng && c->n == (int)ng && !memcmp(c->ids, greedy, ng * sizeof *greedy),
          "greedy generation differs from llama.cpp's (%d tokens)", n_gen);
    CHECK(cera_session_n_past(s) == (int)(np + ng - 1), "n_past %d", cera_session_n_past(s));

    CHECK(c->n_final == 0, "a final call without stop strings or unfinished characters");

    /* a stop string taken from the middle of that text ends generation right there: the
     * text before it is passed on, the stop string itself is not */
    char stop[16] = {0};
    const size_t full_len = c->len;
    char *full = malloc(full_len + 1);
    if (full) memcpy(full, c->text, full_len + 1);
    if (full_len > 60) memcpy(stop, c->text + 40, 8);
    const size_t stop_at = full && strstr(full, stop) ? (size_t)(strstr(full, stop) - full) : 0;
    const char *stops[1] = {stop};
    memset(c, 0, sizeof *c);
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "truncate");
    gp.n_predict = (int)ng;
    gp.stop = stops;
    gp.n_stop = 1;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, c, &n_gen, &err) == CERA_OK, "generate with stop");
    CHECK(full && stop_at > 0 && c->len == stop_at && !memcmp(c->text, full, stop_at) && n_gen < (int)ng &&
              c->n == n_gen && c->n_final == 0,
          "stop string '%s': %d tokens, %zu bytes (want the %zu before it)", stop, n_gen, c->len, stop_at);

    /* stop strings that begin in the text but never complete hold text back, and give it
     * all: mid-stream, or after the last token in one call with token -1 */
    char never_mid[16] = {0}, never_end[16] = {0};
    if (full_len > 60) {
        memcpy(never_mid, full + 40, 4);
        never_mid[4] = '\x01';
        memcpy(never_end, full + full_len - 3, 3);
        never_end[3] = '\x01';
    }
    const char *stops2[2] = {never_mid, never_end};
    memset(c, 0, sizeof *c);
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "truncate");
    gp.stop = stops2;
    gp.n_stop = 2;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, c, &n_gen, &err) == CERA_OK, "generate, held text");
    CHECK(full && c->len == full_len && !memcmp(c->text, full, full_len) && n_gen == (int)ng &&
              c->n == (int)ng && c->n_final == 1,
          "held-back text: %zu bytes of %zu, %d token calls, %d final", c->len, full_len, c->n, c->n_final);
    free(full);

    /* the cancel flag */
    volatile int cancel = 0;
    memset(c, 0, sizeof *c);
    c->cancel = &cancel;
    c->cancel_after = 3;
    gp.stop = NULL;
    gp.n_stop = 0;
    gp.cancel = &cancel;
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "truncate");
    CHECK(cera_generate(s, prompt, np, &gp, on_token, c, &n_gen, &err) == CERA_ERR_CANCELLED && n_gen == 3,
          "cancel after 3 tokens: %d", n_gen);
    free(c);
done:
    cera_session_free(s);
    cera_engine_close(e);
    free(prompt);
    free(greedy);
}

/* Two generations of 4 tokens (the second with no prompt) give the tokens of one of 8:
 * the last streamed token is evaluated before the continuation samples again. The same
 * when the first stops by its callback's false. */
static bool stop_after_4(cera_token t, const char *piece, size_t len, void *user) {
    on_token(t, piece, len, user);
    return ((collect *)user)->n < 4;
}

static void test_generate_continue(void) {
    size_t np = 0;
    int32_t *prompt = read_ints(shared_path("golden/stories260K.p1.tokens"), &np);
    cera_engine *e = open_model(STORIES, 1, 512, CERA_KV_F16);
    cera_session *s = NULL;
    cera_error err;
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0.8f; /* a seeded draw: the sampler's state must follow too */
    sp.sampler.seed = 1234;
    sp.sampler.repeat_penalty = 1.3f;
    collect *one = calloc(1, sizeof *one), *two = calloc(1, sizeof *two);
    if (!prompt || !e || !one || !two || cera_session_create(e, &sp, &s, &err)) {
        CHECK(false, "setup");
        goto done;
    }
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 8;
    int n1 = 0, n2 = 0, n3 = 0;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, one, &n1, &err) == CERA_OK && n1 == 8, "one call of 8");
    cera_session_free(s);
    s = NULL;
    if (cera_session_create(e, &sp, &s, &err)) goto done;
    gp.n_predict = 4;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, two, &n2, &err) == CERA_OK && n2 == 4, "first of 4");
    CHECK(cera_session_n_past(s) == (int)np + 3, "n_past %d before the continuation", cera_session_n_past(s));
    CHECK(cera_generate(s, NULL, 0, &gp, on_token, two, &n3, &err) == CERA_OK && n3 == 4, "second of 4: %s",
          err.message);
    CHECK(two->n == 8 && !memcmp(one->ids, two->ids, 8 * sizeof *one->ids) && !strcmp(one->text, two->text),
          "4 + 4 tokens differ from 8: '%s' vs '%s'", two->text, one->text);
    /* stopped by the callback, continued by a generation with no prompt */
    cera_session_free(s);
    s = NULL;
    if (cera_session_create(e, &sp, &s, &err)) goto done;
    memset(two, 0, sizeof *two);
    gp.n_predict = 8;
    CHECK(cera_generate(s, prompt, np, &gp, stop_after_4, two, &n2, &err) == CERA_OK && n2 == 4,
          "callback stop: %d", n2);
    gp.n_predict = 4;
    CHECK(cera_generate(s, NULL, 0, &gp, on_token, two, &n3, &err) == CERA_OK && n3 == 4, "continuation");
    CHECK(two->n == 8 && !memcmp(one->ids, two->ids, 8 * sizeof *one->ids),
          "callback stop + 4 differ from 8");
done:
    free(one);
    free(two);
    cera_session_free(s);
    cera_engine_close(e);
    free(prompt);
}

/* Truncating follows the timeline: the pending generated token is dropped and the
 * penalty history becomes the kept tokens' (a strong repeat penalty makes any leftover
 * history change the tokens); n_keep past n_past is an error. */
static void test_truncate_timeline(void) {
    size_t np = 0;
    int32_t *prompt = read_ints(shared_path("golden/stories260K.p1.tokens"), &np);
    cera_engine *e = open_model(STORIES, 1, 512, CERA_KV_F16);
    cera_session *s = NULL;
    cera_error err;
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0;
    sp.sampler.repeat_penalty = 2.0f;
    collect *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b), *c = calloc(1, sizeof *c);
    if (!prompt || np < 2 || !e || !a || !b || !c || cera_session_create(e, &sp, &s, &err)) {
        CHECK(false, "setup");
        goto done;
    }
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 12;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, a, NULL, &err) == CERA_OK && a->n == 12, "first");
    CHECK(cera_session_truncate(s, cera_session_n_past(s) + 1, &err) == CERA_ERR_INVALID_ARG,
          "truncate past n_past");
    /* cleared: the same prompt gives the same tokens */
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "truncate 0");
    CHECK(cera_generate(s, prompt, np, &gp, on_token, b, NULL, &err) == CERA_OK, "again");
    CHECK(b->n == 12 && !memcmp(a->ids, b->ids, 12 * sizeof *a->ids), "after truncate(0): '%s' vs '%s'",
          b->text, a->text);
    /* back to the prompt less its last token, which is then evaluated again */
    CHECK(cera_session_truncate(s, (int)np - 1, &err) == CERA_OK && cera_session_n_past(s) == (int)np - 1,
          "truncate to the prompt");
    CHECK(cera_generate(s, prompt + np - 1, 1, &gp, on_token, c, NULL, &err) == CERA_OK, "regenerate: %s",
          err.message);
    CHECK(c->n == 12 && !memcmp(a->ids, c->ids, 12 * sizeof *a->ids) &&
              cera_session_n_past(s) == (int)np + 11,
          "after truncate(%zu): '%s' vs '%s'", np - 1, c->text, a->text);
done:
    free(a);
    free(b);
    free(c);
    cera_session_free(s);
    cera_engine_close(e);
    free(prompt);
}

/* cera_session_set_sampler: invalid parameters are an error that keeps the old chain;
 * valid ones take effect (greedy then gives llama.cpp's greedy tokens). */
static void test_set_sampler(void) {
    size_t np = 0, ng = 0;
    int32_t *prompt = read_ints(shared_path("golden/stories260K.p1.tokens"), &np);
    int32_t *greedy = read_ints(shared_path("golden/stories260K.p1.greedy"), &ng);
    cera_engine *e = open_model(STORIES, 1, 512, CERA_KV_F16);
    cera_session *s = NULL;
    cera_error err;
    collect *c = calloc(1, sizeof *c);
    if (!prompt || !greedy || !e || !c || cera_session_create(e, NULL, &s, &err)) {
        CHECK(false, "setup");
        goto done;
    }
    cera_sampler_params sp = cera_sampler_default_params();
    sp.temp = 0;
    CHECK(cera_session_set_sampler(s, NULL, &err) == CERA_ERR_INVALID_ARG, "NULL params");
    sp.top_p = 2.0f;
    CHECK(cera_session_set_sampler(s, &sp, &err) == CERA_ERR_INVALID_ARG && strstr(err.message, "top_p"),
          "top_p 2: %s", err.message);
    sp.top_p = 0.95f;
    CHECK(cera_session_set_sampler(s, &sp, &err) == CERA_OK, "greedy: %s", err.message);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = (int)ng;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, c, NULL, &err) == CERA_OK && c->n == (int)ng &&
              !memcmp(c->ids, greedy, ng * sizeof *greedy),
          "greedy after set_sampler differs from llama.cpp's");
done:
    free(c);
    cera_session_free(s);
    cera_engine_close(e);
    free(prompt);
    free(greedy);
}

/* The comparison measures fail on non-finite logits (a NaN would pass any bound). */
static void test_compare_measures(void) {
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4};
    CHECK(rel_max_diff(a, b, 4) == 0 && kl_div(a, b, 4) == 0, "equal rows");
    a[2] = NAN;
    CHECK(isinf(rel_max_diff(a, b, 4)) && isinf(kl_div(a, b, 4)), "NaN in a row");
    CHECK(isinf(rel_max_diff(b, a, 4)) && isinf(kl_div(b, a, 4)), "NaN in the reference");
    a[2] = INFINITY;
    CHECK(isinf(rel_max_diff(a, b, 4)) && isinf(kl_div(a, b, 4)), "infinity in a row");
}

/* The engine's token facts and cera_token_to_piece, against the files' metadata and
 * llama.cpp's vocabulary rules (EOG: EOS plus <|endoftext|>-like control tokens). */
static void check_piece(cera_engine *e, cera_token t, bool special, const char *want) {
    char buf[64];
    const int n = cera_token_to_piece(e, t, buf, sizeof buf, special);
    CHECK(n == (int)strlen(want) && !memcmp(buf, want, strlen(want)),
          "piece of %d (special %d): %d bytes '%.*s', want '%s'", t, (int)special, n, n > 0 && n < 64 ? n : 0,
          buf, want);
}

static void test_engine_info(void) {
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_error err;
    CHECK(cera_engine_open(shared_path(STORIES), &ep, &e, &err) == CERA_OK, "open: %s", err.message);
    if (e) {
        CHECK(cera_engine_n_ctx(e) == 2048, "n_ctx %d: the model's 2048", cera_engine_n_ctx(e));
        CHECK(cera_engine_bos(e) == 1 && cera_engine_eos(e) == 2, "bos %d eos %d", cera_engine_bos(e),
              cera_engine_eos(e));
        CHECK(cera_engine_is_eog(e, 2) && !cera_engine_is_eog(e, 1) && !cera_engine_is_eog(e, 403) &&
                  !cera_engine_is_eog(e, -1) && !cera_engine_is_eog(e, 512),
              "stories260K EOG");
        check_piece(e, 403, false, " Once");
        check_piece(e, 378, false, " time");
        check_piece(e, 1, true, "<s>");
        check_piece(e, 1, false, "");
        char small[2];
        CHECK(cera_token_to_piece(e, 403, small, sizeof small, false) == 5,
              "piece longer than cap: its length");
        CHECK(cera_token_to_piece(e, -1, small, sizeof small, false) == -1 &&
                  cera_token_to_piece(e, 512, small, sizeof small, false) == -1,
              "invalid tokens");
        cera_engine_close(e);
        e = NULL;
    }
    ep.n_ctx = 256;
    CHECK(cera_engine_open(shared_path(STORIES), &ep, &e, &err) == CERA_OK && cera_engine_n_ctx(e) == 256,
          "n_ctx 256");
    cera_engine_close(e);
    e = NULL;

    const char *smol = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!file_exists(smol)) {
        printf("skipped: %s not present (scripts/setup.sh fetches it)\n", smol);
        return;
    }
    ep.n_ctx = 0;
    CHECK(cera_engine_open(smol, &ep, &e, &err) == CERA_OK, "open SmolLM2: %s", err.message);
    if (!e) return;
    CHECK(cera_engine_n_ctx(e) == 4096, "SmolLM2 n_ctx %d: its 8192 capped at 4096", cera_engine_n_ctx(e));
    CHECK(cera_engine_bos(e) == 1 && cera_engine_eos(e) == 2, "SmolLM2 bos %d eos %d", cera_engine_bos(e),
          cera_engine_eos(e));
    CHECK(cera_engine_is_eog(e, 2) && cera_engine_is_eog(e, 0) && !cera_engine_is_eog(e, 1) &&
              !cera_engine_is_eog(e, 19556),
          "SmolLM2 EOG: <|im_end|> and <|endoftext|>, not <|im_start|>");
    check_piece(e, 19556, false, "Hello");
    check_piece(e, 905, false, " world");
    check_piece(e, 2, true, "<|im_end|>");
    check_piece(e, 2, false, "");
    cera_engine_close(e);
}

int main(void) {
    test_compare_measures();
    test_batch_vs_steps(STORIES, "golden/stories260K.p3.tokens");
    test_batch_vs_steps("golden/synth-llama-f32.gguf", "golden/synth-llama-f32.tokens");
    test_batch_vs_steps("golden/synth-qwen3-q8_0.gguf", "golden/synth-qwen3-q8_0.tokens");
    test_batch_vs_steps("golden/synth-llama-q4_1.gguf", "golden/synth-llama-q4_1.tokens");
    test_batch_vs_steps("golden/synth-llama-q4_k_m.gguf", "golden/synth-llama-q4_k_m.tokens");
    /* LFM2: the conv state carried across one-token steps and chunks gives the same bits */
    test_batch_vs_steps("golden/synth-lfm2-f32.gguf", "golden/synth-lfm2-f32.tokens");
    test_batch_vs_steps("golden/synth-lfm2-q8_0.gguf", "golden/synth-lfm2-q8_0.tokens");
    /* Gemma 3: sliding-window layers (the window moves past dropped blocks one step at a
     * time, and masks keys inside the batch's tiles) */
    test_batch_vs_steps("golden/synth-gemma3-f32.gguf", "golden/synth-gemma3-f32.tokens");
    test_batch_vs_steps("golden/synth-gemma3-q8_0.gguf", "golden/synth-gemma3-q8_0.tokens");
    /* Phi-3: Q, K, V and gate/up as row ranges of the fused attn_qkv and ffn_up */
    test_batch_vs_steps("golden/synth-phi3-f32.gguf", "golden/synth-phi3-f32.tokens");
    test_batch_vs_steps("golden/synth-phi3-q8_0.gguf", "golden/synth-phi3-q8_0.tokens");
    test_long_batch_vs_steps("golden/synth-qwen2-f32.gguf", "golden/synth-qwen2-f32.tokens");
    test_long_batch_vs_steps("golden/synth-gemma3-f32.gguf", "golden/synth-gemma3-f32.tokens");
    test_threads();
    test_concurrent_sessions();
    test_two_sequences();
    test_truncate_and_kv_f32();
    test_errors();
    test_generate();
    test_generate_continue();
    test_truncate_timeline();
    test_set_sampler();
    test_engine_info();
    return test_finish();
}
