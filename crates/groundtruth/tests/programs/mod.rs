//! The C and C++ programs the simulated-pipeline test and `fidelity --sim` record.

/// Recursion, calls through a pointer (qsort's comparator) and libc calls.
pub const CALL_TREE_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) int leaf(int x) { return x * 2 + 1; }
__attribute__((noinline)) int fib(int n) { return n < 2 ? leaf(n) : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) int cmp(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}
__attribute__((noinline)) int work(int n) {
    int *v = malloc(n * sizeof *v);
    for (int i = 0; i < n; i++) v[i] = (i * 7919) % n;
    qsort(v, n, sizeof *v, cmp);
    char buf[64];
    int s = 0;
    for (int i = 0; i < n; i += 8) { snprintf(buf, sizeof buf, "%d", v[i]); s += strlen(buf); }
    free(v);
    return s + fib(12);
}
int main(void) { int s = 0; for (int i = 0; i < 3; i++) s += work(200); printf("%d\n", s); return 0; }
"#;

/// Three threads each recursing, joined by main.
pub const THREADS_C: &str = r#"
#include <pthread.h>
#include <stdio.h>
__attribute__((noinline)) int leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) int rec(int n) { return n == 0 ? leaf(n) : rec(n - 1) + leaf(n); }
__attribute__((noinline)) void *body(void *arg) {
    long s = 0;
    for (int i = 0; i < 200; i++) s += rec(10 + (int)(long)arg);
    return (void *)s;
}
int main(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++) pthread_create(&t[i], 0, body, (void *)i);
    long s = 0;
    for (int i = 0; i < 3; i++) { void *r; pthread_join(t[i], &r); s += (long)r; }
    printf("%ld\n", s);
    return 0;
}
"#;

/// Exceptions thrown through several frames and caught in an ancestor.
pub const EXCEPTIONS_CC: &str = r#"
#include <cstdio>
#include <stdexcept>
__attribute__((noinline)) int deep(int n) {
    if (n == 0) throw std::runtime_error("bottom");
    return deep(n - 1) + 1;
}
__attribute__((noinline)) int guarded(int n) {
    try { return deep(n); } catch (const std::exception &) { return -1; }
}
int main() { int s = 0; for (int i = 0; i < 20; i++) s += guarded(5 + i % 4); std::printf("%d\n", s); }
"#;

/// `(name, source file, source, compiler command)` of every program.
pub const PROGRAMS: [(&str, &str, &str, &[&str]); 3] = [
    (
        "calltree",
        "calltree.c",
        CALL_TREE_C,
        &["cc", "-O1", "-no-pie"],
    ),
    (
        "threads",
        "threads.c",
        THREADS_C,
        &["cc", "-O1", "-pthread"],
    ),
    ("exceptions", "exc.cc", EXCEPTIONS_CC, &["c++", "-O1"]),
];
