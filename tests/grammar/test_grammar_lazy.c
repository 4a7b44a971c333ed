/*
 * test_grammar_lazy.c — lazy grammars through the public API (cera_session_set_grammar_lazy):
 * greedy generations on stories260K compared with the same generation without a grammar.
 * Until the trigger the tokens are the free ones; from the trigger on the grammar writes the
 * rest. Cases: a trigger word split across two tokens, a word never emitted (the whole free
 * generation, state WAITING), a trigger token, truncate going back to waiting, a fork keeping
 * the partly seen word, bad triggers refused; on SmolLM2 (when fetched) a special token
 * (<|im_start|>, forced by a logit bias) as a trigger word and as a trigger token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "engine_util.h"
#include "testutil.h"

#define MAX_GEN 64

typedef struct gen_out {
    cera_token tok[MAX_GEN];
    int n;
} gen_out;

static bool on_token(cera_token t, const char *piece, size_t len, void *user) {
    (void)piece, (void)len;
    gen_out *g = user;
    if (t >= 0 && g->n < MAX_GEN) g->tok[g->n++] = t;
    return true;
}

/* The text of tokens (special tokens rendered) into buf. */
static size_t text_of(cera_engine *e, const cera_token *t, int n, char *buf, size_t cap) {
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const int m = cera_token_to_piece(e, t[i], NULL, 0, true);
        if (m <= 0 || k + (size_t)m + 1 > cap) continue;
        cera_token_to_piece(e, t[i], buf + k, (size_t)m, true);
        k += (size_t)m;
    }
    buf[k] = 0;
    return k;
}

static cera_session *greedy(cera_engine *e, const cera_logit_bias *bias, int n_bias) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0.0f;
    sp.sampler.logit_bias = bias;
    sp.sampler.n_logit_bias = n_bias;
    cera_session *s = NULL;
    cera_error err;
    CHECK(cera_session_create(e, &sp, &s, &err) == CERA_OK, "%s", err.message);
    return s;
}

/* Generates n tokens after prompt in s into out. */
static void gen(cera_session *s, const cera_token *prompt, size_t np, int n, gen_out *out) {
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = n;
    out->n = 0;
    cera_error err;
    CHECK(cera_generate(s, prompt, np, &gp, on_token, out, NULL, &err) == CERA_OK, "%s", err.message);
}

static void stories(cera_engine *e) {
    cera_error err;
    cera_token prompt[32];
    size_t np = 0;
    const char *p = "Once upon a time";
    CHECK(cera_tokenize(e, p, strlen(p), true, false, prompt, 32, &np, &err) == CERA_OK, "%s", err.message);
    static gen_out free_run, out;
    cera_session *s = greedy(e, NULL, 0);
    if (!s) return;
    gen(s, prompt, np, 24, &free_run);
    CHECK(free_run.n == 24, "free generation: %d tokens", free_run.n);
    char free_text[1024], text[1024];
    text_of(e, free_run.tok, free_run.n, free_text, sizeof free_text);

    /* a word made of the end of token 4 and the whole of token 5 */
    char a[128], b[128];
    const size_t la = text_of(e, free_run.tok + 4, 1, a, sizeof a);
    const size_t lb = text_of(e, free_run.tok + 5, 1, b, sizeof b);
    CHECK(la >= 2 && lb >= 1, "tokens 4 and 5: '%s' '%s'", a, b);
    char word[256];
    snprintf(word, sizeof word, "%s%s", a + la - 2, b);
    char gbnf[512];
    snprintf(gbnf, sizeof gbnf, "root ::= \"%s\" \"!!!\"", word);
    const cera_grammar_trigger tw = {word, -1};
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_set_grammar_lazy(s, gbnf, strlen(gbnf), &tw, 1, &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_WAITING, "state %d",
          (int)cera_session_grammar_state(s));
    gen(s, prompt, np, 24, &out);
    text_of(e, out.tok, out.n, text, sizeof text);
    char want[1100];
    char head[1024];
    text_of(e, free_run.tok, 6, head, sizeof head);
    snprintf(want, sizeof want, "%s!!!", head);
    CHECK(!strcmp(text, want), "split trigger '%s': '%s', want '%s'", word, text, want);
    CHECK(out.n >= 6 && !memcmp(out.tok, free_run.tok, 6 * sizeof *out.tok),
          "the tokens before the trigger changed");
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_COMPLETE, "state %d",
          (int)cera_session_grammar_state(s));

    /* truncate: waiting again, the same run */
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_WAITING, "truncate: state %d",
          (int)cera_session_grammar_state(s));
    gen(s, prompt, np, 24, &out);
    text_of(e, out.tok, out.n, text, sizeof text);
    CHECK(!strcmp(text, want), "after truncate: '%s'", text);

    /* a fork taken after token 4 (the word's first bytes seen) still triggers */
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "%s", err.message);
    gen(s, prompt, np, 5, &out);
    cera_session *f = NULL;
    CHECK(cera_session_fork(s, &f, &err) == CERA_OK, "%s", err.message);
    if (f) {
        gen_out rest;
        gen(f, NULL, 0, 20, &rest);
        text_of(e, rest.tok, rest.n, text, sizeof text);
        char tail[1024];
        snprintf(tail, sizeof tail, "%s!!!", b);
        CHECK(!strcmp(text, tail), "fork: '%s', want '%s'", text, tail);
        cera_session_free(f);
    }

    /* a word never written: the free generation, still waiting */
    const cera_grammar_trigger never = {"zqzqzq", -1};
    const char *g2 = "root ::= \"zqzqzq\"";
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_set_grammar_lazy(s, g2, strlen(g2), &never, 1, &err) == CERA_OK, "%s", err.message);
    gen(s, prompt, np, 24, &out);
    text_of(e, out.tok, out.n, text, sizeof text);
    CHECK(!strcmp(text, free_text), "untriggered: '%s', want '%s'", text, free_text);
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_WAITING, "state %d",
          (int)cera_session_grammar_state(s));

    /* a trigger token: token 3 of the free run */
    const cera_grammar_trigger tt = {NULL, free_run.tok[3]};
    snprintf(gbnf, sizeof gbnf, "root ::= <[%d]> \"!!!\"", (int)free_run.tok[3]);
    CHECK(cera_session_truncate(s, 0, &err) == CERA_OK, "%s", err.message);
    CHECK(cera_session_set_grammar_lazy(s, gbnf, strlen(gbnf), &tt, 1, &err) == CERA_OK, "%s", err.message);
    gen(s, prompt, np, 24, &out);
    text_of(e, out.tok, out.n, text, sizeof text);
    text_of(e, free_run.tok, 4, head, sizeof head);
    snprintf(want, sizeof want, "%s!!!", head);
    CHECK(!strcmp(text, want), "token trigger: '%s', want '%s'", text, want);

    /* bad triggers: refused, the grammar unchanged */
    const cera_grammar_trigger bad[2] = {{"", -1}, {NULL, 1 << 30}};
    CHECK(cera_session_set_grammar_lazy(s, g2, strlen(g2), &bad[0], 1, &err) == CERA_ERR_INVALID_ARG,
          "an empty word accepted");
    CHECK(cera_session_set_grammar_lazy(s, g2, strlen(g2), &bad[1], 1, &err) == CERA_ERR_INVALID_ARG,
          "a token past the vocabulary accepted");
    CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_COMPLETE, "a refused grammar changed the state: %d",
          (int)cera_session_grammar_state(s));
    cera_session_free(s);
}

/* A special token as the trigger, as a word (its text) and as a token. */
static void special(cera_engine *e) {
    cera_error err;
    cera_token start = -1, prompt[8];
    size_t n = 0;
    CHECK(cera_tokenize(e, "<|im_start|>", 12, false, true, &start, 1, &n, &err) == CERA_OK && n == 1, "%s",
          err.message);
    CHECK(cera_tokenize(e, "Hello", 5, false, false, prompt, 8, &n, &err) == CERA_OK, "%s", err.message);
    const cera_logit_bias force = {start, 100.0f};
    const char *gbnf = "root ::= \"<|im_start|>\" \"!!!\"";
    const cera_grammar_trigger trig[2] = {{"<|im_start|>", -1}, {NULL, start}};
    for (int k = 0; k < 2; k++) {
        cera_session *s = greedy(e, &force, 1);
        if (!s) return;
        CHECK(cera_session_set_grammar_lazy(s, gbnf, strlen(gbnf), &trig[k], 1, &err) == CERA_OK, "%s",
              err.message);
        static gen_out out;
        gen(s, prompt, n, 16, &out);
        char text[512];
        text_of(e, out.tok, out.n, text, sizeof text);
        CHECK(!strcmp(text, "<|im_start|>!!!"), "special trigger (%s): '%s'", k ? "token" : "word", text);
        CHECK(cera_session_grammar_state(s) == CERA_GRAMMAR_COMPLETE, "state %d",
              (int)cera_session_grammar_state(s));
        cera_session_free(s);
    }
}

int main(void) {
    cera_engine *st = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    if (!st) return test_finish();
    stories(st);
    cera_engine_close(st);
    const char *smol = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (file_exists(smol)) {
        cera_engine_params ep = cera_engine_default_params();
        ep.n_threads = 2;
        ep.n_ctx = 256;
        ep.device = CERA_DEVICE_CPU;
        cera_engine *sm = NULL;
        cera_error err;
        CHECK(cera_engine_open(smol, &ep, &sm, &err) == CERA_OK, "%s", err.message);
        if (sm) special(sm);
        cera_engine_close(sm);
    } else {
        fprintf(stderr, "note: %s not fetched: stories260K only\n", smol);
    }
    return test_finish();
}
