/*
 * cpus.h — how many CPUs this process may run on: the default thread count. Reads the
 * affinity mask (so a container limited with --cpuset-cpus or taskset gets its share,
 * not one spinning thread per host core), falling back to the online count.
 */
#ifndef CERA_CORE_CPUS_H
#define CERA_CORE_CPUS_H

int cera_cpu_count(void);

#endif
