/*
 * test_lora_merge.c — merging adapters into stories260K: the written GGUF has every key
 * and tensor of the base, untargeted tensors byte for byte, and each targeted
 * projection equal to W + Σ s·B·A (computed here in double precision) within float
 * rounding, or within the output type's quantization error for --type q8_0.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "lora/lora.h"
#include "testutil.h"

/* Largest |merged - expected| / (max |expected| of the row) over a targeted weight. */
static double check_weight(const cera_model *base, const cera_model *merged, int l, cera_proj p,
                           cera_adapter *const *ad, const float *sc, int n) {
    const cera_weight *w0 = &base->layers[l].proj[p], *w1 = &merged->layers[l].proj[p];
    const cera_type_traits *tt = cera_type_get(w1->type);
    float *row = malloc((size_t)w1->k * sizeof *row);
    double *want = malloc((size_t)w0->k * sizeof *want);
    double worst = 0;
    const size_t rs = cera_row_size(w1->type, w1->k);
    for (int64_t i = 0; i < w0->n; i++) {
        for (int64_t c = 0; c < w0->k; c++) want[c] = ((const float *)w0->data)[i * w0->k + c];
        for (int a = 0; a < n; a++) {
            const cera_lora_pair *q = cera_lora_pair_get(ad[a], l, p);
            if (!q) continue;
            const double s = cera_lora_scale(ad[a], q, sc[a]);
            for (int j = 0; j < q->rank; j++)
                for (int64_t c = 0; c < w0->k; c++) want[c] += s * q->b[i * q->rank + j] * q->a[j * q->k + c];
        }
        const uint8_t *src = (const uint8_t *)w1->data + (size_t)i * rs;
        if (w1->type == CERA_TYPE_F32)
            memcpy(row, src, (size_t)w1->k * 4);
        else
            tt->to_float(src, row, w1->k);
        double mx = 1e-30;
        for (int64_t c = 0; c < w0->k; c++) mx = fmax(mx, fabs(want[c]));
        for (int64_t c = 0; c < w0->k; c++) worst = fmax(worst, fabs(row[c] - want[c]) / mx);
    }
    free(row);
    free(want);
    return worst;
}

static void merge_case(const cera_model *base, const gguf_file *bf, cera_adapter *const *ad, const float *sc,
                       int n, int type, double tol, const char *what) {
    char out[256];
    snprintf(out, sizeof out, "%s/lora_merge_%d.gguf", CERA_BINARY_DIR, type);
    cera_error err = {0};
    CHECK(cera_lora_merge(base, ad, sc, n, out, type, &err) == CERA_OK, "%s: merge: %s", what, err.message);
    gguf_file *f = NULL;
    cera_model m = {0};
    if (gguf_open(out, &f, &err) || cera_model_load(f, &m, &err)) {
        CHECK(0, "%s: reopen: %s", what, err.message);
        gguf_close(f);
        return;
    }
    CHECK(f->n_kv == bf->n_kv && f->n_tensors == bf->n_tensors,
          "%s: %llu keys / %llu tensors (base %llu / %llu)", what, (unsigned long long)f->n_kv,
          (unsigned long long)f->n_tensors, (unsigned long long)bf->n_kv, (unsigned long long)bf->n_tensors);
    int same = 0, merged = 0;
    double worst = 0;
    for (uint64_t i = 0; i < bf->n_tensors; i++) {
        const gguf_tensor *t0 = &bf->tensors[i];
        char name[128];
        const gguf_tensor *t1 = gguf_find_tensor(f, gguf_str_copy(t0->name, name, sizeof name));
        CHECK(t1 != NULL, "%s: tensor %s missing", what, name);
        if (!t1) continue;
        int layer = -1, proj = -1;
        for (int l = 0; l < base->hp.n_layer; l++)
            for (int p = 0; p < CERA_PROJ_COUNT; p++)
                if (base->layers[l].proj[p].t == t0) layer = l, proj = p;
        bool targeted = false;
        for (int a = 0; a < n && layer >= 0; a++)
            if (sc[a] != 0 && cera_lora_pair_get(ad[a], layer, (cera_proj)proj)) targeted = true;
        if (!targeted) {
            CHECK(t1->type == t0->type && t1->nbytes == t0->nbytes && !memcmp(t1->data, t0->data, t0->nbytes),
                  "%s: untargeted %s changed", what, name);
            same++;
        } else {
            CHECK(t1->type == (type < 0 ? t0->type : (cera_type)type), "%s: %s has type %d", what, name,
                  t1->type);
            worst = fmax(worst, check_weight(base, &m, layer, (cera_proj)proj, ad, sc, n));
            merged++;
        }
    }
    CHECK(merged > 0 && same > 0, "%s: %d merged, %d copied", what, merged, same);
    CHECK(worst < tol, "%s: merged weights off by %g (relative to the row's largest), tolerance %g", what,
          worst, tol);
    cera_model_free(&m);
    gguf_close(f);
    unlink(out);
}

int main(void) {
    gguf_file *bf = NULL;
    cera_model base = {0};
    cera_error err = {0};
    if (gguf_open(shared_path("models/stories260K.gguf"), &bf, &err) || cera_model_load(bf, &base, &err)) {
        CHECK(0, "stories260K: %s", err.message);
        return test_finish();
    }
    cera_adapter *ad[2] = {NULL, NULL};
    CHECK(!cera_lora_load(&base, shared_path("golden/lora-stories-a.gguf"), &ad[0], &err), "a: %s",
          err.message);
    CHECK(!cera_lora_load(&base, shared_path("golden/lora-stories-b.peft"), &ad[1], &err), "b: %s",
          err.message);
    if (ad[0] && ad[1]) {
        const float one[1] = {1.0f}, two[2] = {1.0f, 0.7f}, zero_b[2] = {0.5f, 0.0f};
        merge_case(&base, bf, ad, one, 1, -1, 1e-6, "a into f32");
        merge_case(&base, bf, ad, two, 2, CERA_TYPE_F32, 1e-6, "a + 0.7 b into f32");
        merge_case(&base, bf, ad, zero_b, 2, -1, 1e-6, "0.5 a + 0 b");
        /* stories260K's 172-wide ffn_down cannot be Q8_0 (blocks of 32): an error naming it */
        const int rc =
            cera_lora_merge(&base, ad, two, 2, CERA_BINARY_DIR "/lora_merge_bad.gguf", CERA_TYPE_Q8_0, &err);
        CHECK(rc == CERA_ERR_UNSUPPORTED && strstr(err.message, "ffn_down"), "q8_0 on 172 columns: %d '%s'",
              rc, err.message);
        unlink(CERA_BINARY_DIR "/lora_merge_bad.gguf");
        merge_case(&base, bf, ad, two, 2, CERA_TYPE_F16, 1.0 / 1024, "a + 0.7 b into f16");
    }
    cera_lora_release(ad[0]);
    cera_lora_release(ad[1]);
    cera_model_free(&base);
    gguf_close(bf);

    /* The synthetic llama (256/768 wide) with its rank-16 adapter, requantized to Q8_0. */
    if (gguf_open(shared_path("golden/synth-llama-f32.gguf"), &bf, &err) ||
        cera_model_load(bf, &base, &err)) {
        CHECK(0, "synth-llama-f32: %s", err.message);
        return test_finish();
    }
    cera_adapter *s = NULL;
    CHECK(!cera_lora_load(&base, shared_path("golden/lora-synth-llama.gguf"), &s, &err), "synth: %s",
          err.message);
    if (s) {
        const float sc[1] = {0.75f};
        merge_case(&base, bf, &s, sc, 1, CERA_TYPE_Q8_0, 1.0 / 127, "synth 0.75 into q8_0");
    }
    cera_lora_release(s);
    cera_model_free(&base);
    gguf_close(bf);
    return test_finish();
}
