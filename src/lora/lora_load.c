/*
 * lora_load.c — loading LoRA adapters: what every format shares (the adapter block,
 * shape validation against the base model, reference counts, the q/k row permutation),
 * the path dispatcher, and llama.cpp's GGUF adapter format.
 *
 * A GGUF adapter (llama.cpp's convert_lora_to_gguf.py) carries general.type = adapter,
 * adapter.type = lora, adapter.lora.alpha and, per targeted projection, the tensors
 * blk.N.<name>.weight.lora_a (ne0 = k, ne1 = rank) and .lora_b (ne0 = rank, ne1 = d),
 * where blk.N.<name>.weight is the base tensor. An adapter of a fused tensor (phi3's
 * attn_qkv and ffn_up, as llama.cpp names them) is split at load into one pair per
 * projection bound to a row range of it: the same A, and B's rows of that range. Factors may be F32, F16,
 * BF16 or Q8_0; they are converted to F32 at load. *_norm.weight tensors are skipped, as llama.cpp does;
 * anything else is an error naming the tensor.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fileio.h"
#include "core/fp16.h"
#include "lora/lora.h"
#include "lora/safetensors.h"

static const char *const proj_gguf[CERA_PROJ_COUNT] = {
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
    "shortconv.in_proj",
    "shortconv.out_proj",
};
static const char *const proj_hf[CERA_PROJ_COUNT] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj", "out_proj",
};

const char *cera_lora_proj_gguf_name(cera_proj p) {
    return (unsigned)p < CERA_PROJ_COUNT ? proj_gguf[p] : "?";
}
/* LFM2's modules (transformers' modeling_lfm2): the attention output is out_proj, the FFN
 * w1 (gate), w3 (up) and w2 (down) under feed_forward. */
static const char *const proj_hf_lfm2[CERA_PROJ_COUNT] = {
    "q_proj", "k_proj", "v_proj", "out_proj", "w1", "w3", "w2", "in_proj", "out_proj",
};

const char *cera_lora_proj_hf_name(cera_arch a, cera_proj p) {
    if ((unsigned)p >= CERA_PROJ_COUNT) return "?";
    return a == CERA_ARCH_LFM2 || a == CERA_ARCH_LFM2MOE ? proj_hf_lfm2[p] : proj_hf[p];
}

const char *cera_lora_proj_hf_parent(cera_arch a, cera_proj p) {
    if (p <= CERA_PROJ_O) return "self_attn.";
    if (p <= CERA_PROJ_DOWN) return a == CERA_ARCH_LFM2 || a == CERA_ARCH_LFM2MOE ? "feed_forward." : "mlp.";
    return "conv.";
}

/* ---- The adapter block ------------------------------------------------------------- */

static atomic_uint_fast64_t next_id = 1;

cera_status cera_lora_alloc(const cera_model *m, size_t n_floats, const char *source, cera_adapter **out,
                            cera_error *err) {
    *out = NULL;
    if (m->hp.n_layer <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: the base model has no layers", source);
    cera_adapter *a = calloc(1, sizeof *a);
    if (!a) return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", source);
    a->pairs = calloc((size_t)m->hp.n_layer * CERA_PROJ_COUNT, sizeof *a->pairs);
    a->data = malloc((n_floats ? n_floats : 1) * sizeof(float));
    if (!a->pairs || !a->data) {
        free(a->pairs);
        free(a->data);
        free(a);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory for %zu factor values", source,
                         n_floats);
    }
    a->id = atomic_fetch_add(&next_id, 1);
    snprintf(a->source, sizeof a->source, "%s", source);
    a->n_layer = m->hp.n_layer;
    a->model = m;
    a->n_floats = n_floats;
    atomic_init(&a->refs, 1);
    *out = a;
    return CERA_OK;
}

cera_status cera_lora_add_pair(cera_adapter *a, const cera_model *m, int layer, cera_proj p, int rank,
                               int64_t k, int64_t d, float **a_out, float **b_out, const char *what,
                               cera_error *err) {
    if (layer < 0 || layer >= m->hp.n_layer)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: '%s' targets layer %d but the model has %d layers",
                         a->source, what, layer, m->hp.n_layer);
    const cera_weight *w = &m->layers[layer].proj[p];
    if (!w->t && !w->data)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "%s: '%s' targets blk.%d.%s.weight, which the model lacks", a->source, what, layer,
                         proj_gguf[p]);
    if (rank <= 0 || rank > CERA_LORA_MAX_RANK)
        return cera_fail(err, rank > 0 ? CERA_ERR_UNSUPPORTED : CERA_ERR_FORMAT,
                         "%s: '%s' has rank %d (1..%d supported)", a->source, what, rank, CERA_LORA_MAX_RANK);
    if (k != w->k || d != w->n)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "%s: '%s' maps %lld -> %lld values but blk.%d.%s.weight maps %lld -> %lld "
                         "(an adapter for another model?)",
                         a->source, what, (long long)k, (long long)d, layer, proj_gguf[p], (long long)w->k,
                         (long long)w->n);
    cera_lora_pair *q = &a->pairs[(size_t)layer * CERA_PROJ_COUNT + p];
    if (q->rank) return cera_fail(err, CERA_ERR_FORMAT, "%s: '%s' appears twice", a->source, what);
    const size_t need = (size_t)rank * (size_t)(k + d);
    if (need > a->n_floats - a->used)
        return cera_fail(err, CERA_ERR_INTERNAL, "%s: factor block too small at '%s'", a->source, what);
    float *pa = a->data + a->used;
    float *pb = pa + (size_t)rank * (size_t)k;
    a->used += need;
    q->rank = rank;
    q->k = k;
    q->d = d;
    q->a = pa;
    q->b = pb;
    a->n_pairs++;
    if (rank > a->max_rank) a->max_rank = rank;
    *a_out = pa;
    *b_out = pb;
    return CERA_OK;
}

void cera_lora_retain(cera_adapter *a) {
    if (a) atomic_fetch_add(&a->refs, 1);
}

void cera_lora_release(cera_adapter *a) {
    if (!a || atomic_fetch_sub(&a->refs, 1) != 1) return;
    if (a->on_free) a->on_free(a->on_free_ctx, a);
    free(a->pairs);
    free(a->moe);
    free(a->data);
    free(a);
}

void cera_lora_permute_rows(float *m, int64_t rows, int64_t cols, int n_head, float *tmp) {
    const int64_t per_head = rows / n_head, half = per_head / 2;
    memcpy(tmp, m, (size_t)(rows * cols) * sizeof *m);
    for (int h = 0; h < n_head; h++)
        for (int64_t j = 0; j < half; j++)
            for (int s = 0; s < 2; s++) {
                const int64_t dst = h * per_head + 2 * j + s, src = h * per_head + s * half + j;
                memcpy(m + dst * cols, tmp + src * cols, (size_t)cols * sizeof *m);
            }
}

/* ---- GGUF adapters ----------------------------------------------------------------- */

/* The architecture name of the base model's file ("llama", ...), or NULL. */
static bool model_arch(const cera_model *m, gguf_str *out) {
    return m->file && gguf_get_str(m->file, "general.architecture", out);
}

static bool str_ends(const char *s, size_t n, const char *suffix) {
    const size_t l = strlen(suffix);
    return n >= l && !memcmp(s + n - l, suffix, l);
}

/* Parses "blk.N.<proj>.weight" (base name without .lora_a/.lora_b). */
static bool parse_gguf_target(const char *name, int *layer, cera_proj *p) {
    if (strncmp(name, "blk.", 4)) return false;
    const char *s = name + 4;
    long n = 0;
    int digits = 0;
    while (*s >= '0' && *s <= '9' && digits < 6) n = n * 10 + (*s++ - '0'), digits++;
    if (!digits || *s++ != '.') return false;
    for (int i = 0; i < CERA_PROJ_COUNT; i++) {
        const size_t l = strlen(proj_gguf[i]);
        if (!strncmp(s, proj_gguf[i], l) && !strcmp(s + l, ".weight")) {
            *layer = (int)n;
            *p = (cera_proj)i;
            return true;
        }
    }
    return false;
}

static const char *const moe_gguf[CERA_LORA_MOE_COUNT] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                                          "ffn_down_exps"};

/* Parses "blk.N.<MoE target>.weight". */
static bool parse_moe_target(const char *name, int *layer, int *t) {
    if (strncmp(name, "blk.", 4)) return false;
    char *end;
    const long n = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || n < 0 || n > 1000000) return false;
    for (int i = 0; i < CERA_LORA_MOE_COUNT; i++) {
        const size_t l = strlen(moe_gguf[i]);
        if (!strncmp(end + 1, moe_gguf[i], l) && !strcmp(end + 1 + l, ".weight")) {
            *layer = (int)n;
            *t = i;
            return true;
        }
    }
    return false;
}

static bool factor_type_ok(cera_type t) {
    return t == CERA_TYPE_F32 || t == CERA_TYPE_F16 || t == CERA_TYPE_BF16 || t == CERA_TYPE_Q8_0;
}

/* Converts a validated F32/F16/BF16/Q8_0 tensor of n elements to F32. */
static void tensor_to_f32(const gguf_tensor *t, float *dst, int64_t n) {
    const uint8_t *src = t->data;
    switch (t->type) {
    case CERA_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case CERA_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            cera_f16 h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = cera_f16_to_f32(h);
        }
        break;
    case CERA_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            cera_bf16 h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = cera_bf16_to_f32(h);
        }
        break;
    case CERA_TYPE_Q8_0: /* blocks of a half scale and 32 signed bytes */
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = src + 34 * b;
            cera_f16 h;
            memcpy(&h, blk, 2);
            const float d = cera_f16_to_f32(h);
            for (int i = 0; i < 32; i++) dst[32 * b + i] = (float)(int8_t)blk[2 + i] * d;
        }
        break;
    default: CERA_ASSERT(!"factor type checked at load");
    }
}

/* The projections of the layer that are row ranges of the fused base tensor `base`
 * ("blk.N.attn_qkv.weight" in phi3), in row order; 0 when base is no fused tensor. */
static int fused_projs(const cera_model *m, const char *base, int *layer, cera_proj ps[CERA_PROJ_COUNT]) {
    if (strncmp(base, "blk.", 4) || base[4] < '0' || base[4] > '9') return 0;
    char *end;
    const long l = strtol(base + 4, &end, 10);
    if (*end != '.' || l < 0 || l >= m->hp.n_layer) return 0;
    int n = 0;
    for (int p = 0; p < CERA_PROJ_COUNT; p++) {
        const cera_weight *w = &m->layers[l].proj[p];
        if (w->t && (w->row0 || w->n != w->t->ne[1]) && gguf_str_eq(w->t->name, base)) ps[n++] = (cera_proj)p;
    }
    *layer = (int)l;
    return n;
}

typedef struct gguf_factor {
    const gguf_tensor *a, *b;
    int layer;
    cera_proj proj;
    int n_fused; /* > 0: the pair of a fused tensor, split over fused[] */
    cera_proj fused[CERA_PROJ_COUNT];
    int moe; /* an MoE target + 1 (cera_lora_moe), or 0 */
} gguf_factor;

/* An MoE target's pair (router: one matrix; experts: one per expert), checked against the
 * layer's experts. */
static cera_status add_moe(cera_adapter *a, const cera_model *m, const gguf_factor *g, const char *name,
                           cera_error *err) {
    const int t = g->moe - 1;
    if (g->layer >= m->hp.n_layer || !m->layers[g->layer].moe.n_expert)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: '%s' targets a block without routed experts",
                         a->source, name);
    const cera_experts *x = &m->layers[g->layer].moe;
    const cera_weight *w = t == CERA_LORA_MOE_ROUTER ? &x->router
                           : t == CERA_LORA_MOE_GATE ? &x->gate[0]
                           : t == CERA_LORA_MOE_UP   ? &x->up[0]
                                                     : &x->down[0];
    const int64_t k = g->a->ne[0], r = g->a->ne[1], d = g->b->ne[1];
    const int64_t n_mat = t == CERA_LORA_MOE_ROUTER ? 1 : x->n_expert;
    if (k != w->k || d != w->n || g->a->ne[2] != n_mat || g->b->ne[2] != n_mat)
        return cera_fail(
            err, CERA_ERR_INVALID_ARG,
            "%s: '%s' has shape [%lld, %lld, %lld] / [%lld, %lld, %lld] but the block's %s maps %lld "
            "-> %lld over %lld matrices (an adapter for another model?)",
            a->source, name, (long long)k, (long long)r, (long long)g->a->ne[2], (long long)r, (long long)d,
            (long long)g->b->ne[2], moe_gguf[t], (long long)w->k, (long long)w->n, (long long)n_mat);
    if (r <= 0 || r > CERA_LORA_MAX_RANK)
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: '%s' has rank %lld (1..%d supported)", a->source,
                         name, (long long)r, CERA_LORA_MAX_RANK);
    if (!a->moe && !(a->moe = calloc((size_t)a->n_layer * CERA_LORA_MOE_COUNT, sizeof *a->moe)))
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", a->source);
    cera_lora_pair *q = &a->moe[(size_t)g->layer * CERA_LORA_MOE_COUNT + t];
    if (q->rank) return cera_fail(err, CERA_ERR_FORMAT, "%s: '%s' appears twice", a->source, name);
    const size_t need = (size_t)(r * (k + d) * n_mat);
    if (need > a->n_floats - a->used)
        return cera_fail(err, CERA_ERR_INTERNAL, "%s: factor block too small at '%s'", a->source, name);
    float *pa = a->data + a->used, *pb = pa + (size_t)(r * k * n_mat);
    a->used += need;
    tensor_to_f32(g->a, pa, r * k * n_mat);
    tensor_to_f32(g->b, pb, r * d * n_mat);
    *q = (cera_lora_pair){.rank = (int)r, .k = k, .d = d, .a = pa, .b = pb};
    a->n_pairs++;
    if (r > a->max_rank) a->max_rank = (int)r;
    return CERA_OK;
}

/* The pairs of a fused tensor's adapter: each part gets A and the rows of B of its range. */
static cera_status add_fused(cera_adapter *a, const cera_model *m, const gguf_factor *g, const char *name,
                             cera_error *err) {
    const int64_t k = g->a->ne[0], r = g->a->ne[1], d = g->b->ne[1];
    float *b_all = malloc((size_t)(r * d) * sizeof *b_all);
    if (!b_all) return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", a->source);
    tensor_to_f32(g->b, b_all, r * d);
    cera_status st = CERA_OK;
    for (int i = 0; i < g->n_fused && !st; i++) {
        const cera_weight *w = &m->layers[g->layer].proj[g->fused[i]];
        float *pa, *pb;
        st = cera_lora_add_pair(a, m, g->layer, g->fused[i], (int)r, k, w->n, &pa, &pb, name, err);
        if (st) break;
        tensor_to_f32(g->a, pa, k * r);
        memcpy(pb, b_all + (size_t)(w->row0 * r), (size_t)(w->n * r) * sizeof *pb);
    }
    free(b_all);
    return st;
}

cera_status cera_lora_load_gguf(const cera_model *m, const gguf_file *f, const char *source,
                                cera_adapter **out, cera_error *err) {
    *out = NULL;
    gguf_str s;
    if (!gguf_get_str(f, "general.type", &s) || !gguf_str_eq(s, "adapter"))
        return cera_fail(err, CERA_ERR_FORMAT, "%s: general.type is not 'adapter' (not an adapter file)",
                         source);
    if (!gguf_get_str(f, "adapter.type", &s) || !gguf_str_eq(s, "lora"))
        return cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: adapter.type is not 'lora'", source);
    gguf_str arch, base_arch;
    if (!gguf_get_str(f, "general.architecture", &arch))
        return cera_fail(err, CERA_ERR_NOT_FOUND, "%s: general.architecture missing", source);
    if (model_arch(m, &base_arch) &&
        (arch.len != base_arch.len || memcmp(arch.data, base_arch.data, (size_t)arch.len))) {
        char a1[64], a2[64];
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "%s: adapter is for architecture '%s' but the model is '%s'", source,
                         gguf_str_copy(arch, a1, sizeof a1), gguf_str_copy(base_arch, a2, sizeof a2));
    }
    /* activated LoRA (applied only after its invocation tokens) would silently become an
     * always-on adapter here: refuse it */
    if (gguf_find_kv(f, "adapter.alora.invocation_tokens"))
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "%s: activated LoRA (adapter.alora.invocation_tokens) is not supported", source);
    float alpha = 0.0f;
    if (gguf_find_kv(f, "adapter.lora.alpha") && !gguf_get_f32(f, "adapter.lora.alpha", &alpha))
        return cera_fail(err, CERA_ERR_FORMAT, "%s: adapter.lora.alpha is not a number", source);
    if (!isfinite(alpha))
        return cera_fail(err, CERA_ERR_FORMAT, "%s: adapter.lora.alpha is not finite", source);

    /* Pass 1: classify every tensor, pair A with B, count the floats. */
    gguf_factor *fac = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *fac);
    if (!fac) return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", source);
    size_t n_fac = 0, n_floats = 0;
    cera_status st = CERA_OK;
    char name[256], base[256];
    for (uint64_t i = 0; i < f->n_tensors && !st; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (t->name.len >= sizeof name) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: tensor name of %llu bytes is too long", source,
                           (unsigned long long)t->name.len);
            break;
        }
        gguf_str_copy(t->name, name, sizeof name);
        const size_t n = strlen(name);
        const bool is_a = str_ends(name, n, ".lora_a"), is_b = str_ends(name, n, ".lora_b");
        if (!is_a && !is_b) {
            if (str_ends(name, n, "_norm.weight")) continue; /* llama.cpp ignores these too */
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: tensor '%s' is neither a lora_a nor a lora_b", source,
                           name);
            break;
        }
        memcpy(base, name, n - 7);
        base[n - 7] = '\0';
        int layer;
        cera_proj p = CERA_PROJ_COUNT, fused[CERA_PROJ_COUNT];
        const int n_fused = fused_projs(m, base, &layer, fused);
        int moe_t = -1;
        if (!n_fused && !parse_gguf_target(base, &layer, &p) && !parse_moe_target(base, &layer, &moe_t)) {
            st = cera_fail(
                err, CERA_ERR_UNSUPPORTED,
                "%s: tensor '%s' targets '%s', which is not one of the projections (or experts) cera adapts",
                source, name, base);
            break;
        }
        if (!factor_type_ok(t->type)) {
            const cera_type_traits *tt = cera_type_get(t->type);
            st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                           "%s: tensor '%s' has type %s (F32, F16, BF16 or Q8_0 expected)", source, name,
                           tt ? tt->name : "?");
            break;
        }
        if (moe_t > CERA_LORA_MOE_ROUTER ? t->n_dims != 3 || t->ne[3] != 1
                                         : t->n_dims != 2 || t->ne[2] != 1 || t->ne[3] != 1) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (%d expected)", source,
                           name, t->n_dims, moe_t > CERA_LORA_MOE_ROUTER ? 3 : 2);
            break;
        }
        /* The twin: looked up by name so the order in the file does not matter. */
        snprintf(name + n - 1, sizeof name - (n - 1), "%c", is_a ? 'b' : 'a');
        const gguf_tensor *twin = gguf_find_tensor(f, name);
        if (!twin) {
            name[n - 1] = is_a ? 'a' : 'b';
            st = cera_fail(err, CERA_ERR_NOT_FOUND, "%s: '%s' has no matching .lora_%c", source, name,
                           is_a ? 'b' : 'a');
            break;
        }
        if (is_b) continue; /* each pair is counted once, from its A */
        fac[n_fac].a = t;
        fac[n_fac].b = twin;
        fac[n_fac].layer = layer;
        fac[n_fac].proj = p;
        fac[n_fac].n_fused = n_fused;
        fac[n_fac].moe = moe_t + 1;
        memcpy(fac[n_fac].fused, fused, sizeof fused);
        n_fac++;
        const int64_t k = t->ne[0], r = t->ne[1], r2 = twin->ne[0], d = twin->ne[1];
        if (r != r2) {
            st = cera_fail(err, CERA_ERR_FORMAT, "%s: '%s' has rank %lld in lora_a but %lld in lora_b",
                           source, base, (long long)r, (long long)r2);
            break;
        }
        /* Bounded by the base shapes, checked in cera_lora_add_pair; this keeps the count sane first. */
        if (r > CERA_LORA_MAX_RANK || k > (1 << 24) || d > (1 << 24) || t->ne[2] > 4096 ||
            twin->ne[2] != t->ne[2]) {
            st = cera_fail(err, CERA_ERR_UNSUPPORTED, "%s: '%s' has shape [%lld x %lld] / [%lld x %lld]",
                           source, base, (long long)k, (long long)r, (long long)r, (long long)d);
            break;
        }
        if (n_fused) {
            const cera_weight *w0 = &m->layers[layer].proj[fused[0]];
            if (d != w0->t->ne[1]) {
                st =
                    cera_fail(err, CERA_ERR_INVALID_ARG,
                              "%s: '%s' has %lld output rows but %s has %lld (an adapter for another model?)",
                              source, base, (long long)d, base, (long long)w0->t->ne[1]);
                break;
            }
            n_floats += (size_t)(r * k) * (size_t)(n_fused - 1); /* A once per part; B's rows are split */
        }
        n_floats += (size_t)(r * (k + d) * t->ne[2]);
    }
    if (!st && !n_fac) st = cera_fail(err, CERA_ERR_NOT_FOUND, "%s: no LoRA tensors", source);
    cera_adapter *a = NULL;
    if (!st) st = cera_lora_alloc(m, n_floats, source, &a, err);
    for (size_t i = 0; i < n_fac && !st; i++) {
        const gguf_factor *g = &fac[i];
        gguf_str_copy(g->a->name, name, sizeof name);
        name[strlen(name) - 7] = '\0';
        float *pa, *pb;
        if (g->moe) {
            st = add_moe(a, m, g, name, err);
            if (st) break;
            continue;
        }
        if (g->n_fused) {
            st = add_fused(a, m, g, name, err);
            if (st) break;
            continue;
        }
        st = cera_lora_add_pair(a, m, g->layer, g->proj, (int)g->a->ne[1], g->a->ne[0], g->b->ne[1], &pa, &pb,
                                name, err);
        if (st) break;
        tensor_to_f32(g->a, pa, g->a->ne[0] * g->a->ne[1]);
        tensor_to_f32(g->b, pb, g->b->ne[0] * g->b->ne[1]);
    }
    free(fac);
    if (st) {
        cera_lora_release(a);
        return st;
    }
    a->alpha = alpha;
    *out = a;
    return CERA_OK;
}

/* ---- Dispatch by path ---------------------------------------------------------------- */

/* Reads a small text file (at most 1 MiB), NUL-terminated. */
static cera_status read_small(const char *path, char **out, size_t *len, cera_error *err) {
    int fd;
    const cera_status ost = cera_open_regular(path, &fd, NULL, err); /* a FIFO must not block */
    if (ost) return ost;
    FILE *fp = fdopen(fd, "rb");
    if (!fp) {
        close(fd);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: cannot open: %s", path, strerror(errno));
    }
    const size_t cap = 1u << 20;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(fp);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    const size_t n = fread(buf, 1, cap + 1, fp);
    const bool bad = ferror(fp);
    fclose(fp);
    if (bad || n > cap) {
        free(buf);
        return cera_fail(err, bad ? CERA_ERR_IO : CERA_ERR_FORMAT, "%s: %s", path,
                         bad ? "read error" : "larger than 1 MiB");
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CERA_OK;
}

static cera_status load_peft_dir(const cera_model *m, const char *dir, cera_adapter **out, cera_error *err) {
    char cfg_path[4096], st_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/adapter_config.json", dir);
    snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", dir);
    char *cfg = NULL;
    size_t cfg_len = 0;
    cera_status st = read_small(cfg_path, &cfg, &cfg_len, err);
    if (st) return st;
    safetensors_file *sf = NULL;
    st = safetensors_open(st_path, &sf, err);
    if (!st) st = cera_lora_load_peft(m, cfg, cfg_len, sf, dir, out, err);
    safetensors_close(sf);
    free(cfg);
    return st;
}

cera_status cera_lora_load(const cera_model *m, const char *path, cera_adapter **out, cera_error *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb)) return cera_fail(err, CERA_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return load_peft_dir(m, path, out, err);
    const size_t n = strlen(path);
    if (str_ends(path, n, "adapter_config.json") || str_ends(path, n, ".safetensors")) {
        /* A file inside a PEFT folder: load the folder. */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        return load_peft_dir(m, dir, out, err);
    }
    gguf_file *f = NULL;
    cera_status st = gguf_open(path, &f, err);
    if (st) return st;
    st = cera_lora_load_gguf(m, f, path, out, err);
    gguf_close(f);
    return st;
}
