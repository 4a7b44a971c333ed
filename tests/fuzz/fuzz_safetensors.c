/*
 * fuzz_safetensors.c — libFuzzer harness for the LoRA adapter loaders: the safetensors
 * reader with the PEFT loader behind it and, for inputs that start with the GGUF magic,
 * the GGUF reader with the llama.cpp adapter loader behind it.
 *
 * Any input goes to safetensors_open_memory. When it is accepted, every tensor's bytes
 * are read (so ASan catches an offset the validation let through), the invariants the
 * header promises are checked, each name is looked up, and the file is offered to the
 * PEFT loader against a small llama-shaped model (8 layers of 64 wide, 8 heads, 4 KV
 * heads, 172 ffn: stories260K's shapes, with q/k rows permuted as for llama). A
 * rejected input must leave an error message. Built as fuzz_gguf.c is (see
 * tests/fuzz/CMakeLists.txt).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "lora/lora.h"
#include "lora/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

#define REQUIRE(c)                                                                                           \
    do {                                                                                                     \
        if (!(c)) __builtin_trap();                                                                          \
    } while (0)

#define N_LAYER 8
static cera_model model;
static cera_layer layers[N_LAYER];
static const char dummy[1];

static void make_model(void) {
    if (model.layers) return;
    model.hp.n_layer = N_LAYER;
    model.hp.n_embd = 64;
    model.hp.n_head = 8;
    model.hp.n_head_kv = 4;
    model.hp.n_ff = 172;
    model.hp.rope_style = CERA_ROPE_NORM;
    model.layers = layers;
    const int64_t kn[CERA_PROJ_COUNT][2] = {{64, 64},  {64, 32},  {64, 32}, {64, 64},
                                            {64, 172}, {64, 172}, {172, 64}};
    for (int l = 0; l < N_LAYER; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            layers[l].proj[p].k = kn[p][0];
            layers[l].proj[p].n = kn[p][1];
            layers[l].proj[p].data = dummy;
        }
}

/* An accepted adapter must be whole: every pair's shape is its base tensor's. */
static void check_adapter(const cera_adapter *a) {
    REQUIRE(a->n_pairs > 0 && a->used == a->n_floats);
    for (int l = 0; l < N_LAYER; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            const cera_lora_pair *q = cera_lora_pair_get(a, l, (cera_proj)p);
            if (!q) continue;
            REQUIRE(q->k == layers[l].proj[p].k && q->d == layers[l].proj[p].n);
            float x[172], y[172] = {0};
            for (int i = 0; i < 172; i++) x[i] = (float)i / 172.0f;
            cera_lora_apply_row(q, 1.0f, x, y, 0, q->d);
        }
}

static void fuzz_gguf_adapter(const uint8_t *data, size_t size) {
    gguf_file *g = NULL;
    cera_error err = {0};
    if (gguf_open_memory(data, size, &g, &err) != CERA_OK) return;
    cera_adapter *a = NULL;
    if (cera_lora_load_gguf(&model, g, "fuzz.gguf", &a, &err) == CERA_OK)
        check_adapter(a);
    else
        REQUIRE(!a && err.message[0]);
    cera_lora_release(a);
    gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    make_model();
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        fuzz_gguf_adapter(data, size);
        return 0;
    }
    safetensors_file *f = NULL;
    cera_error err = {0};
    if (safetensors_open_memory(data, size, &f, &err) != CERA_OK) {
        REQUIRE(!f && err.message[0]);
        return 0;
    }
    REQUIRE(f->data_offset >= 8 && f->data_offset <= size);
    uint64_t prev_end = 0;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const safetensors_tensor *t = &f->tensors[i];
        REQUIRE(t->n_dims >= 0 && t->n_dims <= SAFETENSORS_MAX_DIMS);
        REQUIRE(t->offset + t->nbytes <= size - f->data_offset);
        REQUIRE((const uint8_t *)t->data == data + f->data_offset + t->offset);
        uint64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) n *= (uint64_t)t->shape[d];
        REQUIRE(n * safetensors_dtype_size(t->dtype) == t->nbytes);
        if (t->nbytes) {
            REQUIRE(t->offset >= prev_end); /* sorted by offset, no overlap */
            prev_end = t->offset + t->nbytes;
        }
        const uint8_t *p = t->data;
        for (uint64_t j = 0; j < t->nbytes; j += 61) sink += p[j];
        if (t->nbytes) sink += p[t->nbytes - 1];
        REQUIRE(safetensors_find(f, t->name) == t);
    }
    static const char *const configs[2] = {"{\"r\":4,\"lora_alpha\":8}",
                                           "{\"use_rslora\":true,\"lora_alpha\":8}"};
    cera_adapter *a = NULL;
    const cera_status st =
        cera_lora_load_peft(&model, configs[size & 1], strlen(configs[size & 1]), f, "fuzz", &a, &err);
    if (st == CERA_OK) {
        check_adapter(a);
    } else {
        REQUIRE(!a && err.message[0]);
    }
    cera_lora_release(a);
    safetensors_close(f);
    return 0;
}
