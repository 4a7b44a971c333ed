/*
 * test_golden.c — the reference conversions against files llama.cpp made.
 *
 * ../shared/golden/synth-llama-<type>.gguf were made from synth-llama-f32.gguf by
 * llama-quantize --pure (q4_k_m: its usual mix). For every tensor of every one of them:
 *   - dequantizing it matches the f32 original within the type's bound (type_bounds.h),
 *     and 1-D tensors (kept F32) are bit-identical;
 *   - quantizing the f32 original with cera's reference quantizer for the tensor's type
 *     gives exactly llama.cpp's bytes. That must hold for every type here, the k-quants
 *     and iq4_xs included: the reference quantizers are deterministic and cera follows
 *     their arithmetic order, so anything short of exact is a bug.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "type_bounds.h"

/* The file suffix and the tensor types it must contain besides F32. */
static const struct {
    const char *file;
    cera_type type;  /* the type of every 2-D tensor (pure files) */
    cera_type type2; /* q4_k_m's second type (COUNT when none) */
} files[] = {
    {"f16", CERA_TYPE_F16, CERA_TYPE_COUNT},       {"bf16", CERA_TYPE_BF16, CERA_TYPE_COUNT},
    {"q8_0", CERA_TYPE_Q8_0, CERA_TYPE_COUNT},     {"q4_0", CERA_TYPE_Q4_0, CERA_TYPE_COUNT},
    {"q4_1", CERA_TYPE_Q4_1, CERA_TYPE_COUNT},     {"q5_0", CERA_TYPE_Q5_0, CERA_TYPE_COUNT},
    {"q5_1", CERA_TYPE_Q5_1, CERA_TYPE_COUNT},     {"q2_k", CERA_TYPE_Q2_K, CERA_TYPE_COUNT},
    {"q3_k_s", CERA_TYPE_Q3_K, CERA_TYPE_COUNT},   {"q4_k_s", CERA_TYPE_Q4_K, CERA_TYPE_COUNT},
    {"q5_k_s", CERA_TYPE_Q5_K, CERA_TYPE_COUNT},   {"q6_k", CERA_TYPE_Q6_K, CERA_TYPE_COUNT},
    {"iq4_nl", CERA_TYPE_IQ4_NL, CERA_TYPE_COUNT}, {"iq4_xs", CERA_TYPE_IQ4_XS, CERA_TYPE_COUNT},
    {"q4_k_m", CERA_TYPE_Q4_K, CERA_TYPE_Q6_K},
};

static int64_t n_rows(const gguf_tensor *t) {
    int64_t n = 1;
    for (uint32_t d = 1; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

static void check_file(const gguf_file *f32, const char *suffix, cera_type type, cera_type type2) {
    char rel[128];
    snprintf(rel, sizeof rel, "golden/synth-llama-%s.gguf", suffix);
    gguf_file *q = NULL;
    cera_error err;
    if (gguf_open(shared_path(rel), &q, &err)) {
        CHECK(false, "%s", err.message);
        return;
    }
    CHECK(q->n_tensors == f32->n_tensors, "%s: %llu tensors, f32 file has %llu", suffix,
          (unsigned long long)q->n_tensors, (unsigned long long)f32->n_tensors);
    int n_quant = 0, n_exact = 0;
    double worst = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor *t = &q->tensors[i];
        char name[256];
        gguf_str_copy(t->name, name, sizeof name);
        const gguf_tensor *s = gguf_find_tensor(f32, name);
        CHECK(s != NULL, "%s: tensor '%s' not in the f32 file", suffix, name);
        if (!s) continue;
        CHECK(s->type == CERA_TYPE_F32 && s->n_dims == t->n_dims && !memcmp(s->ne, t->ne, sizeof s->ne),
              "%s: '%s' has another shape than the f32 original", suffix, name);
        const int64_t nr = n_rows(t), nc = t->ne[0];
        const size_t n = (size_t)(nr * nc);
        const float *x = s->data;
        if (t->n_dims < 2) {
            CHECK(t->type == CERA_TYPE_F32 && !memcmp(t->data, x, n * 4),
                  "%s: 1-D '%s' is not the F32 original", suffix, name);
            continue;
        }
        CHECK(t->type == type || t->type == type2, "%s: '%s' is %s", suffix, name,
              cera_type_get(t->type)->name);
        const cera_type_traits *tt = cera_type_get(t->type);
        const size_t rs = cera_row_size(t->type, nc);

        float *y = malloc(n * sizeof *y);
        for (int64_t r = 0; r < nr; r++) tt->to_float((const uint8_t *)t->data + r * rs, y + r * nc, nc);
        double e = 0, ss = 0;
        for (size_t k = 0; k < n; k++) {
            e += ((double)y[k] - x[k]) * ((double)y[k] - x[k]);
            ss += (double)x[k] * x[k];
        }
        const double rel_rmse = sqrt(e / ss);
        if (rel_rmse > worst) worst = rel_rmse;
        CHECK(rel_rmse <= type_bound(t->type), "%s: '%s' dequantizes with relative RMSE %.5f > %.5f", suffix,
              name, rel_rmse, type_bound(t->type));
        free(y);

        uint8_t *mine = malloc(rs * (size_t)nr);
        for (int64_t r = 0; r < nr; r++) tt->from_float_ref(x + r * nc, mine + r * rs, nc);
        n_quant++;
        if (!memcmp(mine, t->data, rs * (size_t)nr)) {
            n_exact++;
        } else {
            size_t k = 0;
            while (mine[k] == ((const uint8_t *)t->data)[k]) k++;
            CHECK(false, "%s: '%s' quantizes differently from llama.cpp from byte %zu (row %zu, block %zu)",
                  suffix, name, k, k / rs, k % rs / tt->type_size);
        }
        free(mine);
    }
    printf("%-7s %d/%d tensors byte-identical to llama-quantize, worst relative RMSE %.5f\n", suffix, n_exact,
           n_quant, worst);
    CHECK(n_quant == 16, "%s: %d quantized tensors, want 16", suffix, n_quant);
    gguf_close(q);
}

int main(void) {
    gguf_file *f32 = NULL;
    cera_error err;
    if (gguf_open(shared_path("golden/synth-llama-f32.gguf"), &f32, &err)) {
        CHECK(false, "%s", err.message);
        return test_finish();
    }
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        check_file(f32, files[i].file, files[i].type, files[i].type2);
    gguf_close(f32);
    return test_finish();
}
