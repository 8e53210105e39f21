#!/usr/bin/env python3
"""Check FXT traces with an independent reader: the PyPI package `fxt` (0.3.0).

Usage: python3 tests/fxt_check.py FILE [FILE...]

Each file (gzip is detected by its magic bytes) is parsed with
`fxt.reader.parse_records` and turned into spans with
`fxt.transform.transform_records_to_spans`. The script exits 1 with a message on
a truncated file, a parse error, a transform error (unmatched or mismatched
duration end), a span with a negative duration or a child span that outlives its
parent. Otherwise it prints one summary line per file:

    FILE: providers=1 processes=P threads=T spans=S events=E

where processes/threads count the (pid, tid) groups that have spans, spans counts
every span at any depth, and events counts every event record (instants and
counters included).

fxt 0.3.0 stores the *absolute end* of a Complete event in `duration_ns`; this
script converts it to a real duration before building spans.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import sys

GZIP_MAGIC = b"\x1f\x8b"


class CheckError(Exception):
    """A problem with the trace being checked."""


def open_trace(path: str) -> io.BufferedIOBase:
    with open(path, "rb") as f:
        head = f.read(2)
    if head == GZIP_MAGIC:
        return gzip.open(path, "rb")
    return open(path, "rb")


def fix_complete_durations(records, complete_cls):
    """Undo fxt 0.3.0's bug: Complete `duration_ns` holds the absolute end."""
    fixed = []
    for r in records:
        if isinstance(r, complete_cls):
            if r.duration_ns < r.timestamp_ns:
                raise CheckError(
                    f"complete event {r.name!r} on pid {r.thread.process_id} tid "
                    f"{r.thread.thread_id} ends ({r.duration_ns}) before it starts ({r.timestamp_ns})"
                )
            r = dataclasses.replace(r, duration_ns=r.duration_ns - r.timestamp_ns)
        fixed.append(r)
    return fixed


def unclosed_threads(records, begin_cls, end_cls):
    """(pid, tid) pairs with more begins than ends: their spans are closed artificially."""
    depth: dict[tuple[int, int], int] = {}
    for r in records:
        if isinstance(r, begin_cls):
            key = (r.thread.process_id, r.thread.thread_id)
            depth[key] = depth.get(key, 0) + 1
        elif isinstance(r, end_cls):
            key = (r.thread.process_id, r.thread.thread_id)
            depth[key] = depth.get(key, 0) - 1
    return {k for k, d in depth.items() if d > 0}


def check_spans(spans, where: str, check_nesting: bool) -> int:
    """Counts spans recursively, checking durations and (optionally) nesting."""
    count = 0
    stack = [(s, None) for s in spans]
    while stack:
        span, parent = stack.pop()
        count += 1
        if span.duration_ns < 0:
            raise CheckError(f"{where}: span {span.name!r} at {span.timestamp_ns} has negative duration")
        if check_nesting and parent is not None:
            end = span.timestamp_ns + span.duration_ns
            parent_end = parent.timestamp_ns + parent.duration_ns
            if span.timestamp_ns < parent.timestamp_ns or end > parent_end:
                raise CheckError(
                    f"{where}: span {span.name!r} [{span.timestamp_ns}, {end}] is not inside its parent "
                    f"{parent.name!r} [{parent.timestamp_ns}, {parent_end}]"
                )
        stack.extend((c, span) for c in span.children)
    return count


def check_file(path: str) -> str:
    from fxt import models
    from fxt.reader import FxtParseError, parse_records
    from fxt.transform import FxtTransformError, transform_records_to_spans

    try:
        with open_trace(path) as f:
            result = parse_records(f)
    except FxtParseError as e:
        raise CheckError(f"parse error: {e}") from e
    except (EOFError, OSError, ValueError) as e:
        # gzip/zlib errors and undecodable strings end up here.
        raise CheckError(f"cannot read: {type(e).__name__}: {e}") from e
    if result.had_unexpected_eof:
        raise CheckError(f"unexpected end of file: {result.eof_error}")
    if not result.records_by_provider:
        raise CheckError("no provider info record: not an FXT trace")

    processes = threads = spans = events = 0
    event_classes = tuple(
        getattr(models, name)
        for name in dir(models)
        if name.endswith("EventRecord") and isinstance(getattr(models, name), type)
    )
    for provider_id, state in result.records_by_provider.items():
        records = fix_complete_durations(state.records, models.DurationCompleteEventRecord)
        unclosed = unclosed_threads(
            records, models.DurationBeginEventRecord, models.DurationEndEventRecord
        )
        events += sum(1 for r in records if isinstance(r, event_classes))
        try:
            by_process = transform_records_to_spans(records)
        except FxtTransformError as e:
            raise CheckError(f"provider {provider_id}: transform error: {e}") from e
        for pid, process in by_process.items():
            processes += 1
            for tid, thread in process.threads.items():
                threads += 1
                where = f"pid {pid} ({process.name}) tid {tid} ({thread.name})"
                spans += check_spans(thread.spans, where, (pid, tid) not in unclosed)
        if unclosed:
            print(
                f"{path}: warning: {len(unclosed)} thread(s) end with open duration begins",
                file=sys.stderr,
            )
    return (
        f"providers={len(result.records_by_provider)} processes={processes} "
        f"threads={threads} spans={spans} events={events}"
    )


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        import fxt.reader  # noqa: F401
        import fxt.transform  # noqa: F401
    except ImportError as e:
        print(
            f"fxt_check: the PyPI package 'fxt' (0.3.0) is not importable by {sys.executable}: {e}",
            file=sys.stderr,
        )
        return 3
    failed = False
    for path in argv[1:]:
        try:
            print(f"{path}: {check_file(path)}")
        except CheckError as e:
            print(f"{path}: FAIL: {e}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
