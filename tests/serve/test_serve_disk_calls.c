/*
 * test_serve_disk_calls.c — the disk tier of `cera serve` (tools/cera/serve_disk.c) through its calls,
 * on stories260K, without the server:
 *   - a timeline put, written, found for a prompt that departs from it, loaded and cut back:
 *     the rest evaluated on top gives the logits of the whole prompt evaluated fresh, bit for
 *     bit (the rounding rules: a wide prompt keeps a wide rest);
 *   - loads cancelled at every moment (queued, being read, done and not collected): no session
 *     is lost, every sequence slot of the engine comes back;
 *   - a new opening of the folder finds the file; a byte flipped in it is refused at the load
 *     (nothing loaded, the file deleted).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine_util.h"
#include "serve_disk.h"
#include "testutil.h"

#define N_SEQ 6

static cera_session *fresh(cera_engine *e) {
    cera_session_params p = cera_session_default_params();
    cera_session *s = NULL;
    return cera_session_create(e, &p, &s, NULL) == CERA_OK ? s : NULL;
}

static void nap_us(long us) {
    const struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* The next ended load (waiting for it): its positions, or -1 when none came. */
static long wait_done(serve_disk *d, cera_session **s) {
    void *tag;
    size_t n;
    double ms;
    for (int i = 0; i < 20000; i++) {
        if (serve_disk_done(d, &tag, s, &n, &ms)) return (long)n;
        nap_us(500);
    }
    return -1;
}

static bool wait_writes(serve_disk *d, uint64_t n) {
    serve_disk_stats st;
    for (int i = 0; i < 20000; i++) {
        serve_disk_stats_get(d, &st);
        if (st.writes >= n) return true;
        nap_us(500);
    }
    return false;
}

static serve_disk *open_dir(cera_engine *e, const char *dir) {
    const serve_disk_params p = {.dir = dir, .cap = 1 << 30, .chunk_max = 256, .n_ctx = 512};
    serve_disk *d = NULL;
    cera_error err = {0};
    CHECK(serve_disk_open(e, &p, &d, &err) == CERA_OK, "open %s: %s", dir, err.message);
    return d;
}

int main(void) {
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 512;
    ep.n_seq_max = N_SEQ;
    cera_engine *e = NULL;
    cera_error err = {0};
    if (cera_engine_open(shared_path("models/stories260K.gguf"), &ep, &e, &err)) {
        printf("skip: %s\n", err.message);
        return TEST_SKIP_CODE;
    }
    char dir[] = "/tmp/cera-serve-disk-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "a temporary folder");
    serve_disk *d = open_dir(e, dir);
    const serve_adapter_set none = {0};
    /* a wide prompt of 100 tokens (one chunk), its timeline put: 96 positions written */
    cera_token a[200], b[200];
    for (int i = 0; i < 200; i++) a[i] = b[i] = (cera_token)(3 + (i * 37) % 500);
    for (int i = 100; i < 200; i++) b[i] = (cera_token)(7 + i);
    cera_session *s = fresh(e);
    CHECK(s && !cera_session_eval(s, a, 100, false, &err), "the first prompt: %s", err.message);
    serve_disk_put(d, s, &none, SERVE_MODE_WIDE, 100);
    CHECK(wait_writes(d, 1), "written");
    cera_session_free(s);
    /* b shares a's first 100 tokens: 96 of them from the file, the rest (104, wide) evaluated */
    serve_disk_hit hit;
    const size_t use = serve_disk_find(d, b, 200, &none, 0, &hit);
    CHECK(use == 96 && hit.n_file == 96 && hit.n_match == 96, "found: %zu of %zu", use, hit.n_file);
    serve_disk_release(d, &hit);
    CHECK(serve_disk_find(d, b, 200, &none, 80, &hit) == 0, "not worth it over 80 from RAM");
    CHECK(serve_disk_find(d, b, 120, &none, 0, &hit) == 56 && hit.n_match == 96,
          "a 120-token prompt keeps a wide rest of 64: %zu", hit.n_use);
    serve_disk_release(d, &hit);
    serve_disk_find(d, b, 200, &none, 0, &hit);
    s = fresh(e);
    CHECK(s && serve_disk_load(d, &hit, s, b, b), "a load");
    cera_session *got = NULL;
    CHECK(wait_done(d, &got) == 96 && got == s && cera_session_n_past(s) == 96, "loaded");
    cera_session *f = fresh(e);
    const int nv = cera_engine_n_vocab(e);
    if (s && f && !cera_session_eval(s, b + 96, 104, false, &err) &&
        !cera_session_eval(f, b, 200, false, &err))
        CHECK(!memcmp(cera_session_logits(s, -1), cera_session_logits(f, -1), sizeof(float) * (size_t)nv),
              "the prompt from the file gives the logits of a fresh evaluation");
    else
        CHECK(false, "the evaluations: %s", err.message);
    cera_session_free(s);
    cera_session_free(f);
    /* loads cancelled at every moment: each session back to the caller or freed by the reader */
    int back = 0, reader = 0;
    for (int i = 0; i < 200; i++) {
        s = fresh(e);
        if (!s || !serve_disk_find(d, b, 200, &none, 0, &hit) || !serve_disk_load(d, &hit, s, b, s)) {
            CHECK(false, "load %d", i);
            cera_session_free(s);
            break;
        }
        nap_us((i * 7919) % 3000);
        cera_session *r = serve_disk_cancel(d, s);
        back += r != NULL, reader += r == NULL;
        cera_session_free(r);
    }
    void *tag;
    size_t n;
    double ms;
    CHECK(!serve_disk_done(d, &tag, &s, &n, &ms), "a cancelled load is never reported");
    printf("200 loads cancelled: %d sessions back at once, %d freed by the reader\n", back, reader);
    serve_disk_close(d);
    cera_session *all[N_SEQ] = {0};
    bool every = true;
    for (int i = 0; i < N_SEQ; i++) every = every && (all[i] = fresh(e)) != NULL;
    CHECK(every, "every sequence slot came back");
    for (int i = 0; i < N_SEQ; i++) cera_session_free(all[i]);
    /* a new opening finds the file; a flipped byte is refused at the load and the file goes */
    d = open_dir(e, dir);
    serve_disk_stats st;
    serve_disk_stats_get(d, &st);
    CHECK(st.files == 1 && serve_disk_find(d, b, 200, &none, 0, &hit) == 96, "found again");
    serve_disk_release(d, &hit);
    serve_disk_close(d);
    char path[512] = "";
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s/cera-*.session", dir);
    FILE *ls = popen(cmd, "r");
    if (ls && fgets(path, sizeof path, ls)) path[strcspn(path, "\n")] = 0;
    if (ls) pclose(ls);
    FILE *fp = fopen(path, "r+b");
    struct stat sb;
    if (fp && !stat(path, &sb)) {
        fseek(fp, (long)sb.st_size * 3 / 5, SEEK_SET);
        const int c = fgetc(fp);
        fseek(fp, (long)sb.st_size * 3 / 5, SEEK_SET);
        fputc(c ^ 0x10, fp);
    }
    CHECK(fp && fclose(fp) == 0, "flip a byte of %s", path);
    d = open_dir(e, dir);
    s = fresh(e);
    CHECK(s && serve_disk_find(d, b, 200, &none, 0, &hit) == 96 && serve_disk_load(d, &hit, s, b, s),
          "a load");
    CHECK(wait_done(d, &got) == 0 && cera_session_n_past(s) == 0, "the damaged file is refused");
    serve_disk_stats_get(d, &st);
    CHECK(st.refused == 1 && st.files == 0 && access(path, F_OK) != 0, "and deleted");
    cera_session_free(s);
    serve_disk_close(d);
    rmdir(dir);
    cera_engine_close(e);
    return test_finish();
}
