/*
 * kernels_i8mm.c — the i8mm (ARMv8.6 int8 matrix multiply) tier.
 */
#include "backend/cpu/kernels_impl.h"

void cera_cpu_register_i8mm(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) { (void)ops; }
