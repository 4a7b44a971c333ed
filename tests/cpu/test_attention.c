/*
 * test_attention.c — the CPU attention (backend/cpu/attention.h) against a scalar
 * reference in double, on fresh random inputs over a KV pool with two layouts at once: a
 * full layer of two KV heads and a sliding-window layer of one (different row widths,
 * groups of their own). Both modes (one token at a time; F32: tiles of a long run), every
 * KV type for K and V (alike and mixed, with and without the rotation of V, which the
 * attention turns back), and a window that has moved past blocks the pool already took back
 * (the attention must neither read them nor see keys before the window). The reference
 * reads the cache as stored and takes Q as the kernel's dot product sees it (in K's dot
 * type), so what is left is the kernel's own rounding. Run once per tier by CTest (the
 * default one and CERA_CPU_TIER=scalar).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/kv_rows.h"
#include "core/fp16.h"
#include "kv/kv_cache.h"
#include "testutil.h"

enum { N_HEAD = 4, D = 64, WINDOW = 20, N_POS = 300 };

static const int rows[2] = {2 * D, 1 * D};
static const int n_head_kv[2] = {2, 1};
static const bool swa[2] = {false, true};

/* Element i of a cache row as the attention reads it: a rotated V row turned back. */
static float kv_get(const cera_kv_seq *s, int layer, int kv, int pos, int i) {
    const cera_kv_format *f = &s->pool->fmt;
    float row[2 * D];
    cera_cpu_kv_load(kv ? f->v : f->k, cera_kv_row(s, layer, kv, pos), row, rows[layer]);
    if (kv && f->rot_v) cera_fwht_f32(row, rows[layer], f->rot_v);
    return row[i];
}

/* Random K and V rows for positions from .. to-1 of both layers (V rotated where the format
 * says, as the forward pass stores it). */
static void fill(cera_kv_seq *s, int from, int to, test_rng *rng) {
    const cera_kv_format *f = &s->pool->fmt;
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < 2; l++)
            for (int kv = 0; kv < 2; kv++) {
                float x[2 * D];
                for (int i = 0; i < rows[l]; i++) x[i] = 2.0f * test_rng_uniform(rng) - 1.0f;
                if (kv && f->rot_v) cera_fwht_f32(x, rows[l], f->rot_v);
                cera_cpu_kv_store(kv ? f->v : f->k, x, cera_kv_row(s, l, kv, pos), rows[l]);
            }
}

/* q as the one-at-a-time mode's dot products see it: each head in K's dot type and back. */
static void q_as_dot_type(const cera_kv_format *f, const float *q, float *out) {
    const cera_cpu_type_ops *o = cera_cpu_ops(cera_kv_tensor_type(f->k));
    uint8_t buf[D * sizeof(float)];
    for (int h = 0; h < N_HEAD; h++) {
        o->quantize_act(q + h * D, buf, D);
        if (o->act_type == CERA_TYPE_F32)
            memcpy(out + h * D, buf, D * sizeof(float));
        else
            cera_type_get(o->act_type)->to_float(buf, out + h * D, D);
    }
}

/* out = softmax(q · K * scale) V over the keys token t sees, in double. */
static void reference(const cera_kv_seq *s, int layer, int window, const float *q, int pos, float scale,
                      float *out) {
    const int lo = window && pos - window + 1 > 0 ? pos - window + 1 : 0;
    for (int h = 0; h < N_HEAD; h++) {
        const int kvh = h / (N_HEAD / n_head_kv[layer]);
        double m = -INFINITY, sum = 0, acc[D] = {0};
        double sc[N_POS];
        for (int p = lo; p <= pos; p++) {
            double d = 0;
            for (int i = 0; i < D; i++) d += (double)q[h * D + i] * kv_get(s, layer, 0, p, kvh * D + i);
            sc[p] = d * scale;
            if (sc[p] > m) m = sc[p];
        }
        for (int p = lo; p <= pos; p++) {
            const double w = exp(sc[p] - m);
            sum += w;
            for (int i = 0; i < D; i++) acc[i] += w * kv_get(s, layer, 1, p, kvh * D + i);
        }
        for (int i = 0; i < D; i++) out[h * D + i] = (float)(acc[i] / sum);
    }
}

/* Tokens at positions p0 .. p0+n-1 of one sequence through layer, as a run of n (mode by n)
 * or one token at a time; the worst difference from the reference. */
static double run(cera_kv_seq *s, int layer, int window, int p0, int n, bool one_by_one, test_rng *rng) {
    float *q = malloc((size_t)n * N_HEAD * D * sizeof *q),
          *out = malloc((size_t)n * N_HEAD * D * sizeof *out);
    int32_t *pos = malloc((size_t)n * sizeof *pos), *seq = calloc((size_t)n, sizeof *seq);
    cera_attn_span *spans = malloc((size_t)n * sizeof *spans);
    void *scratch = malloc(cera_attention_scratch_size(D));
    float ref[N_HEAD * D], qd[N_HEAD * D];
    double worst = INFINITY;
    if (!q || !out || !pos || !seq || !spans || !scratch) goto done;
    for (int i = 0; i < n * N_HEAD * D; i++) q[i] = test_rng_normal(rng);
    for (int t = 0; t < n; t++) pos[t] = p0 + t;
    cera_kv_seq *seqs[1] = {s};
    cera_attn_args a = {.q = q,
                        .out = out,
                        .n_tokens = n,
                        .n_head = N_HEAD,
                        .n_head_kv = n_head_kv[layer],
                        .head_dim = D,
                        .pos = pos,
                        .seq = seq,
                        .seqs = seqs,
                        .layer = layer,
                        .scale = 0.125f,
                        .window = window,
                        .spans = spans};
    const int32_t count = one_by_one ? 1 : n;
    a.n_spans = cera_attention_spans(&a, &count, spans);
    for (int64_t c = 0; c < cera_attention_n_chunks(&a); c++) cera_attention_chunk(&a, c, scratch);
    worst = 0;
    for (int t = 0; t < n; t++) {
        const float *qt = q + (size_t)t * N_HEAD * D;
        if (spans[0].one) {
            q_as_dot_type(&s->pool->fmt, qt, qd);
            qt = qd;
        }
        reference(s, layer, window, qt, pos[t], a.scale, ref);
        for (int i = 0; i < N_HEAD * D; i++) {
            const double d = fabs((double)out[(size_t)t * N_HEAD * D + i] - ref[i]);
            if (!(d <= worst)) worst = d; /* NaN too */
        }
    }
done:
    free(q);
    free(out);
    free(pos);
    free(seq);
    free(spans);
    free(scratch);
    return worst;
}

static void test_cache(cera_kv_format f) {
    char tn[48];
    snprintf(tn, sizeof tn, "%s/%s%s", cera_kv_type_name(f.k), cera_kv_type_name(f.v),
             f.rot_v ? " rotated" : "");
    /* an F16 accumulator (an F16 V, one token at a time) rounds each update to F16 (a few 1e-3
     * on values in [-1, 1]); the others have float rounding only */
    const double tol16 = 8e-3, tol32 = 2e-5;
    const bool plain = f.k == f.v && (f.k == CERA_KV_F16 || f.k == CERA_KV_F32);
    const double tol_one = f.v == CERA_KV_F16 ? tol16 : tol32, tol_run = plain ? tol32 : tol_one;
    cera_kv_layout lay = {2, rows, swa, WINDOW, {16, 16}};
    cera_kv_pool *p = NULL;
    cera_error err = {0};
    CHECK(cera_kv_pool_new(&f, &lay, 1, 1024, 0, true, &p, &err) == CERA_OK, "pool: %s", err.message);
    if (!p) return;
    cera_kv_seq s;
    CHECK(cera_kv_seq_open(p, &s, &err) == CERA_OK, "open: %s", err.message);
    test_rng rng = {11u + (unsigned)f.k * 7u + (unsigned)f.v};
    cera_kv_copy c;
    int nc;
    CHECK(cera_kv_seq_reserve(&s, 100, &c, &nc, &err) == CERA_OK, "reserve: %s", err.message);
    fill(&s, 0, 100, &rng);
    s.n_pos = 100;
    for (int layer = 0; layer < 2; layer++) {
        const int w = layer == 1 ? WINDOW : 0;
        const double d1 = run(&s, layer, w, 0, 100, true, &rng), dn = run(&s, layer, w, 0, 100, false, &rng);
        printf("%s cache, %s layer: one by one %.2e, a run of 100 %.2e\n", tn, w ? "sliding" : "full", d1,
               dn);
        CHECK(d1 <= tol_one, "%s %d: one token at a time: %.3g", tn, layer, d1);
        CHECK(dn <= tol_run, "%s %d: a run of 100: %.3g", tn, layer, dn);
    }
    /* one position at a time to 230: the window drops the sliding blocks before it */
    bool ok = true;
    for (int pos = 100; pos < 230 && ok; pos++) {
        ok = cera_kv_seq_reserve(&s, pos + 1, &c, &nc, &err) == CERA_OK;
        fill(&s, pos, pos + 1, &rng);
        s.n_pos = pos + 1;
    }
    CHECK(ok && s.first[CERA_KV_SWA] >= 6, "the window did not move on (first held block %d)",
          s.first[CERA_KV_SWA]);
    /* then a run of 70 (230..299): its window starts at 211, in a tile whose first blocks are gone */
    CHECK(cera_kv_seq_reserve(&s, 300, &c, &nc, &err) == CERA_OK, "reserve: %s", err.message);
    fill(&s, 230, 300, &rng);
    s.n_pos = 300;
    const double dn = run(&s, 1, WINDOW, 230, 70, false, &rng), d1 = run(&s, 1, WINDOW, 230, 70, true, &rng);
    const double df = run(&s, 0, 0, 230, 70, false, &rng);
    printf("%s cache after the window moved: sliding run %.2e, one by one %.2e; full run %.2e\n", tn, dn, d1,
           df);
    CHECK(dn <= tol_run && df <= tol_run, "%s: runs after the window moved: %.3g / %.3g", tn, dn, df);
    CHECK(d1 <= tol_one, "%s: one by one after the window moved: %.3g", tn, d1);
    cera_kv_seq_close(&s);
    cera_kv_pool_free(p);
}

int main(void) {
    static const cera_kv_format formats[] = {
        {CERA_KV_F16, CERA_KV_F16, 0, 0},     {CERA_KV_F32, CERA_KV_F32, 0, 0},
        {CERA_KV_BF16, CERA_KV_BF16, 0, 0},   {CERA_KV_Q8_0, CERA_KV_Q8_0, 0, 0},
        {CERA_KV_Q8_0, CERA_KV_Q8_0, 64, 64}, {CERA_KV_Q4_0, CERA_KV_Q4_0, 64, 64},
        {CERA_KV_Q8_0, CERA_KV_F16, 64, 0},   {CERA_KV_F16, CERA_KV_Q4_0, 0, 64},
        {CERA_KV_F32, CERA_KV_F16, 0, 0},     {CERA_KV_Q4_0, CERA_KV_BF16, 0, 0},
    };
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) test_cache(formats[i]);
    return test_finish();
}
