"""Benchmark: what a :class:`~loopscribe.Redactor` costs per record, against encoding it.

The workload's records are recorded once into a session file and read back
as lines; each redactor then scrubs every line, and ``Codec.dumps`` encodes
every event's data, in turns (one pass each, repeated), so both see the same
machine load. Figures are thread CPU time (``thread_time_ns``), best pass.

* **secrets**: three known secrets (every escaped, encoded and base64 form of each);
* **patterns**: :data:`~loopscribe.COMMON_PATTERNS`;
* **both**;
* **default**: :meth:`~loopscribe.Redactor.default` with three credential
  environment variables (what an import applies unless told otherwise);
* **default, hits**: the same on the same lines, each with a token, a known
  secret and a URL password added to its data (the cost when there is
  something to remove).

Then, side by side with the Redactor of an earlier commit (``--baseline``, its
``_redact.py`` read with ``git show`` and loaded as a module): the lines the
importers write for the real transcripts in ``tests/data/transcripts``
(captured from an import of each), scrubbed by each, in turns, best pass; the
ratio is the new one's time over the old one's from the same passes, and the
outputs are checked to be the same bytes.

Run: ``.venv/bin/python benchmarks/redact.py [--turns N] [--reps N] [--baseline REV]``
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import build_events, scratch_dir
from loopscribe import COMMON_PATTERNS, Redactor, Session
from loopscribe._codec import DEFAULT_CODEC
from loopscribe.importers import claude_code, codex

BASELINE = "d5a364c"
"""The last commit whose Redactor took every token run through the full check."""
REPO = Path(__file__).resolve().parents[1]
TRANSCRIPTS = REPO / "tests" / "data" / "transcripts"

_LEAK = (
    b'"data":{"leak":"key sk-proj-Zx9Kq2Lm7Np4Rt8Vw1YbQ3 and pa\\"ss\\\\w\u00f6rd-9876543210 '
    b'via postgres://u:pw-4821@db/x",'
)
"""Put at the head of each line's data for the hits row (valid JSON: an extra key)."""


def _baseline_module(rev: str) -> types.ModuleType:
    """``loopscribe/_redact.py`` of commit ``rev``, loaded as a module beside today's."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:src/loopscribe/_redact.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("loopscribe._redact_baseline")
    module.__package__ = "loopscribe"
    sys.modules[module.__name__] = module
    exec(compile(source, f"{rev}:src/loopscribe/_redact.py", "exec"), module.__dict__)
    return module


def _import_lines(folder: Path) -> list[bytes]:
    """The lines the importers write for the real transcripts, before redaction."""
    lines: list[bytes] = []

    def keep(line: bytes) -> bytes:
        lines.append(line)
        return line

    for agent, importer in (("claude-code", claude_code), ("codex", codex)):
        for path in sorted((TRANSCRIPTS / agent).glob("*.jsonl")):
            importer.import_transcript(path, folder / agent, finished=True, redact=keep)
    return lines


def side_by_side(rev: str, reps: int, environ: dict[str, str]) -> None:
    """Print the Redactor against the one of ``rev`` on the lines of real imports."""
    old = _baseline_module(rev)
    with scratch_dir() as folder:
        lines = _import_lines(folder)
    leak = _LEAK.replace(b'"data":{', b"")
    hits = [line.replace(b'"data":{', b'"data":{' + leak, 1) for line in lines]
    pairs: dict[str, tuple[Callable[[bytes], bytes], Callable[[bytes], bytes], list[bytes]]] = {
        "default": (
            Redactor.default(environ=environ),
            old.Redactor.default(environ=environ),
            lines,
        ),
        "default, hits": (
            Redactor.default(environ=environ),
            old.Redactor.default(environ=environ),
            hits,
        ),
        "patterns": (
            Redactor(patterns=COMMON_PATTERNS),
            old.Redactor(patterns=COMMON_PATTERNS),
            lines,
        ),
        "secrets": (Redactor(list(environ.values())), old.Redactor(list(environ.values())), lines),
    }
    differ = sum(new(x) != was(x) for new, was, inputs in pairs.values() for x in inputs)
    best: dict[tuple[str, str], int] = {}
    for _ in range(reps):
        for name, (new, was, inputs) in pairs.items():
            for which, redact in (("new", new), ("old", was)):
                start = time.thread_time_ns()
                for line in inputs:
                    redact(line)
                took = time.thread_time_ns() - start
                best[name, which] = min(best.get((name, which), 1 << 62), took)
    size = sum(map(len, lines)) / len(lines)
    print(
        f"{len(lines)} lines of real imports ({size / 1024:.1f} KiB each on average), against "
        f"the Redactor of {rev}; best of {reps}; lines scrubbed differently: {differ}"
    )
    for name, (_, _, inputs) in pairs.items():
        new_us = best[name, "new"] / len(inputs) / 1000
        old_us = best[name, "old"] / len(inputs) / 1000
        mb_s = sum(map(len, inputs)) / (best[name, "new"] / 1e9) / 1e6
        print(
            f"  redact {name:<15} {new_us:7.1f} us/line (was {old_us:7.1f})  "
            f"{new_us / old_us:5.2f}x the old time  {mb_s:6.1f} MB/s"
        )


def main() -> None:
    """Print µs per record of each redactor and its ratio to encoding the record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--baseline", default=BASELINE, help="commit to compare the Redactor with")
    args = parser.parse_args()
    events = build_events(args.turns)
    with scratch_dir() as folder:
        path = folder / "s.jsonl"
        with Session.create(path) as session, session.begin_run() as run:
            for event in events:
                run.record(event)
        lines = path.read_bytes().splitlines(keepends=True)
    secrets = ["sk-live-0123456789abcdefXYZ", 'pa"ss\\wörd-9876543210', "ghp_" + "a1" * 18]
    environ = {f"BENCH_{i}_API_KEY": secret for i, secret in enumerate(secrets)}
    redactors = {
        "secrets": Redactor(secrets),
        "patterns": Redactor(patterns=COMMON_PATTERNS),
        "both": Redactor(secrets, patterns=COMMON_PATTERNS),
        "default": Redactor.default(environ=environ),
    }
    hit_lines = [line.replace(b'"data":{', _LEAK, 1) for line in lines]
    inputs = dict.fromkeys(redactors, lines)
    redactors["default, hits"] = redactors["default"]
    inputs["default, hits"] = hit_lines
    datas = [e.data for e in events]
    best: dict[str, int] = {}
    for _ in range(args.reps):
        start = time.thread_time_ns()
        for data in datas:
            DEFAULT_CODEC.dumps(data)
        best["encode"] = min(best.get("encode", 1 << 62), time.thread_time_ns() - start)
        for name, redact in redactors.items():
            start = time.thread_time_ns()
            for line in inputs[name]:
                redact(line)
            best[name] = min(best.get(name, 1 << 62), time.thread_time_ns() - start)
    size = sum(map(len, lines)) / len(lines)
    print(f"{len(lines)} records, {size / 1024:.1f} KiB each on average; best of {args.reps}")
    encode = best["encode"] / len(datas) / 1000
    print(f"  encode (Codec.dumps)   {encode:7.1f} us/record")
    for name in redactors:
        per = best[name] / len(lines) / 1000
        print(f"  redact {name:<15} {per:7.1f} us/record  {per / encode:5.2f}x encoding")
    side_by_side(args.baseline, args.reps, environ)


if __name__ == "__main__":
    main()
