/*
 * test_kv_layout.c — per-layer KV head counts end to end. From the synth-llama-f32 golden
 * model (8 heads over 4 KV heads, 2 layers) two files are written: A, whose layer 0 has 2 KV
 * heads (attention.head_count_kv = [2, 4], its K and V the first two heads' rows), and B,
 * the same function with 4 KV heads everywhere (layer 0's K and V rows repeated so that
 * query heads 0-3 see A's first KV head and 4-7 its second). The KV pool gives A's layers
 * rows of their own widths; both must give the same logits bit for bit, as one batch and
 * one token at a time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "engine/engine_impl.h"
#include "gguf/gguf.h"
#include "testutil.h"

enum { HD = 32, N_EMBD = 256 };

/* Writes the source with layer 0's K and V replaced (kv_heads[0] heads of rows) to path. */
static bool write_variant(const gguf_file *src, const char *path, const uint32_t kv_heads[2], bool repeat) {
    gguf_writer *w = gguf_writer_new();
    cera_error err = {0};
    for (uint64_t i = 0; i < src->n_kv; i++) gguf_writer_set_value(w, src->kv[i].key, &src->kv[i].value);
    gguf_writer_set_arr(w, "llama.attention.head_count_kv", GGUF_TYPE_UINT32, kv_heads, 2);
    float *kv[2] = {NULL, NULL};
    bool ok = true;
    for (uint64_t i = 0; i < src->n_tensors && ok; i++) {
        const gguf_tensor *t = &src->tensors[i];
        char name[128];
        gguf_str_copy(t->name, name, sizeof name);
        const int which = !strcmp(name, "blk.0.attn_k.weight")   ? 0
                          : !strcmp(name, "blk.0.attn_v.weight") ? 1
                                                                 : -1;
        if (which < 0) {
            ok = gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, &err) == CERA_OK;
            continue;
        }
        /* A: the first 2 heads' rows; B: head 0 twice, then head 1 twice */
        const size_t head = (size_t)HD * N_EMBD;
        const float *rows = t->data;
        const int n_heads = (int)kv_heads[0];
        kv[which] = malloc((size_t)n_heads * head * sizeof(float));
        if (!kv[which]) break;
        for (int h = 0; h < n_heads; h++)
            memcpy(kv[which] + (size_t)h * head, rows + (size_t)(repeat ? h / 2 : h) * head,
                   head * sizeof(float));
        const int64_t ne[2] = {N_EMBD, (int64_t)n_heads * HD};
        ok = gguf_writer_add_tensor(w, name, CERA_TYPE_F32, 2, ne, kv[which], &err) == CERA_OK;
    }
    ok = ok && kv[0] && kv[1] && gguf_writer_write(w, path, &err) == CERA_OK;
    CHECK(ok, "%s: %s", path, err.message);
    gguf_writer_free(w);
    free(kv[0]);
    free(kv[1]);
    return ok;
}

static cera_engine *open_cpu(const char *path) {
    cera_engine_params p = cera_engine_default_params();
    p.device = CERA_DEVICE_CPU;
    p.n_threads = 2;
    p.n_ctx = 256;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(path, &p, &e, &err) == CERA_OK, "%s: %s", path, err.message);
    return e;
}

/* Every position's logits, as one batch (step 0) or one token at a time. */
static float *logits(cera_engine *e, const int32_t *tok, size_t n, bool steps) {
    const size_t nv = (size_t)cera_engine_n_vocab(e);
    float *out = malloc(n * nv * sizeof(float));
    cera_session *s = NULL;
    cera_error err = {0};
    if (!out || cera_session_create(e, NULL, &s, &err) != CERA_OK) {
        free(out);
        return NULL;
    }
    const size_t step = steps ? 1 : n;
    for (size_t i = 0; i < n; i += step) {
        CHECK(cera_session_eval(s, tok + i, step, true, &err) == CERA_OK, "eval: %s", err.message);
        for (size_t j = 0; j < step; j++) {
            const float *l = cera_session_logits(s, (int)j);
            if (l) memcpy(out + (i + j) * nv, l, nv * sizeof(float));
        }
    }
    cera_session_free(s);
    return out;
}

int main(void) {
    gguf_file *src = NULL;
    cera_error err = {0};
    CHECK(gguf_open(shared_path("golden/synth-llama-f32.gguf"), &src, &err) == CERA_OK, "open: %s",
          err.message);
    size_t n = 0;
    int32_t *tok = read_ints(shared_path("golden/synth-llama-f32.tokens"), &n);
    CHECK(tok && n > 0, "tokens missing");
    const uint32_t heads_a[2] = {2, 4}, heads_b[2] = {4, 4};
    if (!src || !tok || !write_variant(src, "kv-layout-a.gguf", heads_a, false) ||
        !write_variant(src, "kv-layout-b.gguf", heads_b, true))
        return test_finish();
    cera_engine *a = open_cpu("kv-layout-a.gguf"), *b = open_cpu("kv-layout-b.gguf");
    if (a && b) {
        const cera_kv_pool *p = a->kv;
        CHECK(p->kv_dim == 0 && p->layers[0].row == 2 * HD && p->layers[1].row == 4 * HD &&
                  p->group[CERA_KV_FULL].block_bytes == 2 * CERA_KV_BLOCK * (size_t)(6 * HD) * 2,
              "A's pool: kv_dim %d, rows %d / %d, block %zu bytes", p->kv_dim, p->layers[0].row,
              p->layers[1].row, p->group[CERA_KV_FULL].block_bytes);
        CHECK(b->kv->kv_dim == 4 * HD, "B's pool is uniform (kv_dim %d)", b->kv->kv_dim);
        const size_t bytes = n * (size_t)cera_engine_n_vocab(a) * sizeof(float);
        for (int steps = 0; steps < 2; steps++) {
            float *la = logits(a, tok, n, steps), *lb = logits(b, tok, n, steps);
            CHECK(la && lb && !memcmp(la, lb, bytes), "2 KV heads in layer 0 differ from 4 repeated (%s)",
                  steps ? "one token at a time" : "one batch");
            free(la);
            free(lb);
        }
    }
    cera_engine_close(a);
    cera_engine_close(b);
    gguf_close(src);
    free(tok);
    remove("kv-layout-a.gguf");
    remove("kv-layout-b.gguf");
    return test_finish();
}
