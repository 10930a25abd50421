"""Benchmark: transcript import throughput against reading and parsing the same lines.

The raw baseline is the least any importer must do: iterate every line of
the transcripts (main files and subagent files) and parse each with
``orjson.loads``. The import does that too, maps each line to events,
writes them to a new loopscribe session (one ``os.write`` per record, an
fsync when it closes) and saves the cursor. Passes alternate; each figure is
the best of the passes. Target: the import runs at least 0.4x the raw rate.

Workload: the real transcripts in ``../shared/data/transcripts`` (or
``LOOPSCRIBE_TRANSCRIPTS``), each continued with copies of itself under
fresh IDs until it is ``--min-mib`` long, as a long session would be (the
real files are small test fixtures, on which fixed costs would dominate;
those are measured apart, per transcript).

Where the time goes, to tell the importer's own work from the session
writer's: the same import with ``Run.record`` and ``fsync`` stubbed out.

Then the memory check: a fresh interpreter imports one large Claude Code
transcript (``--size-mib``) and reports its peak resident set size, which
must not grow with the transcript.

Run: ``.venv/bin/python benchmarks/importers.py [--min-mib N] [--reps N] [--size-mib N]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from benchmarks._workload import median, scratch_dir
from loopscribe import Run
from loopscribe.importers import claude_code, codex

TARGET_RATIO = 0.4
TARGET_PEAK_MIB = 100
TRANSCRIPTS = Path(
    os.environ.get(
        "LOOPSCRIBE_TRANSCRIPTS",
        Path(__file__).resolve().parents[2] / "shared" / "data" / "transcripts",
    )
)
# Rewritten per copy so every copy has its own responses, tool calls and subagents.
_ID_PREFIXES = (b'"msg_', b'"toolu_', b'"req_', b'"call_', b'"agentId":"')


def _fresh_ids(data: bytes, copy: int) -> bytes:
    tag = f"c{copy}x".encode()
    for prefix in _ID_PREFIXES:
        data = data.replace(prefix, prefix + tag)
    return data


def _fresh_name(name: str, copy: int) -> str:
    """A subagent file name matching the rewritten ``agentId`` of the copy."""
    for prefix in ("agent-acompact-", "agent-"):
        if name.startswith(prefix):
            return f"{prefix}c{copy}x{name.removeprefix(prefix)}"
    return name


def _continued(source: Path, target: Path, min_bytes: int) -> int:
    """Write ``source`` followed by copies with fresh IDs until ``min_bytes``; returns copies."""
    data = source.read_bytes()
    copies = max(1, -(-min_bytes // len(data)))
    with target.open("wb") as out:
        for copy in range(copies):
            out.write(_fresh_ids(data, copy))
    subs = source.parent / source.stem / "subagents"
    if subs.is_dir():
        folder = target.parent / target.stem / "subagents"
        folder.mkdir(parents=True, exist_ok=True)
        for sub in sorted(subs.glob("*.jsonl")):
            for copy in range(copies):
                sub_data = _fresh_ids(sub.read_bytes(), copy)
                (folder / _fresh_name(sub.name, copy)).write_bytes(sub_data)
    return copies


def build(folder: Path, min_bytes: int) -> tuple[list[Path], list[Path], list[Path]]:
    """The workload; returns (Claude Code transcripts, Codex rollouts, every file to read)."""
    claude: list[Path] = []
    rollouts: list[Path] = []
    for agent, found in (("claude-code", claude), ("codex", rollouts)):
        (folder / agent).mkdir(parents=True, exist_ok=True)
        for source in sorted((TRANSCRIPTS / agent).glob("*.jsonl")):
            target = folder / agent / source.name
            _continued(source, target, min_bytes)
            found.append(target)
    files = sorted(p for p in folder.rglob("*.jsonl"))
    return claude, rollouts, files


def raw_pass(files: list[Path]) -> int:
    """The baseline: read and parse every line; returns the ns taken."""
    loads = orjson.loads
    start = time.perf_counter_ns()
    for path in files:
        with path.open("rb", buffering=1 << 16) as stream:
            for line in stream:
                loads(line)
    return time.perf_counter_ns() - start


def import_pass(claude: list[Path], rollouts: list[Path], out: Path) -> tuple[int, int]:
    """Import every transcript into a fresh folder; returns (ns, records written)."""
    records = 0
    start = time.perf_counter_ns()
    for path in claude:
        records += claude_code.import_transcript(path, out / "claude", finished=True).records
    for path in rollouts:
        records += codex.import_transcript(path, out / "codex", finished=True).records
    return time.perf_counter_ns() - start, records


@contextmanager
def _writer_stubbed() -> Iterator[None]:
    """Run.record and fsync do nothing: what is left is the importer's own work."""
    record, fsync = Run.record, os.fsync
    Run.record = lambda self, event: None  # type: ignore[method-assign]
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        Run.record = record  # type: ignore[method-assign]
        os.fsync = fsync


def throughput(folder: Path, min_mib: float, reps: int) -> bool:
    """Print import throughput against the raw baseline; whether it met the target."""
    claude, rollouts, files = build(folder / "src", int(min_mib * (1 << 20)))
    size = sum(p.stat().st_size for p in files)
    print(
        f"workload: {len(claude)} Claude Code transcripts and {len(rollouts)} Codex rollouts, "
        f"each continued to >= {min_mib:g} MiB ({len(files)} files, {size / 2**20:.1f} MiB); "
        f"best and median of {reps} passes"
    )
    times: dict[str, list[int]] = {"raw": [], "import": [], "importer only": []}
    records = 0
    for rep in range(reps + 1):
        # Interleaved, so drift in the machine's speed hits all alike; pass 0 warms up.
        gc.collect()
        took_raw = raw_pass(files)
        gc.collect()
        took_import, records = import_pass(claude, rollouts, folder / f"out{rep}")
        gc.collect()
        with _writer_stubbed():
            took_own, _ = import_pass(claude, rollouts, folder / f"own{rep}")
        if rep:
            times["raw"].append(took_raw)
            times["import"].append(took_import)
            times["importer only"].append(took_own)
        shutil.rmtree(folder / f"out{rep}")
        shutil.rmtree(folder / f"own{rep}")

    def mb_s(ns: float) -> float:
        return size / ns * 1000

    raw_best = min(times["raw"])
    raw_median = median([float(t) for t in times["raw"]])
    print(f"raw lines + orjson.loads: {mb_s(raw_best):.1f} MB/s")
    passed = False
    for name in ("import", "importer only"):
        best = min(times[name])
        ratio = raw_best / best
        med_ratio = raw_median / median([float(t) for t in times[name]])
        if name == "import":
            passed = ratio >= TARGET_RATIO
            verdict = "PASS" if passed else "FAIL"
            print(
                f"import: {mb_s(best):.1f} MB/s ({records} records a pass) vs raw "
                f"{mb_s(raw_best):.1f} MB/s -> {ratio:.2f}x (target >= {TARGET_RATIO}x) "
                f"{verdict}; median {med_ratio:.2f}x"
            )
        else:
            print(
                f"  of which the importer (parse, map; writer stubbed): {mb_s(best):.1f} MB/s "
                f"-> {ratio:.2f}x raw; the session writer (Run.record, fsync) takes the rest"
            )
    return passed


def per_transcript(folder: Path, reps: int) -> None:
    """Print the fixed cost of importing one small transcript (create, fsyncs, cursor)."""
    source = TRANSCRIPTS / "claude-code" / "hello-world-script.jsonl"
    took = []
    for rep in range(reps * 4):
        start = time.perf_counter_ns()
        claude_code.import_transcript(source, folder / f"small{rep}", finished=True)
        took.append(time.perf_counter_ns() - start)
    print(
        f"per transcript: {median([float(t) for t in took]) / 1e6:.1f} ms to import a "
        f"{source.stat().st_size / 1024:.0f} KiB transcript (session file, 3 fsyncs, cursor)"
    )


def big_transcript(path: Path, size_bytes: int) -> int:
    """Write one Claude Code transcript of about ``size_bytes``: the real one, repeated."""
    source = TRANSCRIPTS / "claude-code" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    data = source.read_bytes()
    written = 0
    with path.open("wb") as out:
        copy = 0
        while written < size_bytes:
            chunk = _fresh_ids(data, copy)
            out.write(chunk)
            written += len(chunk)
            copy += 1
    return written


def _peak_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child_import(path: str, out: str) -> None:
    """In the fresh interpreter: import ``path`` and print the peak RSS as JSON."""
    baseline = _peak_kib()
    start = time.perf_counter_ns()
    report = claude_code.import_transcript(Path(path), Path(out), finished=True)
    took = time.perf_counter_ns() - start
    result = {"records": report.records, "baseline": baseline, "peak": _peak_kib(), "ns": took}
    print(json.dumps(result))


def memory(folder: Path, size_mib: int) -> bool:
    """Print the peak RSS of a fresh interpreter importing a ``size_mib`` transcript."""
    path = folder / "big.jsonl"
    size = big_transcript(path, size_mib << 20)
    out = subprocess.run(
        [sys.executable, __file__, "--child-import", str(path), str(folder / "big-out")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    report = json.loads(out)
    peak_mib = float(report["peak"]) / 1024
    verdict = "PASS" if peak_mib < TARGET_PEAK_MIB else "FAIL"
    print(
        f"import memory: {size / 2**20:.0f} MiB transcript, {report['records']} records, peak RSS "
        f"{peak_mib:.1f} MiB (after imports {report['baseline'] / 1024:.1f} MiB) "
        f"(target < {TARGET_PEAK_MIB} MiB) {verdict}; {size / report['ns'] * 1000:.1f} MB/s"
    )
    return peak_mib < TARGET_PEAK_MIB


def main() -> int:
    """Run the throughput comparison and the memory check."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--min-mib", type=float, default=4, help="continue each transcript to this size"
    )
    parser.add_argument("--reps", type=int, default=5, help="timed passes of each kind")
    parser.add_argument("--size-mib", type=int, default=128, help="memory-check transcript size")
    parser.add_argument("--child-import", nargs=2, metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_import:
        child_import(*args.child_import)
        return 0
    if not (TRANSCRIPTS / "claude-code").is_dir():
        print(f"no transcripts in {TRANSCRIPTS}; set LOOPSCRIBE_TRANSCRIPTS", file=sys.stderr)
        return 2
    with scratch_dir() as folder:
        fast = throughput(folder, args.min_mib, args.reps)
        per_transcript(folder, args.reps)
        small = memory(folder, args.size_mib)
    return 0 if fast and small else 1


if __name__ == "__main__":
    sys.exit(main())
