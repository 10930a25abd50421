"""Benchmark: LoopscribeSessionStore.append per entry vs the importer per line, and span latency.

Workload: the real Claude Code transcript with a subagent and a compaction
(``tests/data/transcripts/claude-code/4d5611e5-…``, 1,661 lines with its
subagents), fed to the store in the order Claude Code wrote the lines, in
SDK flushes of 1, 100 and 500 entries coalesced per file (the SDK's eager
mode sends about one frame per append; its batched mode a turn, or 500
entries, per flush).

1. Cost per entry. Baseline, measured in the same run with passes taking
   turns: ``import_transcript`` of the same files, per line (read, parse,
   map, write in 1 MiB blocks, one fsync). The store does the same mapping
   and also writes each entry verbatim (a ``source_entry`` record), writes
   every record at once (no blocks: observers see it written) and hops to a
   worker thread per append. Its synchronous part alone (``_Session.append``
   on this thread) is measured too, to tell the hop from the work.
2. Latency from ``append`` returning to a span reaching an in-memory
   exporter, per span, by the append that wrote its last record. With a
   ``SimpleSpanProcessor`` the span is exported on the worker before
   ``append`` returns (a negative figure: how long before). With a
   ``BatchSpanProcessor`` it waits for the processor's schedule delay.

3. Side by side with the code of an earlier commit (``--baseline REV``,
   extracted with ``git archive``; each side in its own process, passes
   taking turns): one store process appending to several sessions in
   flushes of 100 entries, then ``close``, with the fsyncs each pass paid.
   The store promises an ``append`` that returns with its entries in the
   file (not fsynced: no fsync per append or per entry, before or after)
   and a ``close`` that fsyncs every file before releasing it, which it now
   does once per file, all together, instead of twice for a file holding
   an open run.

Run: ``.venv/bin/python benchmarks/claude_agent_sdk_store.py [--reps N] [--baseline REV]``
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from claude_agent_sdk.types import SessionKey, SessionStoreEntry
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks._workload import median, percentile, scratch_dir
from loopscribe import Record
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore
from loopscribe.importers.claude_code import import_transcript

TRANSCRIPT = (
    Path(__file__).resolve().parents[1]
    / "tests/data/transcripts/claude-code/4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
)
KEY: SessionKey = {"project_key": "bench", "session_id": "s"}
Flush = tuple[SessionKey, list[SessionStoreEntry]]


def written_order(transcript: Path) -> list[tuple[str | None, dict[str, Any]]]:
    """The transcript's and its subagents' lines in the order Claude Code wrote them."""
    files: list[tuple[str | None, Path]] = [(None, transcript)]
    folder = transcript.parent / transcript.stem / "subagents"
    files += [(f"subagents/{p.stem}", p) for p in sorted(folder.glob("agent-*.jsonl"))]
    streams = []
    for rank, (subpath, path) in enumerate(files):
        stream, last = [], ""
        for index, raw in enumerate(path.read_bytes().splitlines()):
            entry = orjson.loads(raw)
            last = entry.get("timestamp") or last
            stream.append(((last, rank, index), subpath, entry))
        streams.append(stream)
    return [(subpath, entry) for _, subpath, entry in heapq.merge(*streams, key=lambda t: t[0])]


def flushes(entries: list[tuple[str | None, dict[str, Any]]], size: int) -> list[Flush]:
    out: list[Flush] = []
    for start in range(0, len(entries), size):
        by_file: dict[str | None, list[dict[str, Any]]] = {}
        for subpath, entry in entries[start : start + size]:
            by_file.setdefault(subpath, []).append(entry)
        for subpath, batch in by_file.items():
            key = cast(SessionKey, {**KEY, "subpath": subpath}) if subpath else KEY
            out.append((key, cast(list[SessionStoreEntry], batch)))
    return out


# -- 1. cost per entry -------------------------------------------------------------------


def import_pass(folder: Path) -> float:
    start = time.perf_counter()
    import_transcript(TRANSCRIPT, folder, finished=False)
    return time.perf_counter() - start


def store_pass(folder: Path, plan: Sequence[Flush]) -> float:
    async def feed(store: LoopscribeSessionStore) -> None:
        for key, batch in plan:
            await store.append(key, batch)

    start = time.perf_counter()
    with LoopscribeSessionStore(folder) as store:
        asyncio.run(feed(store))
    return time.perf_counter() - start


def sync_pass(folder: Path, plan: Sequence[Flush]) -> float:
    """The store's work without the thread hop: ``_Session.append`` called directly."""
    start = time.perf_counter()
    with LoopscribeSessionStore(folder) as store:
        session, _ = store._session(KEY)
        for key, batch in plan:
            session.append(key.get("subpath"), list(batch))
    return time.perf_counter() - start


def cost(reps: int, entries: list[tuple[str | None, dict[str, Any]]]) -> None:
    lines = len(entries)
    plans = {size: flushes(entries, size) for size in (1, 100, 500)}
    times: dict[str, list[float]] = {"import": []}
    for size in plans:
        times[f"store/{size}"] = []
        times[f"sync/{size}"] = []
    with scratch_dir() as root:
        for rep in range(reps):
            times["import"].append(import_pass(root / f"import{rep}"))
            for size, plan in plans.items():
                times[f"store/{size}"].append(store_pass(root / f"store{size}-{rep}", plan))
                times[f"sync/{size}"].append(sync_pass(root / f"sync{size}-{rep}", plan))
    base = min(times["import"]) / lines * 1e6
    print(f"per entry, best of {reps} interleaved passes ({lines} lines, median in brackets):")
    mid = median(times["import"]) / lines * 1e6
    print(f"  import_transcript      {base:7.1f} µs/line  ({mid:.1f})")
    for size in plans:
        for kind, label in (("store", "append"), ("sync", "  same, no thread hop")):
            best = min(times[f"{kind}/{size}"]) / lines * 1e6
            mid = median(times[f"{kind}/{size}"]) / lines * 1e6
            name = f"{label} ({size}/flush)" if kind == "store" else label
            print(f"  {name:<22} {best:7.1f} µs/entry ({mid:.1f})  {best / base:5.2f}x the import")


# -- 2. latency to the exporter ----------------------------------------------------------


class StampingExporter(InMemorySpanExporter):
    """Remembers when each span reached it."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: list[tuple[float, ReadableSpan]] = []
        self._stamp_lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        now = time.perf_counter()
        with self._stamp_lock:
            self.arrived.extend((now, span) for span in spans)
        return super().export(spans)


def latency(entries: list[tuple[str | None, dict[str, Any]]], size: int) -> None:
    plan = flushes(entries, size)
    for label, make in (
        ("SimpleSpanProcessor", SimpleSpanProcessor),
        ("BatchSpanProcessor (200 ms delay)", _batch),
    ):
        exporter = StampingExporter()
        processor: SpanProcessor = make(exporter)
        waits = sorted(_waits(plan, exporter, processor))
        processor.shutdown()
        print(
            f"  {label:<34} {len(waits)} spans: p50 {percentile(waits, 0.5) / 1000:+.2f} ms, "
            f"p99 {percentile(waits, 0.99) / 1000:+.2f} ms, max {waits[-1] / 1000:+.2f} ms"
        )


def _waits(
    plan: Sequence[Flush], exporter: StampingExporter, processor: SpanProcessor
) -> list[int]:
    """Microseconds from the return of the append that ended each span to its export."""
    returned: list[float] = []
    seq_append: dict[int, int] = {}
    current = [0]

    def observe(record: Record) -> None:
        seq_append[record.seq] = current[0]

    async def feed(store: LoopscribeSessionStore) -> None:
        for index, (key, batch) in enumerate(plan):
            current[0] = index
            await store.append(key, batch)
            returned.append(time.perf_counter())

    with (
        scratch_dir() as root,
        LoopscribeSessionStore(root, observers=[observe], span_processor=processor) as store,
    ):
        asyncio.run(feed(store))
        processor.force_flush()
    waits = []
    for arrived, span in exporter.arrived:
        last = (span.attributes or {}).get("loopscribe.seq.last")
        if isinstance(last, int) and last in seq_append:
            waits.append(int((arrived - returned[seq_append[last]]) * 1e6))
    return waits


def _batch(exporter: InMemorySpanExporter) -> SpanProcessor:
    return BatchSpanProcessor(exporter, schedule_delay_millis=200)


# -- 3. side by side with an earlier commit ------------------------------------------------

_SIDE_CHILD = """
import asyncio, json, os, sys, time
from pathlib import Path
spec = json.loads(sys.argv[1])
fsyncs = [0]
real = os.fsync
def counted(fd):
    fsyncs[0] += 1
    real(fd)
os.fsync = counted
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore
plan = json.loads(Path(spec["plan"]).read_bytes())
async def feed(store):
    for key, batch in plan:
        await store.append(key, batch)
start, cpu = time.perf_counter_ns(), time.process_time_ns()
with LoopscribeSessionStore(spec["out"]) as store:
    asyncio.run(feed(store))
print(time.perf_counter_ns() - start, time.process_time_ns() - cpu, fsyncs[0])
"""


def side_by_side(entries: list[tuple[str | None, dict[str, Any]]], reps: int, rev: str) -> None:
    """The store now against ``rev``'s, each in its own process, passes taking turns."""
    from benchmarks.importers import _baseline_src

    sessions = 8
    plan: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for key, batch in flushes(entries, 100):
        for n in range(sessions):
            plan.append(({**key, "session_id": f"s{n}"}, cast(list[dict[str, Any]], batch)))
    with scratch_dir() as root:
        srcs = {
            "baseline": _baseline_src(rev, root / "baseline"),
            "now": Path(__file__).resolve().parents[1] / "src",
        }
        (root / "plan.json").write_bytes(orjson.dumps(plan))
        runs: dict[str, list[tuple[int, int, int]]] = {name: [] for name in srcs}
        load = os.getloadavg()[0]
        for rep in range(reps):
            for name, src in srcs.items():
                spec = {"plan": str(root / "plan.json"), "out": str(root / f"{name}{rep}")}
                done = subprocess.run(
                    [sys.executable, "-c", _SIDE_CHILD, json.dumps(spec)],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(src)},
                )
                wall, cpu, syncs = (int(x) for x in done.stdout.split()[-3:])
                runs[name].append((wall, cpu, syncs))
    count = len(entries) * sessions
    print(
        f"side by side with {rev}: {sessions} sessions x {len(entries)} entries, flushes of "
        f"100, then close; best of {reps} interleaved passes; load average "
        f"{load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    best = {name: min(r[0] for r in rs) for name, rs in runs.items()}
    for name, rs in runs.items():
        cpu = min(r[1] for r in rs)
        print(
            f"  {name:<9} {best[name] / count / 1000:6.1f} µs/entry wall, "
            f"{cpu / count / 1000:6.1f} µs/entry CPU, {rs[0][2]} fsyncs per pass "
            f"({rs[0][2] / sessions:.1f} per session)"
        )
    print(f"  now / baseline (wall): {best['now'] / best['baseline']:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--baseline", help="commit to compare with, side by side (git archive)")
    parser.add_argument(
        "--side-by-side-only", action="store_true", help="only the comparison with --baseline"
    )
    args = parser.parse_args()
    entries = written_order(TRANSCRIPT)
    if args.baseline:
        side_by_side(entries, args.reps, args.baseline)
        if args.side_by_side_only:
            return
    cost(args.reps, entries)
    print("from append returning to the span at an in-memory exporter (negative: before):")
    latency(entries, 100)


if __name__ == "__main__":
    main()
