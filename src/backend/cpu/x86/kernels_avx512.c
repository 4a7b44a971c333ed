/*
 * kernels_avx512.c — the AVX-512 (F/BW/DQ/VL + VNNI, BF16 when present) tier.
 */
#include "backend/cpu/kernels_impl.h"

void cera_cpu_register_avx512(cera_cpu_type_ops ops[CERA_TYPE_COUNT], bool has_bf16) {
    (void)ops;
    (void)has_bf16;
}
