/*
 * kernels.c — picks the CPU kernel tier at run time and serves the per-type tables.
 *
 * Tiers, lowest first: scalar, then avx2 < avx512 < amx on x86-64, neon < i8mm on aarch64
 * and simd128 on WebAssembly. A tier is available when CPUID/XGETBV (x86) or HWCAP (arm) say
 * the CPU and the OS support its instructions; AMX additionally needs the kernel to grant this
 * process the tile-data state (arch_prctl ARCH_REQ_XCOMP_PERM), which we ask for once.
 * WebAssembly has no run-time detection: simd128 is there when the build compiled it in
 * (CERA_WASM_SIMD128, set by wasm/CMakeLists.txt), and a module with SIMD instructions does
 * not even load on an engine without them (the JS loader checks first).
 *
 * Each tier's table starts as a copy of the one below and its register function overrides
 * what it has kernels for, so any type falls back per type. The selected tier is the
 * highest available, or the one named by CERA_CPU_TIER when that is lower (a higher or
 * unknown name is reported on stderr and ignored). Everything is built once, thread-safely,
 * on first use.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CERA_X86 1
#elif defined(__aarch64__)
#include <sys/auxv.h>
#define CERA_ARM 1
#endif

enum { TIER_SCALAR, TIER_AVX2, TIER_AVX512, TIER_AMX, TIER_NEON, TIER_I8MM, TIER_SIMD128, TIER_COUNT };

static const char *const tier_names[TIER_COUNT] = {"scalar", "avx2", "avx512", "amx",
                                                   "neon",   "i8mm", "simd128"};

static cera_cpu_type_ops tables[TIER_COUNT][CERA_TYPE_COUNT];
static bool tier_ok[TIER_COUNT];
static int selected = TIER_SCALAR;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

#if CERA_X86
typedef struct x86_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512dq, avx512vl, avx512vnni, avx512bf16;
    bool amx_tile, amx_int8, amx_bf16;
} x86_features;

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Asks Linux for permission to use the AMX tile data (XFEATURE 18) in this process. */
static bool request_amx_permission(void) {
#if defined(SYS_arch_prctl)
    enum { ARCH_GET_XCOMP_PERM = 0x1022, ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return false;
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bits) != 0) return false;
    return (bits >> XFEATURE_XTILEDATA) & 1;
#else
    return false;
#endif
}

static x86_features detect_x86(void) {
    x86_features f = {0};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1;
    const bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = read_xcr0();
    const bool os_avx = (xcr0 & 0x6) == 0x6;         /* XMM and YMM state */
    const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;    /* + opmask, ZMM_Hi256, Hi16_ZMM */
    const bool os_amx = (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    if (!os_avx) return f;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    f.fma = fma;
    f.f16c = f16c;
    f.avx2 = (b >> 5) & 1;
    if (os_avx512) {
        f.avx512f = (b >> 16) & 1;
        f.avx512dq = (b >> 17) & 1;
        f.avx512bw = (b >> 30) & 1;
        f.avx512vl = (b >> 31) & 1;
        f.avx512vnni = (c >> 11) & 1;
    }
    if (os_amx) {
        f.amx_bf16 = (d >> 22) & 1;
        f.amx_tile = (d >> 24) & 1;
        f.amx_int8 = (d >> 25) & 1;
    }
    unsigned max_sub = a;
    if (max_sub >= 1 && os_avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = (a >> 5) & 1;
    return f;
}
#endif

#if CERA_ARM
static void detect_arm(bool *dotprod, bool *i8mm) {
    /* HWCAP_ASIMDDP and HWCAP2_I8MM from <asm/hwcap.h>, spelled out for older headers. */
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    const bool asimd = (hw >> 1) & 1, fphp = (hw >> 9) & 1, asimdhp = (hw >> 10) & 1;
    *dotprod = asimd && fphp && asimdhp && ((hw >> 20) & 1);
    *i8mm = *dotprod && ((hw2 >> 13) & 1);
}
#endif

static int tier_index(const char *name) {
    for (int t = 0; t < TIER_COUNT; t++)
        if (!strcmp(name, tier_names[t])) return t;
    return -1;
}

#if CERA_X86 || CERA_ARM || (defined(__wasm__) && defined(CERA_WASM_SIMD128))
static void build_tier(int tier, int below) {
    memcpy(tables[tier], tables[below], sizeof tables[tier]);
    tier_ok[tier] = true;
}
#endif

#if CERA_X86
/* Whether a tier's gemm_tile for type t gives vec_dot's bits for every (row, column) of
 * random rows, for tiles of 1, 7 and the widest column count. A single token takes the row
 * dot and a prompt the tile, and a token's logits must not depend on which (decode equals
 * prefill, and a sequence's rows equal whatever batch it shares); so a tile that rounds
 * differently from the row dot is not used. */
static bool tile_matches_rowdot(const cera_cpu_type_ops *o, cera_type t) {
    const cera_type_traits *tt = cera_type_get(t);
    if (!tt || !tt->from_float_ref || !o->quantize_act) return false;
    enum { K = 512, ROWS = 16, COLS = 32 };
    const size_t ws = cera_row_size(t, K), as = cera_row_size(o->act_type, K);
    float *x = malloc(sizeof(float) * K), *tile = malloc(sizeof(float) * ROWS * COLS);
    uint8_t *w = malloc(ws * ROWS), *a = malloc(as * COLS);
    bool ok = x && tile && w && a && ws && as;
    uint32_t state = 2463534242u;
    for (int r = 0; ok && r < ROWS + COLS; r++) {
        for (int i = 0; i < K; i++) {
            state ^= state << 13, state ^= state >> 17, state ^= state << 5;
            x[i] = (float)((int32_t)state >> 8) * 0x1p-23f * (1.0f + (float)(r % 5));
        }
        if (r < ROWS)
            tt->from_float_ref(x, w + (size_t)r * ws, K);
        else
            o->quantize_act(x, a + (size_t)(r - ROWS) * as, K);
    }
    const int widths[3] = {1, 7, o->tile_cols < COLS ? o->tile_cols : COLS};
    for (int wi = 0; ok && wi < 3; wi++) {
        const int nc = widths[wi] < o->tile_cols ? widths[wi] : o->tile_cols;
        const int nr = o->tile_rows < ROWS ? o->tile_rows : ROWS;
        o->gemm_tile(K, tile, ROWS, w, ws, a, as, nr, nc);
        for (int c = 0; ok && c < nc; c++)
            for (int r = 0; ok && r < nr; r++) {
                float d = 0;
                o->vec_dot(K, &d, w + (size_t)r * ws, a + (size_t)c * as);
                ok = memcmp(&d, &tile[(size_t)c * ROWS + r], sizeof d) == 0;
            }
    }
    free(x);
    free(tile);
    free(w);
    free(a);
    return ok;
}

/* Keeps a register function's new tiles only where they round as the row dot. */
static void keep_rowdot_tiles(cera_cpu_type_ops *ops, const cera_cpu_type_ops *below) {
    for (int t = 0; t < CERA_TYPE_COUNT; t++)
        if (ops[t].gemm_tile && ops[t].gemm_tile != below[t].gemm_tile && !tile_matches_rowdot(&ops[t], t))
            ops[t] = below[t];
}
#endif

static void init_tables(void) {
    cera_cpu_register_scalar(tables[TIER_SCALAR]);
    tier_ok[TIER_SCALAR] = true;
    int best = TIER_SCALAR;
#if CERA_X86
    const x86_features f = detect_x86();
    if (f.avx2 && f.fma && f.f16c) {
        build_tier(TIER_AVX2, TIER_SCALAR);
        cera_cpu_register_avx2(tables[TIER_AVX2]);
        best = TIER_AVX2;
        if (f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512vnni) {
            build_tier(TIER_AVX512, TIER_AVX2);
            cera_cpu_register_avx512(tables[TIER_AVX512], f.avx512bf16);
            best = TIER_AVX512;
            if (f.amx_tile && f.amx_int8 && f.amx_bf16 && f.avx512bf16 && request_amx_permission()) {
                build_tier(TIER_AMX, TIER_AVX512);
                cera_cpu_register_amx(tables[TIER_AMX]);
                keep_rowdot_tiles(tables[TIER_AMX], tables[TIER_AVX512]);
                best = TIER_AMX;
            }
        }
    }
#elif CERA_ARM
    bool dotprod, i8mm;
    detect_arm(&dotprod, &i8mm);
    if (dotprod) {
        build_tier(TIER_NEON, TIER_SCALAR);
        cera_cpu_register_neon(tables[TIER_NEON]);
        best = TIER_NEON;
        if (i8mm) {
            build_tier(TIER_I8MM, TIER_NEON);
            cera_cpu_register_i8mm(tables[TIER_I8MM]);
            best = TIER_I8MM;
        }
    }
#elif defined(__wasm__) && defined(CERA_WASM_SIMD128)
    build_tier(TIER_SIMD128, TIER_SCALAR);
    cera_cpu_register_simd128(tables[TIER_SIMD128]);
    best = TIER_SIMD128;
#endif
    selected = best;
    const char *want = getenv("CERA_CPU_TIER");
    if (want && *want) {
        const int t = tier_index(want);
        if (t < 0 || !tier_ok[t])
            fprintf(stderr, "cera: CERA_CPU_TIER=%s is not a tier this CPU has; using %s\n", want,
                    tier_names[best]);
        else
            selected = t;
    }
}

const cera_cpu_type_ops *cera_cpu_ops(cera_type weight_type) {
    pthread_once(&init_once, init_tables);
    if ((unsigned)weight_type >= CERA_TYPE_COUNT || !tables[selected][weight_type].vec_dot) return NULL;
    return &tables[selected][weight_type];
}

const cera_cpu_type_ops *cera_cpu_ops_tier(const char *tier, cera_type weight_type) {
    pthread_once(&init_once, init_tables);
    const int t = tier ? tier_index(tier) : -1;
    if (t < 0 || !tier_ok[t]) return NULL;
    if ((unsigned)weight_type >= CERA_TYPE_COUNT || !tables[t][weight_type].vec_dot) return NULL;
    return &tables[t][weight_type];
}

const char *cera_cpu_tier_name(void) {
    pthread_once(&init_once, init_tables);
    return tier_names[selected];
}

bool cera_cpu_tier_simd(void) {
    pthread_once(&init_once, init_tables);
    return selected != TIER_SCALAR;
}

const char *const *cera_cpu_tier_list(int *count) {
    *count = TIER_COUNT;
    return tier_names;
}

bool cera_cpu_tier_available(const char *tier) {
    pthread_once(&init_once, init_tables);
    const int t = tier ? tier_index(tier) : -1;
    return t >= 0 && tier_ok[t];
}

void cera_cpu_set_act_quantizer(cera_cpu_type_ops ops[CERA_TYPE_COUNT], cera_type act_type,
                                cera_quantize_row_fn fn) {
    for (int t = 0; t < CERA_TYPE_COUNT; t++)
        if (ops[t].vec_dot && ops[t].act_type == act_type) ops[t].quantize_act = fn;
}
