/*
 * test_gguf_cli.c — `cera inspect` end to end: runs the built CLI (its path is the
 * first argument, from CMake) on a real model, on corrupt files and on bad usage,
 * and checks exit codes and what it prints.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
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
    remove(out_path);
    remove(err_path);
    return test_finish();
}
