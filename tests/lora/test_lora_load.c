/*
 * test_lora_load.c — loading the shared LoRA adapters (../shared/golden/lora-*): each
 * llama.cpp GGUF adapter and its PEFT twin must hold the same numbers once the PEFT
 * q/k B rows are permuted into the GGUF rotary order; shapes, ranks, alphas and
 * scales as the files say; and an adapter for another model is refused by name.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "lora/lora.h"
#include "lora/safetensors.h"
#include "testutil.h"

typedef struct base {
    gguf_file *f;
    cera_model m;
} base;

static bool open_base(const char *rel, base *b) {
    cera_error err = {0};
    memset(b, 0, sizeof *b);
    if (gguf_open(rel, &b->f, &err) || cera_model_load(b->f, &b->m, &err)) {
        fprintf(stderr, "%s: %s\n", rel, err.message);
        return false;
    }
    return true;
}

static void close_base(base *b) {
    cera_model_free(&b->m);
    gguf_close(b->f);
}

/* Every pair of two adapters equal bit for bit; returns the number of pairs compared. */
static int compare_adapters(const cera_adapter *x, const cera_adapter *y, const char *what) {
    int n = 0;
    bool same = x->n_layer == y->n_layer && x->n_pairs == y->n_pairs;
    for (int l = 0; l < x->n_layer && same; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            const cera_lora_pair *a = cera_lora_pair_get(x, l, (cera_proj)p),
                                 *b = cera_lora_pair_get(y, l, (cera_proj)p);
            if (!a && !b) continue;
            if (!a || !b || a->rank != b->rank || a->k != b->k || a->d != b->d) {
                same = false;
                break;
            }
            const bool ea = !memcmp(a->a, b->a, (size_t)(a->rank * a->k) * sizeof(float));
            const bool eb = !memcmp(a->b, b->b, (size_t)(a->rank * a->d) * sizeof(float));
            CHECK(ea && eb, "%s: blk.%d.%s differs (A %s, B %s)", what, l,
                  cera_lora_proj_gguf_name((cera_proj)p), ea ? "same" : "differs", eb ? "same" : "differs");
            n++;
        }
    CHECK(same, "%s: the two adapters target different projections or shapes", what);
    return n;
}

static void twins(base *b, const char *name, int rank, float alpha, int n_pairs) {
    char gpath[512], ppath[600];
    snprintf(gpath, sizeof gpath, "%s", shared_path(name));
    snprintf(ppath, sizeof ppath, "%s.peft", gpath);
    strcat(gpath, ".gguf");
    cera_error err = {0};
    cera_adapter *g = NULL, *p = NULL;
    CHECK(cera_lora_load(&b->m, gpath, &g, &err) == CERA_OK, "%s: %s", gpath, err.message);
    CHECK(cera_lora_load(&b->m, ppath, &p, &err) == CERA_OK, "%s: %s", ppath, err.message);
    if (!g || !p) goto out;
    CHECK(g->n_pairs == n_pairs && p->n_pairs == n_pairs, "%s: %d / %d pairs, expected %d", name, g->n_pairs,
          p->n_pairs, n_pairs);
    CHECK(g->max_rank == rank && p->max_rank == rank, "%s: rank %d / %d, expected %d", name, g->max_rank,
          p->max_rank, rank);
    CHECK(g->alpha == alpha && p->alpha == alpha, "%s: alpha %g / %g, expected %g", name, g->alpha, p->alpha,
          alpha);
    const cera_lora_pair *q = cera_lora_pair_get(g, 0, CERA_PROJ_Q);
    CHECK(q && cera_lora_scale(g, q, 0.5f) == 0.5f * alpha / rank, "%s: scale", name);
    const int n = compare_adapters(g, p, name);
    CHECK(n == n_pairs, "%s: compared %d pairs", name, n);

    /* The permutation matters: the raw HF rows of layer 0's q differ from the GGUF
     * order, and permuting them gives exactly what was loaded. */
    const cera_lora_pair *pq = cera_lora_pair_get(p, 0, CERA_PROJ_Q);
    char st_path[640];
    snprintf(st_path, sizeof st_path, "%s/adapter_model.safetensors", ppath);
    safetensors_file *sf = NULL;
    CHECK(safetensors_open(st_path, &sf, &err) == CERA_OK, "%s: %s", st_path, err.message);
    const safetensors_tensor *raw =
        sf ? safetensors_find(sf, "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight") : NULL;
    CHECK(pq && raw && raw->dtype == SAFETENSORS_F32 && raw->nbytes == (uint64_t)(pq->d * pq->rank) * 4,
          "%s: raw q lora_B", name);
    if (pq && raw && raw->nbytes == (uint64_t)(pq->d * pq->rank) * 4) {
        const size_t nf = (size_t)(pq->d * pq->rank);
        float *hf = malloc(nf * sizeof *hf), *tmp = malloc(nf * sizeof *tmp);
        memcpy(hf, raw->data, nf * sizeof *hf);
        CHECK(memcmp(hf, pq->b, nf * sizeof *hf) != 0, "%s: HF q rows already in GGUF order", name);
        cera_lora_permute_rows(hf, pq->d, pq->rank, b->m.hp.n_head, tmp);
        CHECK(!memcmp(hf, pq->b, nf * sizeof *hf), "%s: permuted HF q rows differ from the loaded ones",
              name);
        free(hf);
        free(tmp);
    }
    safetensors_close(sf);
out:
    cera_lora_release(g);
    cera_lora_release(p);
}

int main(void) {
    base stories, synth;
    if (!open_base(shared_path("models/stories260K.gguf"), &stories) ||
        !open_base(shared_path("golden/synth-llama-f32.gguf"), &synth)) {
        CHECK(0, "cannot open the base models");
        return test_finish();
    }
    twins(&stories, "golden/lora-stories-a", 8, 16.0f, 7 * stories.m.hp.n_layer);
    twins(&stories, "golden/lora-stories-b", 4, 4.0f, 3 * stories.m.hp.n_layer);
    twins(&synth, "golden/lora-synth-llama", 16, 32.0f, 7 * synth.m.hp.n_layer);

    /* The permutation itself on a tiny case: 1 head of 8 rows, 1 column. HF rows
     * 0..3 are the first halves of the pairs, 4..7 the second: GGUF interleaves them. */
    float m8[8] = {0, 1, 2, 3, 4, 5, 6, 7}, tmp[8];
    cera_lora_permute_rows(m8, 8, 1, 1, tmp);
    const float want[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    CHECK(!memcmp(m8, want, sizeof want), "permute_rows: got %g %g %g %g %g %g %g %g", m8[0], m8[1], m8[2],
          m8[3], m8[4], m8[5], m8[6], m8[7]);

    /* An adapter for another model: refused, naming the tensor and both shapes. */
    cera_error err = {0};
    cera_adapter *a = NULL;
    cera_status st = cera_lora_load(&stories.m, shared_path("golden/lora-synth-llama.gguf"), &a, &err);
    CHECK(st == CERA_ERR_INVALID_ARG && strstr(err.message, "blk.0.attn_q.weight") &&
              strstr(err.message, "256"),
          "wrong-model GGUF: status %d, '%s'", st, err.message);
    CHECK(!a, "no adapter on failure");
    st = cera_lora_load(&stories.m, shared_path("golden/lora-synth-llama.peft"), &a, &err);
    CHECK(st == CERA_ERR_INVALID_ARG && strstr(err.message, "q_proj"), "wrong-model PEFT: status %d, '%s'",
          st, err.message);
    /* A file inside the PEFT folder loads the folder. */
    st = cera_lora_load(&stories.m, shared_path("golden/lora-stories-b.peft/adapter_config.json"), &a, &err);
    CHECK(st == CERA_OK && a && a->n_pairs == 3 * stories.m.hp.n_layer, "PEFT via its config: %s",
          err.message);
    cera_lora_release(a);
    st = cera_lora_load(&stories.m, shared_path("golden/no-such-adapter.gguf"), &a, &err);
    CHECK(st == CERA_ERR_IO && strstr(err.message, "no-such-adapter"), "missing file: %d '%s'", st,
          err.message);
    /* A base model is not an adapter. */
    st = cera_lora_load(&stories.m, shared_path("models/stories260K.gguf"), &a, &err);
    CHECK(st == CERA_ERR_FORMAT && strstr(err.message, "general.type"), "model as adapter: %d '%s'", st,
          err.message);

    close_base(&stories);
    close_base(&synth);
    return test_finish();
}
