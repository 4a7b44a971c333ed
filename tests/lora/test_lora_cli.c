/*
 * test_lora_cli.c — the CLI side of adapters, run as a user would (argv[1] is the cera
 * binary):
 *   - `cera lora merge` writes a model whose logits (`cera logits`) match the unmerged
 *     run (`cera logits --lora ... --lora-scaled ...`) within float rounding, and the
 *     unmerged run matches llama.cpp's golden for the same adapters;
 *   - `cera run --lora` continues the prompt greedily as llama.cpp did;
 *   - usage errors exit 2, bad files exit 1 with "cera: <message naming the file>".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

static const char *cera;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return run_command(cmd);
}

static float *read_floats(const char *path, size_t *n) {
    size_t size = 0;
    float *f = read_file(path, &size);
    *n = size / sizeof(float);
    return f;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_lora_cli CERA_BINARY\n");
        return 2;
    }
    cera = argv[1];
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/lora_cli_%d", CERA_BINARY_DIR, (int)getpid());
    char merged[300], l_merged[300], l_unmerged[300], ids[300], errf[300];
    snprintf(merged, sizeof merged, "%s.merged.gguf", tmp);
    snprintf(l_merged, sizeof l_merged, "%s.merged.f32", tmp);
    snprintf(l_unmerged, sizeof l_unmerged, "%s.unmerged.f32", tmp);
    snprintf(ids, sizeof ids, "%s.ids", tmp);
    snprintf(errf, sizeof errf, "%s.err", tmp);
    const char *model = shared_path("models/stories260K.gguf");
    char a[300], b[300], toks[300];
    snprintf(a, sizeof a, "%s", shared_path("golden/lora-stories-a.gguf"));
    snprintf(b, sizeof b, "%s", shared_path("golden/lora-stories-b.peft"));
    snprintf(toks, sizeof toks, "%s", shared_path("golden/stories260K.lora-a-b.tokens"));

    CHECK(sh("%s lora --help > /dev/null", cera) == 0, "lora --help");
    CHECK(sh("%s lora merge --help > /dev/null", cera) == 0, "lora merge --help");
    CHECK(sh("%s lora merge -m %s -o %s 2> /dev/null", cera, model, merged) == 2,
          "merge without --lora: exit 2");
    CHECK(sh("%s lora frobnicate 2> /dev/null", cera) == 2, "unknown subcommand: exit 2");
    CHECK(sh("%s lora merge -m %s --lora-scaled %s abc -o %s 2> /dev/null", cera, model, a, merged) == 2,
          "bad scale: exit 2");
    CHECK(sh("%s lora merge -m %s --lora /nonexistent/x.gguf -o %s 2> %s", cera, model, merged, errf) == 1,
          "missing adapter: exit 1");
    char *msg = read_file(errf, NULL);
    CHECK(msg && !strncmp(msg, "cera: ", 6) && strstr(msg, "/nonexistent/x.gguf"),
          "missing adapter message: %s", msg ? msg : "(none)");
    free(msg);
    /* an adapter of another model */
    CHECK(sh("%s lora merge -m %s --lora %s -o %s 2> %s", cera, model,
             shared_path("golden/lora-synth-llama.gguf"), merged, errf) == 1,
          "wrong-model adapter: exit 1");
    msg = read_file(errf, NULL);
    CHECK(msg && strstr(msg, "blk.0.attn_q.weight"), "wrong-model message: %s", msg ? msg : "(none)");
    free(msg);

    /* Merge a + 0.7 b, then compare merged and unmerged logits. */
    CHECK(sh("%s lora merge -m %s --lora %s --lora-scaled %s 0.7 -o %s --type f32 > /dev/null", cera, model,
             a, b, merged) == 0,
          "merge");
    CHECK(sh("%s logits -m %s --tokens %s -o %s -t 2", cera, merged, toks, l_merged) == 0,
          "logits of merged");
    CHECK(sh("%s logits -m %s --lora %s --lora-scaled %s 0.7 --tokens %s -o %s -t 2", cera, model, a, b, toks,
             l_unmerged) == 0,
          "logits with --lora");
    size_t n1 = 0, n2 = 0, ng = 0;
    float *m = read_floats(l_merged, &n1), *u = read_floats(l_unmerged, &n2),
          *g = read_floats(shared_path("golden/stories260K.lora-a-b.logits.f32"), &ng);
    CHECK(m && u && g && n1 == ng && n2 == ng && ng > 0, "logits sizes %zu %zu %zu", n1, n2, ng);
    if (m && u && g && n1 == ng && n2 == ng) {
        double dmu = 0, dug = 0;
        for (size_t i = 0; i < ng; i++) {
            dmu = fmax(dmu, fabs(m[i] - u[i]));
            dug = fmax(dug, fabs(u[i] - g[i]));
        }
        printf("merged vs unmerged: max |diff| %.3g; unmerged vs llama.cpp: %.3g\n", dmu, dug);
        /* F16 rounding flips in the KV cache bound both (see test_lora_golden.c) */
        CHECK(dmu < 5e-3, "merged vs unmerged logits: max |diff| %g", dmu);
        CHECK(dug < 5e-3, "--lora logits vs llama.cpp: max |diff| %g", dug);
    }
    free(m);
    free(u);
    free(g);

    /* cera run --lora: greedy ids as llama.cpp's continuation. */
    CHECK(sh("%s run -m %s --lora %s -p 'Once upon a time' -n 24 --temp 0 --ids -t 2 > %s 2> /dev/null", cera,
             model, a, ids) == 0,
          "run --lora");
    size_t n_ids = 0, n_gold = 0;
    int32_t *got = read_ints(ids, &n_ids),
            *want = read_ints(shared_path("golden/stories260K.lora-a.greedy"), &n_gold);
    CHECK(got && want && n_ids == 24 && n_gold >= 24 && !memcmp(got, want, 24 * sizeof *got),
          "run --lora: %zu ids, not llama.cpp's greedy continuation", n_ids);
    free(got);
    free(want);
    CHECK(sh("%s run -m %s --lora 2> /dev/null", cera, model) == 2, "run --lora without a file: exit 2");

    unlink(merged);
    unlink(l_merged);
    unlink(l_unmerged);
    unlink(ids);
    unlink(errf);
    return test_finish();
}
