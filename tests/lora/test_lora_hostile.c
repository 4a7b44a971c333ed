/*
 * test_lora_hostile.c — malformed and mismatched adapters give errors naming the
 * problem, never crashes: GGUF adapters built here with the GGUF writer (wrong type,
 * architecture, shapes, ranks, targets, factor types), safetensors files built by hand
 * (header length, JSON, dtype, shape, offsets, overlaps, duplicates), PEFT configs
 * (ranks, targets, refused options), then thousands of random byte mutations of valid
 * files of each kind. Valid variants (F16/BF16/Q8_0 factors, rsLoRA) load with the
 * right values, so every check can fail.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fp16.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "lora/lora.h"
#include "lora/safetensors.h"
#include "testutil.h"

static cera_model *M; /* stories260K: 64 embd, 8 heads, 4 KV heads, 172 ffn */

/* ---- GGUF adapters ------------------------------------------------------------------ */

typedef struct gspec {
    const char *general_type, *adapter_type, *arch;
    bool alpha_str, alora;
    const char *a_name, *b_name; /* NULL: omit */
    cera_type type;
    int64_t k, ra, rb, d;
    int dims3;
} gspec;

static gspec gdefault(void) {
    return (gspec){.general_type = "adapter",
                   .adapter_type = "lora",
                   .arch = "llama",
                   .a_name = "blk.0.attn_q.weight.lora_a",
                   .b_name = "blk.0.attn_q.weight.lora_b",
                   .type = CERA_TYPE_F32,
                   .k = 64,
                   .ra = 8,
                   .rb = 8,
                   .d = 64};
}

static float factor_value(int64_t i) { return (float)((i * 37) % 101 - 50) / 64.0f; }

/* Serializes an adapter per spec; *buf is malloc'ed. */
static void build_gguf(const gspec *s, void **buf, size_t *size) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", s->arch);
    if (s->general_type) gguf_writer_set_str(w, "general.type", s->general_type);
    if (s->adapter_type) gguf_writer_set_str(w, "adapter.type", s->adapter_type);
    if (s->alora) {
        const uint32_t inv[3] = {1, 2, 3};
        gguf_writer_set_arr(w, "adapter.alora.invocation_tokens", GGUF_TYPE_UINT32, inv, 3);
    }
    if (s->alpha_str)
        gguf_writer_set_str(w, "adapter.lora.alpha", "16");
    else
        gguf_writer_set_f32(w, "adapter.lora.alpha", 16.0f);
    static uint8_t data_a[1 << 16], data_b[1 << 16];
    const int64_t na = s->k * s->ra, nb = s->rb * s->d;
    float fa[4096], fb[4096];
    for (int64_t i = 0; i < na; i++) fa[i] = factor_value(i);
    for (int64_t i = 0; i < nb; i++) fb[i] = factor_value(i + 7);
    const cera_type_traits *tt = cera_type_get(s->type);
    if (s->type == CERA_TYPE_F32) {
        memcpy(data_a, fa, (size_t)na * 4);
        memcpy(data_b, fb, (size_t)nb * 4);
    } else if (tt && tt->from_float_ref) {
        tt->from_float_ref(fa, data_a, na);
        tt->from_float_ref(fb, data_b, nb);
    } else if (s->type == CERA_TYPE_F16 || s->type == CERA_TYPE_BF16) {
        for (int64_t i = 0; i < na; i++) {
            const uint16_t h = s->type == CERA_TYPE_F16 ? cera_f32_to_f16(fa[i]) : cera_f32_to_bf16(fa[i]);
            memcpy(data_a + 2 * i, &h, 2);
        }
        for (int64_t i = 0; i < nb; i++) {
            const uint16_t h = s->type == CERA_TYPE_F16 ? cera_f32_to_f16(fb[i]) : cera_f32_to_bf16(fb[i]);
            memcpy(data_b + 2 * i, &h, 2);
        }
    }
    const int64_t ne_a[3] = {s->k, s->ra, 2}, ne_b[3] = {s->rb, s->d, 1};
    cera_error err = {0};
    if (s->a_name) gguf_writer_add_tensor(w, s->a_name, s->type, s->dims3 ? 3 : 2, ne_a, data_a, &err);
    if (s->b_name) gguf_writer_add_tensor(w, s->b_name, s->type, 2, ne_b, data_b, &err);
    CHECK(gguf_writer_to_memory(w, buf, size, &err) == CERA_OK, "writer: %s", err.message);
    gguf_writer_free(w);
}

static cera_status load_gspec(const gspec *s, cera_adapter **out, cera_error *err) {
    void *buf = NULL;
    size_t size = 0;
    build_gguf(s, &buf, &size);
    gguf_file *f = NULL;
    cera_status st = gguf_open_memory(buf, size, &f, err);
    if (!st) st = cera_lora_load_gguf(M, f, "test.gguf", out, err);
    gguf_close(f);
    free(buf);
    return st;
}

static void expect_gguf(const gspec *s, cera_status want, const char *needle, const char *what) {
    cera_error err = {0};
    cera_adapter *a = NULL;
    const cera_status st = load_gspec(s, &a, &err);
    CHECK(st == want && (!needle || strstr(err.message, needle)), "%s: status %d (want %d), message '%s'",
          what, st, want, err.message);
    CHECK((st == CERA_OK) == (a != NULL), "%s: adapter returned on failure", what);
    cera_lora_release(a);
}

static void gguf_cases(void) {
    gspec s = gdefault();
    cera_error err = {0};
    cera_adapter *a = NULL;
    CHECK(load_gspec(&s, &a, &err) == CERA_OK, "valid adapter: %s", err.message);
    if (a) {
        const cera_lora_pair *p = cera_lora_pair_get(a, 0, CERA_PROJ_Q);
        CHECK(p && p->rank == 8 && p->a[5] == factor_value(5) && p->b[3] == factor_value(10),
              "valid adapter values");
        CHECK(a->alpha == 16.0f && a->n_pairs == 1, "valid adapter alpha %g pairs %d", a->alpha, a->n_pairs);
        CHECK(!cera_lora_pair_get(a, 1, CERA_PROJ_Q) && !cera_lora_pair_get(a, 0, CERA_PROJ_K),
              "untargeted pairs");
        cera_lora_release(a);
    }
    /* Factor types other than F32 convert to F32 on load. */
    const cera_type types[3] = {CERA_TYPE_F16, CERA_TYPE_BF16, CERA_TYPE_Q8_0};
    for (int i = 0; i < 3; i++) {
        s = gdefault();
        s.type = types[i];
        if (types[i] == CERA_TYPE_Q8_0) s.ra = s.rb = 32; /* lora_b rows (rank long) are whole Q8_0 blocks */
        a = NULL;
        CHECK(load_gspec(&s, &a, &err) == CERA_OK, "type %d: %s", types[i], err.message);
        if (!a) continue;
        const cera_lora_pair *p = cera_lora_pair_get(a, 0, CERA_PROJ_Q);
        double max_err = 0;
        for (int64_t j = 0; j < 64 * s.ra; j++) max_err = fmax(max_err, fabs(p->a[j] - factor_value(j)));
        CHECK(max_err < (types[i] == CERA_TYPE_F16 ? 1e-3 : 1e-2) && max_err >= 0, "type %d: max error %g",
              types[i], max_err);
        cera_lora_release(a);
    }

    s = gdefault(), s.general_type = NULL;
    expect_gguf(&s, CERA_ERR_FORMAT, "general.type", "missing general.type");
    s = gdefault(), s.general_type = "model";
    expect_gguf(&s, CERA_ERR_FORMAT, "general.type", "general.type model");
    s = gdefault(), s.adapter_type = "control_vector";
    expect_gguf(&s, CERA_ERR_UNSUPPORTED, "adapter.type", "adapter.type");
    s = gdefault(), s.arch = "qwen2";
    expect_gguf(&s, CERA_ERR_INVALID_ARG, "'qwen2'", "architecture");
    s = gdefault(), s.alora = true;
    expect_gguf(&s, CERA_ERR_UNSUPPORTED, "alora", "activated LoRA");
    s = gdefault(), s.alpha_str = true;
    expect_gguf(&s, CERA_ERR_FORMAT, "alpha", "alpha as a string");
    s = gdefault(), s.b_name = NULL;
    expect_gguf(&s, CERA_ERR_NOT_FOUND, "blk.0.attn_q.weight.lora_a", "missing lora_b");
    s = gdefault(), s.a_name = NULL;
    expect_gguf(&s, CERA_ERR_NOT_FOUND, "blk.0.attn_q.weight.lora_b", "missing lora_a");
    s = gdefault(), s.rb = 4;
    expect_gguf(&s, CERA_ERR_FORMAT, "rank", "rank mismatch");
    s = gdefault(), s.k = 32;
    expect_gguf(&s, CERA_ERR_INVALID_ARG, "blk.0.attn_q.weight", "wrong k");
    s = gdefault(), s.d = 32;
    expect_gguf(&s, CERA_ERR_INVALID_ARG, "blk.0.attn_q.weight", "wrong d");
    s = gdefault(), s.a_name = "output.weight.lora_a", s.b_name = "output.weight.lora_b";
    expect_gguf(&s, CERA_ERR_UNSUPPORTED, "'output.weight'", "unsupported target");
    s = gdefault(), s.a_name = "blk.0.attn_qq.weight.lora_a", s.b_name = "blk.0.attn_qq.weight.lora_b";
    expect_gguf(&s, CERA_ERR_UNSUPPORTED, "blk.0.attn_qq.weight", "unknown target");
    s = gdefault(), s.a_name = "blk.0.attn_q.weight.lora_c";
    expect_gguf(&s, CERA_ERR_FORMAT, "lora_c", "unknown suffix");
    s = gdefault(), s.a_name = "blk.99.attn_q.weight.lora_a", s.b_name = "blk.99.attn_q.weight.lora_b";
    expect_gguf(&s, CERA_ERR_INVALID_ARG, "layer 99", "layer out of range");
    s = gdefault(), s.type = CERA_TYPE_Q4_0;
    expect_gguf(&s, CERA_ERR_UNSUPPORTED, "q4_0", "q4_0 factors");
    s = gdefault(), s.dims3 = 1;
    expect_gguf(&s, CERA_ERR_FORMAT, "dimensions", "3-D factor");
    s = gdefault(), s.a_name = NULL, s.b_name = NULL;
    expect_gguf(&s, CERA_ERR_NOT_FOUND, "no LoRA tensors", "empty adapter");
    /* Norm tensors are skipped as llama.cpp does; with nothing else it is still empty. */
    s = gdefault(), s.a_name = "blk.0.attn_norm.weight", s.b_name = NULL;
    expect_gguf(&s, CERA_ERR_NOT_FOUND, "no LoRA tensors", "norm only");
}

/* ---- safetensors ---------------------------------------------------------------------- */

/* A file from a header text and n data bytes (0x3f pattern); *size set. */
static uint8_t *st_build(const char *header, size_t data_len, uint64_t hlen_override, size_t *size) {
    const size_t hlen = strlen(header);
    *size = 8 + hlen + data_len;
    uint8_t *b = malloc(*size);
    const uint64_t h = hlen_override ? hlen_override : hlen;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(h >> (8 * i));
    memcpy(b + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) b[8 + hlen + i] = (uint8_t)(i * 13);
    return b;
}

static void expect_st(const char *header, size_t data_len, uint64_t hlen_override, cera_status want,
                      const char *needle) {
    size_t size;
    uint8_t *b = st_build(header, data_len, hlen_override, &size);
    cera_error err = {0};
    safetensors_file *f = NULL;
    const cera_status st = safetensors_open_memory(b, size, &f, &err);
    CHECK(st == want && (!needle || strstr(err.message, needle)),
          "safetensors '%.60s': status %d (want %d) '%s'", header, st, want, err.message);
    if (!st && f)
        for (size_t i = 0; i < f->n_tensors; i++)
            CHECK((const uint8_t *)f->tensors[i].data + f->tensors[i].nbytes <= b + size,
                  "data inside the file");
    safetensors_close(f);
    free(b);
}

static void safetensors_cases(void) {
    size_t size;
    uint8_t *b =
        st_build("{\"__metadata__\":{\"format\":\"pt\"},\"x\":{\"dtype\":\"F16\",\"shape\":[2,3],"
                 "\"data_offsets\":[8,20]},\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"z\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[20,20]}}",
                 20, 0, &size);
    cera_error err = {0};
    safetensors_file *f = NULL;
    CHECK(safetensors_open_memory(b, size, &f, &err) == CERA_OK, "valid safetensors: %s", err.message);
    if (f) {
        const safetensors_tensor *x = safetensors_find(f, "x"), *y = safetensors_find(f, "y");
        CHECK(f->n_tensors == 3 && x && y && !safetensors_find(f, "__metadata__"),
              "valid safetensors: tensors");
        CHECK(x && x->dtype == SAFETENSORS_F16 && x->n_dims == 2 && x->shape[0] == 2 && x->shape[1] == 3 &&
                  x->nbytes == 12 && x->data == b + size - 12,
              "valid safetensors: x");
        CHECK(y && y->dtype == SAFETENSORS_F32 && y->offset == 0 && y->nbytes == 8, "valid safetensors: y");
        safetensors_close(f);
    }
    free(b);

    expect_st("{}", 0, 0, CERA_OK, NULL);
    expect_st("", 0, 0, CERA_ERR_FORMAT, "header");
    expect_st("{}", 0, 1000, CERA_ERR_FORMAT, "exceeds");
    expect_st("{}", 0, UINT64_MAX, CERA_ERR_FORMAT, "exceeds");
    expect_st("{\"a\":", 0, 0, CERA_ERR_FORMAT, "JSON");
    expect_st("[1,2]", 0, 0, CERA_ERR_FORMAT, "object");
    expect_st("{\"__metadata__\":[1]}", 0, 0, CERA_ERR_FORMAT, "__metadata__");
    expect_st("{\"a\":1}", 0, 0, CERA_ERR_FORMAT, "'a'");
    expect_st("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, CERA_ERR_FORMAT, "dtype");
    expect_st("{\"a\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, CERA_ERR_UNSUPPORTED,
              "F99");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, CERA_ERR_FORMAT,
              "shape");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, 0, CERA_ERR_FORMAT,
              "shape");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":\"1\",\"data_offsets\":[0,4]}}", 4, 0, CERA_ERR_FORMAT,
              "shape");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0,
              CERA_ERR_UNSUPPORTED, "dimensions");
    expect_st(
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", 4,
        0, CERA_ERR_FORMAT, "overflow");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, 0, CERA_ERR_FORMAT,
              "outside");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 4, 0, CERA_ERR_FORMAT,
              "outside");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, 0, CERA_ERR_FORMAT,
              "offsets");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, 0, CERA_ERR_FORMAT,
              "bytes");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              8, 0, CERA_ERR_FORMAT, "overlap");
    expect_st("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              8, 0, CERA_ERR_FORMAT, "twice");
    /* Short files. */
    uint8_t tiny[5] = {1, 0, 0, 0, 0};
    f = NULL;
    CHECK(safetensors_open_memory(tiny, sizeof tiny, &f, &err) == CERA_ERR_FORMAT && !f, "5-byte file");
    CHECK(safetensors_open_memory(NULL, 0, &f, &err) == CERA_ERR_FORMAT && !f, "empty file");
    CHECK(safetensors_open("/nonexistent/x.safetensors", &f, &err) == CERA_ERR_IO &&
              strstr(err.message, "x.safetensors"),
          "missing file: %s", err.message);
}

/* ---- PEFT ------------------------------------------------------------------------------- */

/* A PEFT pair for layer 0's projection p with ranks ra (A) / rb (B) and k, d; dtype name. */
static uint8_t *peft_st(const char *mod, int ra, int rb, int64_t k, int64_t d, const char *dtype,
                        size_t *size) {
    const size_t es = !strcmp(dtype, "F32") ? 4 : 2;
    const size_t na = (size_t)(ra * k) * es, nb = (size_t)(rb * d) * es;
    char header[1024];
    snprintf(header, sizeof header,
             "{\"base_model.model.model.layers.0.%s.lora_A.weight\":{\"dtype\":\"%s\",\"shape\":[%d,%lld],"
             "\"data_offsets\":[0,%zu]},"
             "\"base_model.model.model.layers.0.%s.lora_B.weight\":{\"dtype\":\"%s\",\"shape\":[%lld,%d],"
             "\"data_offsets\":[%zu,%zu]}}",
             mod, dtype, ra, (long long)k, na, mod, dtype, (long long)d, rb, na, na + nb);
    uint8_t *b = st_build(header, na + nb, 0, size);
    /* small finite values in every dtype: write 0x3c00 (1.0 in F16) / 1.0f patterns */
    uint8_t *data = b + *size - (na + nb);
    for (size_t i = 0; i < na + nb; i += es) {
        const float v = factor_value((int64_t)(i / es));
        if (es == 4)
            memcpy(data + i, &v, 4);
        else {
            const uint16_t h = !strcmp(dtype, "F16") ? cera_f32_to_f16(v) : cera_f32_to_bf16(v);
            memcpy(data + i, &h, 2);
        }
    }
    return b;
}

static cera_status load_peft(const char *config, const uint8_t *st, size_t st_size, cera_adapter **a,
                             cera_error *err) {
    safetensors_file *f = NULL;
    cera_status s = safetensors_open_memory(st, st_size, &f, err);
    if (!s) s = cera_lora_load_peft(M, config, strlen(config), f, "test.peft", a, err);
    safetensors_close(f);
    return s;
}

static void expect_peft(const char *config, const char *mod, int ra, int rb, int64_t k, int64_t d,
                        const char *dt, cera_status want, const char *needle) {
    size_t size;
    uint8_t *st = peft_st(mod, ra, rb, k, d, dt, &size);
    cera_error err = {0};
    cera_adapter *a = NULL;
    const cera_status s = load_peft(config, st, size, &a, &err);
    CHECK(s == want && (!needle || strstr(err.message, needle)), "PEFT %s/%s: status %d (want %d) '%s'", mod,
          config, s, want, err.message);
    cera_lora_release(a);
    free(st);
}

static void peft_cases(void) {
    const char *ok = "{\"peft_type\":\"LORA\",\"r\":4,\"lora_alpha\":8,\"target_modules\":[\"v_proj\"]}";
    for (int i = 0; i < 3; i++) {
        const char *dt = i == 0 ? "F32" : i == 1 ? "F16" : "BF16";
        size_t size;
        uint8_t *st = peft_st("self_attn.v_proj", 4, 4, 64, 32, dt, &size);
        cera_error err = {0};
        cera_adapter *a = NULL;
        CHECK(load_peft(ok, st, size, &a, &err) == CERA_OK, "valid PEFT %s: %s", dt, err.message);
        if (a) {
            const cera_lora_pair *p = cera_lora_pair_get(a, 0, CERA_PROJ_V);
            CHECK(p && p->rank == 4 && p->k == 64 && p->d == 32 && fabsf(p->a[9] - factor_value(9)) < 1e-2f &&
                      a->alpha == 8.0f,
                  "valid PEFT %s values", dt);
            cera_lora_release(a);
        }
        free(st);
    }
    /* rsLoRA: alpha/√r, folded into the stored alpha so scale = alpha_eff / rank. */
    {
        size_t size;
        uint8_t *st = peft_st("mlp.down_proj", 4, 4, 172, 64, "F32", &size);
        cera_error err = {0};
        cera_adapter *a = NULL;
        CHECK(load_peft("{\"r\":4,\"lora_alpha\":8,\"use_rslora\":true,\"target_modules\":\"all-linear\"}",
                        st, size, &a, &err) == CERA_OK,
              "rsLoRA: %s", err.message);
        if (a) {
            const cera_lora_pair *p = cera_lora_pair_get(a, 0, CERA_PROJ_DOWN);
            CHECK(p && fabsf(cera_lora_scale(a, p, 1.0f) - 4.0f) < 1e-6f,
                  "rsLoRA scale %g (want 8/sqrt(4) = 4)", p ? cera_lora_scale(a, p, 1.0f) : -1);
            cera_lora_release(a);
        }
        free(st);
    }
    expect_peft("{\"r\":4,\"lora_alpha\":8", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_FORMAT,
                "JSON");
    expect_peft("[]", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_FORMAT, "object");
    expect_peft("{\"peft_type\":\"IA3\"}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_UNSUPPORTED,
                "LORA");
    expect_peft("{\"r\":8}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_FORMAT, "r = 8");
    expect_peft("{\"r\":-3}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_FORMAT, "\"r\"");
    expect_peft("{\"lora_alpha\":\"x\"}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_FORMAT,
                "lora_alpha");
    expect_peft("{\"target_modules\":[\"v_proj\",\"lm_head\"]}", "self_attn.v_proj", 4, 4, 64, 32, "F32",
                CERA_ERR_UNSUPPORTED, "'lm_head'");
    expect_peft("{\"target_modules\":[\"v_proj\",\"q_proj\"]}", "self_attn.v_proj", 4, 4, 64, 32, "F32",
                CERA_ERR_NOT_FOUND, "'q_proj'");
    expect_peft("{\"target_modules\":[\"q_proj\"]}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_FORMAT,
                "'v_proj'");
    expect_peft("{\"fan_in_fan_out\":true}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_UNSUPPORTED,
                "fan_in_fan_out");
    expect_peft("{\"use_dora\":true}", "self_attn.v_proj", 4, 4, 64, 32, "F32", CERA_ERR_UNSUPPORTED,
                "use_dora");
    expect_peft("{\"rank_pattern\":{\"q_proj\":8}}", "self_attn.v_proj", 4, 4, 64, 32, "F32",
                CERA_ERR_UNSUPPORTED, "rank_pattern");
    expect_peft("{}", "self_attn.v_proj", 4, 2, 64, 32, "F32", CERA_ERR_FORMAT, "rank");
    expect_peft("{}", "self_attn.v_proj", 4, 4, 32, 32, "F32", CERA_ERR_INVALID_ARG, "blk.0.attn_v.weight");
    expect_peft("{}", "self_attn.v_proj", 4, 4, 64, 64, "F32", CERA_ERR_INVALID_ARG, "blk.0.attn_v.weight");
    expect_peft("{}", "self_attn.w_proj", 4, 4, 64, 32, "F32", CERA_ERR_UNSUPPORTED, "w_proj");
    expect_peft("{}", "mlp.q_proj", 4, 4, 64, 32, "F32", CERA_ERR_UNSUPPORTED, "mlp.q_proj");
    expect_peft("{}", "self_attn.v_proj", 4, 4, 64, 32, "I16", CERA_ERR_UNSUPPORTED, "I16");
    /* q and k load (their B rows permuted for llama's rotary order). */
    expect_peft("{}", "self_attn.q_proj", 4, 4, 64, 64, "F32", CERA_OK, NULL);
    expect_peft("{}", "self_attn.k_proj", 4, 4, 64, 32, "BF16", CERA_OK, NULL);
}

/* ---- Random mutations ------------------------------------------------------------------ */

static void mutate(uint8_t *b, size_t n, test_rng *r) {
    const int k = 1 + (int)(test_rng_next(r) % 8);
    for (int i = 0; i < k; i++) {
        const size_t at = (size_t)(test_rng_next(r) % n);
        switch (test_rng_next(r) % 4) {
        case 0: b[at] ^= (uint8_t)(1u << (test_rng_next(r) % 8)); break;
        case 1: b[at] = (uint8_t)test_rng_next(r); break;
        case 2: b[at] = 0xff; break;
        default: b[at] = (uint8_t) "{}[]\",:0123456789"[test_rng_next(r) % 17]; break;
        }
    }
}

static void mutation_cases(void) {
    test_rng r = {0x10a5eedULL};
    /* GGUF adapters: parse, then load when the parse passes. */
    gspec s = gdefault();
    void *good;
    size_t size;
    build_gguf(&s, &good, &size);
    uint8_t *b = malloc(size);
    int loaded = 0, iters = 3000;
    for (int it = 0; it < iters; it++) {
        memcpy(b, good, size);
        mutate(b, size < 256 ? size : 256, &r); /* the header is where the structure is */
        gguf_file *f = NULL;
        cera_error err = {0};
        if (gguf_open_memory(b, size, &f, &err) == CERA_OK) {
            cera_adapter *a = NULL;
            if (cera_lora_load_gguf(M, f, "mutant", &a, &err) == CERA_OK) loaded++;
            cera_lora_release(a);
            gguf_close(f);
        }
    }
    CHECK(loaded < iters, "GGUF mutants: every one loaded (%d)", loaded);
    fprintf(stderr, "GGUF mutants: %d of %d loaded\n", loaded, iters);
    free(b);
    free(good);

    /* safetensors + PEFT. */
    uint8_t *st = peft_st("self_attn.k_proj", 4, 4, 64, 32, "F32", &size);
    b = malloc(size);
    loaded = 0;
    for (int it = 0; it < iters; it++) {
        memcpy(b, st, size);
        mutate(b, size < 400 ? size : 400, &r);
        cera_error err = {0};
        cera_adapter *a = NULL;
        if (load_peft("{\"r\":4}", b, size, &a, &err) == CERA_OK) loaded++;
        cera_lora_release(a);
    }
    CHECK(loaded < iters, "safetensors mutants: every one loaded (%d)", loaded);
    fprintf(stderr, "safetensors mutants: %d of %d loaded\n", loaded, iters);
    free(b);
    free(st);
}

int main(void) {
    gguf_file *f = NULL;
    static cera_model m;
    cera_error err = {0};
    if (gguf_open(shared_path("models/stories260K.gguf"), &f, &err) || cera_model_load(f, &m, &err)) {
        CHECK(0, "stories260K: %s", err.message);
        return test_finish();
    }
    M = &m;
    gguf_cases();
    safetensors_cases();
    peft_cases();
    mutation_cases();
    cera_model_free(&m);
    gguf_close(f);
    return test_finish();
}
