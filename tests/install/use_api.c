/* use_api.c — a user's program: only the installed public header. */
#include <cera.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    cera_engine_params ep = cera_engine_default_params();
    ep.device = CERA_DEVICE_CPU;
    ep.n_threads = 1;
    cera_engine *e = NULL;
    cera_error err;
    if (cera_engine_open(argv[1], &ep, &e, &err)) {
        fprintf(stderr, "error: %s\n", err.message);
        return 1;
    }
    printf("cera %s vocab %d arch %s\n", cera_version(), cera_engine_n_vocab(e), cera_engine_arch(e));
    cera_engine_close(e);
    return 0;
}
