/* kv_rows.c — K/V rows into and out of the cache in every KV type, and the rotation (see kv_rows.h). */
#include "backend/cpu/kv_rows.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "core/fp16.h"

void cera_cpu_kv_store(cera_kv_type t, const float *src, void *dst, int n) {
    switch (t) {
    case CERA_KV_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case CERA_KV_F16: {
        cera_f16 *d = dst;
        for (int i = 0; i < n; i++) d[i] = cera_f32_to_f16(src[i]);
        return;
    }
    case CERA_KV_BF16: /* the activation quantizers of BF16 and Q8_0 weights are ggml's from_float */
    case CERA_KV_Q8_0: cera_cpu_ops(cera_kv_tensor_type(t))->quantize_act(src, dst, n); return;
    default: cera_type_get(cera_kv_tensor_type(t))->from_float_ref(src, dst, n); return;
    }
}

void cera_cpu_kv_load(cera_kv_type t, const void *src, float *dst, int n) {
    if (t == CERA_KV_F32)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else
        cera_type_get(cera_kv_tensor_type(t))->to_float(src, dst, n);
}

void cera_fwht_f32(float *x, int len, int piece) {
    const float scale = 1.0f / sqrtf((float)piece);
    for (int i = 0; i < len; i++) x[i] *= scale;
    for (float *p = x; p < x + len; p += piece)
        for (int w = 1; w < piece; w <<= 1)
            for (int i = 0; i < piece; i += 2 * w)
                for (int j = i; j < i + w; j++) {
                    const float u = p[j], v = p[j + w];
                    p[j] = u + v;
                    p[j + w] = u - v;
                }
}
