/*
 * synth.c — `cera synth SHAPE TYPE -o OUT.gguf`: writes a random-weight model of a
 * real model's shape, for benchmarks and tests.
 *
 * Speed depends on shapes and types, not on weight values, so a random model of the
 * Llama-2-7B shape benchmarks like the real one without downloading it. The file has
 * the metadata llama.cpp expects for the architecture and a real tokenizer (the
 * llama-spm vocabulary from the shared folder, truncated or padded with filler tokens
 * to the shape's vocabulary size), so llama.cpp and cera load the same file.
 *
 * Weights are ~N(0, 0.02) (a sum of four uniforms: cheap and close enough), norms are
 * 1, every 2-D weight (and an MoE shape's 3-D expert tensors) is in TYPE (a row whose length
 * is not a multiple of TYPE's block falls back to Q8_0 or F16) and 1-D tensors stay F32; an
 * LFM2 shape's conv taps and router stay F32, as llama-quantize leaves them. Values depend only on the seed
 * and the tensor and row they belong to, never on the thread count.
 *
 * Memory stays bounded for any size, and each byte is written once: the GGUF writer
 * serializes the metadata and tensor infos of the model with every tensor shrunk to
 * one block (the header's length does not depend on the shapes, which are fixed-width
 * fields), the real shapes and data offsets are patched into those infos, and the
 * header is written followed by each tensor, generated and quantized in chunks of rows
 * by all threads and written in place. The finished file is then opened with the
 * validating GGUF reader, which checks the layout.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "core/fileio.h"
#include "gguf/gguf.h"
#include "tensor/types.h"

/* The routed experts of an MoE shape (lfm2moe): every block from n_dense_lead on has a
 * router, a selection bias and 3-D expert tensors instead of a dense FFN. */
typedef struct synth_moe {
    int n_expert, n_used, n_ff_exp, n_dense_lead;
} synth_moe;

typedef struct synth_shape {
    const char *name;
    const char *arch; /* "llama", "qwen2", "lfm2moe", "gemma3" */
    int n_vocab, n_embd, n_ff, n_head, n_head_kv, n_layer, n_ctx;
    float rms_eps, rope_base;
    bool tied;          /* no output.weight: the output reuses token_embd */
    bool qkv_bias;      /* qwen2's attn_{q,k,v}.bias */
    const char *blocks; /* LFM2 kinds, one letter per block: 'c' short conv, 'a' attention; NULL: llama */
    synth_moe moe;      /* n_expert 0: dense */
    int head_dim;       /* 0: n_embd / n_head */
    int window;         /* gemma3: the sliding layers' window (llama.cpp: every 6th layer global) */
} synth_shape;

static int64_t head_dim(const synth_shape *sh) {
    return sh->head_dim ? sh->head_dim : sh->n_embd / sh->n_head;
}
static bool is_gemma3(const synth_shape *sh) { return !strcmp(sh->arch, "gemma3"); }

#define LFM2_L_CACHE 3

static const synth_shape shapes[] = {
    /* name              arch     vocab   embd  ff     head kv layer ctx     eps   rope    tied  bias */
    {"test", "llama", 512, 256, 768, 8, 4, 2, 2048, 1e-5f, 10000.0f, false, false, NULL, {0}, 0, 0},
    {"test-qwen2", "qwen2", 512, 256, 768, 8, 4, 2, 2048, 1e-6f, 1000000.0f, true, true, NULL, {0}, 0, 0},
    {"llama2-7b",
     "llama",
     32000,
     4096,
     11008,
     32,
     32,
     32,
     4096,
     1e-5f,
     10000.0f,
     false,
     false,
     NULL,
     {0},
     0,
     0},
    {"llama-3.2-1b",
     "llama",
     128256,
     2048,
     8192,
     32,
     8,
     16,
     131072,
     1e-5f,
     500000.0f,
     true,
     false,
     NULL,
     {0},
     0,
     0},
    {"llama-3.1-8b",
     "llama",
     128256,
     4096,
     14336,
     32,
     8,
     32,
     131072,
     1e-5f,
     500000.0f,
     false,
     false,
     NULL,
     {0},
     0,
     0},
    /* the largest that one 141 GB GPU holds in Q4_0 (about 40 GB): the 70B-class shape */
    {"llama-3.1-70b",
     "llama",
     128256,
     8192,
     28672,
     64,
     8,
     80,
     131072,
     1e-5f,
     500000.0f,
     false,
     false,
     NULL,
     {0},
     0,
     0},
    {"tinyllama-1.1b",
     "llama",
     32000,
     2048,
     5632,
     32,
     4,
     22,
     2048,
     1e-5f,
     10000.0f,
     false,
     false,
     NULL,
     {0},
     0,
     0},
    {"qwen2.5-0.5b",
     "qwen2",
     151936,
     896,
     4864,
     14,
     2,
     24,
     32768,
     1e-6f,
     1000000.0f,
     true,
     true,
     NULL,
     {0},
     0,
     0},
    {"qwen2.5-7b",
     "qwen2",
     152064,
     3584,
     18944,
     28,
     4,
     28,
     32768,
     1e-6f,
     1000000.0f,
     false,
     true,
     NULL,
     {0},
     0,
     0},
    /* LFM2-MoE: a small test shape, and LFM2-8B-A1B's (the block kinds of its published config) */
    {"test-lfm2moe",
     "lfm2moe",
     512,
     256,
     512,
     8,
     4,
     4,
     2048,
     1e-5f,
     1000000.0f,
     false,
     false,
     "cacc",
     {8, 2, 128, 1},
     0,
     0},
    {"lfm2-8b-a1b",
     "lfm2moe",
     65536,
     2048,
     7168,
     32,
     8,
     24,
     128000,
     1e-5f,
     1000000.0f,
     true,
     false,
     "ccacccacccacccacccaccacc",
     {32, 4, 1792, 2},
     0,
     0},
    /* Gemma 3: Q/K norms, post-branch norms, GEGLU, head size 256, sliding windows of 512 */
    {"gemma-3-270m",
     "gemma3",
     262144,
     640,
     2048,
     4,
     1,
     18,
     32768,
     1e-6f,
     1000000.0f,
     true,
     false,
     NULL,
     {0},
     256,
     512},
    {"gemma-3-1b",
     "gemma3",
     262144,
     1152,
     6912,
     4,
     1,
     26,
     32768,
     1e-6f,
     1000000.0f,
     true,
     false,
     NULL,
     {0},
     256,
     512},
};
#define N_SHAPES (sizeof shapes / sizeof shapes[0])

/* llama.cpp's llama_ftype for a file whose 2-D weights are all of one type. */
static int ftype_of(cera_type t) {
    switch (t) {
    case CERA_TYPE_F32: return 0;
    case CERA_TYPE_F16: return 1;
    case CERA_TYPE_Q4_0: return 2;
    case CERA_TYPE_Q4_1: return 3;
    case CERA_TYPE_Q8_0: return 7;
    case CERA_TYPE_Q5_0: return 8;
    case CERA_TYPE_Q5_1: return 9;
    case CERA_TYPE_Q2_K: return 10;
    case CERA_TYPE_Q3_K: return 11; /* Q3_K_S: every tensor Q3_K */
    case CERA_TYPE_Q4_K: return 14; /* Q4_K_S */
    case CERA_TYPE_Q5_K: return 16; /* Q5_K_S */
    case CERA_TYPE_Q6_K: return 18;
    case CERA_TYPE_IQ4_NL: return 25;
    case CERA_TYPE_IQ4_XS: return 30;
    case CERA_TYPE_BF16: return 32;
    default: return -1;
    }
}

/* ---- Random numbers ------------------------------------------------------------ */

static inline uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fills dst[n] with ~N(0, sigma): the sum of four 16-bit uniforms has mean 2 and
 * variance 1/3 (in units of 65536), so it is centred and scaled by sqrt(3) sigma. */
static void fill_normal(float *dst, int64_t n, uint64_t seed, float sigma) {
    uint64_t s = seed;
    const float scale = sigma * 1.7320508f / 65536.0f;
    for (int64_t i = 0; i < n; i++) {
        const uint64_t r = splitmix64(&s);
        const uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                             (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
        dst[i] = ((float)sum - 131070.0f) * scale;
    }
}

/* ---- Tensors to write ------------------------------------------------------------ */

typedef enum fill_kind { FILL_NORMAL, FILL_ONES } fill_kind;

typedef struct synth_tensor {
    char name[64];
    cera_type type;
    uint32_t n_dims;
    int64_t ne[3]; /* ne[0]: row length; ne[1]: rows (of one expert); ne[2]: experts (1 otherwise) */
    fill_kind fill;
    float sigma;
} synth_tensor;

/* TYPE for a 2-D weight, or the nearest type its row length allows. */
static cera_type weight_type(cera_type want, int64_t row) {
    if (row % cera_type_get(want)->block_size == 0) return want;
    if (row % 32 == 0) return CERA_TYPE_Q8_0;
    return CERA_TYPE_F16;
}

static int add_tensor3(synth_tensor *ts, int n, const char *name, cera_type type, uint32_t n_dims,
                       int64_t ne0, int64_t ne1, int64_t ne2, fill_kind fill) {
    synth_tensor *t = &ts[n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->type = n_dims == 1 ? CERA_TYPE_F32 : weight_type(type, ne0);
    t->fill = fill;
    t->sigma = 0.02f;
    return n + 1;
}

static int add_tensor(synth_tensor *ts, int n, const char *name, cera_type type, uint32_t n_dims, int64_t ne0,
                      int64_t ne1, fill_kind fill) {
    return add_tensor3(ts, n, name, type, n_dims, ne0, ne1, 1, fill);
}

/* Rows of a tensor over all its experts. */
static int64_t n_rows(const synth_tensor *t) { return t->ne[1] * t->ne[2]; }

/* An LFM2 block's tensors (lfm2moe: llama.cpp's loader order is irrelevant, names matter).
 * The conv taps and the router stay F32 (llama-quantize keeps them so); the selection bias
 * is drawn wide so that it changes which experts win. */
static int list_lfm2_block(const synth_shape *sh, cera_type type, int l, synth_tensor *ts, int n) {
    const int64_t e = sh->n_embd, hd = sh->n_embd / sh->n_head, kv = hd * sh->n_head_kv;
    char nm[64];
#define BLK(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), nm)
    n = add_tensor(ts, n, BLK("attn_norm.weight"), type, 1, e, 1, FILL_ONES);
    if (sh->blocks[l] == 'a') {
        n = add_tensor(ts, n, BLK("attn_q.weight"), type, 2, e, e, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("attn_k.weight"), type, 2, e, kv, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("attn_v.weight"), type, 2, e, kv, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("attn_output.weight"), type, 2, e, e, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("attn_q_norm.weight"), type, 1, hd, 1, FILL_ONES);
        n = add_tensor(ts, n, BLK("attn_k_norm.weight"), type, 1, hd, 1, FILL_ONES);
    } else {
        n = add_tensor(ts, n, BLK("shortconv.in_proj.weight"), type, 2, e, 3 * e, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("shortconv.out_proj.weight"), type, 2, e, e, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("shortconv.conv.weight"), type, 2, LFM2_L_CACHE, e, FILL_NORMAL);
        ts[n - 1].type = CERA_TYPE_F32;
        ts[n - 1].sigma = 0.3f; /* taps of a few positions: near 1/sqrt(l_cache) */
    }
    n = add_tensor(ts, n, BLK("ffn_norm.weight"), type, 1, e, 1, FILL_ONES);
    const synth_moe *mo = &sh->moe;
    if (mo->n_expert && l >= mo->n_dense_lead) {
        const int64_t ne = mo->n_expert, ff = mo->n_ff_exp;
        n = add_tensor(ts, n, BLK("ffn_gate_inp.weight"), type, 2, e, ne, FILL_NORMAL);
        ts[n - 1].type = CERA_TYPE_F32;
        ts[n - 1].sigma = 0.1f; /* router logits of order one: the sigmoid is not flat */
        n = add_tensor3(ts, n, BLK("ffn_gate_exps.weight"), type, 3, e, ff, ne, FILL_NORMAL);
        n = add_tensor3(ts, n, BLK("ffn_up_exps.weight"), type, 3, e, ff, ne, FILL_NORMAL);
        n = add_tensor3(ts, n, BLK("ffn_down_exps.weight"), type, 3, ff, e, ne, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("exp_probs_b.bias"), type, 1, ne, 1, FILL_NORMAL);
        ts[n - 1].sigma = 0.5f;
    } else {
        n = add_tensor(ts, n, BLK("ffn_gate.weight"), type, 2, e, sh->n_ff, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("ffn_up.weight"), type, 2, e, sh->n_ff, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("ffn_down.weight"), type, 2, sh->n_ff, e, FILL_NORMAL);
    }
#undef BLK
    return n;
}

/* The tensor list in llama.cpp's usual file order; returns the count. */
static int list_tensors(const synth_shape *sh, cera_type type, synth_tensor *ts) {
    const int64_t hd = head_dim(sh);
    const int64_t q = hd * sh->n_head, kv = hd * sh->n_head_kv;
    int n = 0;
    char nm[64];
    n = add_tensor(ts, n, "token_embd.weight", type, 2, sh->n_embd, sh->n_vocab, FILL_NORMAL);
    if (sh->blocks) {
        for (int l = 0; l < sh->n_layer; l++) n = list_lfm2_block(sh, type, l, ts, n);
        n = add_tensor(ts, n, "token_embd_norm.weight", type, 1, sh->n_embd, 1, FILL_ONES);
        if (!sh->tied) n = add_tensor(ts, n, "output.weight", type, 2, sh->n_embd, sh->n_vocab, FILL_NORMAL);
        return n;
    }
    for (int l = 0; l < sh->n_layer; l++) {
#define BLK(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), nm)
        n = add_tensor(ts, n, BLK("attn_norm.weight"), type, 1, sh->n_embd, 1, FILL_ONES);
        n = add_tensor(ts, n, BLK("attn_q.weight"), type, 2, sh->n_embd, q, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("attn_k.weight"), type, 2, sh->n_embd, kv, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("attn_v.weight"), type, 2, sh->n_embd, kv, FILL_NORMAL);
        if (sh->qkv_bias) {
            n = add_tensor(ts, n, BLK("attn_q.bias"), type, 1, q, 1, FILL_NORMAL);
            n = add_tensor(ts, n, BLK("attn_k.bias"), type, 1, kv, 1, FILL_NORMAL);
            n = add_tensor(ts, n, BLK("attn_v.bias"), type, 1, kv, 1, FILL_NORMAL);
        }
        if (is_gemma3(sh)) {
            n = add_tensor(ts, n, BLK("attn_q_norm.weight"), type, 1, hd, 1, FILL_ONES);
            n = add_tensor(ts, n, BLK("attn_k_norm.weight"), type, 1, hd, 1, FILL_ONES);
        }
        n = add_tensor(ts, n, BLK("attn_output.weight"), type, 2, q, sh->n_embd, FILL_NORMAL);
        if (is_gemma3(sh))
            n = add_tensor(ts, n, BLK("post_attention_norm.weight"), type, 1, sh->n_embd, 1, FILL_ONES);
        n = add_tensor(ts, n, BLK("ffn_norm.weight"), type, 1, sh->n_embd, 1, FILL_ONES);
        n = add_tensor(ts, n, BLK("ffn_gate.weight"), type, 2, sh->n_embd, sh->n_ff, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("ffn_up.weight"), type, 2, sh->n_embd, sh->n_ff, FILL_NORMAL);
        n = add_tensor(ts, n, BLK("ffn_down.weight"), type, 2, sh->n_ff, sh->n_embd, FILL_NORMAL);
        if (is_gemma3(sh))
            n = add_tensor(ts, n, BLK("post_ffw_norm.weight"), type, 1, sh->n_embd, 1, FILL_ONES);
#undef BLK
    }
    n = add_tensor(ts, n, "output_norm.weight", type, 1, sh->n_embd, 1, FILL_ONES);
    if (!sh->tied) n = add_tensor(ts, n, "output.weight", type, 2, sh->n_embd, sh->n_vocab, FILL_NORMAL);
    return n;
}

/* ---- Vocabulary ------------------------------------------------------------------ */

/* The shared llama-spm vocabulary, found next to this source tree unless given. */
static const char *default_vocab_path(char *buf, size_t cap) {
    const char *env = getenv("CERA_SHARED_DIR");
    if (env) {
        snprintf(buf, cap, "%s/vocab/ggml-vocab-llama-spm.gguf", env);
        if (access(buf, R_OK) == 0) return buf;
    }
    const char *src = __FILE__; /* <repo>/tools/cera/synth.c, absolute under CMake */
    const char *tail = strstr(src, "tools/cera/synth.c");
    if (tail) {
        snprintf(buf, cap, "%.*s../shared/vocab/ggml-vocab-llama-spm.gguf", (int)(tail - src), src);
        if (access(buf, R_OK) == 0) return buf;
    }
    return NULL;
}

/* Sets the tokenizer keys: the first n_vocab tokens of the source vocabulary, then
 * filler tokens "<synth_N>" (normal, score 0) up to n_vocab. Without a source file a
 * minimal SentencePiece vocabulary is made up (<unk>, <s>, </s>, 256 byte tokens). */
static cera_status set_vocab(gguf_writer *w, const gguf_file *src, int n_vocab, cera_error *err) {
    const gguf_array *toks = NULL, *scores = NULL, *types = NULL;
    uint64_t n_src = 0;
    if (src) {
        if (!gguf_get_arr(src, "tokenizer.ggml.tokens", &toks) || toks->type != GGUF_TYPE_STRING)
            return cera_fail(err, CERA_ERR_FORMAT,
                             "vocabulary file has no tokenizer.ggml.tokens string array");
        n_src = toks->n;
        if (!gguf_get_arr(src, "tokenizer.ggml.scores", &scores) || scores->n != n_src) scores = NULL;
        if (!gguf_get_arr(src, "tokenizer.ggml.token_type", &types) || types->n != n_src) types = NULL;
    }
    const size_t nv = (size_t)n_vocab;
    char **text = calloc(nv, sizeof(char *));
    float *score = calloc(nv, sizeof(float));
    int32_t *type = calloc(nv, sizeof(int32_t));
    cera_status st = CERA_OK;
    if (!text || !score || !type) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory for %d tokens", n_vocab);
        goto done;
    }
    for (size_t i = 0; i < nv; i++) {
        char tmp[32];
        const char *piece = tmp;
        size_t len;
        if (i < n_src) {
            piece = toks->u.strs[i].data;
            len = toks->u.strs[i].len;
            score[i] = scores ? (float)gguf_arr_f64(scores, i) : 0.0f;
            type[i] = types ? (int32_t)gguf_arr_i64(types, i) : 1;
        } else if (!src && i < 259) { /* made-up SentencePiece basics */
            if (i < 3)
                snprintf(tmp, sizeof tmp, "%s", i == 0 ? "<unk>" : i == 1 ? "<s>" : "</s>");
            else
                snprintf(tmp, sizeof tmp, "<0x%02X>", (unsigned)(i - 3));
            len = strlen(tmp);
            type[i] = i == 0 ? 2 : i < 3 ? 3 : 6; /* unknown, control, byte */
        } else {
            snprintf(tmp, sizeof tmp, "<synth_%zu>", i);
            len = strlen(tmp);
            type[i] = 1; /* normal */
        }
        text[i] = malloc(len + 1);
        if (!text[i]) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory for token %zu", i);
            goto done;
        }
        memcpy(text[i], piece, len);
        text[i][len] = 0;
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)text, nv);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, score, nv);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type, nv);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
done:
    if (text)
        for (size_t i = 0; i < nv; i++) free(text[i]);
    free(text);
    free(score);
    free(type);
    return st;
}

static void set_hparams(gguf_writer *w, const synth_shape *sh, cera_type type) {
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", sh->arch, suffix), key)
    char name[64];
    snprintf(name, sizeof name, "synth-%s", sh->name);
    gguf_writer_set_str(w, "general.architecture", sh->arch);
    gguf_writer_set_str(w, "general.name", name);
    gguf_writer_set_u32(w, "general.file_type", (uint32_t)ftype_of(type));
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)sh->n_ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)sh->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)sh->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)sh->n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)sh->n_head);
    if (sh->blocks) { /* LFM2: 0 KV heads marks a conv block */
        uint32_t kv[64];
        for (int l = 0; l < sh->n_layer; l++) kv[l] = sh->blocks[l] == 'a' ? (uint32_t)sh->n_head_kv : 0;
        gguf_writer_set_arr(w, KEY("attention.head_count_kv"), GGUF_TYPE_UINT32, kv, (size_t)sh->n_layer);
        gguf_writer_set_u32(w, KEY("shortconv.l_cache"), LFM2_L_CACHE);
    } else {
        gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)sh->n_head_kv);
    }
    if (sh->moe.n_expert) {
        gguf_writer_set_u32(w, KEY("expert_count"), (uint32_t)sh->moe.n_expert);
        gguf_writer_set_u32(w, KEY("expert_used_count"), (uint32_t)sh->moe.n_used);
        gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), (uint32_t)sh->moe.n_ff_exp);
        gguf_writer_set_u32(w, KEY("leading_dense_block_count"), (uint32_t)sh->moe.n_dense_lead);
        gguf_writer_set_u32(w, KEY("expert_gating_func"), 2); /* llama.cpp's sigmoid */
    }
    gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), sh->rms_eps);
    gguf_writer_set_f32(w, KEY("rope.freq_base"), sh->rope_base);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim(sh));
    if (sh->head_dim) {
        gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)sh->head_dim);
        gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)sh->head_dim);
    }
    if (sh->window) gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)sh->window);
    gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)sh->n_vocab);
#undef KEY
}

/* ---- Generating and quantizing rows in parallel ---------------------------------- */

typedef struct fill_job {
    const synth_tensor *t;
    uint64_t tensor_seed;
    int64_t row0, n_rows; /* the chunk */
    uint8_t *out;         /* n_rows * row_bytes */
    size_t row_bytes;
    int n_threads;
} fill_job;

typedef struct fill_worker {
    const fill_job *job;
    int ith;
    float *row; /* [ne0] */
} fill_worker;

static void *fill_rows(void *arg) {
    fill_worker *wk = arg;
    const fill_job *j = wk->job;
    const synth_tensor *t = j->t;
    const cera_type_traits *tt = cera_type_get(t->type);
    for (int64_t r = wk->ith; r < j->n_rows; r += j->n_threads) {
        const int64_t row = j->row0 + r;
        if (t->fill == FILL_ONES)
            for (int64_t i = 0; i < t->ne[0]; i++) wk->row[i] = 1.0f;
        else
            fill_normal(wk->row, t->ne[0], j->tensor_seed ^ ((uint64_t)row * 0xd1342543de82ef95ull),
                        t->sigma);
        tt->from_float_ref(wk->row, j->out + (size_t)r * j->row_bytes, t->ne[0]);
    }
    return NULL;
}

static bool pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off) {
    while (n) {
        const ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return true;
}

#define CHUNK_BYTES ((size_t)64 << 20)

/* Generates every tensor chunk by chunk and writes it at its file offset. */
static cera_status fill_file(int fd, const char *path, const synth_tensor *ts, const uint64_t *offsets,
                             int n_t, uint64_t seed, int n_threads, cera_error *err) {
    cera_status st = CERA_OK;
    int64_t max_row = 1;
    size_t max_row_bytes = 1;
    for (int i = 0; i < n_t; i++) {
        if (ts[i].ne[0] > max_row) max_row = ts[i].ne[0];
        const size_t rb = cera_row_size(ts[i].type, ts[i].ne[0]);
        if (rb > max_row_bytes) max_row_bytes = rb;
    }
    const size_t chunk_cap = max_row_bytes > CHUNK_BYTES ? max_row_bytes : CHUNK_BYTES;
    uint8_t *chunk = malloc(chunk_cap);
    fill_worker *wk = calloc((size_t)n_threads, sizeof *wk);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    bool *created = calloc((size_t)n_threads, sizeof *created);
    bool ok = chunk && wk && th && created;
    for (int i = 0; ok && i < n_threads; i++)
        ok = (wk[i].row = malloc((size_t)max_row * sizeof(float))) != NULL;
    if (!ok) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "synth: out of memory for %d threads", n_threads);
        goto done;
    }
    for (int i = 0; i < n_t && st == CERA_OK; i++) {
        const synth_tensor *t = &ts[i];
        const size_t row_bytes = cera_row_size(t->type, t->ne[0]);
        const int64_t rows_per_chunk = (int64_t)(chunk_cap / row_bytes);
        uint64_t tseed = seed;
        for (const char *c = t->name; *c; c++) tseed = (tseed ^ (uint8_t)*c) * 0x100000001b3ull; /* FNV-1a */
        for (int64_t r0 = 0; r0 < n_rows(t); r0 += rows_per_chunk) {
            const int64_t nr = n_rows(t) - r0 < rows_per_chunk ? n_rows(t) - r0 : rows_per_chunk;
            const int nth = nr < n_threads ? (int)nr : n_threads;
            fill_job job = {t, tseed, r0, nr, chunk, row_bytes, nth};
            for (int k = 0; k < nth; k++) wk[k] = (fill_worker){&job, k, wk[k].row};
            for (int k = 1; k < nth; k++) created[k] = pthread_create(&th[k], NULL, fill_rows, &wk[k]) == 0;
            fill_rows(&wk[0]);
            for (int k = 1; k < nth; k++) {
                if (created[k])
                    pthread_join(th[k], NULL);
                else
                    fill_rows(&wk[k]); /* no thread: do its rows here */
            }
            if (!pwrite_all(fd, chunk, (size_t)nr * row_bytes, offsets[i] + (uint64_t)r0 * row_bytes)) {
                st = cera_fail(err, CERA_ERR_IO, "%s: cannot write tensor '%s': %s", path, t->name,
                               strerror(errno));
                break;
            }
        }
    }
done:
    if (wk)
        for (int i = 0; i < n_threads; i++) free(wk[i].row);
    free(wk);
    free(th);
    free(created);
    free(chunk);
    return st;
}

static void store_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Creates the file with its header: `probe` holds the model's metadata and tensors
 * declared one block each; their infos get the real shapes and offsets. Gives the open
 * file and each tensor's absolute data offset. */
static cera_status write_header(gguf_writer *probe, const synth_tensor *ts, int n_t, const char *path, int fd,
                                uint64_t *offsets, cera_error *err) {
    void *buf = NULL;
    size_t size = 0;
    gguf_file *pf = NULL;
    cera_status st = gguf_writer_to_memory(probe, &buf, &size, err);
    if (st == CERA_OK) st = gguf_open_memory(buf, size, &pf, err);
    if (st) {
        free(buf);
        return st;
    }
    const uint64_t align = pf->alignment, data_offset = pf->data_offset;
    uint64_t off = 0;
    for (int i = 0; i < n_t && st == CERA_OK; i++) {
        const gguf_tensor *t = gguf_find_tensor(pf, ts[i].name);
        if (!t || t->n_dims != ts[i].n_dims) {
            st = cera_fail(err, CERA_ERR_INTERNAL, "synth: tensor '%s' missing from the header", ts[i].name);
            break;
        }
        /* The info after the name: u32 n_dims, u64 ne[n_dims], u32 type, u64 offset. */
        uint8_t *info = (uint8_t *)buf + ((const uint8_t *)t->name.data - (const uint8_t *)buf) + t->name.len;
        for (uint32_t d = 0; d < t->n_dims; d++) store_le64(info + 4 + 8 * d, (uint64_t)ts[i].ne[d]);
        store_le64(info + 8 + 8 * t->n_dims, off);
        offsets[i] = data_offset + off;
        const uint64_t nbytes = cera_row_size(ts[i].type, ts[i].ne[0]) * (uint64_t)n_rows(&ts[i]);
        off += (nbytes + align - 1) / align * align;
    }
    gguf_close(pf);
    if (st == CERA_OK &&
        (!pwrite_all(fd, buf, (size_t)data_offset, 0) || ftruncate(fd, (off_t)(data_offset + off)) != 0))
        st = cera_fail(err, CERA_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    free(buf);
    return st;
}

/* Writes the whole model into a temporary file beside path (core/fileio.h: an existing
 * device or FIFO is refused, not replaced), checks it with the validating reader, then
 * renames it into place; a failure leaves path as it was. */
static cera_status write_model(gguf_writer *probe, const synth_tensor *ts, int n_t, const char *path,
                               uint64_t seed, int n_threads, cera_error *err) {
    uint64_t *offsets = calloc((size_t)n_t, sizeof *offsets);
    if (!offsets) return cera_fail(err, CERA_ERR_NO_MEMORY, "synth: out of memory");
    cera_outfile o;
    cera_status st = cera_outfile_open(&o, path, false, err);
    if (st) {
        free(offsets);
        return st;
    }
    st = write_header(probe, ts, n_t, path, o.fd, offsets, err);
    if (st == CERA_OK) st = fill_file(o.fd, path, ts, offsets, n_t, seed, n_threads, err);
    gguf_file *f = NULL;
    if (st == CERA_OK) st = gguf_open(o.tmp, &f, err);
    for (int i = 0; st == CERA_OK && i < n_t; i++) {
        const gguf_tensor *t = gguf_find_tensor(f, ts[i].name);
        if (!t || t->type != ts[i].type || t->ne[0] != ts[i].ne[0] || t->ne[1] != ts[i].ne[1] ||
            (t->n_dims > 2 && t->ne[2] != ts[i].ne[2]) || f->data_offset + t->offset != offsets[i])
            st = cera_fail(err, CERA_ERR_INTERNAL, "%s: tensor '%s' is not where it was written", path,
                           ts[i].name);
    }
    gguf_close(f);
    free(offsets);
    if (st == CERA_OK) return cera_outfile_commit(&o, err);
    cera_outfile_abort(&o);
    return st;
}

/* ---- The command ------------------------------------------------------------------ */

static void usage(FILE *out) {
    fprintf(out,
            "usage: cera synth SHAPE TYPE -o OUT.gguf [--seed S] [-t THREADS] [--vocab VOCAB.gguf]\n"
            "       cera synth --list\n\n"
            "Writes a model of SHAPE with random weights (~N(0, 0.02), norms 1): every 2-D weight in\n"
            "TYPE (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs; q3_k_s,\n"
            "q4_k_s and q5_k_s mean q3_k, q4_k, q5_k), 1-D tensors in f32. The tokenizer is the llama-spm\n"
            "vocabulary (../shared/vocab, or --vocab), cut or padded to the shape's vocabulary size.\n\n"
            "shapes:\n");
    for (size_t i = 0; i < N_SHAPES; i++) {
        const synth_shape *s = &shapes[i];
        fprintf(out, "  %-15s %-7s vocab %6d, embd %4d, ff %5d, heads %2d/%2d, %2d layers%s%s", s->name,
                s->arch, s->n_vocab, s->n_embd, s->n_ff, s->n_head, s->n_head_kv, s->n_layer,
                s->tied ? ", tied output" : "", s->qkv_bias ? ", QKV bias" : "");
        if (s->moe.n_expert)
            fprintf(out, ", %d experts (%d used, ff %d) from block %d", s->moe.n_expert, s->moe.n_used,
                    s->moe.n_ff_exp, s->moe.n_dense_lead);
        fputc('\n', out);
    }
}

static bool parse_type(const char *s, cera_type *out) {
    char buf[16];
    snprintf(buf, sizeof buf, "%s", s);
    const size_t n = strlen(buf);
    if (n > 2 && (buf[n - 1] == 's' || buf[n - 1] == 'S') && buf[n - 2] == '_' &&
        (buf[n - 3] == 'k' || buf[n - 3] == 'K'))
        buf[n - 2] = 0; /* q4_k_s -> q4_k */
    return cera_type_from_name(buf, out) && ftype_of(*out) >= 0;
}

typedef struct synth_opts {
    const char *shape_name, *type_name, *out, *vocab;
    uint64_t seed;
    long n_threads;
    bool list;
} synth_opts;

static int synth_extra(const char *cmd, int argc, char **argv, int *i, void *user) {
    synth_opts *o = user;
    const char *a = argv[*i];
    if (!strcmp(a, "--list")) {
        o->list = true;
        return 1;
    }
    const int k = !strcmp(a, "-o") || !strcmp(a, "--output")    ? 0
                  : !strcmp(a, "--seed") || !strcmp(a, "-s")    ? 1
                  : !strcmp(a, "-t") || !strcmp(a, "--threads") ? 2
                  : !strcmp(a, "--vocab")                       ? 3
                                                                : -1;
    if (k < 0) {
        if (a[0] == '-') return 0;
        if (!o->shape_name) {
            o->shape_name = a;
        } else if (!o->type_name) {
            o->type_name = a;
        } else {
            cli_usage_error(cmd, "unexpected argument '%s'", a);
            return -1;
        }
        return 1;
    }
    const char *v;
    if (cli_take_value(cmd, argc, argv, i, &v) < 0) return -1;
    char *end;
    switch (k) {
    case 0: o->out = v; break;
    case 1:
        o->seed = strtoull(v, &end, 0);
        if (*end || end == v) {
            cli_usage_error(cmd, "bad seed '%s'", v);
            return -1;
        }
        break;
    case 2:
        if (!cli_parse_long(v, 1, 1024, &o->n_threads)) {
            cli_usage_error(cmd, "bad thread count '%s'", v);
            return -1;
        }
        break;
    default: o->vocab = v;
    }
    return 1;
}

int cmd_synth(int argc, char **argv) {
    synth_opts o = {.seed = 1, .n_threads = sysconf(_SC_NPROCESSORS_ONLN)};
    cli_args args;
    cli_args_init(&args);
    const int pr = cli_parse("synth", 0, argc, argv, &args, synth_extra, &o, NULL, NULL);
    if (pr == 1 || (pr == 0 && o.list)) {
        usage(stdout);
        return 0;
    }
    if (pr) return pr;
    const char *shape_name = o.shape_name, *type_name = o.type_name, *out = o.out, *vocab = o.vocab;
    const uint64_t seed = o.seed;
    const long n_threads = o.n_threads;
    if (!shape_name || !type_name || !out)
        return cli_usage_error("synth", "need SHAPE TYPE -o OUT.gguf (see --help)");
    const synth_shape *sh = NULL;
    for (size_t i = 0; i < N_SHAPES; i++)
        if (!strcmp(shapes[i].name, shape_name)) sh = &shapes[i];
    if (!sh) return cli_usage_error("synth", "unknown shape '%s' (--list shows them)", shape_name);
    cera_type type;
    if (!parse_type(type_name, &type))
        return cli_usage_error("synth", "unknown or unsupported type '%s'", type_name);

    cera_error err = {0};
    char vbuf[1024];
    if (!vocab) vocab = default_vocab_path(vbuf, sizeof vbuf);
    gguf_file *vf = NULL;
    if (vocab && (cera_check_not_input(out, vocab, "the vocabulary file", &err) ||
                  gguf_open(vocab, &vf, &err) != CERA_OK))
        return cli_fail(&err);
    if (!vocab)
        fprintf(stderr, "cera synth: no vocabulary file found: making up a minimal one (see --vocab)\n");

    const int max_tensors = 4 + sh->n_layer * 16;
    synth_tensor *ts = calloc((size_t)max_tensors, sizeof *ts);
    gguf_writer *w = gguf_writer_new();
    if (!ts || !w) {
        gguf_close(vf);
        free(ts);
        gguf_writer_free(w);
        fprintf(stderr, "cera: out of memory\n");
        return 1;
    }
    const int n_t = list_tensors(sh, type, ts);
    set_hparams(w, sh, type);
    cera_status st = set_vocab(w, vf, sh->n_vocab, &err);
    uint64_t total = 0, n_params = 0;
    for (int i = 0; st == CERA_OK && i < n_t; i++) {
        /* one block each: write_header patches in the real shapes and offsets */
        const int64_t one_block[3] = {cera_type_get(ts[i].type)->block_size, 1, 1};
        st = gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, one_block, NULL, &err);
        total += cera_row_size(ts[i].type, ts[i].ne[0]) * (uint64_t)n_rows(&ts[i]);
        n_params += (uint64_t)(ts[i].ne[0] * n_rows(&ts[i]));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (st == CERA_OK) st = write_model(w, ts, n_t, out, seed, (int)n_threads, &err);
    gguf_writer_free(w);
    gguf_close(vf);
    free(ts);
    if (st != CERA_OK) return cli_fail(&err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr,
            "cera synth: %s %s -> %s: %d tensors, %.3f B parameters, %.2f GB of weights in %.1f s (%ld "
            "threads)\n",
            sh->name, cera_type_get(type)->name, out, n_t, (double)n_params * 1e-9, (double)total * 1e-9,
            secs, n_threads);
    return 0;
}
