/* Named threads doing distinct work: "hasher" hashes, "sorter" sorts, "copier" copies,
 * all three until main tells them to stop (about 0.4 s), so that the last moments of the
 * run hold all three. After joining them main calls phase_two() (a --trigger target) and
 * then does after_trigger_work() (0.6 s of CPU), which a snapshot taken at phase_two() must not contain. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "cpu_spin.h"

static atomic_int stop;

__attribute__((noinline)) uint64_t hash_block(const unsigned char *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void *hasher_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "hasher");
  static unsigned char buf[1 << 20];
  memset(buf, 7, sizeof buf);
  uint64_t h = 0;
  while (!atomic_load(&stop)) h += hash_block(buf, sizeof buf);
  return (void *)(uintptr_t)h;
}

__attribute__((noinline)) int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Returns the median so that qsort is not a tail call (sort_block keeps its frame). */
__attribute__((noinline)) uint32_t sort_block(uint32_t *v, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) v[i] = (uint32_t)(i * 2654435761u) ^ seed;
  qsort(v, n, sizeof *v, cmp_u32);
  return v[n / 2];
}

static void *sorter_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "sorter");
  size_t n = 1 << 14;
  uint32_t *v = malloc(n * sizeof *v);
  uint32_t first = 0;
  for (uint32_t r = 0; !atomic_load(&stop); r++) first += sort_block(v, n, r);
  free(v);
  return (void *)(uintptr_t)first;
}

__attribute__((noinline)) size_t copy_block(unsigned char *dst, const unsigned char *src, size_t n) {
  size_t s = 0;
  for (int k = 0; k < 8; k++) {
    memcpy(dst, src, n);
    s += dst[k];
  }
  return s;
}

static void *copier_main(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "copier");
  size_t n = 4 << 20;
  unsigned char *a = malloc(n), *b = malloc(n);
  memset(a, 1, n);
  size_t s = 0;
  while (!atomic_load(&stop)) s += copy_block(b, a, n);
  free(a);
  free(b);
  return (void *)(uintptr_t)s;
}

__attribute__((noinline)) long phase_two(long x) { return x * 3 + 1; }

__attribute__((noinline)) long after_trigger_work(long x) { return cpu_spin(x, 0.6); }

int main(void) {
  pthread_t t[3];
  void *(*fn[3])(void *) = {hasher_main, sorter_main, copier_main};
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, fn[i], NULL);
  struct timespec run = {0, 400 * 1000 * 1000};
  nanosleep(&run, NULL);
  atomic_store(&stop, 1);
  uintptr_t sum = 0;
  for (int i = 0; i < 3; i++) {
    void *r;
    pthread_join(t[i], &r);
    sum += (uintptr_t)r;
  }
  long x = phase_two((long)(sum & 0xff));
  printf("%ld\n", after_trigger_work(x));
  return 0;
}
