/*
 * lora_apply.c — applying LoRA adapters unmerged: per-session adapter sets, the
 * per-batch grouping of rows by adapter, and the portable kernels for y += s · B(A·x)
 * (the reference; the CPU backend applies the same plan with its F32 kernels, backend/cpu/lora.c).
 *
 * Cost per row and projection: rank·k multiply-adds for t = A·x and d·rank for B·t,
 * against d·k for the base projection (rank 16 on a 4096-wide model: under 1 %).
 *
 * Determinism: every output element is y + s · dot(B_i, t) with t_j = dot(A_j, x), each
 * dot computed by cera_lora_dot (8 interleaved partial sums, a fixed reduction tree).
 * The tiled kernel below reuses A and B rows across up to four batch rows but performs
 * exactly those operations per element, so one row gives the same bits alone (decode),
 * inside a prompt chunk (prefill) or next to other sequences' rows.
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lora/lora.h"

/* ---- Sets -------------------------------------------------------------------------- */

cera_status cera_lora_set_put(cera_lora_set *s, cera_adapter *a, float scale, cera_error *err) {
    if (!a) return cera_fail(err, CERA_ERR_INVALID_ARG, "no adapter given");
    for (int i = 0; i < s->n; i++)
        if (s->e[i].adapter == a) {
            s->e[i].scale = scale;
            return CERA_OK;
        }
    if (s->n == CERA_LORA_MAX_SET)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: a session holds at most %d adapters", a->source,
                         CERA_LORA_MAX_SET);
    cera_lora_retain(a);
    s->e[s->n].adapter = a;
    s->e[s->n].scale = scale;
    s->n++;
    return CERA_OK;
}

bool cera_lora_set_remove(cera_lora_set *s, const cera_adapter *a) {
    for (int i = 0; i < s->n; i++)
        if (s->e[i].adapter == a) {
            cera_adapter *gone = s->e[i].adapter;
            memmove(&s->e[i], &s->e[i + 1], (size_t)(s->n - i - 1) * sizeof s->e[0]);
            s->n--;
            cera_lora_release(gone);
            return true;
        }
    return false;
}

void cera_lora_set_clear(cera_lora_set *s) {
    for (int i = 0; i < s->n; i++) cera_lora_release(s->e[i].adapter);
    s->n = 0;
}

bool cera_lora_set_empty(const cera_lora_set *s) {
    for (int i = 0; i < s->n; i++)
        if (s->e[i].scale != 0.0f) return false;
    return true;
}

/* ---- Batch plan -------------------------------------------------------------------- */

cera_status cera_lora_batch_init(cera_lora_batch *b, int max_rows, cera_error *err) {
    memset(b, 0, sizeof *b);
    if (max_rows <= 0) return cera_fail(err, CERA_ERR_INVALID_ARG, "LoRA batch capacity %d", max_rows);
    const size_t slots = (size_t)max_rows * CERA_LORA_MAX_SET;
    b->cap_rows = max_rows;
    b->groups = calloc(slots, sizeof *b->groups);
    b->row_buf = malloc(slots * sizeof *b->row_buf);
    b->scale_buf = malloc(slots * sizeof *b->scale_buf);
    b->count = calloc(slots, sizeof *b->count);
    if (!b->groups || !b->row_buf || !b->scale_buf || !b->count) {
        cera_lora_batch_free(b);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "out of memory for a LoRA batch of %d rows", max_rows);
    }
    return CERA_OK;
}

void cera_lora_batch_free(cera_lora_batch *b) {
    free(b->t_buf);
    free(b->groups);
    free(b->row_buf);
    free(b->scale_buf);
    free(b->count);
    memset(b, 0, sizeof *b);
}

/* Index of the group for adapter a among b->groups[0..n), inserted in id order when
 * new. Groups are few (distinct adapters in one batch), so a linear scan is fine. */
static int group_of(cera_lora_batch *b, const cera_adapter *a) {
    int i = 0;
    while (i < b->n_groups && b->groups[i].adapter->id < a->id) i++;
    if (i < b->n_groups && b->groups[i].adapter == a) return i;
    memmove(&b->groups[i + 1], &b->groups[i], (size_t)(b->n_groups - i) * sizeof b->groups[0]);
    memmove(&b->count[i + 1], &b->count[i], (size_t)(b->n_groups - i) * sizeof b->count[0]);
    b->groups[i] = (cera_lora_group){.adapter = a};
    b->count[i] = 0;
    b->n_groups++;
    return i;
}

cera_status cera_lora_batch_reserve(cera_lora_batch *b, size_t floats, cera_error *err) {
    if (floats <= b->t_cap) return CERA_OK;
    float *t = realloc(b->t_buf, floats * sizeof *t);
    if (!t) return cera_fail(err, CERA_ERR_NO_MEMORY, "LoRA scratch of %zu floats", floats);
    b->t_buf = t;
    b->t_cap = floats;
    return CERA_OK;
}

/* Gives each group its slice of the A·x scratch. A session reserved room for its whole set
 * when an adapter was attached, so its plans never grow it; a multi-sequence plan grows it
 * here when it needs more than any before (a new adapter: not per token). When that
 * allocation fails the groups get none and the single-pass path is used. */
static void layout_scratch(cera_lora_batch *b) {
    size_t need = 0;
    for (int g = 0; g < b->n_groups; g++)
        need += (size_t)b->groups[g].n_rows * (size_t)b->groups[g].adapter->max_rank;
    (void)cera_lora_batch_reserve(b, need, NULL);
    size_t off = 0;
    for (int g = 0; g < b->n_groups; g++) {
        b->groups[g].t = need <= b->t_cap ? b->t_buf + off : NULL;
        off += (size_t)b->groups[g].n_rows * (size_t)b->groups[g].adapter->max_rank;
    }
}

void cera_lora_batch_build(cera_lora_batch *b, const int32_t *row_seq, const cera_lora_set *const *seq_sets,
                           int n_rows) {
    CERA_ASSERT(n_rows <= b->cap_rows);
    b->n_groups = 0;
    b->n_rows = n_rows;
    /* Pass 1: the groups (sorted by adapter id) and their row counts. Consecutive rows
     * of one sequence share a set pointer, so the scan skips repeats cheaply. */
    const cera_lora_set *prev = NULL;
    int run = 0;
    for (int r = 0; r <= n_rows; r++) {
        const cera_lora_set *s = r < n_rows ? seq_sets[row_seq[r]] : NULL;
        if (r < n_rows && s == prev) {
            run++;
            continue;
        }
        if (prev)
            for (int i = 0; i < prev->n; i++)
                if (prev->e[i].scale != 0.0f) b->count[group_of(b, prev->e[i].adapter)] += run;
        prev = s;
        run = 1;
    }
    /* Pass 2: lay the groups' rows out in order. */
    int off = 0;
    for (int g = 0; g < b->n_groups; g++) {
        b->groups[g].rows = b->row_buf + off;
        b->groups[g].scales = b->scale_buf + off;
        b->groups[g].n_rows = 0;
        off += b->count[g];
    }
    for (int r = 0; r < n_rows; r++) {
        const cera_lora_set *s = seq_sets[row_seq[r]];
        if (!s) continue;
        for (int i = 0; i < s->n; i++) {
            if (s->e[i].scale == 0.0f) continue;
            int g = 0;
            while (b->groups[g].adapter != s->e[i].adapter) g++;
            cera_lora_group *gr = &b->groups[g];
            ((int *)gr->rows)[gr->n_rows] = r;
            ((float *)gr->scales)[gr->n_rows] = s->e[i].scale;
            gr->n_rows++;
        }
    }
    layout_scratch(b);
}

void cera_lora_batch_build_uniform(cera_lora_batch *b, const cera_lora_set *set, int n_rows) {
    CERA_ASSERT(n_rows <= b->cap_rows);
    b->n_groups = 0;
    b->n_rows = n_rows;
    if (!set) return;
    for (int i = 0; i < set->n; i++)
        if (set->e[i].scale != 0.0f) group_of(b, set->e[i].adapter);
    for (int g = 0; g < b->n_groups; g++) {
        float scale = 0;
        for (int i = 0; i < set->n; i++)
            if (set->e[i].adapter == b->groups[g].adapter) scale = set->e[i].scale;
        int *rows = b->row_buf + (size_t)g * n_rows;
        float *scales = b->scale_buf + (size_t)g * n_rows;
        for (int r = 0; r < n_rows; r++) {
            rows[r] = r;
            scales[r] = scale;
        }
        b->groups[g].rows = rows;
        b->groups[g].scales = scales;
        b->groups[g].n_rows = n_rows;
    }
    layout_scratch(b);
}

bool cera_lora_batch_two_phase(const cera_lora_batch *b) { return b->n_groups > 0 && b->groups[0].t != NULL; }

bool cera_lora_batch_targets(const cera_lora_batch *b, int layer, cera_proj p) {
    for (int g = 0; g < b->n_groups; g++)
        if (cera_lora_pair_get(b->groups[g].adapter, layer, p)) return true;
    return false;
}

/* ---- Kernels ------------------------------------------------------------------------- */

float cera_lora_dot(const float *a, const float *b, int64_t n) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++) acc[l] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void cera_lora_apply_row_ref(const cera_lora_pair *p, float s, const float *x, float *y, int64_t d0,
                             int64_t d1) {
    float t[CERA_LORA_MAX_RANK];
    for (int j = 0; j < p->rank; j++) {
        const float *a = p->a + (size_t)j * p->k;
        float acc[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= p->k; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += a[i + l] * x[i + l];
        for (int l = 0; i < p->k; i++, l++) acc[l] += a[i] * x[i];
        t[j] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
    for (int64_t i = d0; i < d1; i++) {
        const float *b = p->b + (size_t)i * p->rank;
        float acc[8] = {0};
        int j = 0;
        for (; j + 8 <= p->rank; j += 8)
            for (int l = 0; l < 8; l++) acc[l] += b[j + l] * t[j + l];
        for (int l = 0; j < p->rank; j++, l++) acc[l] += b[j] * t[j];
        const float u = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        y[i] = y[i] + s * u;
    }
}

void cera_lora_apply_row(const cera_lora_pair *p, float s, const float *x, float *y, int64_t d0, int64_t d1) {
    float t[CERA_LORA_MAX_RANK];
    for (int j = 0; j < p->rank; j++) t[j] = cera_lora_dot(p->a + (size_t)j * p->k, x, p->k);
    for (int64_t i = d0; i < d1; i++) y[i] = y[i] + s * cera_lora_dot(p->b + (size_t)i * p->rank, t, p->rank);
}

/* Up to four rows at once: each A row and B row is loaded once per tile instead of once
 * per batch row, which is what makes prefill a GEMM rather than repeated GEMVs. */
#define TILE 4
static void apply_tile(const cera_lora_pair *p, const int *rows, const float *scales, int n, const float *x,
                       size_t x_stride, float *y, size_t y_stride, int64_t d0, int64_t d1) {
    float t[TILE][CERA_LORA_MAX_RANK];
    const float *xr[TILE];
    float *yr[TILE];
    for (int r = 0; r < n; r++) {
        xr[r] = x + (size_t)rows[r] * x_stride;
        yr[r] = y + (size_t)rows[r] * y_stride;
    }
    for (int j = 0; j < p->rank; j++) {
        const float *a = p->a + (size_t)j * p->k;
        for (int r = 0; r < n; r++) t[r][j] = cera_lora_dot(a, xr[r], p->k);
    }
    for (int64_t i = d0; i < d1; i++) {
        const float *b = p->b + (size_t)i * p->rank;
        for (int r = 0; r < n; r++) yr[r][i] = yr[r][i] + scales[r] * cera_lora_dot(b, t[r], p->rank);
    }
}

void cera_lora_batch_apply(const cera_lora_batch *b, int layer, cera_proj proj, const float *x,
                           size_t x_stride, float *y, size_t y_stride, int64_t d0, int64_t d1) {
    for (int g = 0; g < b->n_groups; g++) {
        const cera_lora_group *gr = &b->groups[g];
        const cera_lora_pair *p = cera_lora_pair_get(gr->adapter, layer, proj);
        if (!p) continue;
        const int64_t e0 = d0 < 0 ? 0 : d0, e1 = d1 > p->d ? p->d : d1;
        if (e0 >= e1) continue;
        float s[TILE];
        for (int r0 = 0; r0 < gr->n_rows; r0 += TILE) {
            const int n = gr->n_rows - r0 < TILE ? gr->n_rows - r0 : TILE;
            for (int r = 0; r < n; r++) s[r] = cera_lora_scale(gr->adapter, p, gr->scales[r0 + r]);
            apply_tile(p, gr->rows + r0, s, n, x, x_stride, y, y_stride, e0, e1);
        }
    }
}
