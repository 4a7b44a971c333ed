/*
 * model.c — reads a GGUF file into the backend-neutral model of model.h: the
 * hyperparameters every architecture shares from `<arch>.*` metadata (with llama.cpp's
 * defaults), the common tensors, then the architecture's own metadata, tensors and
 * forward pass through its file in model/arch/ (loader.h). Every tensor's type and shape
 * is checked here so that backends can trust them.
 */
#include "model/model.h"
#include "model/loader.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static const cera_arch_def *const arch_table[CERA_ARCH_COUNT] = {
    [CERA_ARCH_LLAMA] = &cera_arch_llama, [CERA_ARCH_QWEN2] = &cera_arch_qwen2,
    [CERA_ARCH_QWEN3] = &cera_arch_qwen3, [CERA_ARCH_GRANITE] = &cera_arch_granite,
    [CERA_ARCH_LFM2] = &cera_arch_lfm2,   [CERA_ARCH_GEMMA3] = &cera_arch_gemma3,
    [CERA_ARCH_PHI3] = &cera_arch_phi3,   [CERA_ARCH_LFM2MOE] = &cera_arch_lfm2moe,
};

static const char *const proj_names[CERA_PROJ_COUNT] = {
    [CERA_PROJ_Q] = "attn_q",
    [CERA_PROJ_K] = "attn_k",
    [CERA_PROJ_V] = "attn_v",
    [CERA_PROJ_O] = "attn_output",
    [CERA_PROJ_GATE] = "ffn_gate",
    [CERA_PROJ_UP] = "ffn_up",
    [CERA_PROJ_DOWN] = "ffn_down",
    [CERA_PROJ_CONV_IN] = "shortconv.in_proj",
    [CERA_PROJ_CONV_OUT] = "shortconv.out_proj",
};

const char *cera_proj_name(cera_proj p) { return (unsigned)p < CERA_PROJ_COUNT ? proj_names[p] : "?"; }

const char *cera_arch_name(cera_arch a) { return (unsigned)a < CERA_ARCH_COUNT ? arch_table[a]->name : "?"; }

/* ---- metadata -------------------------------------------------------------- */

typedef cera_loader loader;

static const char *akey(const loader *ld, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", ld->arch, suffix);
    return buf;
}

/* An integer hyperparameter; per-layer arrays are accepted when every entry is equal. */
cera_status cera_load_int(const loader *ld, const char *suffix, bool required, int def, int *out) {
    char key[160];
    akey(ld, suffix, key, sizeof key);
    const gguf_kv *kv = gguf_find_kv(ld->f, key);
    if (!kv) {
        if (required) return cera_fail(ld->err, CERA_ERR_NOT_FOUND, "missing key '%s'", key);
        *out = def;
        return CERA_OK;
    }
    if (kv->value.type == GGUF_TYPE_ARRAY) {
        const gguf_array *a = &kv->value.v.arr;
        if (a->n == 0 || a->type == GGUF_TYPE_STRING || a->type == GGUF_TYPE_ARRAY)
            return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': expected an integer or integer array", key);
        int64_t v0 = gguf_arr_i64(a, 0);
        for (uint64_t i = 1; i < a->n; i++)
            if (gguf_arr_i64(a, i) != v0)
                return cera_fail(ld->err, CERA_ERR_UNSUPPORTED,
                                 "key '%s': per-layer values differ (not supported)", key);
        if (v0 < 0 || v0 > INT32_MAX)
            return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s' out of range", key);
        *out = (int)v0;
        return CERA_OK;
    }
    int32_t v;
    if (!gguf_get_i32(ld->f, key, &v) || v < 0)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': expected a non-negative integer", key);
    *out = v;
    return CERA_OK;
}

cera_status cera_load_float(const loader *ld, const char *suffix, float def, float *out) {
    char key[160];
    akey(ld, suffix, key, sizeof key);
    if (!gguf_find_kv(ld->f, key)) {
        *out = def;
        return CERA_OK;
    }
    if (!gguf_get_f32(ld->f, key, out) || !isfinite(*out))
        return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': expected a finite float", key);
    return CERA_OK;
}

/* ---- tensors --------------------------------------------------------------- */

/* Binds tensor `name` with the expected shape (ne1 = 0 for a vector). Matrices may be any
 * type the trait table knows; vectors (norms, biases) must be F32, as llama.cpp writes them. */
cera_status cera_load_tensor(const loader *ld, const char *name, int64_t ne0, int64_t ne1, bool required,
                             cera_weight *w) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(ld->f, name);
    if (!t) {
        if (required) return cera_fail(ld->err, CERA_ERR_NOT_FOUND, "missing tensor '%s'", name);
        return CERA_OK;
    }
    const int64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1)
        return cera_fail(ld->err, CERA_ERR_FORMAT,
                         "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                         (long long)ne0, (long long)want1);
    if (!ne1 && t->type != CERA_TYPE_F32)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "tensor '%s': vector of type %s (only f32 supported)",
                         name, cera_type_get(t->type) ? cera_type_get(t->type)->name : "?");
    if (!cera_type_get(t->type))
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "tensor '%s': unsupported type %u", name,
                         (unsigned)t->type);
    /* gguf_open_memory takes any buffer: kernels load F32 as floats and the rest in 16-bit units */
    const uintptr_t align = t->type == CERA_TYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % align)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "tensor '%s': data not aligned to %u bytes", name,
                         (unsigned)align);
    if (ld->used) ld->used[t - ld->f->tensors] = true;
    w->t = t;
    w->type = t->type;
    w->k = t->ne[0];
    w->n = want1;
    w->data = t->data;
    return CERA_OK;
}

cera_status cera_load_layer_tensor(const loader *ld, int il, const char *suffix, int64_t ne0, int64_t ne1,
                                   bool required, cera_weight *w) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    const cera_status st = cera_load_tensor(ld, name, ne0, ne1, required, w);
    if (st != CERA_ERR_NOT_FOUND) return st;
    /* a whole block missing: block_count claims more blocks than the file has */
    char prefix[32];
    const int np = snprintf(prefix, sizeof prefix, "blk.%d.", il);
    for (uint64_t i = 0; i < ld->f->n_tensors; i++) {
        const gguf_str tn = ld->f->tensors[i].name;
        if (tn.len > (uint64_t)np && !memcmp(tn.data, prefix, (size_t)np)) return st; /* only this one */
    }
    return cera_fail(ld->err, st, "missing tensor '%s': %s.block_count is %d, but the file has no block %d",
                     name, ld->arch, ld->m->hp.n_layer, il);
}

cera_status cera_load_layer_experts(const loader *ld, int il, const char *suffix, int64_t ne0, int64_t ne1,
                                    int n_ex, cera_weight *out) {
    char name[128];
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    const gguf_tensor *t = gguf_find_tensor(ld->f, name);
    if (!t) return cera_fail(ld->err, CERA_ERR_NOT_FOUND, "missing tensor '%s'", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != n_ex || t->ne[3] != 1)
        return cera_fail(ld->err, CERA_ERR_FORMAT,
                         "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %d]", name,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                         (long long)ne0, (long long)ne1, n_ex);
    if (!cera_type_get(t->type))
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "tensor '%s': unsupported type %u", name,
                         (unsigned)t->type);
    if ((uintptr_t)t->data % (t->type == CERA_TYPE_F32 ? 4 : 2))
        return cera_fail(ld->err, CERA_ERR_FORMAT, "tensor '%s': data not aligned", name);
    if (ld->used) ld->used[t - ld->f->tensors] = true;
    const size_t mat = cera_row_size(t->type, ne0) * (size_t)ne1;
    for (int e = 0; e < n_ex; e++)
        out[e] = (cera_weight){.t = t,
                               .type = t->type,
                               .k = ne0,
                               .n = ne1,
                               .data = (const uint8_t *)t->data + (size_t)e * mat,
                               .row0 = (int64_t)e * ne1};
    return CERA_OK;
}

#define TRY(expr)                                                                                            \
    do {                                                                                                     \
        cera_status st_ = (expr);                                                                            \
        if (st_ != CERA_OK) return st_;                                                                      \
    } while (0)

/* attention.head_count_kv, a number or one per layer: each layer's count (0 for a conv
 * layer where the architecture has them; each must divide head_count), and the largest. */
static cera_status read_head_count_kv(const loader *ld, const cera_arch_def *ai, cera_model *m) {
    cera_hparams *hp = &m->hp;
    char key[160];
    akey(ld, "attention.head_count_kv", key, sizeof key);
    const gguf_kv *kv = gguf_find_kv(ld->f, key);
    hp->n_head_kv = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        int64_t v = hp->n_head;
        if (kv && kv->value.type == GGUF_TYPE_ARRAY) {
            const gguf_array *a = &kv->value.v.arr;
            if (a->n != (uint64_t)hp->n_layer || a->type == GGUF_TYPE_STRING || a->type == GGUF_TYPE_ARRAY)
                return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': expected %d integers (one per block)",
                                 key, hp->n_layer);
            v = gguf_arr_i64(a, (uint64_t)il);
        } else if (kv) {
            int32_t x;
            if (!gguf_get_i32(ld->f, key, &x))
                return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': expected an integer", key);
            v = x;
        }
        if (v < 0 || v > hp->n_head || (v == 0 && !ai->conv_layers))
            return cera_fail(ld->err, CERA_ERR_FORMAT, "key '%s': %lld KV heads for block %d (1..%d)", key,
                             (long long)v, il, hp->n_head);
        if (v && hp->n_head % v)
            return cera_fail(ld->err, CERA_ERR_FORMAT,
                             "%s: head_count %d is not a multiple of head_count_kv %lld (block %d)", ld->arch,
                             hp->n_head, (long long)v, il);
        if (v > hp->n_head_kv) hp->n_head_kv = (int)v;
        cera_layer *L = &m->layers[il];
        L->n_head_kv = (int)v;
        L->kv_index = v ? hp->n_kv_layer++ : -1;
        L->conv_index = v ? -1 : hp->n_conv_layer++;
    }
    if (hp->n_kv_layer == 0)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "%s: no attention layer (key '%s')", ld->arch, key);
    return CERA_OK;
}

static cera_status read_hparams(const loader *ld, const cera_arch_def *ai, cera_model *m) {
    cera_hparams *hp = &m->hp;
    TRY(cera_load_int(ld, "context_length", true, 0, &hp->n_ctx_train));
    TRY(cera_load_int(ld, "pooling_type", false, 0, &hp->pooling));
    TRY(cera_load_int(ld, "embedding_length", true, 0, &hp->n_embd));
    TRY(cera_load_int(ld, "block_count", true, 0, &hp->n_layer));
    TRY(cera_load_int(ld, "feed_forward_length", true, 0, &hp->n_ff));
    TRY(cera_load_int(ld, "attention.head_count", true, 0, &hp->n_head));
    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "%s: zero-sized hyperparameter", ld->arch);
    /* generous bounds that keep every size product far from overflow */
    if ((uint64_t)hp->n_layer > ld->f->n_tensors)
        return cera_fail(ld->err, CERA_ERR_FORMAT, "%s.block_count is %d, but the file has only %llu tensors",
                         ld->arch, hp->n_layer, (unsigned long long)ld->f->n_tensors);
    if (hp->n_embd > (1 << 20) || hp->n_ff > (1 << 22) || hp->n_head > 4096 || hp->n_layer > 4096)
        return cera_fail(
            ld->err, CERA_ERR_FORMAT,
            "%s: implausible hyperparameters (embedding %d, feed-forward %d, heads %d, blocks %d)", ld->arch,
            hp->n_embd, hp->n_ff, hp->n_head, hp->n_layer);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return cera_fail(ld->err, CERA_ERR_NO_MEMORY, "model layers");
    TRY(read_head_count_kv(ld, ai, m));
    int head_k, head_v;
    TRY(cera_load_int(ld, "attention.key_length", false, hp->n_embd / hp->n_head, &head_k));
    TRY(cera_load_int(ld, "attention.value_length", false, hp->n_embd / hp->n_head, &head_v));
    if (head_k != head_v || head_k <= 0 || head_k % 2 || head_k > 4096)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "%s: key length %d / value length %d not supported",
                         ld->arch, head_k, head_v);
    hp->head_dim = head_k;
    TRY(cera_load_int(ld, "rope.dimension_count", false, hp->head_dim, &hp->n_rot));
    if (hp->n_rot != hp->head_dim)
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED,
                         "%s: rope.dimension_count %d differs from head size %d", ld->arch, hp->n_rot,
                         hp->head_dim);

    TRY(cera_load_float(ld, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->rms_eps));
    if (hp->rms_eps < 0)
        return cera_fail(ld->err, CERA_ERR_FORMAT,
                         "key '%s.attention.layer_norm_rms_epsilon' is negative (%g)", ld->arch,
                         (double)hp->rms_eps);
    TRY(cera_load_float(ld, "rope.freq_base", 10000.0f, &hp->rope_base));
    if (hp->rope_base <= 0) return cera_fail(ld->err, CERA_ERR_FORMAT, "%s: rope.freq_base <= 0", ld->arch);

    /* Rope scaling, as llama.cpp resolves it: the scaling type ("linear" unless said
     * otherwise), the factor (new key, then the old `rope.scale_linear`), and YaRN's
     * extrapolation mix and magnitude correction. */
    char key[160];
    gguf_str type_s = {0, NULL};
    char type[32] = "linear";
    if (gguf_get_str(ld->f, akey(ld, "rope.scaling.type", key, sizeof key), &type_s))
        gguf_str_copy(type_s, type, sizeof type);
    float factor;
    TRY(cera_load_float(ld, "rope.scaling.factor", 0.0f, &factor));
    if (factor == 0.0f) TRY(cera_load_float(ld, "rope.scale_linear", 0.0f, &factor));
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    if (factor < 0 || !isfinite(hp->rope_freq_scale))
        return cera_fail(ld->err, CERA_ERR_FORMAT,
                         "%s: rope scaling factor (rope.scaling.factor) %g is not usable", ld->arch,
                         (double)factor);
    hp->rope_ext_factor = 0.0f;
    TRY(cera_load_float(ld, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor));
    hp->rope_beta_fast = 32.0f;
    hp->rope_beta_slow = 1.0f;
    TRY(cera_load_int(ld, "rope.scaling.original_context_length", false, hp->n_ctx_train,
                      &hp->rope_n_ctx_orig));
    if (!strcmp(type, "none")) {
        hp->rope_freq_scale = 1.0f;
    } else if (!strcmp(type, "yarn")) {
        hp->rope_ext_factor = 1.0f;
        const float f = 1.0f / hp->rope_freq_scale;
        float yarn_log_mul;
        TRY(cera_load_float(ld, "rope.scaling.yarn_log_multiplier", 0.0f, &yarn_log_mul));
        float mscale = f <= 1.0f ? 1.0f : fmaf(0.1f, logf(f), 1.0f);
        if (yarn_log_mul != 0.0f)
            mscale = mscale / (f <= 1.0f ? 1.0f : fmaf(0.1f * yarn_log_mul, logf(f), 1.0f));
        /* the rope kernel multiplies by 1 + 0.1 ln(f) again when ext_factor != 0; the
         * fused multiply-adds round as llama.cpp's (contracted) code does */
        hp->rope_attn_factor *= mscale * (1.0f / fmaf(0.1f, logf(f), 1.0f));
    } else if (strcmp(type, "linear") != 0) {
        return cera_fail(ld->err, CERA_ERR_UNSUPPORTED, "%s: rope scaling type '%s' not supported", ld->arch,
                         type);
    }
    if (!isfinite(hp->rope_attn_factor))
        return cera_fail(ld->err, CERA_ERR_FORMAT, "%s: rope attention factor (rope.scaling.*) is not finite",
                         ld->arch);
    hp->rope_style = ai->rope_style;
    hp->use_rope = true;

    hp->embd_scale = 1.0f;
    hp->residual_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->logit_scale = 1.0f;
    return ai->hparams ? ai->hparams(ld, hp) : CERA_OK;
}

/* Divisors of the rotation angles (F32, checked aligned by bind) must be finite and positive. */
static cera_status check_rope_factors(const cera_weight *w, const char *name, int n_rot, cera_error *err) {
    const float *rf = w->data;
    for (int i = 0; rf && i < n_rot / 2; i++)
        if (!isfinite(rf[i]) || rf[i] <= 0)
            return cera_fail(err, CERA_ERR_FORMAT,
                             "tensor '%s': value %g at %d is not a finite positive number", name,
                             (double)rf[i], i);
    return CERA_OK;
}

cera_status cera_load_rope_factors(const cera_loader *ld, const char *name, cera_weight *w) {
    const int n_rot = ld->m->hp.n_rot;
    const cera_status st = cera_load_tensor(ld, name, n_rot / 2, 0, false, w);
    return st ? st : check_rope_factors(w, name, n_rot, ld->err);
}

const float *cera_model_rope_factors(const cera_model *m, int n_ctx) {
    if (m->rope_freqs.data) return m->rope_freqs.data;
    const cera_weight *w = n_ctx > m->hp.rope_n_ctx_orig ? &m->rope_long : &m->rope_short;
    return w->data;
}

void cera_weight_rows(const cera_weight *w, int64_t first, int64_t n, cera_weight *out) {
    CERA_ASSERT(first >= 0 && n > 0 && first + n <= w->n);
    *out = *w;
    out->data = (const uint8_t *)w->data + (size_t)first * cera_row_size(w->type, w->k);
    out->n = n;
    out->row0 = w->row0 + first;
}

cera_status cera_model_load(const gguf_file *f, cera_model *m, cera_error *err) {
    memset(m, 0, sizeof *m);
    gguf_str arch_s;
    if (!gguf_get_str(f, "general.architecture", &arch_s))
        return cera_fail(err, CERA_ERR_NOT_FOUND, "missing key 'general.architecture'");
    if (memchr(arch_s.data, 0, (size_t)arch_s.len))
        return cera_fail(err, CERA_ERR_FORMAT, "key 'general.architecture' holds a NUL byte");
    if (f->n_tensors == 0)
        return cera_fail(err, CERA_ERR_FORMAT,
                         "the file has no tensors (a vocabulary-only file?): a model needs its weights");
    char arch[64];
    gguf_str_copy(arch_s, arch, sizeof arch);
    const cera_arch_def *ai = NULL;
    for (int a = 0; a < CERA_ARCH_COUNT; a++)
        if (!strcmp(arch, arch_table[a]->name)) ai = arch_table[a];
    if (!ai)
        return cera_fail(
            err, CERA_ERR_UNSUPPORTED,
            "unsupported architecture '%s' (supported: llama, qwen2, qwen3, granite, lfm2, lfm2moe, gemma3, "
            "phi3)",
            arch);
    loader ld = {f, ai->name, m, err, calloc((size_t)f->n_tensors, sizeof(bool))};
    if (!ld.used) return cera_fail(err, CERA_ERR_NO_MEMORY, "model: out of memory");
    cera_hparams *hp = &m->hp;
    hp->arch = ai->id;
    m->file = f;
    cera_status st = read_hparams(&ld, ai, m);
    if (st) goto fail;

    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) {
        st = cera_fail(err, CERA_ERR_NOT_FOUND, "missing tensor 'token_embd.weight'");
        goto fail;
    }
    if (te->ne[1] <= 0 || te->ne[1] > INT32_MAX) {
        st = cera_fail(err, CERA_ERR_FORMAT, "tensor 'token_embd.weight': bad vocabulary size");
        goto fail;
    }
    hp->n_vocab = (int)te->ne[1];
    const int64_t n_embd = hp->n_embd, n_vocab = hp->n_vocab;
    if ((st = cera_load_tensor(&ld, "token_embd.weight", n_embd, n_vocab, true, &m->tok_embd))) goto fail;
    const cera_type_traits *tt = cera_type_get(m->tok_embd.type);
    if (m->tok_embd.type != CERA_TYPE_F32 && !tt->to_float) {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED, "tensor 'token_embd.weight': type %s cannot be dequantized",
                       tt->name);
        goto fail;
    }
    const char *norm_name = ai->output_norm ? ai->output_norm : "output_norm.weight";
    if ((st = cera_load_tensor(&ld, norm_name, n_embd, 0, true, &m->output_norm)) ||
        (st = cera_load_tensor(&ld, "output.weight", n_embd, n_vocab, false, &m->output)))
        goto fail;
    hp->tied_output = m->output.t == NULL;
    if (hp->tied_output) m->output = m->tok_embd;
    if ((st = cera_load_tensor(&ld, "output.bias", n_vocab, 0, false, &m->output_b)) ||
        (st = cera_load_tensor(&ld, "rope_freqs.weight", hp->n_rot / 2, 0, false, &m->rope_freqs)))
        goto fail;
    if ((st = check_rope_factors(&m->rope_freqs, "rope_freqs.weight", hp->n_rot, err))) goto fail;
    for (int il = 0; il < hp->n_layer; il++)
        if ((st = ai->layer(&ld, il, &m->layers[il]))) goto fail;
    /* no tensor may be left over: a block beyond block_count, a name no architecture uses */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (ld.used[i]) continue;
        char name[128];
        gguf_str_copy(f->tensors[i].name, name, sizeof name);
        int blk;
        if (sscanf(name, "blk.%d.", &blk) == 1 && blk >= hp->n_layer)
            st = cera_fail(err, CERA_ERR_FORMAT,
                           "tensor '%s' is in block %d, but %s.block_count is %d: the hyperparameters "
                           "disagree with the tensors",
                           name, blk, ld.arch, hp->n_layer);
        else
            st = cera_fail(err, CERA_ERR_FORMAT, "tensor '%s' is not one that %s models use", name, ld.arch);
        goto fail;
    }
    m->graph = calloc(1, sizeof *m->graph);
    if (!m->graph) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "model graph");
        goto fail;
    }
    if ((st = ai->build(m, m->graph, err))) goto fail;
    free(ld.used);
    return CERA_OK;
fail:
    free(ld.used);
    cera_model_free(m);
    return st;
}

void cera_model_free(cera_model *m) {
    if (!m) return;
    for (int il = 0; m->layers && il < m->hp.n_layer; il++) free(m->layers[il].moe.gate); /* one block */
    free(m->layers);
    m->layers = NULL;
    cera_graph_free(m->graph);
    m->graph = NULL;
}
