/* Work measured in thread CPU time, not iterations, so it lasts as long on a fast host as
 * on a slow or loaded one: a fixed 1e9-iteration loop took 1 s on one host and 2.1 s on
 * another, where at 10 kHz with DWARF stacks it alone filled the disk bound and pushed
 * the work before it out of the kept window. Shared by threads.c and throw.cpp. */
#ifndef CPU_SPIN_H
#define CPU_SPIN_H
#include <time.h>

static inline __attribute__((always_inline)) double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* Adds to `s` for `seconds` of this thread's CPU time and returns it; inlined, so the
 * time is its caller's (the function a test looks for). */
static inline __attribute__((always_inline)) long cpu_spin(long s, double seconds) {
  volatile long acc = s;
  double end = cpu_now() + seconds;
  while (cpu_now() < end)
    for (long i = 0; i < 100000; i++) acc += i;
  return acc;
}
#endif
