/*
 * init.c — bringing a model onto the GPU: compiles the model's op list into the plan
 * (plan.c), which uploads the weights its steps use once in their own types
 * (cu_weight_import repacks Q4_0/Q8_0); builds the RoPE tables; allocates the plan's homes,
 * the KV cache and every scratch buffer for n_batch tokens. After cera_cuda_init nothing is
 * allocated until cera_cuda_free.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"
#include "model/graph.h"

cera_cuda_params cera_cuda_default_params(void) {
    cera_cuda_params p;
    memset(&p, 0, sizeof p);
    p.n_ctx = 4096;
    p.n_batch = 512;
    p.synthetic_seed = 1;
    return p;
}

bool cera_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky "no device" error
        return false;
    }
    return n > 0;
}

cera_status cera_cuda_device_info(int device, char *name, size_t cap, size_t *mem_bytes, cera_error *err) {
    struct cudaDeviceProp prop;
    CU_TRY(cudaGetDeviceProperties(&prop, device));
    if (name && cap) snprintf(name, cap, "%s", prop.name);
    if (mem_bytes) *mem_bytes = prop.totalGlobalMem;
    return CERA_OK;
}

static cera_status dev_alloc(void **p, size_t bytes, const char *what, cera_error *err) {
    *p = NULL;
    if (bytes == 0) return CERA_OK;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        *p = NULL;
        cudaGetLastError();
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: cannot allocate %zu bytes for %s: %s", bytes, what,
                         cudaGetErrorString(e));
    }
    CU_TRY(cudaMemset(*p, 0, bytes));
    return CERA_OK;
}

void cu_free_weight(cu_weight *w) {
    if (w->data) cudaFree(w->data);
    if (w->scales) cudaFree(w->scales);
    w->data = w->scales = NULL;
}

/* Bytes of the raw GGUF rows of a weight (the staging buffer's size). */
static size_t raw_bytes(const cera_weight *mw) { return cera_row_size(mw->type, mw->k) * (size_t)mw->n; }

cera_status cu_upload_weight(cera_cuda_state *s, const cera_weight *mw, const char *what, cu_weight *out,
                             void *staging, cera_error *err) {
    memset(out, 0, sizeof *out);
    if (!cu_type_supported(mw->type)) {
        const cera_type_traits *tt = cera_type_get(mw->type);
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: tensor %s has type %s, which has no CUDA kernels",
                         what, tt ? tt->name : "unknown");
    }
    out->type = mw->type;
    out->k = mw->k;
    out->n = mw->n;
    out->split = cu_type_split(mw->type);
    int64_t data_bytes, scale_bytes;
    cu_weight_bytes(mw->type, mw->k, mw->n, &data_bytes, &scale_bytes, &out->k_pad, &out->row_bytes);
    CERA_TRY(dev_alloc(&out->data, (size_t)data_bytes, what, err));
    CERA_TRY(dev_alloc(&out->scales, (size_t)scale_bytes, what, err));
    s->weight_bytes += (size_t)(data_bytes + scale_bytes);
    if (s->prm.synthetic_weights) {
        CU_TRY(cu_weight_fill_random(s->st, out, s->prm.synthetic_seed + s->weight_bytes));
        return CERA_OK;
    }
    if (!mw->data) return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: tensor %s has no data", what);
    CU_TRY(cudaMemcpyAsync(staging, mw->data, raw_bytes(mw), cudaMemcpyHostToDevice, s->st));
    CU_TRY(cu_weight_import(s->st, out, staging));
    CU_TRY(cudaStreamSynchronize(s->st)); // the staging buffer is reused by the next weight
    return CERA_OK;
}

cera_status cu_upload_vec(cera_cuda_state *s, const cera_weight *mw, const char *what, int64_t n, float fill,
                          float **out, cera_error *err) {
    *out = NULL;
    if (!mw->t && !mw->data && !s->prm.synthetic_weights) return CERA_OK;
    if (s->prm.synthetic_weights && !mw->t && !mw->data && fill == 0.0f) return CERA_OK;
    if (mw->type != CERA_TYPE_F32 && (mw->t || mw->data))
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: tensor %s must be f32", what);
    if ((mw->t || mw->data) && mw->k * mw->n != n)
        return cera_fail(err, CERA_ERR_FORMAT, "cuda: tensor %s has %lld elements, expected %lld", what,
                         (long long)(mw->k * mw->n), (long long)n);
    CERA_TRY(dev_alloc((void **)out, (size_t)n * sizeof(float), what, err));
    if (s->prm.synthetic_weights || !mw->data)
        CU_TRY(cu_fill_f32(s->st, *out, n, fill));
    else
        CU_TRY(cudaMemcpy(*out, mw->data, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    return CERA_OK;
}

/* A home of the plan's rows (cuda_state.h: cu_store) for n_batch rows; quant: with the
 * int8 rows of an activation. */
static cera_status make_store(cu_store *h, int rows, bool quant, cera_error *err) {
    if (h->width == 0) return CERA_OK;
    const size_t r = (size_t)rows * (size_t)h->width;
    CERA_TRY(dev_alloc((void **)&h->f, r * sizeof(float), "activations", err));
    if (quant) {
        CERA_TRY(dev_alloc((void **)&h->q, r, "activations", err));
        CERA_TRY(dev_alloc((void **)&h->d, r / 32 * sizeof(float), "activations", err));
        CERA_TRY(dev_alloc((void **)&h->s, r / 32 * sizeof(int32_t), "activations", err));
    }
    return CERA_OK;
}

static void free_store(cu_store *h) {
    cudaFree(h->f);
    cudaFree(h->q);
    cudaFree(h->d);
    cudaFree(h->s);
    memset(h, 0, sizeof *h);
}

/* RoPE tables as llama.cpp computes them: theta_i = pos * base^(-2i/n_rot) / factor_i, and
 * YaRN's ramp and magnitude (ext_factor 0 leaves plain linear scaling), into *tab_out and
 * *rope; the sliding layers' (swa) with their own base and no frequency scaling, as the CPU
 * backend's. */
static cera_status build_rope(const cera_model *m, int n_ctx, bool swa, float **tab_out, cu_rope *rope,
                              cera_error *err) {
    cera_hparams hs = m->hp;
    if (swa) {
        hs.rope_base = m->hp.rope_base_swa;
        hs.rope_freq_scale = 1.0f;
    }
    const cera_hparams *hp = &hs;
    const int half = hp->n_rot / 2;
    float *tab = malloc(sizeof(float) * 2 * (size_t)(half > 0 ? half : 1));
    if (!tab) return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: rope table");
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    // rope_freqs, or LongRoPE's long or short factors by the context (as the CPU backend)
    const float *factors = cera_model_rope_factors(m, n_ctx);
    float corr0 = 0.0f, corr1 = 0.0f;
    if (hp->rope_ext_factor != 0.0f) {
        const float pi = 3.14159265358979323846f;
        const int n_orig = hp->rope_n_ctx_orig > 0 ? hp->rope_n_ctx_orig : hp->n_ctx_train;
        const float c0 = hp->n_rot * logf(n_orig / (hp->rope_beta_fast * 2 * pi)) / (2 * logf(hp->rope_base));
        const float c1 = hp->n_rot * logf(n_orig / (hp->rope_beta_slow * 2 * pi)) / (2 * logf(hp->rope_base));
        corr0 = fmaxf(0.0f, floorf(c0));
        corr1 = fminf((float)(hp->n_rot - 1), ceilf(c1));
    }
    float t = 1.0f;
    for (int i = 0; i < half; i++) {
        tab[i] = factors ? t / factors[i] : t;
        float ramp = 0.0f;
        if (hp->rope_ext_factor != 0.0f) {
            const float y = ((float)i - corr0) / fmaxf(0.001f, corr1 - corr0);
            ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * hp->rope_ext_factor;
        }
        tab[half + i] = ramp;
        t *= theta_scale;
    }
    cera_status st =
        dev_alloc((void **)tab_out, sizeof(float) * 2 * (size_t)(half > 0 ? half : 1), "rope", err);
    if (st == CERA_OK && half > 0) {
        cudaError_t e = cudaMemcpy(*tab_out, tab, sizeof(float) * 2 * (size_t)half, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: rope table upload: %s", cudaGetErrorString(e));
    }
    free(tab);
    if (st != CERA_OK) return st;
    rope->n_rot = hp->n_rot;
    rope->neox = hp->rope_style == CERA_ROPE_NEOX;
    rope->enabled = hp->n_rot > 0; /* and per step: the op's rope (plan.c) */
    rope->inv_freq = *tab_out;
    rope->ramp = *tab_out + half;
    rope->freq_scale = hp->rope_freq_scale > 0.0f ? hp->rope_freq_scale : 1.0f;
    float mscale = hp->rope_attn_factor > 0.0f ? hp->rope_attn_factor : 1.0f;
    if (hp->rope_ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / rope->freq_scale);
    rope->mscale = mscale;
    rope->q_scale = 1.0f; /* per step (plan.c) */
    return CERA_OK;
}

static cera_status check_model(const cera_model *m, cera_error *err) {
    const cera_hparams *hp = &m->hp;
    if (hp->n_head <= 0 || hp->n_head_kv <= 0)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: %d query heads over %d KV heads", hp->n_head,
                         hp->n_head_kv);
    /* each layer's own KV heads (hp->n_head_kv is the largest): the attention kernels take a
     * group of up to 16 query heads per KV head */
    for (int il = 0; il < hp->n_layer; il++) {
        const int nkv = m->layers[il].n_head_kv > 0 ? m->layers[il].n_head_kv : hp->n_head_kv;
        if (hp->n_head % nkv)
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: layer %d: %d query heads over %d KV heads", il,
                             hp->n_head, nkv);
        if (hp->n_head / nkv > 16)
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "cuda: layer %d: more than 16 query heads per KV head", il);
        if ((hp->n_head / nkv) * hp->head_dim > 2048)
            return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: layer %d: query group of %d x %d too wide", il,
                             hp->n_head / nkv, hp->head_dim);
    }
    if (hp->head_dim <= 0 || hp->head_dim > 256 || hp->head_dim % 8)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: head size %d (8..256, a multiple of 8)",
                         hp->head_dim);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: %d rotated dims of %d", hp->n_rot, hp->head_dim);
    return CERA_OK;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static cera_status init_state(cera_cuda_state *s, const cera_model *m, cera_error *err) {
    const cera_hparams *hp = &m->hp;
    const int B = s->prm.n_batch;
    CU_TRY(cudaSetDevice(s->prm.device));
    CU_TRY(cudaDeviceGetAttribute(&s->n_sm, cudaDevAttrMultiProcessorCount, s->prm.device));
    CU_TRY(cudaDeviceGetAttribute(&s->cc_major, cudaDevAttrComputeCapabilityMajor, s->prm.device));
    CU_TRY(cudaStreamCreateWithFlags(&s->st, cudaStreamNonBlocking));
    CUBLAS_TRY(cublasCreate(&s->blas));
    CUBLAS_TRY(cublasSetStream(s->blas, s->st));

    s->n_embd = hp->n_embd;
    s->hd = hp->head_dim;
    s->n_q = hp->n_head * hp->head_dim;
    s->n_kv = hp->n_head_kv * hp->head_dim;
    s->n_vocab = hp->n_vocab;

    CERA_TRY(build_rope(m, s->prm.n_ctx, false, &s->rope_tab, &s->rope, err));
    if (hp->n_swa > 0) CERA_TRY(build_rope(m, s->prm.n_ctx, true, &s->rope_tab_swa, &s->rope_swa, err));

    // the plan: its steps, and every weight they use uploaded through one staging buffer
    void *staging = NULL;
    if (!s->prm.synthetic_weights && m->graph)
        CERA_TRY(dev_alloc(&staging, cu_plan_staging_bytes(m), "staging", err));
    cera_status st = cu_plan_compile(s, m, staging, err);
    if (staging) cudaFree(staging);
    if (st != CERA_OK) return st;
    cu_kv_layout(s);

    // the plan's homes, sized for n_batch tokens
    for (int h = 0; h < CU_ST_COUNT; h++)
        CERA_TRY(make_store(&s->store[h], B, h >= CU_ST_ACT(0) && h < CU_ST_ROT, err));
    s->x = s->store[CU_ST_F32(CERA_BUF_X)].f;
    s->embd_pad = s->store[CU_ST_F32(CERA_BUF_X)].width;
    // block tables: up to 64 sequences of a full context in one batch
    s->own_blocks = (s->prm.n_ctx + CU_KV_BLOCK - 1) / CU_KV_BLOCK;
    s->tables_cap = 64 * (s->own_blocks + 1); /* per group */
    {
        // the tensor-core matmul's workspace (the largest any matmul needs for DEC_ROWS_MAX rows)
        // and the GEMM's dequantized weight (the largest)
        int64_t wb = 0;
        size_t deq_elems = 0;
        for (int i = 0; i < s->n_wts; i++) {
            const cu_weight *w = &s->wts[i].w;
            if (s->wts[i].expert_rows) {
                // the prefill's grouped GEMM dequantizes the whole stacked tensor
                deq_elems = max_sz(deq_elems, (size_t)w->n * (size_t)((w->k + 31) / 32 * 32));
                continue;
            }
            if (!s->wts[i].streamed) continue;
            if (cu_mma_supported(w->type) && cu_mma_work_bytes(w, DEC_ROWS_MAX) > wb)
                wb = cu_mma_work_bytes(w, DEC_ROWS_MAX);
            deq_elems = max_sz(deq_elems, (size_t)w->n * (size_t)((w->k + 31) / 32 * 32));
        }
        s->mma_work_bytes = wb;
        CERA_TRY(dev_alloc((void **)&s->mma_work, (size_t)wb, "mma workspace", err));
        CERA_TRY(dev_alloc(&s->deq, deq_elems * 2, "scratch", err));
    }
    if (s->moe_k) {
        // routed experts: every token's choice, and rows for each of its slots
        const size_t slots = (size_t)B * (size_t)s->moe_k, f = sizeof(float), ep = (size_t)s->moe_embd_pad;
        const size_t ff = (size_t)s->moe_ff_pad;
        struct {
            void **p;
            size_t bytes;
        } bufs[] = {
            {(void **)&s->moe_logits, (size_t)B * (size_t)s->moe_ne * f},
            {(void **)&s->moe_wt, slots * f},
            {(void **)&s->moe_counter, sizeof(int32_t)},
            {(void **)&s->moe_sel, slots * sizeof(int32_t)},
            {(void **)&s->moe_where, 3 * slots * sizeof(int32_t)},
            {(void **)&s->moe_g, slots * ff * f},
            {(void **)&s->moe_u, slots * ff * f},
            {(void **)&s->moe_eo, slots * ep * f},
        };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            CERA_TRY(dev_alloc(bufs[i].p, bufs[i].bytes, "expert scratch", err));
        CU_TRY(cudaMemset(s->moe_counter, 0, sizeof(int32_t)));
        s->moe_h.width = s->moe_ff_pad;
        CERA_TRY(make_store(&s->moe_h, (int)slots, true, err));
        s->moe_x.width = (int64_t)ep;
        CERA_TRY(make_store(&s->moe_x, (int)slots, false, err));
        const size_t wide = ep > ff ? ep : ff, ne = (size_t)s->moe_ne;
        CERA_TRY(dev_alloc(&s->moe_half, slots * wide * 2, "expert scratch", err));
        CERA_TRY(dev_alloc((void **)&s->moe_ptr, 3 * ne * sizeof(void *), "expert scratch", err));
        if (cudaMallocHost((void **)&s->h_moe_ptr, 3 * ne * sizeof(void *)) != cudaSuccess) {
            s->h_moe_ptr = NULL;
            return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: pinned expert staging");
        }
        s->h_moe_dims = malloc(6 * ne * sizeof(int));
        s->h_moe_ops = malloc(2 * ne * sizeof(cublasOperation_t));
        s->h_moe_ab = malloc(2 * ne * sizeof(float));
        if (!s->h_moe_dims || !s->h_moe_ops || !s->h_moe_ab)
            return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: expert GEMM tables");
        const size_t n_h = 4 * slots + 2 * ((size_t)s->moe_ne + 1);
        if (cudaMallocHost((void **)&s->h_moe, n_h * sizeof(int32_t)) != cudaSuccess) {
            s->h_moe = NULL;
            return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: pinned expert staging");
        }
    }
    if (s->n_conv) {
        CERA_TRY(dev_alloc((void **)&s->d_first, (size_t)B * 3 * sizeof(int32_t), "conv", err));
        s->d_slot = s->d_first + B;
        s->d_last = s->d_slot + B;
        CERA_TRY(
            dev_alloc((void **)&s->own_state, (size_t)s->conv_state_slot * sizeof(float), "conv state", err));
        s->conv_state = s->own_state;
        if (cudaMallocHost((void **)&s->h_conv, (size_t)B * 3 * sizeof(int32_t)) != cudaSuccess) {
            s->h_conv = NULL;
            return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: pinned conv staging");
        }
    }
    {
        const size_t f = sizeof(float);
        struct {
            void **p;
            size_t bytes;
        } bufs[] = {
            {(void **)&s->logits, (size_t)B * s->n_vocab * f},
            {&s->half_act, (size_t)B * s->k_max * 2},
            {(void **)&s->d_tok, (size_t)B * sizeof(int32_t)},
            {(void **)&s->d_pos, (size_t)B * sizeof(int32_t)},
            {(void **)&s->d_argmax, sizeof(int32_t)},
            {(void **)&s->d_tok_tbl, (size_t)B * sizeof(int32_t)},
            {(void **)&s->d_tables, (size_t)CERA_KV_GROUPS * s->tables_cap * sizeof(int32_t)},
        };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            CERA_TRY(dev_alloc(bufs[i].p, bufs[i].bytes, "scratch", err));
        for (int g = 0; g < CERA_KV_GROUPS && !s->prm.external_kv; g++)
            CERA_TRY(
                dev_alloc(&s->own_kv[g], (size_t)s->own_blocks * (size_t)s->kv_block[g], "KV cache", err));
        // flash-decoding partials: up to 64 splits, ATT_TOK_SPLITS (token, split) pairs
        s->att.max_splits = CU_ATT_MAX_SPLITS;
        // about 4 blocks per SM: a split is n_head_kv x (head groups) blocks (with 8 query heads on
        // a KV head, two groups: counting them halves a 70B's splits and their merge)
        const int g = hp->n_head / hp->n_head_kv, hb = cu_att_dec_heads(g); // check_model: n_head_kv > 0
        const int per_split = hp->n_head_kv * ((g + hb - 1) / hb);
        const int splits = (4 * s->n_sm + per_split - 1) / per_split;
        s->dec_splits = splits < 1 ? 1 : splits > s->att.max_splits ? s->att.max_splits : splits;
        const size_t pairs =
            (size_t)(ATT_TOK_SPLITS > DEC_ROWS_MAX * s->dec_splits ? ATT_TOK_SPLITS
                                                                   : DEC_ROWS_MAX * s->dec_splits);
        const size_t parts = pairs * (size_t)hp->n_head;
        CERA_TRY(dev_alloc((void **)&s->att.part_acc, parts * s->hd * f, "attention partials", err));
        CERA_TRY(dev_alloc((void **)&s->att.part_ml, parts * 2 * f, "attention partials", err));
        CERA_TRY(
            dev_alloc((void **)&s->att.counters, (size_t)B * hp->n_head * sizeof(int32_t), "attention", err));
    }
    {
        // staging (tokens, positions, table offsets, argmax, each group's tables), then the
        // standalone API's identity tables (one per group), output rows and table offsets
        const size_t n_io = 3 * (size_t)B + 1 + (size_t)CERA_KV_GROUPS * (size_t)s->tables_cap +
                            (size_t)CERA_KV_GROUPS * (size_t)s->own_blocks + 2 * (size_t)B;
        cudaError_t e = cudaMallocHost((void **)&s->h_io, n_io * sizeof(int32_t));
        if (e != cudaSuccess) {
            s->h_io = NULL;
            return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: pinned buffer: %s", cudaGetErrorString(e));
        }
    }
    CERA_TRY(cu_lora_init(s, err));
    {
        const char *fk = getenv("CERA_CUDA_LORA_FORK");
        s->lora_fork = !(fk && fk[0] == '0');
        s->profile = getenv("CERA_CUDA_PROFILE") != NULL;
    }
    CU_TRY(cudaStreamSynchronize(s->st));
    return CERA_OK;
}

cera_status cera_cuda_init(const cera_model *m, const cera_cuda_params *p, cera_cuda_state **out,
                           cera_error *err) {
    *out = NULL;
    if (!cera_cuda_available()) return cera_fail(err, CERA_ERR_DEVICE, "cuda: no CUDA device found");
    CERA_TRY(check_model(m, err));
    cera_cuda_state *s = calloc(1, sizeof *s);
    if (!s) return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: state");
    s->hp = m->hp;
    s->prm = p ? *p : cera_cuda_default_params();
    if (s->prm.n_ctx <= 0)
        s->prm.n_ctx = m->hp.n_ctx_train > 0 && m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096;
    if (s->prm.n_batch <= 0) s->prm.n_batch = 512;
    cera_status st = CERA_OK;
    const int kt = cu_kv_type_of(s->prm.kv_type);
    if (kt < 0)
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: KV cache type %s (F16, BF16, Q8_0 or Q4_0)",
                       cera_kv_type_name(s->prm.kv_type));
    else if ((kt == CU_KV_Q8 || kt == CU_KV_Q4) && m->hp.head_dim % 32)
        st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                       "cuda: a %s KV cache needs a head size that is a multiple of 32 (the model's: %d)",
                       cera_kv_type_name(s->prm.kv_type), m->hp.head_dim);
    else if ((s->prm.kv_rot_k && m->hp.head_dim % s->prm.kv_rot_k) ||
             (s->prm.kv_rot_v && m->hp.head_dim % s->prm.kv_rot_v) || m->hp.head_dim > 512)
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: a KV rotation of %d / %d over heads of %d",
                       s->prm.kv_rot_k, s->prm.kv_rot_v, m->hp.head_dim);
    if (st == CERA_OK) st = init_state(s, m, err);
    if (st != CERA_OK) {
        cera_cuda_free(s);
        return st;
    }
    *out = s;
    return CERA_OK;
}

size_t cera_cuda_weight_bytes(const cera_cuda_state *s) { return s->weight_bytes; }

void cu_kv_layout(cera_cuda_state *s) {
    const int kt = cu_kv_type_of(s->prm.kv_type);
    for (int g = 0; g < CERA_KV_GROUPS; g++) s->kv_block[g] = 0;
    for (int i = 0; i < s->n_kv_layer; i++) {
        cu_kv_slot *L = &s->kvl[i];
        L->offset = s->kv_block[L->group];
        s->kv_block[L->group] += 2 * cu_kv_section_bytes(kt, L->kv_dim);
    }
}

void cera_cuda_free(cera_cuda_state *s) {
    if (!s) return;
    if (s->st) cudaStreamSynchronize(s->st);
    for (int b = 0; b < DEC_BUCKETS; b++)
        if (s->graph_ready[b]) cudaGraphExecDestroy(s->graph[b]);
    cu_plan_free(s);
    for (int h = 0; h < CU_ST_COUNT; h++) free_store(&s->store[h]);
    cudaFree(s->rope_tab);
    cudaFree(s->rope_tab_swa);
    for (int g = 0; g < CERA_KV_GROUPS; g++) cudaFree(s->own_kv[g]);
    cudaFree(s->d_first);
    cudaFree(s->own_state);
    cudaFree(s->mma_work);
    if (s->h_conv) cudaFreeHost(s->h_conv);
    void *moe[] = {s->moe_logits, s->moe_wt, s->moe_counter, s->moe_sel,
                   s->moe_where,  s->moe_g,  s->moe_u,       s->moe_eo};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) cudaFree(moe[i]);
    free_store(&s->moe_h);
    free_store(&s->moe_x);
    cudaFree(s->moe_half);
    cudaFree(s->moe_ptr);
    if (s->h_moe_ptr) cudaFreeHost((void *)s->h_moe_ptr);
    free(s->h_moe_dims);
    free(s->h_moe_ops);
    free(s->h_moe_ab);
    if (s->h_moe) cudaFreeHost(s->h_moe);
    void *bufs[] = {s->logits,       s->half_act,    s->deq,          s->d_tok,     s->d_pos,   s->d_argmax,
                    s->att.part_acc, s->att.part_ml, s->att.counters, s->d_tok_tbl, s->d_tables};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    if (s->h_io) cudaFreeHost(s->h_io);
    cu_lora_free(s);
    if (s->blas) cublasDestroy(s->blas);
    if (s->st) cudaStreamDestroy(s->st);
    free(s);
}
