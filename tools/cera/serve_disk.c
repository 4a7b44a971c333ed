/*
 * serve_disk.c — the disk tier under `cera serve`'s prefix cache (--cache-dir DIR).
 *
 * When a prompt has been read, and again when its sequence ends, the timeline cut back to its
 * longest prefix of whole KV blocks is saved (cera_session_save of a fork cut back there) as
 * DIR/cera-CTX-TOK.session: CTX a hash of the engine's fingerprint (model, KV format, backend and kernel
 * tier), the adapters with their scales and how the timeline was rounded (serve_cache.h's modes), TOK a hash
 * of its tokens. The index (serve_disk_index.c) registers each file under the key of every block-boundary
 * prefix it holds; a new request hashes its prompt's block-boundary prefixes the same way and finds the file
 * sharing the longest beginning with it (which may go on past where the prompt departs from it: the same
 * system prompt with another question). When that gives clearly more than the RAM cache, the file is loaded
 * into a new session on the reader thread, while the scheduler goes on with the other sequences, cut back to
 * what the prompt can use, and the request continues as from a RAM hit. The rounding rules are the RAM
 * cache's: an exact server reuses a prefix only as far as a fresh evaluation would round it
 * and the rest of the prompt as the file's timeline was.
 *
 * Why then rather than when the RAM cache lets an entry go: a prompt is on disk while its
 * answer is still being generated (for the other processes on the folder, and for a sliding
 * window that the answer would move past the cut), a restart or a crash loses nothing that
 * finished, nothing has to be written at shutdown, and the RAM cache, which drops all its
 * entries at once when the KV pool runs out, never waits for the disk. The end of the
 * sequence adds what its answer gives (a narrow timeline is exact through its generated
 * tokens, for the next turn of a chat). A file is written only when a later prompt would take
 * it over what the folder already holds of that timeline (so the many requests sharing a
 * system prompt do not each write it again unless they add enough), and only while the
 * writer has fewer than SERVE_DISK_WRITES timelines queued: the disk never holds up the
 * scheduler.
 *
 * Files are written under a unique temporary name (.cera-KEY.PID.N.tmp, created exclusively,
 * mode 0600: they hold prompts' tokens) and renamed into place, so a reader sees a whole file
 * or none; there is no fsync, as a file damaged by a crash is refused by its checksum at the
 * next load. The folder is kept under its cap by last use (a file's modification time, set
 * again at every hit): at start the folder is scanned for names of our pattern, whose tokens
 * are read for the index (nothing else there is touched; temporary files of ours older than
 * an hour are what a killed process left, and go), and after each write the least recently
 * used go until the rest fit. A file that cera_session_load refuses (damaged, cut short, of
 * another model or adapters), or whose timeline is not the prefix its name promised, is
 * deleted and the request computes its prompt. Several servers may share a folder: each knows
 * the files that were there at its start and those it wrote, and keeps the cap by those.
 *
 * A file is a timeline cut back to a block boundary, and loading one for a prompt cuts it
 * back again to what the prompt uses: models whose sessions cannot be cut back part-way (a
 * recurrent state: serve_cache.h's whole_only) get no disk tier (serve.c says so at start),
 * and where a sliding window refuses a cut, that timeline is not written, or that load
 * computes the prompt instead.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "serve_disk.h"

#include "serve_disk_index.h"

_Static_assert(SDX_BLOCK == CERA_KV_BLOCK, "files hold whole KV blocks");

#define NAME_MAX_LEN 96
/* a temporary file of ours this old was left by a process that was killed while writing it */
#define STALE_TMP_S 3600

typedef struct write_task {
    struct write_task *next;
    cera_session *s; /* a fork cut back to n positions */
    uint64_t id, ctx, tok;
    size_t n;
} write_task;

typedef struct load_task {
    struct load_task *next;
    cera_session *s;
    serve_disk_hit hit;
    uint64_t ctx, tok;  /* the file's name */
    cera_token *prefix; /* the hit's n_match tokens, which the file must begin with */
    size_t loaded;
    double ms;
    void *tag;
    bool abandoned;
} load_task;

struct serve_disk {
    char *dir;
    int dfd;
    uint64_t cap;
    size_t chunk_max, n_ctx;
    bool any, verbose;
    uint64_t engine_fp;
    cera_adapter **ad;
    uint64_t *ad_fp;
    int n_ad;
    void (*wake)(void *);
    void *wake_arg;
    unsigned tmp_seq; /* the writer's */
    bool cut_failed;  /* the scheduler's: a timeline could not be cut back (said once) */
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv_write, cv_read;
    sdx x;
    write_task *wq, *wq_tail;
    int n_writes; /* queued or being written */
    load_task *lq, *lq_tail, *current, *done, *done_tail;
    bool stopping, write_failed;
    serve_disk_stats st;
    pthread_t reader, writer;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- Names and keys -------------------------------------------------------------------- */

/* The context of the adapter set at a rounding mode. */
static uint64_t ctx_of(const serve_disk *d, const serve_adapter_set *set, int mode) {
    uint64_t fp[SERVE_LORA_MAX];
    for (int i = 0; i < set->n; i++) {
        fp[i] = 0;
        for (int k = 0; k < d->n_ad && !fp[i]; k++)
            if (d->ad[k] == set->adapter[i]) fp[i] = d->ad_fp[k];
        if (!fp[i]) fp[i] = cera_adapter_fingerprint(set->adapter[i]);
    }
    return sdx_ctx(d->engine_fp, fp, set->scale, set->n, mode);
}

/* The keys of the block-boundary prefixes of n tokens (n / SDX_BLOCK of them) into out, and
 * the key of all n. */
static uint64_t prefix_keys(uint64_t ctx, const cera_token *t, size_t n, uint64_t *out) {
    uint64_t h = sdx_tok_start();
    for (size_t l = SDX_BLOCK; l <= n; l += SDX_BLOCK) {
        sdx_tok_feed(&h, t + l - SDX_BLOCK, SDX_BLOCK);
        if (out) out[l / SDX_BLOCK - 1] = sdx_pkey(ctx, sdx_tok_key(h, l));
    }
    sdx_tok_feed(&h, t + n / SDX_BLOCK * SDX_BLOCK, n % SDX_BLOCK);
    return sdx_tok_key(h, n);
}

static void file_name(char *out, uint64_t ctx, uint64_t tok) {
    snprintf(out, NAME_MAX_LEN, "cera-%016" PRIx64 "-%016" PRIx64 ".session", ctx, tok);
}

static void file_path(const serve_disk *d, char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", d->dir, name);
}

static bool hex16(const char *s, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        const char c = s[i];
        if (c >= '0' && c <= '9')
            v = v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v << 4 | (uint64_t)(c - 'a' + 10);
        else
            return false;
    }
    *out = v;
    return true;
}

/* cera-<16 hex>-<16 hex>.session */
static bool parse_name(const char *s, uint64_t *ctx, uint64_t *tok) {
    return strlen(s) == 46 && !strncmp(s, "cera-", 5) && hex16(s + 5, ctx) && s[21] == '-' &&
           hex16(s + 22, tok) && !strcmp(s + 38, ".session");
}

/* .cera-<16 hex>.<digits>.<digits>.tmp */
static bool parse_tmp_name(const char *s) {
    uint64_t key;
    if (strncmp(s, ".cera-", 6) || strlen(s) < 27 || !hex16(s + 6, &key) || s[22] != '.') return false;
    const char *p = s + 23;
    for (int part = 0; part < 2; part++) {
        const char *q = p;
        while (*p >= '0' && *p <= '9') p++;
        if (p == q || *p != '.') return false;
        p++;
    }
    return !strcmp(p, "tmp");
}

/* ---- Eviction (mu held) ---------------------------------------------------------------- */

typedef struct victim {
    uint64_t ctx, tok;
} victim;

/* The least recently used files past the cap, out of the index: their names into out (at
 * most max), for the caller to delete outside the lock. Files being read or written stay. */
static size_t pick_victims(serve_disk *d, victim *out, size_t max) {
    size_t k = 0;
    sdx_file *f;
    while (d->x.total > d->cap && k < max && (f = sdx_lru(&d->x))) {
        out[k++] = (victim){f->ctx, f->tok};
        sdx_remove(&d->x, f->id);
        d->st.evicted++;
    }
    return k;
}

static void delete_victims(serve_disk *d, const victim *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char name[NAME_MAX_LEN];
        file_name(name, v[i].ctx, v[i].tok);
        if (unlinkat(d->dfd, name, 0) && errno != ENOENT)
            fprintf(stderr, "cera serve: --cache-dir: cannot delete %s/%s: %s\n", d->dir, name,
                    strerror(errno));
        else if (d->verbose)
            fprintf(stderr, "cera serve: --cache-dir: evicted %s (the least recently used past the cap)\n",
                    name);
    }
}

/* Evicts until the files fit the cap (mu held on entry and return; deletes without it). */
static void evict_locked(serve_disk *d) {
    victim v[64];
    size_t k;
    while ((k = pick_victims(d, v, 64)) > 0) {
        pthread_mutex_unlock(&d->mu);
        delete_victims(d, v, k);
        pthread_mutex_lock(&d->mu);
    }
}

/* A load's hold on its file ends. */
static void release_locked(serve_disk *d, uint64_t id) {
    sdx_file *f = sdx_get(&d->x, id);
    if (f && f->busy > 0) f->busy--;
}

/* A prefix of n positions is worth loading over `have` the RAM cache gives when it adds a
 * block at least and a sixteenth of itself: loading a position costs a small fraction of
 * computing it, and the RAM cache's prefix costs nothing. The same test decides whether a
 * timeline is worth writing over what the folder holds of it. */
static bool worth(size_t n, size_t have) { return n >= have + SDX_BLOCK && (n - have) * 16 >= n; }

/* ---- The writer ------------------------------------------------------------------------ */

static void write_one(serve_disk *d, write_task *t) {
    char name[NAME_MAX_LEN], tmp[NAME_MAX_LEN], path[4096];
    file_name(name, t->ctx, t->tok);
    snprintf(tmp, sizeof tmp, ".cera-%016" PRIx64 ".%ld.%u.tmp", t->id, (long)getpid(), d->tmp_seq++);
    file_path(d, path, sizeof path, tmp);
    cera_error err = {0};
    cera_status st = CERA_OK;
    /* our own fresh name (never a link someone put there), then the file written over it */
    const int fd = openat(d->dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        st = cera_fail(&err, CERA_ERR_IO, "%s: %s", path, strerror(errno));
    else
        close(fd), st = cera_session_save(t->s, path, &err);
    cera_session_free(t->s); /* its KV blocks go back to the pool at once */
    struct stat sb;
    if (!st && fstatat(d->dfd, tmp, &sb, AT_SYMLINK_NOFOLLOW))
        st = cera_fail(&err, CERA_ERR_IO, "%s: %s", path, strerror(errno));
    const bool too_big = !st && (uint64_t)sb.st_size > d->cap; /* kept, it would push out everything else */
    if (!st && !too_big && renameat(d->dfd, tmp, d->dfd, name))
        st = cera_fail(&err, CERA_ERR_IO, "%s/%s: %s", d->dir, name, strerror(errno));
    if (st || too_big) unlinkat(d->dfd, tmp, 0);
    pthread_mutex_lock(&d->mu);
    sdx_file *f = sdx_get(&d->x, t->id);
    if (st || too_big) {
        sdx_remove(&d->x, t->id);
    } else if (f) {
        f->pending = false;
        f->size = (uint64_t)sb.st_size;
        f->used = now_ns();
        d->x.total += f->size;
        d->st.writes++;
    }
    d->n_writes--;
    const bool say = st && (d->verbose || !d->write_failed);
    d->write_failed = d->write_failed || st;
    evict_locked(d);
    pthread_mutex_unlock(&d->mu);
    if (say)
        fprintf(stderr, "cera serve: --cache-dir: cannot write a prefix: %s%s\n", err.message,
                d->verbose ? "" : " (later failures are printed with --verbose)");
    else if (too_big && d->verbose)
        fprintf(stderr,
                "cera serve: --cache-dir: a prefix of %zu positions takes %.2f MiB, more than the cap: not "
                "kept\n",
                t->n, (double)sb.st_size / (1 << 20));
    else if (!st && d->verbose)
        fprintf(stderr, "cera serve: --cache-dir: wrote %s (%zu positions, %.2f MiB)\n", name, t->n,
                (double)sb.st_size / (1 << 20));
    free(t);
}

static void *writer_main(void *arg) {
    serve_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->wq && !d->stopping) pthread_cond_wait(&d->cv_write, &d->mu);
        if (!d->wq) break; /* stopping, and everything queued is written */
        write_task *t = d->wq;
        d->wq = t->next;
        if (!d->wq) d->wq_tail = NULL;
        pthread_mutex_unlock(&d->mu);
        write_one(d, t);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- The reader ------------------------------------------------------------------------ */

static void load_one(serve_disk *d, load_task *t) {
    char name[NAME_MAX_LEN], path[4096];
    file_name(name, t->ctx, t->tok);
    file_path(d, path, sizeof path, name);
    const serve_disk_hit *h = &t->hit;
    const double t0 = mono_ms();
    cera_error err = {0};
    cera_status st = cera_session_load(t->s, path, &err);
    const bool same = st == CERA_OK && (size_t)cera_session_n_past(t->s) == h->n_file &&
                      !memcmp(cera_session_tokens(t->s), t->prefix, h->n_match * sizeof *t->prefix);
    if (st == CERA_OK && !same) /* a name that does not hold what the index says: not ours to trust */
        cera_fail(&err, CERA_ERR_FORMAT, "%s: holds another timeline than its name says", path);
    /* damaged, cut short, foreign or stale: deleted; gone or unreadable: forgotten; no room in
     * the KV pool or in memory: kept for later */
    const bool bad = (st == CERA_OK && !same) || st == CERA_ERR_FORMAT || st == CERA_ERR_INVALID_ARG;
    const bool gone = st == CERA_ERR_IO;
    if (same) utimensat(d->dfd, name, NULL, AT_SYMLINK_NOFOLLOW); /* its last use: now */
    if (bad) unlinkat(d->dfd, name, 0);
    /* the part the prompt uses (a sliding window may not go back that far: then none) */
    const bool cut =
        same && (h->n_use == h->n_file || cera_session_truncate(t->s, (int)h->n_use, NULL) == CERA_OK);
    if (st == CERA_OK && !cut) cera_session_truncate(t->s, 0, NULL);
    t->loaded = cut ? h->n_use : 0;
    t->ms = mono_ms() - t0;
    pthread_mutex_lock(&d->mu);
    release_locked(d, h->id);
    sdx_file *f = sdx_get(&d->x, h->id);
    if (f && same) f->used = now_ns();
    if (f && (bad || gone)) sdx_remove(&d->x, h->id);
    if (cut) d->st.hits++, d->st.tokens += h->n_use;
    if (bad) d->st.refused++;
    pthread_mutex_unlock(&d->mu);
    if (bad && d->verbose) fprintf(stderr, "cera serve: --cache-dir: refused %s (deleted)\n", err.message);
    if (gone && d->verbose) fprintf(stderr, "cera serve: --cache-dir: %s\n", err.message);
}

static void *reader_main(void *arg) {
    serve_disk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->lq && !d->stopping) pthread_cond_wait(&d->cv_read, &d->mu);
        if (!d->lq) break;
        load_task *t = d->lq;
        d->lq = t->next;
        if (!d->lq) d->lq_tail = NULL;
        d->current = t;
        pthread_mutex_unlock(&d->mu);
        load_one(d, t);
        pthread_mutex_lock(&d->mu);
        d->current = NULL;
        const bool abandoned = t->abandoned;
        if (!abandoned) {
            t->next = NULL;
            if (d->done_tail)
                d->done_tail->next = t;
            else
                d->done = t;
            d->done_tail = t;
        }
        pthread_mutex_unlock(&d->mu);
        if (abandoned) {
            cera_session_free(t->s);
            free(t->prefix);
            free(t);
        } else if (d->wake) {
            d->wake(d->wake_arg);
        }
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- The scheduler's calls ------------------------------------------------------------- */

void serve_disk_put(serve_disk *d, cera_session *s, const serve_adapter_set *set, int mode, size_t n_mode) {
    if (!d || (!d->any && mode == SERVE_MODE_MIXED)) return;
    const size_t n_past = (size_t)cera_session_n_past(s);
    const size_t n = (d->any || n_mode > n_past ? n_past : n_mode) / SDX_BLOCK * SDX_BLOCK;
    if (n == 0) return;
    const int n_keys = (int)(n / SDX_BLOCK);
    uint64_t *keys = malloc((size_t)n_keys * sizeof *keys);
    if (!keys) return;
    const uint64_t ctx = ctx_of(d, set, mode);
    const uint64_t tok = prefix_keys(ctx, cera_session_tokens(s), n, keys);
    const uint64_t id = keys[n_keys - 1];
    pthread_mutex_lock(&d->mu);
    /* what the folder holds (or is writing) of this timeline already */
    size_t held = 0;
    for (int k = n_keys; k > 0 && !held; k--)
        if (sdx_holding(&d->x, keys[k - 1], true)) held = (size_t)k * SDX_BLOCK;
    const bool busy = d->n_writes >= SERVE_DISK_WRITES || d->stopping;
    bool queued = false;
    if (!busy && held < n && worth(n, held)) {
        const sdx_file f = {
            .id = id, .ctx = ctx, .tok = tok, .used = now_ns(), .n_pos = (int32_t)n, .pending = true};
        queued = sdx_add(&d->x, &f, keys, n_keys) != NULL; /* the keys are the index's now */
        if (queued) d->n_writes++;
    } else {
        free(keys);
    }
    pthread_mutex_unlock(&d->mu);
    if (busy && d->verbose && held < n)
        fprintf(stderr,
                "cera serve: --cache-dir: the writer is busy: a timeline of %zu positions not written\n",
                n_past);
    if (!queued) return;
    write_task *w = calloc(1, sizeof *w);
    cera_session *fork = NULL;
    bool ok = w && cera_session_fork(s, &fork, NULL) == CERA_OK;
    const bool forked = ok;
    ok = ok && cera_session_truncate(fork, (int)n, NULL) == CERA_OK; /* a sliding window may refuse */
    if (forked && !ok && (d->verbose || !d->cut_failed))
        fprintf(stderr,
                "cera serve: --cache-dir: a timeline past the model's sliding window cannot be cut back to "
                "whole KV blocks: not written (such timelines stay in the RAM cache)%s\n",
                d->verbose ? "" : "; said once");
    d->cut_failed = d->cut_failed || (forked && !ok);
    pthread_mutex_lock(&d->mu);
    if (!ok) {
        sdx_remove(&d->x, id);
        d->n_writes--;
    } else {
        *w = (write_task){.s = fork, .id = id, .ctx = ctx, .tok = tok, .n = n};
        if (d->wq_tail)
            d->wq_tail->next = w;
        else
            d->wq = w;
        d->wq_tail = w;
        pthread_cond_signal(&d->cv_write);
    }
    pthread_mutex_unlock(&d->mu);
    if (!ok) {
        cera_session_free(fork);
        free(w);
    }
}

size_t serve_disk_find(serve_disk *d, const cera_token *prompt, size_t n_prompt, const serve_adapter_set *set,
                       size_t have, serve_disk_hit *hit) {
    memset(hit, 0, sizeof *hit);
    if (!d || n_prompt < 2) return 0;
    const size_t top = (n_prompt - 1) / SDX_BLOCK * SDX_BLOCK; /* the last token is evaluated */
    if (!worth(top, have)) return 0;
    const int fresh = serve_plan_mode(n_prompt, d->chunk_max);
    if (!d->any && fresh == SERVE_MODE_MIXED) return 0;
    /* an exact server takes timelines rounded as a fresh evaluation is; --cache-any any */
    int modes[3] = {fresh, SERVE_MODE_NARROW, SERVE_MODE_WIDE}, n_modes = 1;
    if (d->any) {
        modes[1] = fresh == SERVE_MODE_NARROW ? SERVE_MODE_WIDE : SERVE_MODE_NARROW;
        modes[2] = fresh == SERVE_MODE_MIXED ? SERVE_MODE_WIDE : SERVE_MODE_MIXED;
        n_modes = 3;
    }
    const size_t n_keys = top / SDX_BLOCK;
    uint64_t *keys = malloc((size_t)n_modes * n_keys * sizeof *keys);
    if (!keys) return 0;
    for (int m = 0; m < n_modes; m++)
        prefix_keys(ctx_of(d, set, modes[m]), prompt, top, keys + (size_t)m * n_keys);
    pthread_mutex_lock(&d->mu);
    /* the longest prefix some file holds; how much of it is usable grows with it */
    const sdx_file *f = NULL;
    size_t match = 0;
    for (size_t k = n_keys; k > 0 && !f; k--)
        for (int m = 0; m < n_modes && !f; m++)
            if ((f = sdx_holding(&d->x, keys[(size_t)m * n_keys + k - 1], false))) match = k * SDX_BLOCK;
    size_t use = match;
    while (!d->any && use > 0 && serve_plan_mode(n_prompt - use, d->chunk_max) != fresh) use--;
    if (f && worth(use, have)) {
        *hit = (serve_disk_hit){.id = f->id, .n_file = (size_t)f->n_pos, .n_match = match, .n_use = use};
        sdx_get(&d->x, f->id)->busy++;
    }
    pthread_mutex_unlock(&d->mu);
    free(keys);
    return hit->n_use;
}

void serve_disk_release(serve_disk *d, const serve_disk_hit *hit) {
    if (!d || !hit->n_use) return;
    pthread_mutex_lock(&d->mu);
    release_locked(d, hit->id);
    pthread_mutex_unlock(&d->mu);
}

bool serve_disk_load(serve_disk *d, const serve_disk_hit *hit, cera_session *s, const cera_token *prompt,
                     void *tag) {
    load_task *t = calloc(1, sizeof *t);
    cera_token *p = malloc(hit->n_match * sizeof *p);
    pthread_mutex_lock(&d->mu);
    const sdx_file *f = sdx_get(&d->x, hit->id);
    if (!t || !p || !f) {
        release_locked(d, hit->id);
        pthread_mutex_unlock(&d->mu);
        free(t);
        free(p);
        return false;
    }
    memcpy(p, prompt, hit->n_match * sizeof *p);
    *t = (load_task){.s = s, .hit = *hit, .ctx = f->ctx, .tok = f->tok, .prefix = p, .tag = tag};
    if (d->lq_tail)
        d->lq_tail->next = t;
    else
        d->lq = t;
    d->lq_tail = t;
    pthread_cond_signal(&d->cv_read);
    pthread_mutex_unlock(&d->mu);
    return true;
}

bool serve_disk_done(serve_disk *d, void **tag, cera_session **s, size_t *n, double *ms) {
    if (!d) return false;
    pthread_mutex_lock(&d->mu);
    load_task *t = d->done;
    if (t) {
        d->done = t->next;
        if (!d->done) d->done_tail = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    if (!t) return false;
    *tag = t->tag;
    *s = t->s;
    *n = t->loaded;
    *ms = t->ms;
    free(t->prefix);
    free(t);
    return true;
}

/* Takes the task of tag out of the list *head (its tail *tail kept): the task, or NULL. */
static load_task *unlink_task(load_task **head, load_task **tail, void *tag) {
    load_task *prev = NULL;
    for (load_task *t = *head; t; prev = t, t = t->next) {
        if (t->tag != tag) continue;
        if (prev)
            prev->next = t->next;
        else
            *head = t->next;
        if (*tail == t) *tail = prev;
        return t;
    }
    return NULL;
}

cera_session *serve_disk_cancel(serve_disk *d, void *tag) {
    if (!d) return NULL;
    pthread_mutex_lock(&d->mu);
    load_task *t = unlink_task(&d->lq, &d->lq_tail, tag);
    if (t) /* not started: the file is free again */
        release_locked(d, t->hit.id);
    else if (d->current && d->current->tag == tag)
        d->current->abandoned = true;
    else
        t = unlink_task(&d->done, &d->done_tail, tag);
    pthread_mutex_unlock(&d->mu);
    if (!t) return NULL;
    cera_session *s = t->s;
    free(t->prefix);
    free(t);
    return s;
}

void serve_disk_stats_get(serve_disk *d, serve_disk_stats *st) {
    memset(st, 0, sizeof *st);
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    *st = d->st;
    st->files = d->x.n;
    st->bytes = d->x.total;
    st->cap = d->cap;
    pthread_mutex_unlock(&d->mu);
}

/* ---- Opening and closing --------------------------------------------------------------- */

cera_status serve_disk_check_dir(const char *dir, cera_error *err) {
    struct stat sb;
    if (stat(dir, &sb))
        return cera_fail(err, CERA_ERR_IO, "--cache-dir %s: %s", dir,
                         errno == ENOENT ? "no such folder (create it first)" : strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return cera_fail(err, CERA_ERR_IO, "--cache-dir %s: not a folder", dir);
    /* a file created there and removed: permissions, a read-only mount, quotas alike */
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/.cera-%016" PRIx64 ".%ld.0.tmp", dir, (uint64_t)0, (long)getpid());
    const int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return cera_fail(err, CERA_ERR_IO, "--cache-dir %s: cannot create files there: %s", dir,
                         strerror(errno));
    close(fd);
    unlink(probe);
    return CERA_OK;
}

/* One of our files found by the scan: its tokens read for the index. A file that is not what
 * its name says (not a session file, cut short, other tokens) is deleted. */
static cera_status scan_file(serve_disk *d, const char *name, uint64_t ctx, uint64_t tok,
                             const struct stat *sb, cera_token *buf, int *n_bad) {
    char path[4096];
    file_path(d, path, sizeof path, name);
    int n_pos = 0;
    cera_error err = {0};
    const cera_status st = cera_session_file_tokens(path, buf, d->n_ctx, &n_pos, &err);
    if (st == CERA_ERR_IO) return CERA_OK; /* unreadable: not ours to judge */
    /* a file longer than this context is kept for another server, without its prefixes */
    const bool fits = st == CERA_OK && (size_t)n_pos <= d->n_ctx;
    const int n_keys = fits ? n_pos / SDX_BLOCK : 0;
    uint64_t *keys = n_keys ? malloc((size_t)n_keys * sizeof *keys) : NULL;
    if (n_keys && !keys) return CERA_ERR_NO_MEMORY;
    if (st != CERA_OK || (fits && prefix_keys(ctx, buf, (size_t)n_pos, keys) != tok)) {
        free(keys);
        if (!unlinkat(d->dfd, name, 0)) (*n_bad)++;
        if (d->verbose)
            fprintf(stderr, "cera serve: --cache-dir: refused %s (deleted)\n",
                    st ? err.message : "a file whose tokens are not those of its name");
        return CERA_OK;
    }
    const sdx_file f = {.id = sdx_pkey(ctx, tok),
                        .ctx = ctx,
                        .tok = tok,
                        .size = (uint64_t)sb->st_size,
                        .used = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec,
                        .n_pos = fits ? n_pos : -1};
    return sdx_add(&d->x, &f, keys, n_keys) ? CERA_OK : CERA_ERR_NO_MEMORY;
}

/* Our files in the folder into the index; temporary files a killed writer left, deleted. */
static cera_status scan(serve_disk *d, int *n_stale, int *n_bad, cera_error *err) {
    const int fd = dup(d->dfd);
    DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
    cera_token *buf = malloc((d->n_ctx ? d->n_ctx : 1) * sizeof *buf);
    if (!dp || !buf) {
        if (dp)
            closedir(dp);
        else if (fd >= 0)
            close(fd);
        free(buf);
        return cera_fail(err, CERA_ERR_IO, "--cache-dir %s: cannot list it: %s", d->dir, strerror(errno));
    }
    rewinddir(dp);
    const time_t now = time(NULL);
    cera_status st = CERA_OK;
    struct dirent *de;
    while (!st && (de = readdir(dp))) {
        uint64_t ctx, tok;
        const bool ours = parse_name(de->d_name, &ctx, &tok), tmp = !ours && parse_tmp_name(de->d_name);
        struct stat sb;
        if ((!ours && !tmp) || fstatat(d->dfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISREG(sb.st_mode))
            continue;
        if (tmp) {
            if (now - sb.st_mtime > STALE_TMP_S && !unlinkat(d->dfd, de->d_name, 0)) (*n_stale)++;
            continue;
        }
        if (scan_file(d, de->d_name, ctx, tok, &sb, buf, n_bad))
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "--cache-dir: out of memory");
    }
    closedir(dp);
    free(buf);
    return st;
}

static void disk_free(serve_disk *d) {
    if (d->dfd >= 0) close(d->dfd);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_write);
    pthread_cond_destroy(&d->cv_read);
    sdx_free(&d->x);
    free(d->ad);
    free(d->ad_fp);
    free(d->dir);
    free(d);
}

cera_status serve_disk_open(cera_engine *e, const serve_disk_params *p, serve_disk **out, cera_error *err) {
    *out = NULL;
    cera_status st = serve_disk_check_dir(p->dir, err);
    if (st) return st;
    serve_disk *d = calloc(1, sizeof *d);
    if (!d) return cera_fail(err, CERA_ERR_NO_MEMORY, "--cache-dir: out of memory");
    d->dfd = -1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv_write, NULL);
    pthread_cond_init(&d->cv_read, NULL);
    d->dir = strdup(p->dir);
    d->cap = p->cap;
    d->chunk_max = p->chunk_max;
    d->n_ctx = p->n_ctx;
    d->any = p->any;
    d->verbose = p->verbose;
    d->wake = p->wake;
    d->wake_arg = p->wake_arg;
    d->engine_fp = cera_engine_fingerprint(e);
    d->n_ad = p->n_adapters;
    d->ad = calloc((size_t)(p->n_adapters > 0 ? p->n_adapters : 1), sizeof *d->ad);
    d->ad_fp = calloc((size_t)(p->n_adapters > 0 ? p->n_adapters : 1), sizeof *d->ad_fp);
    if (!d->dir || !d->ad || !d->ad_fp) {
        disk_free(d);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "--cache-dir: out of memory");
    }
    for (int i = 0; i < d->n_ad; i++) {
        d->ad[i] = p->adapters[i];
        d->ad_fp[i] = cera_adapter_fingerprint(p->adapters[i]);
    }
    d->dfd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int n_stale = 0, n_bad = 0;
    if (d->dfd < 0)
        st = cera_fail(err, CERA_ERR_IO, "--cache-dir %s: %s", p->dir, strerror(errno));
    else
        st = scan(d, &n_stale, &n_bad, err);
    if (st) {
        disk_free(d);
        return st;
    }
    const size_t found = d->x.n;
    const uint64_t found_bytes = d->x.total;
    pthread_mutex_lock(&d->mu);
    evict_locked(d);
    pthread_mutex_unlock(&d->mu);
    fprintf(stderr, "cera serve: --cache-dir %s: %zu prefix files (%.1f MiB) of a %.1f MiB cap", d->dir,
            found, (double)found_bytes / (1 << 20), (double)d->cap / (1 << 20));
    if (found != d->x.n) fprintf(stderr, ", %zu least recently used deleted to fit it", found - d->x.n);
    if (n_bad) fprintf(stderr, ", %d damaged deleted", n_bad);
    if (n_stale) fprintf(stderr, ", %d stale temporary files deleted", n_stale);
    fprintf(stderr, "\n");
    if (pthread_create(&d->writer, NULL, writer_main, d)) {
        disk_free(d);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "--cache-dir: cannot start the writer thread");
    }
    if (pthread_create(&d->reader, NULL, reader_main, d)) {
        pthread_mutex_lock(&d->mu);
        d->stopping = true;
        pthread_cond_signal(&d->cv_write);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->writer, NULL);
        disk_free(d);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "--cache-dir: cannot start the reader thread");
    }
    *out = d;
    return CERA_OK;
}

void serve_disk_close(serve_disk *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_broadcast(&d->cv_write);
    pthread_cond_broadcast(&d->cv_read);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->writer, NULL);
    pthread_join(d->reader, NULL);
    /* loads nobody collected (the scheduler cancels its own before this) */
    load_task *lists[2] = {d->lq, d->done};
    for (int i = 0; i < 2; i++)
        for (load_task *t = lists[i], *nx; t; t = nx) {
            nx = t->next;
            cera_session_free(t->s);
            free(t->prefix);
            free(t);
        }
    disk_free(d);
}
