/*
 * test_lora_apply.c — the unmerged apply path on fresh random inputs:
 *   - the optimized row kernel equals the scalar reference bit for bit, and both are
 *     within float rounding of a double-precision y + s·B(A·x);
 *   - a batch mixing sequences with different adapter sets (and one adapter at
 *     different scales) gives every row the same bits as that row evaluated alone, both in
 *     the portable kernels and in the CPU backend's hook (over 1 to 4 threads, whose bits
 *     must not change, and within float rounding of the portable kernels);
 *   - the hook fused into a matmul's own job (cera_matmul_ex on an F32 weight; B·t on each
 *     tile or in post chunks) gives the bits of the matmul followed by the unfused form
 *     (cera_lora_cpu_apply), over 1 to 4 threads, for the mixed batch and each sequence alone;
 *   - the AVX-512 B·t kernel (16 outputs' reductions side by side) gives the AVX-512 F32
 *     tile's bits for every rank 1..70, row count 1..16 and column count 1..4;
 *   - a scale of 0 leaves y untouched bit for bit (even -0.0);
 *   - set bookkeeping: attach, rescale, detach, reference counts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "lora/lora.h"
#include "backend/cpu/lora.h"
#include "testutil.h"

#define N_LAYER 2
#define EMBD    72
#define FF      520 /* wide enough that the CPU hook uses its pooled paths */
#define NQ      64

static cera_model model;
static cera_layer layers[N_LAYER];
static const char dummy[1];

static void make_model(void) {
    model.hp.n_layer = N_LAYER;
    model.hp.n_embd = EMBD;
    model.hp.n_head = 4;
    model.hp.n_head_kv = 2;
    model.hp.n_ff = FF;
    model.layers = layers;
    const int64_t kn[CERA_PROJ_COUNT][2] = {{EMBD, NQ}, {EMBD, 32}, {EMBD, 32},       {NQ, EMBD},  {EMBD, FF},
                                            {EMBD, FF}, {FF, EMBD}, {EMBD, 3 * EMBD}, {EMBD, EMBD}};
    for (int l = 0; l < N_LAYER; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            layers[l].proj[p].k = kn[p][0];
            layers[l].proj[p].n = kn[p][1];
            layers[l].proj[p].data = dummy;
        }
}

/* An adapter with random factors of the given rank on every projection of every layer
 * (or only on projection `only` when >= 0). */
static cera_adapter *make_adapter(test_rng *r, int rank, float alpha, int only) {
    size_t n = 0;
    for (int l = 0; l < N_LAYER; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++)
            if (only < 0 || p == only)
                n += (size_t)rank * (size_t)(layers[l].proj[p].k + layers[l].proj[p].n);
    cera_adapter *a = NULL;
    cera_error err = {0};
    CHECK(cera_lora_alloc(&model, n, "random", &a, &err) == CERA_OK, "alloc: %s", err.message);
    for (int l = 0; l < N_LAYER; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            if (only >= 0 && p != only) continue;
            const cera_weight *w = &layers[l].proj[p];
            float *pa, *pb;
            CHECK(cera_lora_add_pair(a, &model, l, (cera_proj)p, rank, w->k, w->n, &pa, &pb, "random",
                                     &err) == CERA_OK,
                  "add_pair: %s", err.message);
            for (int64_t i = 0; i < rank * w->k; i++) pa[i] = test_rng_normal(r) * 0.3f;
            for (int64_t i = 0; i < rank * w->n; i++) pb[i] = test_rng_normal(r) * 0.3f;
        }
    a->alpha = alpha;
    return a;
}

static void fill(test_rng *r, float *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = test_rng_normal(r);
}

/* Row kernel vs reference vs double precision, over odd sizes. */
static void kernel_cases(test_rng *r) {
    const int ranks[] = {1, 5, 8, 16, 33, 64};
    const int64_t ks[] = {1, 7, 64, 200}, ds[] = {3, 64, 130};
    for (size_t ir = 0; ir < sizeof ranks / sizeof *ranks; ir++)
        for (size_t ik = 0; ik < sizeof ks / sizeof *ks; ik++)
            for (size_t id = 0; id < sizeof ds / sizeof *ds; id++) {
                const int rank = ranks[ir];
                const int64_t k = ks[ik], d = ds[id];
                float *a = malloc((size_t)(rank * k) * 4), *b = malloc((size_t)(rank * d) * 4);
                float *x = malloc((size_t)k * 4), *y1 = malloc((size_t)d * 4), *y2 = malloc((size_t)d * 4);
                fill(r, a, (size_t)(rank * k));
                fill(r, b, (size_t)(rank * d));
                fill(r, x, (size_t)k);
                fill(r, y1, (size_t)d);
                memcpy(y2, y1, (size_t)d * 4);
                const cera_lora_pair p = {rank, k, d, a, b};
                const float s = 0.37f;
                cera_lora_apply_row(&p, s, x, y1, 0, d);
                cera_lora_apply_row_ref(&p, s, x, y2, 0, d);
                CHECK(!memcmp(y1, y2, (size_t)d * 4), "rank %d k %lld d %lld: kernel != reference", rank,
                      (long long)k, (long long)d);
                free(a);
                free(b);
                free(x);
                free(y1);
                free(y2);
            }
    /* Accuracy on a fixed case: y starts at 0 so y is exactly s·u rounded. */
    const int rank = 16;
    const int64_t k = 300, d = 50;
    float *a = malloc((size_t)(rank * k) * 4), *b = malloc((size_t)(rank * d) * 4), x[300], y[50] = {0};
    fill(r, a, (size_t)(rank * k));
    fill(r, b, (size_t)(rank * d));
    fill(r, x, (size_t)k);
    const cera_lora_pair p = {rank, k, d, a, b};
    cera_lora_apply_row(&p, 0.5f, x, y, 0, d);
    double worst = 0;
    for (int64_t i = 0; i < d; i++) {
        double u = 0, mag = 0;
        for (int j = 0; j < rank; j++) {
            double t = 0, tm = 0;
            for (int64_t c = 0; c < k; c++) {
                t += (double)a[j * k + c] * x[c];
                tm += fabs((double)a[j * k + c] * x[c]);
            }
            u += (double)b[i * rank + j] * t;
            mag += fabs((double)b[i * rank + j]) * tm;
        }
        worst = fmax(worst, fabs(y[i] - 0.5 * u) / (0.5 * mag));
    }
    CHECK(worst < 1e-5, "accuracy vs double: relative error %g", worst);
    free(a);
    free(b);
}

/* cera_lora_bt16_avx512 against the AVX-512 F32 tile it must equal, bit for bit (x86-64
 * builds only: the kernel lives in backend/cpu/x86). */
static void bt16_cases(test_rng *r) {
#if !defined(__x86_64__)
    (void)r;
    printf("not an x86-64 build: no B·t kernel to check\n");
#else
    const cera_cpu_type_ops *ops = cera_cpu_ops_tier("avx512", CERA_TYPE_F32);
    if (!ops || !ops->gemm_tile) {
        printf("no AVX-512 on this CPU: B·t kernel not checked\n");
        return;
    }
    enum { N = 70 };
    static float b[16 * N], t[4 * N];
    int bad = 0, n_cases = 0;
    for (int n = 1; n <= N; n++) {
        fill(r, b, 16 * (size_t)n);
        fill(r, t, 4 * N);
        for (int nr = 1; nr <= 16; nr++)
            for (int nc = 1; nc <= 4; nc++) {
                float u[4 * 16], v[4 * 16];
                cera_lora_bt16_avx512(n, u, 16, b, nr, t, N, nc);
                for (int r0 = 0; r0 < nr; r0 += ops->tile_rows) {
                    const int m = nr - r0 < ops->tile_rows ? nr - r0 : ops->tile_rows;
                    for (int c0 = 0; c0 < nc; c0 += ops->tile_cols) {
                        const int k = nc - c0 < ops->tile_cols ? nc - c0 : ops->tile_cols;
                        ops->gemm_tile(n, v + 16 * c0 + r0, 16, b + (size_t)r0 * n, (size_t)n * 4, t + c0 * N,
                                       N * 4, m, k);
                    }
                }
                for (int c = 0; c < nc; c++) bad += memcmp(u + 16 * c, v + 16 * c, (size_t)nr * 4) != 0;
                n_cases++;
            }
    }
    CHECK(bad == 0, "B·t kernel differs from the F32 tile in %d of %d cases", bad, n_cases);
#endif
}

#define ROWS 13

/* The projection's F32 weight with its adapters fused into the matmul job, against the
 * matmul then the standalone hook: the same bits? x [n_rows, k] dense, y rows FF apart. */
static bool fused_same(cera_pool *pool, const cera_lora_batch *plan, int l, cera_proj p, const cera_weight *w,
                       const float *x, int n_rows, int mode) {
    static float yf[ROWS][FF], yr[ROWS][FF];
    const cera_cpu_type_ops *ops = cera_cpu_ops(CERA_TYPE_F32);
    memset(yf, 0x7f, sizeof yf);
    memset(yr, 0x7f, sizeof yr);
    /* fused first: the plan's A·x scratch then holds the previous case's values */
    cera_lora_cpu_set_fusion(mode);
    cera_lora_cpu_job lj;
    const cera_matmul_hook *h = cera_lora_cpu_hook(&lj, pool, plan, l, p, x, (size_t)w->k, &yf[0][0], FF);
    cera_matmul_ex(pool, w, NULL, ops, x, n_rows, &yf[0][0], FF, NULL, h);
    cera_lora_cpu_after(&lj);
    cera_lora_cpu_set_fusion(-1);
    cera_matmul(pool, w, ops, x, n_rows, &yr[0][0], FF, NULL);
    cera_lora_cpu_apply(pool, plan, l, p, x, (size_t)w->k, &yr[0][0], FF);
    return h && !memcmp(yf, yr, sizeof yf);
}

static void batch_cases(test_rng *r) {
    cera_adapter *A = make_adapter(r, 32, 16.0f, -1), *B = make_adapter(r, 4, 0.0f, -1),
                 *C = make_adapter(r, 16, 32.0f, CERA_PROJ_DOWN);
    cera_error err = {0};
    cera_lora_set sets[5] = {0};
    CHECK(!cera_lora_set_put(&sets[0], A, 1.0f, &err), "put");
    CHECK(!cera_lora_set_put(&sets[1], B, 0.5f, &err) && !cera_lora_set_put(&sets[1], A, 0.25f, &err), "put");
    /* sets[2] empty */
    CHECK(!cera_lora_set_put(&sets[3], A, 0.0f, &err), "put scale 0");
    CHECK(!cera_lora_set_put(&sets[4], C, 1.0f, &err) && !cera_lora_set_put(&sets[4], B, 2.0f, &err) &&
              !cera_lora_set_put(&sets[4], A, -1.0f, &err),
          "put");
    CHECK(atomic_load(&A->refs) == 5, "A refs %d (loader + 4 sets)", atomic_load(&A->refs));
    CHECK(cera_lora_set_empty(&sets[2]) && cera_lora_set_empty(&sets[3]) && !cera_lora_set_empty(&sets[0]),
          "set_empty");
    const cera_lora_set *seq_sets[6] = {&sets[0], &sets[1], &sets[2], &sets[3], &sets[4], NULL};
    const int32_t row_seq[ROWS] = {0, 0, 1, 2, 1, 3, 4, 0, 1, 5, 4, 4, 3};

    cera_lora_batch batch, solo, solo_n;
    CHECK(!cera_lora_batch_init(&batch, ROWS, &err) && !cera_lora_batch_init(&solo, 1, &err) &&
              !cera_lora_batch_init(&solo_n, ROWS, &err),
          "batch init");
    cera_pool *pools[4] = {0};
    for (int i = 0; i < 4; i++) CHECK(!cera_pool_new(i + 1, &pools[i], &err), "pool: %s", err.message);
    cera_lora_batch_build(&batch, row_seq, seq_sets, ROWS);
    CHECK(batch.n_groups == 3, "%d groups (A, B, C)", batch.n_groups);
    for (int g = 1; g < batch.n_groups; g++)
        CHECK(batch.groups[g - 1].adapter->id < batch.groups[g].adapter->id, "groups in id order");

    static float x[ROWS][FF], y0[ROWS][FF], yb[ROWS][FF], ys[ROWS][FF], yp[ROWS][FF], yc[ROWS][FF];
    static float wdata[FF * FF], xd[ROWS * FF];
    for (int l = 0; l < N_LAYER; l++)
        for (int p = 0; p < CERA_PROJ_COUNT; p++) {
            const int64_t k = layers[l].proj[p].k, d = layers[l].proj[p].n;
            fill(r, &x[0][0], sizeof x / 4);
            fill(r, &y0[0][0], sizeof y0 / 4);
            y0[5][0] = -0.0f; /* scale 0 must keep the sign of zero */
            y0[3][1] = -0.0f;
            memcpy(yb, y0, sizeof y0);
            cera_lora_batch_apply(&batch, l, (cera_proj)p, &x[0][0], FF, &yb[0][0], FF, 0, d);
            bool all_same = true, changed = false, part_same = true;
            for (int row = 0; row < ROWS; row++) {
                /* the row alone, as a decode step of its sequence */
                memcpy(ys[row], y0[row], sizeof ys[row]);
                const int32_t zero = 0;
                cera_lora_batch_build(&solo, &zero, &seq_sets[row_seq[row]], 1);
                cera_lora_batch_apply(&solo, l, (cera_proj)p, x[row], FF, ys[row], FF, 0, d);
                if (memcmp(ys[row], yb[row], (size_t)d * 4)) all_same = false;
                if (memcmp(y0[row], yb[row], (size_t)d * 4)) changed = true;
                const bool inert = row_seq[row] == 2 || row_seq[row] == 3 || row_seq[row] == 5;
                if (inert)
                    CHECK(!memcmp(y0[row], yb[row], (size_t)d * 4), "layer %d %s row %d: inert row changed",
                          l, cera_lora_proj_gguf_name((cera_proj)p), row);
            }
            CHECK(all_same, "layer %d %s: batch rows differ from solo rows", l,
                  cera_lora_proj_gguf_name((cera_proj)p));
            CHECK(changed, "layer %d %s: nothing changed", l, cera_lora_proj_gguf_name((cera_proj)p));
            /* the CPU backend's hook: any thread count gives the same bits, within float
             * rounding of the portable kernels */
            for (int nt = 0; nt < 4; nt++) {
                memcpy(yp, y0, sizeof y0);
                cera_lora_cpu_apply(pools[nt], &batch, l, (cera_proj)p, &x[0][0], FF, &yp[0][0], FF);
                if (nt == 0) {
                    memcpy(yc, yp, sizeof yp);
                    double worst = 0;
                    for (int row = 0; row < ROWS; row++)
                        for (int64_t i = 0; i < d; i++) {
                            /* a compare, not fmax: aarch64 gcc 12 -O3 crashes vectorizing that
                             * reduction (internal compiler error in vect_transform_reduction) */
                            const double rel =
                                fabs(yc[row][i] - yb[row][i]) / (1 + fabs(yb[row][i] - y0[row][i]));
                            if (rel > worst) worst = rel;
                        }
                    CHECK(worst < 1e-5, "layer %d %s: CPU hook vs portable kernels: %g", l,
                          cera_lora_proj_gguf_name((cera_proj)p), worst);
                } else {
                    part_same &= !memcmp(yp, yc, sizeof yc);
                }
            }
            /* and each sequence's rows alone (a decode step or a short prompt) give the bits
             * they get inside the batch */
            for (int sq = 0; sq < 6; sq++) {
                int32_t rows_of[ROWS], zero[ROWS] = {0};
                int nr = 0;
                for (int row = 0; row < ROWS; row++)
                    if (row_seq[row] == sq) rows_of[nr++] = row;
                if (!nr) continue;
                float xs[ROWS][FF], ysq[ROWS][FF];
                for (int i = 0; i < nr; i++) {
                    memcpy(xs[i], x[rows_of[i]], sizeof xs[i]);
                    memcpy(ysq[i], y0[rows_of[i]], sizeof ysq[i]);
                }
                cera_lora_batch_build(&solo_n, zero, &seq_sets[sq], nr);
                cera_lora_cpu_apply(pools[sq % 4], &solo_n, l, (cera_proj)p, &xs[0][0], FF, &ysq[0][0], FF);
                for (int i = 0; i < nr; i++) part_same &= !memcmp(ysq[i], yc[rows_of[i]], (size_t)d * 4);
            }
            CHECK(part_same, "layer %d %s: the CPU hook's bits depend on threads or batch", l,
                  cera_lora_proj_gguf_name((cera_proj)p));
            /* fused into the projection's matmul job (x dense for the matmul) */
            const cera_weight w = {.type = CERA_TYPE_F32, .k = k, .n = d, .data = wdata};
            fill(r, wdata, (size_t)(k * d));
            for (int row = 0; row < ROWS; row++) memcpy(xd + row * k, x[row], (size_t)k * 4);
            bool fused = true;
            for (int nt = 0; nt < 4; nt++)
                for (int mode = 1; mode <= 2; mode++)
                    fused &= fused_same(pools[nt], &batch, l, (cera_proj)p, &w, xd, ROWS, mode);
            for (int sq = 0; sq < 6; sq++) {
                int32_t zero[ROWS] = {0};
                int nr = 0;
                for (int row = 0; row < ROWS; row++)
                    if (row_seq[row] == sq) memcpy(xd + nr++ * k, x[row], (size_t)k * 4);
                cera_lora_batch_build(&solo_n, zero, &seq_sets[sq], nr);
                if (nr && cera_lora_batch_targets(&solo_n, l, (cera_proj)p))
                    fused &=
                        fused_same(pools[(sq + 1) % 4], &solo_n, l, (cera_proj)p, &w, xd, nr, 1 + sq % 2);
            }
            CHECK(fused, "layer %d %s: the hook fused into the matmul differs from matmul + hook", l,
                  cera_lora_proj_gguf_name((cera_proj)p));
            CHECK(cera_lora_batch_targets(&batch, l, (cera_proj)p), "targets");
        }

    /* The uniform build (one set for all rows) equals the general one. */
    const int32_t zeros[ROWS] = {0};
    const cera_lora_set *one[1] = {&sets[4]};
    cera_lora_batch_build(&batch, zeros, one, ROWS);
    memcpy(yb, y0, sizeof y0);
    cera_lora_batch_apply(&batch, 1, CERA_PROJ_DOWN, &x[0][0], FF, &yb[0][0], FF, 0, EMBD);
    cera_lora_batch_build_uniform(&batch, &sets[4], ROWS);
    memcpy(yp, y0, sizeof y0);
    cera_lora_batch_apply(&batch, 1, CERA_PROJ_DOWN, &x[0][0], FF, &yp[0][0], FF, 0, EMBD);
    CHECK(!memcmp(yb, yp, sizeof yb) && memcmp(yb, y0, sizeof yb), "uniform build differs");
    cera_lora_batch_build_uniform(&batch, &sets[3], ROWS);
    CHECK(batch.n_groups == 0, "uniform build of a scale-0 set has groups");
    cera_lora_batch_build(&batch, row_seq, seq_sets, ROWS);
    CHECK(!cera_lora_batch_targets(&batch, 0, CERA_PROJ_Q) || batch.n_groups, "targets");

    /* Set bookkeeping. */
    CHECK(!cera_lora_set_put(&sets[0], A, 3.0f, &err) && sets[0].n == 1 && sets[0].e[0].scale == 3.0f,
          "rescale");
    CHECK(cera_lora_set_remove(&sets[0], A) && sets[0].n == 0 && !cera_lora_set_remove(&sets[0], A),
          "remove");
    CHECK(atomic_load(&A->refs) == 4, "A refs after remove %d", atomic_load(&A->refs));
    cera_lora_set full = {0};
    cera_adapter *many[CERA_LORA_MAX_SET + 1];
    int ok = 0;
    for (int i = 0; i <= CERA_LORA_MAX_SET; i++) {
        many[i] = make_adapter(r, 1, 0, CERA_PROJ_V);
        if (!cera_lora_set_put(&full, many[i], 1.0f, &err)) ok++;
    }
    CHECK(ok == CERA_LORA_MAX_SET && err.status == CERA_ERR_INVALID_ARG, "set capacity: %d attached", ok);
    cera_lora_set_clear(&full);
    for (int i = 0; i <= CERA_LORA_MAX_SET; i++) {
        CHECK(atomic_load(&many[i]->refs) == 1, "refs after clear");
        cera_lora_release(many[i]);
    }
    for (int i = 0; i < 5; i++) cera_lora_set_clear(&sets[i]);
    CHECK(atomic_load(&A->refs) == 1 && atomic_load(&B->refs) == 1, "refs after clearing sets");
    cera_lora_release(A);
    cera_lora_release(B);
    cera_lora_release(C);
    cera_lora_batch_free(&batch);
    cera_lora_batch_free(&solo);
    cera_lora_batch_free(&solo_n);
    for (int i = 0; i < 4; i++) cera_pool_free(pools[i]);
}

int main(void) {
    test_rng r = {0x5eed10a};
    make_model();
    kernel_cases(&r);
    bt16_cases(&r);
    batch_cases(&r);
    return test_finish();
}
