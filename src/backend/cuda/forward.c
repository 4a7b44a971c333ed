/*
 * forward.c — runs the plan on the GPU: the model's op list (model/graph.h), compiled at
 * open into CUDA steps (plan.c: norms that quantize for the next matmul, matvecs whose
 * epilogues do the bias, residual add and SwiGLU, Q/K/V into one rope + KV-store kernel,
 * attention, the short conv, the output), over one batch in one of three modes:
 *
 *   - one token (decode): the matvec kernels, with each LoRA group's A·x a launch of its
 *     own (on the side stream while the step is captured, beside the group's matvec) and its
 *     B·t where the plan put it (the next kernel that reads the output, or right after the
 *     matmul). The token and its position are read from device memory, so the whole step is
 *     captured once into a CUDA graph and replayed.
 *   - B tokens of B sequences (decode, no adapter, B up to the plan's rows_max; or several
 *     tokens of a sequence with every row's logits, speculative decoding's drafts): the same
 *     steps over B rows: cu_matvec_rows reads each weight once for all of them and gives each
 *     row the one-row kernel's bits, Q4_0/Q8_0 go to the tensor cores from MMA_MIN_ROWS rows,
 *     a graph per B, so that a sequence decoded among others gets the logits it gets alone.
 *   - a prompt chunk (prefill): the steps with cuBLAS GEMMs (gemm.c) and separate
 *     element-wise kernels, or for a short chunk (PREFILL_MMA_MAX) Q4_0/Q8_0 projections on
 *     the tensor cores as in a decode step; only the rows whose logits are asked for reach
 *     the output layer.
 * Routed experts (step_moe) choose on the device in every mode; a decode step then runs each
 * (token, expert) slot's matvecs on the chosen expert's rows, a prompt chunk brings the choice
 * back to group its tokens by expert for one grouped GEMM per expert tensor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"

/* Prompt chunks (prefill) of at most this many tokens run their Q4_0/Q8_0 projections on
 * the tensor cores too (one cu_mma_q8 launch reads each weight once for all of them), with
 * their inputs int8-quantized as in a decode step, instead of dequantizing every weight to
 * F16 for cuBLAS: that pass is a fixed cost per chunk (the weights' F16 bytes written and
 * read), which dominates the short chunks a server's steps carry (a question after a cached
 * system prompt, a chunk beside decode rows). Measured on the H200 (bench/RESULTS.md, the
 * short-prefill table): 64 tokens through cu_mma_q8 about match cuBLAS, fewer are faster. */
#define PREFILL_MMA_MAX 64
_Static_assert(PREFILL_MMA_MAX <= DEC_ROWS_MAX, "cu_mma_q8's workspace is sized for DEC_ROWS_MAX rows");

typedef enum run_mode { RUN_ONE, RUN_ROWS, RUN_PREFILL } run_mode;

/* CERA_CUDA_PROFILE=1 times the prefill's phases (each launch synchronized: for diagnosis
 * only) and prints them to stderr after each prefill. */
typedef struct prof {
    bool on;
    cudaEvent_t a, b;
    double ms[4]; /* gemm, attention, other, total */
} prof;

/* One pass over the plan. */
typedef struct run {
    cera_cuda_state *s;
    run_mode mode;
    int n;     /* tokens */
    bool fork; /* one token, being captured: A·x on the side stream */
    float *x;  /* the residual stream's home now (one token with adapters: s->x or s->x2) */
    /* one token: a residual add's B·t that the next norm adds (proj < 0: none), and whether
     * the last matmul left its B·t to the rope kernel */
    int pend_layer, pend_proj;
    float pend_mult;
    bool lora_to_rope;
    /* prefill */
    bool one_seq;
    bool mma; /* at most PREFILL_MMA_MAX tokens: Q4_0/Q8_0 matmuls on the tensor cores, so the
               * attention's and the GLU's outputs are quantized for them */
    const int32_t *out_rows;
    int n_out, splits, qt;
    prof pf;
} run;

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

#define PROF(r, slot, call)                                                                                  \
    do {                                                                                                     \
        prof_begin(&(r)->pf, (r)->s->st);                                                                    \
        call;                                                                                                \
        prof_end(&(r)->pf, (r)->s->st, slot);                                                                \
    } while (0)

/* The rows of l (the residual stream's current home for X's). */
static float *rows_at(const run *r, cu_loc l) {
    float *base = l.st == CU_ST_F32(CERA_BUF_X) ? r->x : r->s->store[l.st].f;
    return base + l.off;
}

/* The activation view of l (an ACT home). */
static cu_act act_at(const run *r, cu_loc l) {
    const cu_store *h = &r->s->store[l.st];
    cu_act a;
    a.f = h->f + l.off;
    a.q = h->q;
    a.d = h->d;
    a.s = h->s;
    a.k = l.k;
    a.k_pad = l.stride;
    return a;
}

/* Whether the launches are being captured (a decode graph): LoRA's A·x may then fork. */
static bool capturing(const cera_cuda_state *s) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(s->st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive;
}

/* The KV slot's view of the paged cache for the current batch (its group's blocks and
 * tables), attended over a window (0: none). */
static cu_kv slot_kv(const cera_cuda_state *s, int slot, int window) {
    const cu_kv_slot *L = &s->kvl[slot];
    cu_kv kv;
    kv.base = s->kv_base[L->group];
    kv.tables = s->d_tables + (size_t)L->group * (size_t)s->tables_cap;
    kv.tok_table = s->d_tok_tbl;
    kv.block_bytes = s->kv_block[L->group];
    kv.offset = L->offset;
    kv.kv_dim = L->kv_dim;
    kv.window = window;
    kv.type = cu_kv_type_of(s->prm.kv_type);
    kv.rot_k = s->prm.kv_rot_k;
    kv.rot_v = s->prm.kv_rot_v;
    return kv;
}

/* The RMS norm of rows src into act; one token with a residual add's B·t pending: that
 * added first (cu_norm_lora), the new residual row in the stream's other home. */
static cera_status norm_rows(run *r, cu_loc src, const float *w, float eps, const cu_act *act,
                             cera_error *err) {
    cera_cuda_state *s = r->s;
    if (r->pend_proj < 0) {
        CU_TRY(cu_rmsnorm_act(s->st, rows_at(r, src), src.stride, r->n, w, eps, act));
        return CERA_OK;
    }
    float *other = r->x == s->x ? s->x2 : s->x;
    CERA_TRY(cu_lora_join(s, err));
    CU_TRY(
        cu_norm_lora(s->st, r->x, other, w, eps, act, &s->lora, r->pend_layer, r->pend_proj, r->pend_mult));
    r->x = other;
    r->pend_proj = -1;
    return CERA_OK;
}

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

/* One token: y = W·x (+ bias) for every segment, in one launch when they share a type. */
static cera_status one_store(cera_cuda_state *s, const cu_mv_seg *segs, int n_seg, const cu_act *x,
                             cera_error *err) {
    bool one_type = true;
    for (int j = 1; j < n_seg; j++) one_type = one_type && segs[j].w->type == segs[0].w->type;
    if (one_type) {
        CU_TRY(cu_matvec(s->st, segs, n_seg, x, CU_MV_STORE, 1.0f, NULL));
    } else {
        for (int j = 0; j < n_seg; j++) CU_TRY(cu_matvec(s->st, &segs[j], 1, x, CU_MV_STORE, 1.0f, NULL));
    }
    return CERA_OK;
}

/* A prompt chunk's adapters on one projection group: y += s·B(A·x) on the matmul's output,
 * before any bias, as llama.cpp's build_lora_mm. When every adapter of the batch covers all
 * its rows at one scale (a session's prompt) and cuBLAS ran the group, two cuBLAS GEMMs per
 * projection and adapter; else (sequences with different adapters, or the tensor cores'
 * matmul: last NULL) the plan's kernels. */
static cera_status prefill_lora(cera_cuda_state *s, int l, const cu_lora_segs *g, const cu_act *x, int n,
                                const cu_weight *last, cera_error *err) {
    if (!g->n) return CERA_OK;
    // cu_gemm left x in F16 (half_act) unless the group's last weight is F32 or BF16
    const bool x_half = last && last->type != CERA_TYPE_F32 && last->type != CERA_TYPE_BF16;
    if (x_half && s->lora_uniform) return cu_lora_prefill_gemm(s, l, g, x, n, err);
    CERA_TRY(cu_lora_apply_a(s, l, g, x, false, err));
    CU_TRY(cu_lora_b(s->st, &s->lora, l, g, n, 1.0f));
    return CERA_OK;
}

/* A LINEAR step. One token with adapters: A·x right after the kernel that made the input
 * (forked while capturing when B·t waits for a later kernel: it then runs beside the matvec,
 * which takes longer, instead of after it); B·t where the plan put it. Measured on an H200
 * (bench/RESULTS.md), fusing A·x into the norm and SwiGLU kernels as well was slower: their
 * blocks then wait on the A loads in series. */
static cera_status step_linear(run *r, const cu_step *st, cera_error *err) {
    cera_cuda_state *s = r->s;
    const int n = r->n, ns = st->n_seg;
    const cu_act in = act_at(r, st->src);
    const bool add = st->epi == CU_MV_ADD, glu = st->epi == CU_MV_SWIGLU;
    const cu_act out = glu ? act_at(r, st->dst) : in;
    float *dst = add ? rows_at(r, st->dst) : NULL;
    cu_mv_seg segs[3];
    cera_proj proj[3] = {0};
    float *y[3] = {NULL, NULL, NULL};
    int64_t d[3] = {0};
    for (int j = 0; j < ns; j++) {
        y[j] = rows_at(r, st->seg[j].y);
        segs[j] = (cu_mv_seg){st->seg[j].w, y[j], st->seg[j].bias};
        proj[j] = st->seg[j].proj;
        d[j] = st->seg[j].w->n;
    }
    const int64_t y_stride = st->seg[0].y.stride;
    bool one_type = true;
    for (int j = 1; j < ns; j++) one_type = one_type && segs[j].w->type == segs[0].w->type;

    if (r->mode == RUN_PREFILL) {
        bool mma = r->mma;
        for (int j = 0; j < ns; j++) mma = mma && cu_mma_supported(segs[j].w->type);
        const cu_lora_segs g = cu_lora_group(s, proj, y, d, ns, y_stride);
        if (mma && add && !g.n && !segs[0].bias) { /* the residual add in the matmul's epilogue */
            PROF(
                r, 0,
                CERA_TRY(rows_linear(s, segs[0].w, NULL, &in, n, dst, st->dst.stride, true, st->scale, err)));
            return CERA_OK;
        }
        for (int j = 0; j < ns; j++) {
            if (mma)
                PROF(r, 0,
                     CERA_TRY(rows_linear(s, segs[j].w, NULL, &in, n, y[j], y_stride, false, 1.0f, err)));
            else
                PROF(r, 0, CERA_TRY(cu_gemm(s, segs[j].w, &in, n, y[j], y_stride, err)));
        }
        PROF(r, 2, CERA_TRY(prefill_lora(s, st->layer, &g, &in, n, mma ? NULL : segs[ns - 1].w, err)));
        if (add) {
            PROF(r, 2,
                 CU_TRY(cu_add_scaled(s->st, dst, st->dst.stride, y[0], y_stride, segs[0].bias, n, d[0],
                                      st->scale)));
        } else if (glu) {
            PROF(r, 2,
                 CU_TRY(cu_glu(s->st, y[0], y[1], y_stride, segs[0].bias, segs[1].bias, n, false, &out)));
            if (r->mma) PROF(r, 2, CU_TRY(cu_quantize_act(s->st, &out, n)));
        } else {
            for (int j = 0; j < ns; j++)
                if (segs[j].bias) CU_TRY(cu_bias_scale(s->st, y[j], y_stride, segs[j].bias, n, d[j], 1.0f));
        }
        return CERA_OK;
    }

    if (r->mode == RUN_ROWS) { /* no adapter here (use_decode_rows) */
        const bool mma = n >= MMA_MIN_ROWS;
        if (add)
            return rows_linear(s, segs[0].w, segs[0].bias, &in, n, dst, st->dst.stride, true, st->scale, err);
        if (glu && !mma) {
            CU_TRY(cu_matvec_rows(s->st, segs, 2, &in, n, 0, CU_MV_SWIGLU, 1.0f, &out));
            return CERA_OK;
        }
        if (!glu && ns > 1 && !mma && one_type) {
            CU_TRY(cu_matvec_rows(s->st, segs, ns, &in, n, y_stride, CU_MV_STORE, 1.0f, NULL));
            return CERA_OK;
        }
        for (int j = 0; j < ns; j++)
            CERA_TRY(rows_linear(s, segs[j].w, glu ? NULL : segs[j].bias, &in, n, y[j], y_stride, false, 1.0f,
                                 err));
        if (glu) {
            CU_TRY(cu_glu(s->st, y[0], y[1], y_stride, segs[0].bias, segs[1].bias, n, false, &out));
            CU_TRY(cu_quantize_act(s->st, &out, n));
        }
        return CERA_OK;
    }

    // one token; the adapters' rows are the residual row itself for an add
    if (add) y[0] = dst;
    const cu_lora_segs g = cu_lora_group(s, proj, y, d, ns, add ? st->dst.stride : y_stride);
    const bool later = g.n && st->lora_at != CU_LORA_AT_ONCE;
    CERA_TRY(cu_lora_apply_a(s, st->layer, &g, &in, r->fork && later, err));
    if (add) {
        const cu_mv_seg o = {segs[0].w, dst, segs[0].bias};
        CU_TRY(cu_matvec(s->st, &o, 1, &in, CU_MV_ADD, st->scale, NULL));
        if (later) {
            r->pend_layer = st->layer;
            r->pend_proj = (int)proj[0];
            r->pend_mult = st->scale;
        } else if (g.n) {
            CERA_TRY(cu_lora_join(s, err));
            CU_TRY(cu_lora_b(s->st, &s->lora, st->layer, &g, 1, st->scale));
        }
        return CERA_OK;
    }
    if (glu && !g.n) {
        const cu_mv_seg gu[2] = {{segs[0].w, NULL, segs[0].bias}, {segs[1].w, NULL, segs[1].bias}};
        CU_TRY(cu_matvec(s->st, gu, 2, &in, CU_MV_SWIGLU, 1.0f, &out));
        return CERA_OK;
    }
    if (glu) {
        // adapters on gate/up: the sums are needed before SwiGLU, so the matvec stores them
        // (no bias) and one launch adds B·t and the biases, applies SwiGLU and quantizes
        cu_mv_seg gu[2] = {{segs[0].w, y[0], NULL}, {segs[1].w, y[1], NULL}};
        CERA_TRY(one_store(s, gu, 2, &in, err));
        CERA_TRY(cu_lora_join(s, err));
        if (later) {
            CU_TRY(cu_lora_swiglu(s->st, &s->lora, st->layer, y[0], y[1], segs[0].bias, segs[1].bias, &out));
        } else {
            CU_TRY(cu_lora_b(s->st, &s->lora, st->layer, &g, 1, 1.0f));
            CU_TRY(cu_glu(s->st, y[0], y[1], y_stride, segs[0].bias, segs[1].bias, 1, false, &out));
            CU_TRY(cu_quantize_act(s->st, &out, 1));
        }
        return CERA_OK;
    }
    CERA_TRY(one_store(s, segs, ns, &in, err));
    if (later) {
        r->lora_to_rope = true;
    } else if (g.n) {
        CERA_TRY(cu_lora_join(s, err));
        CU_TRY(cu_lora_b(s->st, &s->lora, st->layer, &g, 1, 1.0f));
    }
    return CERA_OK;
}

static cera_status step_rope(run *r, const cu_step *st, cera_error *err) {
    cera_cuda_state *s = r->s;
    const cera_hparams *hp = &s->hp;
    const cu_kv kv = slot_kv(s, st->kv, 0);
    const int n_head_kv = s->kvl[st->kv].n_head_kv;
    cu_rope rope = st->rope_swa ? s->rope_swa : s->rope;
    rope.enabled = st->rope;
    rope.q_scale = st->scale;
    float *q = rows_at(r, st->src), *k = rows_at(r, st->k), *v = rows_at(r, st->v), *qo = rows_at(r, st->dst);
    if (r->lora_to_rope) {
        r->lora_to_rope = false;
        CERA_TRY(cu_lora_join(s, err));
        CU_TRY(cu_rope_store_lora(s->st, q, k, v, s->d_pos, hp->n_head, n_head_kv, s->hd, st->w, st->w2,
                                  st->eps, &rope, qo, &kv, &s->lora, st->layer));
        return CERA_OK;
    }
    PROF(r, 2,
         CU_TRY(cu_rope_store(s->st, q, k, v, st->src.stride, r->n, s->d_pos, hp->n_head, n_head_kv, s->hd,
                              st->w, st->w2, st->eps, &rope, qo, &kv)));
    return CERA_OK;
}

static cera_status step_attend(run *r, const cu_step *st, cera_error *err) {
    cera_cuda_state *s = r->s;
    const cera_hparams *hp = &s->hp;
    const cu_kv kv = slot_kv(s, st->kv, st->window);
    const int n_head_kv = s->kvl[st->kv].n_head_kv;
    cu_act out = act_at(r, st->dst);
    const float *q = rows_at(r, st->src);
    if (r->mode == RUN_PREFILL) {
        cu_act f = out;
        f.q = NULL; // the GEMM path reads f32 rows only (and so may the tensor-core attention)
        PROF(r, 1,
             CU_TRY(cu_attention(s->st, q, r->n, s->d_pos, hp->n_head, n_head_kv, s->hd, &kv, st->scale,
                                 r->splits, r->qt, &s->att, &f)));
        if (r->mma) PROF(r, 2, CU_TRY(cu_quantize_act(s->st, &out, r->n)));
        return CERA_OK;
    }
    CU_TRY(cu_attention(s->st, q, r->n, s->d_pos, hp->n_head, n_head_kv, s->hd, &kv, st->scale, s->dec_splits,
                        1, &s->att, &out));
    if (s->hd % 32) CU_TRY(cu_quantize_act(s->st, &out, r->n));
    return CERA_OK;
}

/* The short convolution of the batch's n tokens (rows B | C | X) into its activation, the
 * sequences' states moved on. */
static cera_status step_conv(run *r, const cu_step *st, cera_error *err) {
    cera_cuda_state *s = r->s;
    const cu_act out = act_at(r, st->dst);
    const cu_conv_args a = {.src = rows_at(r, st->src),
                            .src_stride = st->src.stride,
                            .n_tok = r->n,
                            .n_embd = (int)st->dst.k,
                            .lc = st->lc,
                            .pos = s->d_pos,
                            .first = s->d_first,
                            .slot = s->d_slot,
                            .last = s->d_last,
                            .w = st->w,
                            .state = s->conv_state,
                            .state_slot = s->conv_state_slot,
                            .state_off = st->state_off};
    PROF(r, 2, CU_TRY(cu_shortconv(s->st, &a, &out)));
    CU_TRY(cu_quantize_act(s->st, &out, r->n));
    return CERA_OK;
}

/* The batch's adapters on MoE target t of the step's layer (none targeting it: nothing):
 * y[slot] += s·B_e(A_e·x[slot / x_div]), slot_tok[slot] or slot / k the slot's batch row
 * (cu_moe_lora). */
static cera_status moe_lora(cera_cuda_state *s, const cu_step *st, cera_lora_moe t, const float *x,
                            int64_t x_stride, int x_div, const int32_t *slot_exp, const int32_t *slot_tok,
                            int n_slots, float *y, int64_t y_stride, cera_error *err) {
    if (!(s->lora_mask >> (CU_LORA_MOE_BIT + t) & 1u)) return CERA_OK;
    const cera_experts *ex = st->moe;
    const int64_t n_embd = ex->gate[0].k, n_ff = ex->gate[0].n;
    const int64_t k = t == CERA_LORA_MOE_DOWN ? n_ff : n_embd;
    const int64_t d = t == CERA_LORA_MOE_ROUTER ? ex->n_expert : t == CERA_LORA_MOE_DOWN ? n_embd : n_ff;
    CU_TRY(cu_moe_lora(s->st, &s->lora, s->hp.n_layer, st->layer, (int)t, x, x_stride, x_div,
                       t == CERA_LORA_MOE_ROUTER ? NULL : slot_exp, slot_tok,
                       t == CERA_LORA_MOE_ROUTER ? 1 : ex->n_used, n_slots, k, d, y, y_stride));
    return CERA_OK;
}

/* A prompt chunk's experts, each expert's weights read once for the chunk: the choice comes
 * back to the host, which groups the slots by expert (in token order, as the CPU backend);
 * the grouped rows are gathered, and gate, up and down each run as one grouped GEMM over the
 * chosen experts' rows (cu_gemm_experts); the weighted sum reads each slot's output where its
 * group put it. */
static cera_status prefill_experts(run *r, const cu_step *st, const cu_act *in, float *out, cera_error *err) {
    cera_cuda_state *s = r->s;
    const cera_experts *ex = st->moe;
    const int n = r->n, ne = ex->n_expert, k = ex->n_used, nk = n * k;
    const int64_t n_embd = st->dst.k, n_ff = ex->gate[0].n, ep = s->moe_embd_pad, fp = s->moe_ff_pad;
    // pinned: sel | where | tok | exp (each grouped row's token and expert), then the groups'
    // starts and fill counts
    int32_t *sel = s->h_moe, *where = sel + (size_t)nk, *tok = where + (size_t)nk, *exp = tok + (size_t)nk;
    int32_t *start = s->h_moe + 4 * (size_t)s->prm.n_batch * (size_t)s->moe_k, *fill = start + s->moe_ne + 1;
    CU_TRY(cudaMemcpyAsync(sel, s->moe_sel, sizeof(int32_t) * (size_t)nk, cudaMemcpyDeviceToHost, s->st));
    CU_TRY(cudaStreamSynchronize(s->st));
    for (int e = 0; e <= ne; e++) start[e] = 0;
    for (int i = 0; i < nk; i++) {
        if (sel[i] < 0 || sel[i] >= ne)
            return cera_fail(err, CERA_ERR_INTERNAL, "cuda: expert %d chosen", sel[i]);
        start[sel[i] + 1]++;
    }
    for (int e = 0; e < ne; e++) start[e + 1] += start[e];
    memcpy(fill, start, sizeof(int32_t) * (size_t)ne);
    for (int i = 0; i < nk; i++) {
        const int row = fill[sel[i]]++;
        where[i] = row;
        tok[row] = i / k;
        exp[row] = sel[i];
    }
    CU_TRY(cudaMemcpyAsync(s->moe_where, where, sizeof(int32_t) * (size_t)(3 * nk), cudaMemcpyHostToDevice,
                           s->st));
    const int32_t *d_tok = s->moe_where + nk, *d_exp = d_tok + nk;
    CU_TRY(cu_gather_rows(s->st, in->f, in->k_pad, d_tok, nk, n_embd, s->moe_x.f, ep));
    const cu_act xg = {s->moe_x.f, NULL, NULL, NULL, n_embd, ep};
    const cu_act h = {s->moe_h.f, NULL, NULL, NULL, n_ff, fp};
    PROF(r, 0, CERA_TRY(cu_gemm_experts(s, st->seg[0].w, n_ff, start, ne, &xg, s->moe_g, fp, err)));
    PROF(r, 0, CERA_TRY(cu_gemm_experts(s, st->seg[1].w, n_ff, start, ne, &xg, s->moe_u, fp, err)));
    CERA_TRY(moe_lora(s, st, CERA_LORA_MOE_UP, xg.f, ep, 1, d_exp, d_tok, nk, s->moe_u, fp, err));
    CERA_TRY(moe_lora(s, st, CERA_LORA_MOE_GATE, xg.f, ep, 1, d_exp, d_tok, nk, s->moe_g, fp, err));
    PROF(r, 2, CU_TRY(cu_glu(s->st, s->moe_g, s->moe_u, fp, NULL, NULL, nk, false, &h)));
    PROF(r, 0, CERA_TRY(cu_gemm_experts(s, st->seg[2].w, n_embd, start, ne, &h, s->moe_eo, ep, err)));
    CERA_TRY(moe_lora(s, st, CERA_LORA_MOE_DOWN, h.f, fp, 1, d_exp, d_tok, nk, s->moe_eo, ep, err));
    PROF(r, 2,
         CU_TRY(cu_moe_combine(s->st, s->moe_eo, ep, s->moe_where, s->moe_wt, n, k, n_embd, out,
                               st->dst.stride, st->epi == CU_MV_ADD, st->scale)));
    return CERA_OK;
}

/* The routed experts of a batch: the router's logits and each token's choice on the device
 * (a decode step with an F32 router and no adapter on it: one launch, cu_moe_router); then in
 * a decode step each slot's expert matvecs (gate and up with the SwiGLU epilogue, down), each
 * reading only the chosen expert's rows, so the step stays one graph; a prompt chunk groups
 * its slots by expert (prefill_experts). The weighted sum goes into dst, or is added to it
 * (epi CU_MV_ADD: the residual add the plan folded in). */
static cera_status step_moe(run *r, const cu_step *st, cera_error *err) {
    cera_cuda_state *s = r->s;
    const cera_experts *ex = st->moe;
    const int n = r->n, ne = ex->n_expert, k = ex->n_used, nk = n * k;
    const cu_act in = act_at(r, st->src);
    const int64_t n_embd = st->dst.k, n_ff = ex->gate[0].n, ep = s->moe_embd_pad;
    float *out = rows_at(r, st->dst);
    const bool sigmoid = ex->gating == CERA_GATING_SIGMOID;
    const bool router_lora = s->lora_mask >> (CU_LORA_MOE_BIT + CERA_LORA_MOE_ROUTER) & 1u;
    if (r->mode != RUN_PREFILL && st->mw->type == CERA_TYPE_F32 && !router_lora) {
        CU_TRY(cu_moe_router(s->st, st->mw, &in, n, k, sigmoid, st->bias, ex->norm_w, ex->w_scale,
                             s->moe_logits, s->moe_sel, s->moe_wt, s->moe_counter));
    } else {
        if (r->mode == RUN_PREFILL) {
            PROF(r, 0, CERA_TRY(cu_gemm(s, st->mw, &in, n, s->moe_logits, ne, err)));
        } else {
            const cu_mv_seg seg = {st->mw, s->moe_logits, NULL};
            CU_TRY(cu_matvec_rows(s->st, &seg, 1, &in, n, ne, CU_MV_STORE, 1.0f, NULL));
        }
        CERA_TRY(
            moe_lora(s, st, CERA_LORA_MOE_ROUTER, in.f, in.k_pad, 1, NULL, NULL, n, s->moe_logits, ne, err));
        PROF(r, 2,
             CU_TRY(cu_moe_route(s->st, s->moe_logits, ne, n, ne, k, sigmoid, st->bias, ex->norm_w,
                                 ex->w_scale, s->moe_sel, s->moe_wt)));
    }
    if (r->mode == RUN_PREFILL) return prefill_experts(r, st, &in, out, err);
    const cu_act h = {s->moe_h.f, s->moe_h.q, s->moe_h.d, s->moe_h.s, n_ff, s->moe_ff_pad};
    const cu_weight *g = st->seg[0].w, *u = st->seg[1].w, *d = st->seg[2].w;
    const unsigned gu_lora =
        (1u << (CU_LORA_MOE_BIT + CERA_LORA_MOE_GATE)) | (1u << (CU_LORA_MOE_BIT + CERA_LORA_MOE_UP));
    if (g->type == u->type && !(s->lora_mask & gu_lora)) {
        CU_TRY(cu_matvec_moe(s->st, g, u, n_ff, s->moe_sel, nk, k, &in, NULL, 0, &h));
    } else { /* gate and up stored, their adapters added, then SwiGLU */
        const int64_t fp = s->moe_ff_pad;
        CU_TRY(cu_matvec_moe(s->st, g, NULL, n_ff, s->moe_sel, nk, k, &in, s->moe_g, fp, NULL));
        CU_TRY(cu_matvec_moe(s->st, u, NULL, n_ff, s->moe_sel, nk, k, &in, s->moe_u, fp, NULL));
        CERA_TRY(
            moe_lora(s, st, CERA_LORA_MOE_UP, in.f, in.k_pad, k, s->moe_sel, NULL, nk, s->moe_u, fp, err));
        CERA_TRY(
            moe_lora(s, st, CERA_LORA_MOE_GATE, in.f, in.k_pad, k, s->moe_sel, NULL, nk, s->moe_g, fp, err));
        CU_TRY(cu_glu(s->st, s->moe_g, s->moe_u, fp, NULL, NULL, nk, false, &h));
        CU_TRY(cu_quantize_act(s->st, &h, nk));
    }
    CU_TRY(cu_matvec_moe(s->st, d, NULL, n_embd, s->moe_sel, nk, 1, &h, s->moe_eo, ep, NULL));
    CERA_TRY(moe_lora(s, st, CERA_LORA_MOE_DOWN, h.f, h.k_pad, 1, s->moe_sel, NULL, nk, s->moe_eo, ep, err));
    CU_TRY(cu_moe_combine(s->st, s->moe_eo, ep, NULL, s->moe_wt, n, k, n_embd, out, st->dst.stride,
                          st->epi == CU_MV_ADD, st->scale));
    return CERA_OK;
}

static cera_status prefill_logits(cera_cuda_state *s, const cu_step *st, const float *x, int n,
                                  const int32_t *out_rows, int n_out, cera_error *err);

static cera_status prefill_embd(cera_cuda_state *s, const cu_step *st, const float *x, int n,
                                const int32_t *out_rows, int n_out, cera_error *err);

static cera_status step_output(run *r, const cu_step *st, cera_error *err) {
    cera_cuda_state *s = r->s;
    if (s->embd) /* embeddings always take the prefill path (cu_forward) */
        return r->n_out > 0 ? prefill_embd(s, st, rows_at(r, st->src), r->n, r->out_rows, r->n_out, err)
                            : CERA_OK;
    if (r->mode == RUN_PREFILL)
        return r->n_out > 0 ? prefill_logits(s, st, rows_at(r, st->src), r->n, r->out_rows, r->n_out, err)
                            : CERA_OK;
    const cu_act h = act_at(r, st->dst);
    CERA_TRY(norm_rows(r, st->src, st->w, st->eps, &h, err));
    if (r->mode == RUN_ROWS)
        return rows_linear(s, st->mw, st->bias, &h, r->n, s->logits, s->n_vocab, false, st->scale, err);
    const cu_mv_seg out = {st->mw, s->logits, st->bias};
    CU_TRY(cu_matvec(s->st, &out, 1, &h, CU_MV_STORE, st->scale, NULL));
    CU_TRY(cu_argmax(s->st, s->logits, s->n_vocab, s->d_argmax));
    return CERA_OK;
}

/* Every step of the plan, once, for r's batch. */
static cera_status run_plan(run *r, cera_error *err) {
    cera_cuda_state *s = r->s;
    r->x = s->x;
    r->pend_proj = -1;
    r->lora_to_rope = false;
    s->lora_joined = true;
    for (int i = 0; i < s->n_steps; i++) {
        const cu_step *st = &s->steps[i];
        switch (st->kind) {
        case CU_STEP_EMBED:
            CU_TRY(
                cu_get_rows(s->st, st->mw, s->d_tok, r->n, rows_at(r, st->dst), st->dst.stride, st->scale));
            break;
        case CU_STEP_NORM: {
            const cu_act h = act_at(r, st->dst);
            PROF(r, 2, CERA_TRY(norm_rows(r, st->src, st->w, st->eps, &h, err)));
            break;
        }
        case CU_STEP_LINEAR: CERA_TRY(step_linear(r, st, err)); break;
        case CU_STEP_ROPE_KV: CERA_TRY(step_rope(r, st, err)); break;
        case CU_STEP_ATTEND: CERA_TRY(step_attend(r, st, err)); break;
        case CU_STEP_ADD:
            PROF(r, 2,
                 CU_TRY(cu_add_scaled(s->st, rows_at(r, st->dst), st->dst.stride, rows_at(r, st->src),
                                      st->src.stride, NULL, r->n, st->dst.k, st->scale)));
            break;
        case CU_STEP_GLU: {
            const cu_act h = act_at(r, st->dst);
            PROF(r, 2,
                 CU_TRY(cu_glu(s->st, rows_at(r, st->src), rows_at(r, st->src2), st->src.stride, NULL, NULL,
                               r->n, st->gelu, &h)));
            if (r->mode != RUN_PREFILL || r->mma) CU_TRY(cu_quantize_act(s->st, &h, r->n));
            break;
        }
        case CU_STEP_CONV: CERA_TRY(step_conv(r, st, err)); break;
        case CU_STEP_OUTPUT: CERA_TRY(step_output(r, st, err)); break;
        case CU_STEP_MOE: CERA_TRY(step_moe(r, st, err)); break;
        }
    }
    return CERA_OK;
}

/* The launches of a decode step: one token (with its LoRA launches) or n tokens of n
 * sequences; logits into s->logits [n, n_vocab]. */
static cera_status step_launches(cera_cuda_state *s, int n, cera_error *err) {
    run r;
    memset(&r, 0, sizeof r);
    r.s = s;
    r.n = n;
    r.mode = n == 1 ? RUN_ONE : RUN_ROWS;
    r.fork = n == 1 && s->lora_fork && capturing(s);
    return run_plan(&r, err);
}

/* Whether a batch takes the several-sequence decode step: no adapter, few enough rows (the
 * plan's rows_max, plan.c) that the several-row kernels beat dequantizing every weight for
 * cuBLAS, and n tokens of n sequences, or (below MMA_MIN_ROWS rows) several tokens of a
 * sequence whose rows all want their logits (speculative decoding's drafts: each row at its
 * own position, attending to its sequence's keys up to it, written by the step's own rope)
 * where no recurrent state runs through the tokens: each row then gets the logits its token
 * gets alone, bit for bit (the backend's exact_run_max). A prompt chunk, whose rows but the
 * last want none, and longer all-logits runs keep the prefill path (its numerics). */
static bool use_decode_rows(const cera_cuda_state *s, int n, const int32_t *tok_tbl, int n_out) {
    if (n < 2 || n > s->rows_max || s->lora_mask || s->prm.force_gemm) return false;
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (tok_tbl[i] == tok_tbl[j]) return n_out == n && s->n_conv == 0 && n < MMA_MIN_ROWS;
    return true;
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
        memcpy(s->graph_kv_base[bucket], s->kv_base, sizeof s->kv_base);
    }
    CU_TRY(cudaGraphLaunch(s->graph[bucket], s->st));
    return CERA_OK;
}

/* The several-sequence decode step of n tokens through its bucket's graph. */
static cera_status run_decode_rows(cera_cuda_state *s, int n, cera_error *err) {
    const int bucket = n - 1;
    if (s->graph_ready[bucket] && memcmp(s->graph_kv_base[bucket], s->kv_base, sizeof s->kv_base)) {
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
    if (s->graph_ready[bucket] && (memcmp(s->graph_kv_base[bucket], s->kv_base, sizeof s->kv_base) ||
                                   s->graph_lora_mask[bucket] != s->lora_mask ||
                                   (s->lora_mask && (s->graph_lora_t[bucket] != s->lora.t ||
                                                     s->graph_lora_nent[bucket] != s->lora_n_ent)))) {
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
static cera_status prefill_logits(cera_cuda_state *s, const cu_step *st, const float *x, int n,
                                  const int32_t *out_rows, int n_out, cera_error *err) {
    const cu_store *hs = &s->store[st->dst.st];
    const cu_act h = {hs->f, hs->q, hs->d, hs->s, st->dst.k, st->dst.stride};
    const int64_t xs = st->src.stride;
    if (n_out <= 4 && n_out < n) {
        for (int i = 0; i < n_out; i++) {
            CU_TRY(cu_rmsnorm_act(s->st, x + (size_t)out_rows[i] * xs, xs, 1, st->w, st->eps, &h));
            cu_mv_seg out = {st->mw, s->logits + (size_t)i * s->n_vocab, st->bias};
            CU_TRY(cu_matvec(s->st, &out, 1, &h, CU_MV_STORE, st->scale, NULL));
        }
    } else {
        CU_TRY(cu_rmsnorm_act(s->st, x, xs, n, st->w, st->eps, &h));
        CERA_TRY(cu_gemm(s, st->mw, &h, n, s->logits, s->n_vocab, err));
        CU_TRY(cu_bias_scale(s->st, s->logits, s->n_vocab, st->bias, n, s->n_vocab, st->scale));
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

/* Embeddings of the listed rows: every row normed into s->logits as [n, n_embd] (room: the
 * backend checks n_embd <= n_vocab), the listed ones gathered to the front. */
static cera_status prefill_embd(cera_cuda_state *s, const cu_step *st, const float *x, int n,
                                const int32_t *out_rows, int n_out, cera_error *err) {
    const int64_t d = s->n_embd;
    const cu_act h = {s->logits, NULL, NULL, NULL, d, d};
    CU_TRY(cu_rmsnorm_act(s->st, x, st->src.stride, n, st->w, st->eps, &h));
    for (int i = 0; i < n_out; i++)
        if (out_rows[i] != i)
            CU_TRY(cudaMemcpyAsync(s->logits + (size_t)i * d, s->logits + (size_t)out_rows[i] * d,
                                   sizeof(float) * (size_t)d, cudaMemcpyDeviceToDevice, s->st));
    return CERA_OK;
}

/* A prompt chunk (or a batch the several-sequence step does not take) through the plan. */
static cera_status prefill(cera_cuda_state *s, int n, bool one_seq, const int32_t *out_rows, int n_out,
                           cera_error *err) {
    const cera_hparams *hp = &s->hp;
    run r;
    memset(&r, 0, sizeof r);
    r.s = s;
    r.n = n;
    r.mode = RUN_PREFILL;
    r.one_seq = one_seq;
    r.out_rows = out_rows;
    r.n_out = n_out;
    r.mma = n <= PREFILL_MMA_MAX && s->mma_any && !s->prm.force_gemm && !s->prm.no_prefill_mma;
    r.pf.on = s->profile;
    if (r.pf.on) {
        cudaEventCreate(&r.pf.a);
        cudaEventCreate(&r.pf.b);
    }
    // query tokens per attention block (they share each staged K/V tile), then enough
    // splits to fill the GPU, within the partials' room (n * splits <= ATT_TOK_SPLITS)
    const int G = hp->n_head / hp->n_head_kv;
    r.qt = one_seq ? (16 / G > 0 ? 16 / G : 1) : 1;
    const int blocks = hp->n_head_kv * ((n + r.qt - 1) / r.qt);
    r.splits = 1;
    if (blocks < 2 * s->n_sm) {
        r.splits = (2 * s->n_sm + blocks - 1) / blocks;
        if (r.splits > s->att.max_splits) r.splits = s->att.max_splits;
        if (r.splits * n > ATT_TOK_SPLITS) r.splits = ATT_TOK_SPLITS / n;
        if (r.splits < 1) r.splits = 1;
    }
    const cera_status st = run_plan(&r, err);
    if (r.pf.on) {
        fprintf(stderr, "cuda prefill %d tokens: gemm %.2f ms, attention %.2f ms, other %.2f ms (sum %.2f)\n",
                n, r.pf.ms[0], r.pf.ms[1], r.pf.ms[2], r.pf.ms[3]);
        cudaEventDestroy(r.pf.a);
        cudaEventDestroy(r.pf.b);
    }
    return st;
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
                       const int32_t *tok_tbl, const int32_t *tables, int n_tables, void *const *kv_base,
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
    const bool swa = s->kv_block[CERA_KV_SWA] > 0;
    if (swa) memcpy(h_tab + s->tables_cap, tables + n_tables, sizeof(int32_t) * (size_t)n_tables);
    CU_TRY(cudaMemcpyAsync(s->d_tok, h_tok, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_pos, h_pos, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_tok_tbl, h_tt, sizeof(int32_t) * (size_t)n, cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync(s->d_tables, h_tab, sizeof(int32_t) * (size_t)n_tables, cudaMemcpyHostToDevice,
                           s->st));
    if (swa)
        CU_TRY(cudaMemcpyAsync(s->d_tables + s->tables_cap, h_tab + s->tables_cap,
                               sizeof(int32_t) * (size_t)n_tables, cudaMemcpyHostToDevice, s->st));
    for (int g = 0; g < CERA_KV_GROUPS; g++) s->kv_base[g] = kv_base[g];
    if (s->n_conv) CERA_TRY(stage_conv(s, pos, n, tok_tbl, tok_slot, err));
    CERA_TRY(cu_lora_prepare(s, lora, n, err));
    if (n == 1 && !s->embd) {
        CERA_TRY(run_decode(s, pos[0], err));
    } else if (!s->embd && use_decode_rows(s, n, tok_tbl, n_out)) {
        CERA_TRY(run_decode_rows(s, n, err));
        CERA_TRY(compact_logits(s, out_rows, n_out, err));
    } else {
        bool one_seq = true;
        for (int i = 1; i < n; i++) one_seq = one_seq && tok_tbl[i] == tok_tbl[0];
        CERA_TRY(prefill(s, n, one_seq, out_rows, n_out, err));
    }
    if (argmax && n_out > 0 && !s->embd)
        CU_TRY(cudaMemcpyAsync(h_am, s->d_argmax, sizeof(int32_t), cudaMemcpyDeviceToHost, s->st));
    if (logits && n_out > 0)
        CU_TRY(cudaMemcpyAsync(logits, s->logits,
                               sizeof(float) * (size_t)n_out * (s->embd ? s->n_embd : s->n_vocab),
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
    // the standalone sequence: block b of the sequence is block b of each group's own storage
    const int n_tables = max_pos / CU_KV_BLOCK + 1;
    int32_t *ids = s->h_io + 3 * s->prm.n_batch + 1 + CERA_KV_GROUPS * s->tables_cap; // after the staging
    int32_t *rows = ids + CERA_KV_GROUPS * s->own_blocks;
    for (int b = 0; b < n_tables; b++) ids[b] = ids[n_tables + b] = b;
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
