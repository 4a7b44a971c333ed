/* hostile_util.c — running the CLI with a time limit and crafting bad files (see
 * hostile_util.h). */
#include "hostile_util.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

extern char **environ;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The environment for a child: the test's, with the sanitizers (in the ASan build) told to
 * exit with HOSTILE_SANITIZER_EXIT, so that a report cannot pass for an ordinary error
 * exit (both exit 1 by default). */
static char **child_env(void) {
    static char *env[512];
    static char asan[1024], ubsan[1024];
    if (env[0]) return env;
    const char *a = getenv("ASAN_OPTIONS"), *u = getenv("UBSAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sexitcode=%d", a ? a : "", a && *a ? ":" : "",
             HOSTILE_SANITIZER_EXIT);
    snprintf(ubsan, sizeof ubsan, "UBSAN_OPTIONS=%s%shalt_on_error=1:exitcode=%d", u ? u : "",
             u && *u ? ":" : "", HOSTILE_SANITIZER_EXIT);
    size_t n = 0;
    env[n++] = asan;
    env[n++] = ubsan;
    for (char **e = environ; *e && n < 510; e++)
        if (strncmp(*e, "ASAN_OPTIONS=", 13) && strncmp(*e, "UBSAN_OPTIONS=", 14)) env[n++] = *e;
    env[n] = NULL;
    return env;
}

int hostile_run(const char *const *args, double timeout_s, const char *stdin_path, const char *out_path) {
    const char *argv[64];
    size_t n = 0;
    argv[n++] = CERA_CLI;
    for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, stdin_path ? stdin_path : "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    const int e = posix_spawn(&pid, CERA_CLI, &fa, NULL, (char *const *)argv, child_env());
    posix_spawn_file_actions_destroy(&fa);
    if (e) return -1;
    const double t_end = now_s() + timeout_s;
    int status = 0;
    for (;;) {
        const pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -1;
        if (now_s() > t_end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return HOSTILE_TIMEOUT;
        }
        const struct timespec nap = {0, 2000000};
        nanosleep(&nap, NULL);
    }
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

const char *hostile_scratch(const char *name) {
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/hostile_%s", CERA_BINARY_DIR, name);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (run_command(cmd) != 0) fprintf(stderr, "cannot make %s\n", dir);
    return dir;
}

const char *hostile_path(const char *dir, const char *name) {
    static char buf[8][1024];
    static int slot;
    char *p = buf[slot++ & 7];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

bool hostile_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

bool hostile_copy(const char *from, const char *to) {
    size_t n = 0;
    void *data = read_file(from, &n);
    const bool ok = data && hostile_write(to, data, n);
    free(data);
    return ok;
}

bool hostile_file_has(const char *path, const char *text) {
    size_t n = 0;
    char *data = read_file(path, &n);
    bool found = false;
    const size_t tl = strlen(text);
    for (size_t i = 0; data && !found && i + tl <= n; i++) found = !memcmp(data + i, text, tl);
    free(data);
    return found;
}

void *hostile_tensor_copy(const gguf_file *f, const char *name, size_t *n) {
    const gguf_tensor *t = gguf_find_tensor(f, name);
    void *p = t ? malloc((size_t)t->nbytes) : NULL;
    if (p) memcpy(p, t->data, (size_t)t->nbytes);
    *n = p ? (size_t)t->nbytes : 0;
    return p;
}

gguf_writer *hostile_writer_from(const gguf_file *f, const char *replace, const void *data) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[256];
        gguf_str_copy(t->name, name, sizeof name);
        cera_error err;
        const void *d = replace && !strcmp(name, replace) ? data : t->data;
        if (gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, d, &err)) {
            gguf_writer_free(w);
            return NULL;
        }
    }
    return w;
}
