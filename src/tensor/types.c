/* types.c — the trait table: one row per supported tensor type (ids as GGUF's). */
#include "tensor/types.h"

#include <string.h>
#include <strings.h>

static const cera_type_traits traits[CERA_TYPE_COUNT] = {
    [CERA_TYPE_F32] = {"f32", 1, 4, false, NULL, NULL},
    [CERA_TYPE_F16] = {"f16", 1, 2, false, NULL, NULL},
    [CERA_TYPE_BF16] = {"bf16", 1, 2, false, NULL, NULL},
    [CERA_TYPE_Q4_0] = {"q4_0", 32, 18, true, NULL, NULL},
    [CERA_TYPE_Q4_1] = {"q4_1", 32, 20, true, NULL, NULL},
    [CERA_TYPE_Q5_0] = {"q5_0", 32, 22, true, NULL, NULL},
    [CERA_TYPE_Q5_1] = {"q5_1", 32, 24, true, NULL, NULL},
    [CERA_TYPE_Q8_0] = {"q8_0", 32, 34, true, NULL, NULL},
    [CERA_TYPE_Q8_1] = {"q8_1", 32, 36, true, NULL, NULL},
    [CERA_TYPE_Q2_K] = {"q2_k", 256, 84, true, NULL, NULL},
    [CERA_TYPE_Q3_K] = {"q3_k", 256, 110, true, NULL, NULL},
    [CERA_TYPE_Q4_K] = {"q4_k", 256, 144, true, NULL, NULL},
    [CERA_TYPE_Q5_K] = {"q5_k", 256, 176, true, NULL, NULL},
    [CERA_TYPE_Q6_K] = {"q6_k", 256, 210, true, NULL, NULL},
    [CERA_TYPE_Q8_K] = {"q8_k", 256, 292, true, NULL, NULL},
    [CERA_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true, NULL, NULL},
    [CERA_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true, NULL, NULL},
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
