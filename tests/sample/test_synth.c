/*
 * test_synth.c — `cera synth` (tools/cera/synth.c): the `test` shape synthesized in
 * several types opens with the GGUF reader and has the hyperparameters, tokenizer,
 * tensors, shapes and types a llama model needs; weights dequantize to ~N(0, 0.02)
 * and norms to 1; the engine loads the files and computes finite, varied logits (also
 * for the qwen2 shape with QKV biases and a tied output); the same seed writes the
 * same bytes, another seed other bytes; bad arguments fail with a message and a
 * non-zero exit, never a signal.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tensor/types.h"
#include "testutil.h"

#define CERA_BIN CERA_BINARY_DIR "/tools/cera/cera"

static int synth_shape(const char *shape, const char *type, const char *out, const char *extra) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s synth %s %s -o %s -t 2 %s 2>/dev/null", CERA_BIN, shape, type, out, extra);
    return run_command(cmd);
}

static int synth(const char *type, const char *out, const char *extra) {
    return synth_shape("test", type, out, extra);
}

/* Loads a synthesized file in the engine and evaluates a short prompt: the logits of
 * random weights must be finite and not all alike. */
static void check_engine(const char *path) {
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 1;
    ep.n_ctx = 64;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_error err = {0};
    const cera_session_params sp = cera_session_default_params();
    const bool opened = cera_engine_open(path, &ep, &e, &err) == CERA_OK;
    CHECK(opened, "engine opens %s: %s", path, err.message);
    if (!opened) return;
    CHECK(cera_engine_n_vocab(e) == 512, "%s: vocabulary %d", path, cera_engine_n_vocab(e));
    CHECK(cera_session_create(e, &sp, &s, &err) == CERA_OK, "session: %s", err.message);
    const cera_token prompt[5] = {1, 100, 200, 300, 400};
    const bool ok = s && cera_session_eval(s, prompt, 5, false, &err) == CERA_OK;
    CHECK(ok, "%s: eval: %s", path, err.message);
    const float *lg = ok ? cera_session_logits(s, -1) : NULL;
    if (lg) {
        int finite = 0;
        float lo = lg[0], hi = lg[0];
        for (int i = 0; i < 512; i++) {
            finite += isfinite(lg[i]) != 0;
            lo = fminf(lo, lg[i]);
            hi = fmaxf(hi, lg[i]);
        }
        CHECK(finite == 512 && hi > lo, "%s: %d finite logits in [%g, %g]", path, finite, lo, hi);
    }
    cera_session_free(s);
    cera_engine_close(e);
}

static void check_u32(const gguf_file *f, const char *key, uint32_t want) {
    uint32_t v = 0;
    CHECK(gguf_get_u32(f, key, &v) && v == want, "%s = %u, want %u", key, v, want);
}

/* Mean and standard deviation of a tensor's dequantized values. */
static void tensor_stats(const gguf_tensor *t, double *mean, double *sd) {
    const cera_type_traits *tt = cera_type_get(t->type);
    const size_t row_bytes = cera_row_size(t->type, t->ne[0]);
    float *row = malloc((size_t)t->ne[0] * sizeof(float));
    double s = 0, s2 = 0;
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    for (int64_t r = 0; r < rows; r++) {
        tt->to_float((const uint8_t *)t->data + (size_t)r * row_bytes, row, t->ne[0]);
        for (int64_t i = 0; i < t->ne[0]; i++) {
            s += row[i];
            s2 += (double)row[i] * row[i];
        }
    }
    const double n = (double)rows * (double)t->ne[0];
    *mean = s / n;
    *sd = sqrt(s2 / n - *mean * *mean);
    free(row);
}

static void check_file(const char *path, cera_type want) {
    gguf_file *f = NULL;
    cera_error err = {0};
    CHECK(gguf_open(path, &f, &err) == CERA_OK, "%s: %s", path, err.message);
    if (!f) return;
    gguf_str arch = {0};
    CHECK(gguf_get_str(f, "general.architecture", &arch) && gguf_str_eq(arch, "llama"), "architecture");
    check_u32(f, "llama.embedding_length", 256);
    check_u32(f, "llama.feed_forward_length", 768);
    check_u32(f, "llama.block_count", 2);
    check_u32(f, "llama.attention.head_count", 8);
    check_u32(f, "llama.attention.head_count_kv", 4);
    check_u32(f, "llama.rope.dimension_count", 32);
    check_u32(f, "llama.context_length", 2048);
    check_u32(f, "tokenizer.ggml.bos_token_id", 1);
    check_u32(f, "tokenizer.ggml.eos_token_id", 2);
    float eps = 0, base = 0;
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) && eps == 1e-5f, "rms eps %g", eps);
    CHECK(gguf_get_f32(f, "llama.rope.freq_base", &base) && base == 10000.0f, "rope base %g", base);
    uint32_t ftype = 99;
    CHECK(gguf_get_u32(f, "general.file_type", &ftype) && ftype < 40, "file_type %u", ftype);
    const gguf_array *toks = NULL;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) && toks->n == 512, "512 tokens");
    if (toks && toks->n > 1) CHECK(gguf_str_eq(toks->u.strs[1], "<s>"), "token 1 is <s>");

    CHECK(f->n_tensors == 21, "%llu tensors, want 21", (unsigned long long)f->n_tensors);
    static const struct {
        const char *name;
        int64_t ne0, ne1;
    } want_t[] = {
        {"token_embd.weight", 256, 512},   {"output.weight", 256, 512},
        {"output_norm.weight", 256, 1},    {"blk.0.attn_norm.weight", 256, 1},
        {"blk.0.attn_q.weight", 256, 256}, {"blk.0.attn_k.weight", 256, 128},
        {"blk.0.attn_v.weight", 256, 128}, {"blk.0.attn_output.weight", 256, 256},
        {"blk.1.ffn_norm.weight", 256, 1}, {"blk.1.ffn_gate.weight", 256, 768},
        {"blk.1.ffn_up.weight", 256, 768}, {"blk.1.ffn_down.weight", 768, 256},
    };
    for (size_t i = 0; i < sizeof want_t / sizeof want_t[0]; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, want_t[i].name);
        CHECK(t != NULL, "%s: tensor %s missing", path, want_t[i].name);
        if (!t) continue;
        const bool is_1d = want_t[i].ne1 == 1;
        CHECK(t->ne[0] == want_t[i].ne0 && t->ne[1] == want_t[i].ne1 && t->n_dims == (is_1d ? 1u : 2u),
              "%s: %s is [%lld, %lld]", path, want_t[i].name, (long long)t->ne[0], (long long)t->ne[1]);
        CHECK(t->type == (is_1d ? CERA_TYPE_F32 : want), "%s: %s has type %d", path, want_t[i].name, t->type);
        double mean, sd;
        tensor_stats(t, &mean, &sd);
        if (is_1d)
            CHECK(mean == 1.0 && sd < 1e-6, "%s: norm %s mean %g sd %g", path, want_t[i].name, mean, sd);
        else
            CHECK(fabs(mean) < 0.002 && sd > 0.017 && sd < 0.023, "%s: %s mean %g sd %g (want ~N(0, 0.02))",
                  path, want_t[i].name, mean, sd);
    }
    gguf_close(f);
}

/* synth patches shapes and offsets into a header the GGUF writer made for one-block
 * tensors: the file must equal what the writer makes from the same keys and tensors. */
static void check_same_as_writer(const char *path) {
    gguf_file *f = NULL;
    cera_error err = {0};
    if (gguf_open(path, &f, &err) != CERA_OK) {
        CHECK(false, "%s: %s", path, err.message);
        return;
    }
    gguf_writer *w = gguf_writer_new();
    for (uint64_t i = 0; i < f->n_kv; i++) gguf_writer_set_value(w, f->kv[i].key, &f->kv[i].value);
    char name[128];
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        gguf_writer_add_tensor(w, gguf_str_copy(t->name, name, sizeof name), t->type, t->n_dims, t->ne,
                               t->data, NULL);
    }
    void *buf = NULL;
    size_t size = 0;
    CHECK(gguf_writer_to_memory(w, &buf, &size, &err) == CERA_OK, "writer: %s", err.message);
    CHECK(buf && size == f->size && !memcmp(buf, f->base, size), "%s differs from the writer's serialization",
          path);
    free(buf);
    gguf_writer_free(w);
    gguf_close(f);
}

static bool same_file(const char *a, const char *b) {
    size_t na, nb;
    char *x = read_file(a, &na), *y = read_file(b, &nb);
    const bool same = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return same;
}

int main(void) {
    static const char *names[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q6_k", "iq4_xs"};
    static const cera_type types[] = {CERA_TYPE_F32,  CERA_TYPE_F16,  CERA_TYPE_BF16, CERA_TYPE_Q8_0,
                                      CERA_TYPE_Q4_0, CERA_TYPE_Q4_K, CERA_TYPE_Q6_K, CERA_TYPE_IQ4_XS};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "synth-test-%s.gguf", names[i]);
        CHECK(synth(names[i], path, "") == 0, "cera synth test %s failed", names[i]);
        check_file(path, types[i]);
        check_same_as_writer(path);
        check_engine(path);
    }

    /* qwen2: QKV biases, tied output. */
    CHECK(synth_shape("test-qwen2", "q8_0", "synth-qwen2.gguf", "") == 0,
          "cera synth test-qwen2 q8_0 failed");
    gguf_file *f = NULL;
    cera_error err = {0};
    CHECK(gguf_open("synth-qwen2.gguf", &f, &err) == CERA_OK, "qwen2 file: %s", err.message);
    if (f) {
        gguf_str arch = {0};
        CHECK(gguf_get_str(f, "general.architecture", &arch) && gguf_str_eq(arch, "qwen2"),
              "qwen2 architecture");
        check_u32(f, "qwen2.embedding_length", 256);
        const gguf_tensor *bq = gguf_find_tensor(f, "blk.1.attn_q.bias");
        const gguf_tensor *bk = gguf_find_tensor(f, "blk.1.attn_k.bias");
        CHECK(bq && bq->ne[0] == 256 && bq->type == CERA_TYPE_F32, "attn_q.bias [256] f32");
        CHECK(bk && bk->ne[0] == 128, "attn_k.bias [128]");
        CHECK(!gguf_find_tensor(f, "output.weight"), "tied: no output.weight");
        CHECK(f->n_tensors == 2 + 2 * 12, "%llu tensors", (unsigned long long)f->n_tensors);
        gguf_close(f);
    }
    check_same_as_writer("synth-qwen2.gguf");
    check_engine("synth-qwen2.gguf");
    /* Same seed, same bytes (whatever the thread count); another seed, other bytes. */
    CHECK(synth("q4_0", "synth-a.gguf", "--seed 5") == 0, "synth seed 5");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s synth test q4_0 -o synth-b.gguf --seed 5 -t 1 2>/dev/null", CERA_BIN);
    CHECK(run_command(cmd) == 0, "synth seed 5, one thread");
    CHECK(synth("q4_0", "synth-c.gguf", "--seed 6") == 0, "synth seed 6");
    CHECK(same_file("synth-a.gguf", "synth-b.gguf"), "the same seed gives the same file");
    CHECK(!same_file("synth-a.gguf", "synth-c.gguf"), "another seed gives another file");

    /* Bad arguments: an exit code, not a signal, and no file left behind. */
    snprintf(cmd, sizeof cmd, "%s synth nosuchshape q4_0 -o synth-bad.gguf 2>/dev/null", CERA_BIN);
    CHECK(run_command(cmd) == 2, "unknown shape is a usage error");
    snprintf(cmd, sizeof cmd, "%s synth test q9_9 -o synth-bad.gguf 2>/dev/null", CERA_BIN);
    CHECK(run_command(cmd) == 2, "unknown type is a usage error");
    snprintf(cmd, sizeof cmd, "%s synth test q4_0 -o /nonexistent-dir/x.gguf 2>/dev/null", CERA_BIN);
    CHECK(run_command(cmd) == 1, "unwritable output is an error");
    CHECK(!file_exists("synth-bad.gguf"), "no file is left by a failed synth");
    return test_finish();
}
