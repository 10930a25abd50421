"""Benchmark: ``read`` and ``Session.open`` against iterating lines with ``orjson.loads``.

The raw baseline is the least a reader of a JSONL file can do: iterate the
file's lines and parse each with ``orjson.loads``. ``read(path)`` also
validates every line (seq, session, types) and builds a Record whose typed
values are decoded on first access (a separate line measures a reader that
touches every record's data); ``Session.open`` validates every line and
takes the writer lock.

The readers take turns chunk by chunk (200 records each), so every chunk is
timed for all of them within milliseconds and a slow spell of the machine
hits them alike; the figures are the best (and median) of each chunk across
passes, summed. ``Session.open`` is timed whole (best and median of the
passes). The thread's CPU time is printed too: it does not count time spent
descheduled, so it is the steadier figure when other processes compete for
the cores.

Then the memory check: a fresh interpreter runs ``read`` over a large file
(1 GiB by default) and reports its peak resident set size (``VmHWM``).

Run: ``.venv/bin/python benchmarks/read.py [--size-mib N] [--throughput-mib N] [--reps N]``
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from benchmarks._workload import build_events, median, scratch_dir
from loopscribe import Session, read

TARGET_RATIO = 0.7
TARGET_PEAK_MIB = 100
CHUNK_RECORDS = 200
Timings = tuple[list[int], list[int]]
"""Wall-clock and CPU ns, per chunk."""


def generate(path: Path, size_bytes: int) -> int:
    """Record the shared workload into a new session file until it holds ``size_bytes``."""
    events = build_events(300)
    with Session.create(path, metadata={"title": "benchmark"}) as session:
        while session.size < size_bytes:
            with session.begin_run() as run:
                for event in events:
                    run.record(event)
                    if session.size >= size_bytes:
                        break
        return session.next_seq


def _interleaved(readers: dict[str, Iterator[Any]], order: list[str]) -> dict[str, Timings]:
    """Consume every reader, ``CHUNK_RECORDS`` items at a time from each in turn.

    Each chunk of the file is timed for all readers within milliseconds, so a
    slow spell of the machine hits them alike. Returns wall and CPU ns per chunk.
    """
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    took: dict[str, Timings] = {name: ([], []) for name in readers}
    live = list(order)
    while live:
        for name in list(live):
            items = readers[name]
            start, cpu_start = clock(), cpu_clock()
            taken = sum(1 for _ in islice(items, CHUNK_RECORDS))
            cpu = cpu_clock() - cpu_start
            wall = clock() - start
            if taken:
                took[name][0].append(wall)
                took[name][1].append(cpu)
            if taken < CHUNK_RECORDS:
                live.remove(name)
    return took


def _raw_lines(path: Path) -> Iterator[Any]:
    """The baseline: every line of the file, parsed."""
    loads = orjson.loads
    with path.open("rb", buffering=1 << 16) as stream:
        for line in stream:
            yield loads(line)


def _open_ns(path: Path) -> tuple[int, int]:
    """Wall and CPU ns ``Session.open`` takes (closing, which fsyncs, is not timed)."""
    start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
    session = Session.open(path)
    cpu = time.thread_time_ns() - cpu_start
    wall = time.perf_counter_ns() - start
    session.close()
    return wall, cpu


def _best_and_median(passes: list[list[int]]) -> tuple[float, float]:
    per_chunk = list(zip(*passes, strict=True))
    best = float(sum(min(times) for times in per_chunk))
    middle = sum(median([float(t) for t in times]) for times in per_chunk)
    return best, middle


def throughput(folder: Path, size_mib: int, reps: int) -> None:
    """Print read and Session.open throughput against the raw baseline."""
    path = folder / "throughput.jsonl"
    records = generate(path, size_mib << 20)
    size = path.stat().st_size
    print(
        f"throughput file: {size / 2**20:.1f} MiB, {records} records "
        f"({size / records / 1024:.1f} KiB/record); best and median of {reps} passes"
    )
    readers: dict[str, Callable[[], Iterator[Any]]] = {
        "raw": lambda: _raw_lines(path),
        "read": lambda: read(path),
        "read(decode=False)": lambda: read(path, decode=False),
        # Typed values are decoded on first access to a record's data: this
        # reader touches every record's data, so it pays for all of them.
        "read + decode every record": lambda: (r for r in read(path) if len(dict(r.data)) >= 0),
    }
    names = list(readers)
    passes: dict[str, list[list[int]]] = {name: [] for name in readers}
    cpu_passes: dict[str, list[list[int]]] = {name: [] for name in readers}
    opens: list[int] = []
    cpu_opens: list[int] = []
    for rep in range(reps + 1):
        # Pass 0 warms up; the order of the readers turns each pass.
        turn = rep % len(names)
        gc.collect()
        took = _interleaved(
            {name: make() for name, make in readers.items()}, names[turn:] + names[:turn]
        )
        if rep:
            for name, (wall, cpu) in took.items():
                passes[name].append(wall)
                cpu_passes[name].append(cpu)
        gc.collect()
        wall_open, cpu_open = _open_ns(path)
        if rep:
            opens.append(wall_open)
            cpu_opens.append(cpu_open)
    raw_best, raw_med = _best_and_median(passes["raw"])

    def mb_s(ns: float) -> float:
        return size / ns * 1000

    print(f"raw lines + orjson.loads: {mb_s(raw_best):.0f} MB/s (median {mb_s(raw_med):.0f})")
    for name in ("read", "read(decode=False)", "read + decode every record"):
        best, med = _best_and_median(passes[name])
        ratio = raw_best / best
        verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
        target = f"(target >= {TARGET_RATIO}x) {verdict}" if "every" not in name else "(no target)"
        print(
            f"{name}: {mb_s(best):.0f} MB/s vs raw {mb_s(raw_best):.0f} MB/s -> {ratio:.2f}x "
            f"{target}; median {raw_med / med:.2f}x"
        )
    # Session.open is one call, timed whole: against whole raw passes, not best chunks.
    raw_whole = [float(sum(p)) for p in passes["raw"]]
    open_best, open_med = float(min(opens)), median([float(t) for t in opens])
    ratio = min(raw_whole) / open_best
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(
        f"Session.open validate: {mb_s(open_best):.0f} MB/s vs raw {mb_s(min(raw_whole)):.0f} "
        f"MB/s (whole passes) -> {ratio:.2f}x (target >= {TARGET_RATIO}x) {verdict}; "
        f"median {median(raw_whole) / open_med:.2f}x"
    )
    raw_cpu, _ = _best_and_median(cpu_passes["raw"])
    cpu_ratios = [
        f"{name} {raw_cpu / _best_and_median(cpu_passes[name])[0]:.2f}x"
        for name in ("read", "read(decode=False)")
    ]
    raw_cpu_whole = min(sum(p) for p in cpu_passes["raw"])
    cpu_ratios.append(f"Session.open {raw_cpu_whole / min(cpu_opens):.2f}x")
    print(
        f"CPU time (thread_time_ns, immune to preemption): raw {mb_s(raw_cpu):.0f} MB/s; "
        + ", ".join(cpu_ratios)
    )
    path.unlink()


def _peak_rss_kib() -> tuple[int, int]:
    """``VmHWM`` from ``/proc/self/status`` and ``ru_maxrss``, both in KiB."""
    hwm = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return hwm, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child_read(path: str) -> None:
    """In the fresh interpreter: read every record of ``path`` and print the peak RSS as JSON."""
    baseline, _ = _peak_rss_kib()
    start = time.perf_counter_ns()
    records = 0
    for _ in read(path):
        records += 1
    took = time.perf_counter_ns() - start
    peak, maxrss = _peak_rss_kib()
    report = {"records": records, "baseline": baseline, "peak": peak, "maxrss": maxrss, "ns": took}
    print(json.dumps(report))


def memory(folder: Path, size_mib: int) -> None:
    """Print the peak RSS of a fresh interpreter that reads a ``size_mib`` file."""
    path = folder / "memory.jsonl"
    start = time.perf_counter()
    generate(path, size_mib << 20)
    size = path.stat().st_size
    print(f"memory file: {size / 2**20:.0f} MiB, written in {time.perf_counter() - start:.1f} s")
    try:
        out = subprocess.run(
            [sys.executable, __file__, "--child-read", str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        path.unlink()
    report = json.loads(out)
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the image before
    # exec (here a fork of this larger process), so it overstates the child.
    peak_mib = report["peak"] / 1024
    verdict = "PASS" if peak_mib < TARGET_PEAK_MIB else "FAIL"
    print(
        f"read memory: {size / 2**20:.0f} MiB file, {report['records']} records, peak RSS "
        f"{peak_mib:.1f} MiB (after imports {report['baseline'] / 1024:.1f} MiB) "
        f"(target < {TARGET_PEAK_MIB} MiB) {verdict}; "
        f"{size / report['ns'] * 1000:.0f} MB/s"
    )


def main() -> int:
    """Run the throughput comparison and the memory check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="memory-check file size")
    parser.add_argument("--throughput-mib", type=int, default=64, help="throughput file size")
    parser.add_argument("--reps", type=int, default=5, help="timed passes of each kind")
    parser.add_argument("--child-read", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_read:
        child_read(args.child_read)
        return 0
    with scratch_dir() as folder:
        throughput(folder, args.throughput_mib, args.reps)
        memory(folder, args.size_mib)
    return 0


if __name__ == "__main__":
    sys.exit(main())
