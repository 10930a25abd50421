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

Run: ``.venv/bin/python benchmarks/follow.py [--events N] [--spacing-ms F] [--strict]``
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import build_events, scratch_dir
from loopscribe import Session
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--spacing-ms", type=float, default=5.0)
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()
    print(f"follow: {args.events} events {args.spacing_ms} ms apart; wake: {watch_mode()}")
    ok = True
    for use_async in (False, True):
        print("  async for, one event loop:" if use_async else "  for, one thread each:")
        for n in (1, 10, 100):
            base = measure(n, args.events, args.spacing_ms, False, use_async)
            shared = measure(n, args.events, args.spacing_ms, True, use_async)
            p99, b99 = _p(shared, 0.99), _p(base, 0.99)
            met = p99 < TARGET_P99_MS
            ok &= met
            print(
                f"    {n:>3} followers: shared p50 {_p(shared, 0.5):6.2f} ms, p99 {p99:6.2f} ms"
                f" | baseline (one poller each) p50 {_p(base, 0.5):6.2f} ms, p99 {b99:7.2f} ms"
                f" | p99 {b99 / p99:5.1f}x lower; target p99 < {TARGET_P99_MS:.0f} ms "
                f"{'met' if met else 'MISSED'}"
            )
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    raise SystemExit(main())
