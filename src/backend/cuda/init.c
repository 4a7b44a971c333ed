/*
 * init.c — bringing a model onto the GPU: checks that every weight has kernels, uploads
 * the weights once in their own types (cu_weight_import repacks Q4_0/Q8_0), builds the
 * RoPE tables, allocates the F16 KV cache and every scratch buffer for n_batch tokens.
 * After cera_cuda_init nothing is allocated until cera_cuda_free.
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

/* A 1-D F32 tensor (norm weight, bias) as n floats on the device; NULL when absent. */
static cera_status upload_vec(cera_cuda_state *s, const cera_weight *mw, const char *what, int64_t n,
                              float fill, float **out, cera_error *err) {
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

static bool weight_present(const cera_cuda_state *s, const cera_weight *w) {
    return w->t || w->data || (s->prm.synthetic_weights && w->n > 0);
}

static cera_status make_act(cu_act *a, int rows, int64_t k, bool quant, const char *what, cera_error *err) {
    memset(a, 0, sizeof *a);
    a->k = k;
    a->k_pad = (k + 31) / 32 * 32;
    CERA_TRY(dev_alloc((void **)&a->f, (size_t)rows * a->k_pad * sizeof(float), what, err));
    if (quant) {
        CERA_TRY(dev_alloc((void **)&a->q, (size_t)rows * a->k_pad, what, err));
        CERA_TRY(dev_alloc((void **)&a->d, (size_t)rows * a->k_pad / 32 * sizeof(float), what, err));
        CERA_TRY(dev_alloc((void **)&a->s, (size_t)rows * a->k_pad / 32 * sizeof(int32_t), what, err));
    }
    return CERA_OK;
}

static void free_act(cu_act *a) {
    cudaFree(a->f);
    cudaFree(a->q);
    cudaFree(a->d);
    cudaFree(a->s);
    memset(a, 0, sizeof *a);
}

/* RoPE tables as llama.cpp computes them: theta_i = pos * base^(-2i/n_rot) / factor_i, and
 * YaRN's ramp and magnitude (ext_factor 0 leaves plain linear scaling). */
static cera_status build_rope(cera_cuda_state *s, const cera_model *m, cera_error *err) {
    const cera_hparams *hp = &m->hp;
    const int half = hp->n_rot / 2;
    float *tab = malloc(sizeof(float) * 2 * (size_t)(half > 0 ? half : 1));
    if (!tab) return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: rope table");
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    const float *factors =
        m->rope_freqs.data && m->rope_freqs.k * m->rope_freqs.n >= half ? m->rope_freqs.data : NULL;
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
        dev_alloc((void **)&s->rope_tab, sizeof(float) * 2 * (size_t)(half > 0 ? half : 1), "rope", err);
    if (st == CERA_OK && half > 0) {
        cudaError_t e =
            cudaMemcpy(s->rope_tab, tab, sizeof(float) * 2 * (size_t)half, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: rope table upload: %s", cudaGetErrorString(e));
    }
    free(tab);
    if (st != CERA_OK) return st;
    s->rope.n_rot = hp->n_rot;
    s->rope.neox = hp->rope_style == CERA_ROPE_NEOX;
    s->rope.enabled = hp->use_rope && hp->n_rot > 0;
    s->rope.inv_freq = s->rope_tab;
    s->rope.ramp = s->rope_tab + half;
    s->rope.freq_scale = hp->rope_freq_scale > 0.0f ? hp->rope_freq_scale : 1.0f;
    float mscale = hp->rope_attn_factor > 0.0f ? hp->rope_attn_factor : 1.0f;
    if (hp->rope_ext_factor != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / s->rope.freq_scale);
    s->rope.mscale = mscale;
    return CERA_OK;
}

static cera_status check_model(const cera_model *m, cera_error *err) {
    const cera_hparams *hp = &m->hp;
    /* the decode and prefill steps here are the llama stack's and LFM2's (forward.c) */
    if (hp->n_conv_layer && hp->residual_scale != 1.0f)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: conv layers with a residual scale");
    /* the KV pool it reads has one row width and no window (kv/kv_cache.h); Gemma 3 runs on the CPU */
    for (int il = 0; il < hp->n_layer; il++)
        if (hp->arch == CERA_ARCH_GEMMA3 || m->layers[il].swa ||
            (m->layers[il].n_head_kv && m->layers[il].n_head_kv != hp->n_head_kv))
            return cera_fail(err, CERA_ERR_UNSUPPORTED,
                             "cuda: %s (sliding-window layers, per-layer KV widths) runs on the CPU backend",
                             cera_arch_name(hp->arch));
    if (hp->n_head <= 0 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: %d query heads over %d KV heads", hp->n_head,
                         hp->n_head_kv);
    if (hp->n_head / hp->n_head_kv > 16)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: more than 16 query heads per KV head");
    if (hp->head_dim <= 0 || hp->head_dim > 256 || hp->head_dim % 8)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: head size %d (8..256, a multiple of 8)",
                         hp->head_dim);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: %d rotated dims of %d", hp->n_rot, hp->head_dim);
    if ((hp->n_head / hp->n_head_kv) * hp->head_dim > 2048)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: query group of %d x %d too wide",
                         hp->n_head / hp->n_head_kv, hp->head_dim);
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
    s->n_ff = hp->n_ff;
    s->n_vocab = hp->n_vocab;
    /* a synthetic benchmark model (no op list) has KV in every layer */
    s->n_kv_layer = hp->n_kv_layer ? hp->n_kv_layer : hp->n_layer;
    s->lc = hp->n_conv_layer ? hp->conv_l_cache : 0;

    // the largest raw tensor sizes the staging buffer, the largest dequantized one the GEMM operand
    size_t staging_bytes = raw_bytes(&m->tok_embd);
    size_t deq_elems = 0;
    const cera_weight *all[CERA_PROJ_COUNT + 1];
    for (int l = 0; l < hp->n_layer; l++) {
        for (int p = 0; p < CERA_PROJ_COUNT; p++) all[p] = &m->layers[l].proj[p];
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            staging_bytes = max_sz(staging_bytes, raw_bytes(all[p]));
            deq_elems = max_sz(deq_elems, (size_t)all[p]->n * (size_t)((all[p]->k + 31) / 32 * 32));
        }
    }
    if (!m->output.t && !m->output.data && !s->prm.synthetic_weights && !hp->tied_output)
        return cera_fail(err, CERA_ERR_NOT_FOUND, "cuda: the model has no output weight");
    const cera_weight *outw = hp->tied_output ? &m->tok_embd : &m->output;
    staging_bytes = max_sz(staging_bytes, raw_bytes(outw));
    deq_elems = max_sz(deq_elems, (size_t)outw->n * (size_t)((outw->k + 31) / 32 * 32));
    void *staging = NULL;
    if (!s->prm.synthetic_weights) CERA_TRY(dev_alloc(&staging, staging_bytes, "staging", err));

    cera_status st = CERA_OK;
    char what[96];
#define UPLOAD(mw, name, out)                                                                                \
    do {                                                                                                     \
        st = cu_upload_weight(s, (mw), (name), (out), staging, err);                                         \
        if (st != CERA_OK) goto done;                                                                        \
    } while (0)
#define UPLOAD_VEC(mw, name, n, fill, out)                                                                   \
    do {                                                                                                     \
        st = upload_vec(s, (mw), (name), (n), (fill), (out), err);                                           \
        if (st != CERA_OK) goto done;                                                                        \
    } while (0)

    UPLOAD(&m->tok_embd, "token_embd.weight", &s->tok_embd);
    s->weight_bytes = 0; // one row of the embedding is read per token: not part of the stream
    if (hp->tied_output) {
        s->output = s->tok_embd;
        s->output_tied = true;
        int64_t db, sb, kp, rb;
        cu_weight_bytes(s->tok_embd.type, s->tok_embd.k, s->tok_embd.n, &db, &sb, &kp, &rb);
        s->weight_bytes += (size_t)(db + sb);
    } else {
        UPLOAD(&m->output, "output.weight", &s->output);
    }
    UPLOAD_VEC(&m->output_norm, "output_norm.weight", hp->n_embd, 1.0f, &s->output_norm);
    UPLOAD_VEC(&m->output_b, "output.bias", hp->n_vocab, 0.0f, &s->output_b);

    s->layers = calloc((size_t)hp->n_layer, sizeof(cu_layer));
    if (!s->layers) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: layer table");
        goto done;
    }
    for (int l = 0; l < hp->n_layer; l++) {
        const cera_layer *ml = &m->layers[l];
        cu_layer *L = &s->layers[l];
        L->conv = hp->n_kv_layer && ml->n_head_kv == 0;
        L->kv_index = hp->n_kv_layer ? ml->kv_index : l;
        L->conv_index = L->conv ? ml->conv_index : -1;
        cu_weight *dst[CERA_PROJ_COUNT] = {&L->wq,  &L->wk,    &L->wv,   &L->wo,   &L->wgate,
                                           &L->wup, &L->wdown, &L->wcin, &L->wcout};
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            if (!weight_present(s, &ml->proj[p])) continue; /* a projection this layer's kind lacks */
            snprintf(what, sizeof what, "blk.%d.%s.weight", l, cera_proj_name((cera_proj)p));
            UPLOAD(&ml->proj[p], what, dst[p]);
        }
        if (L->conv) {
            snprintf(what, sizeof what, "blk.%d.shortconv.conv.weight", l);
            UPLOAD_VEC(&ml->conv, what, (int64_t)s->n_embd * s->lc, 0.0f, &L->conv_w);
        }
        if (L->wgate.n != L->wup.n || L->wgate.k != L->wup.k) {
            st = cera_fail(err, CERA_ERR_FORMAT, "cuda: blk.%d: ffn_gate and ffn_up differ in shape", l);
            goto done;
        }
        snprintf(what, sizeof what, "blk.%d.attn_norm.weight", l);
        UPLOAD_VEC(&ml->attn_norm, what, hp->n_embd, 1.0f, &L->attn_norm);
        snprintf(what, sizeof what, "blk.%d.ffn_norm.weight", l);
        UPLOAD_VEC(&ml->ffn_norm, what, hp->n_embd, 1.0f, &L->ffn_norm);
        const struct {
            const cera_weight *w;
            const char *name;
            int64_t n;
            float **out;
        } vecs[] = {
            {&ml->bq, "attn_q.bias", s->n_q, &L->bq},
            {&ml->bk, "attn_k.bias", s->n_kv, &L->bk},
            {&ml->bv, "attn_v.bias", s->n_kv, &L->bv},
            {&ml->bo, "attn_output.bias", s->n_embd, &L->bo},
            {&ml->b_gate, "ffn_gate.bias", s->n_ff, &L->bgate},
            {&ml->b_up, "ffn_up.bias", s->n_ff, &L->bup},
            {&ml->b_down, "ffn_down.bias", s->n_embd, &L->bdown},
            {&ml->q_norm, "attn_q_norm.weight", s->hd, &L->q_norm},
            {&ml->k_norm, "attn_k_norm.weight", s->hd, &L->k_norm},
        };
        for (size_t i = 0; i < sizeof vecs / sizeof vecs[0]; i++) {
            if (!weight_present(s, vecs[i].w) || s->prm.synthetic_weights) continue;
            snprintf(what, sizeof what, "blk.%d.%s", l, vecs[i].name);
            UPLOAD_VEC(vecs[i].w, what, vecs[i].n, 0.0f, vecs[i].out);
        }
    }
#undef UPLOAD
#undef UPLOAD_VEC

    st = build_rope(s, m, err);
    if (st != CERA_OK) goto done;

    // activations and scratch, sized for n_batch tokens
    // block tables: up to 16 sequences of a full context in one batch
    s->own_blocks = (s->prm.n_ctx + CU_KV_BLOCK - 1) / CU_KV_BLOCK;
    s->tables_cap = 64 * (s->own_blocks + 1); /* a batch of up to 64 full-context sequences */
    s->embd_pad = (s->n_embd + 31) / 32 * 32;
    s->q_pad = (s->n_q + 31) / 32 * 32;
    s->ff_pad = (s->n_ff + 31) / 32 * 32;
    if ((st = make_act(&s->a_embd, B, s->n_embd, true, "activations", err)) != CERA_OK) goto done;
    if ((st = make_act(&s->a_attn, B, s->n_q, true, "activations", err)) != CERA_OK) goto done;
    if ((st = make_act(&s->a_ff, B, s->n_ff, true, "activations", err)) != CERA_OK) goto done;
    {
        // the tensor-core matmul's workspace: the largest any weight needs for DEC_ROWS_MAX rows
        int64_t wb = cu_mma_supported(s->output.type) ? cu_mma_work_bytes(&s->output, DEC_ROWS_MAX) : 0;
        for (int l = 0; l < hp->n_layer; l++) {
            const cu_layer *L = &s->layers[l];
            const cu_weight *ws[] = {&L->wq,  &L->wk,    &L->wv,   &L->wo,   &L->wgate,
                                     &L->wup, &L->wdown, &L->wcin, &L->wcout};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                if (ws[i]->data && cu_mma_supported(ws[i]->type)) {
                    const int64_t b = cu_mma_work_bytes(ws[i], DEC_ROWS_MAX);
                    if (b > wb) wb = b;
                }
        }
        s->mma_work_bytes = wb;
        if ((st = dev_alloc((void **)&s->mma_work, (size_t)wb, "mma workspace", err)) != CERA_OK) goto done;
    }
    if (s->lc) {
        if ((st = make_act(&s->a_conv, B, s->n_embd, true, "activations", err)) != CERA_OK ||
            (st = dev_alloc((void **)&s->bcx, (size_t)B * 3 * s->n_embd * sizeof(float), "conv", err)) !=
                CERA_OK ||
            (st = dev_alloc((void **)&s->d_first, (size_t)B * 3 * sizeof(int32_t), "conv", err)) != CERA_OK)
            goto done;
        s->d_slot = s->d_first + B;
        s->d_last = s->d_slot + B;
        s->conv_state_slot = (int64_t)hp->n_conv_layer * (s->lc - 1) * s->n_embd;
        if ((st = dev_alloc((void **)&s->own_state, (size_t)s->conv_state_slot * sizeof(float), "conv state",
                            err)) != CERA_OK)
            goto done;
        s->conv_state = s->own_state;
        if (cudaMallocHost((void **)&s->h_conv, (size_t)B * 3 * sizeof(int32_t)) != cudaSuccess) {
            s->h_conv = NULL;
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: pinned conv staging");
            goto done;
        }
    }
    {
        const size_t f = sizeof(float);
        const int64_t kmax = s->embd_pad > s->q_pad ? (s->embd_pad > s->ff_pad ? s->embd_pad : s->ff_pad)
                                                    : (s->q_pad > s->ff_pad ? s->q_pad : s->ff_pad);
        struct {
            void **p;
            size_t bytes;
        } bufs[] = {
            {(void **)&s->x, (size_t)B * s->embd_pad * f},
            {(void **)&s->qkv, (size_t)B * (s->n_q + 2 * s->n_kv) * f},
            {(void **)&s->qr, (size_t)B * s->n_q * f},
            {(void **)&s->gate, (size_t)B * s->n_ff * f},
            {(void **)&s->up, (size_t)B * s->n_ff * f},
            {(void **)&s->tmp, (size_t)B * s->n_embd * f},
            {(void **)&s->logits, (size_t)B * s->n_vocab * f},
            {&s->half_act, (size_t)B * kmax * 2},
            {&s->deq, deq_elems * 2},
            {(void **)&s->d_tok, (size_t)B * sizeof(int32_t)},
            {(void **)&s->d_pos, (size_t)B * sizeof(int32_t)},
            {(void **)&s->d_argmax, sizeof(int32_t)},
            {(void **)&s->d_tok_tbl, (size_t)B * sizeof(int32_t)},
            {(void **)&s->d_tables, (size_t)s->tables_cap * sizeof(int32_t)},
            {&s->own_kv, s->prm.external_kv ? 0 : (size_t)s->own_blocks * cu_kv_block_bytes(s)},
        };
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if ((st = dev_alloc(bufs[i].p, bufs[i].bytes, "scratch", err)) != CERA_OK) goto done;
        // flash-decoding partials: up to 64 splits, ATT_TOK_SPLITS (token, split) pairs
        s->att.max_splits = 64;
        const int splits = (4 * s->n_sm + hp->n_head_kv - 1) / hp->n_head_kv;
        s->dec_splits = splits < 1 ? 1 : splits > s->att.max_splits ? s->att.max_splits : splits;
        const size_t pairs =
            (size_t)(ATT_TOK_SPLITS > DEC_ROWS_MAX * s->dec_splits ? ATT_TOK_SPLITS
                                                                   : DEC_ROWS_MAX * s->dec_splits);
        const size_t parts = pairs * (size_t)hp->n_head;
        if ((st = dev_alloc((void **)&s->att.part_acc, parts * s->hd * f, "attention partials", err)) !=
                CERA_OK ||
            (st = dev_alloc((void **)&s->att.part_ml, parts * 2 * f, "attention partials", err)) != CERA_OK ||
            (st = dev_alloc((void **)&s->att.counters, (size_t)B * hp->n_head * sizeof(int32_t), "attention",
                            err)) != CERA_OK)
            goto done;
    }
    {
        // staging (tokens, positions, table offsets, argmax, tables), then the standalone
        // API's identity table, output rows and table offsets
        const size_t n_io = 3 * (size_t)B + 1 + (size_t)s->tables_cap + (size_t)s->own_blocks + 2 * (size_t)B;
        cudaError_t e = cudaMallocHost((void **)&s->h_io, n_io * sizeof(int32_t));
        if (e != cudaSuccess) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: pinned buffer: %s", cudaGetErrorString(e));
            goto done;
        }
    }
    if ((st = cu_lora_init(s, err)) != CERA_OK) goto done;
    {
        const char *fk = getenv("CERA_CUDA_LORA_FORK");
        s->lora_fork = !(fk && fk[0] == '0');
    }
    {
        cudaError_t e = cudaStreamSynchronize(s->st);
        if (e != cudaSuccess) st = cera_fail(err, CERA_ERR_DEVICE, "cuda: upload: %s", cudaGetErrorString(e));
    }
done:
    if (staging) cudaFree(staging);
    return st;
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
    if (s->prm.kv_type != CERA_KV_F16 && s->prm.kv_type != CERA_KV_Q8_0)
        st =
            cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: KV cache type %d (F16 or Q8_0)", (int)s->prm.kv_type);
    else if (s->prm.kv_type == CERA_KV_Q8_0 && m->hp.head_dim % 32)
        st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                       "cuda: a Q8_0 KV cache needs a head size that is a multiple "
                       "of 32 (the model's: %d)",
                       m->hp.head_dim);
    if (st == CERA_OK) st = init_state(s, m, err);
    if (st != CERA_OK) {
        cera_cuda_free(s);
        return st;
    }
    *out = s;
    return CERA_OK;
}

size_t cera_cuda_weight_bytes(const cera_cuda_state *s) { return s->weight_bytes; }

size_t cu_kv_block_bytes(const cera_cuda_state *s) {
    return (size_t)s->n_kv_layer * 2 * cu_kv_section_bytes(s->prm.kv_type == CERA_KV_Q8_0, s->n_kv);
}

void cera_cuda_free(cera_cuda_state *s) {
    if (!s) return;
    if (s->st) cudaStreamSynchronize(s->st);
    for (int b = 0; b < DEC_BUCKETS; b++)
        if (s->graph_ready[b]) cudaGraphExecDestroy(s->graph[b]);
    if (s->layers) {
        for (int l = 0; l < s->hp.n_layer; l++) {
            cu_layer *L = &s->layers[l];
            cu_weight *ws[] = {&L->wq,  &L->wk,    &L->wv,   &L->wo,   &L->wgate,
                               &L->wup, &L->wdown, &L->wcin, &L->wcout};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) cu_free_weight(ws[i]);
            float *vs[] = {L->attn_norm, L->ffn_norm, L->bq,    L->bk,     L->bv,     L->bo,
                           L->bgate,     L->bup,      L->bdown, L->q_norm, L->k_norm, L->conv_w};
            for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) cudaFree(vs[i]);
        }
        free(s->layers);
    }
    if (!s->output_tied) cu_free_weight(&s->output);
    cu_free_weight(&s->tok_embd);
    cudaFree(s->output_norm);
    cudaFree(s->output_b);
    cudaFree(s->rope_tab);
    free_act(&s->a_embd);
    free_act(&s->a_attn);
    free_act(&s->a_ff);
    free_act(&s->a_conv);
    cudaFree(s->bcx);
    cudaFree(s->d_first);
    cudaFree(s->own_state);
    cudaFree(s->mma_work);
    if (s->h_conv) cudaFreeHost(s->h_conv);
    void *bufs[] = {s->x,         s->qkv,      s->qr,           s->gate,        s->up,
                    s->tmp,       s->logits,   s->half_act,     s->deq,         s->d_tok,
                    s->d_pos,     s->d_argmax, s->att.part_acc, s->att.part_ml, s->att.counters,
                    s->d_tok_tbl, s->d_tables, s->own_kv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    if (s->h_io) cudaFreeHost(s->h_io);
    cu_lora_free(s);
    if (s->blas) cublasDestroy(s->blas);
    if (s->st) cudaStreamDestroy(s->st);
    free(s);
}
