/*
 * test_quantize.c — `cera quantize` end to end, and the library function behind it.
 *
 * The CLI (path in argv[1]) converts ../shared/golden/synth-llama-f32.gguf to each type
 * llama.cpp's shared files exist for, and the other synth-<arch>-f32 models to q8_0;
 * every tensor of the output must have the type,
 * shape and exact bytes of the file llama-quantize --pure made, and general.file_type
 * must be llama.cpp's. Rejected inputs (a row length that is not whole blocks, a
 * quantized input, an unknown type) must give a clear message, a non-zero exit code
 * and no output file. Then, on small models written here: F16/BF16 inputs, tensors kept
 * as they are, 1-D tensors made F32, and the same bytes for any thread count.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fp16.h"
#include "gguf/gguf.h"
#include "tensor/quantize_model.h"
#include "tensor/types.h"
#include "testutil.h"

static const char *cera_bin;

static const struct {
    const char *model;  /* synth-<model>-f32.gguf is the input */
    const char *arg;    /* TYPE as given to cera quantize */
    const char *golden; /* llama.cpp's file: synth-<model>-<golden>.gguf */
} cases[] = {
    {"llama", "q8_0", "q8_0"},
    {"llama", "q4_0", "q4_0"},
    {"llama", "q4_1", "q4_1"},
    {"llama", "q5_0", "q5_0"},
    {"llama", "q5_1", "q5_1"},
    {"llama", "iq4_nl", "iq4_nl"},
    {"llama", "q2_k", "q2_k"},
    {"llama", "q3_k_s", "q3_k_s"},
    {"llama", "q4_k", "q4_k_s"},
    {"llama", "Q5_K", "q5_k_s"},
    {"llama", "q6_k", "q6_k"},
    {"llama", "iq4_xs", "iq4_xs"},
    {"llama", "f16", "f16"},
    {"llama", "bf16", "bf16"},
    /* The other architectures: QKV biases, Q/K norms, a conv kernel llama.cpp keeps F32
     * (lfm2), fused QKV (phi3): which tensors stay unconverted must match too. */
    {"qwen2", "q8_0", "q8_0"},
    {"qwen3", "q8_0", "q8_0"},
    {"granite", "q8_0", "q8_0"},
    {"lfm2", "q8_0", "q8_0"},
    {"gemma3", "q8_0", "q8_0"},
    {"phi3", "q8_0", "q8_0"},
};

static uint32_t get_u32(const gguf_file *f, const char *key) {
    uint32_t v = UINT32_MAX;
    gguf_get_u32(f, key, &v);
    return v;
}

static void test_cli_matches_llama_quantize(void) {
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char in[1024], out[256], cmd[4096], rel[128];
        snprintf(rel, sizeof rel, "golden/synth-%s-f32.gguf", cases[c].model);
        snprintf(in, sizeof in, "%s", shared_path(rel)); /* shared_path's buffers are reused */
        gguf_file *src = NULL;
        cera_error err;
        if (gguf_open(in, &src, &err)) {
            CHECK(false, "%s", err.message);
            continue;
        }
        snprintf(out, sizeof out, "quantized-%s-%s.gguf", cases[c].model, cases[c].arg);
        unlink(out);
        snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' %s --threads 2", cera_bin, in, out, cases[c].arg);
        const int rc = run_command(cmd);
        CHECK(rc == 0, "%s: exit code %d", cmd, rc);
        gguf_file *mine = NULL, *ref = NULL;
        snprintf(rel, sizeof rel, "golden/synth-%s-%s.gguf", cases[c].model, cases[c].golden);
        if (gguf_open(out, &mine, &err) || gguf_open(shared_path(rel), &ref, &err)) {
            CHECK(false, "%s", err.message);
            gguf_close(mine);
            gguf_close(src);
            continue;
        }
        CHECK(mine->n_tensors == ref->n_tensors, "%s: %llu tensors, llama.cpp's file has %llu", cases[c].arg,
              (unsigned long long)mine->n_tensors, (unsigned long long)ref->n_tensors);
        int same = 0;
        for (uint64_t i = 0; i < ref->n_tensors; i++) {
            const gguf_tensor *r = &ref->tensors[i];
            char name[256];
            gguf_str_copy(r->name, name, sizeof name);
            const gguf_tensor *m = gguf_find_tensor(mine, name);
            CHECK(m != NULL, "%s: no tensor '%s'", cases[c].arg, name);
            if (!m) continue;
            const bool ok = m->type == r->type && m->n_dims == r->n_dims &&
                            !memcmp(m->ne, r->ne, sizeof m->ne) && m->nbytes == r->nbytes &&
                            !memcmp(m->data, r->data, r->nbytes);
            CHECK(ok, "%s: tensor '%s' differs from llama-quantize's (type %s, want %s)", cases[c].arg, name,
                  cera_type_get(m->type)->name, cera_type_get(r->type)->name);
            same += ok;
        }
        printf("synth-%-7s cera quantize %-6s: %d/%llu tensors identical to llama-quantize --pure\n",
               cases[c].model, cases[c].arg, same, (unsigned long long)ref->n_tensors);
        CHECK(get_u32(mine, "general.file_type") == get_u32(ref, "general.file_type"),
              "%s: general.file_type %u, llama.cpp wrote %u", cases[c].arg,
              get_u32(mine, "general.file_type"), get_u32(ref, "general.file_type"));
        CHECK(get_u32(mine, "general.quantization_version") == 2, "%s: general.quantization_version",
              cases[c].arg);
        /* Every key of the input is carried over, plus the two set above. */
        int missing = 0;
        for (uint64_t k = 0; k < src->n_kv; k++) {
            char key[256];
            gguf_str_copy(src->kv[k].key, key, sizeof key);
            const gguf_kv *kv = gguf_find_kv(mine, key);
            missing += !kv || kv->value.type != src->kv[k].value.type;
        }
        CHECK(missing == 0, "%s: %d input keys missing or retyped", cases[c].arg, missing);
        gguf_close(mine);
        gguf_close(ref);
        gguf_close(src);
        unlink(out);
    }
}

/* Runs cmd with stderr to a file; returns the exit code and the message (malloc'ed). */
static int run_capture(const char *args, char **message) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s > quantize-stdout.txt 2> quantize-stderr.txt", cera_bin, args);
    const int rc = run_command(cmd);
    *message = read_file("quantize-stderr.txt", NULL);
    if (!*message) *message = strdup("");
    return rc;
}

static void test_cli_errors(void) {
    char args[2048], *msg;
    unlink("rejected.gguf");
    /* stories260K's rows are 64 long: not whole q4_k super-blocks of 256. */
    snprintf(args, sizeof args, "quantize '%s' rejected.gguf q4_k", shared_path("models/stories260K.gguf"));
    int rc = run_capture(args, &msg);
    CHECK(rc == 1, "bad row length: exit code %d, want 1", rc);
    CHECK(!strncmp(msg, "cera: ", 6) && strstr(msg, "'token_embd.weight'") && strstr(msg, "64 elements") &&
              strstr(msg, "block size 256"),
          "bad row length: message '%s' should name the tensor, its row length and the block size", msg);
    CHECK(!file_exists("rejected.gguf"), "no output is written for a rejected model");
    free(msg);

    snprintf(args, sizeof args, "quantize '%s' rejected.gguf q8_0",
             shared_path("golden/synth-llama-q4_0.gguf"));
    rc = run_capture(args, &msg);
    CHECK(rc == 1 && strstr(msg, "is q4_0") && strstr(msg, "f32, f16 or bf16"),
          "quantized input: exit code %d, message '%s'", rc, msg);
    CHECK(!file_exists("rejected.gguf"), "no output is written for a quantized input");
    free(msg);

    snprintf(args, sizeof args, "quantize '%s' rejected.gguf q4_k_m",
             shared_path("golden/synth-llama-f32.gguf"));
    rc = run_capture(args, &msg);
    CHECK(rc == 2 && strstr(msg, "q4_k_m"), "a mix type is refused: exit code %d, message '%s'", rc, msg);
    free(msg);
    /* The activation types q8_1 and q8_k are valid targets (their files carry no
     * general.file_type); the CPU has no kernels for them as weights, which the engine
     * reports by name instead of running. */
    static const char *const act_types[] = {"q8_1", "q8_k"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "quantize '%s' act.gguf %s", shared_path("golden/synth-llama-f32.gguf"),
                 act_types[i]);
        rc = run_capture(args, &msg);
        CHECK(rc == 0, "quantize to %s: exit code %d, '%s'", act_types[i], rc, msg);
        free(msg);
        gguf_file *f = NULL;
        CHECK(gguf_open("act.gguf", &f, NULL) == CERA_OK, "%s output opens", act_types[i]);
        if (f) {
            const gguf_tensor *q = gguf_find_tensor(f, "blk.0.attn_q.weight");
            cera_type want;
            CHECK(cera_type_from_name(act_types[i], &want) && q && q->type == want, "%s tensor type",
                  act_types[i]);
            CHECK(!gguf_find_kv(f, "general.file_type"), "%s file has no general.file_type", act_types[i]);
            gguf_close(f);
        }
        cera_engine_params ep = cera_engine_default_params();
        ep.device = CERA_DEVICE_CPU;
        cera_engine *e = NULL;
        cera_error eerr;
        const cera_status est = cera_engine_open("act.gguf", &ep, &e, &eerr);
        CHECK(est == CERA_ERR_UNSUPPORTED && strstr(eerr.message, act_types[i]) && !e,
              "engine on %s weights: status %d, '%s'", act_types[i], (int)est, eerr.message);
        cera_engine_close(e);
        unlink("act.gguf");
    }
    rc = run_capture("quantize only-two args", &msg);
    CHECK(rc == 2, "missing arguments: exit code %d", rc);
    free(msg);
    rc = run_capture("quantize /nonexistent/in.gguf out.gguf q8_0", &msg);
    CHECK(rc == 1 && strstr(msg, "/nonexistent/in.gguf"), "a missing input is named: exit code %d, '%s'", rc,
          msg);
    free(msg);
    rc = run_capture("quantize --help", &msg);
    free(msg);
    msg = read_file("quantize-stdout.txt", NULL);
    CHECK(rc == 0 && msg && strstr(msg, "usage: cera quantize"), "--help: exit code %d", rc);
    free(msg);
    unlink("quantize-stdout.txt");
    unlink("quantize-stderr.txt");
}

/* A small model exercising the paths the synth file does not: F16/BF16 inputs, a 2-D
 * tensor llama.cpp never quantizes, and a 3-D (expert-style) tensor. */
#define COLS 64
static void write_small_model(const char *path, int64_t bad_cols) {
    static cera_f16 w16[COLS * 3];
    static cera_bf16 norm16[COLS];
    static float router[COLS * 4], experts[COLS * 2 * 3], bad[200];
    test_rng rng = {42};
    for (int i = 0; i < COLS * 3; i++) w16[i] = cera_f32_to_f16(test_rng_normal(&rng));
    for (int i = 0; i < COLS; i++) norm16[i] = cera_f32_to_bf16(1.0f + 0.1f * test_rng_normal(&rng));
    for (int i = 0; i < COLS * 4; i++) router[i] = test_rng_normal(&rng);
    for (int i = 0; i < COLS * 6; i++) experts[i] = test_rng_normal(&rng);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "general.file_type", 1);
    cera_error err;
    const int64_t ne_w[2] = {COLS, 3}, ne_n[1] = {COLS}, ne_r[2] = {COLS, 4}, ne_e[3] = {COLS, 2, 3};
    CHECK(!gguf_writer_add_tensor(w, "blk.0.attn_q.weight", CERA_TYPE_F16, 2, ne_w, w16, &err), "%s",
          err.message);
    CHECK(!gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", CERA_TYPE_BF16, 1, ne_n, norm16, &err), "%s",
          err.message);
    CHECK(!gguf_writer_add_tensor(w, "blk.0.ffn_gate_inp.weight", CERA_TYPE_F32, 2, ne_r, router, &err), "%s",
          err.message);
    CHECK(!gguf_writer_add_tensor(w, "blk.0.ffn_up_exps.weight", CERA_TYPE_F32, 3, ne_e, experts, &err), "%s",
          err.message);
    if (bad_cols) {
        const int64_t ne_b[2] = {bad_cols, 2};
        CHECK(!gguf_writer_add_tensor(w, "blk.0.odd.weight", CERA_TYPE_F32, 2, ne_b, bad, &err), "%s",
              err.message);
    }
    CHECK(!gguf_writer_write(w, path, &err), "%s", err.message);
    gguf_writer_free(w);
}

static void test_library(void) {
    write_small_model("small-in.gguf", 0);
    cera_error err;
    cera_status st = cera_quantize_model("small-in.gguf", "small-q8-1.gguf", CERA_TYPE_Q8_0, 1, &err);
    CHECK(st == CERA_OK, "small model: %s", err.message);
    st = cera_quantize_model("small-in.gguf", "small-q8-3.gguf", CERA_TYPE_Q8_0, 3, &err);
    CHECK(st == CERA_OK, "small model, 3 threads: %s", err.message);
    size_t n1 = 0, n3 = 0;
    void *b1 = read_file("small-q8-1.gguf", &n1), *b3 = read_file("small-q8-3.gguf", &n3);
    CHECK(b1 && b3 && n1 == n3 && !memcmp(b1, b3, n1), "1 and 3 threads write the same file");
    free(b1);
    free(b3);

    gguf_file *in = NULL, *out = NULL;
    if (gguf_open("small-in.gguf", &in, &err) || gguf_open("small-q8-1.gguf", &out, &err)) {
        CHECK(false, "%s", err.message);
        gguf_close(in);
        return;
    }
    /* F16 weights: converted to f32 exactly, then quantized like any f32 row. */
    const gguf_tensor *q = gguf_find_tensor(out, "blk.0.attn_q.weight");
    const gguf_tensor *q_in = gguf_find_tensor(in, "blk.0.attn_q.weight");
    CHECK(q && q->type == CERA_TYPE_Q8_0, "the F16 matrix becomes q8_0");
    if (q && q_in) {
        float x[COLS * 3];
        uint8_t want[34 * 2 * 3];
        cera_type_get(CERA_TYPE_F16)->to_float(q_in->data, x, COLS * 3);
        cera_quantize_rows(CERA_TYPE_Q8_0, x, want, 3, COLS, 2);
        CHECK(q->nbytes == sizeof want && !memcmp(q->data, want, sizeof want),
              "F16 input quantized as its values");
    }
    const gguf_tensor *nrm = gguf_find_tensor(out, "blk.0.attn_norm.weight");
    const gguf_tensor *nrm_in = gguf_find_tensor(in, "blk.0.attn_norm.weight");
    CHECK(nrm && nrm->type == CERA_TYPE_F32, "the BF16 norm becomes F32");
    if (nrm && nrm_in && nrm->type == CERA_TYPE_F32) {
        int bad = 0;
        for (int i = 0; i < COLS; i++) {
            cera_bf16 h;
            memcpy(&h, (const uint8_t *)nrm_in->data + 2 * i, 2);
            bad += ((const float *)nrm->data)[i] != cera_bf16_to_f32(h);
        }
        CHECK(bad == 0, "the norm's F32 values are its BF16 values (%d differ)", bad);
    }
    const gguf_tensor *router = gguf_find_tensor(out, "blk.0.ffn_gate_inp.weight");
    CHECK(router && router->type == CERA_TYPE_F32 &&
              !memcmp(router->data, gguf_find_tensor(in, "blk.0.ffn_gate_inp.weight")->data, COLS * 4 * 4),
          "the MoE router stays F32, untouched (as llama-quantize)");
    const gguf_tensor *exps = gguf_find_tensor(out, "blk.0.ffn_up_exps.weight");
    CHECK(exps && exps->type == CERA_TYPE_Q8_0 && exps->n_dims == 3, "the 3-D expert tensor becomes q8_0");
    CHECK(get_u32(out, "general.file_type") == 7, "general.file_type replaced by MOSTLY_Q8_0 (7)");
    gguf_close(in);
    gguf_close(out);

    /* A matrix with rows of 100 (not whole q8_0 blocks of 32): rejected, naming the tensor. */
    write_small_model("small-bad.gguf", 100);
    unlink("small-bad-out.gguf");
    st = cera_quantize_model("small-bad.gguf", "small-bad-out.gguf", CERA_TYPE_Q8_0, 1, &err);
    CHECK(st == CERA_ERR_INVALID_ARG && strstr(err.message, "'blk.0.odd.weight'") &&
              strstr(err.message, "100 elements") && strstr(err.message, "q8_0") && strstr(err.message, "32"),
          "bad row length: status %d, message '%s'", (int)st, err.message);
    CHECK(!file_exists("small-bad-out.gguf"), "no output for a rejected model");
    st = cera_quantize_model("small-in.gguf", "small-in.gguf", CERA_TYPE_Q4_0, 1, &err);
    CHECK(st == CERA_ERR_INVALID_ARG, "the output may not overwrite the input");

    cera_type t;
    CHECK(cera_quantize_type_from_name("Q4_K_S", &t) && t == CERA_TYPE_Q4_K, "q4_k_s is q4_k");
    CHECK(!cera_quantize_type_from_name("q4_k_m", &t), "mixes are refused");
    CHECK(cera_quantize_type_from_name("q8_1", &t) && t == CERA_TYPE_Q8_1, "q8_1 is a target");
    unlink("small-in.gguf");
    unlink("small-bad.gguf");
    unlink("small-q8-1.gguf");
    unlink("small-q8-3.gguf");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH-TO-CERA\n", argv[0]);
        return 2;
    }
    cera_bin = argv[1];
    test_cli_matches_llama_quantize();
    test_cli_errors();
    test_library();
    return test_finish();
}
