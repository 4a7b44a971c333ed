/*
 * test_session_state.c — saved sessions (cera_session_save / cera_session_load).
 *
 *   - continue: a session evaluates a prompt and samples 12 tokens (temperature 0.8, top-k
 *     and a repeat penalty: the RNG and the penalty history matter), is saved, and goes on for
 *     24 more; a new session of the same engine and a session of a second engine on the same
 *     file (another process, as far as the state is concerned) load the file and must sample
 *     the same 24 tokens with the same logits, bit for bit. For stories260K (llama), synth
 *     LFM2 (a recurrent conv state per slot), synth Gemma 3 (the sliding layers have dropped
 *     the blocks before their window by then) and the lfm2moe fixture, with a LoRA adapter on
 *     stories260K (attached before the load, as the file requires), and synth Gemma 3 again
 *     with its K cached in Q8_0 and its V in Q4_0, both rotated (CPU only: the GPU keeps F16 or
 *     Q8_0 alike);
 *   - refused files, each leaving the session as it was (the next token's logits unchanged):
 *     a missing file (CERA_ERR_IO); a file cut short at many lengths, one with any of 300
 *     random bytes flipped, and other bytes than a session file (CERA_ERR_FORMAT); a file
 *     from another model, with another adapter, the adapter at another scale, or none, or with
 *     another KV cache type (CERA_ERR_INVALID_ARG);
 *   - a file of more positions than the loading engine's context: CERA_ERR_CONTEXT_FULL;
 *   - cera_session_file_tokens: the timeline of a file without loading it, refused for cut
 *     short and other files;
 *   - the engine's and adapters' fingerprints (equal for the same model, KV cache type and
 *     adapter, different otherwise).
 * With the argument "cuda" (tests/cuda's build of this file; exit 77 without a GPU) the same on
 * the CUDA backend, whose blocks and conv states are copied from and to the device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cera.h"
#include "engine_util.h"
#include "testutil.h"

#define N_FIRST 12
#define N_AFTER 24

static const char *tmp_path(const char *tag) {
    static char buf[4][256];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, sizeof buf[0], "/tmp/cera-state-%d-%s.bin", (int)getpid(), tag);
    return b;
}

static cera_device device = CERA_DEVICE_CPU;
static cera_kv_type kv_k = CERA_KV_F16, kv_v = CERA_KV_AS_K; /* the engines' KV cache */

static cera_engine *open_ctx(const char *rel, int n_ctx) {
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 2;
    ep.n_ctx = n_ctx;
    ep.device = device;
    ep.kv_type = kv_k;
    ep.kv_type_v = kv_v;
    cera_engine *e = NULL;
    cera_error err = {0};
    CHECK(cera_engine_open(shared_path(rel), &ep, &e, &err) == CERA_OK, "%s: %s", rel, err.message);
    return e;
}

static cera_session *new_session(cera_engine *e, cera_adapter *a, float scale) {
    cera_session_params sp = cera_session_default_params();
    sp.sampler.temp = 0.8f;
    sp.sampler.top_k = 20;
    sp.sampler.repeat_penalty = 1.3f;
    sp.sampler.penalty_last_n = 16;
    sp.sampler.seed = 5;
    cera_session *s = NULL;
    cera_error err = {0};
    CHECK(!cera_session_create(e, &sp, &s, &err), "session: %s", err.message);
    if (s && a) CHECK(!cera_session_set_adapter(s, a, scale, &err), "adapter: %s", err.message);
    return s;
}

/* n sampled tokens (each evaluated), their logits rows into rows [n, nv] when not NULL */
static bool sample_n(cera_session *s, int n, cera_token *out, float *rows, int nv) {
    cera_error err = {0};
    for (int i = 0; i < n; i++) {
        const float *l = cera_session_logits(s, -1);
        if (!l) return false;
        if (rows) memcpy(rows + (size_t)i * nv, l, sizeof(float) * (size_t)nv);
        out[i] = cera_session_sample(s);
        if (out[i] < 0 || cera_session_eval(s, &out[i], 1, false, &err)) {
            CHECK(false, "sample/eval: %s", err.message);
            return false;
        }
    }
    return true;
}

static void check_continue(const char *rel, const char *adapter, int n_prompt) {
    cera_engine *e = open_ctx(rel, 256), *e2 = open_ctx(rel, 256);
    if (!e || !e2) goto out_engines;
    cera_adapter *a = NULL, *a2 = NULL;
    if (adapter) {
        a = test_load_adapter(e, adapter);
        a2 = test_load_adapter(e2, adapter);
    }
    const int nv = cera_engine_n_vocab(e);
    cera_token prompt[64], first[N_FIRST], ref[N_AFTER], got[N_AFTER];
    for (int i = 0; i < n_prompt; i++) prompt[i] = (cera_token)(1 + (i * 37 + 11) % (nv - 1));
    float *ref_rows = malloc(sizeof(float) * (size_t)N_AFTER * nv),
          *rows = malloc(sizeof(float) * (size_t)N_AFTER * nv);
    cera_session *s = new_session(e, a, 0.75f);
    cera_error err = {0};
    const char *path = tmp_path("cont");
    bool ok = s && ref_rows && rows && !cera_session_eval(s, prompt, (size_t)n_prompt, false, &err) &&
              sample_n(s, N_FIRST, first, NULL, nv);
    CHECK(ok, "%s: prompt and first tokens: %s", rel, err.message);
    CHECK(ok && !cera_session_save(s, path, &err), "%s: save: %s", rel, err.message);
    ok = ok && sample_n(s, N_AFTER, ref, ref_rows, nv);
    for (int k = 0; k < 2 && ok; k++) {
        cera_engine *ek = k ? e2 : e;
        cera_session *t = new_session(ek, k ? a2 : a, 0.75f);
        CHECK(t && !cera_session_load(t, path, &err), "%s: load (engine %d): %s", rel, k + 1, err.message);
        CHECK(cera_session_n_past(t) == n_prompt + N_FIRST, "%s: loaded %d positions, saved %d", rel,
              cera_session_n_past(t), n_prompt + N_FIRST);
        const bool cont = t && sample_n(t, N_AFTER, got, rows, nv);
        CHECK(cont && !memcmp(got, ref, sizeof ref), "%s: the tokens after a load (engine %d) differ", rel,
              k + 1);
        CHECK(cont && test_same_bits(rows, ref_rows, (size_t)N_AFTER * nv),
              "%s: the logits after a load (engine %d) differ", rel, k + 1);
        cera_session_free(t);
    }
    printf("%-32s %d + %d positions saved, %d tokens after the load as without it (two engines)\n", rel,
           n_prompt, N_FIRST, N_AFTER);
    cera_session_free(s);
    remove(path);
    free(ref_rows), free(rows);
    cera_adapter_free(a), cera_adapter_free(a2);
out_engines:
    cera_engine_close(e);
    cera_engine_close(e2);
}

static bool spill(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* A load of path into s must fail with want and leave s's next logits as they were. */
static int refused(cera_session *s, const char *path, cera_status want, const float *before, int nv,
                   const char *what) {
    cera_error err = {0};
    const cera_status st = cera_session_load(s, path, &err);
    const float *l = cera_session_logits(s, -1);
    const bool same = l && test_same_bits(l, before, (size_t)nv);
    if (st != want || !same) {
        CHECK(false, "%s: status %d (want %d), session %s: %s", what, (int)st, (int)want,
              same ? "unchanged" : "changed", err.message);
        return 1;
    }
    return 0;
}

static void check_refused(void) {
    cera_engine *e = open_ctx("models/stories260K.gguf", 256);
    cera_engine *other = open_ctx("golden/synth-llama-f32.gguf", 256);
    if (!e || !other) goto out;
    cera_adapter *a = test_load_adapter(e, "golden/lora-stories-a.gguf");
    cera_adapter *b = test_load_adapter(e, "golden/lora-stories-b.gguf");
    const int nv = cera_engine_n_vocab(e);
    cera_token prompt[40], extra[N_FIRST];
    for (int i = 0; i < 40; i++) prompt[i] = (cera_token)(1 + (i * 29 + 3) % (nv - 1));
    cera_error err = {0};
    const char *path = tmp_path("good"), *bad = tmp_path("bad");
    /* the saved session: 40 positions with adapter a at 0.5 */
    cera_session *s = new_session(e, a, 0.5f);
    CHECK(s && !cera_session_eval(s, prompt, 40, false, &err) && !cera_session_save(s, path, &err),
          "save: %s", err.message);
    /* the session the bad files are loaded into: another timeline, same adapter */
    cera_session *t = new_session(e, a, 0.5f);
    const bool made =
        t && !cera_session_eval(t, prompt + 3, 20, false, &err) && sample_n(t, 4, extra, NULL, nv);
    CHECK(made, "second session: %s", err.message);
    float *before = malloc(sizeof(float) * (size_t)nv);
    const float *l = made ? cera_session_logits(t, -1) : NULL;
    size_t n = 0;
    uint8_t *good = read_file(path, &n);
    if (!l || !good || !before) goto done;
    memcpy(before, l, sizeof(float) * (size_t)nv);
    int fails = 0, cases = 0;
    fails += refused(t, "/nonexistent/cera-state.bin", CERA_ERR_IO, before, nv, "missing file"), cases++;
    /* cut short */
    const size_t cuts[] = {0, 1, 7, 8, 12, 20, 100, 300, n / 2, n - 9, n - 8, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        CHECK(spill(bad, good, cuts[i]), "write %s", bad);
        char what[64];
        snprintf(what, sizeof what, "file cut at %zu of %zu bytes", cuts[i], n);
        fails += refused(t, bad, CERA_ERR_FORMAT, before, nv, what), cases++;
    }
    /* bytes flipped anywhere (the header, the tokens, the blocks, the checksum) */
    uint8_t *copy = malloc(n);
    unsigned seed = 12345;
    for (int i = 0; copy && i < 300; i++) {
        memcpy(copy, good, n);
        seed = seed * 1103515245u + 12345u;
        const size_t at = (size_t)(seed >> 4) % n;
        copy[at] ^= (uint8_t)(1u << (seed % 8));
        CHECK(spill(bad, copy, n), "write %s", bad);
        char what[64];
        snprintf(what, sizeof what, "bit flipped at byte %zu", at);
        fails += refused(t, bad, CERA_ERR_FORMAT, before, nv, what), cases++;
    }
    free(copy);
    /* the timeline read without loading: whole, a part, and refused for short or other files */
    cera_token peek[64];
    int n_pos = -1;
    CHECK(!cera_session_file_tokens(path, peek, 64, &n_pos, &err) && n_pos == 40 &&
              !memcmp(peek, prompt, sizeof(cera_token) * 40),
          "the file's tokens: %d: %s", n_pos, err.message);
    CHECK(!cera_session_file_tokens(path, peek, 5, &n_pos, &err) && n_pos == 40 && !memcmp(peek, prompt, 20),
          "the file's first tokens: %s", err.message);
    CHECK(cera_session_file_tokens("/nonexistent/cera-state.bin", peek, 64, &n_pos, &err) == CERA_ERR_IO &&
              n_pos == 0,
          "tokens of a missing file");
    CHECK(cera_session_file_tokens(shared_path("models/stories260K.gguf"), peek, 64, &n_pos, &err) ==
              CERA_ERR_FORMAT,
          "tokens of a GGUF file");
    for (size_t cut = 0; cut < 2700 && cut < n; cut += 97) {
        CHECK(spill(bad, good, cut), "write %s", bad);
        const cera_status st = cera_session_file_tokens(bad, peek, 64, &n_pos, &err);
        CHECK(st == CERA_ERR_FORMAT || (st == CERA_OK && n_pos == 40 && !memcmp(peek, prompt, 160)),
              "tokens of a file cut at %zu: %d", cut, (int)st);
    }
    /* another file altogether */
    fails += refused(t, shared_path("models/stories260K.gguf"), CERA_ERR_FORMAT, before, nv, "a GGUF file"),
        cases++;
    /* other adapters or scales, another model */
    CHECK(!cera_session_set_adapter(t, a, 0.25f, &err), "rescale: %s", err.message);
    fails += refused(t, path, CERA_ERR_INVALID_ARG, before, nv, "adapter at another scale"), cases++;
    CHECK(cera_session_remove_adapter(t, a) && !cera_session_set_adapter(t, b, 0.5f, &err), "swap: %s",
          err.message);
    fails += refused(t, path, CERA_ERR_INVALID_ARG, before, nv, "another adapter"), cases++;
    CHECK(cera_session_remove_adapter(t, b), "detach");
    fails += refused(t, path, CERA_ERR_INVALID_ARG, before, nv, "no adapter"), cases++;
    cera_session *o = new_session(other, NULL, 0);
    const int nvo = cera_engine_n_vocab(other);
    cera_token p3[3] = {1, 2, 3};
    if (o && !cera_session_eval(o, p3, 3, false, &err)) {
        float *ob = malloc(sizeof(float) * (size_t)nvo);
        memcpy(ob, cera_session_logits(o, -1), sizeof(float) * (size_t)nvo);
        fails += refused(o, path, CERA_ERR_INVALID_ARG, ob, nvo, "another model"), cases++;
        free(ob);
    }
    cera_session_free(o);
    /* the same model with another KV cache type */
    kv_k = CERA_KV_F32;
    cera_engine *f32 = device == CERA_DEVICE_CPU ? open_ctx("models/stories260K.gguf", 256) : NULL;
    kv_k = CERA_KV_F16;
    cera_adapter *af = f32 ? test_load_adapter(f32, "golden/lora-stories-a.gguf") : NULL;
    cera_session *v = f32 ? new_session(f32, af, 0.5f) : NULL;
    if (v && !cera_session_eval(v, p3, 3, false, &err)) {
        float *vb = malloc(sizeof(float) * (size_t)nv);
        memcpy(vb, cera_session_logits(v, -1), sizeof(float) * (size_t)nv);
        fails += refused(v, path, CERA_ERR_INVALID_ARG, vb, nv, "another KV cache type"), cases++;
        free(vb);
    }
    cera_session_free(v);
    cera_adapter_free(af);
    cera_engine_close(f32);
    /* a context too small for the file (40 positions) */
    cera_engine *small = open_ctx("models/stories260K.gguf", 32);
    cera_adapter *as = small ? test_load_adapter(small, "golden/lora-stories-a.gguf") : NULL;
    cera_session *u = small ? new_session(small, as, 0.5f) : NULL;
    CHECK(u && cera_session_load(u, path, &err) == CERA_ERR_CONTEXT_FULL, "a small context: %s", err.message);
    cera_session_free(u);
    cera_adapter_free(as);
    cera_engine_close(small);
    /* and the good file still loads there */
    CHECK(!cera_session_set_adapter(t, a, 0.5f, &err) && !cera_session_load(t, path, &err) &&
              cera_session_n_past(t) == 40,
          "the good file: %s", err.message);
    printf("%d damaged, foreign or mismatched session files refused with the session unchanged (%d failed)\n",
           cases, fails);
done:
    free(good);
    free(before);
    cera_session_free(s);
    cera_session_free(t);
    cera_adapter_free(a);
    cera_adapter_free(b);
    remove(path);
    remove(bad);
out:
    cera_engine_close(e);
    cera_engine_close(other);
}

/* The fingerprints a store of saved sessions names its files by: equal for two engines on the
 * same file and KV cache type, and for one adapter loaded twice; different for another KV cache
 * type, another model, another adapter. */
static void check_fingerprints(void) {
    cera_engine *e = open_ctx("models/stories260K.gguf", 256), *e2 = open_ctx("models/stories260K.gguf", 128);
    cera_engine *other = open_ctx("golden/synth-llama-f32.gguf", 256);
    kv_k = CERA_KV_F32;
    cera_engine *f32 = open_ctx("models/stories260K.gguf", 256);
    kv_k = CERA_KV_F16;
    if (!e || !e2 || !other || !f32) goto out;
    const uint64_t fe = cera_engine_fingerprint(e);
    CHECK(fe != 0 && fe == cera_engine_fingerprint(e2), "the same model and KV cache type: one fingerprint");
    CHECK(fe != cera_engine_fingerprint(other), "another model: another fingerprint");
    CHECK(fe != cera_engine_fingerprint(f32), "another KV cache type: another fingerprint");
    CHECK(cera_engine_fingerprint(NULL) == 0 && cera_adapter_fingerprint(NULL) == 0, "NULL: 0");
    cera_adapter *a = test_load_adapter(e, "golden/lora-stories-a.gguf");
    cera_adapter *a2 = test_load_adapter(e2, "golden/lora-stories-a.gguf");
    cera_adapter *b = test_load_adapter(e, "golden/lora-stories-b.gguf");
    if (a && a2 && b) {
        CHECK(cera_adapter_fingerprint(a) == cera_adapter_fingerprint(a2), "one adapter loaded twice");
        CHECK(cera_adapter_fingerprint(a) != cera_adapter_fingerprint(b), "two adapters");
    }
    cera_adapter_free(a), cera_adapter_free(a2), cera_adapter_free(b);
out:
    cera_engine_close(e), cera_engine_close(e2), cera_engine_close(other), cera_engine_close(f32);
}

int main(int argc, char **argv) {
    const int dev = test_device_arg(argc, argv);
    if (dev < 0) return TEST_SKIP_CODE;
    device = (cera_device)dev;
    check_continue("models/stories260K.gguf", NULL, 30);
    check_continue("models/stories260K.gguf", "golden/lora-stories-a.gguf", 30);
    check_continue("golden/synth-lfm2-q8_0.gguf", NULL, 30);
    check_continue("golden/synth-gemma3-q8_0.gguf", NULL, 40);
    check_continue("synth/lfm2moe-q8_0.gguf", NULL, 30);
    if (device == CERA_DEVICE_CPU) {
        kv_k = CERA_KV_Q8_0, kv_v = CERA_KV_Q4_0;
        check_continue("golden/synth-gemma3-q8_0.gguf", NULL, 40);
        kv_k = CERA_KV_F16, kv_v = CERA_KV_AS_K;
    }
    check_refused();
    if (device == CERA_DEVICE_CPU) check_fingerprints();
    return test_finish();
}
