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
