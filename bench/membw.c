/*
 * membw.c — measures the machine's memory read bandwidth, the ceiling for token
 * generation (each generated token reads every weight once).
 *
 * Threads each stream their share of a buffer much larger than the caches, summing
 * it with 128-bit loads (SSE2 / NEON: the portable baseline, enough to saturate DRAM)
 * so no load is optimized away. The best of several passes is printed, in GB/s
 * (10^9 bytes per second), as text or JSON. bench/run.sh divides the engines' weight
 * GB/s by this number.
 *
 * usage: membw [-t THREADS] [-s MIB] [-r PASSES] [--json]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

typedef struct worker {
    const uint8_t *p;
    size_t n; /* bytes, a multiple of 64 */
    uint64_t sum;
    pthread_barrier_t *start;
} worker;

/* Sums n bytes as 64-bit lanes, four independent accumulators per 64-byte line. */
static uint64_t read_sum(const uint8_t *p, size_t n) {
#if defined(__x86_64__) || defined(_M_X64)
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 64) {
        a = _mm_add_epi64(a, _mm_load_si128((const __m128i *)(p + i)));
        b = _mm_add_epi64(b, _mm_load_si128((const __m128i *)(p + i + 16)));
        c = _mm_add_epi64(c, _mm_load_si128((const __m128i *)(p + i + 32)));
        d = _mm_add_epi64(d, _mm_load_si128((const __m128i *)(p + i + 48)));
    }
    a = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d));
    uint64_t out[2];
    _mm_storeu_si128((__m128i *)out, a);
    return out[0] + out[1];
#elif defined(__aarch64__)
    uint64x2_t a = vdupq_n_u64(0), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 64) {
        a = vaddq_u64(a, vld1q_u64((const uint64_t *)(p + i)));
        b = vaddq_u64(b, vld1q_u64((const uint64_t *)(p + i + 16)));
        c = vaddq_u64(c, vld1q_u64((const uint64_t *)(p + i + 32)));
        d = vaddq_u64(d, vld1q_u64((const uint64_t *)(p + i + 48)));
    }
    a = vaddq_u64(vaddq_u64(a, b), vaddq_u64(c, d));
    return vgetq_lane_u64(a, 0) + vgetq_lane_u64(a, 1);
#else
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n / 8; i += 4) {
        a += q[i];
        b += q[i + 1];
        c += q[i + 2];
        d += q[i + 3];
    }
    return a + b + c + d;
#endif
}

static void *run(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start);
    w->sum += read_sum(w->p, w->n);
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    long threads = sysconf(_SC_NPROCESSORS_ONLN), mib = 1024, passes = 5;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atol(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            passes = atol(argv[++i]);
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else {
            fprintf(stderr, "usage: membw [-t THREADS] [-s MIB] [-r PASSES] [--json]\n");
            return !!strcmp(argv[i], "-h") && !!strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (threads < 1 || threads > 4096 || mib < 1 || passes < 1) {
        fprintf(stderr, "membw: bad arguments\n");
        return 2;
    }
    const size_t size = (size_t)mib << 20;
    uint8_t *buf = aligned_alloc(64, size);
    worker *w = calloc((size_t)threads, sizeof *w);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!buf || !w || !th) {
        fprintf(stderr, "membw: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    memset(buf, 1, size); /* fault every page in before timing */
    const size_t share = size / (size_t)threads / 64 * 64;
    double best = 0;
    uint64_t check = 0;
    for (long pass = 0; pass < passes; pass++) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
        for (long t = 0; t < threads; t++) {
            w[t] = (worker){buf + (size_t)t * share, share, 0, &start};
            if (pthread_create(&th[t], NULL, run, &w[t]) != 0) {
                fprintf(stderr, "membw: cannot start thread %ld\n", t);
                return 1;
            }
        }
        pthread_barrier_wait(&start);
        const double t0 = now_s();
        for (long t = 0; t < threads; t++) {
            pthread_join(th[t], NULL);
            check += w[t].sum;
        }
        const double gbps = (double)share * (double)threads / (now_s() - t0) * 1e-9;
        if (gbps > best) best = gbps;
        pthread_barrier_destroy(&start);
    }
    if (json)
        printf("{\"read_gbps\": %.2f, \"threads\": %ld, \"mib\": %ld, \"passes\": %ld}\n", best, threads, mib,
               passes);
    else
        printf("read bandwidth: %.2f GB/s (%ld threads, %ld MiB, best of %ld passes; checksum %llu)\n", best,
               threads, mib, passes, (unsigned long long)(check & 0xffff));
    free(th);
    free(w);
    free(buf);
    return 0;
}
