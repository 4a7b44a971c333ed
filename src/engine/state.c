/*
 * state.c — saved sessions (cera.h: cera_session_save, cera_session_load): a session's
 * timeline written to a file and read back into a session of an engine on the same model.
 *
 * The file, little-endian, every field fixed-size:
 *   "CERASESS", u32 version, u64 model fingerprint, u32 adapters, per adapter u64
 *   fingerprint and f32 scale, u32 KV cache type, per KV group u64 block bytes (0: the
 *   group is unused) and i32 first held block, i32 positions (the blocks in the table follow
 *   from them),
 *   u64 recurrent-state bytes, i32 the token the sampler drew last (-1: none), u32 n_vocab,
 *   u32 whether a logits row follows, the RNG (u32 [624] + i32 index); then the tokens
 *   (i32 per position), the last logits row (f32 [n_vocab]), the recurrent state, each
 *   group's held blocks in table order (raw: the backend's own block layout, K/V rows of
 *   every layer); last a u64 checksum of everything before it.
 * The model fingerprint hashes the file's tensors (names, types, shapes and the first and
 * last bytes of each one's data), an adapter's its factors, so a file saved on another model
 * or with other adapters is refused by name rather than giving wrong logits
 * (cera_engine_fingerprint and cera_adapter_fingerprint give these hashes, with the KV format
 * and the backend, to whoever names stored files by them). Loading reads
 * the file twice: once to check its header and checksum and the header against this engine
 * and session (nothing changes when that fails), once to fill the session.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine_impl.h"

#define MAGIC   "CERASESS"
#define VERSION 1u

/* ---- A 64-bit checksum (FNV-1a over 8-byte words, the tail bytewise) ------------------ */

typedef struct hasher {
    uint64_t h;
    uint8_t tail[8];
    int n_tail;
} hasher;

static void hash_init(hasher *x) {
    x->h = 0xcbf29ce484222325ull;
    x->n_tail = 0;
}

static void hash_word(hasher *x, uint64_t w) { x->h = (x->h ^ w) * 0x100000001b3ull; }

static void hash_bytes(hasher *x, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n && x->n_tail) {
        x->tail[x->n_tail++] = *b++, n--;
        if (x->n_tail == 8) {
            uint64_t w;
            memcpy(&w, x->tail, 8);
            hash_word(x, w);
            x->n_tail = 0;
        }
    }
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        hash_word(x, w);
    }
    while (n--) x->tail[x->n_tail++] = *b++;
}

static uint64_t hash_end(hasher *x) {
    for (int i = 0; i < x->n_tail; i++) x->h = (x->h ^ x->tail[i]) * 0x100000001b3ull;
    x->n_tail = 0;
    return x->h;
}

uint64_t cera_session_file_checksum(const void *p, size_t n) {
    hasher x;
    hash_init(&x);
    hash_bytes(&x, p, n);
    return hash_end(&x);
}

/* The model's fingerprint: every tensor's name, type and shape, and up to 64 bytes from each
 * end of its data (a weight file's bytes are too many to hash at every save). */
static uint64_t model_fingerprint(const cera_engine *e) {
    hasher x;
    hash_init(&x);
    const gguf_file *f = e->file;
    hash_bytes(&x, &f->n_tensors, sizeof f->n_tensors);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        hash_bytes(&x, t->name.data, (size_t)t->name.len);
        const uint32_t ty = (uint32_t)t->type;
        hash_bytes(&x, &ty, sizeof ty);
        hash_bytes(&x, t->ne, sizeof t->ne);
        const size_t n = t->nbytes < 64 ? (size_t)t->nbytes : 64;
        if (t->data && n) {
            hash_bytes(&x, t->data, n);
            hash_bytes(&x, (const uint8_t *)t->data + t->nbytes - n, n);
        }
    }
    return hash_end(&x);
}

static uint64_t adapter_fingerprint(const cera_adapter *a) {
    hasher x;
    hash_init(&x);
    hash_bytes(&x, &a->n_layer, sizeof a->n_layer);
    hash_bytes(&x, &a->alpha, sizeof a->alpha);
    hash_bytes(&x, a->data, a->used * sizeof(float));
    return hash_end(&x);
}

uint64_t cera_adapter_fingerprint(const cera_adapter *a) { return a ? adapter_fingerprint(a) : 0; }

/* ---- The header --------------------------------------------------------------------- */

typedef struct header {
    uint64_t model;
    uint32_t n_adapters;
    uint64_t adapter[CERA_LORA_MAX_SET];
    float scale[CERA_LORA_MAX_SET];
    uint32_t kv_type;
    uint64_t block_bytes[CERA_KV_GROUPS];
    int32_t first[CERA_KV_GROUPS];
    int32_t n_pos;
    uint64_t state_bytes;
    int32_t pending_sampled;
    uint32_t n_vocab, has_logits;
    cera_mt19937 rng;
} header;

/* The blocks a timeline of n_pos positions holds in each group's table. */
static int n_blocks_of(int32_t n_pos) { return (n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK; }

/* Bytes of one block of group g where the session's blocks live (0: an unused group). */
static size_t block_bytes(const cera_engine *e, int g) {
    const cera_kv_group *G = &e->kv->group[g];
    if (!G->n_layer) return 0;
    if (e->backend->kv_on_host) return G->block_bytes;
    return e->backend->kv_block_bytes ? e->backend->kv_block_bytes(e->backend, g) : 0;
}

/* A stream that writes (or reads) the file and hashes what passes; `done` counts its bytes. */
typedef struct stream {
    FILE *f;
    bool write;
    hasher h;
    uint64_t done;
    const char *path;
    cera_error *err;
    cera_status st;
} stream;

static void stream_open(stream *s, const char *path, bool write, cera_error *err) {
    memset(s, 0, sizeof *s);
    s->f = fopen(path, write ? "wb" : "rb");
    s->write = write;
    hash_init(&s->h);
    s->path = path;
    s->err = err;
    if (!s->f)
        s->st =
            cera_fail(err, CERA_ERR_IO, "%s: cannot %s the session file", path, write ? "create" : "open");
}

/* n bytes at p to the file, or from it into p (false once anything failed). */
static bool io(stream *s, void *p, size_t n) {
    if (s->st) return false;
    if (s->write && n && fwrite(p, 1, n, s->f) != n)
        s->st = cera_fail(s->err, CERA_ERR_IO, "%s: cannot write the session file", s->path);
    else if (!s->write && n && fread(p, 1, n, s->f) != n)
        s->st = cera_fail(s->err, CERA_ERR_FORMAT, "%s: the session file is cut short", s->path);
    if (s->st) return false;
    hash_bytes(&s->h, p, n);
    s->done += n;
    return true;
}

static bool bad(stream *s, const char *what) {
    s->st = cera_fail(s->err, CERA_ERR_FORMAT, "%s: %s", s->path, what);
    return false;
}

/* The header, written or read (a read checks the magic, the version and the adapter count
 * before anything depends on them). */
static bool header_io(stream *s, header *h) {
    char magic[8];
    uint32_t v = VERSION;
    memcpy(magic, MAGIC, 8);
    if (!io(s, magic, 8)) return false;
    if (memcmp(magic, MAGIC, 8)) return bad(s, "not a cera session file");
    if (!io(s, &v, 4)) return false;
    if (v != VERSION) return bad(s, "a session file of another version");
    io(s, &h->model, 8);
    if (!io(s, &h->n_adapters, 4)) return false;
    if (h->n_adapters > CERA_LORA_MAX_SET) return bad(s, "too many adapters");
    for (uint32_t i = 0; i < h->n_adapters; i++) io(s, &h->adapter[i], 8), io(s, &h->scale[i], 4);
    io(s, &h->kv_type, 4);
    for (int g = 0; g < CERA_KV_GROUPS; g++) io(s, &h->block_bytes[g], 8), io(s, &h->first[g], 4);
    io(s, &h->n_pos, 4);
    io(s, &h->state_bytes, 8);
    io(s, &h->pending_sampled, 4);
    io(s, &h->n_vocab, 4);
    io(s, &h->has_logits, 4);
    io(s, h->rng.mt, sizeof h->rng.mt);
    return io(s, &h->rng.index, 4);
}

static uint32_t kv_type_word(const cera_engine *e) {
    /* K's type, V's when it differs, whether each is rotated and whether a device's layout holds
     * them, in one word (a host cache of one unrotated type has the type's number, as before V and
     * rotation had a say); a device keeps the block types in a layout of its own (the same
     * bytes, another order) */
    const cera_kv_format *f = &e->kv->fmt;
    uint32_t w = (uint32_t)f->k | (f->v != f->k ? (uint32_t)(f->v + 1) << 4 : 0) |
                 (uint32_t)(f->rot_k ? 1 : 0) << 8 | (uint32_t)(f->rot_v ? 1 : 0) << 9;
    const bool block_k = f->k == CERA_KV_Q8_0 || f->k == CERA_KV_Q4_0,
               block_v = f->v == CERA_KV_Q8_0 || f->v == CERA_KV_Q4_0;
    if (!e->backend->kv_on_host && (block_k || block_v)) w |= 1u << 12;
    return w;
}

/* The header this session would write. */
static void session_header(const cera_session *s, header *h) {
    const cera_engine *e = s->engine;
    memset(h, 0, sizeof *h);
    h->model = model_fingerprint(e);
    for (int i = 0; i < s->lora.n; i++) {
        h->adapter[h->n_adapters] = adapter_fingerprint(s->lora.e[i].adapter);
        h->scale[h->n_adapters++] = s->lora.e[i].scale;
    }
    h->kv_type = kv_type_word(e);
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        h->block_bytes[g] = block_bytes(e, g);
        h->first[g] = s->seq.first[g];
    }
    h->n_pos = s->seq.n_pos;
    h->state_bytes = e->kv->state_bytes;
    h->pending_sampled = s->pending_sampled;
    h->n_vocab = (uint32_t)e->model.hp.n_vocab;
    h->has_logits = s->n_logit_rows > 0;
    cera_sampler_rng_get(s->sampler, &h->rng);
}

/* What a file's header ties it to, less the adapters and the timeline, with the file's version and
 * the backend that computes (and what else decides its numbers). */
uint64_t cera_engine_fingerprint(const cera_engine *e) {
    if (!e) return 0;
    hasher x;
    hash_init(&x);
    hash_word(&x, model_fingerprint(e));
    hash_word(&x, VERSION);
    hash_word(&x, kv_type_word(e));
    hash_word(&x, (uint64_t)e->model.hp.n_vocab);
    for (int g = 0; g < CERA_KV_GROUPS; g++) hash_word(&x, block_bytes(e, g));
    hash_word(&x, e->kv->state_bytes);
    const char *be[2] = {e->backend->name, e->backend->variant ? e->backend->variant : ""};
    for (int i = 0; i < 2; i++) {
        for (const char *c = be[i]; *c; c++) hash_word(&x, (uint8_t)*c);
        hash_word(&x, 0x100); /* the end of a name */
    }
    return x.h;
}

/* Copies n bytes between the file's buffer and host storage, the way to_store says. */
static void host_copy(uint8_t *store, void *buf, size_t n, bool to_store) {
    if (to_store)
        memcpy(store, buf, n);
    else
        memcpy(buf, store, n);
}

/* The session's recurrent state between buf and its storage (host, or the device's). */
static cera_status state_copy(cera_session *s, void *buf, bool to_store, cera_error *err) {
    cera_engine *e = s->engine;
    if (e->backend->kv_on_host || !e->backend->state_io) {
        host_copy(cera_kv_seq_state(&s->seq), buf, e->kv->state_bytes, to_store);
        return CERA_OK;
    }
    return e->backend->state_io(e->backend, s->seq.id, buf, to_store, err);
}

/* Block `block` of group g between buf and its storage. */
static cera_status block_copy(cera_session *s, int g, int block, void *buf, bool to_store, cera_error *err) {
    cera_engine *e = s->engine;
    const cera_kv_group *G = &e->kv->group[g];
    if (e->backend->kv_on_host) {
        host_copy(G->data + (size_t)block * G->block_bytes, buf, G->block_bytes, to_store);
        return CERA_OK;
    }
    if (!e->backend->kv_io)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "the %s backend cannot save sessions", e->backend->name);
    return e->backend->kv_io(e->backend, g, block, buf, to_store, err);
}

/* Bytes of KV a save or a load copies in one turn of the engine's lock: the file is read and
 * written outside it, so that other sessions' forward calls go on between the turns. */
#define BODY_RUN_BYTES ((size_t)4 << 20)

/* The session's recurrent state and each held block, through one buffer: read from storage
 * and written to the file, or read from the file into storage, a run of blocks per turn of
 * the engine's lock (the session is its caller's alone, and blocks it shares with others are
 * copied before anyone writes into them, so its blocks hold still between the turns). */
static cera_status body_io(cera_session *s, stream *f, const header *h, cera_error *err) {
    const bool load = !f->write;
    pthread_mutex_t *mu = &s->engine->forward_lock;
    size_t most = (size_t)h->state_bytes;
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        const size_t b = (size_t)h->block_bytes[g];
        const size_t run = b ? (BODY_RUN_BYTES > b ? BODY_RUN_BYTES / b * b : b) : 0;
        most = run > most ? run : most;
    }
    uint8_t *buf = malloc(most ? most : 1);
    if (!buf) return cera_fail(err, CERA_ERR_NO_MEMORY, "session file buffer of %zu bytes", most);
    cera_status st = CERA_OK;
    if (h->state_bytes) {
        if (!load) {
            pthread_mutex_lock(mu);
            st = state_copy(s, buf, false, err);
            pthread_mutex_unlock(mu);
        }
        if (!st && io(f, buf, (size_t)h->state_bytes) && load) {
            pthread_mutex_lock(mu);
            st = state_copy(s, buf, true, err);
            pthread_mutex_unlock(mu);
        }
    }
    const int n_blocks = n_blocks_of(h->n_pos);
    for (int g = 0; g < CERA_KV_GROUPS && !st && !f->st; g++) {
        const size_t b = (size_t)h->block_bytes[g];
        if (!b) continue;
        const int per_run = (int)(most / b);
        const int32_t *t = s->seq.blocks + (size_t)g * (size_t)s->seq.max_blocks;
        for (int i = h->first[g]; i < n_blocks && !st && !f->st; i += per_run) {
            const int k = n_blocks - i < per_run ? n_blocks - i : per_run;
            if (!load) {
                pthread_mutex_lock(mu);
                for (int r = 0; r < k && !st; r++)
                    st = block_copy(s, g, t[i + r], buf + (size_t)r * b, false, err);
                pthread_mutex_unlock(mu);
            }
            if (!st && io(f, buf, (size_t)k * b) && load) {
                pthread_mutex_lock(mu);
                for (int r = 0; r < k && !st; r++)
                    st = block_copy(s, g, t[i + r], buf + (size_t)r * b, true, err);
                pthread_mutex_unlock(mu);
            }
        }
    }
    free(buf);
    return st ? st : f->st;
}

cera_status cera_session_save(cera_session *s, const char *path, cera_error *err) {
    cera_error_clear(err);
    if (!s || !path) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_save: NULL argument");
    cera_status st = cera_session_flush_pending(s, err); /* the streamed token, evaluated */
    if (st) return st;
    const int nv = s->engine->model.hp.n_vocab;
    const float *row = s->n_logit_rows ? cera_session_logits(s, -1) : NULL;
    if (s->n_logit_rows && !row)
        return cera_fail(err, CERA_ERR_DEVICE, "cera_session_save: the last logits could not be fetched");
    // a file that is there and is not a session file (a model, say) is never written over
    FILE *old = fopen(path, "rb");
    if (old) {
        char magic[8];
        const size_t got = fread(magic, 1, 8, old);
        fclose(old);
        if (got > 0 && (got < 8 || memcmp(magic, MAGIC, 8)))
            return cera_fail(err, CERA_ERR_INVALID_ARG,
                             "%s exists and is not a cera session file: not written over", path);
    }
    header h;
    session_header(s, &h);
    stream f;
    stream_open(&f, path, true, err);
    if (f.st) return f.st;
    header_io(&f, &h);
    io(&f, s->tokens, sizeof(cera_token) * (size_t)h.n_pos);
    if (row) io(&f, (void *)row, sizeof(float) * (size_t)nv);
    if (!f.st) st = body_io(s, &f, &h, err);
    uint64_t sum = hash_end(&f.h);
    if (!st && !f.st && fwrite(&sum, 8, 1, f.f) != 1)
        f.st = cera_fail(err, CERA_ERR_IO, "%s: cannot write the session file", path);
    if (fclose(f.f) && !st && !f.st)
        f.st = cera_fail(err, CERA_ERR_IO, "%s: cannot write the session file", path);
    if (st || f.st) remove(path);
    return st ? st : f.st;
}

/* The first pass: the header, then the checksum over the whole file, then the header against
 * this session. */
static cera_status check_file(cera_session *s, const char *path, header *h, cera_error *err) {
    stream f;
    stream_open(&f, path, false, err);
    if (f.st) return f.st;
    const long size = fseek(f.f, 0, SEEK_END) ? -1 : ftell(f.f);
    if (size < 8 || fseek(f.f, 0, SEEK_SET)) {
        fclose(f.f);
        return cera_fail(err, CERA_ERR_FORMAT, "%s: not a cera session file", path);
    }
    // magic and version first, so that another file is called what it is
    uint8_t buf[1 << 16];
    if (header_io(&f, h))
        while ((long)f.done < size - 8) {
            const long left = size - 8 - (long)f.done;
            if (!io(&f, buf, left < (long)sizeof buf ? (size_t)left : sizeof buf)) break;
        }
    uint64_t sum = 0;
    const uint64_t want = hash_end(&f.h);
    if (!f.st && fread(&sum, 8, 1, f.f) != 1)
        f.st = cera_fail(err, CERA_ERR_FORMAT, "%s: the session file is cut short", path);
    fclose(f.f);
    if (f.st) return f.st;
    if (sum != want)
        return cera_fail(err, CERA_ERR_FORMAT, "%s: the session file is damaged (checksum mismatch)", path);
    header mine;
    session_header(s, &mine);
    const cera_engine *e = s->engine;
    if (h->model != mine.model)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: saved from another model than this engine's", path);
    if (h->n_adapters != mine.n_adapters ||
        memcmp(h->adapter, mine.adapter, sizeof(uint64_t) * h->n_adapters) ||
        memcmp(h->scale, mine.scale, sizeof(float) * h->n_adapters))
        return cera_fail(
            err, CERA_ERR_INVALID_ARG,
            "%s: saved with %u adapter(s) other than the %u attached to this session (or at other "
            "scales)",
            path, h->n_adapters, mine.n_adapters);
    if (h->kv_type != mine.kv_type || memcmp(h->block_bytes, mine.block_bytes, sizeof h->block_bytes) ||
        h->state_bytes != mine.state_bytes || h->n_vocab != mine.n_vocab)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: saved with another KV cache type or layout", path);
    const int need = n_blocks_of(h->n_pos);
    bool sane = h->n_pos >= 0 && h->has_logits <= 1 && h->rng.index >= 0 && h->rng.index <= CERA_MT_N &&
                h->pending_sampled >= -1 && h->pending_sampled < (int32_t)h->n_vocab;
    for (int g = 0; g < CERA_KV_GROUPS; g++)
        sane = sane && h->first[g] >= 0 && h->first[g] <= need && (h->block_bytes[g] || h->first[g] == 0) &&
               (e->kv->group[g].window || h->first[g] == 0);
    if (!sane)
        return cera_fail(err, CERA_ERR_FORMAT, "%s: the session file's header does not hold together", path);
    if (h->n_pos > e->params.n_ctx)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "%s: %d positions saved, the context holds %d", path,
                         h->n_pos, e->params.n_ctx);
    return CERA_OK;
}

cera_status cera_session_file_tokens(const char *path, cera_token *tokens, size_t cap, int *n_pos,
                                     cera_error *err) {
    cera_error_clear(err);
    if (!path || !n_pos || (!tokens && cap))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_file_tokens: NULL argument");
    *n_pos = 0;
    stream f;
    stream_open(&f, path, false, err);
    if (f.st) return f.st;
    const long size = fseek(f.f, 0, SEEK_END) ? -1 : ftell(f.f);
    header h;
    if (size < 8 || fseek(f.f, 0, SEEK_SET)) {
        f.st = cera_fail(err, CERA_ERR_FORMAT, "%s: not a cera session file", path);
    } else if (header_io(&f, &h)) {
        if (h.n_pos < 0 || (uint64_t)h.n_pos * sizeof(cera_token) + 8 > (uint64_t)size - f.done)
            f.st =
                cera_fail(err, CERA_ERR_FORMAT, "%s: the session file's header does not hold together", path);
        const size_t n = (size_t)h.n_pos < cap ? (size_t)h.n_pos : cap;
        if (!f.st && io(&f, tokens, n * sizeof(cera_token))) *n_pos = h.n_pos;
    }
    fclose(f.f);
    return f.st;
}

cera_status cera_session_load(cera_session *s, const char *path, cera_error *err) {
    cera_error_clear(err);
    if (!s || !path) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_load: NULL argument");
    header h;
    cera_status st = check_file(s, path, &h, err);
    if (st) return st;
    const int nv = s->engine->model.hp.n_vocab;
    stream f;
    stream_open(&f, path, false, err);
    if (f.st) return f.st;
    header again; /* the header read past: checked above */
    cera_token *tokens = malloc(sizeof(cera_token) * (size_t)(h.n_pos > 0 ? h.n_pos : 1));
    float *row = malloc(sizeof(float) * (size_t)nv);
    if (!tokens || !row) {
        free(tokens), free(row);
        fclose(f.f);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "session tokens");
    }
    header_io(&f, &again);
    io(&f, tokens, sizeof(cera_token) * (size_t)h.n_pos);
    for (int i = 0; i < h.n_pos && !f.st; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            f.st = cera_fail(err, CERA_ERR_FORMAT, "%s: token %d at position %d", path, tokens[i], i);
    if (!f.st && h.has_logits) io(&f, row, sizeof(float) * (size_t)nv);
    if (f.st) {
        free(tokens), free(row);
        fclose(f.f);
        return f.st;
    }
    // from here the session is replaced: cleared first, then given the file's timeline
    if ((st = cera_session_truncate(s, 0, err))) goto out;
    pthread_mutex_lock(&s->engine->forward_lock);
    st = cera_kv_seq_restore(&s->seq, h.n_pos, h.first, err);
    pthread_mutex_unlock(&s->engine->forward_lock);
    if (!st) st = body_io(s, &f, &h, err);
    if (st) {
        pthread_mutex_lock(&s->engine->forward_lock);
        cera_kv_seq_truncate(&s->seq, 0);
        pthread_mutex_unlock(&s->engine->forward_lock);
    }
    if (st) goto out;
    memcpy(s->tokens, tokens, sizeof(cera_token) * (size_t)h.n_pos);
    if (h.has_logits) memcpy(s->logits, row, sizeof(float) * (size_t)nv); /* room: one row at least */
    // the penalty history of the timeline (and of a drawn token not yet evaluated), then the RNG
    cera_sampler_reset(s->sampler);
    for (int i = 0; i < h.n_pos; i++) cera_sampler_accept(s->sampler, tokens[i]);
    if (h.pending_sampled >= 0) cera_sampler_accept(s->sampler, h.pending_sampled);
    cera_sampler_rng_set(s->sampler, &h.rng);
    s->pending_sampled = h.pending_sampled;
    s->n_logit_rows = h.has_logits ? 1 : 0;
    s->logits_first = 0;
    s->last_eval_n = s->n_logit_rows;
    s->logits_on_device = false;
    s->logits_fetched = true;
out:
    free(tokens), free(row);
    fclose(f.f);
    return st;
}
