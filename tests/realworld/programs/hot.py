# Python-level hot spots for the real-world corpus: recursion (fib), integer-to-string
# conversion and joining (build_strings), and list sorting (sort_words).
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def build_strings(n):
    return ",".join(str(i * 7) for i in range(n))


def sort_words(n):
    words = [str((i * 2654435761) % 1000003) for i in range(n)]
    words.sort()
    return len(words)


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
total = 0
for _ in range(rounds):
    total += fib(22)
    total += len(build_strings(100000))
    total += sort_words(100000)
print(total)
