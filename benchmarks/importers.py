"""Benchmark: transcript import throughput against reading and parsing the same lines.

The raw baseline is the least any importer must do: iterate every line of
the transcripts (main files and subagent files) and parse each with
``orjson.loads``. The import does that too, maps each line to events,
writes them to a new loopscribe session (in blocks of about 1 MiB, an fsync
when it closes) and saves the cursor. Passes alternate; each figure is the
best of the passes. Target: the import runs at least 0.5x the raw rate.

In the same passes: the import followed by the replay of the new session to
OpenTelemetry spans (``loopscribe import`` then ``loopscribe export``: the
spans encoded as OTLP protobuf with ``encode_otlp_protobuf`` as loopscribe's
exporters do, not sent; beside it the same with the SDK's encoder), and the peer
``agent-session-otel`` parsing the same files into its normalized events,
when it is installed (skipped with a note when not).

Workload: the real transcripts in ``tests/data/transcripts`` (or
``LOOPSCRIBE_TRANSCRIPTS``), each continued with copies of itself under
fresh IDs until it is ``--min-mib`` long, as a long session would be (the
real files are small test fixtures, on which fixed costs would dominate;
those are measured apart, per transcript).

Imports scrub secrets by default (``Redactor.default()``: the token shapes
and credential environment variables); the same passes import each
transcript with ``redact=False`` too, which prints what redaction costs.

Where the time goes, to tell the importer's own work from the session
writer's: the same import with ``Run._record``, ``BulkWriter.write``
and ``fsync`` stubbed out.
And a floor: each parsed line wrapped in a record envelope, encoded and
written in blocks, with no mapping at all (``floor_pass``), which bounds
what any importer that re-encodes the content it parses can reach.

Then the memory check: a fresh interpreter imports one large Claude Code
transcript (``--size-mib``), another one four times as large, and reports
their peak resident set sizes, which must not grow with the transcript.

First, side by side with the code of an earlier commit (``--baseline``,
extracted with ``git archive`` into a scratch folder; each child keeps its
bytecode in the scratch folder, as an installed package does): a folder of many
transcripts imported the way ``loopscribe import`` did it there (one
transcript after the other, each made durable alone) and the way it does
now, in one process (``--jobs 1``) and over every core, each in a fresh
interpreter, interleaved, against raw parsing and the passthrough floor of
the same files measured in the same passes.

Run: ``.venv/bin/python benchmarks/importers.py [--min-mib N] [--reps N] [--size-mib N]``
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from benchmarks._workload import median, scratch_dir
from loopscribe import BulkWriter, Run
from loopscribe.importers import claude_code, codex
from loopscribe.otel import encode_otlp_protobuf, replay

try:
    from agent_session_otel.adapters import ADAPTERS as PEER_ADAPTERS
    from agent_session_otel.otel_export import _run_export as peer_export
    from agent_session_otel.redaction import apply_redaction as peer_redaction
except ImportError:  # the peer is optional
    PEER_ADAPTERS = None

TARGET_RATIO = 0.5
TARGET_PEAK_MIB = 100
TARGET_PEAK_GROWTH = 1.25
"""The peak RSS importing a transcript 4x as large stays within this factor."""
TRANSCRIPTS = Path(
    os.environ.get(
        "LOOPSCRIBE_TRANSCRIPTS",
        Path(__file__).resolve().parents[1] / "tests" / "data" / "transcripts",
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


def floor_pass(files: list[Path], out: Path) -> int:
    """Less than any importer can do; returns the ns taken.

    Every parsed line becomes one record: an envelope around the whole
    parsed line, encoded with orjson and written in 1 MiB blocks. No mapping,
    no pairing, no checks: what is left of an import once its own logic is
    gone, to show how much of the gap to the raw rate is the re-encoding.
    """
    loads, dumps = orjson.loads, orjson.dumps
    start = time.perf_counter_ns()
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    block = bytearray()
    seq = 0
    try:
        for path in files:
            with path.open("rb", buffering=1 << 16) as stream:
                for number, line in enumerate(stream, 1):
                    obj = loads(line)
                    record = {
                        "session_id": "0" * 32,
                        "seq": seq,
                        "type": "source_event",
                        "run_id": "0" * 16,
                        "ts": obj.get("timestamp") if type(obj) is dict else None,
                        "data": {"line": obj, "source": {"file": path.name, "line": number}},
                    }
                    block += dumps(record, option=orjson.OPT_APPEND_NEWLINE)
                    seq += 1
                    if len(block) >= 1 << 20:
                        os.write(fd, block)
                        block.clear()
        os.write(fd, block)
    finally:
        os.close(fd)
    return time.perf_counter_ns() - start


def sdk_encoding(spans: Sequence[ReadableSpan]) -> bytes:
    """The OpenTelemetry SDK's encoder, as the SDK's own OTLP exporters run it."""
    return bytes(encode_spans(spans).SerializeToString())


class _Encoding(SpanProcessor):
    """Ends spans into batches of 512, each encoded as one OTLP protobuf request.

    By default with ``encode_otlp_protobuf``, what loopscribe's OTLP
    exporters send (the SDK's bytes, made by loopscribe).
    """

    def __init__(self, encode: Callable[[Sequence[ReadableSpan]], bytes]) -> None:
        self.encode = encode
        self.batch: list[ReadableSpan] = []
        self.spans = 0
        self.bytes = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.batch.append(span)
        if len(self.batch) >= 512:
            self.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if self.batch:
            self.bytes += len(self.encode(self.batch))
            self.spans += len(self.batch)
            self.batch.clear()
        return True


def replay_pass(
    folder: Path, encode: Callable[[Sequence[ReadableSpan]], bytes] = encode_otlp_protobuf
) -> tuple[int, int]:
    """Replay every session file in ``folder`` to encoded spans; returns (ns, spans)."""
    processor = _Encoding(encode)
    start = time.perf_counter_ns()
    for session in sorted(folder.glob("*.jsonl")):
        replay(session, processor)
    processor.force_flush()
    return time.perf_counter_ns() - start, processor.spans


class _EncodingExporter(SpanExporter):
    """Encodes each batch as one OTLP protobuf request, and sends nothing.

    With the SDK's encoder: the peer exports through the SDK's OTLP exporters.
    """

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        sdk_encoding(spans)
        return SpanExportResult.SUCCESS


def peer_pass(sources: list[Path], vendor: str) -> tuple[int, int]:
    """The peer on every file; returns the ns to parse and the ns to parse and export.

    Parsing yields its normalized events; its export (as ``agent-session-otel
    export`` does it, content redacted by default) makes spans of them,
    encoded as OTLP protobuf and not sent, as the replay here.
    """
    assert PEER_ADAPTERS is not None
    adapter = PEER_ADAPTERS[vendor]
    start = time.perf_counter_ns()
    for path in sources:
        for _event in adapter.parse_file(path):
            pass
    parsed = time.perf_counter_ns() - start
    gc.collect()
    start = time.perf_counter_ns()
    events = (event for path in sources for event in adapter.parse_file(path))
    peer_export(peer_redaction(events, include_content=False), _EncodingExporter(), "bench")
    return parsed, time.perf_counter_ns() - start


def import_one(path: Path, out: Path, *, redact: bool = True) -> tuple[int, int]:
    """Import one transcript into ``out``; returns (ns, records written)."""
    module = claude_code if path.parent.name == "claude-code" else codex
    start = time.perf_counter_ns()
    report = module.import_transcript(path, out, finished=True, redact=redact)
    return time.perf_counter_ns() - start, report.records


@contextmanager
def _writer_stubbed() -> Iterator[None]:
    """Run._record, the bulk writes and fsync do nothing: what is left is the importer's work."""
    record, bulk, fsync = Run._record, BulkWriter.write, os.fsync
    Run._record = lambda self, *event: None  # type: ignore[method-assign]
    BulkWriter.write = lambda self, *record: None  # type: ignore[method-assign]
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        Run._record = record  # type: ignore[method-assign]
        BulkWriter.write = bulk  # type: ignore[method-assign]
        os.fsync = fsync


def throughput(folder: Path, min_mib: float, reps: int) -> bool:
    """Print import throughput against the raw baseline, per transcript and in all."""
    claude, rollouts, files = build(folder / "src", int(min_mib * (1 << 20)))
    work = [(path, [f for f in files if f == path or path.stem in f.parts]) for path in claude]
    work += [(path, [path]) for path in rollouts]
    size = sum(p.stat().st_size for p in files)
    print(
        f"workload: {len(claude)} Claude Code transcripts and {len(rollouts)} Codex rollouts, "
        f"each continued to >= {min_mib:g} MiB ({len(files)} files, {size / 2**20:.1f} MiB); "
        f"best of {reps} passes"
    )
    if PEER_ADAPTERS is None:
        print(
            "peer: agent-session-otel is not installed, so its ratio is not measured "
            "(pip install agent-session-otel)"
        )
    best: dict[tuple[Path, str], int] = {}
    records: dict[Path, int] = {}
    spans: dict[Path, int] = {}
    for rep in range(reps + 1):
        # Interleaved, so drift in the machine's speed hits all alike; pass 0 warms up.
        for path, sources in work:
            gc.collect()
            took = {"raw": raw_pass(sources)}
            gc.collect()
            took["floor"] = floor_pass(sources, folder / "floor.jsonl")
            gc.collect()
            took["import"], records[path] = import_one(path, folder / f"out{rep}")
            gc.collect()
            took["unredacted"], _ = import_one(path, folder / f"plain{rep}", redact=False)
            took["replay"], spans[path] = replay_pass(folder / f"out{rep}")
            took["replay_sdk"], _ = replay_pass(folder / f"out{rep}", sdk_encoding)
            gc.collect()
            if PEER_ADAPTERS is not None:
                vendor = "claude_code" if path.parent.name == "claude-code" else "codex"
                took["peer"], took["peer_export"] = peer_pass(sources, vendor)
                gc.collect()
            with _writer_stubbed():
                took["own"], _ = import_one(path, folder / f"own{rep}")
            if rep:
                for kind, ns in took.items():
                    key = (path, kind)
                    best[key] = min(best.get(key, ns), ns)
        for session in (folder / f"out{rep}").iterdir():
            session.unlink()
        shutil.rmtree(folder / f"own{rep}")
        shutil.rmtree(folder / f"out{rep}")
        shutil.rmtree(folder / f"plain{rep}")

    print(
        f"{'transcript':<34} {'MiB':>5} {'rec/MiB':>7} {'raw MB/s':>9} {'import MB/s':>11} "
        f"{'ratio':>6} {'importer only':>13}"
    )
    totals = {
        "raw": 0,
        "import": 0,
        "unredacted": 0,
        "own": 0,
        "floor": 0,
        "replay": 0,
        "replay_sdk": 0,
    }
    if PEER_ADAPTERS is not None:
        totals["peer"] = totals["peer_export"] = 0
    for path, sources in work:
        mib = sum(p.stat().st_size for p in sources) / 2**20
        t = {kind: best[(path, kind)] for kind in totals}
        for kind in totals:
            totals[kind] += t[kind]
        print(
            f"{path.parent.name[:6]}/{path.stem[:27]:<27} {mib:5.1f} {records[path] / mib:7.0f} "
            f"{mib * 2**20 / t['raw'] * 1000:9.1f} {mib * 2**20 / t['import'] * 1000:11.1f} "
            f"{t['raw'] / t['import']:5.2f}x {t['raw'] / t['own']:12.2f}x"
        )

    def mb_s(ns: int) -> float:
        return size / ns * 1000

    ratio = totals["raw"] / totals["import"]
    verdict = "PASS" if ratio >= TARGET_RATIO else "FAIL"
    print(f"raw lines + orjson.loads: {mb_s(totals['raw']):.1f} MB/s")
    print(
        f"import: {mb_s(totals['import']):.1f} MB/s ({sum(records.values())} records) vs raw "
        f"{mb_s(totals['raw']):.1f} MB/s -> {ratio:.2f}x (target >= {TARGET_RATIO}x) {verdict}"
    )
    print(
        f"  without redaction (redact=False): {mb_s(totals['unredacted']):.1f} MB/s -> "
        f"{totals['raw'] / totals['unredacted']:.2f}x raw; the default redaction takes "
        f"{1 - totals['unredacted'] / totals['import']:.0%} of the import's time"
    )
    print(
        f"  the importer alone (parse and map; Run._record, bulk writes and fsync stubbed): "
        f"{mb_s(totals['own']):.1f} MB/s -> {totals['raw'] / totals['own']:.2f}x raw; "
        "the session writer takes the rest"
    )
    both = totals["import"] + totals["replay"]
    print(
        f"import + replay to spans (loopscribe import, then export; {sum(spans.values())} "
        f"spans encoded as OTLP protobuf by encode_otlp_protobuf, as loopscribe's exporters "
        f"do, not sent): {mb_s(both):.1f} MB/s -> {totals['raw'] / both:.2f}x raw; the replay "
        f"takes {totals['replay'] / both:.0%}"
    )
    both_sdk = totals["import"] + totals["replay_sdk"]
    print(
        f"  the same with the SDK's encoder (encode_spans(...).SerializeToString()): "
        f"{mb_s(both_sdk):.1f} MB/s -> {totals['raw'] / both_sdk:.2f}x raw; the replay alone "
        f"is {totals['replay_sdk'] / totals['replay']:.2f}x faster with encode_otlp_protobuf"
    )
    if PEER_ADAPTERS is not None:
        print(
            f"peer agent-session-otel parsing the same files into its events: "
            f"{mb_s(totals['peer']):.1f} MB/s -> {totals['raw'] / totals['peer']:.2f}x raw; "
            f"loopscribe's import runs {totals['peer'] / totals['import']:.2f}x its speed"
        )
        peer_export_ns = totals["peer_export"]
        print(
            f"peer agent-session-otel parsing and exporting to spans (encoded, not sent): "
            f"{mb_s(peer_export_ns):.1f} MB/s -> {totals['raw'] / peer_export_ns:.2f}x raw; "
            f"loopscribe's import + replay runs {peer_export_ns / both:.2f}x its speed"
        )
    print(
        f"  floor (each parsed line wrapped in one record, encoded, written in blocks; no "
        f"mapping): {mb_s(totals['floor']):.1f} MB/s -> {totals['raw'] / totals['floor']:.2f}x "
        "raw: the most any importer that re-encodes what it parses can reach"
    )
    return ratio >= TARGET_RATIO


BASELINE = "a5b8881"
"""The last commit that imported one transcript after the other, four fsyncs each."""

_SIDE_CHILD = """
import json, resource, sys, time
from pathlib import Path
spec = json.loads(sys.argv[1])
groups = [(agent, [Path(p) for p in paths]) for agent, paths in spec["groups"]]
out = Path(spec["out"])
start = time.perf_counter_ns()
if spec["mode"] == "old":
    from loopscribe.importers import claude_code, codex
    modules = {"claude-code": claude_code, "codex": codex}
    for agent, paths in groups:
        for path in paths:
            modules[agent].import_transcript(path, out, finished=True)
else:
    from loopscribe.importers._pool import import_many
    for agent, paths in groups:
        sizes = [p.stat().st_size for p in paths]
        import_many(agent, paths, out, jobs=spec["jobs"], sizes=sizes, finished=True)
wall = time.perf_counter_ns() - start
usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
cpu = sum(u.ru_utime + u.ru_stime for u in usage)
print(wall, int(cpu * 1e9))
"""


def _baseline_src(rev: str, folder: Path) -> Path:
    """The ``src`` folder of commit ``rev``, extracted into ``folder``."""
    repo = Path(__file__).resolve().parents[1]
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder / "src"


def _many(folder: Path, copies: int, min_bytes: int) -> list[tuple[str, list[Path]]]:
    """``copies`` transcripts made of each real one (continued to ``min_bytes``)."""
    groups: list[tuple[str, list[Path]]] = []
    for agent in ("claude-code", "codex"):
        made: list[Path] = []
        (folder / agent).mkdir(parents=True, exist_ok=True)
        for source in sorted((TRANSCRIPTS / agent).glob("*.jsonl")):
            for copy in range(copies):
                target = folder / agent / f"{source.stem}-{copy}.jsonl"
                _continued(source, target, min_bytes)
                made.append(target)
        groups.append((agent, made))
    return groups


def _contention() -> str:
    """What share of the machine this process group can get, in words."""
    parts = []
    with contextlib.suppress(OSError):
        some = Path("/proc/pressure/cpu").read_text().split()[1]
        parts.append(f"CPU pressure {some.split('=')[1]}% (some, avg10)")
    with contextlib.suppress(OSError):
        if Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1":
            parts.append("autogroup on: the session's processes share one fair share")
    return "; ".join(parts) or "no pressure figures on this system"


def side_by_side(folder: Path, copies: int, min_mib: float, reps: int, rev: str) -> float:
    """Print the import now (one process and all cores) against ``rev``'s; returns the ratio."""
    old_src = _baseline_src(rev, folder / "baseline")
    new_src = Path(__file__).resolve().parents[1] / "src"
    groups = _many(folder / "many", copies, int(min_mib * (1 << 20)))
    files = sorted((folder / "many").rglob("*.jsonl"))
    size = sum(p.stat().st_size for p in files)
    cores = len(os.sched_getaffinity(0))
    transcripts = sum(len(paths) for _, paths in groups)
    print(
        f"side by side with {rev}: {transcripts} transcripts ({len(files)} files with the "
        f"subagents, {size / 2**20:.1f} MiB), best of {reps} interleaved passes; "
        f"{cores} cores; load average before: {os.getloadavg()[0]:.2f}"
    )
    best: dict[str, int] = {}
    cpu: dict[str, int] = {}

    def child(mode: str, src: Path, jobs: int, out: Path) -> tuple[int, int]:
        spec = {"mode": mode, "jobs": jobs, "out": str(out), "groups": groups}
        # Bytecode cached in the scratch folder (the warm-up pass writes it): a child
        # measures the import, not the compiling of loopscribe's source, which an
        # installed package never pays (PYTHONDONTWRITEBYTECODE would make every
        # child compile it again).
        env = {**os.environ, "PYTHONPATH": str(src), "PYTHONPYCACHEPREFIX": str(folder / "pyc")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        done = subprocess.run(
            [sys.executable, "-c", _SIDE_CHILD, json.dumps(spec, default=str)],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        )
        shutil.rmtree(out)
        wall, used = done.stdout.split()[-2:]
        return int(wall), int(used)

    def own(run: Callable[[], int]) -> tuple[int, int]:
        start = time.process_time_ns()
        return run(), time.process_time_ns() - start

    for rep in range(reps + 1):
        took = {
            "raw": own(lambda: raw_pass(files)),
            "floor": own(lambda: floor_pass(files, folder / "floor.jsonl")),
            "old": child("old", old_src, 1, folder / "old"),
            "one": child("new", new_src, 1, folder / "one"),
            "all": child("new", new_src, cores, folder / "all"),
        }
        if rep:  # pass 0 warms up
            for kind, (ns, used) in took.items():
                best[kind] = min(best.get(kind, ns), ns)
                cpu[kind] = min(cpu.get(kind, used), used)
    mb = {kind: size / ns * 1000 for kind, ns in best.items()}
    print(
        f"  raw lines + orjson.loads {mb['raw']:.1f} MB/s; passthrough floor (loads + dumps + "
        f"buffered write) {mb['floor']:.1f} MB/s = {mb['floor'] / mb['raw']:.2f}x raw"
    )
    for kind, label in (
        ("old", f"import at {rev} (one by one, 4 fsyncs each)"),
        ("one", "import now, --jobs 1 (fsyncs per pass)"),
        ("all", f"import now, --jobs {cores}"),
    ):
        print(
            f"  {label}: {mb[kind]:.1f} MB/s = {mb[kind] / mb['raw']:.2f}x raw, "
            f"{mb[kind] / mb['floor']:.2f}x floor, {best['old'] / best[kind]:.2f}x {rev}"
            + f" (CPU time: {cpu['raw'] / cpu[kind]:.2f}x raw, {cpu['old'] / cpu[kind]:.2f}x "
            f"{rev})"
        )
    print(
        "  (CPU time counts the worker processes too: they are forked children, reaped. "
        f"Wall time over {cores} processes gains only while the machine has idle cores: "
        f"{_contention()})"
    )
    print(f"  load average after: {os.getloadavg()[0]:.2f}")
    return best["old"] / best["all"]


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
    """Print the peak RSS of fresh interpreters importing ``size_mib`` and 4x that."""
    peaks = []
    for scale in (1, 4):
        path = folder / f"big{scale}.jsonl"
        size = big_transcript(path, (size_mib * scale) << 20)
        out = subprocess.run(
            [sys.executable, __file__, "--child-import", str(path), str(folder / f"out{scale}")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        path.unlink()
        shutil.rmtree(folder / f"out{scale}")
        report = json.loads(out)
        peak_mib = float(report["peak"]) / 1024
        peaks.append(peak_mib)
        print(
            f"import memory: {size / 2**20:.0f} MiB transcript, {report['records']} records, "
            f"peak RSS {peak_mib:.1f} MiB (after imports {report['baseline'] / 1024:.1f} MiB); "
            f"{size / report['ns'] * 1000:.1f} MB/s"
        )
    growth = peaks[1] / peaks[0]
    small = max(peaks) < TARGET_PEAK_MIB and growth <= TARGET_PEAK_GROWTH
    print(
        f"import memory, 4x the transcript: peak RSS x{growth:.2f} (target <= "
        f"x{TARGET_PEAK_GROWTH} and < {TARGET_PEAK_MIB} MiB) {'PASS' if small else 'FAIL'}"
    )
    return small


def main() -> int:
    """Run the throughput comparison and the memory check."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--min-mib", type=float, default=4, help="continue each transcript to this size"
    )
    parser.add_argument("--reps", type=int, default=5, help="timed passes of each kind")
    parser.add_argument(
        "--size-mib", type=int, default=32, help="memory-check transcript size (and 4x that)"
    )
    parser.add_argument(
        "--baseline", default=BASELINE, help="commit to compare the import with, side by side"
    )
    parser.add_argument(
        "--copies", type=int, default=4, help="transcripts made of each real one, side by side"
    )
    parser.add_argument(
        "--side-by-side-only", action="store_true", help="only the comparison with --baseline"
    )
    parser.add_argument("--child-import", nargs=2, metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_import:
        child_import(*args.child_import)
        return 0
    if not (TRANSCRIPTS / "claude-code").is_dir():
        print(f"no transcripts in {TRANSCRIPTS}; set LOOPSCRIBE_TRANSCRIPTS", file=sys.stderr)
        return 2
    with scratch_dir() as folder:
        side_by_side(folder, args.copies, min(args.min_mib, 1), args.reps, args.baseline)
        if args.side_by_side_only:
            return 0
        fast = throughput(folder, args.min_mib, args.reps)
        per_transcript(folder, args.reps)
        small = memory(folder, args.size_mib)
    return 0 if fast and small else 1


if __name__ == "__main__":
    sys.exit(main())
