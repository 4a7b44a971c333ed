/* mt19937.c — the Mersenne Twister MT19937 (Matsumoto & Nishimura, 1998) and the
 * canonical uniform double built from it (see mt19937.h). */
#include "sample/mt19937.h"

#include <math.h>

#define MT_M          397
#define MT_MATRIX_A   0x9908b0dfu
#define MT_UPPER_MASK 0x80000000u
#define MT_LOWER_MASK 0x7fffffffu

void cera_mt_seed(cera_mt19937 *r, uint32_t seed) {
    r->mt[0] = seed;
    for (uint32_t i = 1; i < CERA_MT_N; i++)
        r->mt[i] = 1812433253u * (r->mt[i - 1] ^ (r->mt[i - 1] >> 30)) + i;
    r->index = CERA_MT_N;
}

/* Regenerates all 624 words at once (the "twist"). */
static void mt_twist(cera_mt19937 *r) {
    for (int i = 0; i < CERA_MT_N; i++) {
        const uint32_t y = (r->mt[i] & MT_UPPER_MASK) | (r->mt[(i + 1) % CERA_MT_N] & MT_LOWER_MASK);
        r->mt[i] = r->mt[(i + MT_M) % CERA_MT_N] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    r->index = 0;
}

uint32_t cera_mt_next(cera_mt19937 *r) {
    if (r->index >= CERA_MT_N) mt_twist(r);
    uint32_t y = r->mt[r->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

double cera_mt_uniform(cera_mt19937 *r) {
    /* 53 bits need two 32-bit words: sum = w0 + w1 * 2^32, divided by 2^64, in
     * double arithmetic as libstdc++ does (so the rounding matches too). */
    const double lo = (double)cera_mt_next(r);
    const double hi = (double)cera_mt_next(r);
    const double sum = lo + hi * 4294967296.0;
    double u = sum / 18446744073709551616.0;
    if (u >= 1.0) u = nextafter(1.0, 0.0);
    return u;
}
