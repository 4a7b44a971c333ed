/*
 * kernel_bench.c — how close each CPU dot-product kernel gets to the memory bandwidth.
 *
 * For each weight type and each kernel tier this CPU runs, it multiplies a weight matrix much
 * larger than the last-level cache (default 256 MiB of weight bytes, rows of 4096) with one
 * quantized activation row, as a decode step does, on 1 and on 2 threads, and prints the
 * weight bytes read per second. First it measures the machine's read bandwidth with a plain
 * vectorised sum over a buffer of the same size, so each kernel's GB/s can be read as a
 * fraction of what the memory can give. Not a test: numbers only.
 *
 * The same through gemm_tile with one activation column (how the forward pass runs a decode
 * step where the tier has a register tile) follows on the same line. Then, for prefill, a [512 x 4096] weight
 * matrix times 64 activation rows on one thread, in chunks of 32 rows x 32 activation rows as the matmul
 * driver does, once through vec_dot per (row, column), once through the tier's gemm_tile where it has one and
 * once through its packed tile over the rows repacked (repack.h) where it has one: GOP/s (2 per
 * multiply-add).
 *
 *   kernel_bench [--mib N] [--types q4_0,q8_0,...] [--tiers scalar,avx2,...] [--reps R] [--no-matvec]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/kernels.h"
#ifdef CERA_KB_PACKED
#include "backend/cpu/repack.h"
#endif
#include "kernel_inputs.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- read bandwidth: sum 64-bit words, 8 independent accumulators per thread ---- */

typedef struct sum_job {
    const uint64_t *p;
    size_t n;
    uint64_t out;
} sum_job;

#if defined(__x86_64__)
__attribute__((target("avx2")))
#endif
static void *
sum_words(void *arg) {
    sum_job *j = arg;
    uint64_t acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= j->n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += j->p[i + k];
    for (; i < j->n; i++) acc[0] += j->p[i];
    j->out = acc[0] + acc[1] + acc[2] + acc[3] + acc[4] + acc[5] + acc[6] + acc[7];
    return NULL;
}

static double read_bandwidth(const void *buf, size_t bytes, int threads, int reps) {
    double best = 1e30;
    uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        sum_job jobs[2];
        pthread_t th[2];
        const size_t words = bytes / 8, per = words / (size_t)threads;
        const double t0 = now();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (sum_job){(const uint64_t *)buf + per * (size_t)t, per, 0};
            if (t) pthread_create(&th[t], NULL, sum_words, &jobs[t]);
        }
        sum_words(&jobs[0]);
        for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
        const double dt = now() - t0;
        for (int t = 0; t < threads; t++) sink += jobs[t].out;
        if (dt < best) best = dt;
    }
    if (sink == 42) printf(" ");
    return (double)bytes / best / 1e9;
}

/* ---- matrix x vector through the kernel table ---- */

typedef struct mv_job {
    const cera_cpu_type_ops *ops;
    const uint8_t *w;
    size_t row_bytes;
    int64_t n, row0, row1;
    const void *act;
    float *out;
    bool tile; /* through gemm_tile with one column, as the forward pass's decode step */
} mv_job;

static void *matvec_rows(void *arg) {
    mv_job *j = arg;
    if (j->tile) {
        const int R = j->ops->tile_rows;
        for (int64_t r = j->row0; r < j->row1; r += R) {
            const int nr = (int)(j->row1 - r < R ? j->row1 - r : R);
            j->ops->gemm_tile(j->n, &j->out[r], 0, j->w + (size_t)r * j->row_bytes, j->row_bytes, j->act, 0,
                              nr, 1);
        }
        return NULL;
    }
    for (int64_t r = j->row0; r < j->row1; r++)
        j->ops->vec_dot(j->n, &j->out[r], j->w + (size_t)r * j->row_bytes, j->act);
    return NULL;
}

static double matvec_gbs(const cera_cpu_type_ops *ops, const uint8_t *w, size_t row_bytes, int64_t rows,
                         int64_t n, const void *act, float *out, int threads, int reps, bool tile) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        mv_job jobs[2];
        pthread_t th[2];
        const double t0 = now();
        for (int t = 0; t < threads; t++) {
            /* split on tile boundaries so both threads run full tiles */
            const int64_t q = tile ? ops->tile_rows : 1;
            jobs[t] = (mv_job){ops,
                               w,
                               row_bytes,
                               n,
                               rows / q * t / threads * q,
                               t + 1 == threads ? rows : rows / q * (t + 1) / threads * q,
                               act,
                               out,
                               tile};
            if (t) pthread_create(&th[t], NULL, matvec_rows, &jobs[t]);
        }
        matvec_rows(&jobs[0]);
        for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return (double)rows * (double)row_bytes / best / 1e9;
}

#ifdef CERA_KB_PACKED
/* ---- matrix x vector through the tier's packed tile (16-row groups, repack.h), as the forward pass
 * runs a decode step on weights repacked at load ---- */

typedef struct pk_job {
    const cera_cpu_type_ops *ops;
    const uint8_t *pw; /* packed groups */
    size_t group_bytes;
    int64_t n, g0, g1;
    const void *act, *aux;
    float *out;
} pk_job;

static void *packed_groups(void *arg) {
    pk_job *j = arg;
    for (int64_t g = j->g0; g < j->g1; g++)
        j->ops->packed_tile(j->n, j->out + g * CERA_PACK_ROWS, 0, j->pw + (size_t)g * j->group_bytes, j->act,
                            0, j->aux, 0, 1);
    return NULL;
}

/* GB/s of packed weight bytes; every group of 16 rows gets one packed_tile call. */
static double packed_gbs(const cera_cpu_type_ops *ops, const uint8_t *pw, size_t group_bytes, int64_t groups,
                         int64_t n, const void *act, const void *aux, float *out, int threads, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        pk_job jobs[2];
        pthread_t th[2];
        const double t0 = now();
        for (int t = 0; t < threads; t++) {
            jobs[t] = (pk_job){ops, pw,  group_bytes, n, groups * t / threads, groups * (t + 1) / threads,
                               act, aux, out};
            if (t) pthread_create(&th[t], NULL, packed_groups, &jobs[t]);
        }
        packed_groups(&jobs[0]);
        for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return (double)groups * (double)group_bytes / best / 1e9;
}
#endif

/* [rows x n] weights times cols activation rows -> GOP/s; tile = 0 uses vec_dot only. */
static double matmul_gops(const cera_cpu_type_ops *ops, const uint8_t *w, size_t row_bytes, int64_t rows,
                          int64_t n, const uint8_t *act, size_t act_bytes, int cols, float *out, bool tile,
                          int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = now();
        for (int64_t r0 = 0; r0 < rows; r0 += 32)
            for (int c0 = 0; c0 < cols; c0 += 32) {
                if (tile) {
                    for (int64_t r = r0; r < r0 + 32; r += ops->tile_rows)
                        for (int c = c0; c < c0 + 32; c += ops->tile_cols) {
                            const int nr = (int)(r0 + 32 - r < ops->tile_rows ? r0 + 32 - r : ops->tile_rows);
                            const int nc = c0 + 32 - c < ops->tile_cols ? c0 + 32 - c : ops->tile_cols;
                            ops->gemm_tile(n, out + (size_t)c * (size_t)rows + (size_t)r, (size_t)rows,
                                           w + (size_t)r * row_bytes, row_bytes, act + (size_t)c * act_bytes,
                                           act_bytes, nr, nc);
                        }
                } else {
                    for (int64_t r = r0; r < r0 + 32; r++)
                        for (int c = c0; c < c0 + 32; c++)
                            ops->vec_dot(n, out + (size_t)c * (size_t)rows + (size_t)r,
                                         w + (size_t)r * row_bytes, act + (size_t)c * act_bytes);
                }
            }
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * (double)rows * (double)n * cols / best / 1e9;
}

#ifdef CERA_KB_PACKED
/* The same through the tier's packed tile: [rows x n] weights repacked into groups of 16 rows
 * (pw), each activation row's block terms in aux; chunks of 32 rows x 32 columns as above. */
static double packed_matmul_gops(const cera_cpu_type_ops *ops, const uint8_t *pw, size_t group_bytes,
                                 int64_t rows, int64_t n, const uint8_t *act, size_t act_bytes,
                                 const uint8_t *aux, size_t aux_bytes, int cols, float *out, int reps) {
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = now();
        for (int64_t r0 = 0; r0 < rows; r0 += 32)
            for (int c0 = 0; c0 < cols; c0 += 32)
                for (int64_t g = r0 / CERA_PACK_ROWS; g < (r0 + 32) / CERA_PACK_ROWS; g++)
                    for (int c = c0; c < c0 + 32; c += ops->packed_cols) {
                        const int nc = c0 + 32 - c < ops->packed_cols ? c0 + 32 - c : ops->packed_cols;
                        ops->packed_tile(n, out + (size_t)c * (size_t)rows + (size_t)g * CERA_PACK_ROWS,
                                         (size_t)rows, pw + (size_t)g * group_bytes,
                                         act + (size_t)c * act_bytes, act_bytes, aux + (size_t)c * aux_bytes,
                                         aux_bytes, nc);
                    }
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * (double)rows * (double)n * cols / best / 1e9;
}
#endif

static bool listed(const char *list, const char *name) {
    if (!list) return true;
    const size_t len = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += len)
        if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == 0)) return true;
    return false;
}

int main(int argc, char **argv) {
    size_t mib = 256;
    int reps = 3;
    bool matvec = true;
    const char *types = NULL, *tiers_wanted = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc)
            types = argv[++i];
        else if (!strcmp(argv[i], "--tiers") && i + 1 < argc)
            tiers_wanted = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-matvec"))
            matvec = false;
        else {
            fprintf(stderr,
                    "usage: kernel_bench [--mib N] [--types a,b] [--tiers a,b] [--reps R] [--no-matvec]\n");
            return strcmp(argv[i], "--help") ? 1 : 0;
        }
    }
    const size_t bytes = mib << 20;
    const int64_t n = 4096;
    uint8_t *buf = aligned_alloc(64, bytes);
    float *out = malloc(sizeof(float) * (bytes / 16 + 1));
    float *x = malloc(sizeof(float) * (size_t)n);
    void *act = malloc(sizeof(float) * (size_t)n * 2);
    if (!buf || !out || !x || !act) {
        fprintf(stderr, "kernel_bench: out of memory\n");
        return 1;
    }
    test_rng rng = {7};
    memset(buf, 1, bytes);
    int ntiers;
    const char *const *tiers = cera_cpu_tier_list(&ntiers);
    if (matvec) {
        printf(
            "# read bandwidth (sum of 64-bit words over %zu MiB): 1 thread %.1f GB/s, 2 threads %.1f GB/s\n",
            mib, read_bandwidth(buf, bytes, 1, reps), read_bandwidth(buf, bytes, 2, reps));
        printf("# matrix x vector, rows of %lld, weight GB/s; selected tier %s\n", (long long)n,
               cera_cpu_tier_name());
        printf("%-8s %-8s %10s %10s %10s %10s %10s %10s\n", "type", "tier", "dot 1 thr", "dot 2 thr",
               "tile 1 thr", "tile 2 thr", "pack 1 thr", "pack 2 thr");
    }
    for (int t = 0; t < CERA_TYPE_COUNT && matvec; t++) {
        const cera_type_traits *tt = cera_type_get((uint32_t)t);
        if (!tt || !cera_cpu_ops_tier("scalar", (cera_type)t) || !listed(types, tt->name)) continue;
        const size_t row_bytes = cera_row_size((cera_type)t, n);
        const int64_t rows = (int64_t)(bytes / row_bytes);
        /* Random rows for the first 4 MiB, repeated: the bytes only need to be valid. */
        const int64_t seed_rows = (int64_t)((4u << 20) / row_bytes);
        for (int64_t r = 0; r < seed_rows && r < rows; r++)
            ki_fill_weights(&rng, (cera_type)t, n, buf + (size_t)r * row_bytes);
        for (int64_t r = seed_rows; r < rows; r += seed_rows) {
            const int64_t k = rows - r < seed_rows ? rows - r : seed_rows;
            memcpy(buf + (size_t)r * row_bytes, buf, (size_t)k * row_bytes);
        }
        ki_fill_acts(&rng, n, x);
        for (int k = 0; k < ntiers; k++) {
            const cera_cpu_type_ops *ops = cera_cpu_ops_tier(tiers[k], (cera_type)t);
            if (!ops || !listed(tiers_wanted, tiers[k])) continue;
            ops->quantize_act(x, act, n);
            /* The scalar tier is slow: fewer reps over a quarter of the rows. */
            const int64_t use_rows = strcmp(tiers[k], "scalar") ? rows : rows / 4;
            const double g1 = matvec_gbs(ops, buf, row_bytes, use_rows, n, act, out, 1, reps, false);
            const double g2 = matvec_gbs(ops, buf, row_bytes, use_rows, n, act, out, 2, reps, false);
            printf("%-8s %-8s %10.2f %10.2f", tt->name, tiers[k], g1, g2);
            if (ops->gemm_tile) {
                const double t1 = matvec_gbs(ops, buf, row_bytes, use_rows, n, act, out, 1, reps, true);
                const double t2 = matvec_gbs(ops, buf, row_bytes, use_rows, n, act, out, 2, reps, true);
                printf(" %10.2f %10.2f", t1, t2);
            } else {
                printf(" %10s %10s", "-", "-");
            }
#ifdef CERA_KB_PACKED
            if (ops->packed_tile && cera_pack_type_ok((cera_type)t)) {
                const size_t gb = cera_pack_group_bytes((cera_type)t, n);
                const int64_t groups = (int64_t)(bytes / gb);
                uint8_t *pw = aligned_alloc(64, (size_t)groups * gb);
                void *aux = aligned_alloc(64, (cera_packed_aux_size((cera_type)t, n) + 63) / 64 * 64);
                if (!pw || !aux) {
                    fprintf(stderr, "kernel_bench: out of memory\n");
                    return 1;
                }
                /* the 4 MiB of distinct rows, repacked once and repeated like the rows */
                const int64_t seed_groups = seed_rows / CERA_PACK_ROWS;
                for (int64_t g = 0; g < seed_groups && g < groups; g++)
                    cera_repack_x16((cera_type)t, buf + (size_t)g * CERA_PACK_ROWS * row_bytes, row_bytes, n,
                                    pw + (size_t)g * gb);
                for (int64_t g = seed_groups; g < groups; g += seed_groups) {
                    const int64_t m = groups - g < seed_groups ? groups - g : seed_groups;
                    memcpy(pw + (size_t)g * gb, pw, (size_t)m * gb);
                }
                cera_packed_prep((cera_type)t, act, aux, n);
                const double p1 = packed_gbs(ops, pw, gb, groups, n, act, aux, out, 1, reps);
                const double p2 = packed_gbs(ops, pw, gb, groups, n, act, aux, out, 2, reps);
                printf(" %10.2f %10.2f", p1, p2);
                free(pw);
                free(aux);
            }
#endif
            printf("\n");
            fflush(stdout);
        }
    }

    /* Prefill: 512 rows x 4096, 64 activation rows; weights in L2/L3 as in a chunked matmul. */
    const int64_t mm_rows = 512;
    const int cols = 64;
    printf("# matrix x matrix [%lld x %lld] x %d activation rows, 1 thread, GOP/s\n", (long long)mm_rows,
           (long long)n, cols);
    printf("%-8s %-8s %10s %10s %6s %10s %6s\n", "type", "tier", "vec_dot", "gemm_tile", "tile", "packed",
           "cols");
    float *xs = malloc(sizeof(float) * (size_t)n * (size_t)cols);
    for (int t = 0; t < CERA_TYPE_COUNT; t++) {
        const cera_type_traits *tt = cera_type_get((uint32_t)t);
        if (!tt || !cera_cpu_ops_tier("scalar", (cera_type)t) || !listed(types, tt->name)) continue;
        const size_t row_bytes = cera_row_size((cera_type)t, n);
        for (int64_t r = 0; r < mm_rows; r++)
            ki_fill_weights(&rng, (cera_type)t, n, buf + (size_t)r * row_bytes);
        for (int c = 0; c < cols; c++) ki_fill_acts(&rng, n, xs + (size_t)c * (size_t)n);
        for (int k = 0; k < ntiers; k++) {
            const cera_cpu_type_ops *ops = cera_cpu_ops_tier(tiers[k], (cera_type)t);
            if (!ops || !listed(tiers_wanted, tiers[k]) || !strcmp(tiers[k], "scalar")) continue;
            const size_t act_bytes = cera_row_size(ops->act_type, n);
            uint8_t *acts = malloc(act_bytes * (size_t)cols);
            for (int c = 0; c < cols; c++)
                ops->quantize_act(xs + (size_t)c * (size_t)n, acts + (size_t)c * act_bytes, n);
            const double g_dot =
                matmul_gops(ops, buf, row_bytes, mm_rows, n, acts, act_bytes, cols, out, false, reps);
            char tile_txt[16] = "-";
            double g_tile = 0;
            if (ops->gemm_tile) {
                g_tile = matmul_gops(ops, buf, row_bytes, mm_rows, n, acts, act_bytes, cols, out, true, reps);
                snprintf(tile_txt, sizeof tile_txt, "%dx%d", ops->tile_rows, ops->tile_cols);
            }
            printf("%-8s %-8s %10.1f %10.1f %6s", tt->name, tiers[k], g_dot, g_tile, tile_txt);
#ifdef CERA_KB_PACKED
            if (ops->packed_tile && cera_pack_type_ok((cera_type)t)) {
                const size_t gb = cera_pack_group_bytes((cera_type)t, n);
                const size_t aux_bytes = (cera_packed_aux_size((cera_type)t, n) + 63) / 64 * 64;
                uint8_t *pw = aligned_alloc(64, gb * (size_t)(mm_rows / CERA_PACK_ROWS));
                uint8_t *aux = aligned_alloc(64, aux_bytes * (size_t)cols);
                if (!pw || !aux) {
                    fprintf(stderr, "kernel_bench: out of memory\n");
                    return 1;
                }
                for (int64_t g = 0; g < mm_rows / CERA_PACK_ROWS; g++)
                    cera_repack_x16((cera_type)t, buf + (size_t)g * CERA_PACK_ROWS * row_bytes, row_bytes, n,
                                    pw + (size_t)g * gb);
                for (int c = 0; c < cols; c++)
                    cera_packed_prep((cera_type)t, acts + (size_t)c * act_bytes, aux + (size_t)c * aux_bytes,
                                     n);
                printf(" %10.1f %6d",
                       packed_matmul_gops(ops, pw, gb, mm_rows, n, acts, act_bytes, aux, aux_bytes, cols, out,
                                          reps),
                       ops->packed_cols);
                free(pw);
                free(aux);
            }
#endif
            printf("\n");
            fflush(stdout);
            free(acts);
        }
    }
    free(xs);
    free(buf);
    free(out);
    free(x);
    free(act);
    return 0;
}
