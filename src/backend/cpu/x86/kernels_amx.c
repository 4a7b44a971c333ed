/*
 * kernels_amx.c — the AMX tier (int8/bf16 tiles for matrix-matrix products).
 */
#include "backend/cpu/kernels_impl.h"

void cera_cpu_register_amx(cera_cpu_type_ops ops[CERA_TYPE_COUNT]) { (void)ops; }
