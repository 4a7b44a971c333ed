/*
 * test_hostile_model.c — crafted models, adapters and arguments through the public API
 * and the CLI (issue 14):
 *   - F1/F2: a NaN weight, a NaN adapter or --lora-scaled A 1e38 make the eval fail with
 *     "non-finite logits" (CLI exit 1), not NaN logits and token 0 forever (and no undefined
 *     behaviour on the way: the sanitizer build runs this too);
 *   - F3: --temp 1e-38 samples as greedy;
 *   - F9: every getter takes a NULL engine or session and returns cera.h's value;
 *   - F10: reaching the context limit says so and names -c;
 *   - F11: block_count below the file's blocks and an unknown tensor are errors naming both;
 *   - F12: a token type outside 0..6, or no text token at all, is an error;
 *   - F14: logit biases banning every token are refused by session create / set_sampler;
 *   - F15: a tensor name holding an escape sequence reaches the message escaped;
 *   - F16/F17: a vocabulary-only model, a NUL in the architecture, -c above the trained
 *     context and n_predict < -1 each get a message naming the problem.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cera.h"
#include "core/error.h"
#include "hostile_util.h"
#include "testutil.h"

#define LIMIT 60.0
#define CPU   "--device", "cpu" /* see non_finite */

static const char *dir, *model, *log_path;
static gguf_file *base;

/* base with tensor `name` patched (element 7 set to v) written to dir/file. */
static const char *patched(const gguf_file *f, const char *name, float v, const char *file) {
    size_t n = 0;
    float *d = hostile_tensor_copy(f, name, &n);
    CHECK(d && n > 32, "tensor %s", name);
    if (d) d[7] = v;
    gguf_writer *w = hostile_writer_from(f, name, d);
    const char *out = hostile_path(dir, file);
    cera_error err;
    CHECK(w && gguf_writer_write(w, out, &err) == CERA_OK, "write %s", out);
    gguf_writer_free(w);
    free(d);
    return out;
}

/* Writes w to dir/file and opens an engine on it: the status, err filled. */
static cera_status open_variant(gguf_writer *w, const char *file, cera_error *err) {
    const char *out = hostile_path(dir, file);
    cera_status st = gguf_writer_write(w, out, err);
    gguf_writer_free(w);
    if (st) return st;
    cera_engine *e = NULL;
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 1;
    st = cera_engine_open(out, &ep, &e, err);
    cera_engine_close(e);
    return st;
}

/* The non-finite checks run on the CPU backend: on CUDA a last row left on the device is
 * checked only when the host's sampler reads it (SECURITY.md), so these runs say --device cpu. */
static void non_finite(void) {
    const char *nan_model = patched(base, "blk.0.ffn_gate.weight", NAN, "nan.gguf");
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 1;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    cera_session *s = NULL;
    cera_error err;
    CHECK(cera_engine_open(nan_model, &ep, &e, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_session_create(e, NULL, &s, &err) == CERA_OK, "session: %s", err.message);
    const cera_token toks[3] = {1, 400, 401};
    CHECK(cera_session_eval(s, toks, 3, false, &err) == CERA_ERR_FORMAT && strstr(err.message, "non-finite"),
          "a NaN weight: eval says %s", err.message);
    CHECK(cera_session_n_past(s) == 0, "the failed eval was rolled back (%d)", cera_session_n_past(s));
    CHECK(cera_session_eval(s, toks, 3, true, &err) == CERA_ERR_FORMAT, "all logits too");
    CHECK(cera_session_sample(s) == -1, "nothing to sample after a failed eval");
    cera_session_free(s);
    cera_engine_close(e);

    const char *run[] = {"run", "-m",     nan_model, "-p",       "Once upon", "-n",
                         "4",   "--temp", "0",       "--device", "cpu",       NULL};
    CHECK(hostile_run(run, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "non-finite logits"),
          "run with a NaN weight exits 1 naming non-finite logits");
    const char *lg[] = {"logits", "-m", nan_model, "-p", "Once", "-o", hostile_path(dir, "nan.f32"), NULL};
    CHECK(hostile_run(lg, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "non-finite logits"),
          "logits with a NaN weight exits 1");

    /* a NaN adapter, and a finite adapter at a scale that overflows */
    gguf_file *af = NULL;
    CHECK(gguf_open(shared_path("golden/lora-stories-a.gguf"), &af, &err) == CERA_OK, "adapter: %s",
          err.message);
    const char *bname = NULL;
    for (uint64_t i = 0; af && i < af->n_tensors && !bname; i++)
        if (af->tensors[i].type == CERA_TYPE_F32 && af->tensors[i].nbytes > 64) {
            static char nb[256];
            gguf_str_copy(af->tensors[i].name, nb, sizeof nb);
            bname = nb;
        }
    CHECK(bname != NULL, "an F32 adapter tensor");
    if (af && bname) {
        const char *nan_ad = patched(af, bname, NAN, "nan-adapter.gguf");
        const char *r2[] = {"run",    "-m", model,    "-p",   "Once upon", "-n", "4",
                            "--temp", "0",  "--lora", nan_ad, CPU,         NULL};
        CHECK(hostile_run(r2, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "non-finite logits"),
              "run with a NaN adapter exits 1 naming non-finite logits");
    }
    gguf_close(af);
    const char *lora_a = shared_path("golden/lora-stories-a.gguf");
    const char *r3[] = {"run",    "-m", model,           "-p",   "Once", "-n", "4",
                        "--temp", "0",  "--lora-scaled", lora_a, "1e38", CPU,  NULL};
    CHECK(hostile_run(r3, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "non-finite logits"),
          "--lora-scaled A 1e38 exits 1 naming non-finite logits");
}

/* A quantized model with one block's F16 scale made NaN: the quantized paths (the dot
 * kernels, the activations quantized for them) meet NaN too. */
static void non_finite_quantized(void) {
    const char *src = shared_path("golden/synth-llama-q8_0.gguf");
    gguf_file *f = NULL;
    cera_error err;
    CHECK(gguf_open(src, &f, &err) == CERA_OK, "open %s: %s", src, err.message);
    if (!f) return;
    const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_q.weight");
    const size_t at = t ? (size_t)((const uint8_t *)t->data - f->base) : 0;
    gguf_close(f);
    size_t n = 0;
    uint8_t *d = read_file(src, &n);
    CHECK(d && t && at + 2 < n, "the tensor's bytes");
    if (!d || !at) return free(d);
    d[at] = 0x00, d[at + 1] = 0x7e; /* the first block's scale: an F16 NaN */
    const char *out = hostile_path(dir, "q8-nan.gguf");
    CHECK(hostile_write(out, d, n), "write %s", out);
    free(d);
    const char *run[] = {"run", "-m", out, "-p", "Once upon a time", "-n", "4", "--temp", "0", CPU, NULL};
    CHECK(hostile_run(run, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "non-finite logits"),
          "a NaN scale in a q8_0 model: exit 1 naming non-finite logits");
}

static void tiny_temperature(void) {
    const char *greedy = hostile_path(dir, "greedy.ids"), *tiny = hostile_path(dir, "tiny.ids");
    const char *a[] = {"run",   "-m",     model, "-p", "Once upon a time", "-n", "24",
                       "--ids", "--temp", "0",   NULL};
    const char *b[] = {"run",   "-m",     model,   "-p", "Once upon a time", "-n", "24",
                       "--ids", "--temp", "1e-38", NULL};
    CHECK(hostile_run(a, LIMIT, NULL, greedy) == 0, "greedy run");
    CHECK(hostile_run(b, LIMIT, NULL, tiny) == 0, "--temp 1e-38 run");
    size_t na = 0, nb = 0;
    int32_t *ia = read_ints(greedy, &na), *ib = read_ints(tiny, &nb);
    /* the files end with the speeds line (stderr): compare the ids, which come first */
    CHECK(ia && ib && na >= 24 && nb >= 24 && !memcmp(ia, ib, 24 * sizeof *ia), "--temp 1e-38 is not greedy");
    free(ia);
    free(ib);
}

static void null_objects(void) {
    CHECK(cera_engine_n_vocab(NULL) == 0 && cera_engine_n_ctx(NULL) == 0 &&
              cera_engine_n_ctx_train(NULL) == 0,
          "NULL engine sizes");
    CHECK(cera_engine_arch(NULL) == NULL, "NULL engine arch");
    CHECK(cera_engine_device(NULL) == CERA_DEVICE_AUTO, "NULL engine device");
    CHECK(cera_engine_bos(NULL) == -1 && cera_engine_eos(NULL) == -1 && !cera_engine_is_eog(NULL, 2),
          "NULL engine tokens");
    char buf[8];
    CHECK(cera_token_to_piece(NULL, 1, buf, sizeof buf, false) == -1, "NULL engine piece");
    CHECK(cera_session_n_past(NULL) == 0 && cera_session_sample(NULL) == -1 &&
              cera_session_logits(NULL, 0) == NULL,
          "NULL session");
    CHECK(cera_session_n_adapters(NULL) == 0 && !cera_session_remove_adapter(NULL, NULL),
          "NULL session adapters");
    cera_error err;
    size_t n = 0;
    CHECK(cera_tokenize(NULL, "a", 1, true, true, NULL, 0, &n, &err) == CERA_ERR_INVALID_ARG,
          "NULL tokenize");
    CHECK(cera_session_eval(NULL, NULL, 0, false, &err) == CERA_ERR_INVALID_ARG, "NULL eval");
    CHECK(cera_generate(NULL, NULL, 0, NULL, NULL, NULL, NULL, &err) == CERA_ERR_INVALID_ARG,
          "NULL generate");
    CHECK(cera_session_set_sampler(NULL, NULL, &err) == CERA_ERR_INVALID_ARG, "NULL set_sampler");
    CHECK(cera_session_truncate(NULL, 0, &err) == CERA_ERR_INVALID_ARG, "NULL truncate");
    CHECK(cera_session_set_adapter(NULL, NULL, 1, &err) == CERA_ERR_INVALID_ARG, "NULL set_adapter");
    cera_adapter *a = NULL;
    CHECK(cera_adapter_load(NULL, model, &a, &err) == CERA_ERR_INVALID_ARG, "NULL adapter_load");
    cera_session *s = NULL;
    CHECK(cera_session_create(NULL, NULL, &s, &err) == CERA_ERR_INVALID_ARG, "NULL session_create");
    cera_session_free(NULL);
    cera_engine_close(NULL);
    cera_adapter_free(NULL);
    /* a real engine: the piece call with no buffer asks for the length */
    cera_engine_params ep = cera_engine_default_params();
    ep.n_threads = 1;
    ep.device = CERA_DEVICE_CPU;
    cera_engine *e = NULL;
    CHECK(cera_engine_open(model, &ep, &e, &err) == CERA_OK, "open: %s", err.message);
    CHECK(cera_engine_device(e) == CERA_DEVICE_CPU, "engine device %d", (int)cera_engine_device(e));
    CHECK(cera_token_to_piece(e, 400, NULL, 0, false) > 0, "length query");
    CHECK(cera_token_to_piece(e, 400, NULL, 4, false) == -1, "NULL buffer with a capacity");
    CHECK(cera_engine_n_ctx_train(e) == 2048, "trained context %d", cera_engine_n_ctx_train(e));

    /* F14: nothing left to sample */
    static cera_logit_bias ban[512];
    for (int i = 0; i < 512; i++) ban[i] = (cera_logit_bias){i, -INFINITY};
    cera_session_params sp = cera_session_default_params();
    sp.sampler.logit_bias = ban;
    sp.sampler.n_logit_bias = 512;
    CHECK(cera_session_create(e, &sp, &s, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "ban every token"),
          "every token banned at create: %s", err.message);
    CHECK(cera_session_create(e, NULL, &s, &err) == CERA_OK, "session: %s", err.message);
    CHECK(cera_session_set_sampler(s, &sp.sampler, &err) == CERA_ERR_INVALID_ARG,
          "every token banned at set");
    sp.sampler.n_logit_bias = 511; /* token 511 stays */
    sp.sampler.temp = 0;
    CHECK(cera_session_set_sampler(s, &sp.sampler, &err) == CERA_OK, "all but one banned: %s", err.message);
    const cera_token t[2] = {1, 400};
    CHECK(cera_session_eval(s, t, 2, false, &err) == CERA_OK, "eval: %s", err.message);
    CHECK(cera_session_sample(s) == 511, "the one token left is sampled");
    cera_generate_params gp = cera_generate_default_params();
    gp.n_predict = -5;
    CHECK(cera_generate(s, NULL, 0, &gp, NULL, NULL, NULL, &err) == CERA_ERR_INVALID_ARG &&
              strstr(err.message, "n_predict"),
          "n_predict -5: %s", err.message);
    cera_session_free(s);
    cera_engine_close(e);
}

static void context_limit(void) {
    const char *a[] = {"run", "-m", model, "-p", "Once upon a time", "-c", "16", "--temp", "0", NULL};
    CHECK(hostile_run(a, LIMIT, NULL, log_path) == 0 && hostile_file_has(log_path, "context limit") &&
              hostile_file_has(log_path, "-c N"),
          "run to the context limit names it and -c");
    const char *b[] = {"run", "-m",     model, "-p", "Once upon a time", "-c", "16", "-n",
                       "100", "--temp", "0",   NULL};
    CHECK(hostile_run(b, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "context limit"),
          "-n beyond the context exits 1");
    const char *c[] = {"run", "-m", model, "-p", "Once upon a time", "-c", "3", "--temp", "0", NULL};
    CHECK(hostile_run(c, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "-c N"),
          "a prompt longer than the context names -c");
    const char *d[] = {"run", "-m", model, "-p", "Once", "-c", "4096", "-n", "1", NULL};
    CHECK(hostile_run(d, LIMIT, NULL, log_path) == 0 && hostile_file_has(log_path, "trained on (2048)"),
          "-c above the trained context warns");
}

static void hparams_vs_tensors(void) {
    cera_error err;
    gguf_writer *w = hostile_writer_from(base, NULL, NULL);
    gguf_writer_set_u32(w, "llama.block_count", 4);
    CHECK(open_variant(w, "blocks4.gguf", &err) == CERA_ERR_FORMAT && strstr(err.message, "blk.4.") &&
              strstr(err.message, "block_count is 4"),
          "block_count 4 of 5: %s", err.message);
    w = hostile_writer_from(base, NULL, NULL);
    gguf_writer_set_u32(w, "llama.block_count", 6);
    CHECK(open_variant(w, "blocks6.gguf", &err) == CERA_ERR_NOT_FOUND && strstr(err.message, "blk.5.") &&
              strstr(err.message, "block_count is 6"),
          "block_count 6 of 5: %s", err.message);
    w = hostile_writer_from(base, NULL, NULL);
    const int64_t ne[1] = {64};
    gguf_writer_add_tensor(w, "bogus.weight", CERA_TYPE_F32, 1, ne, NULL, &err);
    CHECK(open_variant(w, "extra.gguf", &err) == CERA_ERR_FORMAT && strstr(err.message, "'bogus.weight'"),
          "an unknown tensor: %s", err.message);
    /* F15: a name that is an escape sequence */
    w = hostile_writer_from(base, NULL, NULL);
    gguf_writer_add_tensor(w, "\x1b[2J\x1b]0;pwned\x07", CERA_TYPE_F32, 1, ne, NULL, &err);
    CHECK(open_variant(w, "escape.gguf", &err) == CERA_ERR_FORMAT && !strchr(err.message, 0x1b) &&
              !strchr(err.message, 0x07) && strstr(err.message, "\\x1b[2J"),
          "a name with escape sequences is escaped: %s", err.message);
    const char *r[] = {"run", "-m", hostile_path(dir, "escape.gguf"), "-p", "hi", "-n", "1", NULL};
    CHECK(hostile_run(r, LIMIT, NULL, log_path) == 1 && hostile_file_has(log_path, "\\x1b[2J") &&
              !hostile_file_has(log_path, "\x1b"),
          "the CLI prints the name escaped");
    /* the helper itself: C0, DEL and UTF-8 C1 controls escaped, other UTF-8 kept */
    cera_error e2;
    cera_fail(&e2, CERA_ERR_FORMAT, "tensor '%s'", "a\x1b[31mb\x7f\xc2\x9b\xc3\xa9");
    CHECK(!strcmp(e2.message, "tensor 'a\\x1b[31mb\\x7f\\xc2\\x9b\xc3\xa9'"), "escaped: %s", e2.message);
    cera_error_prefix(&e2, "%s", "file\n");
    CHECK(!strncmp(e2.message, "file\\x0a: tensor", 16), "prefix escaped: %s", e2.message);
    /* F17: a NUL inside the architecture name */
    w = hostile_writer_from(base, NULL, NULL);
    gguf_value arch = {.type = GGUF_TYPE_STRING, .v.str = {7, "llama\0x"}};
    gguf_writer_set_value(w, (gguf_str){20, "general.architecture"}, &arch);
    CHECK(open_variant(w, "nul-arch.gguf", &err) == CERA_ERR_FORMAT && strstr(err.message, "NUL"),
          "a NUL in the architecture: %s", err.message);
    /* F16: a vocabulary-only file */
    cera_engine *e = NULL;
    CHECK(cera_engine_open(shared_path("vocab/ggml-vocab-llama-spm.gguf"), NULL, &e, &err) ==
                  CERA_ERR_FORMAT &&
              strstr(err.message, "no tensors"),
          "a vocabulary-only file: %s", err.message);
}

static void token_types(void) {
    const gguf_kv *kv = gguf_find_kv(base, "tokenizer.ggml.token_type");
    CHECK(kv && kv->value.type == GGUF_TYPE_ARRAY && kv->value.v.arr.type == GGUF_TYPE_INT32, "token types");
    if (!kv) return;
    const uint64_t n = kv->value.v.arr.n;
    int32_t *tt = malloc(n * sizeof *tt);
    memcpy(tt, kv->value.v.arr.u.raw, n * sizeof *tt);
    tt[300] = 99;
    gguf_writer *w = hostile_writer_from(base, NULL, NULL);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, tt, n);
    cera_error err;
    CHECK(open_variant(w, "type99.gguf", &err) == CERA_ERR_FORMAT &&
              strstr(err.message, "token 300 has type 99"),
          "a token type of 99: %s", err.message);
    for (uint64_t i = 0; i < n; i++) tt[i] = 5; /* all unused */
    w = hostile_writer_from(base, NULL, NULL);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, tt, n);
    CHECK(open_variant(w, "unused.gguf", &err) == CERA_ERR_FORMAT && strstr(err.message, "no token is text"),
          "every token unused: %s", err.message);
    free(tt);
}

int main(void) {
    dir = hostile_scratch("model");
    model = shared_path("models/stories260K.gguf");
    static char lp[1024];
    snprintf(lp, sizeof lp, "%s/log.txt", dir);
    log_path = lp;
    cera_error err;
    CHECK(gguf_open(model, &base, &err) == CERA_OK, "open %s: %s", model, err.message);
    if (!base) return test_finish();
    non_finite();
    non_finite_quantized();
    tiny_temperature();
    null_objects();
    context_limit();
    hparams_vs_tensors();
    token_types();
    gguf_close(base);
    return test_finish();
}
