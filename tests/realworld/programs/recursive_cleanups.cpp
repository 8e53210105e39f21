// A recursive-descent parser whose every level owns an object with a destructor: an input
// that ends too early throws from the deepest level, and each level's cleanup (its landing
// pad: the destructor, then _Unwind_Resume) runs on the way out to main's catch. The
// unwinder lands each _Unwind_Resume in the *next outer* level's pad, never in the level
// that called it (issue 25).
//
// Two copies of the parser, so one recording holds both shapes g++ -O2 gives a pad: `parse`
// has its throw and its pad's cleanup split off into a `.cold` part (the pad jumps there),
// `parse_flat` keeps them in its body.
#include <cstdio>
#include <stdexcept>

static volatile long destroyed;

struct Level {
  int depth;
  explicit Level(int d) : depth(d) {}
  __attribute__((noinline)) ~Level() { destroyed += depth; }
};

struct ParseError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

__attribute__((noinline)) int parse(const char *p, int depth) {
  Level level(depth);
  if (*p == '\0') throw ParseError("unexpected end of input");
  if (*p == '(') return parse(p + 1, depth + 1) + 1;
  return depth;
}

__attribute__((noinline, optimize("no-reorder-blocks-and-partition"))) int
parse_flat(const char *p, int depth) {
  Level level(depth);
  if (*p == '\0') throw ParseError("unexpected end of input");
  if (*p == '(') return parse_flat(p + 1, depth + 1) + 1;
  return depth;
}

int main() {
  const char *inputs[] = {"((((((x", "((((((((((", "((x", "(((((("};
  long ok = 0, bad = 0;
  for (int i = 0; i < 8; i++) {
    try {
      ok += i < 4 ? parse(inputs[i % 4], 0) : parse_flat(inputs[i % 4], 0);
    } catch (const ParseError &) {
      bad++;
    }
  }
  std::printf("%ld %ld %ld\n", ok, bad, (long)destroyed);
  return 0;
}
