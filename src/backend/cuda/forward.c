/*
 * forward.c — the llama-family forward pass on the GPU, in the order of llama.cpp's
 * llm_build_llama (and its qwen2 / qwen3 / granite variants):
 *
 *   x = embd_scale * tok_embd[token]
 *   per layer:  h = rmsnorm(x) * attn_norm
 *               q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv); q/k per-head norm (qwen3); RoPE
 *               x += residual_scale * (attention(q, K, V) Wo (+bo))
 *               h = rmsnorm(x) * ffn_norm
 *               x += residual_scale * ((silu(h Wgate) * (h Wup)) Wdown)
 *   logits = (rmsnorm(x) * output_norm) Wout (+b) / logit_scale
 *
 * Decode (one token) is 8 launches per layer with the matvec epilogues doing the bias,
 * residual add, SwiGLU and activation quantization; the token and its position are read
 * from device memory, so the whole step is captured once into a CUDA graph and replayed.
 * A decode step of B sequences (one token each, no adapter, B <= DEC_ROWS_MAX) is the
 * same launches over B rows (cu_matvec_rows reads each weight once for all of them and
 * gives each row the one-row kernel's bits), a graph per B, so that a sequence decoded
 * among others gets the logits it gets alone.
 * Prefill (several tokens) runs the same sequence with cuBLAS GEMMs (gemm.c) and separate
 * element-wise kernels; only the rows whose logits are asked for reach the output layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"

/* y = W·x for Q, K and V, in one launch when they share a type. */
static cera_status decode_qkv(cera_cuda_state *s, const cu_layer *L, cera_error *err) {
    cu_mv_seg segs[3] = {
        {&L->wq, s->qkv, L->bq},
        {&L->wk, s->qkv + s->n_q, L->bk},
        {&L->wv, s->qkv + s->n_q + s->n_kv, L->bv},
    };
    if (L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
        CU_TRY(cu_matvec(s->st, segs, 3, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
    } else {
        for (int i = 0; i < 3; i++)
            CU_TRY(cu_matvec(s->st, &segs[i], 1, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
    }
    return CERA_OK;
}

/* The LoRA groups of a layer: segments the batch's adapters target (n = 0: none). */
static cu_lora_segs lora_qkv(const cera_cuda_state *s, int64_t stride) {
    const cera_proj p[3] = {CERA_PROJ_Q, CERA_PROJ_K, CERA_PROJ_V};
    float *y[3] = {s->qkv, s->qkv + s->n_q, s->qkv + s->n_q + s->n_kv};
    const int64_t d[3] = {s->n_q, s->n_kv, s->n_kv};
    return cu_lora_group(s, p, y, d, 3, stride);
}

static cu_lora_segs lora_one(const cera_cuda_state *s, cera_proj p, float *y, int64_t d, int64_t stride) {
    return cu_lora_group(s, &p, &y, &d, 1, stride);
}

static cu_lora_segs lora_gate_up(const cera_cuda_state *s) {
    const cera_proj p[2] = {CERA_PROJ_GATE, CERA_PROJ_UP};
    float *y[2] = {s->gate, s->up};
    const int64_t d[2] = {s->n_ff, s->n_ff};
    return cu_lora_group(s, p, y, d, 2, s->n_ff);
}

/* Decode with adapters. Each projection group's A·x (t) is a launch of its own, made right
 * after the kernel that makes the group's input and, while the step is being captured, on
 * the side stream, so that it runs beside the group's matvec (which takes longer) instead of
 * after it. Its B·t is added by a kernel that reads the projection's output anyway: RoPE for
 * Q/K/V, the SwiGLU for gate/up, and for O and down (whose output is the residual stream)
 * the next RMS norm. Measured on an H200 (bench/RESULTS.md), fusing A·x into the norm and
 * SwiGLU kernels as well was slower: their blocks then wait on the A loads in series. */
static bool lora_fork(const cera_cuda_state *s) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return s->lora_fork && cudaStreamIsCapturing(s->st, &cs) == cudaSuccess &&
           cs == cudaStreamCaptureStatusActive;
}

/* The residual stream's pending adapter sum (O or down of layer `layer`; proj < 0: none),
 * which the next RMS norm adds, and where the residual row is (x or x2: the norm that adds
 * the sum writes the new row to the other one). */
typedef struct dec_resid {
    float *x;
    int layer, proj;
} dec_resid;

/* The RMS norm of the residual into a_embd, adding the pending sum first when there is one. */
static cera_status decode_norm(cera_cuda_state *s, dec_resid *r, const float *weight, cera_error *err) {
    if (r->proj < 0) {
        CU_TRY(cu_rmsnorm_act(s->st, r->x, s->embd_pad, 1, weight, s->hp.rms_eps, &s->a_embd));
        return CERA_OK;
    }
    float *other = r->x == s->x ? s->x2 : s->x;
    CERA_TRY(cu_lora_join(s, err));
    CU_TRY(cu_norm_lora(s->st, r->x, other, weight, s->hp.rms_eps, &s->a_embd, &s->lora, r->layer, r->proj,
                        s->hp.residual_scale));
    r->x = other;
    r->proj = -1;
    return CERA_OK;
}

static cera_status decode_ffn(cera_cuda_state *s, int l, const cu_layer *L, bool fork, dec_resid *r,
                              cera_error *err) {
    const cu_lora_segs gu = lora_gate_up(s);
    const cu_lora_segs dn = lora_one(s, CERA_PROJ_DOWN, s->x, s->n_embd, s->embd_pad);
    CERA_TRY(decode_norm(s, r, L->ffn_norm, err));
    if (gu.n) {
        // adapters on gate/up: the sums are needed before SwiGLU, so the matvec stores them
        // and one launch adds B·t, applies SwiGLU and quantizes
        CERA_TRY(cu_lora_apply_a(s, l, &gu, &s->a_embd, fork, err));
        if (L->wgate.type == L->wup.type) {
            cu_mv_seg segs[2] = {{&L->wgate, s->gate, NULL}, {&L->wup, s->up, NULL}};
            CU_TRY(cu_matvec(s->st, segs, 2, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
        } else {
            cu_mv_seg g = {&L->wgate, s->gate, NULL}, u = {&L->wup, s->up, NULL};
            CU_TRY(cu_matvec(s->st, &g, 1, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
            CU_TRY(cu_matvec(s->st, &u, 1, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
        }
        CERA_TRY(cu_lora_join(s, err));
        CU_TRY(cu_lora_swiglu(s->st, &s->lora, l, s->gate, s->up, L->bgate, L->bup, &s->a_ff));
    } else if (L->wgate.type == L->wup.type) {
        cu_mv_seg segs[2] = {{&L->wgate, NULL, L->bgate}, {&L->wup, NULL, L->bup}};
        CU_TRY(cu_matvec(s->st, segs, 2, &s->a_embd, CU_MV_SWIGLU, 1.0f, &s->a_ff));
    } else {
        cu_mv_seg g = {&L->wgate, s->gate, NULL}, u = {&L->wup, s->up, NULL};
        CU_TRY(cu_matvec(s->st, &g, 1, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
        CU_TRY(cu_matvec(s->st, &u, 1, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
        CU_TRY(cu_swiglu(s->st, s->gate, s->up, s->n_ff, L->bgate, L->bup, 1, &s->a_ff));
        CU_TRY(cu_quantize_act(s->st, &s->a_ff, 1));
    }
    CERA_TRY(cu_lora_apply_a(s, l, &dn, &s->a_ff, fork, err));
    cu_mv_seg d = {&L->wdown, r->x, L->bdown};
    CU_TRY(cu_matvec(s->st, &d, 1, &s->a_ff, CU_MV_ADD, s->hp.residual_scale, NULL));
    if (dn.n) r->layer = l, r->proj = CERA_PROJ_DOWN;
    return CERA_OK;
}

/* The layer's view of the paged cache for the current batch. */
static cu_kv layer_kv(const cera_cuda_state *s, int l) {
    cu_kv kv;
    kv.base = s->kv_base;
    kv.tables = s->d_tables;
    kv.tok_table = s->d_tok_tbl;
    kv.n_layer = s->n_kv_layer;
    kv.layer = s->layers[l].kv_index;
    kv.kv_dim = s->n_kv;
    kv.q8 = s->prm.kv_type == CERA_KV_Q8_0;
    return kv;
}

/* The short convolution of conv layer l over the batch's n tokens: s->bcx (in_proj's
 * output, rows 3 n_embd apart) -> a_conv (f32 and int8), the sequences' states moved on. */
static cera_status conv_step(cera_cuda_state *s, int l, int n, cera_error *err) {
    const cu_layer *L = &s->layers[l];
    const cu_conv_args a = {.src = s->bcx,
                            .src_stride = 3 * (int64_t)s->n_embd,
                            .n_tok = n,
                            .n_embd = s->n_embd,
                            .lc = s->lc,
                            .pos = s->d_pos,
                            .first = s->d_first,
                            .slot = s->d_slot,
                            .last = s->d_last,
                            .w = L->conv_w,
                            .state = s->conv_state,
                            .state_slot = s->conv_state_slot,
                            .state_off = (int64_t)L->conv_index * (s->lc - 1) * s->n_embd};
    CU_TRY(cu_shortconv(s->st, &a, &s->a_conv));
    CU_TRY(cu_quantize_act(s->st, &s->a_conv, n));
    return CERA_OK;
}

/* An LFM2 conv block in a one-token decode step: x += out_proj(conv(in_proj(norm(x)))), the
 * adapters of in_proj and out_proj added by their own kernels (the llama blocks' fusions
 * are for attention and the FFN). */
static cera_status decode_conv(cera_cuda_state *s, int l, const cu_layer *L, dec_resid *r, cera_error *err) {
    CERA_TRY(decode_norm(s, r, L->attn_norm, err));
    const cu_lora_segs gi = lora_one(s, CERA_PROJ_CONV_IN, s->bcx, 3 * (int64_t)s->n_embd, 0);
    CERA_TRY(cu_lora_apply_a(s, l, &gi, &s->a_embd, false, err));
    const cu_mv_seg in = {&L->wcin, s->bcx, NULL};
    CU_TRY(cu_matvec(s->st, &in, 1, &s->a_embd, CU_MV_STORE, 1.0f, NULL));
    if (gi.n) CU_TRY(cu_lora_b(s->st, &s->lora, l, &gi, 1, 1.0f));
    CERA_TRY(conv_step(s, l, 1, err));
    const cu_lora_segs go = lora_one(s, CERA_PROJ_CONV_OUT, r->x, s->n_embd, s->embd_pad);
    CERA_TRY(cu_lora_apply_a(s, l, &go, &s->a_conv, false, err));
    const cu_mv_seg o = {&L->wcout, r->x, NULL};
    CU_TRY(cu_matvec(s->st, &o, 1, &s->a_conv, CU_MV_ADD, 1.0f, NULL));
    if (go.n) CU_TRY(cu_lora_b(s->st, &s->lora, l, &go, 1, 1.0f));
    return CERA_OK;
}

static cera_status decode_launches(cera_cuda_state *s, cera_error *err) {
    const cera_hparams *hp = &s->hp;
    const float eps = hp->rms_eps;
    const bool fork = lora_fork(s);
    dec_resid r = {s->x, 0, -1};
    s->lora_joined = true;
    CU_TRY(cu_get_rows(s->st, &s->tok_embd, s->d_tok, 1, s->x, s->embd_pad, hp->embd_scale));
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *L = &s->layers[l];
        if (L->conv) {
            CERA_TRY(decode_conv(s, l, L, &r, err));
            CERA_TRY(decode_ffn(s, l, L, fork, &r, err));
            continue;
        }
        const cu_kv kv = layer_kv(s, l);
        CERA_TRY(decode_norm(s, &r, L->attn_norm, err));
        const cu_lora_segs qkv = lora_qkv(s, 0);
        CERA_TRY(cu_lora_apply_a(s, l, &qkv, &s->a_embd, fork, err));
        CERA_TRY(decode_qkv(s, L, err));
        float *q = s->qkv, *k = s->qkv + s->n_q, *v = s->qkv + s->n_q + s->n_kv;
        if (qkv.n) {
            CERA_TRY(cu_lora_join(s, err));
            CU_TRY(cu_rope_store_lora(s->st, q, k, v, s->d_pos, hp->n_head, hp->n_head_kv, s->hd, L->q_norm,
                                      L->k_norm, eps, &s->rope, s->qr, &kv, &s->lora, l));
        } else {
            CU_TRY(cu_rope_store(s->st, q, k, v, 0, 1, s->d_pos, hp->n_head, hp->n_head_kv, s->hd, L->q_norm,
                                 L->k_norm, eps, &s->rope, s->qr, &kv));
        }
        CU_TRY(cu_attention(s->st, s->qr, 1, s->d_pos, hp->n_head, hp->n_head_kv, s->hd, &kv, hp->attn_scale,
                            s->dec_splits, 1, &s->att, &s->a_attn));
        if (s->hd % 32) CU_TRY(cu_quantize_act(s->st, &s->a_attn, 1));
        const cu_lora_segs og = lora_one(s, CERA_PROJ_O, s->x, s->n_embd, s->embd_pad);
        CERA_TRY(cu_lora_apply_a(s, l, &og, &s->a_attn, fork, err));
        cu_mv_seg o = {&L->wo, r.x, L->bo};
        CU_TRY(cu_matvec(s->st, &o, 1, &s->a_attn, CU_MV_ADD, hp->residual_scale, NULL));
        if (og.n) r.layer = l, r.proj = CERA_PROJ_O;
        CERA_TRY(decode_ffn(s, l, L, fork, &r, err));
    }
    CERA_TRY(decode_norm(s, &r, s->output_norm, err));
    cu_mv_seg out = {&s->output, s->logits, s->output_b};
    CU_TRY(cu_matvec(s->st, &out, 1, &s->a_embd, CU_MV_STORE, 1.0f / hp->logit_scale, NULL));
    CU_TRY(cu_argmax(s->st, s->logits, s->n_vocab, s->d_argmax));
    return CERA_OK;
}

/* Decode steps of at least this many sequences run their Q4_0/Q8_0 projections without a
 * bias on the tensor cores (cu_mma_q8), fewer through cu_matvec_rows: measured on the H200
 * (bench/RESULTS.md), mma at 8 rows about matches the several-row matvec and from 16 rows on
 * beats it 2-4x. */
#define MMA_MIN_ROWS 8

/* y (rows y_stride apart) = (or +=, add) scale · (W x + bias) for n activation rows. */
static cera_status rows_linear(cera_cuda_state *s, const cu_weight *w, const float *bias, const cu_act *x,
                               int n, float *y, int64_t y_stride, bool add, float scale, cera_error *err) {
    if (n >= MMA_MIN_ROWS && !bias && cu_mma_supported(w->type)) {
        CU_TRY(cu_mma_q8(s->st, w, x, n, y, y_stride, add, scale, s->mma_work, s->mma_work_bytes));
        return CERA_OK;
    }
    const cu_mv_seg seg = {w, y, bias};
    CU_TRY(cu_matvec_rows(s->st, &seg, 1, x, n, y_stride, add ? CU_MV_ADD : CU_MV_STORE, scale, NULL));
    return CERA_OK;
}

/* A decode step of n tokens, each of its own sequence, without adapters (see the top of
 * the file): logits of every row into s->logits [n, n_vocab]. */
static cera_status decode_rows(cera_cuda_state *s, int n, cera_error *err) {
    const cera_hparams *hp = &s->hp;
    const float eps = hp->rms_eps, rs = hp->residual_scale;
    const int64_t qkv_ld = s->n_q + 2 * s->n_kv;
    const bool mma = n >= MMA_MIN_ROWS;
    CU_TRY(cu_get_rows(s->st, &s->tok_embd, s->d_tok, n, s->x, s->embd_pad, hp->embd_scale));
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *L = &s->layers[l];
        const cu_kv kv = layer_kv(s, l);
        CU_TRY(cu_rmsnorm_act(s->st, s->x, s->embd_pad, n, L->attn_norm, eps, &s->a_embd));
        if (L->conv) {
            CERA_TRY(rows_linear(s, &L->wcin, NULL, &s->a_embd, n, s->bcx, 3 * (int64_t)s->n_embd, false,
                                 1.0f, err));
            CERA_TRY(conv_step(s, l, n, err));
            CERA_TRY(rows_linear(s, &L->wcout, NULL, &s->a_conv, n, s->x, s->embd_pad, true, 1.0f, err));
        } else {
            float *q = s->qkv, *k = s->qkv + s->n_q, *v = s->qkv + s->n_q + s->n_kv;
            const cu_mv_seg qkv[3] = {{&L->wq, q, L->bq}, {&L->wk, k, L->bk}, {&L->wv, v, L->bv}};
            if (!mma && L->wq.type == L->wk.type && L->wq.type == L->wv.type) {
                CU_TRY(cu_matvec_rows(s->st, qkv, 3, &s->a_embd, n, qkv_ld, CU_MV_STORE, 1.0f, NULL));
            } else {
                for (int i = 0; i < 3; i++)
                    CERA_TRY(rows_linear(s, qkv[i].w, qkv[i].bias, &s->a_embd, n, qkv[i].y, qkv_ld, false,
                                         1.0f, err));
            }
            CU_TRY(cu_rope_store(s->st, q, k, v, qkv_ld, n, s->d_pos, hp->n_head, hp->n_head_kv, s->hd,
                                 L->q_norm, L->k_norm, eps, &s->rope, s->qr, &kv));
            CU_TRY(cu_attention(s->st, s->qr, n, s->d_pos, hp->n_head, hp->n_head_kv, s->hd, &kv,
                                hp->attn_scale, s->dec_splits, 1, &s->att, &s->a_attn));
            if (s->hd % 32) CU_TRY(cu_quantize_act(s->st, &s->a_attn, n));
            CERA_TRY(rows_linear(s, &L->wo, L->bo, &s->a_attn, n, s->x, s->embd_pad, true, rs, err));
        }
        CU_TRY(cu_rmsnorm_act(s->st, s->x, s->embd_pad, n, L->ffn_norm, eps, &s->a_embd));
        if (!mma && L->wgate.type == L->wup.type) {
            const cu_mv_seg gu[2] = {{&L->wgate, NULL, L->bgate}, {&L->wup, NULL, L->bup}};
            CU_TRY(cu_matvec_rows(s->st, gu, 2, &s->a_embd, n, 0, CU_MV_SWIGLU, 1.0f, &s->a_ff));
        } else {
            CERA_TRY(rows_linear(s, &L->wgate, NULL, &s->a_embd, n, s->gate, s->n_ff, false, 1.0f, err));
            CERA_TRY(rows_linear(s, &L->wup, NULL, &s->a_embd, n, s->up, s->n_ff, false, 1.0f, err));
            CU_TRY(cu_swiglu(s->st, s->gate, s->up, s->n_ff, L->bgate, L->bup, n, &s->a_ff));
            CU_TRY(cu_quantize_act(s->st, &s->a_ff, n));
        }
        CERA_TRY(rows_linear(s, &L->wdown, L->bdown, &s->a_ff, n, s->x, s->embd_pad, true, rs, err));
    }
    CU_TRY(cu_rmsnorm_act(s->st, s->x, s->embd_pad, n, s->output_norm, eps, &s->a_embd));
    return rows_linear(s, &s->output, s->output_b, &s->a_embd, n, s->logits, s->n_vocab, false,
                       1.0f / hp->logit_scale, err);
}

/* Whether a batch takes decode_rows: n tokens of n sequences, no adapter, and few enough
 * rows that the several-row kernels beat dequantizing every weight for cuBLAS (Q4_0/Q8_0,
 * which the tensor-core matmul takes from MMA_MIN_ROWS on: up to DEC_ROWS_MAX). Measured
 * on the H200 (bench/RESULTS.md, the batched table): through cu_matvec_rows Q4_0 decode of 8
 * sequences 2.1x faster than cuBLAS, of 32 and 64 1.6x and 2.9x slower; F16 weights no
 * faster from 8 rows on. */
static bool use_decode_rows(const cera_cuda_state *s, int n, const int32_t *tok_tbl) {
    const cera_type t = s->layers[0].wdown.type; /* every layer kind has an FFN */
    const bool float_w = t == CERA_TYPE_F16 || t == CERA_TYPE_BF16 || t == CERA_TYPE_F32;
    const int most = cu_mma_supported(t) ? DEC_ROWS_MAX : float_w ? 7 : 12;
    if (n < 2 || n > most || s->lora_mask || s->prm.force_gemm) return false;
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (tok_tbl[i] == tok_tbl[j]) return false; /* two tokens of one sequence: a prompt chunk */
    return true;
}

/* The launches of a decode step: decode_launches (n = 1, with its LoRA launches) or
 * decode_rows (n tokens of n sequences). */
static cera_status step_launches(cera_cuda_state *s, int n, cera_error *err) {
    return n == 1 ? decode_launches(s, err) : decode_rows(s, n, err);
}

/* Launches bucket's graph of step_launches(n), capturing it first when it is not ready (the
 * caller drops a stale one); plain launches with no_graph. */
static cera_status graph_launch(cera_cuda_state *s, int bucket, int n, cera_error *err) {
    if (s->prm.no_graph) return step_launches(s, n, err);
    if (!s->graph_ready[bucket]) {
        CU_TRY(cudaStreamBeginCapture(s->st, cudaStreamCaptureModeThreadLocal));
        cu_set_pdl(!s->prm.no_pdl && s->cc_major >= 9); // griddepcontrol is Hopper's
        cera_status st = step_launches(s, n, err);
        cu_set_pdl(false);
        cudaGraph_t g = NULL;
        cudaError_t e = cudaStreamEndCapture(s->st, &g);
        if (st != CERA_OK) {
            if (g) cudaGraphDestroy(g);
            return st;
        }
        if (e != cudaSuccess)
            return cera_fail(err, CERA_ERR_DEVICE, "cuda: decode graph (%d rows) capture: %s", n,
                             cudaGetErrorString(e));
        e = cudaGraphInstantiate(&s->graph[bucket], g, 0);
        cudaGraphDestroy(g);
        if (e != cudaSuccess)
            return cera_fail(err, CERA_ERR_DEVICE, "cuda: decode graph (%d rows) instantiate: %s", n,
                             cudaGetErrorString(e));
        s->graph_ready[bucket] = true;
        s->graph_kv_base[bucket] = s->kv_base;
    }
    CU_TRY(cudaGraphLaunch(s->graph[bucket], s->st));
    return CERA_OK;
}

/* decode_rows of n tokens through its bucket's graph. */
static cera_status run_decode_rows(cera_cuda_state *s, int n, cera_error *err) {
    const int bucket = n - 1;
    if (s->graph_ready[bucket] && s->graph_kv_base[bucket] != s->kv_base) {
        cudaGraphExecDestroy(s->graph[bucket]);
        s->graph_ready[bucket] = false;
    }
    return graph_launch(s, bucket, n, err);
}

/* Moves the listed rows of s->logits [n, n_vocab] to the front (rows only move down:
 * out_rows increase), then the argmax of the last of them. */
static cera_status compact_logits(cera_cuda_state *s, const int32_t *out_rows, int n_out, cera_error *err) {
    for (int i = 0; i < n_out; i++)
        if (out_rows[i] != i)
            CU_TRY(cudaMemcpyAsync(s->logits + (size_t)i * s->n_vocab,
                                   s->logits + (size_t)out_rows[i] * s->n_vocab,
                                   sizeof(float) * (size_t)s->n_vocab, cudaMemcpyDeviceToDevice, s->st));
    if (n_out > 0)
        CU_TRY(cu_argmax(s->st, s->logits + (size_t)(n_out - 1) * s->n_vocab, s->n_vocab, s->d_argmax));
    return CERA_OK;
}

/* Captures the decode step into a graph on first use (again when the KV storage moved, or
 * the LoRA launches change: the projections targeted, the entry count or the scratch);
 * plain launches with no_graph. The attention split count is fixed (about 4 blocks per SM
 * over the KV heads): measured on an H200 at depths 0 and 4096 it beat split counts that
 * follow the depth (1 .. 64, a graph each), so one graph serves every position. */
static cera_status run_decode(cera_cuda_state *s, int pos, cera_error *err) {
    (void)pos;
    const int bucket = 0;
    if (s->graph_ready[bucket] &&
        (s->graph_kv_base[bucket] != s->kv_base || s->graph_lora_mask[bucket] != s->lora_mask ||
         (s->lora_mask &&
          (s->graph_lora_t[bucket] != s->lora.t || s->graph_lora_nent[bucket] != s->lora_n_ent)))) {
        cudaGraphExecDestroy(s->graph[bucket]);
        s->graph_ready[bucket] = false;
    }
    const bool fresh = !s->graph_ready[bucket];
    CERA_TRY(graph_launch(s, bucket, 1, err));
    if (fresh) {
        s->graph_lora_mask[bucket] = s->lora_mask;
        s->graph_lora_t[bucket] = s->lora.t;
        s->graph_lora_nent[bucket] = s->lora_n_ent;
    }
    return CERA_OK;
}

/* Logits of the listed rows: one normed row through the decode matvec each when few,
 * else every row through the GEMM and the listed ones gathered. Ends with the argmax of
 * the last listed row. */
static cera_status prefill_logits(cera_cuda_state *s, int n, const int32_t *out_rows, int n_out,
                                  cera_error *err) {
    const cera_hparams *hp = &s->hp;
    const float inv = 1.0f / hp->logit_scale;
    if (n_out <= 4 && n_out < n) {
        for (int i = 0; i < n_out; i++) {
            CU_TRY(cu_rmsnorm_act(s->st, s->x + (size_t)out_rows[i] * s->embd_pad, s->embd_pad, 1,
                                  s->output_norm, hp->rms_eps, &s->a_embd));
            cu_mv_seg out = {&s->output, s->logits + (size_t)i * s->n_vocab, s->output_b};
            CU_TRY(cu_matvec(s->st, &out, 1, &s->a_embd, CU_MV_STORE, inv, NULL));
        }
    } else {
        CU_TRY(cu_rmsnorm_act(s->st, s->x, s->embd_pad, n, s->output_norm, hp->rms_eps, &s->a_embd));
        CERA_TRY(cu_gemm(s, &s->output, &s->a_embd, n, s->logits, s->n_vocab, err));
        CU_TRY(cu_bias_scale(s->st, s->logits, s->n_vocab, s->output_b, n, s->n_vocab, inv));
        // compact the listed rows to the front (rows only move down: out_rows increase)
        for (int i = 0; i < n_out; i++)
            if (out_rows[i] != i)
                CU_TRY(cudaMemcpyAsync(s->logits + (size_t)i * s->n_vocab,
                                       s->logits + (size_t)out_rows[i] * s->n_vocab,
                                       sizeof(float) * (size_t)s->n_vocab, cudaMemcpyDeviceToDevice, s->st));
    }
    CU_TRY(cu_argmax(s->st, s->logits + (size_t)(n_out - 1) * s->n_vocab, s->n_vocab, s->d_argmax));
    return CERA_OK;
}

/* CERA_CUDA_PROFILE=1 times the prefill's phases (each launch synchronized: for diagnosis
 * only) and prints them to stderr after each prefill. */
typedef struct prof {
    bool on;
    cudaEvent_t a, b;
    double ms[4]; /* gemm, attention, other, total */
} prof;

static void prof_begin(prof *p, cudaStream_t st) {
    if (p->on) cudaEventRecord(p->a, st);
}

static void prof_end(prof *p, cudaStream_t st, int slot) {
    if (!p->on) return;
    float ms = 0;
    cudaEventRecord(p->b, st);
    cudaEventSynchronize(p->b);
    cudaEventElapsedTime(&ms, p->a, p->b);
    p->ms[slot] += ms;
    p->ms[3] += ms;
}

#define PROF(slot, call)                                                                                     \
    do {                                                                                                     \
        prof_begin(&pf, s->st);                                                                              \
        call;                                                                                                \
        prof_end(&pf, s->st, slot);                                                                          \
    } while (0)

/* A prompt chunk's adapters on one projection group: y += s·B(A·x) on the GEMM's output,
 * before any bias, as llama.cpp's build_lora_mm. When every adapter of the batch covers all
 * its rows at one scale (a session's prompt), two cuBLAS GEMMs per projection and adapter;
 * else (sequences with different adapters) the plan's kernels. */
static cera_status prefill_lora(cera_cuda_state *s, int l, const cu_lora_segs *g, const cu_act *x, int n,
                                const cu_weight *last, cera_error *err) {
    if (!g->n) return CERA_OK;
    // cu_gemm left x in F16 (half_act) unless the group's last weight is F32 or BF16
    const bool x_half = last->type != CERA_TYPE_F32 && last->type != CERA_TYPE_BF16;
    if (x_half && s->lora_uniform) return cu_lora_prefill_gemm(s, l, g, x, n, err);
    CERA_TRY(cu_lora_apply_a(s, l, g, x, false, err));
    CU_TRY(cu_lora_b(s->st, &s->lora, l, g, n, 1.0f));
    return CERA_OK;
}

static cera_status prefill(cera_cuda_state *s, int n, bool one_seq, const int32_t *out_rows, int n_out,
                           cera_error *err) {
    prof pf;
    memset(&pf, 0, sizeof pf);
    pf.on = getenv("CERA_CUDA_PROFILE") != NULL;
    if (pf.on) {
        cudaEventCreate(&pf.a);
        cudaEventCreate(&pf.b);
    }
    const cera_hparams *hp = &s->hp;
    const float eps = hp->rms_eps;
    const int64_t qkv_ld = s->n_q + 2 * s->n_kv;
    CU_TRY(cu_get_rows(s->st, &s->tok_embd, s->d_tok, n, s->x, s->embd_pad, hp->embd_scale));
    // query tokens per attention block (they share each staged K/V tile), then enough
    // splits to fill the GPU, within the partials' room (n * splits <= ATT_TOK_SPLITS)
    const int G = hp->n_head / hp->n_head_kv;
    const int qt = one_seq ? (16 / G > 0 ? 16 / G : 1) : 1;
    const int blocks = hp->n_head_kv * ((n + qt - 1) / qt);
    int splits = 1;
    if (blocks < 2 * s->n_sm) {
        splits = (2 * s->n_sm + blocks - 1) / blocks;
        if (splits > s->att.max_splits) splits = s->att.max_splits;
        if (splits * n > ATT_TOK_SPLITS) splits = ATT_TOK_SPLITS / n;
        if (splits < 1) splits = 1;
    }
    cu_act attn_f = s->a_attn;
    attn_f.q = NULL; // the GEMM path reads f32 rows only
    for (int l = 0; l < hp->n_layer; l++) {
        const cu_layer *L = &s->layers[l];
        const cu_kv kv = layer_kv(s, l);
        PROF(2, CU_TRY(cu_rmsnorm_act(s->st, s->x, s->embd_pad, n, L->attn_norm, eps, &s->a_embd)));
        if (L->conv) { /* LFM2: x += out_proj(conv(in_proj(h))) */
            PROF(0, CERA_TRY(cu_gemm(s, &L->wcin, &s->a_embd, n, s->bcx, 3 * (int64_t)s->n_embd, err)));
            const cu_lora_segs gi =
                lora_one(s, CERA_PROJ_CONV_IN, s->bcx, 3 * (int64_t)s->n_embd, 3 * (int64_t)s->n_embd);
            PROF(2, CERA_TRY(prefill_lora(s, l, &gi, &s->a_embd, n, &L->wcin, err)));
            PROF(2, CERA_TRY(conv_step(s, l, n, err)));
            cu_act conv_f = s->a_conv;
            conv_f.q = NULL;
            PROF(0, CERA_TRY(cu_gemm(s, &L->wcout, &s->a_conv, n, s->tmp, s->n_embd, err)));
            const cu_lora_segs go = lora_one(s, CERA_PROJ_CONV_OUT, s->tmp, s->n_embd, s->n_embd);
            PROF(2, CERA_TRY(prefill_lora(s, l, &go, &conv_f, n, &L->wcout, err)));
            PROF(2, CU_TRY(cu_add_scaled(s->st, s->x, s->embd_pad, s->tmp, s->n_embd, NULL, n, s->n_embd,
                                         1.0f)));
            goto ffn;
        }
        PROF(0, CERA_TRY(cu_gemm(s, &L->wq, &s->a_embd, n, s->qkv, qkv_ld, err)));
        PROF(0, CERA_TRY(cu_gemm(s, &L->wk, &s->a_embd, n, s->qkv + s->n_q, qkv_ld, err)));
        PROF(0, CERA_TRY(cu_gemm(s, &L->wv, &s->a_embd, n, s->qkv + s->n_q + s->n_kv, qkv_ld, err)));
        const cu_lora_segs qkv = lora_qkv(s, qkv_ld);
        PROF(2, CERA_TRY(prefill_lora(s, l, &qkv, &s->a_embd, n, &L->wv, err)));
        if (L->bq) CU_TRY(cu_bias_scale(s->st, s->qkv, qkv_ld, L->bq, n, s->n_q, 1.0f));
        if (L->bk) CU_TRY(cu_bias_scale(s->st, s->qkv + s->n_q, qkv_ld, L->bk, n, s->n_kv, 1.0f));
        if (L->bv) CU_TRY(cu_bias_scale(s->st, s->qkv + s->n_q + s->n_kv, qkv_ld, L->bv, n, s->n_kv, 1.0f));
        PROF(2, CU_TRY(cu_rope_store(s->st, s->qkv, s->qkv + s->n_q, s->qkv + s->n_q + s->n_kv, qkv_ld, n,
                                     s->d_pos, hp->n_head, hp->n_head_kv, s->hd, L->q_norm, L->k_norm, eps,
                                     &s->rope, s->qr, &kv)));
        PROF(1, CU_TRY(cu_attention(s->st, s->qr, n, s->d_pos, hp->n_head, hp->n_head_kv, s->hd, &kv,
                                    hp->attn_scale, splits, qt, &s->att, &attn_f)));
        PROF(0, CERA_TRY(cu_gemm(s, &L->wo, &s->a_attn, n, s->tmp, s->n_embd, err)));
        const cu_lora_segs og = lora_one(s, CERA_PROJ_O, s->tmp, s->n_embd, s->n_embd);
        PROF(2, CERA_TRY(prefill_lora(s, l, &og, &attn_f, n, &L->wo, err)));
        PROF(2, CU_TRY(cu_add_scaled(s->st, s->x, s->embd_pad, s->tmp, s->n_embd, L->bo, n, s->n_embd,
                                     hp->residual_scale)));
    ffn:
        PROF(2, CU_TRY(cu_rmsnorm_act(s->st, s->x, s->embd_pad, n, L->ffn_norm, eps, &s->a_embd)));
        PROF(0, CERA_TRY(cu_gemm(s, &L->wgate, &s->a_embd, n, s->gate, s->n_ff, err)));
        PROF(0, CERA_TRY(cu_gemm(s, &L->wup, &s->a_embd, n, s->up, s->n_ff, err)));
        const cu_lora_segs gu = lora_gate_up(s);
        PROF(2, CERA_TRY(prefill_lora(s, l, &gu, &s->a_embd, n, &L->wup, err)));
        PROF(2, CU_TRY(cu_swiglu(s->st, s->gate, s->up, s->n_ff, L->bgate, L->bup, n, &s->a_ff)));
        PROF(0, CERA_TRY(cu_gemm(s, &L->wdown, &s->a_ff, n, s->tmp, s->n_embd, err)));
        const cu_lora_segs dn = lora_one(s, CERA_PROJ_DOWN, s->tmp, s->n_embd, s->n_embd);
        PROF(2, CERA_TRY(prefill_lora(s, l, &dn, &s->a_ff, n, &L->wdown, err)));
        PROF(2, CU_TRY(cu_add_scaled(s->st, s->x, s->embd_pad, s->tmp, s->n_embd, L->bdown, n, s->n_embd,
                                     hp->residual_scale)));
    }
    if (pf.on) {
        fprintf(stderr, "cuda prefill %d tokens: gemm %.2f ms, attention %.2f ms, other %.2f ms (sum %.2f)\n",
                n, pf.ms[0], pf.ms[1], pf.ms[2], pf.ms[3]);
        cudaEventDestroy(pf.a);
        cudaEventDestroy(pf.b);
    }
    if (n_out > 0) CERA_TRY(prefill_logits(s, n, out_rows, n_out, err));
    return CERA_OK;
}

/* Stages the conv's per-token arrays (conv.cu): each token's sequence slot, its sequence's
 * first position in the batch and whether it is the last of its sequence. A conv model's
 * batch keeps each sequence's tokens together in position order (cera_batch_eval does). */
static cera_status stage_conv(cera_cuda_state *s, const int32_t *pos, int n, const int32_t *tok_tbl,
                              const int32_t *tok_slot, cera_error *err) {
    const int B = s->prm.n_batch;
    int32_t *first = s->h_conv, *slot = first + B, *last = slot + B;
    for (int i = 0; i < n; i++) {
        const bool cont = i > 0 && tok_tbl[i] == tok_tbl[i - 1];
        if (cont && pos[i] != pos[i - 1] + 1)
            return cera_fail(
                err, CERA_ERR_INVALID_ARG,
                "cuda: a conv model's batch must hold each sequence's tokens together, in order");
        first[i] = cont ? first[i - 1] : pos[i];
        slot[i] = tok_slot ? tok_slot[i] : 0;
        last[i] = i == n - 1 || tok_tbl[i + 1] != tok_tbl[i];
    }
    CU_TRY(cudaMemcpyAsync(s->d_first, first, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_slot, slot, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_last, last, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    return CERA_OK;
}

cera_status cu_forward(cera_cuda_state *s, const int32_t *tokens, const int32_t *pos, int n,
                       const int32_t *tok_tbl, const int32_t *tables, int n_tables, void *kv_base,
                       const int32_t *tok_slot, const int32_t *out_rows, int n_out, float *logits,
                       int32_t *argmax, const cera_lora_batch *lora, cera_error *err) {
    const int B = s->prm.n_batch;
    if (n < 1 || n > B)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: %d tokens in one call (1..%d)", n, B);
    if (n_tables > s->tables_cap)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: %d block-table entries in one batch (at most %d)",
                         n_tables, s->tables_cap);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= s->n_vocab)
            return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: token %d out of the vocabulary (%d)",
                             tokens[i], s->n_vocab);
    CU_TRY(cudaSetDevice(s->prm.device));
    // stage the batch in pinned memory: one copy per array, ordered before the kernels
    int32_t *h_tok = s->h_io, *h_pos = h_tok + B, *h_tt = h_pos + B, *h_am = h_tt + B, *h_tab = h_am + 1;
    memcpy(h_tok, tokens, sizeof(int32_t) * (size_t)n);
    memcpy(h_pos, pos, sizeof(int32_t) * (size_t)n);
    memcpy(h_tt, tok_tbl, sizeof(int32_t) * (size_t)n);
    memcpy(h_tab, tables, sizeof(int32_t) * (size_t)n_tables);
    CU_TRY(cudaMemcpyAsync(s->d_tok, h_tok, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_pos, h_pos, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_tok_tbl, h_tt, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_tables, h_tab, sizeof(int32_t) * (size_t)n_tables, cudaMemcpyHostToDevice,
                           s->st));
    s->kv_base = kv_base;
    if (s->lc) CERA_TRY(stage_conv(s, pos, n, tok_tbl, tok_slot, err));
    CERA_TRY(cu_lora_prepare(s, lora, n, err));
    if (n == 1) {
        CERA_TRY(run_decode(s, pos[0], err));
    } else if (use_decode_rows(s, n, tok_tbl)) {
        CERA_TRY(run_decode_rows(s, n, err));
        CERA_TRY(compact_logits(s, out_rows, n_out, err));
    } else {
        bool one_seq = true;
        for (int i = 1; i < n; i++) one_seq = one_seq && tok_tbl[i] == tok_tbl[0];
        CERA_TRY(prefill(s, n, one_seq, out_rows, n_out, err));
    }
    if (argmax && n_out > 0)
        CU_TRY(cudaMemcpyAsync(h_am, s->d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, s->st));
    if (logits && n_out > 0)
        CU_TRY(cudaMemcpyAsync(logits, s->logits, sizeof(float) * (size_t)n_out * s->n_vocab,
                               cudaMemcpyDeviceToHost, s->st));
    CU_TRY(cudaStreamSynchronize(s->st));
    if (argmax && n_out > 0) *argmax = *h_am;
    return CERA_OK;
}

cera_status cera_cuda_forward(cera_cuda_state *s, const int32_t *tokens, const int32_t *positions, int n,
                              float *logits, bool all_logits, int32_t *argmax_out, cera_error *err) {
    return cu_forward_own(s, tokens, positions, n, logits, all_logits, argmax_out, NULL, err);
}

cera_status cu_forward_own(cera_cuda_state *s, const int32_t *tokens, const int32_t *positions, int n,
                           float *logits, bool all_logits, int32_t *argmax_out, const cera_lora_batch *lora,
                           cera_error *err) {
    if (n < 1 || n > s->prm.n_batch)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: %d tokens in one call (1..%d)", n, s->prm.n_batch);
    int max_pos = 0;
    for (int i = 0; i < n; i++) {
        if (positions[i] < 0 || positions[i] >= s->prm.n_ctx)
            return cera_fail(err, CERA_ERR_CONTEXT_FULL, "cuda: position %d outside the context of %d",
                             positions[i], s->prm.n_ctx);
        if (positions[i] > max_pos) max_pos = positions[i];
    }
    // the standalone sequence: block b of the sequence is block b of its own storage
    const int n_tables = max_pos / CU_KV_BLOCK + 1;
    int32_t *ids = s->h_io + 3 * s->prm.n_batch + 1 + s->tables_cap; // the scratch after the staging area
    int32_t *rows = ids + s->own_blocks;
    for (int b = 0; b < n_tables; b++) ids[b] = b;
    int n_out = 0;
    if (all_logits)
        for (int i = 0; i < n; i++) rows[n_out++] = i;
    else
        rows[n_out++] = n - 1;
    int32_t *tt = rows + s->prm.n_batch;
    for (int i = 0; i < n; i++) tt[i] = 0;
    s->conv_state = s->own_state;
    // a batch from position 0 starts the standalone sequence afresh: its conv state too
    if (s->own_state && positions[0] == 0)
        CU_TRY(cudaMemsetAsync(s->own_state, 0, (size_t)s->conv_state_slot * sizeof(float), s->st));
    return cu_forward(s, tokens, positions, n, tt, ids, n_tables, s->own_kv, NULL, rows, n_out, logits,
                      argmax_out, lora, err);
}
