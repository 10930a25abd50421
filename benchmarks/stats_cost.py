"""Benchmark: ``loopscribe stats`` with cost against ``stats`` without it, over 10,000 sessions.

The folder holds ``--sessions`` session files written straight in the format,
each one run of ``--calls`` model calls (with cache reads and writes, every
fourth with reasoning tokens) and as many tool calls, spread over 60 days
and five models, four of them in the price table (two with tiered or dated
prices) and one without a price. Both sides fold every file with
``many_stats`` (what ``loopscribe stats`` does, in-process, without
printing): the baseline with ``cost=False``, the other pricing each call at
its own time (genai-prices imported in the timed pass, as a command pays
for it). The passes alternate; each figure is the best of ``--reps``.

Target: stats with cost within 1.2x of stats without.

Run: ``.venv/bin/python benchmarks/stats_cost.py [--sessions N] [--calls N] [--reps N]``
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET = 1.2
BASE = datetime(2026, 1, 20, tzinfo=UTC)
MODELS = (
    ("claude-sonnet-4-5", "anthropic"),
    ("claude-opus-4-6", "anthropic"),  # tiered before 2026-03-13, flat after
    ("gpt-4o", "openai"),
    ("gemini-2.5-flash", "gcp.gemini"),
    ("house-model-1", "acme"),  # no price: unknown
)


def _ts(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def session_bytes(index: int, calls: int, rng: random.Random) -> bytes:
    """One session: a run of ``calls`` model calls, each followed by a tool call."""
    sid, rid = rng.randbytes(16).hex(), rng.randbytes(8).hex()
    t = BASE + timedelta(minutes=index * 8)
    lines: list[dict[str, object]] = []

    def add(kind: str, data: dict[str, object], execution: dict[str, object] | None = None) -> None:
        line: dict[str, object] = {"session_id": sid, "seq": len(lines), "type": kind}
        if kind != "session_start":
            line["run_id"] = rid
        line["ts"] = _ts(t + timedelta(milliseconds=250 * len(lines)))
        if execution is not None:
            line["execution"] = execution
        line["data"] = data
        lines.append(line)

    add("session_start", {"format_version": 1, "metadata": {"title": f"task {index}"}})
    add("run_start", {})
    for n in range(calls):
        model, provider = MODELS[(index + n) % len(MODELS)]
        call = {"id": f"model_{n}", "kind": "model", "attempt": 1}
        add("model_exec_start", {"model": model, "provider": provider}, call)
        inp = rng.randrange(2_000, 260_000)
        usage = {
            "$ls": "usage",
            "input_tokens": inp,
            "output_tokens": rng.randrange(50, 4_000),
            "cache_read_tokens": inp // 2,
            "cache_write_tokens": inp // 10,
            "reasoning_tokens": 120 if n % 4 == 0 else 0,
        }
        reply = {"$ls": "assistant", "content": [{"$ls": "text", "text": "ok"}], "model": model}
        add("model_exec_end", {"message": reply, "usage": usage}, call)
        tool = {"id": f"call_{n}", "kind": "tool", "attempt": 1}
        add("tool_exec_start", {"tool": "grep", "args": {"n": n}}, tool)
        add("tool_exec_end", {"tool": "grep", "result": "found"}, tool)
    add("run_close", {})
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def write_folder(folder: Path, sessions: int, calls: int) -> list[Path]:
    """Write the sessions; returns their paths."""
    rng = random.Random(11)
    paths = []
    for index in range(sessions):
        path = folder / f"s{index:06d}.jsonl"
        path.write_bytes(session_bytes(index, calls, rng))
        paths.append(path)
    return paths


_PASS = """
import sys, time
from pathlib import Path
start = time.perf_counter()
from loopscribe._stats import many_stats
paths = sorted(Path(sys.argv[1]).glob("*.jsonl"))
cost = sys.argv[2] == "cost"
total = 0.0
unknown = 0
for s in many_stats(paths, cost=cost):
    c = s.cost
    total += float(c.usd)
    unknown += c.unknown
print(time.perf_counter() - start, total, unknown)
"""


def timed_pass(folder: Path, cost: bool) -> tuple[float, float, int]:
    """One fresh process folding every file: seconds, dollars, calls without a price."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    out = subprocess.run(
        [sys.executable, "-c", _PASS, str(folder), "cost" if cost else "plain"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> int:
    """Write the folder, time both sides in turns, print the ratio; 0 if within the target."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=6, help="model calls per session")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loopscribe-stats-cost-") as scratch:
        folder = Path(scratch)
        paths = write_folder(folder, args.sessions, args.calls)
        size = sum(p.stat().st_size for p in paths)
        print(
            f"workload: {args.sessions:,} sessions, {args.calls} model calls and "
            f"{args.calls} tool calls each, {size / 2**20:.1f} MiB"
        )
        plain: list[float] = []
        priced: list[float] = []
        dollars = 0.0
        unknown = 0
        for rep in range(args.reps):
            for cost in (False, True) if rep % 2 == 0 else (True, False):
                seconds, usd, missing = timed_pass(folder, cost)
                (priced if cost else plain).append(seconds)
                if cost:
                    dollars, unknown = usd, missing
        ratio = min(priced) / min(plain)
        verdict = "PASS" if ratio <= TARGET else "FAIL"
        print(
            f"stats over {args.sessions:,} sessions: with cost {min(priced):.2f} s vs without "
            f"{min(plain):.2f} s -> {ratio:.2f}x (target <= {TARGET}x) {verdict}; "
            f"best of {args.reps}, each in a fresh process"
        )
        print(f"  priced ${dollars:,.2f}; {unknown:,} calls of a model without a price")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"finished in {time.perf_counter() - started:.0f} s")
    sys.exit(code)
