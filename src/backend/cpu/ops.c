/* ops.c — RMS norm, RoPE, SwiGLU, GEGLU and adds for the CPU backend (see ops.h). */
#include "backend/cpu/ops.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "core/fp16.h"

void cera_rms_norm_f32(float *y, const float *x, const float *w, int n, float eps) {
    /* llama.cpp sums the squares in double, takes the mean in double and rounds it
     * to float before adding eps; the weight multiplies after the scale. */
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

/* YaRN's correction range: the dimensions whose wavelength spans n_ctx_orig / beta. */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void cera_rope_init(cera_rope *r, const cera_hparams *hp, const float *freq_factors) {
    r->n_rot = hp->n_rot;
    r->style = hp->rope_style;
    r->theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    r->freq_scale = hp->rope_freq_scale;
    r->ext_factor = hp->rope_ext_factor;
    r->attn_factor = hp->rope_attn_factor;
    const float start =
        floorf(yarn_corr_dim(hp->n_rot, hp->rope_n_ctx_orig, hp->rope_beta_fast, hp->rope_base));
    const float end = ceilf(yarn_corr_dim(hp->n_rot, hp->rope_n_ctx_orig, hp->rope_beta_slow, hp->rope_base));
    r->corr_dims[0] = start > 0 ? start : 0;
    r->corr_dims[1] = end < (float)(hp->n_rot - 1) ? end : (float)(hp->n_rot - 1);
    r->freq_factors = freq_factors;
}

void cera_rope_cache(const cera_rope *r, int32_t pos, float *cache) {
    /* theta is advanced by repeated multiplication, as llama.cpp does, so the angles
     * round the same way. */
    float theta = (float)pos;
    for (int i0 = 0; i0 < r->n_rot; i0 += 2) {
        const float ff = r->freq_factors ? r->freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        const float theta_interp = r->freq_scale * theta_extrap;
        float th = theta_interp;
        float mscale = r->attn_factor;
        if (r->ext_factor != 0.0f) {
            const float y =
                (float)(i0 / 2 - r->corr_dims[0]) / fmaxf(0.001f, r->corr_dims[1] - r->corr_dims[0]);
            const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            const float mix = ramp * r->ext_factor;
            /* contracted as llama.cpp's build does */
            th = fmaf(theta_interp, 1 - mix, theta_extrap * mix);
            mscale *= fmaf(0.1f, logf(1.0f / r->freq_scale), 1.0f);
        }
        cache[i0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= r->theta_scale;
    }
}

void cera_rope_apply(const cera_rope *r, const float *cache, float *x, int n_heads, int head_dim) {
    const int n = r->n_rot;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * head_dim;
        if (r->style == CERA_ROPE_NORM) {
            for (int i0 = 0; i0 < n; i0 += 2) {
                const float c = cache[i0], s = cache[i0 + 1];
                const float x0 = v[i0], x1 = v[i0 + 1];
                v[i0] = fmaf(x0, c, -(x1 * s)); /* contracted as llama.cpp's build does */
                v[i0 + 1] = fmaf(x0, s, x1 * c);
            }
        } else {
            /* llama.cpp's compiler contracts the rotation into fused multiply-adds;
             * fmaf reproduces its roundings */
            const int half = n / 2;
            for (int i0 = 0; i0 < n; i0 += 2) {
                const int ic = i0 / 2;
                const float c = cache[i0], s = cache[i0 + 1];
                const float x0 = v[ic], x1 = v[ic + half];
                v[ic] = fmaf(x0, c, -(x1 * s));
                v[ic + half] = fmaf(x0, s, x1 * c);
            }
        }
    }
}

/* exp(x) as llama.cpp's AVX-512 build computes it inside SiLU (ggml_v_expf, after ARM's
 * optimized-routines expf): a range reduction by ln 2 and a degree-5 polynomial, about
 * 1.5 ulp from expf. Written out in scalar fused multiply-adds so that SwiGLU rounds as
 * the goldens do (activation quantizers downstream turn 1-ulp differences into flips).
 * The final scaling by 2^n is a multiplication when 2^n is a normal float (the same
 * correctly rounded result as the instruction's scalef), ldexpf beyond. */
static inline __attribute__((always_inline)) float exp_poly(float x) {
    if (isnan(x)) return x; /* n below would be NaN, and converting it to int undefined */
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j =
        fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
             fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 126.0f) return ldexpf(j, (int)n);
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return j * two_n;
}

float cera_expf_ggml(float x) { return exp_poly(x); }

/* llama.cpp's AVX-512 SwiGLU takes 16 elements at a time with the polynomial exp, and the
 * tail with libm's expf. */
static inline __attribute__((always_inline)) void swiglu_body(float *y, const float *g, const float *u,
                                                              int n) {
    const int nv = n & ~15;
    for (int i = 0; i < nv; i++) {
        const float x = g[i];
        y[i] = x / (1.0f + exp_poly(0.0f - x)) * u[i];
    }
    for (int i = nv; i < n; i++) {
        const float x = g[i];
        y[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

static void swiglu_portable(float *y, const float *g, const float *u, int n) { swiglu_body(y, g, u, n); }

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with the fused multiply-adds as instructions (identical roundings). */
__attribute__((target("avx2,fma"))) static void swiglu_fma(float *y, const float *g, const float *u, int n) {
    swiglu_body(y, g, u, n);
}
#endif

void cera_swiglu_f32(float *y, const float *g, const float *u, int n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (cera_cpu_tier_simd()) {
        swiglu_fma(y, g, u, n);
        return;
    }
#endif
    swiglu_portable(y, g, u, n);
}

/* gelu(f16 x) rounded to F16, for every F16 bit pattern (llama.cpp's table) */
static cera_f16 gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_build(void) {
    for (int i = 0; i < 1 << 16; i++) {
        const float x = cera_f16_to_f32((cera_f16)i);
        /* 0.5 x (1 + tanh(√(2/π) x (1 + 0.044715 x²))), the inner 1 + a·x·x contracted to one
         * fused multiply-add as llama.cpp's build compiles it */
        const float inner = fmaf(0.044715f * x, x, 1.0f);
        gelu_table[i] =
            cera_f32_to_f16(0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * inner)));
    }
}

void cera_gelu_init(void) { pthread_once(&gelu_once, gelu_build); }

void cera_geglu_f32(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        const float x = g[i];
        if (x <= -10.0f)
            y[i] = 0.0f;
        else if (x >= 10.0f)
            y[i] = x * u[i];
        else
            y[i] = cera_f16_to_f32(gelu_table[cera_f32_to_f16(x)]) * u[i];
    }
}

void cera_add_scaled_f32(float *y, const float *x, float s, int n) {
    if (s == 1.0f)
        for (int i = 0; i < n; i++) y[i] += x[i];
    else
        for (int i = 0; i < n; i++) y[i] += x[i] * s;
}
