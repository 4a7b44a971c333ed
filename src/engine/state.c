/*
 * state.c — saved sessions (cera.h: cera_session_save, cera_session_load): a session's
 * timeline written to a file and read back into a session of an engine on the same model.
 *
 * The file, little-endian, every field fixed-size:
 *   "CERASESS", u32 version, u64 model fingerprint, u32 adapters, per adapter u64
 *   fingerprint and f32 scale, u32 KV cache type, per KV group u64 block bytes (0: the
 *   group is unused), i32 first held block and i32 blocks in the table, i32 positions,
 *   u64 recurrent-state bytes, i32 the token the sampler drew last (-1: none), u32 n_vocab,
 *   u32 whether a logits row follows, the RNG (u32 [624] + i32 index); then the tokens
 *   (i32 per position), the last logits row (f32 [n_vocab]), the recurrent state, each
 *   group's held blocks in table order (raw: the backend's own block layout, K/V rows of
 *   every layer); last a u64 checksum of everything before it.
 * The model fingerprint hashes the file's tensors (names, types, shapes and the first and
 * last bytes of each one's data), an adapter's its factors, so a file saved on another model
 * or with other adapters is refused by name rather than giving wrong logits. Loading reads
 * the file twice: once to check its checksum and header against this engine and session
 * (nothing changes when that fails), once to fill the session.
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

/* ---- The header --------------------------------------------------------------------- */

typedef struct header {
    uint64_t model;
    uint32_t n_adapters;
    uint64_t adapter[CERA_LORA_MAX_SET];
    float scale[CERA_LORA_MAX_SET];
    uint32_t kv_type;
    uint64_t block_bytes[CERA_KV_GROUPS];
    int32_t first[CERA_KV_GROUPS], n_blocks;
    int32_t n_pos;
    uint64_t state_bytes;
    int32_t pending_sampled;
    uint32_t n_vocab, has_logits;
    cera_mt19937 rng;
} header;

/* Bytes of one block of group g where the session's blocks live (0: an unused group). */
static size_t block_bytes(const cera_engine *e, int g) {
    const cera_kv_group *G = &e->kv->group[g];
    if (!G->n_layer) return 0;
    if (e->backend->kv_on_host) return G->block_bytes;
    return e->backend->kv_block_bytes ? e->backend->kv_block_bytes(e->backend, g) : 0;
}

/* A stream that writes or reads and hashes what passes. */
typedef struct stream {
    FILE *f;
    hasher h;
    const char *path;
    cera_error *err;
    cera_status st;
} stream;

static bool put(stream *s, const void *p, size_t n) {
    if (s->st) return false;
    hash_bytes(&s->h, p, n);
    if (n && fwrite(p, 1, n, s->f) != n)
        s->st = cera_fail(s->err, CERA_ERR_IO, "%s: cannot write the session file", s->path);
    return !s->st;
}

static bool get(stream *s, void *p, size_t n) {
    if (s->st) return false;
    if (n && fread(p, 1, n, s->f) != n) {
        s->st = cera_fail(s->err, CERA_ERR_FORMAT, "%s: the session file is cut short", s->path);
        return false;
    }
    hash_bytes(&s->h, p, n);
    return true;
}

static void put_header(stream *s, const header *h) {
    put(s, MAGIC, 8);
    const uint32_t v = VERSION;
    put(s, &v, 4);
    put(s, &h->model, 8);
    put(s, &h->n_adapters, 4);
    for (uint32_t i = 0; i < h->n_adapters; i++) put(s, &h->adapter[i], 8), put(s, &h->scale[i], 4);
    put(s, &h->kv_type, 4);
    for (int g = 0; g < CERA_KV_GROUPS; g++) put(s, &h->block_bytes[g], 8), put(s, &h->first[g], 4);
    put(s, &h->n_blocks, 4);
    put(s, &h->n_pos, 4);
    put(s, &h->state_bytes, 8);
    put(s, &h->pending_sampled, 4);
    put(s, &h->n_vocab, 4);
    put(s, &h->has_logits, 4);
    put(s, h->rng.mt, sizeof h->rng.mt);
    put(s, &h->rng.index, 4);
}

static bool get_header(stream *s, header *h) {
    char magic[8];
    uint32_t v = 0;
    if (!get(s, magic, 8)) return false;
    if (memcmp(magic, MAGIC, 8)) {
        s->st = cera_fail(s->err, CERA_ERR_FORMAT, "%s: not a cera session file", s->path);
        return false;
    }
    if (!get(s, &v, 4)) return false;
    if (v != VERSION) {
        s->st = cera_fail(s->err, CERA_ERR_FORMAT, "%s: session file version %u (this cera reads %u)",
                          s->path, v, VERSION);
        return false;
    }
    get(s, &h->model, 8);
    if (!get(s, &h->n_adapters, 4)) return false; /* the count bounds the loop below */
    if (h->n_adapters > CERA_LORA_MAX_SET) {
        s->st = cera_fail(s->err, CERA_ERR_FORMAT, "%s: %u adapters", s->path, h->n_adapters);
        return false;
    }
    for (uint32_t i = 0; i < h->n_adapters; i++) get(s, &h->adapter[i], 8), get(s, &h->scale[i], 4);
    get(s, &h->kv_type, 4);
    for (int g = 0; g < CERA_KV_GROUPS; g++) get(s, &h->block_bytes[g], 8), get(s, &h->first[g], 4);
    get(s, &h->n_blocks, 4);
    get(s, &h->n_pos, 4);
    get(s, &h->state_bytes, 8);
    get(s, &h->pending_sampled, 4);
    get(s, &h->n_vocab, 4);
    get(s, &h->has_logits, 4);
    get(s, h->rng.mt, sizeof h->rng.mt);
    get(s, &h->rng.index, 4);
    return !s->st;
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
    h->kv_type = (uint32_t)e->kv->type;
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        h->block_bytes[g] = block_bytes(e, g);
        h->first[g] = s->seq.first[g];
    }
    h->n_blocks = s->seq.n_blocks;
    h->n_pos = s->seq.n_pos;
    h->state_bytes = e->kv->state_bytes;
    h->pending_sampled = s->pending_sampled;
    h->n_vocab = (uint32_t)e->model.hp.n_vocab;
    h->has_logits = s->n_logit_rows > 0;
    cera_sampler_rng_get(s->sampler, &h->rng);
}

/* One block (or the state when block < 0) of the session between the file and its storage. */
static cera_status block_io(cera_session *s, int g, int block, void *buf, bool to_store, cera_error *err) {
    cera_engine *e = s->engine;
    cera_kv_pool *p = e->kv;
    if (block < 0) {
        if (e->backend->kv_on_host || !e->backend->state_io) {
            uint8_t *st = cera_kv_seq_state(&s->seq);
            if (to_store)
                memcpy(st, buf, p->state_bytes);
            else
                memcpy(buf, st, p->state_bytes);
            return CERA_OK;
        }
        return e->backend->state_io(e->backend, s->seq.id, buf, to_store, err);
    }
    const cera_kv_group *G = &p->group[g];
    if (e->backend->kv_on_host) {
        uint8_t *d = G->data + (size_t)block * G->block_bytes;
        if (to_store)
            memcpy(d, buf, G->block_bytes);
        else
            memcpy(buf, d, G->block_bytes);
        return CERA_OK;
    }
    if (!e->backend->kv_io)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "the %s backend cannot save sessions", e->backend->name);
    return e->backend->kv_io(e->backend, g, block, buf, to_store, err);
}

/* The session's state bytes (device or host) and each held block, through one buffer. */
static cera_status body_io(cera_session *s, stream *io, const header *h, bool load, cera_error *err) {
    size_t most = (size_t)h->state_bytes;
    for (int g = 0; g < CERA_KV_GROUPS; g++)
        most = h->block_bytes[g] > most ? (size_t)h->block_bytes[g] : most;
    uint8_t *buf = malloc(most ? most : 1);
    if (!buf) return cera_fail(err, CERA_ERR_NO_MEMORY, "session file buffer of %zu bytes", most);
    cera_status st = CERA_OK;
    if (h->state_bytes) {
        if (load) {
            if (get(io, buf, (size_t)h->state_bytes)) st = block_io(s, 0, -1, buf, true, err);
        } else if (!(st = block_io(s, 0, -1, buf, false, err))) {
            put(io, buf, (size_t)h->state_bytes);
        }
    }
    for (int g = 0; g < CERA_KV_GROUPS && !st && !io->st; g++) {
        if (!h->block_bytes[g]) continue;
        const int32_t *t = s->seq.blocks + (size_t)g * (size_t)s->seq.max_blocks;
        for (int i = h->first[g]; i < h->n_blocks && !st && !io->st; i++) {
            if (load) {
                if (get(io, buf, (size_t)h->block_bytes[g])) st = block_io(s, g, t[i], buf, true, err);
            } else if (!(st = block_io(s, g, t[i], buf, false, err))) {
                put(io, buf, (size_t)h->block_bytes[g]);
            }
        }
    }
    free(buf);
    return st ? st : io->st;
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
    stream io = {fopen(path, "wb"), {0}, path, err, CERA_OK};
    if (!io.f) return cera_fail(err, CERA_ERR_IO, "%s: cannot create the session file", path);
    hash_init(&io.h);
    put_header(&io, &h);
    put(&io, s->tokens, sizeof(cera_token) * (size_t)h.n_pos);
    if (row) put(&io, row, sizeof(float) * (size_t)nv);
    if (!io.st) {
        pthread_mutex_lock(&s->engine->forward_lock);
        st = body_io(s, &io, &h, false, err);
        pthread_mutex_unlock(&s->engine->forward_lock);
    }
    const uint64_t sum = hash_end(&io.h);
    if (!st && !io.st && fwrite(&sum, 8, 1, io.f) != 1)
        io.st = cera_fail(err, CERA_ERR_IO, "%s: cannot write the session file", path);
    if (fclose(io.f) && !st && !io.st)
        io.st = cera_fail(err, CERA_ERR_IO, "%s: cannot write the session file", path);
    if (st || io.st) remove(path);
    return st ? st : io.st;
}

/* The first pass: the checksum over the whole file, then the header against this session. */
static cera_status check_file(cera_session *s, const char *path, header *h, cera_error *err) {
    stream io = {fopen(path, "rb"), {0}, path, err, CERA_OK};
    if (!io.f) return cera_fail(err, CERA_ERR_IO, "%s: cannot open the session file", path);
    hash_init(&io.h);
    uint8_t buf[1 << 16];
    long left = fseek(io.f, 0, SEEK_END) ? -1 : ftell(io.f) - 8;
    if (left < 0 || fseek(io.f, 0, SEEK_SET)) {
        fclose(io.f);
        return cera_fail(err, CERA_ERR_FORMAT, "%s: not a cera session file", path);
    }
    while (left > 0 && !io.st) {
        const size_t n = left < (long)sizeof buf ? (size_t)left : sizeof buf;
        if (get(&io, buf, n)) left -= (long)n;
    }
    uint64_t sum = 0, want = hash_end(&io.h);
    if (!io.st && fread(&sum, 8, 1, io.f) != 1)
        io.st = cera_fail(err, CERA_ERR_FORMAT, "%s: the session file is cut short", path);
    fclose(io.f);
    if (io.st) return io.st;
    // the header: magic and version first, so another file is called what it is
    io.f = fopen(path, "rb");
    if (!io.f) return cera_fail(err, CERA_ERR_IO, "%s: cannot open the session file", path);
    hash_init(&io.h);
    const bool ok = get_header(&io, h);
    fclose(io.f);
    if (!ok) return io.st;
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
    const int need = (h->n_pos + CERA_KV_BLOCK - 1) / CERA_KV_BLOCK;
    bool sane = h->n_pos >= 0 && h->n_blocks == need && h->has_logits <= 1 && h->rng.index >= 0 &&
                h->rng.index <= CERA_MT_N && h->pending_sampled >= -1 &&
                h->pending_sampled < (int32_t)h->n_vocab;
    for (int g = 0; g < CERA_KV_GROUPS; g++)
        sane = sane && h->first[g] >= 0 && h->first[g] <= h->n_blocks &&
               (h->block_bytes[g] || h->first[g] == 0) && (e->kv->group[g].window || h->first[g] == 0);
    if (!sane)
        return cera_fail(err, CERA_ERR_FORMAT, "%s: the session file's header does not hold together", path);
    if (h->n_pos > e->params.n_ctx)
        return cera_fail(err, CERA_ERR_CONTEXT_FULL, "%s: %d positions saved, the context holds %d", path,
                         h->n_pos, e->params.n_ctx);
    return CERA_OK;
}

cera_status cera_session_load(cera_session *s, const char *path, cera_error *err) {
    cera_error_clear(err);
    if (!s || !path) return cera_fail(err, CERA_ERR_INVALID_ARG, "cera_session_load: NULL argument");
    header h;
    cera_status st = check_file(s, path, &h, err);
    if (st) return st;
    const int nv = s->engine->model.hp.n_vocab;
    stream io = {fopen(path, "rb"), {0}, path, err, CERA_OK};
    if (!io.f) return cera_fail(err, CERA_ERR_IO, "%s: cannot open the session file", path);
    hash_init(&io.h);
    header again;
    cera_token *tokens = malloc(sizeof(cera_token) * (size_t)(h.n_pos > 0 ? h.n_pos : 1));
    float *row = malloc(sizeof(float) * (size_t)nv);
    if (!tokens || !row) {
        free(tokens), free(row);
        fclose(io.f);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "session tokens");
    }
    get_header(&io, &again);
    get(&io, tokens, sizeof(cera_token) * (size_t)h.n_pos);
    for (int i = 0; i < h.n_pos && !io.st; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            io.st = cera_fail(err, CERA_ERR_FORMAT, "%s: token %d at position %d", path, tokens[i], i);
    if (!io.st && h.has_logits) get(&io, row, sizeof(float) * (size_t)nv);
    if (io.st) {
        free(tokens), free(row);
        fclose(io.f);
        return io.st;
    }
    // from here the session is replaced: cleared first, then given the file's timeline
    if ((st = cera_session_truncate(s, 0, err))) goto out;
    pthread_mutex_lock(&s->engine->forward_lock);
    st = cera_kv_seq_restore(&s->seq, h.n_pos, h.first, err);
    if (!st) st = body_io(s, &io, &h, true, err);
    if (st) cera_kv_seq_truncate(&s->seq, 0);
    pthread_mutex_unlock(&s->engine->forward_lock);
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
    fclose(io.f);
    return st;
}
