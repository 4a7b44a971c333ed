/*
 * test_tier_env.c — CERA_CPU_TIER chooses the tier: run as `test_tier_env TIER`, it sets the
 * variable to TIER before the first kernel call and checks that the selected tier is TIER
 * when this CPU has it, else the highest available one (the documented fallback for a name
 * that is unknown or unavailable), and that cera_cpu_ops serves that tier's table.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "testutil.h"

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    setenv("CERA_CPU_TIER", argv[1], 1);
    const char *name = cera_cpu_tier_name();
    int n;
    const char *const *tiers = cera_cpu_tier_list(&n);
    const char *best = "scalar";
    for (int k = 0; k < n; k++)
        if (cera_cpu_tier_available(tiers[k])) best = tiers[k];
    const char *want = cera_cpu_tier_available(argv[1]) ? argv[1] : best;
    CHECK(!strcmp(name, want), "CERA_CPU_TIER=%s selected %s, want %s", argv[1], name, want);
    const cera_cpu_type_ops *sel = cera_cpu_ops(CERA_TYPE_Q4_0),
                            *tier = cera_cpu_ops_tier(want, CERA_TYPE_Q4_0);
    CHECK(sel && tier && sel->vec_dot == tier->vec_dot, "cera_cpu_ops serves the %s table", want);
    CHECK(cera_cpu_ops_tier("no-such-tier", CERA_TYPE_Q4_0) == NULL, "unknown tier -> NULL");
    CHECK(cera_cpu_ops((cera_type)CERA_TYPE_Q8_K) == NULL, "q8_k is not a weight type");
    return test_finish();
}
