/*
 * test_speculative.c — speculative decoding in cera_generate (n-gram lookup and a draft
 * model's session): the tokens must be those of plain decoding, bit for bit on the CPU, since
 * each draft is kept only while the session's own sampler, drawing in order with its grammar,
 * penalties and RNG, picks it (so the target distribution is exactly the plain one, sampled
 * or greedy):
 *   - stories260K (llama), n-gram lookup of 2, CERA_SPEC_AUTO and a draft model (a second engine on the same
 *     file), greedy and sampled (temperature 0.9, top-k 40, a repeat penalty, seeds 1-3): the
 *     same tokens as without, and the greedy self-draft keeps nearly every draft;
 *   - n_predict cut inside a run of accepted drafts, then a second call with no prompt: both
 *     calls' tokens equal plain decoding's (the last token stays pending as without drafts);
 *   - a grammar (lower-case words and spaces): the same constrained text;
 *   - stop strings: the same text up to the stop;
 *   - synth Gemma 3 (sliding-window layers) the same; synth LFM2 (a recurrent state, which cannot
 *     be cut back) decodes plainly, drafting nothing;
 *   - the same through the batch API (cera_session_draft, an item's drafts, cera_session_verify),
 *     three sessions together, each equal to its plain decoding alone;
 *   - refused: the session as its own draft, an n-gram below CERA_SPEC_AUTO, a draft of another vocabulary
 *     (SmolLM2's, when scripts/setup.sh fetched it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "engine_util.h"
#include "testutil.h"

#define N_GEN 96

typedef struct collect {
    cera_token tok[512];
    int n;
    char text[8192];
    size_t len;
} collect;

static bool on_token(cera_token t, const char *piece, size_t len, void *user) {
    collect *c = user;
    if (t >= 0 && c->n < 512) c->tok[c->n++] = t;
    if (c->len + len < sizeof c->text) memcpy(c->text + c->len, piece, len), c->len += len;
    return true;
}

static cera_session *new_session(cera_engine *e, float temp, uint32_t seed) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = temp;
    sp.sampler.top_k = 40;
    if (temp > 0) { /* sampled runs with a repeat penalty (greedy ones as the draft picks: argmax) */
        sp.sampler.repeat_penalty = 1.15f;
        sp.sampler.penalty_last_n = 32;
    }
    sp.sampler.seed = seed;
    cera_session *s = NULL;
    cera_error err = {0};
    CHECK(!cera_session_create(e, &sp, &s, &err), "session: %s", err.message);
    return s;
}

/* Generates from the prompt: n_predict tokens (two calls of n1 and n - n1 when n1 > 0), with
 * spec_ngram / draft, an optional grammar and stop string; the drafted / accepted counts. */
static void gen(cera_engine *e, float temp, uint32_t seed, const cera_token *prompt, int n_prompt, int n,
                int n1, int ngram, cera_session *draft, const char *grammar, const char *stop, collect *out,
                int *drafted, int *accepted) {
    memset(out, 0, sizeof *out);
    cera_session *s = new_session(e, temp, seed);
    if (!s) return;
    cera_error err = {0};
    if (grammar)
        CHECK(!cera_session_set_grammar(s, grammar, strlen(grammar), &err), "grammar: %s", err.message);
    cera_generate_params gp = cera_generate_default_params();
    gp.spec_ngram = ngram;
    gp.draft = draft;
    gp.draft_max = 8;
    const char *stops[1] = {stop};
    gp.stop = stop ? stops : NULL;
    gp.n_stop = stop ? 1 : 0;
    int d = 0, a = 0;
    gp.n_drafted = &d;
    gp.n_accepted = &a;
    *drafted = *accepted = 0;
    for (int call = 0; call < (n1 > 0 ? 2 : 1); call++) {
        gp.n_predict = n1 > 0 ? (call ? n - n1 : n1) : n;
        const cera_status st = cera_generate(s, call ? NULL : prompt, call ? 0 : (size_t)n_prompt, &gp,
                                             on_token, out, NULL, &err);
        CHECK(st == CERA_OK, "generate: %s", err.message);
        *drafted += d, *accepted += a;
    }
    cera_session_free(s);
}

static bool same(const collect *a, const collect *b) {
    return a->n == b->n && !memcmp(a->tok, b->tok, sizeof(cera_token) * (size_t)a->n) && a->len == b->len &&
           !memcmp(a->text, b->text, a->len);
}

/* Plain against n-gram lookup and (when draft) a draft model, with the options given. */
static void compare(const char *what, cera_engine *e, cera_session *draft, float temp, uint32_t seed,
                    const cera_token *prompt, int n_prompt, int n1, const char *grammar, const char *stop,
                    bool expect_drafts) {
    collect plain, spec;
    int d, a;
    gen(e, temp, seed, prompt, n_prompt, N_GEN, n1, 0, NULL, grammar, stop, &plain, &d, &a);
    static const char *const kinds[3] = {"n-gram", "auto", "draft"};
    for (int k = 0; k < (draft ? 3 : 2); k++) {
        gen(e, temp, seed, prompt, n_prompt, N_GEN, n1,
            k == 0   ? 2
            : k == 1 ? CERA_SPEC_AUTO
                     : 0,
            k == 2 ? draft : NULL, grammar, stop, &spec, &d, &a);
        printf("%-34s %-6s %d tokens, %d drafted, %d accepted: %s\n", what, kinds[k], spec.n, d, a,
               same(&plain, &spec) ? "the same as plain" : "DIFFERENT");
        CHECK(same(&plain, &spec), "%s (%s): speculative tokens differ from plain decoding", what, kinds[k]);
        /* expect_drafts: the draft model at least drafts (n-gram lookup may find nothing);
         * else nothing may be drafted (a recurrent model) */
        CHECK(!expect_drafts || k < 2 || d > 0, "%s (draft): nothing drafted", what);
        CHECK(expect_drafts || d == 0, "%s (%s): %d drafted where none can be", what, kinds[k], d);
        if (k == 2 && temp == 0.0f && !grammar && !stop) /* (a stop ends inside a run of drafts) */
            CHECK(a * 10 >= d * 9, "%s: a greedy self-draft kept %d of %d", what, a, d);
    }
}

/* Speculation over the batch API, as `cera serve` runs it: three sessions (greedy, sampled,
 * sampled with a grammar) decoded together, each step drafting after its next token
 * (cera_session_draft with n_match), one cera_batch_eval of [next, drafts] items,
 * cera_session_verify for the items with drafts and cera_session_sample for the others. Each
 * session's tokens must equal its plain decoding alone; returns the drafts tried. */
static int batch_spec(cera_engine *e, const cera_token *prompt, int np, int n_match) {
    enum { NS = 3, N = 64, DMAX = 8 };
    static const float temp[NS] = {0.0f, 0.9f, 0.9f};
    static const char *const grammar[NS] = {NULL, NULL, "root ::= [a-z ,.]+"};
    collect plain[NS];
    int d, a, n_drafted = 0, n_kept = 0;
    cera_session *s[NS];
    cera_token got[NS][N + DMAX + 1], buf[NS][DMAX + 1], next[NS];
    int n_got[NS] = {0};
    bool live[NS];
    cera_error err = {0};
    for (int i = 0; i < NS; i++) {
        gen(e, temp[i], 11 + (uint32_t)i, prompt, np, N, 0, 0, NULL, grammar[i], NULL, &plain[i], &d, &a);
        s[i] = new_session(e, temp[i], 11 + (uint32_t)i);
        if (!s[i]) return 0;
        if (grammar[i])
            CHECK(!cera_session_set_grammar(s[i], grammar[i], strlen(grammar[i]), &err), "grammar: %s",
                  err.message);
        CHECK(!cera_session_eval(s[i], prompt, (size_t)np, false, &err), "prompt: %s", err.message);
        next[i] = cera_session_sample(s[i]);
        live[i] = true;
    }
    for (int step = 0; step < 2 * N; step++) {
        cera_batch_item items[NS];
        int idx[NS], n = 0, n_live = 0;
        for (int i = 0; i < NS; i++) {
            /* a sequence ends as cera_generate's: at an end of generation or N tokens */
            if (live[i] && (next[i] < 0 || cera_engine_is_eog(e, next[i]) || n_got[i] >= N)) live[i] = false;
            n_live += live[i];
        }
        for (int i = 0; i < NS; i++) {
            if (!live[i]) continue;
            got[i][n_got[i]++] = next[i];
            buf[i][0] = next[i];
            int k = n_got[i] < N
                        ? cera_session_draft(s[i], next[i], n_match, NULL, n_live - 1, buf[i] + 1, DMAX)
                        : 0;
            n_drafted += k;
            items[n] = (cera_batch_item){s[i], buf[i], (size_t)k + 1, false, k};
            idx[n++] = i;
        }
        if (n == 0) break;
        CHECK(!cera_batch_eval(e, items, n, &err), "batch: %s", err.message);
        for (int j = 0; j < n; j++) {
            const int i = idx[j];
            if (items[j].n_draft == 0) {
                next[i] = cera_session_sample(s[i]);
                continue;
            }
            cera_token out[DMAX + 1];
            int n_out = 0;
            CHECK(!cera_session_verify(s[i], out, &n_out, &err) && n_out >= 1, "verify: %s", err.message);
            CHECK(n_out <= items[j].n_draft + 1, "verify: %d tokens for %d drafts", n_out, items[j].n_draft);
            n_kept += n_out - 1;
            for (int m = 0; m + 1 < n_out && n_got[i] < N + DMAX; m++) got[i][n_got[i]++] = out[m];
            next[i] = n_out > 0 ? out[n_out - 1] : -1;
            /* the row each token was drawn from stays readable */
            CHECK(cera_session_logits(s[i], n_out - 1) != NULL && cera_session_logits(s[i], -1) != NULL,
                  "verify: the rows drawn from");
        }
    }
    for (int i = 0; i < NS; i++) {
        int n_cmp = n_got[i] < N ? n_got[i] : N;
        const bool eq =
            n_cmp == plain[i].n && !memcmp(got[i], plain[i].tok, sizeof(cera_token) * (size_t)n_cmp);
        printf("batch API, n_match %d, session %d: %d tokens (%d drafted, %d kept in all): %s\n", n_match, i,
               n_cmp, n_drafted, n_kept, eq ? "the same as plain" : "DIFFERENT");
        CHECK(eq, "batch API session %d (n_match %d): tokens differ from plain decoding", i, n_match);
        cera_session_free(s[i]);
    }
    return n_drafted;
}

int main(void) {
    cera_engine *e = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    cera_engine *de = test_open_engine("models/stories260K.gguf", CERA_DEVICE_CPU);
    if (!e || !de) return test_finish();
    cera_session *draft = new_session(de, 0.0f, 0);
    cera_token prompt[64];
    size_t n_prompt = 0;
    cera_error err = {0};
    const char *text = "Once upon a time, there was a little girl. Once upon a time, there was a";
    CHECK(!cera_tokenize(e, text, strlen(text), true, false, prompt, 64, &n_prompt, &err), "tokenize: %s",
          err.message);
    const int np = (int)n_prompt;
    compare("stories260K greedy", e, draft, 0.0f, 0, prompt, np, 0, NULL, NULL, true);
    for (uint32_t seed = 1; seed <= 3; seed++) {
        char what[64];
        snprintf(what, sizeof what, "stories260K sampled, seed %u", seed);
        compare(what, e, draft, 0.9f, seed, prompt, np, 0, NULL, NULL, true);
    }
    compare("stories260K greedy, 2 calls (37+)", e, draft, 0.0f, 0, prompt, np, 37, NULL, NULL, true);
    compare("stories260K sampled, 2 calls (29+)", e, draft, 0.9f, 7, prompt, np, 29, NULL, NULL, true);
    compare("stories260K grammar", e, draft, 0.9f, 4, prompt, np, 0, "root ::= [a-z ]+", NULL, true);
    CHECK(batch_spec(e, prompt, np, 2) > 0, "batch API: nothing drafted by a 2-gram lookup");
    batch_spec(e, prompt, np, CERA_SPEC_AUTO);
    compare("stories260K stop \".\"", e, draft, 0.0f, 0, prompt, np, 0, NULL, ".", true);
    compare("stories260K sampled, stop \" the\"", e, draft, 0.9f, 5, prompt, np, 0, NULL, " the", true);

    /* refusals */
    cera_session *s = new_session(e, 0.0f, 0);
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = 4;
    gp.draft = s;
    CHECK(s && cera_generate(s, prompt, n_prompt, &gp, NULL, NULL, NULL, &err) == CERA_ERR_INVALID_ARG,
          "the session as its own draft: %s", err.message);
    gp.draft = NULL;
    gp.spec_ngram = -2;
    CHECK(s && cera_generate(s, prompt, n_prompt, &gp, NULL, NULL, NULL, &err) == CERA_ERR_INVALID_ARG,
          "a negative n-gram: %s", err.message);
    /* a draft of another vocabulary: SmolLM2's session drafting for stories260K's */
    const char *smol_path = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    cera_engine *smol = NULL;
    cera_session *ss = NULL;
    if (file_exists(smol_path)) {
        cera_engine_params ep = cera_engine_default_params();
        ep.n_threads = 2;
        ep.n_ctx = 256;
        CHECK(!cera_engine_open(smol_path, &ep, &smol, &err), "SmolLM2: %s", err.message);
        ss = smol ? new_session(smol, 0.0f, 0) : NULL;
        gp.spec_ngram = 0;
        gp.draft = ss;
        CHECK(ss && cera_generate(s, prompt, n_prompt, &gp, NULL, NULL, NULL, &err) == CERA_ERR_INVALID_ARG &&
                  strstr(err.message, "vocabulary"),
              "a draft of another vocabulary: %s", err.message);
    }
    cera_session_free(ss);
    cera_engine_close(smol);
    cera_session_free(s);
    cera_engine *other = test_open_engine("golden/synth-lfm2-q8_0.gguf", CERA_DEVICE_CPU);
    cera_engine *g3 = test_open_engine("golden/synth-gemma3-q8_0.gguf", CERA_DEVICE_CPU);
    cera_engine *g3d = test_open_engine("golden/synth-gemma3-q8_0.gguf", CERA_DEVICE_CPU);
    cera_session *g3ds = g3d ? new_session(g3d, 0.0f, 0) : NULL;

    /* synth Gemma 3 (sliding window) and synth LFM2 (recurrent: no drafts) */
    if (g3) {
        cera_token p3[40];
        for (int i = 0; i < 40; i++) p3[i] = prompt[i % np];
        compare("synth-gemma3 greedy", g3, g3ds, 0.0f, 0, p3, 40, 0, NULL, NULL, true);
        compare("synth-gemma3 sampled", g3, g3ds, 0.9f, 2, p3, 40, 0, NULL, NULL, true);
    }
    if (other) compare("synth-lfm2 (recurrent)", other, NULL, 0.0f, 0, prompt, np, 0, NULL, NULL, false);
    cera_session_free(g3ds);
    cera_engine_close(g3d);
    cera_engine_close(g3);
    cera_engine_close(other);
    cera_session_free(draft);
    cera_engine_close(de);
    cera_engine_close(e);
    return test_finish();
}
