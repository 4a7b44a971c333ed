/*
 * weights.cu — putting weights into their device layout: sizes, the one-time import from
 * GGUF rows (splitting Q4_0/Q8_0 into quant and scale arrays, padding float rows), and
 * random valid fills for benchmarks that need 7B-sized weights without a file.
 */
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/quant.cuh"

static bool pdl_on = false;
extern "C" void cu_set_pdl(bool on) { pdl_on = on; }
extern "C" bool cu_pdl_on(void) { return pdl_on; }

extern "C" bool cu_type_uses_q8_act(cera_type t) {
    return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0 || t == CERA_TYPE_Q4_K || t == CERA_TYPE_Q6_K;
}

extern "C" bool cu_type_split(cera_type t) {
    return t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0 || t == CERA_TYPE_Q6_K;
}

extern "C" bool cu_type_supported(cera_type t) {
    switch (t) {
#define CU_CASE(T) case T:
        CU_TYPE_LIST(CU_CASE)
#undef CU_CASE
        return true;
    default: return false;
    }
}

static bool is_float_type(cera_type t) {
    return t == CERA_TYPE_F32 || t == CERA_TYPE_F16 || t == CERA_TYPE_BF16;
}

extern "C" void cu_weight_bytes(cera_type t, int64_t k, int64_t n, int64_t *data_bytes, int64_t *scale_bytes,
                                int64_t *k_pad, int64_t *row_bytes) {
    const cera_type_traits *tt = cera_type_get(t);
    *scale_bytes = 0;
    if (is_float_type(t)) {
        *k_pad = (k + 31) / 32 * 32;
        *row_bytes = *k_pad * (int64_t)tt->type_size;
    } else if (t == CERA_TYPE_Q4_0 || t == CERA_TYPE_Q8_0) {
        *k_pad = k;
        *row_bytes = k / 32 * (t == CERA_TYPE_Q4_0 ? 16 : 32);
        *scale_bytes = n * (k / 32) * 2;
    } else if (t == CERA_TYPE_Q6_K) {
        *k_pad = k;
        *row_bytes = k / 256 * 192;
        *scale_bytes = n * (k / 256) * 18;
    } else {
        *k_pad = k;
        *row_bytes = k / tt->block_size * (int64_t)tt->type_size;
    }
    *data_bytes = *row_bytes * n;
}

extern "C" cu_weight cu_weight_rows(const cu_weight *w, int64_t row0, int64_t n) {
    cu_weight v = *w;
    v.n = n;
    v.data = static_cast<uint8_t *>(w->data) + row0 * w->row_bytes;
    if (w->split && w->scales) {
        // F16 scales [n, k/32] (Q4_0, Q8_0) or 18-byte records [n, k/256] (Q6_K)
        const int64_t sb = w->type == CERA_TYPE_Q6_K ? w->k / 256 * 18 : w->k / 32 * 2;
        v.scales = static_cast<uint8_t *>(w->scales) + row0 * sb;
    }
    return v;
}

/* One thread per Q6_K block: its first 192 bytes (ql | qh) to a, the last 18 (scales | d) to b. */
__global__ void k_split_blocks(const uint8_t *src, uint8_t *a, uint8_t *b, int64_t blocks) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= blocks) return;
    const uint8_t *s = src + i * 210;
    for (int j = 0; j < 192; j++) a[i * 192 + j] = s[j];
    for (int j = 0; j < 18; j++) b[i * 18 + j] = s[192 + j];
}

/* One thread per 32-element unit: GGUF block -> split quants + scale. */
__global__ void k_split_q(const uint8_t *src, uint8_t *qs, __half *d, int64_t units, int block_bytes) {
    const int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (u >= units) return;
    const uint8_t *b = src + u * block_bytes;
    const int nq = block_bytes - 2;
    for (int i = 0; i < nq; i++) qs[u * nq + i] = b[2 + i];
    d[u] = __ushort_as_half((unsigned short)(b[0] | (b[1] << 8)));
}

/* One thread per row element of the padded float row. */
__global__ void k_pad_rows(const uint8_t *src, uint8_t *dst, int64_t n, int64_t k, int64_t k_pad, int esize) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n * k_pad) return;
    const int64_t r = i / k_pad, c = i % k_pad;
    for (int b = 0; b < esize; b++) dst[i * esize + b] = c < k ? src[(r * k + c) * esize + b] : 0;
}

extern "C" cudaError_t cu_weight_import(cudaStream_t st, const cu_weight *w, const void *src) {
    const uint8_t *s = static_cast<const uint8_t *>(src);
    if (w->split && w->type == CERA_TYPE_Q6_K) {
        const int64_t blocks = w->n * (w->k / 256);
        k_split_blocks<<<(unsigned)((blocks + 255) / 256), 256, 0, st>>>(
            s, static_cast<uint8_t *>(w->data), static_cast<uint8_t *>(w->scales), blocks);
    } else if (w->split) {
        const int64_t units = w->n * (w->k / 32);
        const int bb = w->type == CERA_TYPE_Q4_0 ? 18 : 34;
        k_split_q<<<(unsigned)((units + 255) / 256), 256, 0, st>>>(
            s, static_cast<uint8_t *>(w->data), static_cast<__half *>(w->scales), units, bb);
    } else if (is_float_type(w->type) && w->k_pad != w->k) {
        const int esize = (int)cera_type_get(w->type)->type_size;
        const int64_t total = w->n * w->k_pad;
        k_pad_rows<<<(unsigned)((total + 255) / 256), 256, 0, st>>>(s, static_cast<uint8_t *>(w->data), w->n,
                                                                    w->k, w->k_pad, esize);
    } else {
        return cudaMemcpyAsync(w->data, src, (size_t)(w->row_bytes * w->n), cudaMemcpyDeviceToDevice, st);
    }
    return cudaGetLastError();
}

static __device__ __forceinline__ uint64_t cu_hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* Random bytes everywhere, then small positive F16 scales where the type keeps them. */
__global__ void k_fill_random(uint8_t *p, int64_t n_words, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_words;
         i += (int64_t)gridDim.x * blockDim.x)
        reinterpret_cast<uint32_t *>(p)[i] = (uint32_t)cu_hash(seed ^ (uint64_t)i);
}

/* Overwrites the F16 fields of every block (offsets off0/off1; -1 for none) with a scale
 * in [0.0005, 0.001): random blocks then give activations of sane size. */
__global__ void k_fix_scales(uint8_t *p, int64_t n_blocks, int block_bytes, int off0, int off1,
                             uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n_blocks;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float r = (cu_hash(seed + (uint64_t)i) & 0xffff) / 65536.0f;
        const unsigned short h = __half_as_ushort(__float2half(0.0005f + 0.0005f * r));
        uint8_t *b = p + i * block_bytes;
        if (off0 >= 0) b[off0] = (uint8_t)h, b[off0 + 1] = (uint8_t)(h >> 8);
        if (off1 >= 0) b[off1] = (uint8_t)h, b[off1 + 1] = (uint8_t)(h >> 8);
    }
}

/* Float weights: uniform in [-0.035, 0.035) (about N(0, 0.02)'s spread). */
__global__ void k_fill_float(uint8_t *p, int64_t n, int esize, bool bf16, uint64_t seed) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const float v = ((cu_hash(seed ^ (uint64_t)i) & 0xffffff) / 16777216.0f - 0.5f) * 0.07f;
        if (esize == 4)
            reinterpret_cast<float *>(p)[i] = v;
        else if (bf16)
            reinterpret_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16(v);
        else
            reinterpret_cast<__half *>(p)[i] = __float2half(v);
    }
}

__global__ void k_fill_f32(float *p, int64_t n, float v) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] = v;
}

extern "C" cudaError_t cu_fill_f32(cudaStream_t st, float *p, int64_t n, float v) {
    k_fill_f32<<<1024, 256, 0, st>>>(p, n, v);
    return cudaGetLastError();
}

extern "C" cudaError_t cu_weight_fill_random(cudaStream_t st, const cu_weight *w, uint64_t seed) {
    uint8_t *p = static_cast<uint8_t *>(w->data);
    const int64_t bytes = w->row_bytes * w->n;
    if (is_float_type(w->type)) {
        const int esize = (int)cera_type_get(w->type)->type_size;
        k_fill_float<<<2048, 256, 0, st>>>(p, bytes / esize, esize, w->type == CERA_TYPE_BF16, seed);
        return cudaGetLastError();
    }
    k_fill_random<<<2048, 256, 0, st>>>(p, bytes / 4, seed);
    if (w->split && w->type == CERA_TYPE_Q6_K) {
        // aux records: 16 int8 scales (random is fine) then d
        k_fill_random<<<2048, 256, 0, st>>>(static_cast<uint8_t *>(w->scales), w->n * (w->k / 256) * 18 / 4,
                                            seed + 2);
        k_fix_scales<<<2048, 256, 0, st>>>(static_cast<uint8_t *>(w->scales), w->n * (w->k / 256), 18, 16, -1,
                                           seed + 1);
        return cudaGetLastError();
    }
    if (w->split) {
        // scales live in their own array: treat it as 2-byte "blocks"
        k_fix_scales<<<2048, 256, 0, st>>>(static_cast<uint8_t *>(w->scales), w->n * (w->k / 32), 2, 0, -1,
                                           seed + 1);
        return cudaGetLastError();
    }
    const cera_type_traits *tt = cera_type_get(w->type);
    int off0 = -1, off1 = -1;
    switch (w->type) {
    case CERA_TYPE_Q4_1:
    case CERA_TYPE_Q5_1:
    case CERA_TYPE_Q4_K:
    case CERA_TYPE_Q5_K: off0 = 0, off1 = 2; break;
    case CERA_TYPE_Q5_0:
    case CERA_TYPE_IQ4_NL:
    case CERA_TYPE_IQ4_XS: off0 = 0; break;
    case CERA_TYPE_Q2_K: off0 = 80, off1 = 82; break;
    case CERA_TYPE_Q3_K: off0 = 108; break;
    case CERA_TYPE_Q6_K: off0 = 208; break;
    default: break;
    }
    const int64_t n_blocks = bytes / (int64_t)tt->type_size;
    k_fix_scales<<<2048, 256, 0, st>>>(p, n_blocks, (int)tt->type_size, off0, off1, seed + 1);
    return cudaGetLastError();
}

/* Streams `bytes` with 16-byte loads and folds them into one float (so nothing is elided). */
__global__ void k_read(const uint4 *p, int64_t n, float *sink) {
    uint32_t acc = 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = (float)acc;
}

extern "C" cudaError_t cu_read_kernel(cudaStream_t st, const void *src, int64_t bytes, float *sink) {
    int sms = 132;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    k_read<<<sms * 8, 256, 0, st>>>(static_cast<const uint4 *>(src), bytes / 16, sink);
    return cudaGetLastError();
}
