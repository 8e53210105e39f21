/* ptscope.h: mark the moment a ptscope trace should end.
 *
 *   #include "ptscope.h"
 *   uint64_t start = ptscope_now();
 *   ... slow request ...
 *   ptscope_stop_indicator_with(start, request_id);   // or ptscope_stop_indicator();
 *
 * Record with `ptscope run --trigger . -- ./program`: ptscope sets a hardware breakpoint on
 * these functions and snapshots the trace when one runs. Without ptscope they cost a call.
 * Header-only; the functions are `weak` so including the header in several files links. */
#ifndef PTSCOPE_H
#define PTSCOPE_H

#include <stdint.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Ends the trace here. noinline + an asm body: the compiler may neither inline nor drop it. */
__attribute__((noinline, weak, used)) void ptscope_stop_indicator(void) {
  __asm__ volatile("" ::: "memory");
}

/* Ends the trace here; the hit slice spans from start_ts (ptscope_now()) and shows value.
 * The arguments are read from the registers at the breakpoint (rdi, rsi). */
__attribute__((noinline, weak, used)) void ptscope_stop_indicator_with(uint64_t start_ts,
                                                                       uint64_t value) {
  __asm__ volatile("" ::"D"(start_ts), "S"(value) : "memory");
}

/* CLOCK_MONOTONIC in nanoseconds: the start time for ptscope_stop_indicator_with. */
static inline uint64_t ptscope_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifdef __cplusplus
}
#endif

#endif /* PTSCOPE_H */
