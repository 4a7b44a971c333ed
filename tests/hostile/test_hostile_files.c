/*
 * test_hostile_files.c — the CLI against hostile file names (issue 14, F4–F8):
 *   - F6: quantize, lora merge and synth refuse an output that exists and is not a regular
 *     file (a FIFO, a symlink to one) and leave it as it was;
 *   - F7: the temporary file is never a fixed name: an existing OUT.tmp (a file, or a
 *     symlink to a victim) is not touched, and no temporary file is left behind;
 *   - F8: logits and lora merge refuse to write over one of their inputs, however named
 *     (the same name, a hard link, a symlink);
 *   - F4: a FIFO given as a model, an adapter or a PEFT adapter_config.json fails at once
 *     ("not a regular file") instead of waiting for a writer;
 *   - F5: -f /dev/zero stops at the prompt size limit with a message; a prompt from a
 *     FIFO or stdin still works.
 * Every run has a time limit: a hang is a failure.
 */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostile_util.h"
#include "testutil.h"

#define LIMIT 30.0

static const char *dir, *model, *log_path;

static bool is_fifo(const char *path) {
    struct stat s;
    return lstat(path, &s) == 0 && S_ISFIFO(s.st_mode);
}

/* Files in dir whose name contains ".tmp" (a temporary file left behind). */
static int n_tmp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (strstr(de->d_name, ".tmp") && strcmp(de->d_name, "out.gguf.tmp")) n++;
    if (d) closedir(d);
    return n;
}

static int run(const char *const *args) { return hostile_run(args, LIMIT, NULL, log_path); }

static void outputs_not_regular(void) {
    const char *fifo = hostile_path(dir, "out.fifo"), *link = hostile_path(dir, "link-to-fifo.gguf");
    mkfifo(fifo, 0644);
    symlink(fifo, link);
    const char *targets[] = {fifo, link};
    for (int i = 0; i < 2; i++) {
        const char *q[] = {"quantize", model, targets[i], "f16", NULL};
        CHECK(run(q) == 1 && hostile_file_has(log_path, "not a regular file"),
              "quantize to %s: refused with a message", targets[i]);
        CHECK(is_fifo(fifo), "quantize replaced the FIFO");
        const char *m[] = {"lora", "merge",    "-m",
                           model,  "--lora",   shared_path("golden/lora-stories-a.gguf"),
                           "-o",   targets[i], NULL};
        CHECK(run(m) == 1 && hostile_file_has(log_path, "not a regular file"),
              "lora merge to %s: refused with a message", targets[i]);
        CHECK(is_fifo(fifo), "lora merge replaced the FIFO");
    }
    /* a directory and a symlink to nothing are refused too; a symlink to a file keeps the link */
    const char *d = hostile_path(dir, "out.dir"), *dangling = hostile_path(dir, "dangling.gguf");
    mkdir(d, 0755);
    symlink(hostile_path(dir, "nowhere/x.gguf"), dangling);
    const char *qd[] = {"quantize", model, d, "f16", NULL};
    CHECK(run(qd) == 1 && hostile_file_has(log_path, "a directory"), "quantize to a directory: refused");
    const char *ql[] = {"quantize", model, dangling, "f16", NULL};
    CHECK(run(ql) == 1 && hostile_file_has(log_path, "does not resolve"), "quantize to a dangling symlink");
    const char *real = hostile_path(dir, "real.gguf"), *to_real = hostile_path(dir, "to-real.gguf");
    hostile_write(real, "old", 3);
    symlink(real, to_real);
    const char *qr[] = {"quantize", model, to_real, "f16", NULL};
    CHECK(run(qr) == 0, "quantize through a symlink to a file");
    struct stat ls;
    gguf_file *g = NULL;
    cera_error err;
    CHECK(lstat(to_real, &ls) == 0 && S_ISLNK(ls.st_mode) && gguf_open(real, &g, &err) == CERA_OK,
          "the link stays and its target is the new model");
    gguf_close(g);
    const char *s[] = {"synth", "test", "f32", "-o", fifo, NULL};
    const int rc = run(s);
    CHECK(rc == 1 && hostile_file_has(log_path, "not a regular file"), "synth to a FIFO: exit %d", rc);
    CHECK(is_fifo(fifo), "synth replaced the FIFO");
    CHECK(n_tmp_files() == 0, "a refused output left a temporary file");
}

static void temporary_names(void) {
    const char *out = hostile_path(dir, "out.gguf"), *tmp = hostile_path(dir, "out.gguf.tmp");
    const char *victim = hostile_path(dir, "victim");
    symlink(victim, tmp); /* the old fixed name, pointing at a file that must not appear */
    const char *q[] = {"quantize", model, out, "f16", NULL};
    CHECK(run(q) == 0, "quantize with OUT.tmp a symlink");
    CHECK(!file_exists(victim), "the symlink's target was written");
    struct stat s;
    CHECK(lstat(tmp, &s) == 0 && S_ISLNK(s.st_mode), "OUT.tmp (a symlink) was replaced");
    unlink(tmp);
    hostile_write(tmp, "keep", 4); /* an unrelated file of that name */
    CHECK(run(q) == 0, "quantize with OUT.tmp a file");
    size_t n = 0;
    char *t = read_file(tmp, &n);
    CHECK(t && n == 4 && !memcmp(t, "keep", 4), "an existing OUT.tmp was clobbered");
    free(t);
    gguf_file *f = NULL;
    cera_error err;
    CHECK(gguf_open(out, &f, &err) == CERA_OK, "the output is a valid GGUF: %s", err.message);
    gguf_close(f);
    CHECK(n_tmp_files() == 0, "a temporary file was left behind");
    /* a failure (here an unknown adapter) leaves neither OUT nor a temporary file */
    const char *bad = hostile_path(dir, "bad-merge.gguf");
    const char *m[] = {"lora", "merge", "-m", model, "--lora", out, "-o", bad, NULL};
    CHECK(run(m) == 1 && !file_exists(bad) && n_tmp_files() == 0, "a failed merge left files behind");
}

static void outputs_over_inputs(void) {
    const char *m = hostile_path(dir, "model.gguf"), *hard = hostile_path(dir, "hard.gguf");
    const char *soft = hostile_path(dir, "soft.gguf"), *ad = hostile_path(dir, "adapter.gguf");
    hostile_copy(model, m);
    hostile_copy(shared_path("golden/lora-stories-a.gguf"), ad);
    link(m, hard);
    symlink(m, soft);
    size_t n0 = 0, a0 = 0;
    char *before = read_file(m, &n0), *ad_before = read_file(ad, &a0);
    const char *outs[] = {m, hard, soft};
    for (int i = 0; i < 3; i++) {
        const char *l[] = {"logits", "-m", m, "-p", "Once", "-o", outs[i], NULL};
        CHECK(run(l) == 1 && hostile_file_has(log_path, "refusing to write over an input"),
              "logits -m M -o %s: refused", outs[i]);
        const char *mg[] = {"lora", "merge", "-m", m, "--lora", ad, "-o", outs[i], NULL};
        CHECK(run(mg) == 1 && hostile_file_has(log_path, "refusing to write over an input"),
              "lora merge -m M -o %s: refused", outs[i]);
        const char *q[] = {"quantize", m, outs[i], "f16", NULL};
        CHECK(run(q) == 1, "quantize M %s: refused", outs[i]);
    }
    const char *mg[] = {"lora", "merge", "-m", m, "--lora", ad, "-o", ad, NULL};
    CHECK(run(mg) == 1 && hostile_file_has(log_path, "an adapter"), "lora merge -o ADAPTER: refused");
    const char *peft = shared_path("golden/lora-stories-a.peft");
    const char *pl[] = {"logits", "-m",   m,
                        "-p",     "Once", "--lora",
                        peft,     "-o",   hostile_path(peft, "adapter_model.safetensors"),
                        NULL};
    CHECK(run(pl) == 1 && hostile_file_has(log_path, "refusing to write over an input"),
          "logits -o a PEFT adapter's weights: refused");
    const char *pf = hostile_path(dir, "prompt.txt");
    hostile_write(pf, "Once upon", 9);
    const char *lf[] = {"logits", "-m", m, "-f", pf, "-o", pf, NULL};
    CHECK(run(lf) == 1, "logits -f P -o P: refused");
    size_t n1 = 0, a1 = 0, p1 = 0;
    char *after = read_file(m, &n1), *ad_after = read_file(ad, &a1), *p_after = read_file(pf, &p1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0), "the model changed");
    CHECK(ad_before && ad_after && a0 == a1 && !memcmp(ad_before, ad_after, a0), "the adapter changed");
    CHECK(p_after && p1 == 9, "the prompt file changed");
    free(before);
    free(after);
    free(ad_before);
    free(ad_after);
    free(p_after);
    /* what still works: a fresh output, and a device written through */
    const char *ok[] = {"logits", "-m", m, "-p", "Once", "-o", hostile_path(dir, "l.f32"), NULL};
    CHECK(run(ok) == 0, "logits to a new file");
    const char *dn[] = {"logits", "-m", m, "-p", "Once", "-o", "/dev/null", NULL};
    CHECK(run(dn) == 0, "logits to /dev/null (written through)");
    const char *so = hostile_path(dir, "stdout.bin");
    const char *ds[] = {"logits", "-m", m, "-p", "Once", "-o", "/dev/stdout", NULL};
    size_t ns = 0;
    CHECK(hostile_run(ds, LIMIT, NULL, so) == 0, "logits -o /dev/stdout");
    char *sd = read_file(so, &ns);
    CHECK(sd && ns >= 2 * 512 * sizeof(float), "logits -o /dev/stdout wrote %zu bytes", ns);
    free(sd);
}

static void fifo_inputs(void) {
    const char *fifo = hostile_path(dir, "in.fifo");
    mkfifo(fifo, 0644);
    const char *peft = hostile_path(dir, "peft");
    mkdir(peft, 0755);
    mkfifo(hostile_path(peft, "adapter_config.json"), 0644);
    hostile_copy(shared_path("golden/lora-stories-a.peft/adapter_model.safetensors"),
                 hostile_path(peft, "adapter_model.safetensors"));
    const char *cases[][9] = {
        {"inspect", fifo, NULL},
        {"run", "-m", fifo, "-p", "hi", "-n", "1", NULL},
        {"tokenize", "-m", fifo, "-p", "hi", NULL},
        {"quantize", fifo, hostile_path(dir, "q.gguf"), "f16", NULL},
        {"run", "-m", model, "-p", "hi", "-n", "1", "--lora", fifo},
        {"run", "-m", model, "-p", "hi", "-n", "1", "--lora", peft},
        {"lora", "merge", "-m", model, "--lora", fifo, "-o", hostile_path(dir, "mm.gguf"), NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *args[10] = {0};
        memcpy(args, cases[i], sizeof cases[i]);
        const int rc = hostile_run(args, 10.0, NULL, log_path);
        CHECK(rc == 1 && hostile_file_has(log_path, "not a regular file"), "%s with a FIFO: exit %d%s",
              args[0], rc, rc == HOSTILE_TIMEOUT ? " (hung)" : "");
    }
}

static void prompt_files(void) {
    const char *r[] = {"run", "-m", model, "-f", "/dev/zero", "-n", "1", NULL};
    int rc = hostile_run(r, LIMIT, NULL, log_path);
    CHECK(rc == 1 && hostile_file_has(log_path, "64 MiB"), "run -f /dev/zero: exit %d", rc);
    const char *t[] = {"tokenize", "-m", model, "-f", "/dev/zero", NULL};
    rc = hostile_run(t, LIMIT, NULL, log_path);
    CHECK(rc == 1 && hostile_file_has(log_path, "64 MiB"), "tokenize -f /dev/zero: exit %d", rc);
    /* a directory as the prompt file: the real reason */
    const char *rd[] = {"run", "-m", model, "-f", dir, "-n", "1", NULL};
    CHECK(hostile_run(rd, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "Is a directory"),
          "run -f DIR names the problem");
    const char *td[] = {"tokenize", "-m", model, "-f", dir, NULL};
    CHECK(hostile_run(td, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "Is a directory"),
          "tokenize -f DIR names the problem");
    /* stdin and a FIFO still work */
    const char *pf = hostile_path(dir, "p.txt");
    hostile_write(pf, "Once upon a time\n", 17);
    const char *s[] = {"run", "-m", model, "-f", "/dev/stdin", "-n", "4", "--temp", "0", NULL};
    CHECK(hostile_run(s, LIMIT, pf, log_path) == 0, "run -f /dev/stdin");
    const char *fifo = hostile_path(dir, "prompt.fifo");
    mkfifo(fifo, 0644);
    const pid_t w = fork();
    if (w == 0) { /* the writer: blocks until the reader opens the FIFO */
        FILE *f = fopen(fifo, "w");
        if (f) {
            fputs("Once upon a time", f);
            fclose(f);
        }
        _exit(0);
    }
    const char *ff[] = {"run", "-m", model, "-f", fifo, "-n", "4", "--temp", "0", NULL};
    rc = hostile_run(ff, LIMIT, NULL, log_path);
    CHECK(rc == 0, "run -f FIFO: exit %d", rc);
    if (w > 0) {
        kill(w, SIGKILL);
        waitpid(w, NULL, 0);
    }
}

int main(void) {
    dir = hostile_scratch("files");
    model = shared_path("models/stories260K.gguf");
    static char lp[1024];
    snprintf(lp, sizeof lp, "%s/log.txt", dir);
    log_path = lp;
    outputs_not_regular();
    temporary_names();
    outputs_over_inputs();
    fifo_inputs();
    prompt_files();
    return test_finish();
}
