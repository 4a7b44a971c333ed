/*
 * test_model_load.c — the model loader on broken and unusual files: the synth-llama-f32
 * golden model rewritten with one thing wrong (a missing key or tensor, a bad head count,
 * a per-layer array that varies, a wrong tensor shape, a vector in the wrong type, an
 * unknown rope scaling, implausible sizes) must fail with the right status and a message
 * naming the key or tensor; and the hyperparameters of the real files read as llama.cpp
 * reads them (tied output, granite multipliers, qwen biases and norms, head sizes).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "testutil.h"

typedef struct edit {
    const char *what;
    const char *drop;        /* a key or tensor name to leave out */
    const char *set_key;     /* a key to set... */
    int set_kind;            /* 0 u32, 1 str, 2 f32, 3 u32 array */
    uint32_t u;              /* ...to this */
    const char *s;           /* ...or this */
    float f;                 /* ...or this */
    const char *bad_tensor;  /* a tensor to replace by one of shape [ne0, ne1] */
    int64_t ne0, ne1;        /* */
    cera_type bad_type;      /* in this type */
    cera_status want;        /* the expected status */
    const char *want_in_msg; /* a substring of the message */
} edit;

static const edit edits[] = {
    {"no context length", "llama.context_length", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_NOT_FOUND,
     "llama.context_length"},
    {"no output norm", "output_norm.weight", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_NOT_FOUND,
     "output_norm.weight"},
    {"no layer tensor", "blk.1.ffn_down.weight", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_NOT_FOUND,
     "blk.1.ffn_down.weight"},
    {"kv heads not dividing", NULL, "llama.attention.head_count_kv", 0, 3, NULL, 0, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "head_count_kv"},
    {"zero heads", NULL, "llama.attention.head_count", 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_FORMAT,
     "llama"},
    {"varying per-layer heads", NULL, "llama.attention.head_count", 3, 0, NULL, 0, NULL, 0, 0, 0,
     CERA_ERR_UNSUPPORTED, "llama.attention.head_count"},
    {"rope dims differ", NULL, "llama.rope.dimension_count", 0, 16, NULL, 0, NULL, 0, 0, 0,
     CERA_ERR_UNSUPPORTED, "rope.dimension_count"},
    {"odd head size", NULL, "llama.attention.key_length", 0, 33, NULL, 0, NULL, 0, 0, 0, CERA_ERR_UNSUPPORTED,
     "key length"},
    {"unknown rope scaling", NULL, "llama.rope.scaling.type", 1, 0, "longrope-x", 0, NULL, 0, 0, 0,
     CERA_ERR_UNSUPPORTED, "longrope-x"},
    {"implausible blocks", NULL, "llama.block_count", 0, 100000, NULL, 0, NULL, 0, 0, 0, CERA_ERR_FORMAT,
     "but the file has only"},
    {"string for a number", NULL, "llama.embedding_length", 1, 0, "256", 0, NULL, 0, 0, 0, CERA_ERR_FORMAT,
     "llama.embedding_length"},
    {"non-finite epsilon", NULL, "llama.attention.layer_norm_rms_epsilon", 2, 0, NULL, NAN, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "layer_norm_rms_epsilon"},
    {"negative epsilon", NULL, "llama.attention.layer_norm_rms_epsilon", 2, 0, NULL, -1e-5f, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "layer_norm_rms_epsilon"},
    {"infinite rope base", NULL, "llama.rope.freq_base", 2, 0, NULL, INFINITY, NULL, 0, 0, 0, CERA_ERR_FORMAT,
     "rope.freq_base"},
    {"NaN rope factor", NULL, "llama.rope.scaling.factor", 2, 0, NULL, NAN, NULL, 0, 0, 0, CERA_ERR_FORMAT,
     "rope.scaling.factor"},
    {"negative rope factor", NULL, "llama.rope.scaling.factor", 2, 0, NULL, -2.0f, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "rope.scaling.factor"},
    {"tiny rope factor", NULL, "llama.rope.scaling.factor", 2, 0, NULL, 1e-45f, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "rope.scaling.factor"},
    {"infinite attn factor", NULL, "llama.rope.scaling.attn_factor", 2, 0, NULL, INFINITY, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "rope.scaling.attn_factor"},
    {"wrong projection shape", NULL, NULL, 0, 0, NULL, 0, "blk.0.attn_q.weight", 256, 224, CERA_TYPE_F32,
     CERA_ERR_FORMAT, "blk.0.attn_q.weight"},
    {"norm in f16", NULL, NULL, 0, 0, NULL, 0, "blk.1.attn_norm.weight", 256, 0, CERA_TYPE_F16,
     CERA_ERR_UNSUPPORTED, "blk.1.attn_norm.weight"},
    {"tied output", "output.weight", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_OK, ""},
    {"unsupported architecture", NULL, "general.architecture", 1, 0, "mamba", 0, NULL, 0, 0, 0,
     CERA_ERR_UNSUPPORTED, "'mamba'"},
};

/* The same on the lfm2moe test model (`cera synth test-lfm2moe`, the synth_models fixture):
 * its routed experts' keys and tensors. */
static const edit moe_edits[] = {
    {"no expert count", "lfm2moe.expert_count", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_NOT_FOUND,
     "lfm2moe.expert_count"},
    {"more experts used than there are", NULL, "lfm2moe.expert_used_count", 0, 9, NULL, 0, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "9 of 8 experts"},
    {"no experts used", NULL, "lfm2moe.expert_used_count", 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_FORMAT,
     "0 of 8 experts"},
    {"unknown gating", NULL, "lfm2moe.expert_gating_func", 0, 3, NULL, 0, NULL, 0, 0, 0, CERA_ERR_UNSUPPORTED,
     "expert_gating_func 3"},
    {"dense blocks past the end", NULL, "lfm2moe.leading_dense_block_count", 0, 9, NULL, 0, NULL, 0, 0, 0,
     CERA_ERR_FORMAT, "leading_dense_block_count"},
    {"no expert tensor", "blk.2.ffn_up_exps.weight", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_NOT_FOUND,
     "blk.2.ffn_up_exps.weight"},
    {"no selection bias", "blk.1.exp_probs_b.bias", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0, CERA_ERR_NOT_FOUND,
     "blk.1.exp_probs_b.bias"},
    {"no dense FFN in a leading block", "blk.0.ffn_gate.weight", NULL, 0, 0, NULL, 0, NULL, 0, 0, 0,
     CERA_ERR_NOT_FOUND, "blk.0.ffn_gate.weight"},
    {"experts in 2-D", NULL, NULL, 0, 0, NULL, 0, "blk.1.ffn_down_exps.weight", 128, 256, CERA_TYPE_F32,
     CERA_ERR_FORMAT, "blk.1.ffn_down_exps.weight"},
    {"router of the wrong width", NULL, NULL, 0, 0, NULL, 0, "blk.3.ffn_gate_inp.weight", 256, 7,
     CERA_TYPE_F32, CERA_ERR_FORMAT, "blk.3.ffn_gate_inp.weight"},
};

static uint8_t zeros[256 * 256 * 4];

static void run_edit(const gguf_file *src, const edit *e) {
    gguf_writer *w = gguf_writer_new();
    cera_error err;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        if (e->drop && gguf_str_eq(src->kv[i].key, e->drop)) continue;
        gguf_writer_set_value(w, src->kv[i].key, &src->kv[i].value);
    }
    if (e->set_key) {
        if (e->set_kind == 0) gguf_writer_set_u32(w, e->set_key, e->u);
        if (e->set_kind == 1) gguf_writer_set_str(w, e->set_key, e->s);
        if (e->set_kind == 2) gguf_writer_set_f32(w, e->set_key, e->f);
        if (e->set_kind == 3) {
            const uint32_t per_layer[2] = {8, 4};
            gguf_writer_set_arr(w, e->set_key, GGUF_TYPE_UINT32, per_layer, 2);
        }
    }
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        char name[128];
        gguf_str_copy(t->name, name, sizeof name);
        if (e->drop && !strcmp(name, e->drop)) continue;
        if (e->bad_tensor && !strcmp(name, e->bad_tensor)) {
            const int64_t ne[2] = {e->ne0, e->ne1};
            gguf_writer_add_tensor(w, name, e->bad_type, e->ne1 ? 2 : 1, ne, zeros, &err);
            continue;
        }
        gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err);
    }
    void *buf = NULL;
    size_t size = 0;
    CHECK(gguf_writer_to_memory(w, &buf, &size, &err) == CERA_OK, "%s: write: %s", e->what, err.message);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    if (buf && gguf_open_memory(buf, size, &f, &err) == CERA_OK) {
        cera_model m;
        const cera_status st = cera_model_load(f, &m, &err);
        CHECK(st == e->want, "%s: status %d (%s), want %d", e->what, (int)st, err.message, (int)e->want);
        CHECK(st == CERA_OK || strstr(err.message, e->want_in_msg), "%s: message '%s' lacks '%s'", e->what,
              err.message, e->want_in_msg);
        if (st == CERA_OK) {
            /* the only accepted edit (of synth-llama): no output.weight means the output reuses token_embd */
            CHECK(m.hp.tied_output && m.output.data == m.tok_embd.data && m.output.type == m.tok_embd.type,
                  "%s: tied output", e->what);
            cera_model_free(&m);
        }
        gguf_close(f);
    } else {
        CHECK(false, "%s: reparse: %s", e->what, err.message);
    }
    free(buf);
}

/* A valid file at an odd address (gguf_open_memory takes any buffer): the loader refuses
 * the misaligned F32 data by name instead of handing kernels unaligned floats. */
static void check_misaligned(const gguf_file *src) {
    gguf_writer *w = gguf_writer_new();
    cera_error err;
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_writer_set_value(w, src->kv[i].key, &src->kv[i].value);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor *t = &src->tensors[i];
        char name[128];
        gguf_str_copy(t->name, name, sizeof name);
        gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err);
    }
    void *buf = NULL;
    size_t size = 0;
    CHECK(gguf_writer_to_memory(w, &buf, &size, &err) == CERA_OK, "misaligned: write: %s", err.message);
    gguf_writer_free(w);
    uint8_t *odd = buf ? malloc(size + 8) : NULL;
    if (odd) {
        for (int shift = 0; shift < 2; shift++) {
            memcpy(odd + shift, buf, size);
            gguf_file *f = NULL;
            cera_model m;
            CHECK(gguf_open_memory(odd + shift, size, &f, &err) == CERA_OK, "misaligned: parse: %s",
                  err.message);
            const cera_status st = f ? cera_model_load(f, &m, &err) : CERA_ERR_INTERNAL;
            if (shift == 0) {
                CHECK(st == CERA_OK, "aligned copy: %s", err.message);
                if (st == CERA_OK) cera_model_free(&m);
            } else {
                CHECK(st == CERA_ERR_FORMAT && strstr(err.message, "not aligned") &&
                          strstr(err.message, "token_embd.weight"),
                      "misaligned data: status %d (%s)", (int)st, err.message);
            }
            gguf_close(f);
        }
    }
    free(odd);
    free(buf);
}

/* A rope_freqs.weight tensor (per-dimension divisors of the rotation angles) with a zero,
 * a negative, a NaN or an infinite value is refused by name; all ones load. */
static void check_rope_freqs(const gguf_file *src, int n_half) {
    const float bad[5] = {1.0f, 0.0f, -1.0f, NAN, INFINITY};
    for (int k = 0; k < 5; k++) {
        gguf_writer *w = gguf_writer_new();
        cera_error err;
        for (uint64_t i = 0; i < src->n_kv; i++) gguf_writer_set_value(w, src->kv[i].key, &src->kv[i].value);
        for (uint64_t i = 0; i < src->n_tensors; i++) {
            const gguf_tensor *t = &src->tensors[i];
            char name[128];
            gguf_str_copy(t->name, name, sizeof name);
            gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err);
        }
        float *rf = malloc((size_t)n_half * sizeof *rf);
        for (int i = 0; i < n_half && rf; i++) rf[i] = i == n_half / 2 ? bad[k] : 1.0f;
        const int64_t ne[1] = {n_half};
        gguf_writer_add_tensor(w, "rope_freqs.weight", CERA_TYPE_F32, 1, ne, rf, &err);
        void *buf = NULL;
        size_t size = 0;
        gguf_file *f = NULL;
        cera_model m;
        if (rf && gguf_writer_to_memory(w, &buf, &size, &err) == CERA_OK &&
            gguf_open_memory(buf, size, &f, &err) == CERA_OK) {
            const cera_status st = cera_model_load(f, &m, &err);
            if (k == 0) {
                CHECK(st == CERA_OK && m.rope_freqs.data, "rope_freqs of ones: %s", err.message);
                if (st == CERA_OK) cera_model_free(&m);
            } else {
                CHECK(st == CERA_ERR_FORMAT && strstr(err.message, "rope_freqs.weight"),
                      "rope_freqs %g: %d (%s)", (double)bad[k], (int)st, err.message);
            }
        } else {
            CHECK(false, "rope_freqs file: %s", err.message);
        }
        gguf_close(f);
        free(buf);
        free(rf);
        gguf_writer_free(w);
    }
}

static void check_hparams(void) {
    struct {
        const char *file;
        cera_arch arch;
        int n_head, n_head_kv, head_dim;
        bool tied, qkv_bias, qk_norm;
        cera_rope_style rope;
        bool fetched; /* a model scripts/setup.sh fetches (skipped when absent) */
    } want[] = {
        {"models/stories260K.gguf", CERA_ARCH_LLAMA, 8, 4, 8, false, false, false, CERA_ROPE_NORM, false},
        {"golden/synth-qwen2-f32.gguf", CERA_ARCH_QWEN2, 4, 2, 64, false, true, false, CERA_ROPE_NEOX, false},
        {"golden/synth-qwen3-f32.gguf", CERA_ARCH_QWEN3, 0, 0, 0, false, false, true, CERA_ROPE_NEOX, false},
        {"golden/synth-granite-f32.gguf", CERA_ARCH_GRANITE, 0, 0, 0, false, false, false, CERA_ROPE_NORM,
         false},
        /* no output.weight: the output reuses token_embd */
        {"SmolLM2-135M-Instruct.Q4_1.gguf", CERA_ARCH_LLAMA, 9, 3, 64, true, false, false, CERA_ROPE_NORM,
         true},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        gguf_file *f = NULL;
        cera_model m;
        cera_error err;
        const char *path = want[i].fetched ? models_path(want[i].file) : shared_path(want[i].file);
        if (want[i].fetched && !file_exists(path)) {
            printf("skipped: %s not present (scripts/setup.sh fetches it)\n", path);
            continue;
        }
        if (gguf_open(path, &f, &err) != CERA_OK || cera_model_load(f, &m, &err) != CERA_OK) {
            CHECK(false, "%s: %s", want[i].file, err.message);
            gguf_close(f);
            continue;
        }
        const cera_hparams *hp = &m.hp;
        CHECK(hp->arch == want[i].arch && hp->rope_style == want[i].rope, "%s: arch/rope", want[i].file);
        if (want[i].n_head)
            CHECK(hp->n_head == want[i].n_head && hp->n_head_kv == want[i].n_head_kv &&
                      hp->head_dim == want[i].head_dim,
                  "%s: heads %d/%d x %d", want[i].file, hp->n_head, hp->n_head_kv, hp->head_dim);
        CHECK(hp->tied_output == want[i].tied && (m.output.data == m.tok_embd.data) == want[i].tied,
              "%s: tied output %d", want[i].file, (int)hp->tied_output);
        CHECK(!want[i].qkv_bias || (m.layers[0].bq.data && m.layers[0].bk.data && m.layers[0].bv.data),
              "%s: QKV biases", want[i].file);
        CHECK(!want[i].qk_norm || (m.layers[0].q_norm.data && m.layers[0].k_norm.data), "%s: Q/K norms",
              want[i].file);
        if (hp->arch == CERA_ARCH_GRANITE)
            CHECK(hp->embd_scale == 12.0f && fabsf(hp->residual_scale - 0.22f) < 1e-6f &&
                      hp->attn_scale == 1.0f / 128 && hp->logit_scale == 8.0f,
                  "granite multipliers %g %g %g %g", hp->embd_scale, hp->residual_scale, hp->attn_scale,
                  hp->logit_scale);
        else
            CHECK(hp->embd_scale == 1.0f && hp->residual_scale == 1.0f && hp->logit_scale == 1.0f &&
                      hp->attn_scale == 1.0f / sqrtf((float)hp->head_dim),
                  "%s: no multipliers", want[i].file);
        cera_model_free(&m);
        gguf_close(f);
    }
}

int main(void) {
    gguf_file *src = NULL;
    cera_error err;
    CHECK(gguf_open(shared_path("golden/synth-llama-f32.gguf"), &src, &err) == CERA_OK, "open: %s",
          err.message);
    if (src) {
        /* the untouched file loads */
        cera_model m;
        CHECK(cera_model_load(src, &m, &err) == CERA_OK, "synth-llama-f32: %s", err.message);
        const int n_half = m.hp.n_rot / 2;
        cera_model_free(&m);
        check_rope_freqs(src, n_half);
        for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) run_edit(src, &edits[i]);
        check_misaligned(src);
        gguf_close(src);
    }
    check_hparams();
    CHECK(gguf_open(shared_path("synth/lfm2moe-f32.gguf"), &src, &err) == CERA_OK, "open: %s", err.message);
    if (src) {
        cera_model m;
        const cera_status st = cera_model_load(src, &m, &err);
        CHECK(st == CERA_OK, "lfm2moe-f32: %s", err.message);
        if (st == CERA_OK) {
            CHECK(m.hp.n_expert == 8 && m.hp.n_expert_used == 2 && m.hp.n_ff_exp == 128 &&
                      m.hp.n_dense_lead == 1 && m.hp.expert_gating == CERA_GATING_SIGMOID &&
                      m.layers[0].moe.n_expert == 0 && m.layers[1].moe.n_expert == 8 &&
                      m.layers[1].moe.norm_w,
                  "lfm2moe hyperparameters");
            cera_model_free(&m);
        }
        for (size_t i = 0; i < sizeof moe_edits / sizeof moe_edits[0]; i++) run_edit(src, &moe_edits[i]);
        gguf_close(src);
    }
    return test_finish();
}
