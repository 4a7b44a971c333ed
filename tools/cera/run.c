/*
 * run.c — `cera run`: generate text from a prompt, streamed to stdout as it comes
 * (the prompt is not echoed), with the prompt and generation speeds on stderr.
 *
 * The prompt is evaluated first (timed on its own), then cera_generate continues from
 * its logits with llama.cpp's default sampler chain; --temp 0 is greedy. With --ids
 * only the generated token ids are printed, on one line, each preceded by a space.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "lora_cli.h"
#include "prompt.h"

static void help(FILE *out) {
    fprintf(
        out,
        "usage: cera run -m MODEL (-p TEXT | -f FILE) [options]\n\n"
        "Generates text after the prompt and streams it to stdout; speeds go to stderr.\n\n" CLI_ENGINE_HELP
        "  -n N                  tokens to generate at most (default -1: until end of text or full context)\n"
        "  --temp T              temperature (default 0.8; 0 = greedy)\n"
        "  --top-k K             top-k (default 40; 0 disables)\n"
        "  --top-p P             top-p (default 0.95; 1 disables)\n"
        "  --min-p M             min-p (default 0.05; 0 disables)\n"
        "  --repeat-penalty R    repetition penalty over the last 64 tokens (default 1: off)\n"
        "  --seed S              the sampler's seed (default 0)\n"
        "  --ids                 print the generated token ids instead of text\n" CLI_LORA_HELP);
}

typedef struct run_state {
    bool ids;
} run_state;

static bool on_token(cera_token token, const char *piece, size_t len, void *user) {
    const run_state *rs = user;
    if (rs->ids) {
        if (token >= 0) printf(" %d", token); /* -1: held-back text only, no token */
    } else {
        fwrite(piece, 1, len, stdout);
    }
    fflush(stdout);
    return true;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cmd_run(int argc, char **argv) {
    cli_engine_opts o;
    cli_engine_opts_init(&o);
    cera_session_params sp = cera_session_default_params();
    cera_generate_params gp = cera_generate_default_params();
    run_state rs = {false};
    cli_lora_list lora = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        }
        const int lr = cli_lora_parse("run", argc, argv, &i, &lora);
        if (lr) {
            if (lr < 0) return 2;
            continue;
        }
        const int er = cli_engine_opt("run", argc, argv, &i, &o);
        if (er) {
            if (er < 0) return 2;
            continue;
        }
        if (!strcmp(a, "--ids")) {
            rs.ids = true;
            continue;
        }
        if (i + 1 >= argc) return cli_usage_error("run", "unknown option or missing value: %s", a);
        const char *v = argv[++i];
        long l = 0;
        float f = 0;
        bool ok = true;
        if (!strcmp(a, "-n"))
            ok = cli_parse_long(v, -1, 1000000000, &l), gp.n_predict = (int)l;
        else if (!strcmp(a, "--temp"))
            ok = cli_parse_float(v, &f), sp.sampler.temp = f;
        else if (!strcmp(a, "--top-k"))
            ok = cli_parse_long(v, 0, 1 << 30, &l), sp.sampler.top_k = (int)l;
        else if (!strcmp(a, "--top-p"))
            ok = cli_parse_float(v, &f) && f >= 0 && f <= 1, sp.sampler.top_p = f;
        else if (!strcmp(a, "--min-p"))
            ok = cli_parse_float(v, &f) && f >= 0 && f <= 1, sp.sampler.min_p = f;
        else if (!strcmp(a, "--repeat-penalty"))
            ok = cli_parse_float(v, &f) && f > 0, sp.sampler.repeat_penalty = f;
        else if (!strcmp(a, "--seed"))
            ok = cli_parse_long(v, 0, LONG_MAX, &l), sp.sampler.seed = (uint64_t)l;
        else
            return cli_usage_error("run", "unknown option: %s", a);
        if (!ok) return cli_usage_error("run", "bad value for %s: '%s'", a, v);
    }
    const char *model = o.model, *text = o.text, *file = o.file;
    if (!model) return cli_usage_error("run", "-m MODEL is required (see --help)");
    if (!!text + !!file != 1) return cli_usage_error("run", "give exactly one of -p TEXT, -f FILE");

    cera_error err = {0};
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_token *toks = NULL;
    char *buf = NULL;
    size_t n = 0;
    int rc = 1;
    if (cera_engine_open(model, &o.ep, &e, &err)) goto fail;
    cli_warn_context(e, &o);
    size_t len = 0;
    if (file) {
        if (!(buf = cli_read_prompt(file, &len, &err))) goto fail;
        text = buf;
    } else {
        len = strlen(text);
    }
    if (cli_tokenize(e, text, len, &toks, &n, &err)) goto fail;
    if (n == 0) {
        fprintf(stderr, "cera: the prompt has no tokens\n");
        goto out;
    }
    if (cera_session_create(e, &sp, &s, &err)) goto fail;
    if (cli_lora_attach(e, s, &lora, &err)) goto fail;

    const double t0 = now_s();
    if (cera_session_eval(s, toks, n, false, &err)) goto fail;
    const double t1 = now_s();
    int n_gen = 0;
    const cera_status st = cera_generate(s, NULL, 0, &gp, on_token, &rs, &n_gen, &err);
    const double t2 = now_s();
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "cera: prompt %zu tokens, %.2f tok/s; generation %d tokens, %.2f tok/s\n", n,
            (double)n / (t1 - t0 > 0 ? t1 - t0 : 1e-9), n_gen,
            (double)n_gen / (t2 - t1 > 0 ? t2 - t1 : 1e-9));
    if (st != CERA_OK) goto fail;
    rc = 0;
    if (cera_session_n_past(s) >= cera_engine_n_ctx(e) && (gp.n_predict < 0 || n_gen < gp.n_predict)) {
        /* not an end the text chose: say so, and fail when -n asked for more */
        fprintf(stderr,
                "cera: generation stopped at the context limit (%d tokens) after %d tokens%s; -c N sets a "
                "larger context\n",
                cera_engine_n_ctx(e), n_gen, gp.n_predict < 0 ? "" : ", before -n was reached");
        if (gp.n_predict >= 0) rc = 1;
    }
    goto out;
fail:
    rc = cli_fail(&err);
out:
    free(toks);
    free(buf);
    cera_session_free(s);
    cera_engine_close(e);
    return rc;
}
