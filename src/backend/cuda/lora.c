/*
 * lora.c — the host side of LoRA on the GPU (lora_cuda.h): uploading an adapter the first
 * time a batch uses it, turning a batch's plan (lora/lora.h: rows grouped by adapter)
 * into the device plan the kernels read, and the launches forward.c makes around each
 * projection group.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"
#include "lora/lora.h"

_Static_assert(CERA_LORA_MAX_SET <= CU_LORA_ROW_MAX,
               "the kernels stage at most CU_LORA_ROW_MAX adapters per row");
_Static_assert(CU_LORA_PROJ == CERA_PROJ_COUNT, "pair tables are indexed in cera_proj order");
_Static_assert(CU_LORA_MOE == CERA_LORA_MOE_COUNT, "MoE pair tables are indexed in cera_lora_moe order");
_Static_assert(CU_LORA_PROJ <= CU_LORA_MOE_BIT, "the mask's projection bits lie below its MoE bits");

/* An adapter's device copy (in the state's table, by adapter id). */
typedef struct cu_lora_dev {
    void *factors;     /* F16, the same offsets as the adapter's F32 block */
    cu_lora_pair *tab; /* device [n_layer * (CU_LORA_PROJ + CU_LORA_MOE)] */
    unsigned mask;     /* targets in some layer (bit = cera_proj; CU_LORA_MOE_BIT + cera_lora_moe) */
    int max_rank;
} cu_lora_dev;

static void lora_dev_free(void *p) {
    cu_lora_dev *d = p;
    if (!d) return;
    cudaFree(d->factors);
    cudaFree(d->tab);
    free(d);
}

/* The upload of adapter a, or NULL. */
static const cu_lora_dev *dev_of(const cera_cuda_state *s, const cera_adapter *a) {
    for (int i = 0; i < s->n_lora_devs; i++)
        if (s->lora_dev_ids[i] == a->id) return s->lora_devs[i];
    return NULL;
}

void cu_lora_forget(cera_cuda_state *s, uint64_t id) {
    for (int i = 0; i < s->n_lora_devs; i++)
        if (s->lora_dev_ids[i] == id) {
            lora_dev_free(s->lora_devs[i]);
            s->lora_devs[i] = s->lora_devs[--s->n_lora_devs];
            s->lora_dev_ids[i] = s->lora_dev_ids[s->n_lora_devs];
            return;
        }
}

static cera_status upload_adapter(cera_cuda_state *s, cera_adapter *a, cera_error *err) {
    if (dev_of(s, a)) return CERA_OK;
    if (s->n_lora_devs == s->cap_lora_devs) {
        const int cap = s->cap_lora_devs ? 2 * s->cap_lora_devs : 8;
        cu_lora_dev **nd = realloc(s->lora_devs, (size_t)cap * sizeof *nd);
        if (nd) s->lora_devs = nd;
        uint64_t *ni = nd ? realloc(s->lora_dev_ids, (size_t)cap * sizeof *ni) : NULL;
        if (ni) s->lora_dev_ids = ni;
        if (!nd || !ni) return cera_fail(err, CERA_ERR_NO_MEMORY, "%s: adapter table", a->source);
        s->cap_lora_devs = cap;
    }
    if (a->n_layer != s->hp.n_layer)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "%s: adapter of %d layers for a model of %d", a->source,
                         a->n_layer, s->hp.n_layer);
    if (s->n_embd > LORA_NORM_MAX)
        return cera_fail(err, CERA_ERR_UNSUPPORTED,
                         "%s: adapters on the GPU support rows of up to %d (the model's are %d wide)",
                         a->source, LORA_NORM_MAX, s->n_embd);
    const size_t n = a->used;
    cu_lora_dev *d = calloc(1, sizeof *d);
    const size_t n_tab = (size_t)a->n_layer * (CU_LORA_PROJ + CU_LORA_MOE);
    cu_lora_pair *tab = calloc(n_tab, sizeof *tab);
    float *f32 = NULL;
    int32_t *bad = NULL;
    cera_status st = CERA_OK;
    if (!d || !tab) {
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: adapter upload", a->source);
        goto out;
    }
    cudaError_t e = cudaMalloc(&d->factors, n * 2 + 16);
    if (e == cudaSuccess) e = cudaMalloc((void **)&d->tab, sizeof *tab * n_tab);
    if (e == cudaSuccess) e = cudaMalloc((void **)&f32, n * sizeof(float) + 16);
    if (e == cudaSuccess) e = cudaMalloc((void **)&bad, sizeof *bad);
    if (e != cudaSuccess) {
        cudaGetLastError();
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "%s: %zu MB of adapter factors on the GPU: %s", a->source,
                       n * 2 >> 20, cudaGetErrorString(e));
        goto out;
    }
    int32_t h_bad = 0;
    if ((e = cudaMemcpyAsync(f32, a->data, n * sizeof(float), cudaMemcpyHostToDevice, s->st)) !=
            cudaSuccess ||
        (e = cudaMemsetAsync(bad, 0, sizeof *bad, s->st)) != cudaSuccess ||
        (e = cu_lora_to_f16(s->st, f32, d->factors, (int64_t)n, bad)) != cudaSuccess ||
        (e = cudaMemcpyAsync(&h_bad, bad, sizeof h_bad, cudaMemcpyDeviceToHost, s->st)) != cudaSuccess ||
        (e = cudaStreamSynchronize(s->st)) != cudaSuccess) {
        st = cera_fail(err, CERA_ERR_DEVICE, "%s: adapter upload: %s", a->source, cudaGetErrorString(e));
        goto out;
    }
    if (h_bad) {
        st = cera_fail(err, CERA_ERR_UNSUPPORTED,
                       "%s: %d factor values lie outside the F16 range the GPU keeps", a->source, h_bad);
        goto out;
    }
    for (int l = 0; l < a->n_layer; l++)
        for (int p = 0; p < CU_LORA_PROJ; p++) {
            const cera_lora_pair *src = &a->pairs[(size_t)l * CERA_PROJ_COUNT + p];
            cu_lora_pair *dst = &tab[(size_t)l * CU_LORA_PROJ + p];
            if (!src->rank) continue;
            dst->rank = src->rank;
            dst->a = (const uint16_t *)d->factors + (src->a - a->data);
            dst->b = (const uint16_t *)d->factors + (src->b - a->data);
            dst->factor = a->alpha != 0.0f ? a->alpha / (float)src->rank : 1.0f;
            d->mask |= 1u << p;
            if (src->rank > d->max_rank) d->max_rank = src->rank;
        }
    for (int l = 0; l < a->n_layer; l++)
        for (int t = 0; t < CU_LORA_MOE && a->moe; t++) {
            const cera_lora_pair *src = cera_lora_moe_get(a, l, (cera_lora_moe)t);
            cu_lora_pair *dst = &tab[(size_t)a->n_layer * CU_LORA_PROJ + (size_t)l * CU_LORA_MOE + t];
            if (!src) continue;
            dst->rank = src->rank;
            dst->a = (const uint16_t *)d->factors + (src->a - a->data);
            dst->b = (const uint16_t *)d->factors + (src->b - a->data);
            dst->factor = a->alpha != 0.0f ? a->alpha / (float)src->rank : 1.0f;
            d->mask |= 1u << (CU_LORA_MOE_BIT + t);
        }
    if ((e = cudaMemcpy(d->tab, tab, sizeof *tab * n_tab, cudaMemcpyHostToDevice)) != cudaSuccess) {
        st = cera_fail(err, CERA_ERR_DEVICE, "%s: adapter upload: %s", a->source, cudaGetErrorString(e));
        goto out;
    }
    s->lora_devs[s->n_lora_devs] = d;
    s->lora_dev_ids[s->n_lora_devs++] = a->id;
    d = NULL;
out:
    if (f32) cudaFree(f32);
    if (bad) cudaFree(bad);
    lora_dev_free(d);
    free(tab);
    return st;
}

/* The A·x scratch (t and its per-chunk parts) for n_ent entries of adapters up to max_rank;
 * it grows (rarely: a larger adapter, a longer batch of them), and a new one invalidates
 * the decode graph, which is keyed on t. */
static cera_status ensure_scratch(cera_cuda_state *s, int n_ent, int max_rank, cera_error *err) {
    if (n_ent <= s->lora_cap_ent && max_rank <= s->lora.max_rank) return CERA_OK;
    const int ents = n_ent > s->lora_cap_ent ? (n_ent > 2 * s->lora_cap_ent ? n_ent : 2 * s->lora_cap_ent)
                                             : s->lora_cap_ent;
    const int ents_cap = ents < s->lora_max_ent ? ents : s->lora_max_ent;
    const int rank = max_rank > s->lora.max_rank ? max_rank : s->lora.max_rank;
    CU_TRY(cudaStreamSynchronize(s->st));
    if (s->lora.t) cudaFree(s->lora.t);
    s->lora.t = s->lora.tpart = NULL;
    s->lora_cap_ent = 0;
    const size_t per = (size_t)3 * (size_t)rank * sizeof(float);
    const size_t bytes = (size_t)ents_cap * per * (size_t)(1 + s->lora.n_chunk);
    cudaError_t e = cudaMalloc((void **)&s->lora.t, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError();
        s->lora.t = NULL;
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: %zu bytes of LoRA scratch: %s", bytes,
                         cudaGetErrorString(e));
    }
    s->lora.tpart = s->lora.t + (size_t)ents_cap * 3 * (size_t)rank;
    s->lora.max_rank = rank;
    s->lora_cap_ent = ents_cap;
    return CERA_OK;
}

cera_status cu_lora_init(cera_cuda_state *s, cera_error *err) {
    const int B = s->prm.n_batch;
    s->lora_max_ent = B * CERA_LORA_MAX_SET;
    const size_t head = sizeof(int32_t) * (size_t)(B + 2),
                 ents = sizeof(cu_lora_ent) * (size_t)s->lora_max_ent;
    s->lora_head_bytes = (head + 15) & ~(size_t)15;
    const size_t bytes = s->lora_head_bytes + ents;
    void *dev = NULL;
    CU_TRY(cudaMalloc(&dev, bytes));
    s->lora_dev = dev;
    CU_TRY(cudaMallocHost(&s->lora_host, bytes));
    s->lora_fill = malloc(sizeof(int32_t) * (size_t)(B + 1));
    if (!s->lora_fill) return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: LoRA plan");
    s->lora.n_ent = dev;
    s->lora.row_first = (const int32_t *)dev + 1;
    s->lora.ent = (const cu_lora_ent *)((char *)dev + s->lora_head_bytes);
    s->lora.n_chunk = (int)((s->k_max + LORA_KC - 1) / LORA_KC);
    CU_TRY(cudaMalloc((void **)&s->lora.count, sizeof(int32_t) * 3 * (size_t)s->lora_max_ent));
    CU_TRY(cudaMemset(s->lora.count, 0, sizeof(int32_t) * 3 * (size_t)s->lora_max_ent));
    const size_t n_pairs = (size_t)s->hp.n_layer * CU_LORA_PROJ;
    s->lora_items_bytes = n_pairs * CU_LORA_ROW_MAX * sizeof(cu_lora_item) + n_pairs * sizeof(int32_t);
    CU_TRY(cudaMalloc(&s->lora_items_dev, s->lora_items_bytes));
    CU_TRY(cudaMallocHost((void **)&s->lora_items_host, s->lora_items_bytes));
    s->lora.items = s->lora_items_dev;
    s->lora.item_n = (const int32_t *)((const cu_lora_item *)s->lora_items_dev + n_pairs * CU_LORA_ROW_MAX);
    s->lora_items_key.n = -1; // nothing on the device yet
    CU_TRY(cudaMalloc((void **)&s->x2, sizeof(float) * (size_t)s->embd_pad));
    CU_TRY(cudaMemset(s->x2, 0, sizeof(float) * (size_t)s->embd_pad));
    CU_TRY(cudaStreamCreateWithFlags(&s->side, cudaStreamNonBlocking));
    CU_TRY(cudaEventCreateWithFlags(&s->ev_fork, cudaEventDisableTiming));
    CU_TRY(cudaEventCreateWithFlags(&s->ev_join, cudaEventDisableTiming));
    return CERA_OK;
}

void cu_lora_free(cera_cuda_state *s) {
    for (int i = 0; i < s->n_lora_devs; i++) lora_dev_free(s->lora_devs[i]);
    free(s->lora_devs);
    free(s->lora_dev_ids);
    s->lora_devs = NULL;
    s->lora_dev_ids = NULL;
    s->n_lora_devs = s->cap_lora_devs = 0;
    if (s->lora.t) cudaFree(s->lora.t);
    if (s->lora.count) cudaFree(s->lora.count);
    if (s->x2) cudaFree(s->x2);
    if (s->lora_items_dev) cudaFree(s->lora_items_dev);
    if (s->lora_items_host) cudaFreeHost(s->lora_items_host);
    if (s->lora_dev) cudaFree(s->lora_dev);
    if (s->lora_host) cudaFreeHost(s->lora_host);
    free(s->lora_fill);
    if (s->ev_fork) cudaEventDestroy(s->ev_fork);
    if (s->ev_join) cudaEventDestroy(s->ev_join);
    if (s->side) cudaStreamDestroy(s->side);
}

/* The plan segment of each projection: Q, K, V share one input (segments 0..2), gate and up
 * another (0, 1); O and down are alone. */
static const int proj_seg[CU_LORA_PROJ] = {0, 1, 2, 0, 0, 1, 0};

int cu_lora_slot(cera_proj p) { return p >= 0 && p < CU_LORA_PROJ ? proj_seg[p] : 0; }

/* Decode: the item table of batch row 0 (its entries in plan order). It depends only on the
 * row's adapters and scales, so it is built and uploaded only when those change (a decode step
 * with the same adapters does no host work for it). */
static cera_status decode_items(cera_cuda_state *s, const cera_lora_batch *lb, cera_error *err) {
    cu_lora_items_key key;
    memset(&key, 0, sizeof key); // padding too: keys compare with memcmp
    for (int g = 0; g < lb->n_groups && key.n < CU_LORA_ROW_MAX; g++) {
        const cera_lora_group *G = &lb->groups[g];
        if (G->n_rows < 1 || G->rows[0] != 0) continue;
        key.id[key.n] = G->adapter->id; // unique per process: a freed adapter's address reused differs
        key.scale[key.n++] = G->scales[0];
    }
    if (!memcmp(&key, &s->lora_items_key, sizeof key)) return CERA_OK;
    const size_t n_pairs = (size_t)s->hp.n_layer * CU_LORA_PROJ;
    cu_lora_item *items = s->lora_items_host;
    int32_t *item_n = (int32_t *)(items + n_pairs * CU_LORA_ROW_MAX);
    memset(items, 0, s->lora_items_bytes);
    int e = 0; // entries of row 0 come first, one per group containing it, in group order
    for (int g = 0; g < lb->n_groups; g++) {
        const cera_lora_group *G = &lb->groups[g];
        if (G->n_rows < 1 || G->rows[0] != 0) continue;
        const cera_adapter *a = G->adapter;
        const cu_lora_dev *d = dev_of(s, a);
        for (size_t q = 0; q < n_pairs; q++) {
            const cera_lora_pair *pr = &a->pairs[(q / CU_LORA_PROJ) * CERA_PROJ_COUNT + q % CU_LORA_PROJ];
            if (!pr->rank || item_n[q] >= CU_LORA_ROW_MAX) continue;
            cu_lora_item *it = &items[q * CU_LORA_ROW_MAX + item_n[q]++];
            it->a = (const uint16_t *)d->factors + (pr->a - a->data);
            it->b = (const uint16_t *)d->factors + (pr->b - a->data);
            it->rank = pr->rank;
            it->s = cera_lora_scale(a, pr, G->scales[0]);
            it->slot = e * 3 + proj_seg[q % CU_LORA_PROJ];
        }
        e++;
    }
    // the host table is not touched again before this copy is done: every forward call ends
    // with a stream synchronize
    CU_TRY(cudaMemcpyAsync(s->lora_items_dev, items, s->lora_items_bytes, cudaMemcpyHostToDevice, s->st));
    memcpy(&s->lora_items_key, &key, sizeof key);
    return CERA_OK;
}

cera_status cu_lora_prepare(cera_cuda_state *s, const cera_lora_batch *lb, int n, cera_error *err) {
    s->lora_mask = 0;
    s->lora_lb = NULL;
    if (!lb || lb->n_groups == 0) return CERA_OK;
    s->lora_lb = lb;
    s->lora_uniform = true;
    for (int g = 0; g < lb->n_groups && s->lora_uniform; g++) {
        const cera_lora_group *G = &lb->groups[g];
        s->lora_uniform = G->n_rows == n;
        for (int i = 1; i < G->n_rows && s->lora_uniform; i++) s->lora_uniform = G->scales[i] == G->scales[0];
    }
    int max_rank = 0;
    for (int g = 0; g < lb->n_groups; g++) {
        cera_adapter *a = (cera_adapter *)lb->groups[g].adapter;
        CERA_TRY(upload_adapter(s, a, err));
        const cu_lora_dev *d = dev_of(s, a);
        s->lora_mask |= d->mask;
        if (d->max_rank > max_rank) max_rank = d->max_rank;
    }
    // entries sorted by row; groups come in adapter-id order, so each row's entries do too
    int32_t *head = s->lora_host, *row_first = head + 1, *fill = s->lora_fill;
    cu_lora_ent *ent = (cu_lora_ent *)((char *)s->lora_host + s->lora_head_bytes);
    memset(row_first, 0, sizeof(int32_t) * (size_t)(n + 1));
    for (int g = 0; g < lb->n_groups; g++)
        for (int i = 0; i < lb->groups[g].n_rows; i++) {
            const int r = lb->groups[g].rows[i];
            if (r < 0 || r >= n)
                return cera_fail(err, CERA_ERR_INTERNAL, "cuda: LoRA plan row %d outside the batch of %d", r,
                                 n);
            row_first[r + 1]++;
        }
    for (int r = 0; r < n; r++) row_first[r + 1] += row_first[r];
    const int n_ent = row_first[n];
    if (n_ent > s->lora_max_ent)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: %d LoRA entries (at most %d)", n_ent,
                         s->lora_max_ent);
    memcpy(fill, row_first, sizeof(int32_t) * (size_t)n);
    for (int g = 0; g < lb->n_groups; g++) {
        const cera_lora_group *G = &lb->groups[g];
        const cu_lora_dev *d = dev_of(s, G->adapter);
        for (int i = 0; i < G->n_rows; i++) {
            cu_lora_ent *en = &ent[fill[G->rows[i]]++];
            en->tab = d->tab;
            en->row = G->rows[i];
            en->scale = G->scales[i];
        }
    }
    CERA_TRY(ensure_scratch(s, n_ent, max_rank, err));
    head[0] = n_ent;
    s->lora_n_ent = n_ent;
    CU_TRY(cudaMemcpyAsync(s->lora_dev, s->lora_host, sizeof(int32_t) * (size_t)(n + 2),
                           cudaMemcpyHostToDevice, s->st));
    CU_TRY(cudaMemcpyAsync((char *)s->lora_dev + s->lora_head_bytes, ent, sizeof(cu_lora_ent) * (size_t)n_ent,
                           cudaMemcpyHostToDevice, s->st));
    if (n == 1) CERA_TRY(decode_items(s, lb, err));
    return CERA_OK;
}

/* The segments of one projection group the batch's adapters target (n = 0: none). */
cu_lora_segs cu_lora_group(const cera_cuda_state *s, const cera_proj *proj, float *const *y, const int64_t *d,
                           int n, int64_t y_stride) {
    cu_lora_segs g;
    memset(&g, 0, sizeof g);
    bool any = false;
    for (int j = 0; j < n; j++) any = any || (s->lora_mask >> proj[j] & 1u);
    if (!any) return g;
    g.n = n;
    g.y_stride = y_stride;
    for (int j = 0; j < n; j++) {
        g.proj[j] = (int)proj[j];
        g.y[j] = y ? y[j] : NULL;
        g.d[j] = d[j];
    }
    return g;
}

cera_status cu_lora_apply_a(cera_cuda_state *s, int layer, const cu_lora_segs *g, const cu_act *x, bool fork,
                            cera_error *err) {
    if (!g->n) return CERA_OK;
    const int grid = s->lora_n_ent;
    if (!fork) {
        CU_TRY(cu_lora_a(s->st, &s->lora, layer, g, x->f, x->k_pad, x->k, grid));
        return CERA_OK;
    }
    // off the main stream: A·x runs beside the projection's own matvec (both only read x)
    CU_TRY(cudaEventRecord(s->ev_fork, s->st));
    CU_TRY(cudaStreamWaitEvent(s->side, s->ev_fork, 0));
    const bool pdl = cu_pdl_on();
    cu_set_pdl(false);
    const cudaError_t e = cu_lora_a(s->side, &s->lora, layer, g, x->f, x->k_pad, x->k, grid);
    cu_set_pdl(pdl);
    CU_TRY(e);
    CU_TRY(cudaEventRecord(s->ev_join, s->side));
    s->lora_joined = false;
    return CERA_OK;
}

cera_status cu_lora_join(cera_cuda_state *s, cera_error *err) {
    if (s->lora_joined) return CERA_OK;
    CU_TRY(cudaStreamWaitEvent(s->st, s->ev_join, 0));
    s->lora_joined = true;
    return CERA_OK;
}

cera_status cu_lora_prefill_gemm(cera_cuda_state *s, int layer, const cu_lora_segs *g, const cu_act *x, int n,
                                 cera_error *err) {
    const cera_lora_batch *lb = s->lora_lb;
    const float one = 1.0f, zero = 0.0f;
    void *t = s->lora.t; // [n, rank] F16: t holds n_ent * 3 * max_rank floats, n_ent >= n
    for (int gi = 0; gi < lb->n_groups; gi++) {
        const cera_adapter *a = lb->groups[gi].adapter;
        const cu_lora_dev *d = dev_of(s, a);
        for (int j = 0; j < g->n; j++) {
            const cera_lora_pair *pr = cera_lora_pair_get(a, layer, (cera_proj)g->proj[j]);
            if (!pr) continue;
            const uint16_t *da = (const uint16_t *)d->factors + (pr->a - a->data),
                           *db = (const uint16_t *)d->factors + (pr->b - a->data);
            const int r = pr->rank, k = (int)pr->k, dd = (int)pr->d;
            const float sc = cera_lora_scale(a, pr, lb->groups[gi].scales[0]);
            // Tᵀ [r x n] = A [r x k] · Xᵀ: A is column-major k x r (lda k), X column-major k_pad x n
            CUBLAS_TRY(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, r, n, k, &one, da, CUDA_R_16F, k,
                                    s->half_act, CUDA_R_16F, (int)x->k_pad, &zero, t, CUDA_R_16F, r,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            // Yᵀ [d x n] += sc · B [d x r] · Tᵀ: B is column-major r x d (lda r)
            CUBLAS_TRY(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, dd, n, r, &sc, db, CUDA_R_16F, r, t,
                                    CUDA_R_16F, r, &one, g->y[j], CUDA_R_32F, (int)g->y_stride,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
    }
    return CERA_OK;
}
