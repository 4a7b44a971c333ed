/*
 * mt19937.h — the 32-bit Mersenne Twister, as C++'s std::mt19937, and the uniform
 * double libstdc++'s std::uniform_real_distribution<double> draws from it.
 *
 * llama.cpp's "dist" sampler seeds a std::mt19937 with the user's seed and draws
 * one uniform double in [0, 1) per sampled token; reproducing both bit for bit lets
 * cera make the same draws from the same seed. State is a plain struct (about 2.5 KB)
 * embedded in the sampler: nothing is allocated.
 */
#ifndef CERA_SAMPLE_MT19937_H
#define CERA_SAMPLE_MT19937_H

#include <stdint.h>

#define CERA_MT_N 624

typedef struct cera_mt19937 {
    uint32_t mt[CERA_MT_N];
    int index; /* next word of mt to temper; CERA_MT_N means "twist first" */
} cera_mt19937;

/* std::mt19937::seed(seed). */
void cera_mt_seed(cera_mt19937 *r, uint32_t seed);

/* The next 32-bit output (std::mt19937::operator()). */
uint32_t cera_mt_next(cera_mt19937 *r);

/* A double in [0, 1) from two outputs, as libstdc++'s generate_canonical<double, 53>
 * (low word first); what uniform_real_distribution<double>(0, 1) returns. */
double cera_mt_uniform(cera_mt19937 *r);

#endif
