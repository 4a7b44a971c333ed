/*
 * test_nodrift.c — cera's own CPU logits, bit for bit, against a record of them.
 *
 * The goldens (test_golden) hold cera to llama.cpp within tolerances; this test holds cera
 * to itself exactly, so that restructuring the engine (new executors, a new KV pool, the
 * batch API) cannot move a single bit unnoticed. For every golden case (and the LoRA
 * cases, adapters attached) it evaluates the prompt as one batch with every position's
 * logits kept, then again one token at a time, and hashes each run's logits (FNV-1a over
 * the float bytes). tests/model/data/nodrift.txt holds the hashes per CPU kernel tier, as
 * recorded by `test_nodrift --record` (run once per tier with CERA_CPU_TIER set; the
 * lines are printed to stdout). A tier with no record on this machine is reported and
 * skipped: every tier a CPU of the CI's kind has is recorded.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "cera.h"
#include "engine_util.h"
#include "testutil.h"

typedef struct nd_case {
    const char *model;   /* under ../shared */
    const char *golden;  /* golden/<golden>.tokens */
    const char *adapter; /* under ../shared, or NULL */
    float scale;
    const char *adapter2; /* a second adapter, or NULL */
} nd_case;

static const nd_case cases[] = {
    {"models/stories260K.gguf", "stories260K.p1", NULL, 0, NULL},
    {"models/stories260K.gguf", "stories260K.p2", NULL, 0, NULL},
    {"models/stories260K.gguf", "stories260K.p3", NULL, 0, NULL},
    {"golden/synth-llama-f32.gguf", "synth-llama-f32", NULL, 0, NULL},
    {"golden/synth-llama-f16.gguf", "synth-llama-f16", NULL, 0, NULL},
    {"golden/synth-llama-bf16.gguf", "synth-llama-bf16", NULL, 0, NULL},
    {"golden/synth-llama-q8_0.gguf", "synth-llama-q8_0", NULL, 0, NULL},
    {"golden/synth-llama-q4_0.gguf", "synth-llama-q4_0", NULL, 0, NULL},
    {"golden/synth-llama-q4_1.gguf", "synth-llama-q4_1", NULL, 0, NULL},
    {"golden/synth-llama-q5_0.gguf", "synth-llama-q5_0", NULL, 0, NULL},
    {"golden/synth-llama-q5_1.gguf", "synth-llama-q5_1", NULL, 0, NULL},
    {"golden/synth-llama-q2_k.gguf", "synth-llama-q2_k", NULL, 0, NULL},
    {"golden/synth-llama-q3_k_s.gguf", "synth-llama-q3_k_s", NULL, 0, NULL},
    {"golden/synth-llama-q4_k_s.gguf", "synth-llama-q4_k_s", NULL, 0, NULL},
    {"golden/synth-llama-q5_k_s.gguf", "synth-llama-q5_k_s", NULL, 0, NULL},
    {"golden/synth-llama-q6_k.gguf", "synth-llama-q6_k", NULL, 0, NULL},
    {"golden/synth-llama-iq4_nl.gguf", "synth-llama-iq4_nl", NULL, 0, NULL},
    {"golden/synth-llama-iq4_xs.gguf", "synth-llama-iq4_xs", NULL, 0, NULL},
    {"golden/synth-llama-q4_k_m.gguf", "synth-llama-q4_k_m", NULL, 0, NULL},
    {"golden/synth-qwen2-f32.gguf", "synth-qwen2-f32", NULL, 0, NULL},
    {"golden/synth-qwen2-q8_0.gguf", "synth-qwen2-q8_0", NULL, 0, NULL},
    {"golden/synth-qwen3-f32.gguf", "synth-qwen3-f32", NULL, 0, NULL},
    {"golden/synth-qwen3-q8_0.gguf", "synth-qwen3-q8_0", NULL, 0, NULL},
    {"golden/synth-granite-f32.gguf", "synth-granite-f32", NULL, 0, NULL},
    {"golden/synth-granite-q8_0.gguf", "synth-granite-q8_0", NULL, 0, NULL},
    {"golden/synth-lfm2-f32.gguf", "synth-lfm2-f32", NULL, 0, NULL},
    {"golden/synth-lfm2-q8_0.gguf", "synth-lfm2-q8_0", NULL, 0, NULL},
    {"golden/synth-gemma3-f32.gguf", "synth-gemma3-f32", NULL, 0, NULL},
    {"golden/synth-gemma3-q8_0.gguf", "synth-gemma3-q8_0", NULL, 0, NULL},
    {"golden/synth-phi3-f32.gguf", "synth-phi3-f32", NULL, 0, NULL},
    {"golden/synth-phi3-q8_0.gguf", "synth-phi3-q8_0", NULL, 0, NULL},
    {"synth/lfm2moe-f32.gguf", "data/lfm2moe/f32.p1", NULL, 0, NULL},
    {"synth/lfm2moe-q8_0.gguf", "data/lfm2moe/q8_0.p3", NULL, 0, NULL},
    {"synth/lfm2moe-q4_0.gguf", "data/lfm2moe/q4_0.p1", NULL, 0, NULL},
    {"synth/lfm2moe-q8_0.gguf", "data/lfm2moe/lora-q8_0.p1", "data/lfm2moe/lora.gguf", 0.5f, NULL},
    {"models/stories260K.gguf", "stories260K.lora-a", "golden/lora-stories-a.gguf", 1.0f, NULL},
    {"models/stories260K.gguf", "stories260K.lora-a-half", "golden/lora-stories-a.gguf", 0.5f, NULL},
    {"models/stories260K.gguf", "stories260K.lora-a-b", "golden/lora-stories-a.gguf", 1.0f,
     "golden/lora-stories-b.gguf"},
    {"golden/synth-llama-f32.gguf", "synth-llama-f32.lora", "golden/lora-synth-llama.gguf", 1.0f, NULL},
    {"golden/synth-llama-q4_0.gguf", "synth-llama-q4_0.lora", "golden/lora-synth-llama.gguf", 1.0f, NULL},
    {"golden/synth-llama-q4_k_m.gguf", "synth-llama-q4_k_m.lora", "golden/lora-synth-llama.gguf", 1.0f, NULL},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static uint64_t fnv1a(const float *v, size_t n) {
    const unsigned char *p = (const unsigned char *)v;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The two hashes of one case (batch, then one at a time); false after a failed CHECK. */
static bool case_hashes(const nd_case *c, uint64_t out[2]) {
    size_t n = 0;
    int32_t *tok = read_ints(golden_path(c->golden, "tokens"), &n);
    CHECK(tok && n > 0, "%s: tokens missing", c->golden);
    cera_engine *e = tok ? test_open_engine(c->model, CERA_DEVICE_CPU) : NULL;
    test_attach at[2] = {{NULL, c->scale}, {NULL, 1.0f}};
    int n_at = 0;
    if (e && c->adapter) at[n_at++].a = test_load_adapter(e, c->adapter);
    if (e && c->adapter2) at[n_at++].a = test_load_adapter(e, c->adapter2);
    bool ok = e != NULL;
    for (int i = 0; i < n_at; i++) ok = ok && at[i].a;
    for (int pass = 0; pass < 2 && ok; pass++) {
        float *l = test_session_logits(e, at, n_at, tok, n, pass == 1);
        ok = l != NULL;
        if (ok) out[pass] = fnv1a(l, n * (size_t)cera_engine_n_vocab(e));
        free(l);
    }
    for (int i = 0; i < n_at; i++) cera_adapter_free(at[i].a);
    cera_engine_close(e);
    free(tok);
    return ok;
}

/* The recorded hashes of (tier, case), or false when there is no such line. */
static bool recorded(const char *text, const char *tier, const char *name, uint64_t out[2]) {
    for (const char *line = text; line && *line;) {
        char t[32], c[128];
        unsigned long long a, b;
        if (sscanf(line, "%31s %127s %llx %llx", t, c, &a, &b) == 4 && !strcmp(t, tier) && !strcmp(c, name)) {
            out[0] = a, out[1] = b;
            return true;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    return false;
}

int main(int argc, char **argv) {
    const bool record = argc > 1 && !strcmp(argv[1], "--record");
    const char *tier = cera_cpu_tier_name();
    char *text = NULL;
    if (!record) {
        size_t len = 0;
        text = read_file(CERA_NODRIFT_FILE, &len);
        CHECK(text != NULL, "%s missing", CERA_NODRIFT_FILE);
        if (!text) return test_finish();
        char *t = realloc(text, len + 1);
        CHECK(t != NULL, "out of memory");
        if (!t) return test_finish();
        text = t;
        text[len] = 0;
        uint64_t probe[2];
        if (!recorded(text, tier, cases[0].golden, probe)) {
            printf("tier %s has no record in %s: skipped\n", tier, CERA_NODRIFT_FILE);
            free(text);
            return 77;
        }
    }
    for (size_t i = 0; i < N_CASES; i++) {
        uint64_t h[2] = {0, 0}, r[2] = {0, 0};
        if (!case_hashes(&cases[i], h)) continue;
        if (record) {
            printf("%s %s %016" PRIx64 " %016" PRIx64 "\n", tier, cases[i].golden, h[0], h[1]);
            continue;
        }
        const bool have = recorded(text, tier, cases[i].golden, r);
        CHECK(have, "tier %s, %s: no record", tier, cases[i].golden);
        CHECK(!have || h[0] == r[0],
              "tier %s, %s: batch logits drifted (hash %016" PRIx64 ", recorded %016" PRIx64 ")", tier,
              cases[i].golden, h[0], r[0]);
        CHECK(!have || h[1] == r[1],
              "tier %s, %s: one-at-a-time logits drifted (hash %016" PRIx64 ", recorded %016" PRIx64 ")",
              tier, cases[i].golden, h[1], r[1]);
    }
    free(text);
    if (!record) printf("tier %s: %zu cases compared\n", tier, N_CASES);
    return record ? 0 : test_finish();
}
