/*
 * kernels_avx2.c — the AVX2 (+FMA, F16C) tier: registers its kernels over the scalar ones.
 */
#include "backend/cpu/kernels_impl.h"

void cera_cpu_register_avx2(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) { (void)ops; }
