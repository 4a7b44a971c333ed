/*
 * test_template_cli.c — `cera template`: a golden case rendered through --template prints
 * exactly the expected bytes (nothing added); -m reads tokenizer.chat_template from a GGUF
 * (written here with the GGUF writer); a raise_exception case exits 1 with exactly its
 * message on stderr; usage errors exit 2. Never by a signal.
 */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "gguf/gguf.h"
#include "testutil.h"

#define CERA_EXE CERA_BINARY_DIR "/tools/cera/cera"

static char *run_capture(const char *args, int *status, char **err_text) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s template %s > tmpl_cli.out 2> tmpl_cli.err", CERA_EXE, args);
    *status = run_command(cmd);
    size_t n;
    *err_text = read_file("tmpl_cli.err", &n);
    return read_file("tmpl_cli.out", &n);
}

static char *case_field(const char *path, const char *key) {
    size_t n;
    char *text = read_file(path, &n);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    char *s = cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
    cJSON_Delete(j);
    free(text);
    return s;
}

int main(void) {
    const char *dir = shared_path("golden/templates/Qwen-Qwen2.5-7B-Instruct");
    char tmpl[1024], case07[1024], args[4096], *err = NULL;
    snprintf(tmpl, sizeof tmpl, "%s/template.jinja", dir);
    snprintf(case07, sizeof case07, "%s/case07.json", dir);
    if (!file_exists(CERA_EXE) || !file_exists(tmpl)) {
        fprintf(stderr, "skipping: no %s or %s\n", CERA_EXE, tmpl);
        return TEST_SKIP_CODE;
    }
    int st;

    /* --template: the expected bytes exactly */
    char *expected = case_field(case07, "expected");
    snprintf(args, sizeof args, "--template %s --case %s", tmpl, case07);
    char *out = run_capture(args, &st, &err);
    CHECK(st == 0 && out && expected && !strcmp(out, expected), "--template output differs: '%s'",
          out ? out : "");
    free(out);
    free(err);

    /* -m: the same template from a GGUF's metadata */
    size_t tlen;
    char *text = read_file(tmpl, &tlen);
    gguf_writer *w = gguf_writer_new();
    cera_error e = {0};
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "tokenizer.chat_template", text ? text : "");
    CHECK(gguf_writer_write(w, "tmpl_cli.gguf", &e) == CERA_OK, "write gguf: %s", e.message);
    gguf_writer_free(w);
    free(text);
    snprintf(args, sizeof args, "-m tmpl_cli.gguf --case %s", case07);
    out = run_capture(args, &st, &err);
    CHECK(st == 0 && out && expected && !strcmp(out, expected), "-m output differs: '%s' (%s)",
          out ? out : "", err ? err : "");
    free(out);
    free(err);
    free(expected);

    /* raise_exception: exit 1, the message exactly on stderr */
    const char *rdir = shared_path("golden/templates/google-gemma-2-2b-it");
    char rt[1024], rc[1024];
    snprintf(rt, sizeof rt, "%s/template.jinja", rdir);
    snprintf(rc, sizeof rc, "%s/case02.json", rdir);
    char *msg = case_field(rc, "error");
    snprintf(args, sizeof args, "--template %s --case %s", rt, rc);
    out = run_capture(args, &st, &err);
    char want[1024];
    snprintf(want, sizeof want, "%s\n", msg ? msg : "?");
    CHECK(st == 1 && out && out[0] == 0 && err && !strcmp(err, want),
          "raise_exception: status %d, stderr '%s'", st, err ? err : "");
    free(out);
    free(err);
    free(msg);

    /* usage errors and a GGUF without a template */
    out = run_capture("--case x.json", &st, &err);
    CHECK(st == 2, "no template: status %d", st);
    free(out);
    free(err);
    w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    CHECK(gguf_writer_write(w, "tmpl_cli_none.gguf", &e) == CERA_OK, "write gguf: %s", e.message);
    gguf_writer_free(w);
    snprintf(args, sizeof args, "-m tmpl_cli_none.gguf --case %s", case07);
    out = run_capture(args, &st, &err);
    CHECK(st == 1 && err && strstr(err, "chat_template"), "no chat_template: status %d, '%s'", st,
          err ? err : "");
    free(out);
    free(err);
    out = run_capture("--help", &st, &err);
    CHECK(st == 0 && out && strstr(out, "usage: cera template"), "--help: status %d", st);
    free(out);
    free(err);
    return test_finish();
}
