// Exceptions thrown and caught in a hot loop: every third field "fails to parse".
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "cpu_spin.h"

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

// Work after the trigger (0.6 s of CPU), which a snapshot taken at report_done() must
// not contain.
__attribute__((noinline)) long after_parsing_work(long x) { return cpu_spin(x, 0.6); }

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 60000;
  long t = 0;
  for (long i = 0; i < n; i++) t += parse_record(i);
  std::printf("%ld\n", after_parsing_work(report_done(t)));
  return 0;
}
