"""Benchmark: write-to-delivery latency of ``follow`` with many followers of one file.

A writer records events a few ms apart into one session while N followers
(1, 10 and 100 in this process) follow the file with ``loopscribe.live.follow``:
each on its own thread (``for``), and again as N tasks of one asyncio event
loop (``async for``, as in a web server that feeds N browser tabs).
Latency runs from the host's ``Run.record`` call to each follower's receipt
of that record (encoding and the write included); the figure is the p99
over every (record, follower) pair.

Each N is measured twice, interleaved in the same run: the shared reader
(the default: one reader thread per file, woken by inotify where available)
and the baseline, ``follow(..., shared=False)``, where every follower polls
and decodes the file on its own (default 20 ms poll interval). Target: p99
under 50 ms at every N. The machine this runs on may be loaded: read the
ratio as well as the absolute figure.

Threads also get two *floors*, measured in the same rounds: the same records
handed from one thread to N threads with no file, no reader and no decoding
at all — through one ``SimpleQueue`` per thread (how the shared reader
delivers), and through one ``Condition`` over a shared list that each thread
reads from its own position (the alternative: one notify, no per-follower
queue). What the floors cost is what any design that gives each thread its
own records pays for the thread hand-offs alone.

Each round measures every variant once, interleaved; the figures are the
median over ``--rounds`` of each round's p99 (and p50).

Run: ``.venv/bin/python benchmarks/follow.py [--events N] [--spacing-ms F] [--rounds N]
[--followers 1,10,100] [--threads-only] [--strict]``
"""

from __future__ import annotations

import argparse
import asyncio
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import build_events, scratch_dir
from loopscribe import Record, Session
from loopscribe.live import follow, watch_mode

TARGET_P99_MS = 50.0


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(
    followers: int, events: int, spacing_ms: float, shared: bool, use_async: bool = False
) -> list[float]:
    """Latencies in ms of every (record, follower) pair."""
    workload = build_events(events // 6 + 10)[:events]
    sent: dict[int, int] = {}
    received: list[dict[int, int]] = [{} for _ in range(followers)]
    arrived = threading.Semaphore(0)  # one release per follower that is following
    stop = threading.Event()
    errors: list[BaseException] = []
    with scratch_dir() as folder:
        path = folder / "follow.jsonl"
        with Session.create(path) as session:

            def consume(i: int) -> None:
                clock, got = time.perf_counter_ns, received[i]
                first = True
                try:
                    for record in follow(path, stop=stop, shared=shared):
                        got[record.seq] = clock()
                        if first:
                            first = False
                            arrived.release()
                except BaseException as exc:  # reported below
                    errors.append(exc)

            async def consume_async(i: int) -> None:
                clock, got = time.perf_counter_ns, received[i]
                first = True
                async for record in follow(path, stop=stop, shared=shared):
                    got[record.seq] = clock()
                    if first:
                        first = False
                        arrived.release()

            async def all_async() -> None:
                try:
                    await asyncio.gather(*(consume_async(i) for i in range(followers)))
                except BaseException as exc:  # reported below
                    errors.append(exc)

            if use_async:
                threads = [threading.Thread(target=asyncio.run, args=(all_async(),))]
            else:
                threads = [threading.Thread(target=consume, args=(i,)) for i in range(followers)]
            for t in threads:
                t.start()
            for _ in range(followers):  # each has the session_start: it is following
                if not arrived.acquire(timeout=60):
                    raise TimeoutError("a follower did not start within 60 s")
            time.sleep(0.2)  # and has joined the shared reader
            period = int(spacing_ms * 1e6)
            with session.begin_run() as run:
                clock = time.perf_counter_ns
                due = clock()
                for event in workload:
                    due += period
                    while (wait := due - clock()) > 0:
                        time.sleep(wait / 1e9)
                    seq = session.next_seq
                    sent[seq] = clock()
                    run.record(event)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not all(set(sent) <= set(r) for r in received):
                time.sleep(0.01)
            stop.set()
            for t in threads:
                t.join(10)
    if errors:
        raise errors[0]
    missing = sum(len(set(sent) - set(r)) for r in received)
    if missing:
        raise AssertionError(f"{missing} (record, follower) deliveries missing")
    return [(r[seq] - at) / 1e6 for r in received for seq, at in sent.items()]


def floor(followers: int, events: int, spacing_ms: float, kind: str) -> list[float]:
    """Latencies in ms of handing each of ``events`` Records to ``followers`` threads, no file.

    ``kind``: ``"queue"`` (one SimpleQueue per thread) or ``"condition"``
    (one Condition over a shared list, each thread at its own position).
    """
    with scratch_dir() as folder:
        path = folder / "floor.jsonl"
        with Session.create(path) as session, session.begin_run() as run:
            records = [run.record(e) for e in build_events(events // 6 + 10)[:events]]
    items = [r for r in records if r is not None]
    sent: dict[int, int] = {}
    received: list[dict[int, int]] = [{} for _ in range(followers)]
    stop = threading.Event()
    clock = time.perf_counter_ns
    consume: Callable[[int], None]
    publish: Callable[[Record], None]
    if kind == "queue":
        inboxes: list[queue.SimpleQueue[Record]] = [queue.SimpleQueue() for _ in range(followers)]

        def consume(i: int) -> None:
            got, get = received[i], inboxes[i].get
            while True:
                try:
                    record = get(timeout=0.1)
                except queue.Empty:
                    if stop.is_set():
                        return
                    continue
                got[record.seq] = clock()

        def publish(record: Record) -> None:
            for inbox in inboxes:
                inbox.put(record)

    else:
        changed = threading.Condition()
        shared: list[Record] = []

        def consume(i: int) -> None:
            got, position = received[i], 0
            while not stop.is_set():
                with changed:
                    if len(shared) <= position:
                        changed.wait(0.1)
                    batch = shared[position:]
                position += len(batch)
                for record in batch:
                    got[record.seq] = clock()

        def publish(record: Record) -> None:
            with changed:
                shared.append(record)
                changed.notify_all()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(followers)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    period, due = int(spacing_ms * 1e6), clock()
    for record in items:
        due += period
        while (wait := due - clock()) > 0:
            time.sleep(wait / 1e9)
        sent[record.seq] = clock()
        publish(record)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(set(sent) <= set(r) for r in received):
        time.sleep(0.01)
    stop.set()
    for t in threads:
        t.join(10)
    missing = sum(len(set(sent) - set(r)) for r in received)
    if missing:
        raise AssertionError(f"floor {kind}: {missing} deliveries missing")
    return [(r[seq] - at) / 1e6 for r in received for seq, at in sent.items()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--spacing-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per N")
    parser.add_argument("--followers", default="1,10,100", help="comma-separated N")
    parser.add_argument("--threads-only", action="store_true", help="skip the async followers")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    counts = [int(n) for n in args.followers.split(",")]
    print(
        f"follow: {args.events} events {args.spacing_ms} ms apart; wake: {watch_mode()}; "
        f"median of {args.rounds} interleaved rounds"
    )
    ok = True
    for use_async in (False,) if args.threads_only else (False, True):
        print("  async for, one event loop:" if use_async else "  for, one thread each:")
        for n in counts:
            e, gap = args.events, args.spacing_ms
            variants: dict[str, Callable[[], list[float]]] = {
                "shared": partial(measure, n, e, gap, True, use_async),
                "baseline": partial(measure, n, e, gap, False, use_async),
            }
            if not use_async:
                variants["floor queue"] = partial(floor, n, e, gap, "queue")
                variants["floor condition"] = partial(floor, n, e, gap, "condition")
            p50s: dict[str, list[float]] = {name: [] for name in variants}
            p99s: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(args.rounds):
                for name, run in variants.items():
                    latencies = run()
                    p50s[name].append(_p(latencies, 0.5))
                    p99s[name].append(_p(latencies, 0.99))
            p99 = statistics.median(p99s["shared"])
            met = p99 < TARGET_P99_MS
            ok &= met
            print(
                f"    {n:>3} followers: shared p99 {p99:6.2f} ms "
                f"(p50 {statistics.median(p50s['shared']):5.2f}; rounds "
                f"{', '.join(f'{v:.1f}' for v in p99s['shared'])}); target p99 < "
                f"{TARGET_P99_MS:.0f} ms {'met' if met else 'MISSED'}"
            )
            for name in variants:
                if name == "shared":
                    continue
                other = statistics.median(p99s[name])
                versus = (
                    f"shared p99 {other / p99:.1f}x lower"
                    if name == "baseline"
                    else f"shared p99 = {p99 / other:.2f}x this floor"
                )
                print(
                    f"          {name:>15}: p99 {other:7.2f} ms "
                    f"(p50 {statistics.median(p50s[name]):5.2f}; rounds "
                    f"{', '.join(f'{v:.1f}' for v in p99s[name])}) -> {versus}"
                )
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    raise SystemExit(main())
