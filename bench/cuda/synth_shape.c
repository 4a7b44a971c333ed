/* synth_shape.c — real llama shapes for the GPU benchmarks (synth_shape.h). */
#include "synth_shape.h"

#include "model/arch/blocks.h"
#include "model/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_shape {
    const char *name;
    int n_vocab, n_embd, n_ff, n_head, n_head_kv, n_layer;
    float rope_base;
} bench_shape;

static const bench_shape shapes[] = {
    {"llama2-7b", 32000, 4096, 11008, 32, 32, 32, 10000.0f},
    {"llama-3.1-8b", 128256, 4096, 14336, 32, 8, 32, 500000.0f},
    {"llama-3.1-70b", 128256, 8192, 28672, 64, 8, 80, 500000.0f},
};

bool cera_bench_synth_model(cera_model *m, const char *shape, const char *type) {
    memset(m, 0, sizeof *m);
    const bench_shape *sh = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].name, shape)) sh = &shapes[i];
    if (!sh) return false;
    const bool q4_k_m = !strcmp(type, "q4_k_m");
    cera_type t = CERA_TYPE_Q4_K;
    if (!q4_k_m && !cera_type_from_name(type, &t)) return false;
    const cera_type out_type = q4_k_m || t == CERA_TYPE_Q4_0 ? CERA_TYPE_Q6_K : t;
    const int64_t e = sh->n_embd, ff = sh->n_ff, hd = e / sh->n_head, nl = sh->n_layer;
    const int64_t kv = hd * sh->n_head_kv;
    cera_hparams *hp = &m->hp;
    hp->arch = CERA_ARCH_LLAMA;
    hp->n_vocab = sh->n_vocab;
    hp->n_ctx_train = 4096;
    hp->n_embd = (int)e;
    hp->n_layer = (int)nl;
    hp->n_head = sh->n_head;
    hp->n_head_kv = sh->n_head_kv;
    hp->head_dim = (int)hd;
    hp->n_ff = (int)ff;
    hp->n_rot = (int)hd;
    hp->rms_eps = 1e-5f;
    hp->rope_base = sh->rope_base;
    hp->rope_freq_scale = 1.0f;
    hp->rope_style = CERA_ROPE_NORM;
    hp->use_rope = true;
    hp->rope_attn_factor = 1.0f;
    hp->embd_scale = 1.0f;
    hp->residual_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hd);
    hp->logit_scale = 1.0f;
    m->tok_embd = (cera_weight){.type = t, .k = e, .n = sh->n_vocab};
    m->output = (cera_weight){.type = out_type, .k = e, .n = sh->n_vocab};
    m->output_norm = (cera_weight){.type = CERA_TYPE_F32, .k = e, .n = 1};
    m->layers = calloc((size_t)nl, sizeof(cera_layer));
    if (!m->layers) return false;
    const int64_t q =
        nl / 8; // llama-quantize's use_more_bits: the first and last eighth, every third between
    for (int l = 0; l < nl; l++) {
        cera_layer *L = &m->layers[l];
        const bool more = l < q || l >= 7 * q || (l - q) % 3 == 2;
        const int64_t kn[CERA_PROJ_DOWN + 1][2] = {{e, e},  {e, kv}, {e, kv}, {e, e},
                                                   {e, ff}, {e, ff}, {ff, e}};
        for (int p = 0; p <= CERA_PROJ_DOWN; p++) {
            cera_type pt = t;
            if (q4_k_m && more && (p == CERA_PROJ_V || p == CERA_PROJ_DOWN)) pt = CERA_TYPE_Q6_K;
            L->proj[p] = (cera_weight){.type = pt, .k = kn[p][0], .n = kn[p][1]};
        }
        L->attn_norm = (cera_weight){.type = CERA_TYPE_F32, .k = e, .n = 1};
        L->ffn_norm = (cera_weight){.type = CERA_TYPE_F32, .k = e, .n = 1};
        /* every layer attends: the KV pool's layers in order, as the loader sets them */
        L->n_head_kv = sh->n_head_kv;
        L->kv_index = l;
        L->conv_index = -1;
    }
    hp->n_kv_layer = (int)nl;
    // the forward pass, as the model loader builds it for a llama file
    m->graph = calloc(1, sizeof *m->graph);
    cera_error err;
    if (!m->graph || cera_build_llama_stack(m, m->graph, &err) != CERA_OK) return false;
    return true;
}
