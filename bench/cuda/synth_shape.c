/* synth_shape.c — the llama2-7b shape for the GPU benchmarks (synth_shape.h). */
#include "synth_shape.h"

#include "model/arch/blocks.h"
#include "model/graph.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* llama2-7b: 4096 embd, 11008 ffn, 32 layers, 32 heads (MHA), 32000 vocab. */
bool cera_bench_llama2_7b(cera_model *m, const char *type) {
    memset(m, 0, sizeof *m);
    const bool q4_k_m = !strcmp(type, "q4_k_m");
    cera_type t = CERA_TYPE_Q4_K;
    if (!q4_k_m && !cera_type_from_name(type, &t)) return false;
    const cera_type out_type = q4_k_m || t == CERA_TYPE_Q4_0 ? CERA_TYPE_Q6_K : t;
    cera_hparams *hp = &m->hp;
    hp->arch = CERA_ARCH_LLAMA;
    hp->n_vocab = 32000;
    hp->n_ctx_train = 4096;
    hp->n_embd = 4096;
    hp->n_layer = 32;
    hp->n_head = 32;
    hp->n_head_kv = 32;
    hp->head_dim = 128;
    hp->n_ff = 11008;
    hp->n_rot = 128;
    hp->rms_eps = 1e-5f;
    hp->rope_base = 10000.0f;
    hp->rope_freq_scale = 1.0f;
    hp->rope_style = CERA_ROPE_NORM;
    hp->use_rope = true;
    hp->rope_attn_factor = 1.0f;
    hp->embd_scale = 1.0f;
    hp->residual_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf(128.0f);
    hp->logit_scale = 1.0f;
    m->tok_embd = (cera_weight){.type = t, .k = 4096, .n = 32000};
    m->output = (cera_weight){.type = out_type, .k = 4096, .n = 32000};
    m->output_norm = (cera_weight){.type = CERA_TYPE_F32, .k = 4096, .n = 1};
    m->layers = calloc(32, sizeof(cera_layer));
    for (int l = 0; l < 32; l++) {
        cera_layer *L = &m->layers[l];
        const bool more = l < 4 || l >= 28 || (l - 4) % 3 == 2; // llama-quantize's use_more_bits
        const int64_t kn[CERA_PROJ_DOWN + 1][2] = {{4096, 4096},  {4096, 4096},  {4096, 4096}, {4096, 4096},
                                                   {4096, 11008}, {4096, 11008}, {11008, 4096}};
        for (int p = 0; p <= CERA_PROJ_DOWN; p++) {
            cera_type pt = t;
            if (q4_k_m && more && (p == CERA_PROJ_V || p == CERA_PROJ_DOWN)) pt = CERA_TYPE_Q6_K;
            L->proj[p] = (cera_weight){.type = pt, .k = kn[p][0], .n = kn[p][1]};
        }
        L->attn_norm = (cera_weight){.type = CERA_TYPE_F32, .k = 4096, .n = 1};
        L->ffn_norm = (cera_weight){.type = CERA_TYPE_F32, .k = 4096, .n = 1};
        L->n_head_kv = 32; /* every layer attends: the KV pool's layers in order, as the loader sets them */
        L->kv_index = l;
        L->conv_index = -1;
    }
    hp->n_kv_layer = 32;
    // the forward pass, as the model loader builds it for a llama file
    m->graph = calloc(1, sizeof *m->graph);
    cera_error err;
    if (!m->graph || cera_build_llama_stack(m, m->graph, &err) != CERA_OK) return false;
    return true;
}
