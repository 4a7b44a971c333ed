/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

int test_passed, test_failed;

int test_finish(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return (test_failed == 0 && test_passed > 0) ? 0 : 1;
}

static const char *rotate_path(const char *dir, const char *rel) {
    static char bufs[8][1024];
    static int slot;
    char *b = bufs[slot++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, rel);
    return b;
}
/* dir, or the environment's value for it when set (a machine where the build's folders are
 * not where they were built: the device machine, bench/cuda/device_run.sh) */
static const char *dir_or_env(const char *env, const char *dir) {
    const char *v = getenv(env);
    return v && *v ? v : dir;
}

const char *shared_path(const char *rel) {
    if (!strncmp(rel, "synth/", 6))
        return rotate_path(dir_or_env("CERA_TEST_SYNTH_DIR", CERA_BINARY_DIR "/synth"), rel + 6);
    if (!strncmp(rel, "data/", 5))
        return rotate_path(dir_or_env("CERA_TEST_DATA_DIR", CERA_SOURCE_DIR "/tests/model/data"), rel + 5);
    return rotate_path(CERA_SHARED_DIR, rel);
}

const char *golden_path(const char *name, const char *ext) {
    char rel[512];
    snprintf(rel, sizeof rel, "%s%s.%s", strchr(name, '/') ? "" : "golden/", name, ext);
    return shared_path(rel);
}
const char *models_path(const char *rel) { return rotate_path(CERA_MODELS_DIR, rel); }

bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

void *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return NULL;
    }
    long n = ftell(f);
    if (n < 0) {
        fclose(f);
        return NULL;
    }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return NULL;
    }
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    if (size) *size = (size_t)n;
    return buf;
}

int32_t *read_ints(const char *path, size_t *n) {
    char *text = read_file(path, NULL);
    if (!text) return NULL;
    size_t cap = 64, cnt = 0;
    int32_t *v = malloc(cap * sizeof *v);
    char *p = text, *end;
    for (;;) {
        long x = strtol(p, &end, 10);
        if (end == p) break;
        if (cnt == cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[cnt++] = (int32_t)x;
        p = end;
    }
    free(text);
    *n = cnt;
    return v;
}

uint64_t test_rng_next(test_rng *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
float test_rng_uniform(test_rng *r) { return (float)(test_rng_next(r) >> 40) * (1.0f / 16777216.0f); }
float test_rng_normal(test_rng *r) {
    float u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

int run_command(const char *cmd) {
    int st = system(cmd);
    if (st == -1) return -1;
    if (WIFSIGNALED(st)) return -1;
    return WEXITSTATUS(st);
}
