/*
 * gemm.c — the prefill's matrix products through cuBLAS.
 *
 * F32 weights multiply f32 activations (SGEMM, exact FP32: tiny models only); F16 and BF16
 * weights are used as they are against activations converted to their type; every
 * quantized type is first dequantized to F16 rows (one pass over the weight, written to a
 * scratch the size of the largest weight), then the F16 GEMM runs on the tensor cores
 * with f32 accumulation. A prompt of m tokens reads each weight once.
 *
 * cuBLAS is column-major: the row-major weight [n, k_pad] is a column-major k_pad x n
 * matrix, so Y^T (n x m, column-major = Y row-major [m, n]) = W^T-op(A) · X.
 *
 * Routed experts (cu_gemm_experts): a prompt chunk's rows grouped by expert meet the stacked
 * expert tensor in one grouped GEMM (one problem per chosen expert), the tensor dequantized
 * once for all of them; where cuBLAS does not take the grouped call, one GEMM per expert.
 */
#include "backend/cuda/cuda_state.h"

cera_status cu_gemm(cera_cuda_state *s, const cu_weight *w, const cu_act *a, int m, float *y, int64_t ldy,
                    cera_error *err) {
    if (w->k_pad != a->k_pad)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: gemm with k %lld against activation of %lld",
                         (long long)w->k_pad, (long long)a->k_pad);
    const float one = 1.0f, zero = 0.0f;
    const int n = (int)w->n, k = (int)w->k_pad;
    if (w->type == CERA_TYPE_F32) {
        CUBLAS_TRY(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, w->data, CUDA_R_32F, k,
                                a->f, CUDA_R_32F, k, &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
        return CERA_OK;
    }
    const bool bf16 = w->type == CERA_TYPE_BF16;
    CU_TRY(cu_convert_rows(s->st, a->f, a->k_pad, m, a->k, a->k_pad, s->half_act, bf16));
    const void *wm = w->data;
    if (w->type != CERA_TYPE_F16 && !bf16) {
        CU_TRY(cu_dequant_f16(s->st, w, s->deq));
        wm = s->deq;
    }
    const cudaDataType_t dt = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    CUBLAS_TRY(cublasGemmEx(s->blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, wm, dt, k, s->half_act, dt, k,
                            &zero, y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return CERA_OK;
}

cera_status cu_gemm_experts(cera_cuda_state *s, const cu_weight *w, int64_t rows, const int32_t *start,
                            int ne, const cu_act *a, float *y, int64_t ldy, cera_error *err) {
    if (w->k_pad != a->k_pad)
        return cera_fail(err, CERA_ERR_INTERNAL, "cuda: expert gemm with k %lld against activation of %lld",
                         (long long)w->k_pad, (long long)a->k_pad);
    if (w->type == CERA_TYPE_F32 || s->moe_no_grouped) { /* SGEMM (tiny models), or no grouped call */
        for (int e = 0; e < ne; e++) {
            const int m = start[e + 1] - start[e];
            if (!m) continue;
            const cu_weight we = cu_weight_rows(w, e * rows, rows);
            cu_act ae = *a;
            ae.f += (size_t)start[e] * (size_t)a->k_pad;
            CERA_TRY(cu_gemm(s, &we, &ae, m, y + (size_t)start[e] * (size_t)ldy, ldy, err));
        }
        return CERA_OK;
    }
    const bool bf16 = w->type == CERA_TYPE_BF16;
    const int k = (int)w->k_pad, n_rows = start[ne];
    CU_TRY(cu_convert_rows(s->st, a->f, a->k_pad, n_rows, a->k, a->k_pad, s->moe_half, bf16));
    const uint8_t *wm = w->data;
    if (w->type != CERA_TYPE_F16 && !bf16) {
        CU_TRY(cu_dequant_f16(s->st, w, s->deq));
        wm = s->deq;
    }
    // one problem per chosen expert: its rows of W (rows x k) against its rows of the chunk
    const void **pa = s->h_moe_ptr, **pb = pa + ne;
    void **pc = (void **)(pb + ne);
    int *mm = s->h_moe_dims, *nn = mm + ne, *kk = nn + ne, *ld = kk + ne, *lc = ld + ne, *gs = lc + ne;
    cublasOperation_t *ta = s->h_moe_ops, *tb = ta + ne;
    float *alpha = s->h_moe_ab, *beta = alpha + ne;
    int g = 0;
    for (int e = 0; e < ne; e++) {
        const int m = start[e + 1] - start[e];
        if (!m) continue;
        pa[g] = wm + (size_t)e * (size_t)rows * (size_t)k * 2;
        pb[g] = (const uint8_t *)s->moe_half + (size_t)start[e] * (size_t)k * 2;
        pc[g] = y + (size_t)start[e] * (size_t)ldy;
        ta[g] = CUBLAS_OP_T, tb[g] = CUBLAS_OP_N;
        mm[g] = (int)rows, nn[g] = m, kk[g] = k, ld[g] = k, lc[g] = (int)ldy, gs[g] = 1;
        alpha[g] = 1.0f, beta[g] = 0.0f;
        g++;
    }
    if (!g) return CERA_OK;
    void **dp = s->moe_ptr;
    CU_TRY(cudaMemcpyAsync(dp, s->h_moe_ptr, sizeof(void *) * 3 * (size_t)ne, cudaMemcpyHostToDevice, s->st));
    const cudaDataType_t dt = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const cublasStatus_t bs = cublasGemmGroupedBatchedEx(
        s->blas, ta, tb, mm, nn, kk, alpha, (const void *const *)dp, dt, ld, (const void *const *)(dp + ne),
        dt, ld, beta, dp + 2 * ne, CUDA_R_32F, lc, g, gs, CUBLAS_COMPUTE_32F);
    if (bs == CUBLAS_STATUS_NOT_SUPPORTED) { /* this cuBLAS or GPU: one GEMM per expert from now on */
        s->moe_no_grouped = true;
        return cu_gemm_experts(s, w, rows, start, ne, a, y, ldy, err);
    }
    if (bs != CUBLAS_STATUS_SUCCESS)
        return cera_fail(err, CERA_ERR_DEVICE, "cublas: grouped expert GEMM failed: status %d", (int)bs);
    return CERA_OK;
}
