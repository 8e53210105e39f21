#!/usr/bin/env python3
"""Turn a magic-trace style transcript into slices and diff two of them.

Usage: transcript_slices.py EXPECTED GOT
Prints slices only in EXPECTED ('-') or only in GOT ('+') as (start, end, depth, name),
ordered by start. Times are parsed back from Core's to_string_hum form.
"""
import re
import sys

UNITS = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9, "d": 86400e9}


def ns(text):
    m = re.fullmatch(r"(-?[0-9_.]+)(ns|us|ms|s|m|h|d)", text.strip())
    return round(float(m.group(1).replace("_", "")) * UNITS[m.group(2)])


LINE = re.compile(r"^-> +(?:(\S+) )?(BEGIN|END  ) (.*)$")


def slices(path):
    """Slices as Perfetto would build them: a stable sort by time, then nesting."""
    events = []
    for line in open(path):
        m = LINE.match(line.rstrip("\n"))
        if not m:
            continue
        t, kind, name = m.groups()
        name = name.replace(" [inferred start time]", "")
        if t is None:  # the END of an instant: same time as its BEGIN
            t = events[-1][0]
        else:
            t = ns(t)
        events.append((t, kind, name))
    events.sort(key=lambda e: e[0])
    stack, out = [], []
    for t, kind, name in events:
        if kind == "BEGIN":
            stack.append((t, name, len(stack)))
        elif stack:
            s = stack.pop()
            out.append((s[0], t, s[2], s[1]))
    return sorted(out)


def main():
    a, b = slices(sys.argv[1]), slices(sys.argv[2])
    sa, sb = set(a), set(b)
    for s in sorted(sa - sb):
        print("-", s)
    for s in sorted(sb - sa):
        print("+", s)


if __name__ == "__main__":
    main()
