/*
 * blocks.h — the byte layouts of the quantized tensor types, as structs.
 *
 * These are ggml's (llama.cpp's) on-disk block layouts, byte for byte: a GGUF tensor
 * of type q4_0 is an array of block_q4_0, row after row. The reference quantizers
 * and dequantizers (quant_*.c) and every CPU/CUDA kernel read and write through these
 * structs, so the layout is written down once. Every struct has a static size assert;
 * none has padding. Half-precision fields are raw IEEE binary16 bits (cera_f16, see
 * core/fp16.h).
 *
 * Value formulas (q = the stored integer, x = the reconstructed float):
 *   q4_0   x = d * (q - 8),        q in 0..15    qs[j] low nibble: element j, high: j+16
 *   q4_1   x = d * q + m,          q in 0..15    (nibbles as q4_0)
 *   q5_0   x = d * (q - 16),       q in 0..31    low 4 bits as q4_0; bit 4 of element j
 *                                                is bit j of qh (little-endian uint32)
 *   q5_1   x = d * q + m,          q in 0..31    (bits as q5_0)
 *   q8_0   x = d * q,              q in -127..127
 *   q8_1   x = d * q,              s = d * sum(q) (activation type for q4_1/q5_1)
 *   q8_k   x = d * q,              bsums[i] = sum of q over elements 16i..16i+15
 *                                                (activation type for k-quants, iq4_xs)
 *   iq4_nl x = d * kvalues_iq4nl[q], q in 0..15  (nibbles as q4_0)
 *   k-quants and iq4_xs: see each struct below; the helpers at the end unpack
 *   their packed sub-block scales.
 *
 * Also usable from CUDA: plain C structs, no bitfields, static_assert in C++.
 */
#ifndef CERA_TENSOR_BLOCKS_H
#define CERA_TENSOR_BLOCKS_H

#include <stdint.h>

#include "core/fp16.h"

#ifdef __cplusplus
#define CERA_BLOCK_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define CERA_BLOCK_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define QK4_0        32
#define QK4_1        32
#define QK5_0        32
#define QK5_1        32
#define QK8_0        32
#define QK8_1        32
#define QK4_NL       32
#define QK_K         256 /* super-block size of the k-quants and iq4_xs */
#define K_SCALE_SIZE 12

typedef struct {
    cera_f16 d;            /* scale */
    uint8_t qs[QK4_0 / 2]; /* nibbles: low = element j, high = element j + 16 */
} block_q4_0;
CERA_BLOCK_ASSERT(sizeof(block_q4_0) == 18, "block_q4_0 size");

typedef struct {
    cera_f16 d;            /* scale */
    cera_f16 m;            /* minimum (offset) */
    uint8_t qs[QK4_1 / 2]; /* nibbles as q4_0 */
} block_q4_1;
CERA_BLOCK_ASSERT(sizeof(block_q4_1) == 20, "block_q4_1 size");

typedef struct {
    cera_f16 d;            /* scale */
    uint8_t qh[4];         /* bit 4 of each element, element j = bit j of the LE uint32 */
    uint8_t qs[QK5_0 / 2]; /* low 4 bits, nibbles as q4_0 */
} block_q5_0;
CERA_BLOCK_ASSERT(sizeof(block_q5_0) == 22, "block_q5_0 size");

typedef struct {
    cera_f16 d;            /* scale */
    cera_f16 m;            /* minimum (offset) */
    uint8_t qh[4];         /* bit 4 of each element, as q5_0 */
    uint8_t qs[QK5_1 / 2]; /* low 4 bits, as q5_0 */
} block_q5_1;
CERA_BLOCK_ASSERT(sizeof(block_q5_1) == 24, "block_q5_1 size");

typedef struct {
    cera_f16 d;       /* scale */
    int8_t qs[QK8_0]; /* quants, -127..127 */
} block_q8_0;
CERA_BLOCK_ASSERT(sizeof(block_q8_0) == 34, "block_q8_0 size");

typedef struct {
    cera_f16 d;       /* scale */
    cera_f16 s;       /* d * sum(qs), so dot products with q4_1/q5_1 fold the minimum in */
    int8_t qs[QK8_1]; /* quants */
} block_q8_1;
CERA_BLOCK_ASSERT(sizeof(block_q8_1) == 36, "block_q8_1 size");

/* 2.625 bits/weight: 16 sub-blocks of 16; x = d * (scales[i] & 0xF) * q - dmin * (scales[i] >> 4),
 * q in 0..3. qs: 2 bits each; for the 128-element half h (0/1), byte qs[32h + l] holds, at bit
 * shift 2s (s = 0..3), element 128h + 32s + l. */
typedef struct {
    uint8_t scales[QK_K / 16]; /* low nibble: scale, high nibble: min, per sub-block of 16 */
    uint8_t qs[QK_K / 4];      /* 2-bit quants */
    cera_f16 d;                /* super-block scale of the scales */
    cera_f16 dmin;             /* super-block scale of the mins */
} block_q2_k;
CERA_BLOCK_ASSERT(sizeof(block_q2_k) == 84, "block_q2_k size");

/* 3.4375 bits/weight: 16 sub-blocks of 16; x = d * (scale6[i] - 32) * (q - 4 * !hbit), q2 in 0..3.
 * Low 2 bits in qs as q2_k; the high bit of element 128h + 32s + l is bit (4h + s) of hmask[l]
 * (l = 0..31), and a CLEAR bit means subtract 4. The 16 6-bit scales are packed in 12 bytes:
 * see q3_k_scales(). */
typedef struct {
    uint8_t hmask[QK_K / 8]; /* high bits (inverted: set = no subtraction) */
    uint8_t qs[QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];      /* 16 scales of 6 bits, offset by 32 */
    cera_f16 d;              /* super-block scale */
} block_q3_k;
CERA_BLOCK_ASSERT(sizeof(block_q3_k) == 110, "block_q3_k size");

/* 4.5 bits/weight: 8 sub-blocks of 32; x = d * sc[j] * q - dmin * mn[j], q in 0..15, with 6-bit
 * sc/mn packed in scales (k_scale_min()). For the 64-element chunk c (0..3), qs[32c + l] low
 * nibble is element 64c + l (sub-block 2c), high nibble element 64c + 32 + l (sub-block 2c+1). */
typedef struct {
    cera_f16 d;                   /* super-block scale of the scales */
    cera_f16 dmin;                /* super-block scale of the mins */
    uint8_t scales[K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each */
    uint8_t qs[QK_K / 2];         /* 4-bit quants */
} block_q4_k;
CERA_BLOCK_ASSERT(sizeof(block_q4_k) == 144, "block_q4_k size");

/* 5.5 bits/weight: as q4_k with q in 0..31; bit 4 of element 32j + l (sub-block j) is bit j
 * of qh[l]. */
typedef struct {
    cera_f16 d;                   /* super-block scale of the scales */
    cera_f16 dmin;                /* super-block scale of the mins */
    uint8_t scales[K_SCALE_SIZE]; /* 8 scales + 8 mins, 6 bits each */
    uint8_t qh[QK_K / 8];         /* bit 4 of the quants */
    uint8_t qs[QK_K / 2];         /* low 4 bits, as q4_k */
} block_q5_k;
CERA_BLOCK_ASSERT(sizeof(block_q5_k) == 176, "block_q5_k size");

/* 6.5625 bits/weight: 16 sub-blocks of 16; x = d * scales[i] * (q - 32), q in 0..63. For the
 * 128-element half h and l = 0..31: element 128h + l      = ql[64h + l] & 0xF      | (qh[32h+l] >> 0 & 3) <<
 * 4 128h + 32 + l = ql[64h + 32 + l] & 0xF | (qh[32h+l] >> 2 & 3) << 4 128h + 64 + l = ql[64h + l] >> 4 |
 * (qh[32h+l] >> 4 & 3) << 4 128h + 96 + l = ql[64h + 32 + l] >> 4  | (qh[32h+l] >> 6 & 3) << 4 */
typedef struct {
    uint8_t ql[QK_K / 2];     /* low 4 bits */
    uint8_t qh[QK_K / 4];     /* high 2 bits */
    int8_t scales[QK_K / 16]; /* signed 8-bit sub-block scales */
    cera_f16 d;               /* super-block scale */
} block_q6_k;
CERA_BLOCK_ASSERT(sizeof(block_q6_k) == 210, "block_q6_k size");

/* Activation type for the k-quants and iq4_xs; never stored in model files. */
typedef struct {
    float d;                  /* scale (f32, unlike the others) */
    int8_t qs[QK_K];          /* quants */
    int16_t bsums[QK_K / 16]; /* sum of qs over each group of 16 */
} block_q8_k;
CERA_BLOCK_ASSERT(sizeof(block_q8_k) == 292, "block_q8_k size");

/* The 16 non-linear levels of iq4_nl and iq4_xs (ascending; index = stored nibble). */
#define CERA_KVALUES_IQ4NL                                                                                   \
    { -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 }
static const int8_t kvalues_iq4nl[16] = CERA_KVALUES_IQ4NL;

typedef struct {
    cera_f16 d;             /* scale */
    uint8_t qs[QK4_NL / 2]; /* nibbles as q4_0, each an index into kvalues_iq4nl */
} block_iq4_nl;
CERA_BLOCK_ASSERT(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

/* 4.25 bits/weight: 8 sub-blocks of 32; x = d * (ls[j] - 32) * kvalues_iq4nl[q], with the 6-bit
 * ls[j] = low 4 bits from scales_l, high 2 bits from scales_h (iq4_xs_scale()). Nibbles per
 * sub-block as iq4_nl: qs[16j + l] low = element 32j + l, high = element 32j + 16 + l. */
typedef struct {
    cera_f16 d;                  /* super-block scale */
    uint16_t scales_h;           /* bits 4..5 of the 8 scales, 2 bits each */
    uint8_t scales_l[QK_K / 64]; /* bits 0..3 of the 8 scales, a nibble each */
    uint8_t qs[QK_K / 2];        /* indices into kvalues_iq4nl */
} block_iq4_xs;
CERA_BLOCK_ASSERT(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

/* Sub-block j (0..7) of q4_k/q5_k: its 6-bit scale and min from the 12 packed bytes.
 * Bytes 0..3: scales 0..3 (low 6 bits) and bits 4..5 of scales 4..7 (top 2 bits);
 * bytes 4..7: mins 0..3 likewise; bytes 8..11: low nibble = scale 4..7 low bits,
 * high nibble = min 4..7 low bits. */
static inline void k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 16 scales of a q3_k block, 6 bits each, unpacked to signed values (offset 32 removed).
 * Layout: scale i's low nibble is scales[i] & 0xF (i < 8) or scales[i - 8] >> 4 (i >= 8);
 * its top 2 bits are bits 2(i/4 % 4).. of scales[8 + i % 4]. */
static inline void q3_k_scales(const uint8_t *packed, int8_t *out) {
    for (int i = 0; i < 16; i++) {
        int low = i < 8 ? packed[i] & 0xF : packed[i - 8] >> 4;
        int high = (packed[8 + (i % 4)] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((low | (high << 4)) - 32);
    }
}

/* Sub-block j (0..7) of iq4_xs: its 6-bit scale, offset 32 removed. */
static inline int iq4_xs_scale(const block_iq4_xs *b, int j) {
    int low = (b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
    int high = (b->scales_h >> (2 * j)) & 3;
    return (low | (high << 4)) - 32;
}

#endif
