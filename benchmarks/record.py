"""Benchmark: ``Run.record`` against a raw ``os.write(fd, orjson.dumps(obj) + b"\\n")``.

Two raw baselines, both measured in the same run:

* **host objects** (the target's baseline): the envelope the library would
  build, prebuilt, around the host's own ``data`` (built-in message
  dataclasses included), serialized by orjson's native dataclass support —
  what a host pays to write its own events with
  ``os.write(fd, orjson.dumps(obj) + b"\\n")``.
* **same bytes**: the objects are the library's own
  lines parsed back, so the raw writer produces byte-identical output and
  skips exactly what the library adds: event policy, request freezing,
  timestamps, the codec's typed-value hook, the Record and its bookkeeping.
  The gap to it is mostly the codec's type hook: orjson calls back into
  Python for every typed value to tag it.

Every writer does one ``os.write`` per line on an ``O_APPEND`` descriptor in a
temporary folder, without fsync; opening and closing (which fsyncs) are not
timed. The writers take turns chunk by chunk (100 events each), so every
chunk is timed for all three within milliseconds and a slow spell of the
machine hits them alike; the figures are the best (and the median) of each
chunk across passes, summed. The thread's CPU time is printed as well: it
does not count time spent descheduled, so it is the steadier figure when
other processes compete for the cores.

The events are built before timing, so request freezing (which
``events.model_request`` does) is not in these figures; section 6 of
``benchmarks/bridge.py`` times a model call with its events built, frozen,
recorded and bridged.

Run: ``.venv/bin/python benchmarks/record.py [--turns N] [--reps N] [--profile] [--strict]``
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from benchmarks._workload import build_events, median, percentile, scratch_dir
from loopscribe import Event, Session, read

TARGET_RATIO = 1.5
_LIFECYCLE = frozenset({"session_start", "run_start", "run_close"})

Timing = tuple[int, int]
"""Wall-clock (``perf_counter_ns``) and CPU (``thread_time_ns``) ns of one chunk."""
Writer = Callable[[Path, list[list[Any]]], Iterator[Timing]]
"""Writes one chunk per step and yields its timing; cleans up when exhausted."""


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _record_writer(path: Path, chunks: list[list[Any]]) -> Iterator[Timing]:
    """Record the events of each chunk into one new session file."""
    session = Session.create(path)
    run = session.begin_run()
    record = run.record
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    try:
        for chunk in chunks:
            start, cpu_start = clock(), cpu_clock()
            for event in chunk:
                record(event)
            cpu = cpu_clock() - cpu_start
            yield clock() - start, cpu
    finally:
        run.close()
        session.close()
        path.unlink()


def _raw_writer(path: Path, chunks: list[list[Any]]) -> Iterator[Timing]:
    """Write the objects of each chunk as JSON lines, one ``os.write`` each."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    dumps = orjson.dumps
    write = os.write
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    try:
        for chunk in chunks:
            start, cpu_start = clock(), cpu_clock()
            for obj in chunk:
                write(fd, dumps(obj) + b"\n")
            cpu = cpu_clock() - cpu_start
            yield clock() - start, cpu
    finally:
        os.close(fd)
        path.unlink()


def _interleaved_pass(
    folder: Path, writers: dict[str, tuple[Writer, list[list[Any]]]], order: list[str]
) -> dict[str, list[Timing]]:
    """One pass of every writer, chunk by chunk in turn: each chunk index is timed
    for all writers within milliseconds, so a slow spell of the machine hits them alike."""
    steps = {
        name: writer(folder / f"{name}.jsonl", chunks) for name, (writer, chunks) in writers.items()
    }
    took: dict[str, list[Timing]] = {name: [] for name in writers}
    gc.collect()
    for _ in range(len(next(iter(writers.values()))[1])):
        for name in order:
            took[name].append(next(steps[name]))
    for step in steps.values():
        next(step, None)  # runs its clean-up
    return took


def _summary(passes: list[list[int]], count: int) -> tuple[float, float]:
    """Best and median ns per event: per chunk across passes, summed over chunks."""
    per_chunk = list(zip(*passes, strict=True))
    best = sum(min(times) for times in per_chunk) / count
    middle = sum(median([float(t) for t in times]) for times in per_chunk) / count
    return best, middle


def _same_bytes_objects(folder: Path, events: list[Event]) -> tuple[list[Any], int]:
    """The library's lines for ``events``, parsed back; and their total size in bytes."""
    path = folder / "reference.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        for event in events:
            run.record(event)
    objects: list[Any] = []
    size = 0
    with path.open("rb") as stream:
        for line in stream:
            obj = orjson.loads(line)
            if obj["type"] not in _LIFECYCLE:
                objects.append(obj)
                size += len(line)
    raw_size = sum(len(orjson.dumps(obj)) + 1 for obj in objects)
    assert raw_size == size, f"raw baseline writes {raw_size} bytes, the library {size}"
    assert len(objects) == len(events) == sum(1 for _ in read(path)) - 3
    path.unlink()
    return objects, size


def _host_objects(same_bytes: list[Any], events: list[Event]) -> list[Any]:
    """The same envelopes around the host's own data objects (dataclasses untagged)."""
    return [{**obj, "data": event.data} for obj, event in zip(same_bytes, events, strict=True)]


def _latencies(
    folder: Path, events: list[Event], objects: list[Any]
) -> tuple[list[int], list[int]]:
    """Per-call ns of one library pass and one same-bytes raw pass."""
    lib = [wall for wall, _ in _record_writer(folder / "lib.jsonl", [[e] for e in events])]
    raw = [wall for wall, _ in _raw_writer(folder / "raw.jsonl", [[o] for o in objects])]
    return lib, raw


def main() -> int:
    """Measure and print the comparison; with ``--strict``, return 1 if the target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300, help="agent turns per pass")
    parser.add_argument("--reps", type=int, default=9, help="timed passes of each kind")
    parser.add_argument("--chunk", type=int, default=100, help="events per timed chunk")
    parser.add_argument("--profile", action="store_true", help="cProfile one library pass")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args()

    events = build_events(args.turns)
    n = len(events)
    with scratch_dir() as folder:
        same_bytes, size = _same_bytes_objects(folder, events)
        host = _host_objects(same_bytes, events)
        print(
            f"workload: {args.turns} turns, {n} events, {size / 2**20:.1f} MiB "
            f"({size / n / 1024:.1f} KiB/event); best and median of {args.reps} passes, "
            f"per chunk of {args.chunk} events"
        )
        writers: dict[str, tuple[Writer, list[list[Any]]]] = {
            "library": (_record_writer, _chunks(events, args.chunk)),
            "raw": (_raw_writer, _chunks(same_bytes, args.chunk)),
            "host": (_raw_writer, _chunks(host, args.chunk)),
        }
        names = list(writers)
        passes: dict[str, list[list[int]]] = {name: [] for name in writers}
        cpu_passes: dict[str, list[list[int]]] = {name: [] for name in writers}
        for rep in range(args.reps + 1):
            # Pass 0 warms up; the order of the writers turns each pass.
            order = names[rep % 3 :] + names[: rep % 3]
            took = _interleaved_pass(folder, writers, order)
            if rep:
                for name, timings in took.items():
                    passes[name].append([wall for wall, _ in timings])
                    cpu_passes[name].append([cpu for _, cpu in timings])
        lib_lat, raw_lat = _latencies(folder, events, same_bytes)
        profiler = cProfile.Profile()
        if args.profile:
            profiler.enable()
            for _ in _record_writer(folder / "profile.jsonl", writers["library"][1]):
                pass
            profiler.disable()

    (lib_best, lib_med), (raw_best, raw_med), (host_best, host_med) = (
        _summary(passes[name], n) for name in writers
    )
    # The target's baseline is the host's own objects written with orjson: what
    # os.write(fd, orjson.dumps(obj) + b"\n") costs for the events the host has.
    ratio = lib_best / host_best
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(
        f"record: {lib_best / 1000:.1f} us/event vs raw {host_best / 1000:.1f} us/event -> "
        f"{ratio:.2f}x (target <= {TARGET_RATIO}x) {verdict}  [raw: orjson.dumps of the host's "
        f"objects; median {lib_med / host_med:.2f}x]"
    )
    print(
        f"  vs the same bytes written raw (the library's lines parsed back, so orjson "
        f"needs no type hook): {raw_best / 1000:.1f} us/event -> {lib_best / raw_best:.2f}x "
        f"(median {lib_med / raw_med:.2f}x); library overhead "
        f"{(lib_best - raw_best) / 1000:.1f} us/event; "
        f"{size / (lib_best * n) * 1000:.0f} MB/s vs {size / (raw_best * n) * 1000:.0f} MB/s"
    )
    (lib_cpu, _), (raw_cpu, _), (host_cpu, _) = (_summary(cpu_passes[name], n) for name in writers)
    print(
        f"  CPU time (thread_time_ns, immune to preemption on a busy machine): "
        f"{lib_cpu / 1000:.1f} vs raw {raw_cpu / 1000:.1f} us/event -> {lib_cpu / raw_cpu:.2f}x; "
        f"vs host objects {lib_cpu / host_cpu:.2f}x"
    )
    lib_sorted, raw_sorted = sorted(lib_lat), sorted(raw_lat)
    print(
        f"  latency per event: p50 {percentile(lib_sorted, 0.5) / 1000:.1f} us, "
        f"p99 {percentile(lib_sorted, 0.99) / 1000:.1f} us "
        f"(raw p50 {percentile(raw_sorted, 0.5) / 1000:.1f} us, "
        f"p99 {percentile(raw_sorted, 0.99) / 1000:.1f} us)"
    )
    by_type: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for event, lib, raw in zip(events, lib_lat, raw_lat, strict=True):
        by_type[event.type].append((lib, raw))
    print("  per type, mean us of the latency pass:   library      raw    ratio")
    for kind, pairs in sorted(by_type.items(), key=lambda item: -sum(p[0] for p in item[1])):
        lib_mean = sum(p[0] for p in pairs) / len(pairs) / 1000
        raw_mean = sum(p[1] for p in pairs) / len(pairs) / 1000
        print(
            f"    {kind:<20} x{len(pairs):<5}         {lib_mean:9.1f} {raw_mean:8.1f} "
            f"{lib_mean / raw_mean:7.2f}x"
        )
    if args.profile:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    return 1 if args.strict and verdict != "PASS" else 0


if __name__ == "__main__":
    sys.exit(main())
