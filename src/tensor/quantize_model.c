/*
 * quantize_model.c — `cera quantize`'s work: a GGUF model converted to one tensor type.
 *
 * The input is memory-mapped by the GGUF reader and checked whole before anything is
 * written (types, row lengths), so a rejected model leaves no partial output. Each
 * converted tensor gets its own output buffer, held until the writer has written the
 * file; tensors kept as they are reference the input mapping directly. Rows of a tensor
 * are split over threads; each row's bytes depend only on that row, so the output is
 * the same for any thread count.
 */
#include "tensor/quantize_model.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/cpus.h"
#include "core/error.h"
#include "core/fileio.h"
#include "gguf/gguf.h"
#include "tensor/quant.h"

/* llama-quantize's ftype names for the pure k-quant variants, accepted as aliases. */
static const struct {
    const char *alias;
    cera_type type;
} type_aliases[] = {
    {"q3_k_s", CERA_TYPE_Q3_K},
    {"q4_k_s", CERA_TYPE_Q4_K},
    {"q5_k_s", CERA_TYPE_Q5_K},
};

bool cera_quantize_type_from_name(const char *name, cera_type *out) {
    for (size_t i = 0; i < sizeof type_aliases / sizeof type_aliases[0]; i++)
        if (!strcasecmp(name, type_aliases[i].alias)) {
            *out = type_aliases[i].type;
            return true;
        }
    return cera_type_from_name(name, out);
}

bool cera_type_file_type(cera_type type, uint32_t *ftype) {
    /* llama.h's llama_ftype: LLAMA_FTYPE_ALL_F32 = 0, MOSTLY_F16 = 1, ... */
    switch (type) {
    case CERA_TYPE_F32: *ftype = 0; return true;
    case CERA_TYPE_F16: *ftype = 1; return true;
    case CERA_TYPE_Q4_0: *ftype = 2; return true;
    case CERA_TYPE_Q4_1: *ftype = 3; return true;
    case CERA_TYPE_Q8_0: *ftype = 7; return true;
    case CERA_TYPE_Q5_0: *ftype = 8; return true;
    case CERA_TYPE_Q5_1: *ftype = 9; return true;
    case CERA_TYPE_Q2_K: *ftype = 10; return true;
    case CERA_TYPE_Q3_K: *ftype = 11; return true; /* Q3_K_S */
    case CERA_TYPE_Q4_K: *ftype = 14; return true; /* Q4_K_S */
    case CERA_TYPE_Q5_K: *ftype = 16; return true; /* Q5_K_S */
    case CERA_TYPE_Q6_K: *ftype = 18; return true;
    case CERA_TYPE_IQ4_NL: *ftype = 25; return true;
    case CERA_TYPE_IQ4_XS: *ftype = 30; return true;
    case CERA_TYPE_BF16: *ftype = 32; return true;
    default: return false;
    }
}

static bool contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

bool cera_quantize_tensor_wanted(const char *name, uint32_t n_dims) {
    if (n_dims < 2) return false;
    const size_t len = strlen(name);
    if (len < 6 || strcmp(name + len - 6, "weight")) return false;
    /* The tensors llama-quantize never converts, for the architectures cera knows. */
    static const char *const keep[] = {
        "_norm.weight",   "ffn_gate_inp.weight", "shortconv.conv.weight", "ssm_conv1d",
        "position_embd.", "token_types.",        "attn_rel_b.weight",
    };
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (contains(name, keep[i])) return false;
    return true;
}

/* ---- row conversion, over threads ------------------------------------------------- */

typedef struct rows_job {
    const cera_type_traits *src_tt; /* source type (f32/f16/bf16) */
    const cera_type_traits *dst_tt;
    const uint8_t *src;
    uint8_t *dst;
    size_t src_row, dst_row; /* bytes per row */
    int64_t n_per_row, row0, row1;
    float *buf; /* one row of floats, when the source is not f32 */
} rows_job;

static void *rows_run(void *arg) {
    const rows_job *j = arg;
    for (int64_t r = j->row0; r < j->row1; r++) {
        const void *in = j->src + (size_t)r * j->src_row;
        const float *x = in;
        if (j->buf) {
            j->src_tt->to_float(in, j->buf, j->n_per_row);
            x = j->buf;
        }
        j->dst_tt->from_float_ref(x, j->dst + (size_t)r * j->dst_row, j->n_per_row);
    }
    return NULL;
}

/* Converts nrows rows from src_type to dst_type. Returns false only when out of memory. */
static bool convert_rows(cera_type src_type, const void *src, cera_type dst_type, void *dst, int64_t nrows,
                         int64_t n_per_row, int n_threads) {
    enum { MAX_THREADS = 256 };
    if (n_threads < 1) n_threads = 1;
    if (n_threads > MAX_THREADS) n_threads = MAX_THREADS;
    if (n_threads > nrows) n_threads = nrows > 0 ? (int)nrows : 1;
    rows_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    float *bufs = NULL;
    if (src_type != CERA_TYPE_F32) {
        bufs = malloc(sizeof(float) * (size_t)n_per_row * (size_t)n_threads);
        if (!bufs) return false;
    }
    bool started[MAX_THREADS] = {false};
    for (int t = 0; t < n_threads; t++) {
        jobs[t] = (rows_job){
            .src_tt = cera_type_get(src_type),
            .dst_tt = cera_type_get(dst_type),
            .src = src,
            .dst = dst,
            .src_row = cera_row_size(src_type, n_per_row),
            .dst_row = cera_row_size(dst_type, n_per_row),
            .n_per_row = n_per_row,
            .row0 = nrows * t / n_threads,
            .row1 = nrows * (t + 1) / n_threads,
            .buf = bufs ? bufs + (size_t)n_per_row * (size_t)t : NULL,
        };
    }
    /* Share 0 runs on the caller's thread, as does any share whose thread did not start. */
    for (int t = 1; t < n_threads; t++) started[t] = !pthread_create(&tid[t], NULL, rows_run, &jobs[t]);
    rows_run(&jobs[0]);
    for (int t = 1; t < n_threads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            rows_run(&jobs[t]);
    }
    free(bufs);
    return true;
}

void cera_quantize_rows(cera_type type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                        int n_threads) {
    if (!convert_rows(CERA_TYPE_F32, src, type, dst, nrows, n_per_row, n_threads))
        CERA_ASSERT(!"f32 rows need no buffer");
}

/* ---- the model ------------------------------------------------------------------- */

/* The output type of tensor t, or an error naming it. */
static cera_status plan_tensor(const gguf_tensor *t, const char *name, cera_type target, cera_type *out,
                               cera_error *err) {
    if (t->type != CERA_TYPE_F32 && t->type != CERA_TYPE_F16 && t->type != CERA_TYPE_BF16) {
        const cera_type_traits *tt = cera_type_get(t->type);
        return cera_fail(
            err, CERA_ERR_UNSUPPORTED,
            "tensor '%s' is %s; cera quantize converts models whose tensors are f32, f16 or bf16", name,
            tt ? tt->name : "of an unknown type");
    }
    if (!cera_quantize_tensor_wanted(name, t->n_dims)) {
        /* 1-D tensors (norms, biases) stay F32, as llama.cpp keeps them; other kept
         * tensors stay in their type. */
        *out = t->n_dims < 2 ? CERA_TYPE_F32 : t->type;
        return CERA_OK;
    }
    const cera_type_traits *tt = cera_type_get(target);
    if (t->ne[0] % tt->block_size)
        return cera_fail(err, CERA_ERR_INVALID_ARG,
                         "tensor '%s' has rows of %lld elements, not a multiple of %s's block size %d", name,
                         (long long)t->ne[0], tt->name, tt->block_size);
    *out = target;
    return CERA_OK;
}

cera_status cera_quantize_model(const char *in_path, const char *out_path, cera_type type, int n_threads,
                                cera_error *err) {
    /* q8_1 and q8_k have no llama_ftype number (llama.cpp uses them for activations only):
     * their files carry no general.file_type. */
    uint32_t ftype;
    const bool has_ftype = cera_type_file_type(type, &ftype);
    const cera_type_traits *target = cera_type_get(type);
    if (!target || !target->from_float_ref)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s is not a type a model file can be quantized to",
                         target ? target->name : "this");
    cera_status st = cera_check_not_input(out_path, in_path, "the input model", err);
    if (st) return st;
    if (n_threads <= 0) {
        n_threads = cera_cpu_count();
    }

    gguf_file *in = NULL;
    st = gguf_open_model(in_path, &in, err); /* a split model is written as one file */
    if (st) return st;

    const uint64_t nt = in->n_tensors;
    cera_type *out_types = calloc(nt ? nt : 1, sizeof *out_types);
    void **out_data = calloc(nt ? nt : 1, sizeof *out_data); /* owned buffers; NULL when referencing input */
    gguf_writer *w = gguf_writer_new();
    if (!out_types || !out_data || !w) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory", in_path);
        goto done;
    }

    char name[512];
    for (uint64_t i = 0; i < nt; i++) {
        gguf_str_copy(in->tensors[i].name, name, sizeof name);
        st = plan_tensor(&in->tensors[i], name, type, &out_types[i], err);
        if (st) {
            cera_error_prefix(err, "%s", in_path);
            goto done;
        }
    }

    for (uint64_t i = 0; i < in->n_kv; i++) gguf_writer_set_value(w, in->kv[i].key, &in->kv[i].value);
    gguf_writer_set_u32(w, "general.quantization_version", 2);
    gguf_writer_remove(w, "split.count");
    gguf_writer_remove(w, "split.no");
    gguf_writer_remove(w, "split.tensors.count");
    if (has_ftype)
        gguf_writer_set_u32(w, "general.file_type", ftype);
    else
        gguf_writer_remove(w, "general.file_type");

    for (uint64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = &in->tensors[i];
        gguf_str_copy(t->name, name, sizeof name);
        const void *data = t->data;
        if (out_types[i] != t->type) {
            int64_t nrows = 1;
            for (uint32_t d = 1; d < t->n_dims; d++) nrows *= t->ne[d];
            const size_t bytes = cera_row_size(out_types[i], t->ne[0]) * (size_t)nrows;
            out_data[i] = malloc(bytes ? bytes : 1);
            if (!out_data[i] ||
                !convert_rows(t->type, t->data, out_types[i], out_data[i], nrows, t->ne[0], n_threads)) {
                st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: out of memory converting tensor '%s'", in_path,
                               name);
                goto done;
            }
            data = out_data[i];
        }
        st = gguf_writer_add_tensor(w, name, out_types[i], t->n_dims, t->ne, data, err);
        if (st) goto done;
    }
    st = gguf_writer_write(w, out_path, err);

done:
    gguf_writer_free(w);
    if (out_data)
        for (uint64_t i = 0; i < nt; i++) free(out_data[i]);
    free(out_data);
    free(out_types);
    gguf_close(in);
    return st;
}
