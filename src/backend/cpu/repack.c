/*
 * repack.c — weights repacked at backend open into the 16-row interleaved layout (repack.h):
 * the choice of weights, the copies' life (built at open, hung on cera_weight.dev, freed with
 * the backend), the per-row activation terms, and the scalar reference of the packed tile that
 * the SIMD tiles (x86/repack_*.c) are tested against.
 */
#include "backend/cpu/repack.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/blocks.h"

size_t cera_packed_aux_size(cera_type t, int64_t k) {
    return t == CERA_TYPE_Q4_0 ? (size_t)(k / QK4_0) * sizeof(cera_q8_0_aux) : 0;
}

void cera_packed_prep(cera_type t, const void *act_row, void *aux_row, int64_t k) {
    if (t != CERA_TYPE_Q4_0) return;
    const block_q8_0 *y = act_row;
    cera_q8_0_aux *o = aux_row;
    for (int64_t b = 0; b < k / QK8_0; b++) {
        int32_t sum = 0;
        for (int j = 0; j < QK8_0; j++) sum += y[b].qs[j];
        o[b].corr = -8 * sum;
        o[b].d = cera_f16_to_f32(y[b].d);
    }
}

size_t cera_pack_q4_0_group_bytes(int64_t k) {
    const size_t nb = (size_t)(k / QK4_0);
    return (nb * (CERA_PACK_Q4_0_QS + CERA_PACK_Q4_0_D) + 63) & ~(size_t)63;
}

void cera_repack_q4_0x16(const void *rows, size_t w_stride, int64_t k, void *dst) {
    const int64_t nb = k / QK4_0;
    memset(dst, 0, cera_pack_q4_0_group_bytes(k));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *qs = (uint8_t *)cera_pack_q4_0_qs(dst, b);
        cera_f16 *d = (cera_f16 *)cera_pack_q4_0_d(dst, nb, b);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            const block_q4_0 *x = (const block_q4_0 *)((const uint8_t *)rows + (size_t)r * w_stride) + b;
            d[r] = x->d;
            for (int i = 0; i < 4; i++) memcpy(qs + 64 * i + 4 * r, x->qs + 4 * i, 4);
        }
    }
}

void cera_packed_tile_q4_0_ref(int64_t n, float *s, size_t s_stride, const void *w, const void *a,
                               size_t a_stride, const void *aux, size_t aux_stride, int nc) {
    const int64_t nb = n / QK4_0;
    for (int c = 0; c < nc; c++) {
        const block_q8_0 *y = (const block_q8_0 *)((const uint8_t *)a + (size_t)c * a_stride);
        const cera_q8_0_aux *ax = (const cera_q8_0_aux *)((const uint8_t *)aux + (size_t)c * aux_stride);
        for (int r = 0; r < CERA_PACK_ROWS; r++) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *qs = cera_pack_q4_0_qs(w, b);
                int32_t isum = ax[b].corr;
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t q = qs[64 * i + 4 * r + j];
                        isum += (q & 0x0F) * y[b].qs[4 * i + j] + (q >> 4) * y[b].qs[16 + 4 * i + j];
                    }
                const float dx = cera_f16_to_f32(cera_pack_q4_0_d(w, nb, b)[r]);
                acc = fmaf((float)isum, dx * ax[b].d, acc);
            }
            s[(size_t)c * s_stride + r] = acc;
        }
    }
}

static bool repack_enabled(void) {
    const char *e = getenv("CERA_CPU_REPACK");
    return !(e && !strcmp(e, "0"));
}

bool cera_packed_wanted(const cera_weight *w) {
    if (!w->data || w->type != CERA_TYPE_Q4_0) return false;
    const cera_cpu_type_ops *ops = cera_cpu_ops(w->type);
    if (!ops || !ops->packed_tile) return false;
    return w->n > 0 && w->n % CERA_PACK_ROWS == 0 && w->k > 0 && w->k % QK4_0 == 0 && repack_enabled();
}

cera_status cera_packed_new(const cera_weight *w, cera_packed_weight **out, cera_error *err) {
    *out = NULL;
    const cera_cpu_type_ops *ops = cera_cpu_ops(w->type);
    cera_packed_weight *p = calloc(1, sizeof *p);
    if (!p) return cera_fail(err, CERA_ERR_NO_MEMORY, "repacked weight");
    p->type = w->type;
    p->n = w->n;
    p->k = w->k;
    p->group_bytes = cera_pack_q4_0_group_bytes(w->k);
    p->tile = ops->packed_tile;
    p->tile_cols = ops->packed_cols;
    const size_t bytes = p->group_bytes * (size_t)(w->n / CERA_PACK_ROWS);
    p->data = aligned_alloc(64, bytes);
    if (!p->data) {
        free(p);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "repacked copy of a %lld x %lld weight (%zu bytes)",
                         (long long)w->n, (long long)w->k, bytes);
    }
    const size_t w_stride = cera_row_size(w->type, w->k);
    for (int64_t g = 0; g < w->n / CERA_PACK_ROWS; g++)
        cera_repack_q4_0x16((const uint8_t *)w->data + (size_t)g * CERA_PACK_ROWS * w_stride, w_stride, w->k,
                            (uint8_t *)p->data + (size_t)g * p->group_bytes);
    *out = p;
    return CERA_OK;
}

void cera_packed_free(cera_packed_weight *p) {
    if (!p) return;
    free(p->data);
    free(p);
}

struct cera_packed_set {
    int count;
    cera_weight *weights[];
};

static cera_weight *model_weight(const cera_model *m, int i) {
    const int np = CERA_PROJ_COUNT;
    /* the model is the engine's; its backend owns the dev fields (model.h) */
    if (i < m->hp.n_layer * np) return (cera_weight *)&m->layers[i / np].proj[i % np];
    return (cera_weight *)&m->output;
}

cera_status cera_cpu_repack_model(const cera_model *m, cera_packed_set **out, cera_error *err) {
    *out = NULL;
    const int total = m->hp.n_layer * CERA_PROJ_COUNT + 1;
    cera_packed_set *set = calloc(1, sizeof *set + (size_t)total * sizeof(cera_weight *));
    if (!set) return cera_fail(err, CERA_ERR_NO_MEMORY, "repacked weights");
    for (int i = 0; i < total; i++) {
        cera_weight *w = model_weight(m, i);
        if (w->dev || !cera_packed_wanted(w)) continue;
        cera_packed_weight *p;
        const cera_status st = cera_packed_new(w, &p, err);
        if (st) {
            cera_cpu_repack_free(set);
            return st;
        }
        w->dev = p;
        set->weights[set->count++] = w;
    }
    if (!set->count) {
        free(set);
        return CERA_OK;
    }
    *out = set;
    return CERA_OK;
}

void cera_cpu_repack_free(cera_packed_set *set) {
    if (!set) return;
    for (int i = 0; i < set->count; i++) {
        cera_packed_free(set->weights[i]->dev);
        set->weights[i]->dev = NULL;
    }
    free(set);
}
