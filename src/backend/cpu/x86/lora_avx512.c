/*
 * lora_avx512.c — the LoRA hook's B·t product for AVX-512 CPUs (src/backend/cpu/lora.c
 * calls it only where the CPU has AVX-512 and a self-check shows it gives the F32 tile's
 * bits). Built on x86-64 only, as every file of this folder.
 *
 * u = B·t has a short inner length (the rank, 8 to 64 typically), so with the F32 register
 * tile one horizontal sum per output costs more than the multiply-adds. Here each output
 * gets exactly the tile's operations (16-lane FMA chain over the rank, zero-masked tail,
 * then the reduction tree of _mm512_reduce_add_ps: lanes i+8, then i+4, then i+2, then
 * i+1), but the trees of 16 outputs run side by side as one transpose-and-add (15 vector
 * adds, 30 shuffles) instead of 16 separate reductions.
 */
#include "backend/cpu/lora.h"

#include <immintrin.h>

/* out lane i = the reduction tree of a[i] (the lanes of _mm512_reduce_add_ps's pairing). */
static inline __m512 reduce16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    /* lanes i + (i+8): b[k] = row k in the low 256 bits, row k+8 in the high */
    for (int k = 0; k < 8; k++)
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[k], a[k + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(a[k], a[k + 8], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes i + (i+4): c[k]'s 128-bit quarters hold rows k, k+8, k+4, k+12 */
    for (int k = 0; k < 4; k++)
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[k], b[k + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[k], b[k + 4], _MM_SHUFFLE(3, 1, 3, 1)));
    /* lanes i + (i+2): each quarter of d[k] holds two rows' two partial sums */
    for (int k = 0; k < 2; k++)
        d[k] = _mm512_add_ps(_mm512_shuffle_ps(c[k], c[k + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(c[k], c[k + 2], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lanes 0 + 1: e's lanes hold rows 0 2 1 3 | 8 10 9 11 | 4 6 5 7 | 12 14 13 15 */
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
    return _mm512_permutexvar_ps(order, e);
}

/* One column: acc[i] = the tile's 16-lane FMA chain of b row i with t, for i < NR. Inlined
 * with NR = 16 (the common case, every accumulator in a register) or the caller's nr. */
static inline __attribute__((always_inline)) void chains(int64_t n, __m512 acc[16], const float *b, int nr,
                                                         const float *t) {
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 x = _mm512_loadu_ps(t + j);
        for (int i = 0; i < nr; i++) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(b + i * n + j), x, acc[i]);
    }
    if (j < n) {
        const __mmask16 tail = (__mmask16)((1u << (n - j)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(tail, t + j);
        for (int i = 0; i < nr; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, b + i * n + j), x, acc[i]);
    }
}

void cera_lora_bt16_avx512(int64_t n, float *u, size_t u_stride, const float *b, int nr, const float *t,
                           size_t t_stride, int nc) {
    for (int c = 0; c < nc; c++) {
        __m512 acc[16];
        if (nr == 16) {
            chains(n, acc, b, 16, t + (size_t)c * t_stride);
            _mm512_storeu_ps(u + (size_t)c * u_stride, reduce16(acc));
        } else {
            chains(n, acc, b, nr, t + (size_t)c * t_stride);
            _mm512_mask_storeu_ps(u + (size_t)c * u_stride, (__mmask16)((1u << nr) - 1), reduce16(acc));
        }
    }
}
