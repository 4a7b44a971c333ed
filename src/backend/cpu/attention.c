/* attention.c — causal attention over the paged KV cache (see attention.h). */
#include "backend/cpu/attention.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/ops.h"
#include "core/fp16.h"
#include "tensor/blocks.h"

#define ATTN_TILE   64 /* keys per tile in the F32 mode, as llama.cpp's GGML_FA_TILE_KV */
#define ATTN_QBLOCK 64 /* query rows per chunk in the F32 mode (sharing the converted keys) */

size_t cera_attention_scratch_size(int head_dim) {
    /* F16 mode: Q and the accumulator in F16; F32 mode: a tile of keys and of values, a row
     * of scores, and the maxima, sums and accumulators of a block of rows */
    const size_t f16 = (size_t)head_dim * 2 * sizeof(uint16_t);
    /* any other cache, one token at a time: the accumulator, a V row and Q in K's dot type */
    const size_t gen = (size_t)head_dim * 3 * sizeof(float);
    const size_t f32 =
        ((size_t)head_dim * ATTN_TILE * 2 + ATTN_TILE + 2 * ATTN_QBLOCK + (size_t)ATTN_QBLOCK * head_dim) *
        sizeof(float);
    return f16 > f32 ? (f16 > gen ? f16 : gen) : (f32 > gen ? f32 : gen);
}

int cera_attention_spans(const cera_attn_args *a, const int32_t *seq_count, cera_attn_span *spans) {
    int n = 0;
    for (int t = 0; t < a->n_tokens;) {
        const int q = a->seq[t];
        const cera_kv_format *f = &a->seqs[q]->pool->fmt;
        /* llama.cpp tiles only caches of one type, F16 or F32 */
        const bool tiled =
            f->k == f->v &&
            (f->k == CERA_KV_F32 || (f->k == CERA_KV_F16 && seq_count[q] >= CERA_ATTN_F32_MIN_TOKENS &&
                                     a->head_dim % CERA_ATTN_F32_HEAD_MULTIPLE == 0));
        int t1 = t + 1;
        if (tiled)
            while (t1 < a->n_tokens && t1 - t < ATTN_QBLOCK && a->seq[t1] == q) t1++;
        spans[n++] = (cera_attn_span){t, t1, !tiled};
        t = t1;
    }
    return n;
}

int64_t cera_attention_n_chunks(const cera_attn_args *a) { return (int64_t)a->n_spans * a->n_head; }

#define ATTN(name) name##_portable
#define ATTN_TARGET
#define CVT_F32(h) cera_f16_to_f32(h)
#define CVT_F16(f) cera_f32_to_f16(f)
#include "backend/cpu/attention_impl.h"
#undef ATTN
#undef ATTN_TARGET
#undef CVT_F32
#undef CVT_F16

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ATTN(name)  name##_f16c
#define ATTN_TARGET __attribute__((target("avx2,fma,f16c")))
#define ATTN_SIMD   1
#define CVT_F32(h)  _cvtsh_ss(h)
#define CVT_F16(f)  ((cera_f16)_cvtss_sh((f), 0))
#include "backend/cpu/attention_impl.h"
#define HAVE_F16C_PATH 1
#endif

void cera_attention_chunk(const cera_attn_args *a, int64_t chunk, void *scratch) {
#ifdef HAVE_F16C_PATH
    if (cera_cpu_tier_simd()) { /* the scalar tier (CERA_CPU_TIER=scalar) keeps the portable code */
        attention_chunk_f16c(a, chunk, scratch);
        return;
    }
#endif
    attention_chunk_portable(a, chunk, scratch);
}
