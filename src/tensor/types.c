/* types.c — the trait table: one row per supported tensor type (ids as GGUF's).
 * Block sizes come from blocks.h, the conversions from quant.h. */
#include "tensor/types.h"

#include "tensor/blocks.h"
#include "tensor/quant.h"

#include <string.h>
#include <strings.h>

static const cera_type_traits traits[CERA_TYPE_COUNT] = {
    [CERA_TYPE_F32] = {"f32", 1, 4, false, cera_dequant_row_f32, cera_quantize_row_f32_ref},
    [CERA_TYPE_F16] = {"f16", 1, 2, false, cera_dequant_row_f16, cera_quantize_row_f16_ref},
    [CERA_TYPE_BF16] = {"bf16", 1, 2, false, cera_dequant_row_bf16, cera_quantize_row_bf16_ref},
    [CERA_TYPE_Q4_0] = {"q4_0", QK4_0, sizeof(block_q4_0), true, cera_dequant_row_q4_0,
                        cera_quantize_row_q4_0_ref},
    [CERA_TYPE_Q4_1] = {"q4_1", QK4_1, sizeof(block_q4_1), true, cera_dequant_row_q4_1,
                        cera_quantize_row_q4_1_ref},
    [CERA_TYPE_Q5_0] = {"q5_0", QK5_0, sizeof(block_q5_0), true, cera_dequant_row_q5_0,
                        cera_quantize_row_q5_0_ref},
    [CERA_TYPE_Q5_1] = {"q5_1", QK5_1, sizeof(block_q5_1), true, cera_dequant_row_q5_1,
                        cera_quantize_row_q5_1_ref},
    [CERA_TYPE_Q8_0] = {"q8_0", QK8_0, sizeof(block_q8_0), true, cera_dequant_row_q8_0,
                        cera_quantize_row_q8_0_ref},
    [CERA_TYPE_Q8_1] = {"q8_1", QK8_1, sizeof(block_q8_1), true, cera_dequant_row_q8_1,
                        cera_quantize_row_q8_1_ref},
    [CERA_TYPE_Q2_K] = {"q2_k", QK_K, sizeof(block_q2_k), true, cera_dequant_row_q2_k,
                        cera_quantize_row_q2_k_ref},
    [CERA_TYPE_Q3_K] = {"q3_k", QK_K, sizeof(block_q3_k), true, cera_dequant_row_q3_k,
                        cera_quantize_row_q3_k_ref},
    [CERA_TYPE_Q4_K] = {"q4_k", QK_K, sizeof(block_q4_k), true, cera_dequant_row_q4_k,
                        cera_quantize_row_q4_k_ref},
    [CERA_TYPE_Q5_K] = {"q5_k", QK_K, sizeof(block_q5_k), true, cera_dequant_row_q5_k,
                        cera_quantize_row_q5_k_ref},
    [CERA_TYPE_Q6_K] = {"q6_k", QK_K, sizeof(block_q6_k), true, cera_dequant_row_q6_k,
                        cera_quantize_row_q6_k_ref},
    [CERA_TYPE_Q8_K] = {"q8_k", QK_K, sizeof(block_q8_k), true, cera_dequant_row_q8_k,
                        cera_quantize_row_q8_k_ref},
    [CERA_TYPE_IQ4_NL] = {"iq4_nl", QK4_NL, sizeof(block_iq4_nl), true, cera_dequant_row_iq4_nl,
                          cera_quantize_row_iq4_nl_ref},
    [CERA_TYPE_IQ4_XS] = {"iq4_xs", QK_K, sizeof(block_iq4_xs), true, cera_dequant_row_iq4_xs,
                          cera_quantize_row_iq4_xs_ref},
};

const cera_type_traits *cera_type_get(uint32_t type) {
    if (type >= CERA_TYPE_COUNT || !traits[type].name) return NULL;
    return &traits[type];
}

bool cera_type_from_name(const char *name, cera_type *out) {
    for (uint32_t t = 0; t < CERA_TYPE_COUNT; t++)
        if (traits[t].name && !strcasecmp(traits[t].name, name)) {
            *out = (cera_type)t;
            return true;
        }
    return false;
}

size_t cera_row_size(cera_type type, int64_t n) {
    const cera_type_traits *tt = cera_type_get(type);
    if (!tt || n < 0 || n % tt->block_size) return 0;
    return (size_t)(n / tt->block_size) * tt->type_size;
}
