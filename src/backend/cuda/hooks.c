/*
 * hooks.c — entry points for measurements (bench/cuda) and per-op tests (tests/cuda).
 *
 * The tests run the very kernels the forward pass launches (cu_matvec with the activation
 * quantized by cu_quantize_act, cu_gemm, cu_get_rows) on host inputs; the measurements
 * time device copies, a streaming read and one matvec against the same bytes, with CUDA
 * events around many repetitions replayed from a graph, over buffers larger than the L2.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_state.h"

/* A stream and a cuBLAS handle plus the GEMM scratch, enough for cu_gemm. */
typedef struct mini {
    cera_cuda_state s;
    void *raw;
} mini;

static cera_status mini_open(mini *m, cera_error *err) {
    memset(m, 0, sizeof *m);
    if (!cera_cuda_available()) return cera_fail(err, CERA_ERR_DEVICE, "cuda: no CUDA device found");
    CU_TRY(cudaStreamCreateWithFlags(&m->s.st, cudaStreamNonBlocking));
    CUBLAS_TRY(cublasCreate(&m->s.blas));
    CUBLAS_TRY(cublasSetStream(m->s.blas, m->s.st));
    return CERA_OK;
}

static void mini_close(mini *m) {
    if (m->s.st) cudaStreamSynchronize(m->s.st);
    cudaFree(m->raw);
    cudaFree(m->s.half_act);
    cudaFree(m->s.deq);
    if (m->s.blas) cublasDestroy(m->s.blas);
    if (m->s.st) cudaStreamDestroy(m->s.st);
}

/* Uploads host GGUF rows as a device weight of the forward pass's layout. */
static cera_status upload_host(mini *m, cera_type type, int64_t k, int64_t n, const void *w, cu_weight *out,
                               cera_error *err) {
    cera_weight mw;
    memset(&mw, 0, sizeof mw);
    mw.type = type;
    mw.k = k;
    mw.n = n;
    mw.data = w;
    const size_t raw = cera_row_size(type, k) * (size_t)n;
    if (raw == 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: k %lld is not whole blocks", (long long)k);
    CU_TRY(cudaMalloc(&m->raw, raw));
    m->s.prm.synthetic_weights = w == NULL;
    return cu_upload_weight(&m->s, &mw, "test weight", out, m->raw, err);
}

/* An activation of rows x k on the device, f32 from host x (row-major, k per row), quantized. */
static cera_status upload_act(mini *m, const float *x, int rows, int64_t k, cu_act *a, cera_error *err) {
    memset(a, 0, sizeof *a);
    a->k = k;
    a->k_pad = (k + 31) / 32 * 32;
    CU_TRY(cudaMalloc((void **)&a->f, sizeof(float) * (size_t)(rows * a->k_pad)));
    CU_TRY(cudaMalloc((void **)&a->q, (size_t)(rows * a->k_pad)));
    CU_TRY(cudaMalloc((void **)&a->d, sizeof(float) * (size_t)(rows * a->k_pad / 32)));
    CU_TRY(cudaMalloc((void **)&a->s, sizeof(int32_t) * (size_t)(rows * a->k_pad / 32)));
    CU_TRY(cudaMemset(a->f, 0, sizeof(float) * (size_t)(rows * a->k_pad)));
    if (x)
        CU_TRY(cudaMemcpy2D(a->f, sizeof(float) * (size_t)a->k_pad, x, sizeof(float) * (size_t)k,
                            sizeof(float) * (size_t)k, (size_t)rows, cudaMemcpyHostToDevice));
    else
        CU_TRY(cu_fill_f32(m->s.st, a->f, rows * a->k_pad, 0.01f));
    // a pageable copy may still be landing when cudaMemcpy2D returns, and the stream does
    // not wait for the legacy stream's work: without this, a large x races the quantization
    CU_TRY(cudaDeviceSynchronize());
    CU_TRY(cu_quantize_act(m->s.st, a, rows));
    return CERA_OK;
}

static void free_act(cu_act *a) {
    cudaFree(a->f);
    cudaFree(a->q);
    cudaFree(a->d);
    cudaFree(a->s);
}

cera_status cera_cuda_test_matvec(cera_type type, int64_t k, int64_t n, const void *w, const float *x,
                                  float *y, cera_error *err) {
    mini m;
    cu_weight cw;
    cu_act a;
    float *dy = NULL;
    memset(&cw, 0, sizeof cw);
    memset(&a, 0, sizeof a);
    cera_status st = mini_open(&m, err);
    if (st == CERA_OK) st = upload_host(&m, type, k, n, w, &cw, err);
    if (st == CERA_OK) st = upload_act(&m, x, 1, k, &a, err);
    if (st == CERA_OK && cudaMalloc((void **)&dy, sizeof(float) * (size_t)n) != cudaSuccess)
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: output");
    if (st == CERA_OK) {
        cu_mv_seg seg = {&cw, dy, NULL};
        cudaError_t e = cu_matvec(m.s.st, &seg, 1, &a, CU_MV_STORE, 1.0f, NULL);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(y, dy, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost, m.s.st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m.s.st);
        if (e != cudaSuccess) st = cera_fail(err, CERA_ERR_DEVICE, "cuda: matvec: %s", cudaGetErrorString(e));
    }
    cudaFree(dy);
    free_act(&a);
    cu_free_weight(&cw);
    mini_close(&m);
    return st;
}

/* An activation of rows x k_pad on the device (uninitialized; quant arrays when q8). */
static cera_status alloc_act(cu_act *a, int rows, int64_t k, bool q8) {
    memset(a, 0, sizeof *a);
    a->k = k;
    a->k_pad = (k + 31) / 32 * 32;
    const size_t n = (size_t)rows * (size_t)a->k_pad;
    if (cudaMalloc((void **)&a->f, sizeof(float) * n) != cudaSuccess) return CERA_ERR_NO_MEMORY;
    if (!q8) return CERA_OK;
    if (cudaMalloc((void **)&a->q, n) != cudaSuccess ||
        cudaMalloc((void **)&a->d, sizeof(float) * n / 32) != cudaSuccess ||
        cudaMalloc((void **)&a->s, sizeof(int32_t) * n / 32) != cudaSuccess)
        return CERA_ERR_NO_MEMORY;
    return CERA_OK;
}

/* Row r of activation a as a one-row activation. */
static cu_act act_row(const cu_act *a, int r) {
    cu_act o = *a;
    o.f += r * a->k_pad;
    if (o.q) {
        o.q += r * a->k_pad;
        o.d += r * (a->k_pad / 32);
        o.s += r * (a->k_pad / 32);
    }
    return o;
}

cera_status cera_cuda_test_matvec_rows(const cera_cuda_mvrows_case *c, float *y[2], int8_t *hq[2],
                                       float *hd[2], cera_error *err) {
    if (c->n_segs < 1 || c->n_segs > 3 || c->n_rows < 1)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: matvec rows case");
    const bool swiglu = c->epi == CU_MV_SWIGLU;
    int64_t sum_n = 0, max_n = 0, off[3];
    for (int i = 0; i < c->n_segs; i++) {
        off[i] = sum_n;
        sum_n += c->n[i];
        if (c->n[i] > max_n) max_n = c->n[i];
    }
    const size_t row = cera_row_size(c->type, c->k);
    const int64_t hk = (c->n[0] + 31) / 32 * 32;
    // outputs: STORE/ADD [n_rows][sum n]; SWIGLU act rows of hk
    const size_t ny = (size_t)c->n_rows * (size_t)(swiglu ? hk : sum_n);
    mini m;
    cu_weight cw[3];
    cu_act a, h[2];
    float *dy[2] = {NULL, NULL}, *dbias = NULL;
    memset(cw, 0, sizeof cw);
    memset(&a, 0, sizeof a);
    memset(h, 0, sizeof h);
    cera_status st = mini_open(&m, err);
    if (st == CERA_OK && cudaMalloc(&m.raw, row * (size_t)max_n) != cudaSuccess)
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: staging");
    for (int i = 0; i < c->n_segs && st == CERA_OK; i++) {
        cera_weight mw;
        memset(&mw, 0, sizeof mw);
        mw.type = c->type;
        mw.k = c->k;
        mw.n = c->n[i];
        mw.data = (const uint8_t *)c->w + row * (size_t)off[i];
        st = cu_upload_weight(&m.s, &mw, "test weight", &cw[i], m.raw, err);
    }
    if (st == CERA_OK) st = upload_act(&m, c->x, c->n_rows, c->k, &a, err);
    if (st == CERA_OK && c->bias) {
        if (cudaMalloc((void **)&dbias, sizeof(float) * (size_t)sum_n) != cudaSuccess ||
            cudaMemcpy(dbias, c->bias, sizeof(float) * (size_t)sum_n, cudaMemcpyHostToDevice) != cudaSuccess)
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: bias");
    }
    for (int i = 0; i < 2 && st == CERA_OK; i++) {
        if (swiglu) {
            if (alloc_act(&h[i], c->n_rows, c->n[0], true) != CERA_OK)
                st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: h");
        } else if (cudaMalloc((void **)&dy[i], sizeof(float) * ny) != cudaSuccess) {
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: outputs");
        } else {
            cudaError_t e = c->y0 ? cudaMemcpy(dy[i], c->y0, sizeof(float) * ny, cudaMemcpyHostToDevice)
                                  : cudaMemset(dy[i], 0, sizeof(float) * ny);
            if (e != cudaSuccess)
                st = cera_fail(err, CERA_ERR_DEVICE, "cuda: outputs: %s", cudaGetErrorString(e));
        }
    }
    if (st == CERA_OK) {
        cu_mv_seg seg[3];
        for (int i = 0; i < c->n_segs; i++) {
            seg[i].w = &cw[i];
            seg[i].y = swiglu ? NULL : dy[0] + off[i];
            seg[i].bias = dbias ? dbias + off[i] : NULL;
        }
        cudaError_t e = cu_matvec_rows(m.s.st, seg, c->n_segs, &a, c->n_rows, sum_n, (cu_mv_epilogue)c->epi,
                                       c->scale, swiglu ? &h[0] : NULL);
        for (int r = 0; r < c->n_rows && e == cudaSuccess; r++) {
            const cu_act xr = act_row(&a, r), hr = swiglu ? act_row(&h[1], r) : h[1];
            for (int i = 0; i < c->n_segs; i++) seg[i].y = swiglu ? NULL : dy[1] + r * sum_n + off[i];
            e = cu_matvec(m.s.st, seg, c->n_segs, &xr, (cu_mv_epilogue)c->epi, c->scale, swiglu ? &hr : NULL);
        }
        for (int i = 0; i < 2 && e == cudaSuccess; i++) {
            e = cudaMemcpyAsync(y[i], swiglu ? h[i].f : dy[i], sizeof(float) * ny, cudaMemcpyDeviceToHost,
                                m.s.st);
            if (swiglu && e == cudaSuccess)
                e = cudaMemcpyAsync(hq[i], h[i].q, ny, cudaMemcpyDeviceToHost, m.s.st);
            if (swiglu && e == cudaSuccess)
                e = cudaMemcpyAsync(hd[i], h[i].d, sizeof(float) * ny / 32, cudaMemcpyDeviceToHost, m.s.st);
        }
        if (e == cudaSuccess) e = cudaStreamSynchronize(m.s.st);
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: matvec rows: %s", cudaGetErrorString(e));
    }
    for (int i = 0; i < 2; i++) {
        cudaFree(dy[i]);
        free_act(&h[i]);
    }
    cudaFree(dbias);
    free_act(&a);
    for (int i = 0; i < 3; i++) cu_free_weight(&cw[i]);
    mini_close(&m);
    return st;
}

cera_status cera_cuda_test_gemm(cera_type type, int64_t k, int64_t n, int64_t mrows, const void *w,
                                const float *x, float *y, cera_error *err) {
    mini m;
    cu_weight cw;
    cu_act a;
    float *dy = NULL;
    memset(&cw, 0, sizeof cw);
    memset(&a, 0, sizeof a);
    cera_status st = mini_open(&m, err);
    if (st == CERA_OK) st = upload_host(&m, type, k, n, w, &cw, err);
    if (st == CERA_OK) st = upload_act(&m, x, (int)mrows, k, &a, err);
    if (st == CERA_OK) {
        const size_t kp = (size_t)cw.k_pad;
        if (cudaMalloc((void **)&dy, sizeof(float) * (size_t)(n * mrows)) != cudaSuccess ||
            cudaMalloc(&m.s.half_act, 2 * kp * (size_t)mrows) != cudaSuccess ||
            cudaMalloc(&m.s.deq, 2 * kp * (size_t)n) != cudaSuccess)
            st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: gemm buffers");
    }
    if (st == CERA_OK) st = cu_gemm(&m.s, &cw, &a, (int)mrows, dy, n, err);
    if (st == CERA_OK) {
        cudaError_t e =
            cudaMemcpyAsync(y, dy, sizeof(float) * (size_t)(n * mrows), cudaMemcpyDeviceToHost, m.s.st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m.s.st);
        if (e != cudaSuccess) st = cera_fail(err, CERA_ERR_DEVICE, "cuda: gemm: %s", cudaGetErrorString(e));
    }
    cudaFree(dy);
    free_act(&a);
    cu_free_weight(&cw);
    mini_close(&m);
    return st;
}

cera_status cera_cuda_test_get_rows(cera_type type, int64_t k, int64_t n, const void *w, const int32_t *rows,
                                    int nr, float *out, cera_error *err) {
    mini m;
    cu_weight cw;
    int32_t *drows = NULL;
    float *dout = NULL;
    memset(&cw, 0, sizeof cw);
    cera_status st = mini_open(&m, err);
    if (st == CERA_OK) st = upload_host(&m, type, k, n, w, &cw, err);
    const int64_t kp = cw.k_pad;
    if (st == CERA_OK && (cudaMalloc((void **)&drows, sizeof(int32_t) * (size_t)nr) != cudaSuccess ||
                          cudaMalloc((void **)&dout, sizeof(float) * (size_t)(nr * kp)) != cudaSuccess))
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: get_rows buffers");
    if (st == CERA_OK) {
        cudaError_t e = cudaMemcpy(drows, rows, sizeof(int32_t) * (size_t)nr, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) e = cu_get_rows(m.s.st, &cw, drows, nr, dout, kp, 1.0f);
        if (e == cudaSuccess)
            e = cudaMemcpy2DAsync(out, sizeof(float) * (size_t)k, dout, sizeof(float) * (size_t)kp,
                                  sizeof(float) * (size_t)k, (size_t)nr, cudaMemcpyDeviceToHost, m.s.st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m.s.st);
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: get_rows: %s", cudaGetErrorString(e));
    }
    cudaFree(drows);
    cudaFree(dout);
    cu_free_weight(&cw);
    mini_close(&m);
    return st;
}

cera_status cera_cuda_test_attention(int n_head, int n_head_kv, int hd, cera_kv_type kv_type, int n_kv,
                                     const float *k, const float *v, int n_tok, const int32_t *pos,
                                     const float *q, float scale, int n_splits, int qt, int window,
                                     float *out, cera_error *err) {
    if (!cera_cuda_available()) return cera_fail(err, CERA_ERR_DEVICE, "cuda: no CUDA device found");
    if (n_head <= 0 || n_head_kv <= 0 || hd <= 0 || n_kv <= 0 || n_tok <= 0 || n_splits <= 0)
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: attention test shape");
    const int kt = cu_kv_type_of(kv_type);
    if (kt < 0) return cera_fail(err, CERA_ERR_UNSUPPORTED, "cuda: KV cache type %d", (int)kv_type);
    const int64_t kvd = (int64_t)n_head_kv * hd, nq = (int64_t)n_head * hd, row = nq + 2 * kvd;
    const int n_blocks = (n_kv + CU_KV_BLOCK - 1) / CU_KV_BLOCK;
    float *h_in = calloc((size_t)n_kv * (size_t)row, sizeof(float));
    int32_t *h_tab = malloc(sizeof(int32_t) * (size_t)(n_blocks + 2 * n_kv));
    if (!h_in || !h_tab) {
        free(h_in);
        free(h_tab);
        return cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: attention test");
    }
    // [q | k | v] rows for the store (q zero); blocks in reverse order; positions 0..n_kv-1
    for (int t = 0; t < n_kv; t++) {
        memcpy(h_in + (size_t)t * row + nq, k + (size_t)t * kvd, sizeof(float) * (size_t)kvd);
        memcpy(h_in + (size_t)t * row + nq + kvd, v + (size_t)t * kvd, sizeof(float) * (size_t)kvd);
    }
    int32_t *h_pos = h_tab + n_blocks, *h_tt = h_pos + n_kv;
    for (int b = 0; b < n_blocks; b++) h_tab[b] = n_blocks - 1 - b;
    for (int t = 0; t < n_kv; t++) h_pos[t] = t, h_tt[t] = 0;

    cudaStream_t st = NULL;
    float *d_in = NULL, *d_q = NULL, *d_qr = NULL, *d_out = NULL;
    int32_t *d_tab = NULL, *d_pos = NULL, *d_tt = NULL, *d_qpos = NULL;
    void *d_kv = NULL;
    cu_attn_scratch scr;
    memset(&scr, 0, sizeof scr);
    cera_status rs = CERA_OK;
    const size_t kv_bytes = (size_t)n_blocks * 2 * (size_t)cu_kv_section_bytes(kt, kvd);
    const size_t parts = (size_t)n_tok * (size_t)n_head * (size_t)n_splits;
    cudaError_t e = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
    struct {
        void **p;
        size_t bytes;
    } bufs[] = {
        {(void **)&d_in, sizeof(float) * (size_t)n_kv * (size_t)row},
        {(void **)&d_q, sizeof(float) * (size_t)n_tok * (size_t)nq},
        {(void **)&d_qr, sizeof(float) * (size_t)n_kv * (size_t)nq},
        {(void **)&d_out, sizeof(float) * (size_t)n_tok * (size_t)nq},
        {(void **)&d_tab, sizeof(int32_t) * (size_t)n_blocks},
        {(void **)&d_pos, sizeof(int32_t) * (size_t)n_kv},
        {(void **)&d_tt, sizeof(int32_t) * (size_t)n_kv},
        {(void **)&d_qpos, sizeof(int32_t) * (size_t)n_tok},
        {&d_kv, kv_bytes},
        {(void **)&scr.part_acc, sizeof(float) * parts * (size_t)hd},
        {(void **)&scr.part_ml, sizeof(float) * parts * 2},
        {(void **)&scr.counters, sizeof(int32_t) * (size_t)n_tok * (size_t)n_head},
    };
    // the stream is a non-blocking one: every copy and memset goes on it, ordered with the kernels
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0] && e == cudaSuccess; i++) {
        e = cudaMalloc(bufs[i].p, bufs[i].bytes);
        if (e == cudaSuccess) e = cudaMemsetAsync(*bufs[i].p, 0, bufs[i].bytes, st);
    }
    scr.max_splits = n_splits;
    const struct {
        void *dst;
        const void *src;
        size_t bytes;
    } up[] = {
        {d_in, h_in, sizeof(float) * (size_t)n_kv * (size_t)row},
        {d_tab, h_tab, sizeof(int32_t) * (size_t)n_blocks},
        {d_pos, h_pos, sizeof(int32_t) * (size_t)n_kv},
        {d_tt, h_tt, sizeof(int32_t) * (size_t)n_kv},
        {d_qpos, pos, sizeof(int32_t) * (size_t)n_tok},
        {d_q, q, sizeof(float) * (size_t)n_tok * (size_t)nq},
    };
    for (size_t i = 0; i < sizeof up / sizeof up[0] && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(up[i].dst, up[i].src, up[i].bytes, cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    cu_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.base = d_kv;
    kv.tables = d_tab;
    kv.tok_table = d_tt; // zeros: every token reads the one table
    kv.kv_dim = (int)kvd;
    kv.block_bytes = 2 * cu_kv_section_bytes(kt, kvd); // one layer's K and V
    kv.type = kt;
    cu_rope rope;
    memset(&rope, 0, sizeof rope); // no rotation
    rope.q_scale = 1.0f;
    if (e == cudaSuccess)
        e = cu_rope_store(st, d_in, d_in + nq, d_in + nq + kvd, row, n_kv, d_pos, n_head, n_head_kv, hd, NULL,
                          NULL, 1e-6f, &rope, d_qr, &kv);
    if (window > 0 && e == cudaSuccess) {
        // the blocks no query's window reaches are dropped, as the sliding group's
        int lo = pos[0];
        for (int i = 1; i < n_tok; i++) lo = pos[i] < lo ? pos[i] : lo;
        lo = lo - window + 1 > 0 ? lo - window + 1 : 0;
        for (int b = 0; b < lo / CU_KV_BLOCK; b++) h_tab[b] = -1;
        e = cudaMemcpyAsync(d_tab, h_tab, sizeof(int32_t) * (size_t)n_blocks, cudaMemcpyHostToDevice, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st); // h_tab is not pinned
    }
    kv.window = window;
    cu_act a;
    memset(&a, 0, sizeof a);
    a.f = d_out;
    a.k = nq;
    a.k_pad = nq;
    if (e == cudaSuccess)
        e = cu_attention(st, d_q, n_tok, d_qpos, n_head, n_head_kv, hd, &kv, scale, n_splits, qt, &scr, &a);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(out, d_out, sizeof(float) * (size_t)n_tok * (size_t)nq, cudaMemcpyDeviceToHost,
                            st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess)
        rs = cera_fail(err, CERA_ERR_DEVICE, "cuda: attention test: %s", cudaGetErrorString(e));
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(*bufs[i].p);
    if (st) cudaStreamDestroy(st);
    free(h_in);
    free(h_tab);
    return rs;
}

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

cera_status cera_cuda_measure_bandwidth(size_t bytes, double *copy_gbps, double *read_gbps, cera_error *err) {
    mini m;
    void *src = NULL, *dst = NULL;
    float *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cera_status st = mini_open(&m, err);
    enum { REPS = 9 };
    float tc[REPS], tr[REPS];
    if (st == CERA_OK && (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess ||
                          cudaMalloc((void **)&sink, sizeof(float)) != cudaSuccess))
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: bandwidth buffers of %zu bytes", bytes);
    if (st == CERA_OK) {
        cudaError_t e = cudaEventCreate(&e0);
        if (e == cudaSuccess) e = cudaEventCreate(&e1);
        if (e == cudaSuccess) e = cudaMemsetAsync(src, 0x5a, bytes, m.s.st); // not zeros
        for (int i = -1; i < REPS && e == cudaSuccess; i++) {                // i = -1: warm-up
            e = cudaEventRecord(e0, m.s.st);
            if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m.s.st);
            if (e == cudaSuccess) e = cudaEventRecord(e1, m.s.st);
            if (e == cudaSuccess) e = cudaEventSynchronize(e1);
            if (e == cudaSuccess && i >= 0) e = cudaEventElapsedTime(&tc[i], e0, e1);
            if (e == cudaSuccess) e = cudaEventRecord(e0, m.s.st);
            if (e == cudaSuccess) e = cu_read_kernel(m.s.st, src, (int64_t)bytes, sink);
            if (e == cudaSuccess) e = cudaEventRecord(e1, m.s.st);
            if (e == cudaSuccess) e = cudaEventSynchronize(e1);
            if (e == cudaSuccess && i >= 0) e = cudaEventElapsedTime(&tr[i], e0, e1);
        }
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: bandwidth: %s", cudaGetErrorString(e));
    }
    if (st == CERA_OK) {
        qsort(tc, REPS, sizeof(float), cmp_f);
        qsort(tr, REPS, sizeof(float), cmp_f);
        *copy_gbps = 2.0 * (double)bytes / (tc[REPS / 2] * 1e-3) / 1e9;
        *read_gbps = (double)bytes / (tr[REPS / 2] * 1e-3) / 1e9;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(src);
    cudaFree(dst);
    cudaFree(sink);
    mini_close(&m);
    return st;
}

cera_status cera_cuda_bench_matvec(cera_type type, int64_t k, int64_t n, int reps, double *gbps,
                                   cera_error *err) {
    double us = 0;
    return cera_cuda_bench_matvec_rows(type, k, n, 1, false, reps, &us, gbps, err);
}

cera_status cera_cuda_bench_matvec_rows(cera_type type, int64_t k, int64_t n, int n_rows, bool swiglu,
                                        int reps, double *us, double *gbps, cera_error *err) {
    mini m;
    cera_status st = mini_open(&m, err);
    if (st != CERA_OK) {
        mini_close(&m);
        return st;
    }
    // enough copies of the weight that the rotation never hits in the 60 MB L2
    int64_t data_bytes, scale_bytes, k_pad, row_bytes;
    cu_weight_bytes(type, k, n, &data_bytes, &scale_bytes, &k_pad, &row_bytes);
    const int64_t wbytes = data_bytes + scale_bytes;
    int copies = (int)((1ll << 30) / wbytes) + 1;
    if (copies > 64) copies = 64;
    cu_weight *ws = calloc((size_t)copies, sizeof(cu_weight));
    cu_act a, h;
    float *dy = NULL;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    memset(&a, 0, sizeof a);
    memset(&h, 0, sizeof h);
    m.s.prm.synthetic_weights = true;
    for (int i = 0; i < copies && st == CERA_OK; i++) {
        cera_weight mw;
        memset(&mw, 0, sizeof mw);
        mw.type = type;
        mw.k = k;
        mw.n = n;
        m.s.prm.synthetic_seed = 7 + (uint64_t)i;
        st = cu_upload_weight(&m.s, &mw, "bench weight", &ws[i], NULL, err);
    }
    if (st == CERA_OK) st = upload_act(&m, NULL, n_rows, k, &a, err);
    if (st == CERA_OK && swiglu && alloc_act(&h, n_rows, n, true) != CERA_OK)
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: h");
    if (st == CERA_OK && cudaMalloc((void **)&dy, sizeof(float) * (size_t)n * (size_t)n_rows) != cudaSuccess)
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: output");
    if (st == CERA_OK) {
        cudaError_t e = cudaStreamSynchronize(m.s.st);
        int dev = 0, cc = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
        if (e == cudaSuccess) e = cudaStreamBeginCapture(m.s.st, cudaStreamCaptureModeThreadLocal);
        cu_set_pdl(cc >= 9); // back to back as in a decode step
        for (int i = 0; i < reps && e == cudaSuccess; i++) {
            // SwiGLU: gate and up are two different copies, as two weights of a layer
            cu_mv_seg seg[2] = {{&ws[(2 * i) % copies], dy, NULL}, {&ws[(2 * i + 1) % copies], dy, NULL}};
            if (!swiglu) seg[0].w = &ws[i % copies];
            e = cu_matvec_rows(m.s.st, seg, swiglu ? 2 : 1, &a, n_rows, n,
                               swiglu ? CU_MV_SWIGLU : CU_MV_STORE, 1.0f, swiglu ? &h : NULL);
        }
        cu_set_pdl(false);
        cudaError_t e2 = cudaStreamEndCapture(m.s.st, &g);
        if (e == cudaSuccess) e = e2;
        if (e == cudaSuccess) e = cudaGraphInstantiate(&ge, g, 0);
        if (e == cudaSuccess) e = cudaEventCreate(&e0);
        if (e == cudaSuccess) e = cudaEventCreate(&e1);
        float t[5];
        for (int i = -1; i < 5 && e == cudaSuccess; i++) {
            e = cudaEventRecord(e0, m.s.st);
            if (e == cudaSuccess) e = cudaGraphLaunch(ge, m.s.st);
            if (e == cudaSuccess) e = cudaEventRecord(e1, m.s.st);
            if (e == cudaSuccess) e = cudaEventSynchronize(e1);
            if (e == cudaSuccess && i >= 0) e = cudaEventElapsedTime(&t[i], e0, e1);
        }
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: matvec bench: %s", cudaGetErrorString(e));
        else {
            qsort(t, 5, sizeof(float), cmp_f);
            *us = t[2] * 1e3 / reps;
            *gbps = (double)wbytes * (swiglu ? 2 : 1) / (*us * 1e-6) / 1e9;
        }
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(dy);
    free_act(&a);
    free_act(&h);
    for (int i = 0; i < copies && ws; i++) cu_free_weight(&ws[i]);
    free(ws);
    mini_close(&m);
    return st;
}

cera_status cera_cuda_test_mma(cera_type type, int64_t k, int64_t n, int n_rows, const void *w,
                               const float *x, bool add, float scale, const float *y0, float *y_mma,
                               float *y_mv, cera_error *err) {
    if (n_rows < 1 || !cu_mma_supported(type))
        return cera_fail(err, CERA_ERR_INVALID_ARG, "cuda: mma case (%d rows, type %d)", n_rows, (int)type);
    mini m;
    cu_weight cw;
    cu_act a;
    float *dy = NULL, *work = NULL;
    memset(&cw, 0, sizeof cw);
    memset(&a, 0, sizeof a);
    const size_t ny = (size_t)n_rows * (size_t)n;
    cera_status st = mini_open(&m, err);
    if (st == CERA_OK) st = upload_host(&m, type, k, n, w, &cw, err);
    if (st == CERA_OK) st = upload_act(&m, x, n_rows, k, &a, err);
    const int64_t wb = st == CERA_OK ? cu_mma_work_bytes(&cw, n_rows) : 0;
    if (st == CERA_OK && (cudaMalloc((void **)&dy, sizeof(float) * ny) != cudaSuccess ||
                          (wb > 0 && cudaMalloc((void **)&work, (size_t)wb) != cudaSuccess)))
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: mma output");
    if (st == CERA_OK) {
        cudaError_t e = add ? cudaMemcpy(dy, y0, sizeof(float) * ny, cudaMemcpyHostToDevice)
                            : cudaMemset(dy, 0xff, sizeof(float) * ny); // NaN where nothing is written
        if (e == cudaSuccess) e = cudaDeviceSynchronize(); // both legacy-stream work, as in upload_act
        if (e == cudaSuccess) e = cu_mma_q8(m.s.st, &cw, &a, n_rows, dy, n, add, scale, work, wb);
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(y_mma, dy, sizeof(float) * ny, cudaMemcpyDeviceToHost, m.s.st);
        // the one-row kernel per activation row: plain dot products
        for (int r = 0; r < n_rows && e == cudaSuccess; r++) {
            const cu_act ar = act_row(&a, r);
            cu_mv_seg seg = {&cw, dy + (size_t)r * (size_t)n, NULL};
            e = cu_matvec(m.s.st, &seg, 1, &ar, CU_MV_STORE, 1.0f, NULL);
        }
        if (e == cudaSuccess)
            e = cudaMemcpyAsync(y_mv, dy, sizeof(float) * ny, cudaMemcpyDeviceToHost, m.s.st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m.s.st);
        if (e != cudaSuccess) st = cera_fail(err, CERA_ERR_DEVICE, "cuda: mma: %s", cudaGetErrorString(e));
    }
    cudaFree(dy);
    cudaFree(work);
    free_act(&a);
    cu_free_weight(&cw);
    mini_close(&m);
    return st;
}

cera_status cera_cuda_bench_mma(cera_type type, int64_t k, int64_t n, int n_rows, int reps, double *us,
                                double *gbps, cera_error *err) {
    if (n_rows == 1) return cera_cuda_bench_matvec_rows(type, k, n, 1, false, reps, us, gbps, err);
    mini m;
    cera_status st = mini_open(&m, err);
    if (st != CERA_OK) {
        mini_close(&m);
        return st;
    }
    // enough copies of the weight that the rotation never hits in the 60 MB L2
    int64_t data_bytes, scale_bytes, k_pad, row_bytes;
    cu_weight_bytes(type, k, n, &data_bytes, &scale_bytes, &k_pad, &row_bytes);
    const int64_t wbytes = data_bytes + scale_bytes;
    int copies = (int)((1ll << 30) / wbytes) + 1;
    if (copies > 64) copies = 64;
    cu_weight *ws = calloc((size_t)copies, sizeof(cu_weight));
    cu_act a;
    float *dy = NULL, *work = NULL;
    int64_t wb = 0;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    memset(&a, 0, sizeof a);
    m.s.prm.synthetic_weights = true;
    for (int i = 0; i < copies && st == CERA_OK; i++) {
        cera_weight mw;
        memset(&mw, 0, sizeof mw);
        mw.type = type;
        mw.k = k;
        mw.n = n;
        m.s.prm.synthetic_seed = 7 + (uint64_t)i;
        st = cu_upload_weight(&m.s, &mw, "bench weight", &ws[i], NULL, err);
    }
    if (st == CERA_OK) st = upload_act(&m, NULL, n_rows, k, &a, err);
    if (st == CERA_OK) wb = cu_mma_work_bytes(&ws[0], n_rows);
    if (st == CERA_OK &&
        (cudaMalloc((void **)&dy, sizeof(float) * (size_t)n * (size_t)n_rows) != cudaSuccess ||
         (wb > 0 && cudaMalloc((void **)&work, (size_t)wb) != cudaSuccess)))
        st = cera_fail(err, CERA_ERR_NO_MEMORY, "cuda: output");
    if (st == CERA_OK) {
        cudaError_t e = cudaStreamSynchronize(m.s.st);
        // one launch outside the graph (sets the kernels' shared-memory limits)
        if (e == cudaSuccess) e = cu_mma_q8(m.s.st, &ws[0], &a, n_rows, dy, n, false, 1.0f, work, wb);
        if (e == cudaSuccess) e = cudaStreamSynchronize(m.s.st);
        int dev = 0, cc = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev);
        if (e == cudaSuccess) e = cudaStreamBeginCapture(m.s.st, cudaStreamCaptureModeThreadLocal);
        cu_set_pdl(cc >= 9); // back to back as in a decode step
        for (int i = 0; i < reps && e == cudaSuccess; i++)
            e = cu_mma_q8(m.s.st, &ws[i % copies], &a, n_rows, dy, n, false, 1.0f, work, wb);
        cu_set_pdl(false);
        cudaError_t e2 = cudaStreamEndCapture(m.s.st, &g);
        if (e == cudaSuccess) e = e2;
        if (e == cudaSuccess) e = cudaGraphInstantiate(&ge, g, 0);
        if (e == cudaSuccess) e = cudaEventCreate(&e0);
        if (e == cudaSuccess) e = cudaEventCreate(&e1);
        float t[5];
        for (int i = -1; i < 5 && e == cudaSuccess; i++) {
            e = cudaEventRecord(e0, m.s.st);
            if (e == cudaSuccess) e = cudaGraphLaunch(ge, m.s.st);
            if (e == cudaSuccess) e = cudaEventRecord(e1, m.s.st);
            if (e == cudaSuccess) e = cudaEventSynchronize(e1);
            if (e == cudaSuccess && i >= 0) e = cudaEventElapsedTime(&t[i], e0, e1);
        }
        if (e != cudaSuccess)
            st = cera_fail(err, CERA_ERR_DEVICE, "cuda: mma bench: %s", cudaGetErrorString(e));
        else {
            qsort(t, 5, sizeof(float), cmp_f);
            *us = t[2] * 1e3 / reps;
            *gbps = (double)wbytes * (double)((n_rows + 63) / 64) / (*us * 1e-6) / 1e9;
        }
    }
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(dy);
    cudaFree(work);
    free_act(&a);
    for (int i = 0; i < copies && ws; i++) cu_free_weight(&ws[i]);
    free(ws);
    mini_close(&m);
    return st;
}
