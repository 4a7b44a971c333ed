/*
 * test_gguf_split.c — models split over several GGUF files (gguf_open_model): shards
 * written here as llama.cpp's gguf-split writes them (every key and the split keys in the
 * first, only the split keys in the others; <prefix>-0000K-of-0000N.gguf), and
 *   - the split model's logits equal the unsplit file's, bit for bit (2 and 3 shards);
 *   - a missing shard, a wrong split.count or split.no, a shard of another model, a
 *     tensor in two shards, opening a later shard, a badly named first shard: errors
 *     naming the file;
 *   - hostile variants (truncated or garbage shards, absurd counts) fail cleanly.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_util.h"
#include "gguf/gguf.h"
#include "testutil.h"

static char dir[512];

/* The path of shard k (from 1) of n of the set `name`. */
static const char *shard_path(const char *name, int k, int n) {
    static char buf[4][700];
    static int slot;
    char *p = buf[slot++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s-%05d-of-%05d.gguf", dir, name, k, n);
    return p;
}

typedef struct split_opts {
    int count_of[8];  /* per shard: the split.count written, 0 for the true count */
    int no_of[8];     /* per shard: split.no + 1 written, 0 for the true one */
    int dup_in_last;  /* the last shard repeats the first tensor */
    int tensors_plus; /* added to split.tensors.count */
} split_opts;

/* Writes src as n shards of `name`: tensors in n nearly equal runs. */
static bool write_split(const char *src, const char *name, int n, const split_opts *o) {
    gguf_file *f = NULL;
    cera_error err;
    if (gguf_open(src, &f, &err)) {
        CHECK(0, "%s: %s", src, err.message);
        return false;
    }
    bool ok = true;
    const uint64_t nt = f->n_tensors;
    for (int k = 0; k < n && ok; k++) {
        gguf_writer *w = gguf_writer_new();
        if (k == 0)
            for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
        const uint16_t no = (uint16_t)(o && o->no_of[k] ? o->no_of[k] - 1 : k);
        const uint16_t count = (uint16_t)(o && o->count_of[k] ? o->count_of[k] : n);
        const int32_t total = (int32_t)nt + (o ? o->tensors_plus : 0);
        gguf_value v = {.type = GGUF_TYPE_UINT16};
        v.v.u64 = no;
        gguf_writer_set_value(w, (gguf_str){8, "split.no"}, &v);
        v.v.u64 = count;
        gguf_writer_set_value(w, (gguf_str){11, "split.count"}, &v);
        gguf_writer_set_i32(w, "split.tensors.count", total);
        const uint64_t lo = nt * (uint64_t)k / (uint64_t)n, hi = nt * (uint64_t)(k + 1) / (uint64_t)n;
        char tn[256];
        for (uint64_t i = lo; i < hi && ok; i++) {
            const gguf_tensor *t = &f->tensors[i];
            gguf_str_copy(t->name, tn, sizeof tn);
            ok = !gguf_writer_add_tensor(w, tn, t->type, t->n_dims, t->ne, t->data, &err);
        }
        if (o && o->dup_in_last && k == n - 1 && ok) {
            const gguf_tensor *t = &f->tensors[0];
            gguf_str_copy(t->name, tn, sizeof tn);
            ok = !gguf_writer_add_tensor(w, tn, t->type, t->n_dims, t->ne, t->data, &err);
        }
        ok = ok && !gguf_writer_write(w, shard_path(name, k + 1, n), &err);
        CHECK(ok, "writing shard %d of %s: %s", k + 1, name, err.message);
        gguf_writer_free(w);
    }
    gguf_close(f);
    return ok;
}

static void remove_split(const char *name, int n) {
    for (int k = 1; k <= n; k++) unlink(shard_path(name, k, n));
}

static cera_engine *open_engine(const char *path, cera_error *err) {
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = 128;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_engine_open(path, &ep, &e, err);
    return e;
}

/* Logits of the golden prompt: the split model's equal the single file's, bit for bit. */
static void same_logits(const char *rel, const char *tokens_rel, int n_shards) {
    char name[64];
    snprintf(name, sizeof name, "same%d-%d", n_shards, (int)getpid());
    if (!write_split(shared_path(rel), name, n_shards, NULL)) return;
    size_t n = 0;
    int32_t *tok = read_ints(shared_path(tokens_rel), &n);
    cera_error err;
    cera_engine *one = open_engine(shared_path(rel), &err),
                *split = open_engine(shard_path(name, 1, n_shards), &err);
    CHECK(one && split, "%s in %d shards: %s", rel, n_shards, err.message);
    if (one && split && tok) {
        float *a = test_session_logits(one, NULL, 0, tok, n, false),
              *b = test_session_logits(split, NULL, 0, tok, n, false);
        const int nv = cera_engine_n_vocab(one);
        CHECK(a && b && !memcmp(a, b, n * (size_t)nv * sizeof *a), "%s in %d shards: logits differ", rel,
              n_shards);
        printf("%s in %d shards: %zu positions of logits equal the single file's bit for bit\n", rel,
               n_shards, n);
        free(a);
        free(b);
    }
    cera_engine_close(one);
    cera_engine_close(split);
    free(tok);
    remove_split(name, n_shards);
}

/* Opening the set fails, with a message holding `want` (a file name, a reason) and `want2`. */
static void fails(const char *what, const char *path, const char *want, const char *want2) {
    cera_error err = {0};
    cera_engine *e = open_engine(path, &err);
    CHECK(!e, "%s: opened", what);
    CHECK(strstr(err.message, want) && (!want2 || strstr(err.message, want2)),
          "%s: message '%s' lacks '%s' / '%s'", what, err.message, want, want2 ? want2 : "");
    if (!e) printf("%s: %s\n", what, err.message);
    cera_engine_close(e);
}

static void errors(void) {
    const char *src = shared_path("golden/synth-phi3-q8_0.gguf");
    char name[64];
    snprintf(name, sizeof name, "bad-%d", (int)getpid());
    /* a missing shard */
    if (write_split(src, name, 3, NULL)) {
        char keep[700];
        snprintf(keep, sizeof keep, "%s", shard_path(name, 3, 3));
        unlink(keep);
        fails("missing shard", shard_path(name, 1, 3), keep, "shard 3 of 3");
        fails("a later shard opened", shard_path(name, 2, 3), shard_path(name, 2, 3), "open the first");
    }
    remove_split(name, 3);
    /* a shard claiming another count, another position */
    split_opts o = {.count_of = {0, 2, 0}};
    if (write_split(src, name, 3, &o))
        fails("wrong split.count", shard_path(name, 1, 3), shard_path(name, 2, 3), "split.count 2");
    split_opts o2 = {.no_of = {0, 3, 2}};
    if (write_split(src, name, 3, &o2))
        fails("shards swapped", shard_path(name, 1, 3), shard_path(name, 2, 3), "another split model");
    /* the first shard says 3 files but has another name */
    char renamed[700];
    snprintf(renamed, sizeof renamed, "%s/%s-renamed.gguf", dir, name);
    if (!rename(shard_path(name, 1, 3), renamed))
        fails("renamed first shard", renamed, renamed, "-00001-of-00003.gguf");
    unlink(renamed);
    remove_split(name, 3);
    /* a shard of another model (same count, another tensor total) */
    char other[64];
    snprintf(other, sizeof other, "other-%d", (int)getpid());
    if (write_split(src, name, 3, NULL) &&
        write_split(shared_path("models/stories260K.gguf"), other, 3, NULL) &&
        !rename(shard_path(other, 2, 3), shard_path(name, 2, 3)))
        fails("shard of another model", shard_path(name, 1, 3), shard_path(name, 2, 3),
              "another split model");
    remove_split(other, 3);
    remove_split(name, 3);
    /* a tensor in two shards, a total that does not add up */
    split_opts o3 = {.dup_in_last = 1, .tensors_plus = 1};
    if (write_split(src, name, 2, &o3))
        fails("tensor in two shards", shard_path(name, 1, 2), shard_path(name, 2, 2), "earlier shard");
    remove_split(name, 2);
    split_opts o4 = {.tensors_plus = 5};
    if (write_split(src, name, 2, &o4))
        fails("wrong tensor total", shard_path(name, 1, 2), "hold 21 tensors", "says 26");
    remove_split(name, 2);
}

/* Truncated and garbage shards, absurd counts: errors, never a crash. */
static void hostile(void) {
    const char *src = shared_path("golden/synth-phi3-q8_0.gguf");
    char name[64];
    snprintf(name, sizeof name, "hostile-%d", (int)getpid());
    if (write_split(src, name, 2, NULL)) {
        size_t size = 0;
        uint8_t *data = read_file(shard_path(name, 2, 2), &size);
        const size_t cuts[] = {0, 4, 24, size / 2, size - 1};
        for (size_t c = 0; data && c < sizeof cuts / sizeof cuts[0]; c++) {
            FILE *fp = fopen(shard_path(name, 2, 2), "wb");
            fwrite(data, 1, cuts[c], fp);
            fclose(fp);
            fails("truncated shard", shard_path(name, 1, 2), shard_path(name, 2, 2), NULL);
        }
        test_rng r = {0x5117};
        for (int it = 0; data && it < 40; it++) { /* bytes flipped in the second shard's header */
            uint8_t *m = malloc(size);
            memcpy(m, data, size);
            for (int j = 0; j < 4; j++)
                m[test_rng_next(&r) % (size < 512 ? size : 512)] ^= (uint8_t)(1 + test_rng_next(&r) % 255);
            FILE *fp = fopen(shard_path(name, 2, 2), "wb");
            fwrite(m, 1, size, fp);
            fclose(fp);
            free(m);
            cera_error err;
            cera_engine *e = open_engine(shard_path(name, 1, 2), &err);
            cera_engine_close(e); /* a flip in tensor data may still open: only no crash is asked */
        }
        free(data);
    }
    remove_split(name, 2);
    /* absurd counts in the first shard */
    const int counts[] = {65535, 1000};
    for (int c = 0; c < 2; c++) {
        split_opts o = {.count_of = {counts[c], 0}};
        if (write_split(src, name, 2, &o))
            fails("absurd split.count", shard_path(name, 1, 2), shard_path(name, 1, 2), "split.count");
        remove_split(name, 2);
    }
    split_opts o = {.no_of = {9, 0}};
    if (write_split(src, name, 2, &o))
        fails("split.no past the count", shard_path(name, 1, 2), "split.no 8", NULL);
    remove_split(name, 2);
}

int main(void) {
    snprintf(dir, sizeof dir, "%s", CERA_BINARY_DIR);
    same_logits("golden/synth-phi3-q8_0.gguf", "golden/synth-phi3-q8_0.tokens", 2);
    same_logits("golden/synth-llama-q4_k_m.gguf", "golden/synth-llama-q4_k_m.tokens", 3);
    same_logits("models/stories260K.gguf", "golden/stories260K.p1.tokens", 3);
    errors();
    hostile();
    return test_finish();
}
