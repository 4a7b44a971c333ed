/*
 * run.c — `cera run`: generate text from a prompt, streamed to stdout as it comes
 * (the prompt is not echoed), with the load time, the prompt's progress (on a terminal),
 * the time to the first token and the speeds on stderr.
 *
 * The prompt is evaluated first (timed on its own), then cera_generate continues from
 * its logits with llama.cpp's default sampler chain; --temp 0 is greedy. With --ids
 * only the generated token ids are printed, on one line, each preceded by a space.
 * Ctrl-C stops the generation (what came so far stays printed). With a grammar option
 * (--grammar, --grammar-file, -j/--json-schema, --json) every token is one the grammar
 * allows; generation also ends where it allows nothing more (said on stderr when the match
 * was not complete). --prompt-cache FILE reuses and saves the evaluated prompt (cache_reuse).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli.h"
#include "gen.h"
#include "prompt.h"

#define RUN_GROUPS                                                                                           \
    (CLI_G_MODEL | CLI_G_PROMPT | CLI_G_SAMPLE | CLI_G_GEN | CLI_G_LORA | CLI_G_GRAMMAR | CLI_G_SPEC)

typedef struct run_state {
    bool ids;
    double t_first;    /* when the first token came (0: none yet) */
    const char *cache; /* --prompt-cache FILE */
    bool cache_ro;     /* --prompt-cache-ro */
} run_state;

static int run_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    run_state *rs = user;
    if (!strcmp(argv[*i], "--ids")) {
        rs->ids = true;
        return 1;
    }
    if (!strcmp(argv[*i], "--prompt-cache")) return cli_take_value(cmd, argc, argv, i, &rs->cache);
    if (!strcmp(argv[*i], "--prompt-cache-ro")) {
        rs->cache_ro = true;
        return 1;
    }
    return 0;
}

/* --prompt-cache FILE (llama.cpp's): a session saved there by an earlier run is loaded and
 * the part of its timeline this prompt starts with is kept (the prompt's last token is
 * evaluated again when nothing follows it, for its logits; a model with recurrent layers
 * keeps all or nothing); the RNG then restarts from this run's seed, so the output is the
 * one a run without the cache gives. Returns how many prompt tokens need no eval; a file that
 * cannot be used is said on stderr and the prompt is evaluated whole. */
static size_t cache_reuse(cera_session *s, const cera_sampler_params *sp, const char *path,
                          const cera_token *toks, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* not made yet */
    fclose(f);
    cera_error err = {0};
    if (cera_session_load(s, path, &err)) {
        fprintf(stderr, "cera: --prompt-cache %s not used: %s\n", path, err.message);
        cera_session_truncate(s, 0, &err);
        return 0;
    }
    const cera_token *have = cera_session_tokens(s);
    const size_t n_have = (size_t)cera_session_n_past(s);
    size_t m = 0;
    while (m < n_have && m < n && have[m] == toks[m]) m++;
    size_t keep = m == n && n == n_have ? n : m < n ? m : n - 1;
    if (keep != n_have && cera_session_truncate(s, (int)keep, &err)) {
        cera_session_truncate(s, 0, &err);
        keep = 0;
    }
    if (cera_session_set_sampler(s, sp, &err)) {
        fprintf(stderr, "cera: --prompt-cache %s not used: %s\n", path, err.message);
        cera_session_truncate(s, 0, &err);
        return 0;
    }
    fprintf(stderr, "cera: --prompt-cache %s: %zu of the prompt's %zu tokens reused\n", path, keep, n);
    return keep;
}

static bool on_token(cera_token token, const char *piece, size_t len, void *user) {
    run_state *rs = user;
    if (rs->t_first == 0 && token >= 0) rs->t_first = cli_now();
    if (rs->ids) {
        if (token >= 0) printf(" %d", token); /* -1: held-back text only, no token */
    } else {
        fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    return true;
}

int cmd_run(int argc, char **argv) {
    cli_args a;
    cli_args_init(&a);
    run_state rs = {false, 0, NULL, false};
    int rc = cli_parse(
        "run", RUN_GROUPS, argc, argv, &a, run_extra, &rs,
        "usage: cera run -m MODEL (-p TEXT | -f FILE) [options]\n\n"
        "Generates text after the prompt and streams it to stdout; times and speeds go to stderr.\n",
        "  --ids                 print the generated token ids instead of text\n"
        "  --prompt-cache FILE   reuse the prompt's start from the session saved in FILE, and save\n"
        "                        the evaluated prompt there (llama.cpp's prompt cache)\n"
        "  --prompt-cache-ro     use the prompt cache without writing it\n");
    if (rc) return rc == 1 ? 0 : rc;
    if ((rc = cli_args_finish("run", RUN_GROUPS, &a))) goto out_args;
    rc = 2;
    if (!a.model) {
        cli_usage_error("run", "-m MODEL is required (see --help)");
        goto out_args;
    }
    if (!a.prompt && !a.file) {
        cli_usage_error("run", "give one of -p TEXT, -f FILE (- reads stdin)");
        goto out_args;
    }

    cera_error err = {0};
    cera_engine *e = NULL;
    cera_session *s = NULL, *ds = NULL;
    cera_engine *de = NULL; /* a draft model (-md) */
    cera_token *toks = NULL;
    char *buf = NULL, *gbnf = NULL;
    size_t n = 0, len = 0, gbnf_len = 0;
    rc = 1;
    const char *text = cli_args_prompt(&a, &len, &buf, &err);
    if (!text) goto fail;
    if (cli_args_grammar(&a, &gbnf, &gbnf_len, &err)) goto fail;
    cli_cancel_prepare();
    double load_s = 0;
    if (cli_open_engine(a.model, &a.ep, &e, &load_s, &err)) goto fail;
    cli_warn_context(e, a.ep.n_ctx);
    if (cli_tokenize(e, text, len, &toks, &n, &err)) goto fail;
    if (n == 0) {
        fprintf(stderr, "cera: the prompt has no tokens\n");
        goto out;
    }
    cera_session_params sp = cera_session_default_params();
    sp.sampler = a.sp;
    if (cera_session_create(e, &sp, &s, &err)) goto fail;
    if (cli_lora_attach(e, s, &a.lora, &err)) goto fail;
    if (gbnf && cera_session_set_grammar(s, gbnf, gbnf_len, &err)) goto fail;

    cli_cancel_install();
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = a.n_predict;
    gp.stop = a.stop;
    gp.n_stop = a.n_stop;
    gp.ignore_eog = a.ignore_eos;
    gp.cancel = &cli_cancel_flag;
    gp.context_shift = a.ctx_shift == 1; /* off unless asked, as llama-completion */
    gp.n_keep = cli_keep_positions(e, a.keep, toks, n);
    int n_drafted = 0, n_accepted = 0;
    gp.n_drafted = &n_drafted;
    gp.n_accepted = &n_accepted;
    if (cli_spec_open(&a, e, &gp, &de, &ds, &err)) goto fail;
    const double t0 = cli_now();
    const size_t reused = rs.cache ? cache_reuse(s, &sp.sampler, rs.cache, toks, n) : 0;
    cera_status st = reused < n ? cli_eval_prompt(s, toks + reused, n - reused, a.ep.n_batch, &err) : CERA_OK;
    if (st == CERA_OK && rs.cache && !rs.cache_ro && reused < n) {
        cera_error serr = {0};
        if (cera_session_save(s, rs.cache, &serr))
            fprintf(stderr, "cera: --prompt-cache %s not written: %s\n", rs.cache, serr.message);
    }
    const double t1 = cli_now();
    int n_gen = 0;
    if (st == CERA_OK) st = cera_generate(s, NULL, 0, &gp, on_token, &rs, &n_gen, &err);
    const double t2 = cli_now();
    printf("\n");
    fflush(stdout);
    if (st == CERA_OK || st == CERA_ERR_CANCELLED) {
        fprintf(stderr, "cera: prompt %zu tokens, %.2f tok/s", n, (double)n / (t1 - t0 > 0 ? t1 - t0 : 1e-9));
        if (rs.t_first > 0) fprintf(stderr, "; first token after %.3f s", rs.t_first - t0);
        fprintf(stderr, "; generation %d tokens, %.2f tok/s", n_gen,
                (double)n_gen / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
        fprintf(stderr, "; load %.2f s", load_s);
        if (a.seed_drawn && a.sp.temp > 0) fprintf(stderr, "; seed %lld (-s repeats it)", a.seed);
        fprintf(stderr, "\n");
        cli_spec_report(n_drafted, n_accepted);
    }
    rc = cli_report_end(st, &err, s, cera_engine_n_ctx(e), a.n_predict, n_gen);
    if (st == CERA_OK && cera_session_grammar_state(s) == CERA_GRAMMAR_DEAD_END)
        fprintf(stderr, "cera: the grammar allows no further token (its match is not complete)\n");
    goto out;
fail:
    rc = cli_fail(&err);
out:
    free(toks);
    free(buf);
    free(gbnf);
    cera_session_free(s);
    cli_spec_close(de, ds);
    cera_engine_close(e);
out_args:
    cli_args_free(&a);
    return rc;
}
