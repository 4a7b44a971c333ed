/*
 * kv_stats.c — cera_engine_kv_blocks: how full the engine's KV pool is, for a server's
 * metrics (blocks in use and in all). Read under the forward lock, so the counts are
 * those between two forward calls.
 */
#include "engine/engine_impl.h"

bool cera_engine_kv_blocks(cera_engine *engine, int *used, int *total) {
    if (!engine || !engine->kv) return false;
    pthread_mutex_lock(&engine->forward_lock);
    int n = 0, n_free = 0;
    for (int g = 0; g < CERA_KV_GROUPS; g++) { /* full and sliding-window blocks together */
        n += engine->kv->group[g].n_blocks;
        n_free += engine->kv->group[g].n_free;
    }
    pthread_mutex_unlock(&engine->forward_lock);
    if (used) *used = n - n_free;
    if (total) *total = n;
    return true;
}
