/*
 * test_gguf_cli.c — `cera inspect` end to end: runs the built CLI (its path is the
 * first argument, from CMake) on a real model, on corrupt files and on bad usage,
 * and checks exit codes and what it prints; whether it says a file runs (and why not),
 * and --template.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "tensor/types.h"
#include "testutil.h"

static const char *cera;
static char out_path[512], err_path[512];

/* Runs `cera args` with stdout and stderr captured; returns the exit status (-1: a signal). */
static int run(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", cera, args, out_path, err_path);
    return run_command(cmd);
}

static bool contains(const char *path, const char *needle) {
    char *text = read_file(path, NULL);
    bool yes = text && strstr(text, needle);
    free(text);
    return yes;
}

static void corrupt(const char *name, const void *data, size_t n, const char *problem) {
    char path[600], args[700], want[800];
    snprintf(path, sizeof path, "%s/%s-%d.gguf", CERA_BINARY_DIR, name, (int)getpid());
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    snprintf(args, sizeof args, "inspect '%s'", path);
    int rc = run(args);
    snprintf(want, sizeof want, "cera: %s: ", path);
    CHECK(rc == 1, "%s: exit %d, want 1", name, rc);
    CHECK(contains(err_path, want) && contains(err_path, problem), "%s: stderr lacks '%s' and '%s'", name,
          want, problem);
    CHECK(!contains(out_path, "tensors:"), "%s: printed a listing", name);
    remove(path);
}

/* A copy of the GGUF file src at dst with tensor `retype` (if not NULL) given type t and zero
 * bytes, and tokenizer.chat_template set to tmpl (if not NULL). */
static bool copy_model(const char *src, const char *dst, const char *retype, cera_type t, const char *tmpl) {
    gguf_file *f = NULL;
    cera_error err;
    if (gguf_open(src, &f, &err)) return false;
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    if (tmpl) gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
    bool ok = true;
    void *zeros = NULL;
    for (uint64_t i = 0; i < f->n_tensors && ok; i++) {
        const gguf_tensor *ti = &f->tensors[i];
        char name[128];
        gguf_str_copy(ti->name, name, sizeof name);
        if (retype && !strcmp(name, retype)) {
            const size_t bytes = cera_row_size(t, ti->ne[0]) * (size_t)ti->ne[1];
            zeros = calloc(1, bytes);
            ok = zeros && !gguf_writer_add_tensor(w, name, t, ti->n_dims, ti->ne, zeros, &err);
        } else {
            ok = !gguf_writer_add_tensor(w, name, ti->type, ti->n_dims, ti->ne, ti->data, &err);
        }
    }
    ok = ok && !gguf_writer_write(w, dst, &err);
    gguf_writer_free(w);
    free(zeros);
    gguf_close(f);
    return ok;
}

/* Whether cera can run a file, and why not. */
static void test_runnable(void) {
    char args[1024], path[600];
    snprintf(args, sizeof args, "inspect '%s'", shared_path("models/stories260K.gguf"));
    CHECK(run(args) == 0 && contains(out_path, "tensor types: f32 × 48") &&
              contains(out_path, "runnable: yes: architecture llama, 5 layers"),
          "stories260K: runnable");
    snprintf(args, sizeof args, "inspect '%s'", shared_path("golden/synth-phi3-q8_0.gguf"));
    CHECK(run(args) == 0 && contains(out_path, "q8_0 × 14") &&
              contains(out_path, "runnable: yes: architecture phi3"),
          "synth-phi3: runnable");
    snprintf(args, sizeof args, "inspect '%s'", shared_path("golden/lora-stories-a.gguf"));
    CHECK(run(args) == 0 && contains(out_path, "runnable: no: a LoRA adapter for llama"), "adapter");
    /* a weight of a type the CPU has no matmul for */
    snprintf(path, sizeof path, "%s/inspect-q8k-%d.gguf", CERA_BINARY_DIR, (int)getpid());
    CHECK(copy_model(shared_path("golden/synth-phi3-f32.gguf"), path, "blk.1.ffn_down.weight", CERA_TYPE_Q8_K,
                     NULL),
          "writing %s", path);
    snprintf(args, sizeof args, "inspect '%s'", path);
    CHECK(
        run(args) == 0 && contains(out_path, "q8_k × 1 (no CPU matmul kernels)") &&
            contains(out_path, "runnable: no: tensor 'blk.1.ffn_down.weight': type q8_k has no CPU kernels"),
        "q8_k weight: not runnable, naming it");
    remove(path);
    /* an architecture cera does not model: rename phi3 to phi9 everywhere */
    size_t size = 0;
    uint8_t *data = read_file(shared_path("golden/synth-phi3-f32.gguf"), &size);
    CHECK(data != NULL, "read synth-phi3");
    for (size_t i = 0; data && i + 4 <= size; i++)
        if (!memcmp(data + i, "phi3", 4)) data[i + 3] = '9';
    snprintf(path, sizeof path, "%s/inspect-phi9-%d.gguf", CERA_BINARY_DIR, (int)getpid());
    FILE *fp = data ? fopen(path, "wb") : NULL;
    if (fp) {
        fwrite(data, 1, size, fp);
        fclose(fp);
    }
    free(data);
    snprintf(args, sizeof args, "inspect '%s'", path);
    CHECK(run(args) == 0 && contains(out_path, "runnable: no: unsupported architecture 'phi9'"), "phi9");
    remove(path);
}

/* --template prints the chat template alone, in full and unescaped. */
static void test_template(void) {
    char args[1024], path[600];
    char tmpl[600];
    int n = snprintf(tmpl, sizeof tmpl, "{%% for m in messages %%}<|\"%%s\"|>\n");
    while (n < 500) n += snprintf(tmpl + n, sizeof tmpl - (size_t)n, "{{ m['content'] }}\t");
    snprintf(tmpl + n, sizeof tmpl - (size_t)n, "{%% endfor %%}");
    snprintf(path, sizeof path, "%s/inspect-tmpl-%d.gguf", CERA_BINARY_DIR, (int)getpid());
    CHECK(copy_model(shared_path("golden/synth-phi3-f32.gguf"), path, NULL, CERA_TYPE_F32, tmpl),
          "writing %s", path);
    snprintf(args, sizeof args, "inspect --template '%s'", path);
    CHECK(run(args) == 0, "inspect --template: exit");
    char *text = read_file(out_path, NULL);
    char want[620];
    snprintf(want, sizeof want, "%s\n", tmpl);
    CHECK(text && !strcmp(text, want), "inspect --template printed '%.80s...'", text ? text : "");
    free(text);
    remove(path);
    snprintf(args, sizeof args, "inspect '%s' --template", shared_path("models/stories260K.gguf"));
    CHECK(run(args) == 1 && contains(err_path, "has no chat template"), "no template");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_gguf_cli PATH-TO-CERA\n");
        return 1;
    }
    cera = argv[1];
    snprintf(out_path, sizeof out_path, "%s/cli-out-%d.txt", CERA_BINARY_DIR, (int)getpid());
    snprintf(err_path, sizeof err_path, "%s/cli-err-%d.txt", CERA_BINARY_DIR, (int)getpid());

    char args[1024];
    const char *model = shared_path("models/stories260K.gguf");
    snprintf(args, sizeof args, "inspect '%s'", model);
    CHECK(run(args) == 0, "inspect stories260K failed");
    CHECK(contains(out_path, "19 keys, 48 tensors, alignment 32"), "header line");
    CHECK(contains(out_path, "general.architecture (string) = \"llama\""), "architecture line");
    CHECK(contains(out_path, "llama.block_count (uint32) = 5"), "block count line");
    CHECK(contains(out_path, "tokenizer.ggml.tokens (array) = [string × 512] \"<unk>\", \"<s>\""),
          "shortened token array");
    CHECK(contains(out_path, "blk.4.ffn_norm.weight") && contains(out_path, "[64, 512]"), "tensor lines");
    CHECK(contains(out_path, "48 tensors, 292800 parameters") && contains(out_path, "1171200 bytes") &&
              contains(out_path, "32.000 bits per weight"),
          "totals");

    size_t size = 0;
    uint8_t *data = read_file(model, &size);
    CHECK(data && size > 20000, "read %s", model);
    if (data) {
        corrupt("truncated", data, 5000, "truncated");
        corrupt("cut-data", data, 20000, "runs past the end of the data section");
        data[0] = 'X';
        corrupt("magic", data, size, "not a GGUF file");
        data[0] = 'G';
        memset(data + 8, 0xff, 8); /* n_tensors */
        corrupt("huge-count", data, size, "cannot fit");
        free(data);
    }
    corrupt("empty", "", 0, "truncated");

    /* a tensor name with control bytes and quotes is printed escaped, as keys are */
    gguf_writer *w = gguf_writer_new();
    cera_error err;
    const float four[4] = {1, 2, 3, 4};
    const int64_t ne[1] = {4};
    gguf_writer_add_tensor(w, "evil\x1b[2J\n\"name", CERA_TYPE_F32, 1, ne, four, &err);
    void *buf = NULL;
    size_t n = 0;
    if (gguf_writer_to_memory(w, &buf, &n, &err) == CERA_OK) {
        char path[600];
        snprintf(path, sizeof path, "%s/escaped-%d.gguf", CERA_BINARY_DIR, (int)getpid());
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(buf, 1, n, f);
            fclose(f);
        }
        snprintf(args, sizeof args, "inspect '%s'", path);
        CHECK(run(args) == 0 && contains(out_path, "evil\\x1b[2J\\n\\\"name") && !contains(out_path, "\x1b"),
              "tensor name not escaped");
        remove(path);
    } else {
        CHECK(false, "write: %s", err.message);
    }
    free(buf);
    gguf_writer_free(w);

    CHECK(run("inspect /nonexistent/model.gguf") == 1 &&
              contains(err_path, "cera: /nonexistent/model.gguf: "),
          "missing file");
    CHECK(run("inspect --help") == 0 && contains(out_path, "usage: cera inspect"), "--help");
    CHECK(run("inspect") == 2, "no file");
    CHECK(run("inspect --bogus x") == 2 && contains(err_path, "--bogus"), "unknown option");
    test_runnable();
    test_template();
    remove(out_path);
    remove(err_path);
    return test_finish();
}
