// Exceptions thrown and caught in a hot loop: every third field "fails to parse".
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <time.h>

struct BadField : std::runtime_error {
  using std::runtime_error::runtime_error;
};

__attribute__((noinline)) long parse_field(long i) {
  volatile long x = 0;
  for (int k = 0; k < 2000; k++) x += k * i;
  if (i % 3 == 0) throw BadField("bad field");
  return x;
}

__attribute__((noinline)) long parse_record(long i) {
  long s = 0;
  for (int f = 0; f < 4; f++) {
    try {
      s += parse_field(i + f);
    } catch (const BadField &) {
      s -= 1;
    }
  }
  return s;
}

// The --trigger target: called once, after all the parsing.
__attribute__((noinline)) long report_done(long t) { return t ^ 0x5a; }

// Thread CPU time in seconds: the work after the trigger lasts 0.6 s of CPU on any host
// (a fixed iteration count took twice as long on a slower one, and its samples then
// filled the disk bound and pushed the throws out of the kept window).
static double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// Work after the trigger, which a snapshot taken at report_done() must not contain.
__attribute__((noinline)) long after_parsing_work(long x) {
  volatile long s = x;
  double end = cpu_now() + 0.6;
  while (cpu_now() < end)
    for (long i = 0; i < 100000; i++) s += i;
  return s;
}

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 60000;
  long t = 0;
  for (long i = 0; i < n; i++) t += parse_record(i);
  std::printf("%ld\n", after_parsing_work(report_done(t)));
  return 0;
}
