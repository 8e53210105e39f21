/* The program scripts/demo records (and tests/realworld/tests/demo.rs checks the trace of). */
#include <stdio.h>
#include <string.h>
static volatile unsigned long sink;
__attribute__((noinline)) static unsigned long checksum(const char *s, unsigned long n) {
    unsigned long h = 5381;
    for (unsigned long i = 0; i < n; i++) h = h * 33 + (unsigned char)s[i];
    return h;
}
__attribute__((noinline)) static void parse_line(const char *line) {
    sink += checksum(line, strlen(line));
}
__attribute__((noinline)) static void run_batch(int k) {
    char line[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(line, sizeof line, "order %d-%d qty %d", k, i, i * 7);
        parse_line(line);
    }
}
int main(void) {
    for (int k = 0; k < 400; k++) run_batch(k);
    printf("checksum %lu\n", sink);
    return 0;
}
