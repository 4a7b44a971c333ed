/*
 * repack.h — weights copied at backend open into a row-interleaved layout, so the SIMD lanes of
 * a matmul kernel hold 16 output rows at once (CERA_PACK_ROWS) instead of one row's elements.
 *
 * Why: in the file layout a row is multiplied one block at a time and every block ends in a
 * horizontal float step (convert, scale, multiply-add) for a single output. Interleaved, one
 * 512-bit byte dot (vpdpbusd) covers 4 elements of 16 rows, the 16 block scales convert in one
 * instruction, and the float step serves 16 outputs; and a group of 16 rows is read as one
 * aligned sequential stream, which is what decode needed most. llama.cpp repacks Q4_0 too (8
 * rows); this is cera's own layout. Measured on 1 thread (tinyllama-1.1b shape, file layout
 * against repacked in the same minutes of a shared machine, load ~2): Q4_0 tg32 17.5 -> 29-38
 * t/s (48.6 in a quieter minute), pp256 41 -> 105; Q8_0 tg32 13 -> 21, pp128 51 -> 79.
 *
 * Layout of one group of 16 consecutive rows with nb = k / 32 blocks: per block the quants (256
 * bytes of nibbles as four 64-byte vectors; Q8_0: 512 bytes as eight), the 16 F16 scales d (32
 * bytes) and for Q4_1 the 16 F16 minimums m (IQ4_NL is laid out as Q4_0), arranged in units of two blocks
 * (below) so every load is aligned and a group is one sequential stream. Nibble types: byte 4r + j of vector
 * i of a block (r = row in the group, j < 4) is byte 4i + j of row r's original block, so its low nibble is
 * element 4i + j and its high nibble element 16 + 4i + j. A 32-bit lane of a vector is one row, and one
 * activation word (4 bytes, broadcast) feeds all 16 rows.
 *
 * Arithmetic (every tier, and the scalar references, the same), chosen to be llama.cpp's:
 *   Q4_0: each output is a serial chain over the blocks b of acc = fma((float)isum_b,
 *     dx_b * dy_b, acc) from 0, where isum_b is the exact integer dot of the block and
 *     dx_b * dy_b is exact in float (two 11-bit mantissas): llama.cpp's repacked Q4_0 GEMV/GEMM
 *     per output. The offset of 8 goes in through the activations: isum = sum(u * y) - 8 sum(y)
 *     with u the raw nibble. IQ4_NL (llama.cpp repacks it with the same GEMV/GEMM): the same
 *     chain, the nibbles looked up in kvalues_iq4nl, the offset 128 of the unsigned table.
 *   Q4_1 (which llama.cpp does not repack): its x86 vec_dot per output, i.e. 8 float partial
 *     sums, partial l taking the 4-element integer dot of word l of the unpacked block (elements
 *     4l..4l+3 for l < 4, 16+4(l-4).. for l >= 4) as acc_l = fma(dx dy, (float)p_l, acc_l), and
 *     a serial sum of m_b * s_b; at the end ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) + summs.
 *   Q8_0 and Q5_0: the same 8 partials over words of 4 elements (no minimums; + 0.0 at the end),
 *     which is the file-layout tile's order (tile_x86_body.h) and so llama.cpp's; Q5_1 as Q4_1.
 * So the results are identical bit for bit across tiers, tile widths and batch sizes (a decode
 * step equals the same token inside a prompt) and equal llama.cpp's.
 *
 * The per-block activation terms (cera_pack_aux_*: offsets through the activation sums, scales
 * as floats) are computed once per activation row by cera_packed_prep, next to the quantized
 * row.
 *
 * Which weights: those whose type has a packed tile at the selected tier (kernels.h
 * packed_tile; today Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and Q4_K on the avx2 and avx512 tiers; amx
 * (which inherits the avx512 ones) keeps its own tile for Q8_0; scalar and arm have none) and whose row count
 * is a multiple of 16. cera_cpu_repack_model builds them at backend open into the backend's own set
 * (cera_packed_find gives a weight's copy); cera_matmul_ex uses the copy it is passed. The mmapped original
 * stays mapped and is no longer read. CERA_CPU_REPACK=0 in the environment turns repacking off (for A/B
 * measurements).
 */
#ifndef CERA_BACKEND_CPU_REPACK_H
#define CERA_BACKEND_CPU_REPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"
#include "core/error.h"
#include "core/fp16.h"
#include "model/model.h"

#define CERA_PACK_ROWS 16

/* A group is a sequence of units of 2 blocks (the last one padded when nb is odd): the 16 F16
 * scales d of both blocks (64 bytes), for Q4_1/Q5_1 the 16 F16 minimums m of both (64 bytes), for
 * Q5_0/Q5_1 the fifth bits of both (64 bytes each: lane r = row r's qh word), then both blocks'
 * quants (256 bytes each for the nibble types, 512 for Q8_0). Units are multiples of
 * 64 bytes, so every load is aligned, and a group is one sequential stream (with the scales in a
 * stream of their own, measured slower: the prefetcher lagged on the second stream).
 * Q8_0's quants are stored as unsigned bytes x + 128 (x ^ 0x80), 8 words of 4 per row and block:
 * byte 4r + j of vector i is element 4i + j of row r. */
#define CERA_PACK_FIELD 32 /* 16 F16 values */

static inline int cera_pack_fields(cera_type t) { return t == CERA_TYPE_Q4_1 || t == CERA_TYPE_Q5_1 ? 2 : 1; }
static inline size_t cera_pack_qs_bytes(cera_type t) { return t == CERA_TYPE_Q8_0 ? 512 : 256; }
static inline size_t cera_pack_qh_bytes(cera_type t) {
    return t == CERA_TYPE_Q5_0 || t == CERA_TYPE_Q5_1 ? 64 : 0;
}
static inline size_t cera_pack_unit_bytes(cera_type t) {
    return (size_t)cera_pack_fields(t) * 2 * CERA_PACK_FIELD + 2 * cera_pack_qh_bytes(t) +
           2 * cera_pack_qs_bytes(t);
}
static inline const uint8_t *cera_pack_unit(const void *group, cera_type t, int64_t b) {
    return (const uint8_t *)group + (size_t)(b >> 1) * cera_pack_unit_bytes(t);
}
/* Block b's quants, scales d, (Q4_1, Q5_1) minimums m and (Q5_0, Q5_1) fifth bits qh. */
static inline const uint8_t *cera_pack_qs(const void *group, cera_type t, int64_t b) {
    return cera_pack_unit(group, t, b) + (size_t)cera_pack_fields(t) * 2 * CERA_PACK_FIELD +
           2 * cera_pack_qh_bytes(t) + (size_t)(b & 1) * cera_pack_qs_bytes(t);
}
static inline const uint8_t *cera_pack_qh(const void *group, cera_type t, int64_t b) {
    return cera_pack_unit(group, t, b) + (size_t)cera_pack_fields(t) * 2 * CERA_PACK_FIELD +
           (size_t)(b & 1) * cera_pack_qh_bytes(t);
}
static inline const cera_f16 *cera_pack_d(const void *group, cera_type t, int64_t b) {
    return (const cera_f16 *)(cera_pack_unit(group, t, b) + (size_t)(b & 1) * CERA_PACK_FIELD);
}
static inline const cera_f16 *cera_pack_m(const void *group, cera_type t, int64_t b) {
    return (const cera_f16 *)(cera_pack_unit(group, t, b) + 2 * CERA_PACK_FIELD +
                              (size_t)(b & 1) * CERA_PACK_FIELD);
}

/* Per activation block, by weight type (the activations are Q8_0 for Q4_0, Q5_0, Q8_0 and
 * IQ4_NL weights, Q8_1 for Q4_1 and Q5_1, Q8_K for Q4_K: cera_pack_aux_q4_k below). */
typedef struct cera_pack_aux_q4_0 { /* also IQ4_NL's */
    int32_t corr; /* -8 * sum of the block's 32 quants: the Q4_0 offset (IQ4_NL: -128 * sum) */
    float d;      /* the block's scale as a float */
} cera_pack_aux_q4_0;
typedef struct cera_pack_aux_q4_1 {
    float d, s; /* the block's scale and d * sum(q), as floats */
} cera_pack_aux_q4_1;
typedef struct cera_pack_aux_q8_0 { /* also Q5_0's; Q5_1 takes cera_pack_aux_q4_1 */
    int32_t corr[8]; /* -128 * sum of word l's 4 quants: the offset of the stored x + 128 (Q5_0: -16 *) */
    float d;
} cera_pack_aux_q8_0;

/* Q4_K (256-element super-blocks of 8 sub-blocks of 32, 6-bit scales and mins): a group is a
 * sequence of super-block units of CERA_PACK_Q4_K_UNIT bytes, each (offsets in bytes):
 *   0    the 16 F16 scales d, 32 the 16 F16 dmin;
 *   64   the 6-bit scales unpacked to bytes: byte 16 j + r = scale of sub-block j of row r;
 *   192  the mins as byte pairs: byte 32 v + 2 r + t = min of sub-block 2 v + t of row r, so a
 *        zero extension to 16 bits gives each row's lane the pair (m[2v], m[2v+1]);
 *   320  the quants, 32 vectors of 64 bytes: byte 4 r + j of vector 8 c + l is byte 32 c + 4 l + j
 *        of row r's qs, so its low nibble is element 64 c + 4 l + j (sub-block 2 c, word l) and its
 *        high nibble element 64 c + 32 + 4 l + j (sub-block 2 c + 1, word l).
 * Arithmetic per output (every tier and the reference): per super-block the exact integers
 * isum = sum_j sc_j * dot_j (dot_j the sub-block's integer dot) and imin = sum_j m_j * bsum_j
 * (bsum_j the activation sum over sub-block j), then acc = fma((float)isum, dx * dy, acc) and
 * accm = fma((float)imin, dmx * dy, accm), serially over the super-blocks from 0; the output is
 * acc - accm. That is the per-output order of llama.cpp's repacked q4_K GEMV/GEMM on x86 (its
 * layout differs): the synth q4_k_s golden moved from 1.1e-2 to 4.9e-7 (not 0; test_golden.c).
 * The amx tier inherits this tile, so it takes over from the AMX tile for repacked Q4_K weights
 * as Q4_0's did where measured; not measured for Q4_K (no AMX machine here).
 * Q6_K is not repacked: its file-layout order (bit-exact with its golden, asserted) takes a scale
 * multiply per 4-element word in a 16-row layout, which on this Zen 4 (512-bit ops in two halves)
 * measured slower for decode than the file layout (tinyllama Q4_K_M tg32, 1 thread: 26.8 against
 * 36.0 t/s; prompts +10 %). */
#define CERA_PACK_Q4_K_UNIT 2368
#define CERA_PACK_Q4_K_SC   64
#define CERA_PACK_Q4_K_MN   192
#define CERA_PACK_Q4_K_QS   320
static inline const uint8_t *cera_pack_q4_k_unit(const void *group, int64_t b) {
    return (const uint8_t *)group + (size_t)b * CERA_PACK_Q4_K_UNIT;
}
typedef struct cera_pack_aux_q4_k {
    float d;       /* the activation super-block's scale */
    int16_t bs[8]; /* the activation sum over each sub-block of 32 (pairs read as one 32-bit word) */
} cera_pack_aux_q4_k;

/* One repacked weight: n rows of k inputs of type `type`, in groups of 16 rows. */
typedef struct cera_packed_weight {
    cera_type type;
    int64_t n, k;
    void *data;         /* [n / 16] packed groups, 64-byte aligned */
    size_t group_bytes; /* bytes of one group of 16 rows */
    cera_packed_tile_fn tile;
    int tile_cols; /* the largest nc the tile takes */
} cera_packed_weight;

/* Whether type t has a packed layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q4_K). */
bool cera_pack_type_ok(cera_type t);

/* Bytes of one packed group of 16 rows of k elements of type t (a multiple of 64). */
size_t cera_pack_group_bytes(cera_type t, int64_t k);

/* Interleaves 16 rows of type t (row stride w_stride bytes, k elements) into one packed group at
 * dst (cera_pack_group_bytes(t, k) bytes). */
void cera_repack_x16(cera_type t, const void *rows, size_t w_stride, int64_t k, void *dst);

/* Bytes of per-row activation terms a packed weight of type t with rows of k needs (0 when the
 * type has no packed layout). */
size_t cera_packed_aux_size(cera_type t, int64_t k);

/* Fills the per-block activation terms of one activation row (k elements, already quantized to
 * the type's activation type) for a packed weight of type t. */
void cera_packed_prep(cera_type t, const void *act_row, void *aux_row, int64_t k);

/* Whether a weight would be repacked at the selected tier (type, shape, tier, environment). */
bool cera_packed_wanted(const cera_weight *w);

/* Repacks one weight (cera_packed_wanted must hold), over the pool's threads when pool is not
 * NULL; *out is freed with cera_packed_free. */
cera_status cera_packed_new(const cera_weight *w, cera_pool *pool, cera_packed_weight **out, cera_error *err);
void cera_packed_free(cera_packed_weight *p);

/* The repacked copies of a model's matmul weights (the projections and the output head). */
typedef struct cera_packed_set cera_packed_set;

/* Repacks every weight of m that cera_packed_wanted accepts into a set the caller owns. */
cera_status cera_cpu_repack_model(const cera_model *m, cera_pool *pool, cera_packed_set **out,
                                  cera_error *err);
/* The set's copy of w, or NULL (w is kept in the file layout). */
const cera_packed_weight *cera_packed_find(const cera_packed_set *set, const cera_weight *w);

/* Frees the copies; NULL is fine. */
void cera_cpu_repack_free(cera_packed_set *set);

/* The scalar reference of type t's packed tile (NULL when none), with the arithmetic described
 * above: the SIMD tiles must give the same bits (tests/cpu). */
cera_packed_tile_fn cera_packed_tile_ref(cera_type t);

#endif
