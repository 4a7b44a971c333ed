/*
 * test_gguf_files.c — reading real GGUF files written by llama.cpp's tools.
 *
 * stories260K.gguf: header counts, metadata values, tensor shapes, offsets and the
 * first weights, as read by an independent byte-level parse of the file. Then every
 * GGUF file in the shared folder (models, goldens, tokenizer vocabularies) and the
 * test model from scripts/setup.sh (when fetched) must open, with each tensor found
 * by name, aligned and inside the file.
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"

static void check_stories(void) {
    const char *path = shared_path("models/stories260K.gguf");
    gguf_file *f = NULL;
    cera_error err = {0};
    CHECK(gguf_open(path, &f, &err) == CERA_OK, "%s", err.message);
    if (!f) return;
    CHECK(f->version == 3 && f->n_kv == 19 && f->n_tensors == 48, "header v%u %llu kv %llu tensors",
          f->version, (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
    CHECK(f->alignment == 32 && f->data_offset == 14176 && f->size == 1185376, "data at %llu",
          (unsigned long long)f->data_offset);

    gguf_str s;
    CHECK(gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama"), "architecture");
    CHECK(gguf_get_str(f, "tokenizer.ggml.model", &s) && gguf_str_eq(s, "llama"), "tokenizer model");
    uint32_t u;
    CHECK(gguf_get_u32(f, "llama.embedding_length", &u) && u == 64, "n_embd");
    CHECK(gguf_get_u32(f, "llama.block_count", &u) && u == 5, "n_layer");
    CHECK(gguf_get_u32(f, "llama.context_length", &u) && u == 2048, "n_ctx");
    CHECK(gguf_get_u32(f, "llama.feed_forward_length", &u) && u == 172, "n_ff");
    CHECK(gguf_get_u32(f, "llama.attention.head_count", &u) && u == 8, "n_head");
    CHECK(gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == 4, "n_head_kv");
    CHECK(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u) && u == 1, "bos");
    CHECK(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &u) && u == UINT32_MAX, "pad");
    int32_t i32;
    CHECK(!gguf_get_i32(f, "tokenizer.ggml.padding_token_id", &i32), "0xffffffff must not fit int32");
    float eps;
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) && fabsf(eps - 1e-5f) < 1e-10f,
          "eps");

    const gguf_array *a;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", &a) && a->type == GGUF_TYPE_STRING && a->n == 512,
          "tokens");
    if (a->n == 512) {
        CHECK(gguf_str_eq(a->u.strs[0], "<unk>") && gguf_str_eq(a->u.strs[1], "<s>") &&
                  gguf_str_eq(a->u.strs[2], "</s>") && gguf_str_eq(a->u.strs[3], "<0x00>"),
              "first tokens");
    }
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", &a) && a->type == GGUF_TYPE_INT32 && a->n == 512 &&
              gguf_arr_i64(a, 0) == 2 && gguf_arr_i64(a, 1) == 3 && gguf_arr_i64(a, 3) == 6,
          "token types");
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", &a) && a->type == GGUF_TYPE_FLOAT32 && a->n == 512,
          "scores");

    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t == &f->tensors[0] && t->type == CERA_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 &&
              t->ne[1] == 512 && t->offset == 0 && t->nbytes == 131072,
          "token_embd");
    if (t) {
        float w[2];
        memcpy(w, t->data, sizeof w);
        CHECK(fabsf(w[0] - -0.29474878f) < 1e-7f && fabsf(w[1] - 0.56189561f) < 1e-7f, "token_embd[0..1]");
    }
    t = gguf_find_tensor(f, "output_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->ne[1] == 1 && t->offset == 131072, "output_norm");
    if (t) {
        float w[2];
        memcpy(w, t->data, sizeof w);
        CHECK(fabsf(w[0] - 2.45830894f) < 1e-6f && fabsf(w[1] - 1.36732268f) < 1e-6f, "output_norm[0..1]");
    }
    t = gguf_find_tensor(f, "blk.4.ffn_norm.weight");
    CHECK(t && t == &f->tensors[47] && t->offset == 1170944, "last tensor");
    t = gguf_find_tensor(f, "blk.2.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64, "ffn_down shape");
    CHECK(!gguf_find_tensor(f, "blk.5.ffn_norm.weight"), "absent tensor");
    gguf_close(f);
}

/* Opens a file and checks the invariants gguf_open promises. */
static void check_any(const char *path) {
    gguf_file *f = NULL;
    cera_error err = {0};
    CHECK(gguf_open(path, &f, &err) == CERA_OK, "%s", err.message);
    if (!f) return;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        char key[256];
        gguf_str_copy(f->kv[i].key, key, sizeof key);
        CHECK(gguf_find_kv(f, key) == &f->kv[i], "%s: find key '%s'", path, key);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[256];
        CHECK(gguf_find_tensor(f, gguf_str_copy(t->name, name, sizeof name)) == t, "%s: find %s", path, name);
        CHECK(t->offset % f->alignment == 0 && f->data_offset + t->offset + t->nbytes <= f->size,
              "%s: %s placement", path, name);
    }
    gguf_close(f);
}

static int check_dir(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        check_any(path);
        n++;
    }
    closedir(d);
    return n;
}

/* The same file from a memory buffer, and relabelled as version 2 (same layout). */
static void check_memory_and_v2(void) {
    size_t size = 0;
    uint8_t *data = read_file(shared_path("models/stories260K.gguf"), &size);
    CHECK(data != NULL, "read stories260K");
    if (!data) return;
    gguf_file *a = NULL, *b = NULL;
    cera_error err = {0};
    CHECK(gguf_open(shared_path("models/stories260K.gguf"), &a, &err) == CERA_OK, "%s", err.message);
    data[4] = 2;
    CHECK(gguf_open_memory(data, size, &b, &err) == CERA_OK, "%s", err.message);
    if (a && b) {
        CHECK(b->version == 2 && b->n_kv == a->n_kv && b->n_tensors == a->n_tensors &&
                  b->data_offset == a->data_offset,
              "v2 header");
        for (uint64_t i = 0; i < a->n_tensors; i++) {
            const gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
            CHECK(x->offset == y->offset && x->nbytes == y->nbytes && x->type == y->type &&
                      !memcmp(x->ne, y->ne, sizeof x->ne) && !memcmp(x->data, y->data, x->nbytes),
                  "tensor %llu differs between mmap and memory", (unsigned long long)i);
        }
    }
    gguf_close(a);
    gguf_close(b);
    free(data);
}

int main(void) {
    check_stories();
    check_memory_and_v2();
    int n =
        check_dir(shared_path("models")) + check_dir(shared_path("golden")) + check_dir(shared_path("vocab"));
    CHECK(n >= 10, "only %d shared GGUF files found", n);
    const char *smol = models_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (file_exists(smol)) {
        gguf_file *f = NULL;
        cera_error err = {0};
        CHECK(gguf_open(smol, &f, &err) == CERA_OK, "%s", err.message);
        if (f) {
            gguf_str s;
            CHECK(f->n_tensors == 272 && gguf_get_str(f, "general.architecture", &s) &&
                      gguf_str_eq(s, "llama"),
                  "SmolLM2 header");
            const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_q.weight");
            CHECK(t && t->type == CERA_TYPE_Q4_1 && t->ne[0] == 576 && t->ne[1] == 576, "SmolLM2 attn_q");
            gguf_close(f);
        }
    }
    printf("%d shared GGUF files opened\n", n);
    return test_finish();
}
