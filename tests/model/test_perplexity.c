/*
 * test_perplexity.c — `cera perplexity` against llama-perplexity on the same files and
 * text: tests/model/data/perplexity.ref holds what llama-perplexity printed (its header
 * says how it was made), one case a line:
 *   MODEL CTX CHUNKS KV FINAL ERR EST1,EST2,...
 * KV is the cache: K's type/V's type, with /norot for a block type kept unrotated (llama.cpp's
 * LLAMA_ATTN_ROT_DISABLE=1, cera's --no-kv-rotation).
 * MODEL is relative to the shared folder (models/stories260K.gguf) or to models/ (the
 * SmolLM2 file scripts/setup.sh fetches; the case is skipped without it). The text is
 * Debian's /usr/share/common-licenses/GPL-3 (the base-files package; the test is skipped
 * without it). Every running estimate and the final one must be within 0.1 % of
 * llama-perplexity's, its standard error within 1 % (measured: SmolLM2 the same figures on
 * the avx2/avx512/amx tiers, whose Q4_1 sums are the reference build's; stories260K 1e-3 %
 * off; the scalar tier, another summation order, is 0.3 % off on SmolLM2). Also: a text shorter than two
 * chunks is refused with exit 1 and a message, a bad --chunks with exit 2.
 * In the sanitizer build each case runs its first SANITIZED_CHUNKS chunks only: the running
 * estimate after chunk k depends on chunks 1..k alone, so those are checked as they are and the
 * last of them as the final estimate (the standard error, of the whole run, is not).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

#define TEXT             "/usr/share/common-licenses/GPL-3"
#define SANITIZED_CHUNKS 2

/* Runs cmd and returns its stdout (malloc'ed) and exit status. */
static char *run(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    for (size_t r; out && (r = fread(out + n, 1, cap - 1 - n, p)) > 0;) {
        n += r;
        if (n + 1 == cap) out = realloc(out, cap *= 2);
    }
    const int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (out) out[n] = 0;
    return out;
}

static bool close_rel(double got, double want, double rel) { return fabs(got - want) <= rel * fabs(want); }

static void check_case(char *line) {
    char model[256], ests[8192], kv[64], tk[16] = "", tv[16] = "", rot[16] = "";
    int ctx, chunks;
    double want_final, want_err;
    if (sscanf(line, "%255s %d %d %63s %lf %lf %8191s", model, &ctx, &chunks, kv, &want_final, &want_err,
               ests) != 7 ||
        sscanf(kv, "%15[^/]/%15[^/]/%15s", tk, tv, rot) < 2) {
        CHECK(0, "bad reference line: %s", line);
        return;
    }
    const int all_chunks = chunks;
#ifdef CERA_TEST_SANITIZED
    if (chunks > SANITIZED_CHUNKS) chunks = SANITIZED_CHUNKS;
#endif
    const char *path = strncmp(model, "models/", 7) || file_exists(shared_path(model))
                           ? shared_path(model)
                           : models_path(model + 7);
    if (!file_exists(path)) {
        printf("%s: not present, skipped\n", model);
        return;
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s perplexity -m %s -f %s -c %d --chunks %d -t 2 -ctk %s -ctv %s %s 2>/dev/null", CERA_CLI,
             path, TEXT, ctx, chunks, tk, tv, strcmp(rot, "norot") ? "" : "--no-kv-rotation");
    int status = -1;
    char *out = run(cmd, &status);
    CHECK(out && status == 0, "%s: exit %d", cmd, status);
    if (!out || status) {
        free(out);
        return;
    }
    /* the running estimates, "[k]value," each */
    int k = 0, bad = 0;
    const char *g = out, *w = ests;
    while (k < chunks) {
        const char *gb = strchr(g, '['), *wb = strchr(w, '[');
        if (!gb || !wb) break;
        int gk = 0, wk = 0;
        double gv = 0, wv = 0;
        if (sscanf(gb, "[%d]%lf", &gk, &gv) != 2 || sscanf(wb, "[%d]%lf", &wk, &wv) != 2) break;
        k++;
        if (gk != wk || !close_rel(gv, wv, 1e-3)) {
            if (!bad++) CHECK(0, "%s: estimate [%d] %.4f, llama-perplexity [%d] %.4f", model, gk, gv, wk, wv);
        }
        g = gb + 1;
        w = wb + 1;
    }
    CHECK(k == chunks, "%s: %d running estimates of %d", model, k, chunks);
    if (chunks < all_chunks) { // a shorter run: its final estimate is the reference's k-th running one
        const char *wb = ests;
        for (int j = 0; j < chunks && wb; j++) wb = strchr(wb + (j > 0), '[');
        int wk = 0;
        CHECK(wb && sscanf(wb, "[%d]%lf", &wk, &want_final) == 2 && wk == chunks,
              "%s: the reference has no estimate [%d]", model, chunks);
    }
    const char *f = strstr(out, "Final estimate: PPL = ");
    double final = 0, err = 0;
    CHECK(f && sscanf(f, "Final estimate: PPL = %lf +/- %lf", &final, &err) == 2, "%s: no final estimate",
          model);
    CHECK(close_rel(final, want_final, 1e-3), "%s: PPL %.4f, llama-perplexity %.4f", model, final,
          want_final);
    CHECK(chunks < all_chunks || close_rel(err, want_err, 1e-2), "%s: +/- %.5f, llama-perplexity %.5f", model,
          err, want_err);
    printf("%-40s -c %d, %d chunks, KV %s: PPL %.4f +/- %.5f, llama-perplexity %.4f (%+.4f %%)\n", model, ctx,
           chunks, kv, final, err, want_final, 100 * (final - want_final) / want_final);
    free(out);
}

static void bad_input(void) {
    char cmd[2048];
    int status = -1;
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -p 'too short' -c 64 2>&1", CERA_CLI,
             shared_path("models/stories260K.gguf"));
    char *out = run(cmd, &status);
    CHECK(status == 1 && out && strstr(out, "needs at least 128"), "a short text: exit %d, %s", status,
          out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s perplexity -m %s -f %s --chunks 0 2>&1", CERA_CLI,
             shared_path("models/stories260K.gguf"), TEXT);
    out = run(cmd, &status);
    CHECK(status == 2, "--chunks 0: exit %d", status);
    free(out);
}

int main(void) {
    if (!file_exists(TEXT)) {
        printf("skipped: %s not present\n", TEXT);
        return TEST_SKIP_CODE;
    }
    size_t n = 0;
    char *ref = read_file(CERA_SOURCE_DIR "/tests/model/data/perplexity.ref", &n);
    CHECK(ref != NULL, "tests/model/data/perplexity.ref");
    for (char *line = ref ? strtok(ref, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (line[0] != '#') check_case(line);
    bad_input();
    free(ref);
    return test_finish();
}
