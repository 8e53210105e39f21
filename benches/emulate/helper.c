/* Helpers for scripts/bench-emulate (built by the script with `cc -O2`).
 *
 *   helper run CMD ARGS...     runs CMD, then prints "WALL_SECONDS PEAK_RSS_KB CPU_SECONDS"
 *                              on fd 3 (wall from fork to wait4 on CLOCK_MONOTONIC; peak
 *                              RSS is wait4's ru_maxrss: the largest of CMD and the
 *                              descendants it waited for, e.g. qemu under ptscope; CPU is
 *                              user + system time of CMD and those descendants, which a
 *                              busy shared machine inflates less than wall time).
 *                              Exits with CMD's status.
 *   helper fxt [NAME...]       reads an uncompressed FXT stream on stdin; prints
 *                              "SLICES DISTINCT_NAMES PLT_SLICES" (PLT_SLICES: slices named
 *                              `…@plt`, the stubs calls into shared libraries pass through)
 *                              then, for each NAME, its slice count.
 *                              A slice is a duration begin or a duration complete record.
 *   helper fxt --all           the same, then "COUNT NAME" for every name.
 *   helper blocks LOG          counts the block executions in ptscope's emulate block log
 *                              (tools/ptsim-plugin/src/lib.rs has the format): one per
 *                              executed translation block, i.e. one per branch or
 *                              fall-through out of a block.
 *
 * Written for this benchmark from the format descriptions (FXT: Fuchsia's trace format
 * spec; block log: the plugin's doc comment); it shares no code with ptscope's readers,
 * so the counts are an independent check of what the trace holds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "bench-emulate helper: %s\n", what);
    exit(2);
}

/* ---- run ---- */

static int run(char **argv) {
    struct timespec t0, t1;
    /* The timing goes to fd 3; the measured command must not inherit it. */
    int tfd = fcntl(3, F_DUPFD_CLOEXEC, 10);
    if (tfd < 0)
        die("fd 3 is not open (the script reads the timing from it)");
    close(3);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0)
        die("fork failed");
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "bench-emulate helper: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR)
            die("wait4 failed");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double wall = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    FILE *out = fdopen(tfd, "w");
    if (!out)
        die("cannot write the timing to fd 3");
    double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
                 ru.ru_stime.tv_usec / 1e6;
    fprintf(out, "%.6f %ld %.6f\n", wall, ru.ru_maxrss, cpu);
    fclose(out);
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

/* ---- fxt ---- */

/* Interned names with their slice counts. Each name is allocated on its own so that
 * pointers to it (the string table below) stay valid when the hash table grows. */
struct name {
    char *s;
    uint32_t len;
    uint64_t count;
};
static struct name **names; /* open addressing */
static size_t names_cap, names_len;

static uint64_t hash(const char *s, uint32_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static struct name *intern(const char *s, uint32_t n) {
    if (names_len * 2 >= names_cap) {
        size_t cap = names_cap ? names_cap * 2 : 1024;
        struct name **t = calloc(cap, sizeof *t);
        if (!t)
            die("out of memory");
        for (size_t i = 0; i < names_cap; i++)
            if (names[i]) {
                size_t j = hash(names[i]->s, names[i]->len) & (cap - 1);
                while (t[j])
                    j = (j + 1) & (cap - 1);
                t[j] = names[i];
            }
        free(names);
        names = t;
        names_cap = cap;
    }
    size_t j = hash(s, n) & (names_cap - 1);
    while (names[j]) {
        if (names[j]->len == n && memcmp(names[j]->s, s, n) == 0)
            return names[j];
        j = (j + 1) & (names_cap - 1);
    }
    struct name *e = calloc(1, sizeof *e);
    if (!e || !(e->s = malloc(n + 1)))
        die("out of memory");
    memcpy(e->s, s, n);
    e->s[n] = 0;
    e->len = n;
    names[j] = e;
    names_len++;
    return e;
}

static struct name *table[32768]; /* string index -> interned name */

static int fxt(int argc, char **argv) {
    uint64_t *buf = NULL;
    size_t cap = 0;
    uint64_t slices = 0, hdr;
    struct name *empty = intern("", 0);
    while (fread(&hdr, 8, 1, stdin) == 1) {
        unsigned type = hdr & 15;
        uint64_t words = type == 15 ? (hdr >> 4) & 0xffffffffu : (hdr >> 4) & 0xfff;
        if (words == 0)
            die("FXT record of size 0: not an FXT stream, or damaged");
        size_t body = words - 1;
        if (body > cap) {
            cap = body * 2;
            buf = realloc(buf, cap * 8);
            if (!buf)
                die("out of memory");
        }
        if (body && fread(buf, 8, body, stdin) != body)
            die("FXT stream ends inside a record");
        if (type == 2) { /* string record */
            unsigned idx = (hdr >> 16) & 0x7fff;
            unsigned len = (hdr >> 32) & 0x7fff;
            if ((len + 7) / 8 > body)
                die("FXT string record longer than its size");
            table[idx] = intern((const char *)buf, len);
        } else if (type == 4) { /* event record */
            unsigned ev = (hdr >> 16) & 15;
            if (ev != 2 && ev != 4) /* duration begin, duration complete */
                continue;
            unsigned thread = (hdr >> 24) & 0xff;
            unsigned cat = (hdr >> 32) & 0xffff;
            unsigned nm = (hdr >> 48) & 0xffff;
            size_t at = 1 + (thread == 0 ? 2 : 0); /* timestamp, inline thread */
            if (cat & 0x8000)
                at += ((cat & 0x7fff) + 7) / 8;
            struct name *n;
            if (nm & 0x8000) {
                unsigned len = nm & 0x7fff;
                if (at + (len + 7) / 8 > body)
                    die("FXT event name runs past its record");
                n = intern((const char *)(buf + at), len);
            } else {
                n = nm ? table[nm] : empty;
                if (!n)
                    die("FXT event names a string index never defined");
            }
            n->count++;
            slices++;
        }
    }
    free(buf);
    size_t distinct = 0;
    uint64_t plt = 0;
    for (size_t i = 0; i < names_cap; i++)
        if (names[i] && names[i]->count) {
            distinct++;
            if (names[i]->len >= 4 && memcmp(names[i]->s + names[i]->len - 4, "@plt", 4) == 0)
                plt += names[i]->count;
        }
    printf("%llu %zu %llu", (unsigned long long)slices, distinct, (unsigned long long)plt);
    if (argc == 1 && strcmp(argv[0], "--all") == 0) {
        printf("\n");
        for (size_t i = 0; i < names_cap; i++)
            if (names[i] && names[i]->count)
                printf("%llu %s\n", (unsigned long long)names[i]->count, names[i]->s);
        return 0;
    }
    for (int i = 0; i < argc; i++) {
        struct name *n = intern(argv[i], strlen(argv[i]));
        printf(" %llu", (unsigned long long)n->count);
    }
    printf("\n");
    return 0;
}

/* ---- blocks ---- */

static int blocks(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open the block log");
    unsigned char h[16];
    uint64_t execs = 0;
    uint32_t *buf = NULL;
    size_t cap = 0;
    while (fread(h, 1, 16, f) == 16) {
        uint64_t len;
        memcpy(&len, h + 8, 8);
        if (h[0] != 2) {
            if (fseeko(f, (off_t)len, SEEK_CUR) != 0)
                die("block log: cannot seek past a chunk");
            continue;
        }
        size_t n = len / 4;
        if (n > cap) {
            cap = n;
            buf = realloc(buf, cap * 4);
            if (!buf)
                die("out of memory");
        }
        if (fread(buf, 4, n, f) != n)
            die("block log ends inside a chunk");
        for (size_t i = 0; i < n; i++) {
            if (buf[i] == 0xffffffffu)
                i += 2; /* a clock marker: the u64 clock follows */
            else
                execs++;
        }
    }
    fclose(f);
    free(buf);
    printf("%llu\n", (unsigned long long)execs);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "run") == 0)
        return run(argv + 2);
    if (argc >= 2 && strcmp(argv[1], "fxt") == 0)
        return fxt(argc - 2, argv + 2);
    if (argc == 3 && strcmp(argv[1], "blocks") == 0)
        return blocks(argv[2]);
    fprintf(stderr, "usage: helper run CMD ARGS... | helper fxt [NAME...] < TRACE.fxt | "
                    "helper blocks LOG\n");
    return 2;
}
