/*
 * backend.c — the CUDA backend behind the engine's backend table (backend/backend.h).
 *
 * The engine opens it for CERA_DEVICE_CUDA (or AUTO when a GPU answers). KV blocks live
 * on the GPU: kv_init gives the engine's pool device storage, one allocation for every
 * block of each group (full layers; sliding-window layers, kv/kv_cache.h) (F16, llama.cpp's
 * default, or Q8_0; an F32 request is refused at open, so AUTO falls back to the CPU), and a
 * forward call hands the batch's block tables of both groups to the kernels, which read
 * K/V through them; the storage never moves, so the decode graph is
 * captured once. Logits come back only for the tokens that want them; a forward without
 * a host buffer keeps each sequence's last wanted row in that sequence's slot (dev_logits,
 * indexed by cera_kv_seq.id), where logits_get copies it out and sample runs the sampler
 * chain on it (sample.cu), so that a generated token costs a 4-byte copy instead of
 * n_vocab floats. CERA_CUDA_SAMPLE=0 at open turns
 * the device chain off (the session then fetches the row and samples on the host).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"
#include "backend/cuda/sample_cuda.h"
#include "sample/sampler.h"
#include "backend/backend.h"

_Static_assert(CU_KV_BLOCK == CERA_KV_BLOCK, "the kernels' KV block is the engine's");

/* What one device sample needs, allocated once: the chain's scratch copy of the logits,
 * its arguments (sample_cuda.h layout) staged in pinned memory, and the token. */
typedef struct cu_sampler {
    int n_vocab;
    cudaStream_t st;
    float *scratch;  /* device [n_vocab] */
    int32_t *d_args; /* device [2 * (CERA_DEVICE_BIAS_MAX + n_vocab) + mask words] */
    int32_t *h_args; /* pinned, as d_args */
    int32_t *d_tok;  /* device [2]: the token, then the logits' count of non-finite values */
    int32_t *h_tok;  /* pinned [2], as d_tok */
} cu_sampler;

typedef struct cuda_backend {
    cera_backend base;
    cera_cuda_state *s;
    void *kv[CERA_KV_GROUPS];        /* the engine pool's blocks of each group (kv_init) */
    size_t kv_block[CERA_KV_GROUPS]; /* bytes of one block of each */
    float *dev_logits;               /* [n_seq_max, n_vocab]: each sequence slot's kept row */
    int n_seq_max;
    int32_t *offs;     /* [n_batch]: each batch sequence's block table offset */
    int32_t *tok_slot; /* [n_batch]: each token's sequence slot */
    float *state;      /* [n_seq_max][state_bytes]: the sequences' recurrent (conv) states, or NULL */
    size_t state_bytes;
    int32_t *last_row; /* [n_batch]: each batch sequence's last wanted row, or -1 */
    int32_t *tok_tbl;  /* [n_batch] */
    int32_t *rows;     /* [n_batch] */
    int32_t *tables;   /* [2][tables_cap]: the full group's tables, then the sliding group's */
    cu_sampler smp;    /* device sampling (unused when CERA_CUDA_SAMPLE=0) */
} cuda_backend;

static size_t mask_words(int n_vocab) { return ((size_t)n_vocab + 31) / 32; }

static void cu_sampler_free(cu_sampler *c) {
    cudaFree(c->scratch);
    cudaFree(c->d_args);
    cudaFree(c->d_tok);
    cudaFreeHost(c->h_args);
    cudaFreeHost(c->h_tok);
    memset(c, 0, sizeof *c);
}

static cera_status cu_sampler_alloc(cu_sampler *c, int n_vocab, cudaStream_t st, cera_error *err) {
    memset(c, 0, sizeof *c);
    c->n_vocab = n_vocab;
    c->st = st;
    const size_t arg_bytes =
        sizeof(int32_t) * (2 * ((size_t)CERA_DEVICE_BIAS_MAX + (size_t)n_vocab) + mask_words(n_vocab));
    CU_TRY(cudaMalloc((void **)&c->scratch, sizeof(float) * (size_t)n_vocab));
    CU_TRY(cudaMalloc((void **)&c->d_args, arg_bytes));
    CU_TRY(cudaMalloc((void **)&c->d_tok, 2 * sizeof(int32_t)));
    CU_TRY(cudaMallocHost((void **)&c->h_args, arg_bytes));
    CU_TRY(cudaMallocHost((void **)&c->h_tok, 2 * sizeof(int32_t)));
    return CERA_OK;
}

static cera_status cu_sampler_init(cu_sampler *c, int n_vocab, cudaStream_t st, cera_error *err) {
    const cera_status r = cu_sampler_alloc(c, n_vocab, st, err);
    if (r != CERA_OK) cu_sampler_free(c);
    return r;
}

/* Whether the device runs this chain (sample_cuda.h); decided before any draw. */
static bool device_chain(const cera_sampler_params *p) {
    if (p->n_logit_bias > CERA_DEVICE_BIAS_MAX) return false;
    if (cera_sampler_params_greedy(p)) return true;
    /* a tiny temperature may overflow logit / temp: the host's chain then acts as greedy */
    return p->typical_p >= 1.0f && p->temp >= 1e-3f && p->top_k >= 1 && p->top_k <= CERA_DEVICE_TOPK_MAX;
}

/* Samples logits [n_vocab] (device) with smp's chain, within mask when not NULL: the
 * arguments staged and uploaded, the draw taken from smp, the chain launched, the token
 * read back (-1: the mask left nothing). */
static cera_status cu_sampler_run(cu_sampler *c, cera_sampler *smp, const float *logits, const uint32_t *mask,
                                  cera_token *out, cera_error *err) {
    const cera_sampler_params *p = cera_sampler_params_of(smp);
    if (!device_chain(p))
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: the sampler chain runs on the host");
    const int32_t *pen_tok, *pen_cnt;
    const size_t n_pen = cera_sampler_penalty_window(smp, &pen_tok, &pen_cnt);
    if (n_pen > (size_t)c->n_vocab)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: a penalty window of %zu tokens", n_pen);
    const int n_bias = p->n_logit_bias;
    cu_sample_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.greedy = cera_sampler_params_greedy(p);
    cfg.top_k = p->top_k;
    cfg.top_p = p->top_p;
    cfg.min_p = p->min_p;
    cfg.log_min_p = p->min_p > 0.0f ? logf(p->min_p) : 0.0f; /* the host's logf, as stages.c */
    cfg.temp = p->temp;
    cfg.repeat = p->repeat_penalty;
    cfg.freq = p->freq_penalty;
    cfg.present = p->presence_penalty;
    cfg.n_bias = n_bias;
    cfg.n_pen = (int)n_pen;
    int32_t *a = c->h_args; /* the previous sample's copy has completed (it synchronized) */
    for (int i = 0; i < n_bias; i++) {
        a[i] = p->logit_bias[i].token;
        memcpy(&a[n_bias + i], &p->logit_bias[i].bias, sizeof(float));
    }
    memcpy(a + 2 * n_bias, pen_tok, n_pen * sizeof(int32_t));
    memcpy(a + 2 * n_bias + n_pen, pen_cnt, n_pen * sizeof(int32_t));
    size_t n_args = 2 * ((size_t)n_bias + n_pen);
    if (mask) {
        cfg.n_mask = (int)mask_words(c->n_vocab);
        memcpy(a + n_args, mask, (size_t)cfg.n_mask * sizeof(uint32_t));
        n_args += (size_t)cfg.n_mask;
    }
    cfg.u = cera_sampler_draw(smp); /* exactly where cera_sampler_sample draws */
    if (n_args)
        CU_TRY(cudaMemcpyAsync(c->d_args, a, n_args * sizeof(int32_t), cudaMemcpyHostToDevice, c->st));
    CU_TRY(cu_sample_chain(c->st, logits, c->scratch, c->n_vocab, n_args ? c->d_args : NULL, &cfg, c->d_tok));
    /* a NaN or Inf in the row would make the chain's choice meaningless: counted beside it */
    CU_TRY(cu_count_nonfinite(c->st, logits, c->n_vocab, c->d_tok + 1));
    CU_TRY(cudaMemcpyAsync(c->h_tok, c->d_tok, 2 * sizeof(int32_t), cudaMemcpyDeviceToHost, c->st));
    CU_TRY(cudaStreamSynchronize(c->st));
    if (c->h_tok[1])
        return cera_fail(
            err, CERA_ERR_FORMAT,
            "non-finite logits (%d NaN or +Inf of %d): the weights are corrupt, or an adapter or its "
            "scale overflows the float range",
            c->h_tok[1], c->n_vocab);
    if (*c->h_tok < (mask ? -1 : 0) || *c->h_tok >= c->n_vocab)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: the sampler kernel returned token %d", *c->h_tok);
    *out = *c->h_tok;
    return CERA_OK;
}

static cera_status cuda_kv_init(cera_backend *b, const cera_kv_pool *pool, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    const cera_cuda_state *s = be->s;
    bool same = pool->n_layer == s->n_kv_layer;
    for (int i = 0; same && i < pool->n_layer; i++)
        same = pool->layers[i].row == s->kvl[i].kv_dim && pool->layers[i].group == s->kvl[i].group;
    if (!same)
        return cera_fail(err, CERA_ERR_INTERNAL,
                         "cuda: the KV pool's %d layers are not the model's %d KV slots", pool->n_layer,
                         s->n_kv_layer);
    CU_TRY(cudaSetDevice(s->prm.device));
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        be->kv_block[g] = (size_t)s->kv_block[g];
        const size_t bytes = pool->group[g].n_layer ? (size_t)pool->group[g].n_blocks * be->kv_block[g] : 0;
        if (!bytes) continue;
        cudaError_t e = cudaMalloc(&be->kv[g], bytes);
        if (e != cudaSuccess) {
            be->kv[g] = NULL;
            cudaGetLastError();
            return cera_fail(err, CERA_ERR_NO_MEMORY,
                             "cuda: KV cache of %d %sblocks (%zu bytes): %s: a smaller kv_bytes",
                             pool->group[g].n_blocks, g == CERA_KV_SWA ? "sliding-window " : "", bytes,
                             cudaGetErrorString(e));
        }
        CU_TRY(cudaMemset(be->kv[g], 0, bytes));
    }
    const size_t lbytes = sizeof(float) * (size_t)be->s->n_vocab * (size_t)pool->n_seq_max;
    cudaError_t e = cudaMalloc((void **)&be->dev_logits, lbytes);
    if (e != cudaSuccess) {
        be->dev_logits = NULL;
        cudaGetLastError();
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: logits rows for %d sequences (%zu bytes): %s",
                         pool->n_seq_max, lbytes, cudaGetErrorString(e));
    }
    CU_TRY(cudaMemset(be->dev_logits, 0, lbytes));
    be->n_seq_max = pool->n_seq_max;
    if (pool->state_bytes) {
        const size_t sbytes = pool->state_bytes * (size_t)pool->n_seq_max;
        if (cudaMalloc((void **)&be->state, sbytes) != cudaSuccess) {
            be->state = NULL;
            cudaGetLastError();
            return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: recurrent states of %zu bytes", sbytes);
        }
        CU_TRY(cudaMemset(be->state, 0, sbytes));
        be->state_bytes = pool->state_bytes;
    }
    return CERA_OK;
}

static void cuda_kv_free(cera_backend *b) {
    cuda_backend *be = (cuda_backend *)b;
    for (int g = 0; g < CERA_KV_GROUPS; g++) {
        if (be->kv[g]) cudaFree(be->kv[g]);
        be->kv[g] = NULL;
    }
    if (be->dev_logits) cudaFree(be->dev_logits);
    if (be->state) cudaFree(be->state);
    be->dev_logits = NULL;
    be->state = NULL;
}

static cera_status cuda_kv_copy(cera_backend *b, const cera_kv_copy *copies, int n, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    for (int i = 0; i < n; i++) {
        const int g = copies[i].group;
        if (g < 0 || g >= CERA_KV_GROUPS || !be->kv[g])
            return cera_fail(err, CERA_ERR_INTERNAL, "cuda: a KV block copy in group %d", g);
        uint8_t *kv = be->kv[g];
        const size_t bb = be->kv_block[g];
        CU_TRY(cudaMemcpyAsync(kv + (size_t)copies[i].dst * bb, kv + (size_t)copies[i].src * bb, bb,
                               cudaMemcpyDeviceToDevice, be->s->st));
    }
    return CERA_OK;
}

/* A sequence slot's recurrent state: zeroed (src < 0, a new or cut-back sequence) or a copy
 * of slot src's (a fork). */
static cera_status cuda_seq_state(cera_backend *b, int dst, int src, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    if (!be->state) return CERA_OK;
    uint8_t *st = (uint8_t *)be->state;
    if (src < 0)
        CU_TRY(cudaMemsetAsync(st + (size_t)dst * be->state_bytes, 0, be->state_bytes, be->s->st));
    else
        CU_TRY(cudaMemcpyAsync(st + (size_t)dst * be->state_bytes, st + (size_t)src * be->state_bytes,
                               be->state_bytes, cudaMemcpyDeviceToDevice, be->s->st));
    return CERA_OK;
}

static size_t cuda_kv_block_bytes(cera_backend *b, int g) {
    const cuda_backend *be = (const cuda_backend *)b;
    return g >= 0 && g < CERA_KV_GROUPS && be->kv[g] ? be->kv_block[g] : 0;
}

static cera_status cuda_kv_io(cera_backend *b, int g, int block, void *host, bool to_device,
                              cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    if (g < 0 || g >= CERA_KV_GROUPS || !be->kv[g] || block < 0)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: KV block %d of group %d", block, g);
    uint8_t *d = (uint8_t *)be->kv[g] + (size_t)block * be->kv_block[g];
    CU_TRY(cudaSetDevice(be->s->prm.device));
    CU_TRY(cudaMemcpyAsync(to_device ? (void *)d : host, to_device ? host : (const void *)d, be->kv_block[g],
                           to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, be->s->st));
    CU_TRY(cudaStreamSynchronize(be->s->st));
    return CERA_OK;
}

static cera_status cuda_state_io(cera_backend *b, int slot, void *host, bool to_device, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    if (!be->state) return CERA_OK;
    if (slot < 0 || slot >= be->n_seq_max)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: state slot %d", slot);
    uint8_t *d = (uint8_t *)be->state + (size_t)slot * be->state_bytes;
    CU_TRY(cudaSetDevice(be->s->prm.device));
    CU_TRY(cudaMemcpyAsync(to_device ? (void *)d : host, to_device ? host : (const void *)d, be->state_bytes,
                           to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, be->s->st));
    CU_TRY(cudaStreamSynchronize(be->s->st));
    return CERA_OK;
}

/* Sequence slot seq_id's kept row, or NULL. */
static const float *slot_row(const cuda_backend *be, int seq_id) {
    if (!be->dev_logits || seq_id < 0 || seq_id >= be->n_seq_max) return NULL;
    return be->dev_logits + (size_t)seq_id * (size_t)be->s->n_vocab;
}

static cera_status cuda_logits_get(cera_backend *b, int seq_id, float *out, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    const float *row = slot_row(be, seq_id);
    if (!row) return cera_fail(err, CERA_ERR_INTERNAL, "cuda: sequence slot %d has no logits row", seq_id);
    CU_TRY(cudaSetDevice(be->s->prm.device));
    CU_TRY(
        cudaMemcpyAsync(out, row, sizeof(float) * (size_t)be->s->n_vocab, cudaMemcpyDeviceToHost, be->s->st));
    CU_TRY(cudaStreamSynchronize(be->s->st));
    return CERA_OK;
}

static cera_status cuda_sample(cera_backend *b, int seq_id, cera_sampler *smp, const uint32_t *mask,
                               cera_token *out, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    const float *row = slot_row(be, seq_id);
    if (!row) return cera_fail(err, CERA_ERR_INTERNAL, "cuda: sequence slot %d has no logits row", seq_id);
    CU_TRY(cudaSetDevice(be->s->prm.device));
    return cu_sampler_run(&be->smp, smp, row, mask, out, err);
}

static cera_status cuda_forward(cera_backend *b, const cera_batch *batch, float *logits, cera_error *err) {
    cuda_backend *be = (cuda_backend *)b;
    cera_cuda_state *s = be->s;
    if (batch->n_tokens < 1) return CERA_OK;
    if (batch->embd && (!logits || s->n_embd > s->n_vocab))
        return cera_fail(
            err, CERA_ERR_UNSUPPORTED,
            "cuda: embeddings need a host buffer and n_embd <= n_vocab (use the CPU: --device cpu)");
    if (batch->n_seqs < 1 || batch->n_seqs > s->prm.n_batch)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: a batch of %d sequences", batch->n_seqs);
    if (!be->kv[CERA_KV_FULL] && !be->kv[CERA_KV_SWA])
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: no KV storage (kv_init)");
    int n_tables = 0;
    for (int j = 0; j < batch->n_seqs; j++) {
        const cera_kv_seq *q = batch->seqs[j];
        if (n_tables + q->n_blocks > s->tables_cap)
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: the batch's block tables exceed %d entries",
                             s->tables_cap);
        be->offs[j] = n_tables;
        be->last_row[j] = -1;
        memcpy(be->tables + n_tables, q->blocks, sizeof(int32_t) * (size_t)q->n_blocks);
        n_tables += q->n_blocks;
    }
    /* the sliding group's tables (-1 where a block before the window was dropped, which the
     * kernels never read) after the full group's, at the same offsets */
    if (be->kv[CERA_KV_SWA])
        for (int j = 0; j < batch->n_seqs; j++) {
            const cera_kv_seq *q = batch->seqs[j];
            memcpy(be->tables + n_tables + be->offs[j],
                   q->blocks + (size_t)CERA_KV_SWA * (size_t)q->max_blocks,
                   sizeof(int32_t) * (size_t)q->n_blocks);
        }
    int n_out = 0;
    for (int i = 0; i < batch->n_tokens; i++) {
        const int j = batch->seq[i];
        if (j < 0 || j >= batch->n_seqs || batch->pos[i] < 0 ||
            batch->pos[i] >= batch->seqs[j]->n_blocks * CU_KV_BLOCK)
            return cera_fail(err, CERA_ERR_INVALID_ARG,
                             "cuda: token %d: position %d outside its sequence's blocks", i, batch->pos[i]);
        be->tok_tbl[i] = be->offs[j];
        if (batch->want_logits[i]) {
            be->last_row[j] = n_out;
            be->rows[n_out++] = i;
        }
    }
    for (int i = 0; i < batch->n_tokens; i++) be->tok_slot[i] = batch->seqs[batch->seq[i]]->id;
    s->conv_state = be->state ? be->state : s->own_state;
    s->embd = batch->embd;
    const cera_status fst =
        cu_forward(s, batch->token, batch->pos, batch->n_tokens, be->tok_tbl, be->tables, n_tables, be->kv,
                   be->tok_slot, be->rows, n_out, logits, NULL, batch->lora, err);
    s->embd = false;
    if (fst) return fst;
    if (batch->embd) return CERA_OK;
    if (!logits)
        /* keep each sequence's last wanted row ([n_out, n_vocab] rows in s->logits) in its
         * slot; stream order puts the copies before any later forward, sample or fetch */
        for (int j = 0; j < batch->n_seqs; j++) {
            if (be->last_row[j] < 0) continue;
            float *row = (float *)slot_row(be, batch->seqs[j]->id);
            if (!row) return cera_fail(err, CERA_ERR_INTERNAL, "cuda: sequence slot %d", batch->seqs[j]->id);
            CU_TRY(cudaMemcpyAsync(row, s->logits + (size_t)be->last_row[j] * s->n_vocab,
                                   sizeof(float) * (size_t)s->n_vocab, cudaMemcpyDeviceToDevice, s->st));
        }
    return CERA_OK;
}

static void cuda_adapter_free(cera_backend *b, uint64_t id) {
    cuda_backend *be = (cuda_backend *)b;
    cudaSetDevice(be->s->prm.device);
    cudaStreamSynchronize(be->s->st); /* no launch in flight may still read it */
    cu_lora_forget(be->s, id);
}

static void cuda_free(cera_backend *b) {
    cuda_backend *be = (cuda_backend *)b;
    if (be->s) cudaSetDevice(be->s->prm.device);
    cu_sampler_free(&be->smp);
    cuda_kv_free(b);
    cera_cuda_free(be->s);
    free(be->tok_tbl);
    free(be->offs);
    free(be->tok_slot);
    free(be->last_row);
    free(be->rows);
    free(be->tables);
    free(be);
}

cera_status cera_cuda_backend_open(const cera_model *model, const cera_engine_params *params,
                                   cera_backend **out, cera_error *err) {
    *out = NULL;
    /* the device kernels keep K and V in one type, F16, BF16, Q8_0 or Q4_0: another cache is
     * refused rather than served otherwise (AUTO then falls back to the CPU, which has them) */
    const cera_kv_type kv_v = params->kv_type_v == CERA_KV_AS_K ? params->kv_type : params->kv_type_v;
    if (cu_kv_type_of(params->kv_type) < 0 || kv_v != params->kv_type)
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "the CUDA backend keeps its KV cache in F16, BF16, Q8_0 or Q4_0, K and V alike "
                         "(asked: K %s, V %s)",
                         cera_kv_type_name(params->kv_type), cera_kv_type_name(kv_v));
    cera_kv_format kvf; /* the rotation, as the engine's pool will have it (kv_rotates) */
    cera_status fs = cera_kv_format_of(params, model->hp.head_dim, true, &kvf, err);
    if (fs) return fs;
    cera_cuda_params p = cera_cuda_default_params();
    p.kv_type = params->kv_type;
    p.kv_rot_k = kvf.rot_k;
    p.kv_rot_v = kvf.rot_v;
    p.n_ctx = params->n_ctx > 0 ? params->n_ctx : 4096;
    p.n_batch = params->n_batch > 0 ? params->n_batch : 512;
    p.external_kv = true;
    const char *rows_env = getenv("CERA_CUDA_DECODE_ROWS");
    p.force_gemm = rows_env && strcmp(rows_env, "0") == 0;
    const char *mma_env = getenv("CERA_CUDA_PREFILL_MMA");
    p.no_prefill_mma = mma_env && strcmp(mma_env, "0") == 0;
    cuda_backend *be = calloc(1, sizeof *be);
    if (!be) return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda backend");
    cera_status st = cera_cuda_init(model, &p, &be->s, err);
    if (st != CERA_OK) {
        free(be);
        return st;
    }
    be->tok_tbl = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->offs = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->tok_slot = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->last_row = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->rows = malloc(sizeof(int32_t) * (size_t)p.n_batch);
    be->tables = malloc(sizeof(int32_t) * CERA_KV_GROUPS * (size_t)be->s->tables_cap);
    if (!be->tok_tbl || !be->offs || !be->tok_slot || !be->last_row || !be->rows || !be->tables) {
        cuda_free(&be->base);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda backend tables");
    }
    be->base.name = "cuda";
    be->base.kv_on_host = false;
    be->base.kv_rotates = true;
    /* a run of fewer than MMA_MIN_ROWS tokens with every row's logits, in a batch of as few rows
     * (and of at most the plan's rows_max) without adapters, takes the several-row decode step
     * (forward.c: use_decode_rows) */
    be->base.exact_run_max = be->s->rows_max < MMA_MIN_ROWS - 1 ? be->s->rows_max : MMA_MIN_ROWS - 1;
    be->base.kv_init = cuda_kv_init;
    be->base.kv_free = cuda_kv_free;
    be->base.kv_copy = cuda_kv_copy;
    be->base.seq_state = cuda_seq_state;
    be->base.kv_block_bytes = cuda_kv_block_bytes;
    be->base.kv_io = cuda_kv_io;
    be->base.state_io = cuda_state_io;
    be->base.adapter_free = cuda_adapter_free;
    be->base.forward = cuda_forward;
    be->base.logits_get = cuda_logits_get;
    be->base.free = cuda_free;
    const char *env = getenv("CERA_CUDA_SAMPLE");
    if (!env || strcmp(env, "0") != 0) {
        if (cudaSetDevice(be->s->prm.device) != cudaSuccess ||
            (st = cu_sampler_init(&be->smp, be->s->n_vocab, be->s->st, err)) != CERA_OK) {
            cuda_free(&be->base);
            return st != CERA_OK ? st : cera_fail(err, CERA_ERR_DEVICE, "cuda: cudaSetDevice failed");
        }
        be->base.sample = cuda_sample;
    }
    *out = &be->base;
    return CERA_OK;
}

/* ---- Test hooks (sample_cuda.h) ------------------------------------------------------ */

cera_status cera_cuda_test_sample(cera_sampler *smp, const float *logits, int n_vocab, const uint32_t *mask,
                                  cera_token *out, cera_error *err) {
    if (!device_chain(cera_sampler_params_of(smp)))
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: the sampler chain runs on the host");
    if (n_vocab <= 0) return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: n_vocab %d", n_vocab);
    cudaStream_t st = NULL;
    float *d = NULL;
    cu_sampler c;
    memset(&c, 0, sizeof c);
    cera_status r = CERA_OK;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaMalloc((void **)&d, sizeof(float) * (size_t)n_vocab);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(d, logits, sizeof(float) * (size_t)n_vocab, cudaMemcpyHostToDevice, st);
    if (e != cudaSuccess)
        r = cera_fail(err, CERA_ERR_DEVICE, "cuda: sample test setup: %s", cudaGetErrorString(e));
    if (r == CERA_OK) r = cu_sampler_init(&c, n_vocab, st, err);
    if (r == CERA_OK) r = cu_sampler_run(&c, smp, d, mask, out, err);
    if (st) cudaStreamSynchronize(st);
    cu_sampler_free(&c);
    cudaFree(d);
    if (st) cudaStreamDestroy(st);
    return r;
}

cera_status cera_cuda_test_expf(const float *x, float *y, size_t n, cera_error *err) {
    if (n > (size_t)INT32_MAX) return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: %zu values", n);
    float *d = NULL;
    cudaError_t e = cudaMalloc((void **)&d, sizeof(float) * 2 * (n ? n : 1));
    if (e == cudaSuccess) e = cudaMemcpy(d, x, sizeof(float) * n, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cu_sample_expf(0, d, d + n, (int)n);
    if (e == cudaSuccess) e = cudaMemcpy(y, d + n, sizeof(float) * n, cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess)
        return cera_fail(err, CERA_ERR_DEVICE, "cuda: expf test: %s", cudaGetErrorString(e));
    return CERA_OK;
}
