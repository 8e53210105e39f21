/* Benchmark workload for ptsim: a deterministic mix of what real traces hold —
 * library calls through the PLT, indirect calls (qsort's comparator), deep recursion,
 * string formatting and tight loops. `workload ROUNDS`: about 0.24 M branches per round; the default 48 rounds give ~11.4 M. */
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

__attribute__((noinline)) static unsigned fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) static unsigned long hash(const char *s, int n) {
  unsigned long h = 5381;
  for (int i = 0; i < n; i++) h = h * 33 + (unsigned char)s[i];
  return h;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 48;
  unsigned long acc = 0;
  int *v = malloc(4096 * sizeof *v);
  char buf[256];
  if (!v) return 1;
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 4096; i++) v[i] = (int)((i * 2654435761u + (unsigned)r) & 0xffff);
    qsort(v, 4096, sizeof *v, cmp);
    acc += fib(18) + (unsigned long)v[r & 4095];
    for (int i = 0; i < 200; i++) {
      int n = snprintf(buf, sizeof buf, "%d:%lu", i, acc);
      acc += hash(buf, n);
    }
  }
  printf("%lu\n", acc);
  free(v);
  return 0;
}
