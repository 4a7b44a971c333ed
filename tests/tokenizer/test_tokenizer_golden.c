/*
 * test_tokenizer_golden.c — the prompt of every llama.cpp golden case
 * (../shared/golden/NAME.prompt.txt) must tokenize, with special tokens added and
 * parsed as llama.cpp's tools do, to exactly NAME.tokens. The model of NAME is
 * NAME.gguf (without a ".lora" suffix), or ../shared/models/stories260K.gguf for the
 * stories260K cases.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

static void check_case(const char *name) {
    char rel[512], model[512];
    if (!strncmp(name, "stories260K", 11)) {
        snprintf(model, sizeof model, "%s", shared_path("models/stories260K.gguf"));
    } else {
        char base[256];
        snprintf(base, sizeof base, "%s", name);
        char *lora = strstr(base, ".lora");
        if (lora) *lora = 0;
        snprintf(rel, sizeof rel, "golden/%s.gguf", base);
        snprintf(model, sizeof model, "%s", shared_path(rel));
    }
    snprintf(rel, sizeof rel, "golden/%s.prompt.txt", name);
    size_t len, n_want;
    char *prompt = read_file(shared_path(rel), &len);
    snprintf(rel, sizeof rel, "golden/%s.tokens", name);
    int32_t *want = read_ints(shared_path(rel), &n_want);
    gguf_file *f = NULL;
    cera_tokenizer *tok = NULL;
    cera_error err = {0};
    CHECK(prompt && want, "%s: prompt or tokens missing", name);
    if (prompt && want && gguf_open(model, &f, &err) == CERA_OK &&
        cera_tokenizer_load(f, &tok, &err) == CERA_OK) {
        cera_token ids[1024];
        size_t n = 0;
        cera_status st = cera_tokenizer_encode(tok, prompt, len, true, true, ids, 1024, &n, &err);
        CHECK(st == CERA_OK && n == n_want && !memcmp(ids, want, n * sizeof(cera_token)),
              "%s: %zu tokens, want %zu (%s)", name, n, n_want, err.message);
    } else {
        CHECK(false, "%s: cannot load %s: %s", name, model, err.message);
    }
    cera_tokenizer_free(tok);
    gguf_close(f);
    free(prompt);
    free(want);
}

int main(void) {
    DIR *d = opendir(shared_path("golden"));
    if (!d) return TEST_SKIP_CODE;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 11 || strcmp(e->d_name + l - 11, ".prompt.txt")) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(l - 11), e->d_name);
        check_case(name);
        n++;
    }
    closedir(d);
    CHECK(n > 0, "no golden prompts found");
    fprintf(stderr, "%d golden prompts\n", n);
    return test_finish();
}
