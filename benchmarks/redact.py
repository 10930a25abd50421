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

Run: ``.venv/bin/python benchmarks/redact.py [--turns N] [--reps N]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import build_events, scratch_dir
from loopscribe import COMMON_PATTERNS, Redactor, Session
from loopscribe._codec import DEFAULT_CODEC

_LEAK = (
    b'"data":{"leak":"key sk-proj-Zx9Kq2Lm7Np4Rt8Vw1YbQ3 and pa\\"ss\\\\w\u00f6rd-9876543210 '
    b'via postgres://u:pw-4821@db/x",'
)
"""Put at the head of each line's data for the hits row (valid JSON: an extra key)."""


def main() -> None:
    """Print µs per record of each redactor and its ratio to encoding the record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
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


if __name__ == "__main__":
    main()
