/*
 * test_cli_run.c — `cera run` and `cera logits` as a user runs them:
 *   - `cera run --temp 0 --ids` on stories260K prints llama.cpp's greedy continuation;
 *   - `cera logits --tokens` writes the golden's layout and values; `-p` adds BOS like
 *     llama.cpp (the same file as from the golden's tokens);
 *   - -f gives the logits of -p (one trailing newline dropped);
 *   - --prompt-cache FILE reuses and saves the evaluated prompt (prompt_cache below);
 *   - --context-shift --keep 4 -c 256 -n 700 prints llama-completion's text of the same options
 *     (tests/model/data, test_context_shift.c says how it was made); without --context-shift
 *     the run stops at the context, saying so, with exit code 1 (-n was not reached); cera chat
 *     shifts by default (a 400-token answer in a context of 256) and stops with
 *     --no-context-shift;
 *   - --help succeeds, usage errors (bad -t/-c/--kv/--device values, in both commands) exit 2, a missing
 * model exits 1 with "cera: ...".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "testutil.h"

static char cmd[4096];

static int sh(const char *fmt, const char *a, const char *b) {
    snprintf(cmd, sizeof cmd, fmt, CERA_CLI, a, b);
    return run_command(cmd);
}

/* The shared parser's llama.cpp conventions: escapes on by default (--no-escape turns them
 * off), --name=value, -f - reading stdin, -s -1 drawing a seed that stderr names and -s
 * repeats, -ngl choosing the device. */
static void llama_cpp_options(const char *model) {
    const char *nl = "cli-nl.f32", *lit = "cli-lit.f32", *eq = "cli-eq.f32", *in = "cli-stdin.f32";
    size_t n_nl = 0, n_lit = 0, n_eq = 0, n_in = 0;
    snprintf(cmd, sizeof cmd, "%s logits -m %s -p 'Once\\nupon' -o %s -t 1 2>/dev/null", CERA_CLI, model, nl);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s logits -m %s -p 'Once\\nupon' --no-escape -o %s -t 1 2>/dev/null", CERA_CLI,
             model, lit);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd,
             "%s logits --model=%s --prompt='Once\\nupon' --output=%s --threads=1 2>/dev/null", CERA_CLI,
             model, eq);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "printf 'Once\\\\nupon' | %s logits -m %s -f - -o %s -t 1 2>/dev/null",
             CERA_CLI, model, in);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    float *a = read_file(nl, &n_nl), *b = read_file(lit, &n_lit), *c = read_file(eq, &n_eq),
          *d = read_file(in, &n_in);
    /* "Once\nupon" as typed: a newline by default, a backslash and an n with --no-escape */
    CHECK(a && b && n_nl != n_lit, "escapes: %zu and %zu bytes of logits", n_nl, n_lit);
    CHECK(a && c && n_nl == n_eq && !memcmp(a, c, n_nl), "--name=value gives what -name value gives");
    CHECK(a && d && n_nl == n_in && !memcmp(a, d, n_nl), "-f - (stdin, escapes too) gives what -p gives");
    free(a);
    free(b);
    free(c);
    free(d);

    const char *o1 = "cli-seed1.txt", *o2 = "cli-seed2.txt", *e1 = "cli-seed1.err";
    snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once upon a time' -n 24 --temp 1 -s -1 -t 1 > %s 2> %s",
             CERA_CLI, model, o1, e1);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    size_t ne = 0, n1 = 0, n2 = 0;
    char *err = read_file(e1, &ne);
    const char *sp = err ? strstr(err, "seed ") : NULL;
    CHECK(sp != NULL, "-s -1: stderr names the seed: %s", err ? err : "(none)");
    if (sp) {
        const long long seed = atoll(sp + 5);
        snprintf(cmd, sizeof cmd,
                 "%s run -m %s -p 'Once upon a time' -n 24 --temp 1 -s %lld -t 1 > %s 2>/dev/null", CERA_CLI,
                 model, seed, o2);
        CHECK(run_command(cmd) == 0, "%s", cmd);
        char *t1 = read_file(o1, &n1), *t2 = read_file(o2, &n2);
        CHECK(t1 && t2 && n1 == n2 && !memcmp(t1, t2, n1), "-s %lld does not repeat the -s -1 run", seed);
        free(t1);
        free(t2);
    }
    free(err);
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 -ngl 0 -t 1 > /dev/null 2>&1", CERA_CLI, model);
    CHECK(run_command(cmd) == 0, "-ngl 0 runs on the CPU");
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 -ngl 0 --device cuda 2>/dev/null", CERA_CLI, model);
    CHECK(run_command(cmd) == 2, "-ngl 0 with --device cuda is a usage error");
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 --bogus 2>/dev/null", CERA_CLI, model);
    CHECK(run_command(cmd) == 2, "an unknown option exits 2");
    snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 --ignore-eos=1 2>/dev/null", CERA_CLI, model);
    CHECK(run_command(cmd) == 2, "a value given to a flag exits 2");
}

/* --prompt-cache FILE: the first run saves the evaluated prompt, a run with the same prompt
 * reuses all of it, one with a longer prompt its start, and each prints what a run without
 * the cache prints (sampled, with a seed); --prompt-cache-ro leaves the file as it was; a file
 * that is not a session is said on stderr and the prompt evaluated whole. */
static void prompt_cache(const char *model) {
    char pc[512], o[4][512], err[512];
    snprintf(pc, sizeof pc, "%s/test_cli_run.cache", CERA_BINARY_DIR);
    snprintf(err, sizeof err, "%s/test_cli_run.cache_err", CERA_BINARY_DIR);
    for (int i = 0; i < 4; i++) snprintf(o[i], sizeof o[i], "%s/test_cli_run.cache%d", CERA_BINARY_DIR, i);
    remove(pc);
    const char *prompts[2] = {"Once upon a time, there was a little girl",
                              "Once upon a time, there was a little girl who"};
    const char *opts = "-n 32 --temp 0.9 --seed 3 -t 1";
    bool ok = true;
    long n_prev = -1; /* the first prompt's tokens */
    for (int p = 0; p < 2; p++) {
        // without the cache, then with it (p 0: made; p 1: its start reused and the file rewritten)
        snprintf(cmd, sizeof cmd, "%s run -m %s -p '%s' %s > %s 2>/dev/null", CERA_CLI, model, prompts[p],
                 opts, o[0]);
        ok = ok && run_command(cmd) == 0;
        snprintf(cmd, sizeof cmd, "%s run -m %s -p '%s' %s --prompt-cache %s > %s 2>%s", CERA_CLI, model,
                 prompts[p], opts, pc, o[1], err);
        ok = ok && run_command(cmd) == 0;
        size_t le = 0;
        char *e = read_file(err, &le);
        const char *r = e ? strstr(e, "tokens reused") : NULL;
        long k = -1, nt = -1;
        while (r && r > e && r[-1] != ':') r--;
        if (r && sscanf(r, " %ld of the prompt's %ld tokens reused", &k, &nt) != 2) k = nt = -1;
        if (p == 1)
            CHECK(k == n_prev && nt > k, "--prompt-cache, a longer prompt: %ld of %ld reused (%s)", k, nt,
                  e ? e : "");
        else
            CHECK(!r, "--prompt-cache made anew: %s", e ? e : "");
        free(e);
        snprintf(cmd, sizeof cmd, "%s run -m %s -p '%s' %s --prompt-cache %s --prompt-cache-ro > %s 2>%s",
                 CERA_CLI, model, prompts[p], opts, pc, o[2], err);
        ok = ok && run_command(cmd) == 0;
        e = read_file(err, &le);
        r = e ? strstr(e, "tokens reused") : NULL;
        while (r && r > e && r[-1] != ':') r--;
        k = nt = -1;
        if (r && sscanf(r, " %ld of the prompt's %ld tokens reused", &k, &nt) != 2) k = nt = -1;
        CHECK(k > 0 && k == nt, "--prompt-cache, the same prompt again: %ld of %ld reused (%s)", k, nt,
              e ? e : "");
        if (p == 0) n_prev = nt;
        free(e);
        size_t n0 = 0, n1 = 0, n2 = 0;
        char *t0 = read_file(o[0], &n0), *t1 = read_file(o[1], &n1), *t2 = read_file(o[2], &n2);
        CHECK(t0 && t1 && t2 && n0 > 10 && n0 == n1 && n0 == n2 && !memcmp(t0, t1, n0) && !memcmp(t0, t2, n0),
              "prompt %d: the output with --prompt-cache differs from the one without", p);
        free(t0), free(t1), free(t2);
    }
    CHECK(ok, "cera run with --prompt-cache failed: %s", cmd);
    /* not a session file (a copy of the model, never the model itself): said, the prompt
     * evaluated, the file not written over */
    size_t lm = 0, lm2 = 0;
    char *gguf = read_file(model, &lm);
    FILE *f = gguf ? fopen(pc, "wb") : NULL;
    CHECK(f && fwrite(gguf, 1, lm, f) == lm && fclose(f) == 0, "copy of the model: %s", pc);
    snprintf(cmd, sizeof cmd, "%s run -m %s -p 'Once' -n 4 --temp 0 -t 1 --prompt-cache %s > %s 2>%s",
             CERA_CLI, model, pc, o[3], err);
    const int rc = run_command(cmd);
    size_t le = 0;
    char *e = read_file(err, &le), *after = read_file(pc, &lm2);
    CHECK(rc == 0 && e && strstr(e, "not used: ") && strstr(e, "not a cera session file") &&
              strstr(e, "not written over"),
          "--prompt-cache with a GGUF: rc %d, %s", rc, e ? e : "");
    CHECK(gguf && after && lm == lm2 && !memcmp(gguf, after, lm),
          "--prompt-cache wrote over a file that was not a session file");
    free(e), free(gguf), free(after);
    remove(pc);
}

static void context_shift(const char *model) {
    char out[512], err[512];
    snprintf(out, sizeof out, "%s/test_cli_run.shift", CERA_BINARY_DIR);
    snprintf(err, sizeof err, "%s/test_cli_run.shift_err", CERA_BINARY_DIR);
    const char *opts = "-p 'Once upon a time' -n 700 -c 256 --temp 0 --ignore-eos -t 2";
    snprintf(cmd, sizeof cmd, "%s run -m %s %s --context-shift --keep 4 > %s 2>%s", CERA_CLI, model, opts,
             out, err);
    CHECK(run_command(cmd) == 0, "%s", cmd);
    size_t n = 0, nr = 0;
    char *got = read_file(out, &n),
         *ref = read_file(shared_path("data/stories260k.shift-keep4.llama-completion.txt"), &nr);
    while (got && n > 0 && got[n - 1] == '\n') n--;
    CHECK(got && ref && n == nr && !memcmp(got, ref, nr), "--context-shift: %zu bytes, llama.cpp's %zu", n,
          nr);
    free(got);
    snprintf(cmd, sizeof cmd, "%s run -m %s %s > %s 2>%s", CERA_CLI, model, opts, out, err);
    CHECK(run_command(cmd) == 1, "without --context-shift: exit 1 (-n not reached)");
    char *e = read_file(err, &n);
    CHECK(e && strstr(e, "context limit"), "without --context-shift: %s", e ? e : "");
    free(e);
    free(ref);
    /* cera chat shifts unless told not to: 400 tokens of an answer in a context of 256 */
    for (int shift = 1; shift >= 0; shift--) {
        snprintf(cmd, sizeof cmd,
                 "printf 'Tell me a story\\n' | %s chat -m %s -c 256 -n 400 --ignore-eos --temp 0 -t 2 %s > "
                 "%s 2>%s",
                 CERA_CLI, model, shift ? "" : "--no-context-shift", out, err);
        CHECK(run_command(cmd) == 0, "%s", cmd);
        e = read_file(err, &n);
        if (shift)
            CHECK(e && strstr(e, "; 400 tokens,") && !strstr(e, "context is full"), "chat, shifting: %s",
                  e ? e : "");
        else
            CHECK(e && strstr(e, "context is full"), "chat --no-context-shift: %s", e ? e : "");
        free(e);
    }
}

int main(void) {
    const char *model = shared_path("models/stories260K.gguf");
    char out_ids[512], out_logits[512], out_logits_p[512], out_err[512];
    snprintf(out_ids, sizeof out_ids, "%s/test_cli_run.ids", CERA_BINARY_DIR);
    snprintf(out_logits, sizeof out_logits, "%s/test_cli_run.logits", CERA_BINARY_DIR);
    snprintf(out_logits_p, sizeof out_logits_p, "%s/test_cli_run.logits_p", CERA_BINARY_DIR);
    snprintf(out_err, sizeof out_err, "%s/test_cli_run.err", CERA_BINARY_DIR);

    /* greedy generation */
    CHECK(sh("%s run -m %s -p 'Once upon a time' -n 200 --temp 0 --ids -t 1 > %s 2>/dev/null", model,
             out_ids) == 0,
          "cera run failed: %s", cmd);
    size_t n_ids = 0, n_greedy = 0;
    int32_t *ids = read_ints(out_ids, &n_ids);
    int32_t *greedy = read_ints(shared_path("golden/stories260K.p1.greedy"), &n_greedy);
    CHECK(ids && greedy && n_ids == n_greedy && !memcmp(ids, greedy, n_ids * sizeof *ids),
          "cera run --ids: %zu ids, differ from the golden's %zu", n_ids, n_greedy);

    /* sampling: the same seed gives the same text, another seed (almost surely) another */
    char out_a[512], out_b[512], out_c[512];
    snprintf(out_a, sizeof out_a, "%s/test_cli_run.a", CERA_BINARY_DIR);
    snprintf(out_b, sizeof out_b, "%s/test_cli_run.b", CERA_BINARY_DIR);
    snprintf(out_c, sizeof out_c, "%s/test_cli_run.c", CERA_BINARY_DIR);
    const char *outs[3] = {out_a, out_b, out_c};
    const char *seeds[3] = {"42", "42", "7"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s run -m %s -p 'Once upon a time' -n 48 --temp 1.0 --seed %s -t 1 > %s 2>/dev/null",
                 CERA_CLI, model, seeds[i], outs[i]);
        CHECK(run_command(cmd) == 0, "cera run with --seed %s failed", seeds[i]);
    }
    size_t la = 0, lb = 0, lc = 0;
    char *ta = read_file(out_a, &la), *tb = read_file(out_b, &lb), *tc = read_file(out_c, &lc);
    CHECK(ta && tb && tc && la > 20, "sampled text missing");
    CHECK(ta && tb && la == lb && !memcmp(ta, tb, la), "same seed, different text");
    CHECK(ta && tc && (la != lc || memcmp(ta, tc, la)), "seeds 42 and 7 gave the same 48 tokens");
    free(ta);
    free(tb);
    free(tc);

    /* logits from token ids, and from the text (BOS added as the metadata asks) */
    const char *tokens = shared_path("golden/stories260K.p1.tokens");
    snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens %s -o %s -t 1 2>/dev/null", CERA_CLI, model, tokens,
             out_logits);
    CHECK(run_command(cmd) == 0, "cera logits --tokens failed: %s", cmd);
    snprintf(cmd, sizeof cmd, "%s logits -m %s -p 'Once upon a time' -o %s -t 1 2>/dev/null", CERA_CLI, model,
             out_logits_p);
    CHECK(run_command(cmd) == 0, "cera logits -p failed: %s", cmd);
    /* -f: the file's one trailing newline is dropped, as llama.cpp's -f does */
    char prompt_file[512], out_logits_f[512];
    snprintf(prompt_file, sizeof prompt_file, "%s/test_cli_run.prompt", CERA_BINARY_DIR);
    snprintf(out_logits_f, sizeof out_logits_f, "%s/test_cli_run.logits_f", CERA_BINARY_DIR);
    FILE *pf = fopen(prompt_file, "w");
    if (pf) {
        fputs("Once upon a time\n", pf);
        fclose(pf);
    }
    snprintf(cmd, sizeof cmd, "%s logits -m %s -f %s -o %s -t 1 2>/dev/null", CERA_CLI, model, prompt_file,
             out_logits_f);
    CHECK(run_command(cmd) == 0, "cera logits -f failed: %s", cmd);
    size_t nf = 0;
    float *got_f = read_file(out_logits_f, &nf);
    size_t nb = 0, nr = 0, np = 0;
    float *got = read_file(out_logits, &nb);
    float *got_p = read_file(out_logits_p, &np);
    float *ref = read_file(shared_path("golden/stories260K.p1.logits.f32"), &nr);
    CHECK(got && ref && nb == nr, "logits file size %zu, golden %zu", nb, nr);
    CHECK(got_p && np == nb && !memcmp(got, got_p, nb),
          "logits from -p differ from those of the golden's tokens");
    CHECK(got_f && got_p && nf == np && !memcmp(got_f, got_p, np), "logits from -f differ from those of -p");
    if (got && ref && nb == nr) {
        const int nv = 512; /* stories260K's vocabulary */
        double w = 0;
        for (size_t t = 0; t < nb / (sizeof(float) * nv); t++) {
            const double d = rel_max_diff(got + t * nv, ref + t * nv, nv);
            if (d > w) w = d;
        }
        CHECK(w <= 1e-3, "cera logits differs from the golden by %.3g", w);
    }

    /* help, usage errors, failures */
    snprintf(cmd, sizeof cmd, "%s run --help > /dev/null", CERA_CLI);
    CHECK(run_command(cmd) == 0, "run --help");
    snprintf(cmd, sizeof cmd, "%s logits --help > /dev/null", CERA_CLI);
    CHECK(run_command(cmd) == 0, "logits --help");
    snprintf(cmd, sizeof cmd, "%s run -p hello 2>/dev/null", CERA_CLI);
    CHECK(run_command(cmd) == 2, "run without -m exits 2");
    snprintf(cmd, sizeof cmd, "%s logits -m %s -o /dev/null 2>/dev/null", CERA_CLI, model);
    CHECK(run_command(cmd) == 2, "logits without a prompt exits 2");
    /* the shared engine options are validated alike in run and logits */
    const char *bad[] = {"-t abc",        "-t -1",   "-t 12x",       "-c 99999999999",
                         "-c 2147483647", "--kv f8", "--device gpu", "-c"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s logits -m %s -p hi -o /dev/null %s 2>/dev/null", CERA_CLI, model,
                 bad[i]);
        CHECK(run_command(cmd) == 2, "logits %s exits 2", bad[i]);
        snprintf(cmd, sizeof cmd, "%s run -m %s -p hi -n 1 %s 2>/dev/null", CERA_CLI, model, bad[i]);
        CHECK(run_command(cmd) == 2, "run %s exits 2", bad[i]);
    }
    llama_cpp_options(model);
    snprintf(cmd, sizeof cmd, "%s run -m /nonexistent/model.gguf -p hi 2> %s", CERA_CLI, out_err);
    CHECK(run_command(cmd) == 1, "missing model exits 1");
    size_t ne = 0;
    char *msg = read_file(out_err, &ne);
    CHECK(msg && !strncmp(msg, "cera: ", 6) && strstr(msg, "/nonexistent/model.gguf"), "error message: %s",
          msg ? msg : "(none)");
    free(msg);
    free(ids);
    free(greedy);
    free(got);
    free(got_p);
    free(got_f);
    free(ref);
    prompt_cache(model);
    context_shift(model);
    return test_finish();
}
