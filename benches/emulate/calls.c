/* Call-heavy micro-benchmark for scripts/bench-emulate: main calls mid N times (argv[1],
 * default 1000000), mid calls leaf twice; leaf is two instructions (lea, ret) at -O2.
 * noinline/noclone keep every call a real call at -O2; the sum is printed so that no call
 * can be dropped as dead code. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline, noclone)) int leaf(int x) { return x + 1; }

__attribute__((noinline, noclone)) int mid(int x) { return leaf(x) ^ leaf(x + 3); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int acc = 0;
    for (long i = 0; i < n; i++)
        acc += mid((int)i);
    printf("%d\n", acc);
    return 0;
}
