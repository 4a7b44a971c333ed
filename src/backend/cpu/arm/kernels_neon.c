/*
 * kernels_neon.c — the NEON (ARMv8.2 dotprod, fp16) tier.
 */
#include "backend/cpu/kernels_impl.h"

void cera_cpu_register_neon(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) { (void)ops; }
