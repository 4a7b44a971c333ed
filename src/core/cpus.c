/* cpus.c — see cpus.h. */
#include "core/cpus.h"

#include <sched.h>
#include <unistd.h>

int cera_cpu_count(void) {
#if defined(__EMSCRIPTEN__)
    return 1; /* the WebAssembly build is single-threaded (wasm/CMakeLists.txt) */
#else
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
#endif
}
