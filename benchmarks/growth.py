"""Benchmark: how each operation grows when its input grows 10x (linear is x10, flat is x1).

Every figure is a factor between two sizes measured in the same run, each in a
fresh interpreter (cold caches, its own peak RSS), the two sizes interleaved
``--reps`` times and the best kept. Times are CPU time of the measuring process
(the machine is shared: CPU time does not count the time other processes ran),
peak RSS is ``VmHWM``. A factor above 11 is flagged: the operation grows
faster than its input.

* record: ``Run.record`` of the shared workload's events, T and 10T turns;
* read: ``read(path)`` decoding every record of a session file, S and 10S MiB;
* list cold / warm: ``Workspace.list()`` in a new process, then again in it,
  over N and 10N sessions (``tests/viewer/many_sessions.py`` writes them);
* messages(last=50): the last page of a session's conversation, S and 10S MiB;
* viewer session page: ``/session/{id}`` through the web application, warm
  (the second request), S and 10S MiB: it shows the same page at any size,
  so it should stay flat (x1), not grow;
* stats: ``session_stats`` (time and peak RSS), S and 10S MiB: its memory is
  bounded by the runs it shows, so the peak RSS should stay flat;
* the stats command: ``loopscribe stats FILE`` as a user runs it (its table
  written to /dev/null), with the price table (``loopscribe[prices]``) and
  without it, S and 10S MiB: its peak RSS against the 50 MiB target;
* serve's listing: the web application indexing N and 10N sessions and
  answering the first ``/api/sessions`` page (time and peak RSS).

The session files of S and 10S MiB are imported Claude Code transcripts (the
real one in ``tests/data/transcripts``, continued with copies of itself).

Run: ``.venv/bin/python benchmarks/growth.py [--sessions N] [--mib S] [--turns T] [--reps R]``
(defaults 10,000 sessions, 10 MiB, 100 turns, 2 reps: about three minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import scratch_dir

FLAG = 11.0
"""A factor per 10x above this is flagged."""


def _peak_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _cpu(call: Callable[[], Any]) -> tuple[int, Any]:
    start = time.process_time_ns()
    result = call()
    return time.process_time_ns() - start, result


# -- what each child measures ---------------------------------------------------


def child(kind: str, arg: str) -> dict[str, Any]:
    """Measure one operation on one input in this (fresh) interpreter."""
    from loopscribe import Session, Workspace, read

    path = Path(arg)
    if kind == "record":
        from benchmarks._workload import build_events

        events = build_events(int(arg))
        target = Path(os.environ["GROWTH_SCRATCH"]) / f"record-{arg}.jsonl"
        target.unlink(missing_ok=True)

        def record() -> None:
            with Session.create(target) as session, session.begin_run() as run:
                for event in events:
                    run.record(event)

        ns, _ = _cpu(record)
        target.unlink()
        return {"ns": ns}
    if kind == "read":
        ns, _ = _cpu(lambda: sum(1 for _ in read(path)))
        return {"ns": ns}
    if kind == "list":
        ws = Workspace(path)
        cold, found = _cpu(ws.list)
        warm, _ = _cpu(ws.list)
        return {"ns": cold, "warm_ns": warm, "count": len(found)}
    if kind == "messages":
        ws = Workspace(path.parent)
        sid = path.stem
        ns, page = _cpu(lambda: ws.messages(sid, last=50))
        return {"ns": ns, "count": len(page.messages)}
    if kind == "stats":
        from loopscribe.viewer import session_stats

        floor = _peak_kib()
        ns, stats = _cpu(lambda: session_stats(path))
        return {"ns": ns, "peak_kib": _peak_kib(), "floor_kib": floor, "runs": len(stats.runs)}
    if kind in ("stats-command", "stats-command-unpriced"):
        if kind == "stats-command-unpriced":
            sys.modules["genai_prices"] = None  # type: ignore[assignment]  # not installed
        from loopscribe.cli import main as command

        floor = _peak_kib()
        saved = os.dup(1)
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            try:
                ns, code = _cpu(lambda: command(["stats", str(path)]))
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
        assert code == 0, code
        return {"ns": ns, "peak_kib": _peak_kib(), "floor_kib": floor, "target_kib": 50 << 10}
    if kind == "page":
        from starlette.testclient import TestClient

        from loopscribe.viewer import create_app

        with TestClient(create_app(path.parent), base_url="http://127.0.0.1") as client:
            sid = _session_id(path)
            cold, first = _cpu(lambda: client.get(f"/session/{sid}"))
            assert first.status_code == 200, first.status_code
            warm = min(_cpu(lambda: client.get(f"/session/{sid}"))[0] for _ in range(3))
            return {"ns": warm, "cold_ns": cold, "bytes": len(first.content)}
    if kind == "serve":
        from starlette.testclient import TestClient

        from loopscribe.viewer import create_app

        floor = _peak_kib()

        def listing() -> int:
            with TestClient(create_app(path), base_url="http://127.0.0.1") as client:
                while client.get("/api/sessions?limit=1").json()["indexing"] is not None:
                    time.sleep(0.5)  # each answer sorts the entries: ask rarely
                return len(client.get("/api/sessions").content)

        ns, size = _cpu(listing)
        return {"ns": ns, "peak_kib": _peak_kib(), "floor_kib": floor, "bytes": size}
    raise SystemExit(f"unknown kind {kind}")


def _session_id(path: Path) -> str:
    with path.open("rb") as stream:
        return str(json.loads(stream.readline())["session_id"])


# -- the inputs -----------------------------------------------------------------


def big_session(folder: Path, mib: float) -> Path:
    """An imported Claude Code session of about ``mib`` MiB, alone in ``folder``."""
    from benchmarks.importers import TRANSCRIPTS, _continued
    from loopscribe.importers import claude_code

    source = TRANSCRIPTS / "claude-code" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
    transcript = folder / "src" / f"big{mib:g}.jsonl"
    transcript.parent.mkdir(parents=True, exist_ok=True)
    # An imported session is about half its transcript (measured: 510 MiB from 1,250).
    _continued(source, transcript, int(mib * 1.96 * (1 << 20)))
    out = folder / f"session{mib:g}"
    report = claude_code.import_transcript(transcript, out, finished=True)
    shutil.rmtree(transcript.parent)
    for cursor in out.glob("*.import-cursor"):
        cursor.unlink()
    dest = report.destination
    final = out / f"{_session_id(dest)}.jsonl"
    dest.rename(final)
    return final


def many_sessions(folder: Path, count: int) -> Path:
    """A folder of ``count`` small sessions."""
    from tests.viewer.many_sessions import write_sessions

    target = folder / f"sessions{count}"
    write_sessions(target, count)
    return target


def run_child(kind: str, arg: str, scratch: Path) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter."""
    env = {**os.environ, "GROWTH_SCRATCH": str(scratch)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, arg],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> int:
    """Print the factor per 10x of every operation."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="the smaller session count")
    parser.add_argument("--mib", type=float, default=10, help="the smaller session file, MiB")
    parser.add_argument("--turns", type=int, default=100, help="the smaller recording, turns")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--only", nargs="*", help="only these operations")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    wanted = set(
        args.only or ["record", "read", "list", "messages", "page", "stats", "command", "serve"]
    )
    started = time.perf_counter()
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; sizes: "
        f"{args.turns} / {args.turns * 10} turns, {args.mib:g} / {args.mib * 10:g} MiB, "
        f"{args.sessions:,} / {args.sessions * 10:,} sessions; best of {args.reps}"
    )
    flagged: list[str] = []
    with scratch_dir() as folder:
        files = wanted - {"record", "list", "serve"}
        small_file = big_session(folder, args.mib) if files else None
        large_file = big_session(folder, args.mib * 10) if files else None
        small_dir = many_sessions(folder, args.sessions) if wanted & {"list", "serve"} else None
        large_dir = (
            many_sessions(folder, args.sessions * 10) if wanted & {"list", "serve"} else None
        )
        print(f"inputs written in {time.perf_counter() - started:.0f} s")
        plan: list[tuple[str, str, str, str]] = []
        if "record" in wanted:
            plan.append(("record", "record", str(args.turns), str(args.turns * 10)))
        for kind in ("read", "messages", "page", "stats"):
            if kind in wanted:
                plan.append((kind, kind, str(small_file), str(large_file)))
        if "command" in wanted:
            for kind in ("stats-command", "stats-command-unpriced"):
                plan.append((kind, kind, str(small_file), str(large_file)))
        for kind in ("list", "serve"):
            if kind in wanted:
                plan.append((kind, kind, str(small_dir), str(large_dir)))
        for name, kind, small, large in plan:
            best: dict[str, dict[str, Any]] = {}
            for _ in range(args.reps):
                for size, arg in (("small", small), ("large", large)):
                    result = run_child(kind, arg, folder)
                    kept = best.get(size)
                    if kept is None or result["ns"] < kept["ns"]:
                        best[size] = result
            lines = _factors(name, best["small"], best["large"])
            for label, factor, detail in lines:
                mark = ""
                if factor > FLAG:
                    mark = "  FLAG: grows faster than its input"
                    flagged.append(label)
                print(f"{label:<34} x{factor:6.2f} per 10x  ({detail}){mark}")
    print(f"load average after {os.getloadavg()[0]:.2f}; {time.perf_counter() - started:.0f} s")
    if flagged:
        print("above x11: " + ", ".join(flagged))
    return 1 if flagged else 0


def _factors(
    name: str, small: dict[str, Any], large: dict[str, Any]
) -> list[tuple[str, float, str]]:
    """The lines of one operation: its time factor, and warm or memory factors."""

    def ms(ns: int) -> str:
        return f"{ns / 1e6:.1f} ms"

    out = [
        (f"{name} (CPU time)", large["ns"] / small["ns"], f"{ms(small['ns'])} -> {ms(large['ns'])}")
    ]
    if "warm_ns" in small:
        out.append(
            (
                f"{name} warm (CPU time)",
                large["warm_ns"] / small["warm_ns"],
                f"{ms(small['warm_ns'])} -> {ms(large['warm_ns'])}",
            )
        )
    if "peak_kib" in small:
        grew = [max(1, r["peak_kib"] - r["floor_kib"]) for r in (small, large)]
        out.append(
            (
                f"{name} (peak RSS)",
                large["peak_kib"] / small["peak_kib"],
                f"{small['peak_kib'] / 1024:.1f} -> {large['peak_kib'] / 1024:.1f} MiB; "
                f"above the modules loaded {grew[0] / 1024:.1f} -> {grew[1] / 1024:.1f} MiB"
                + (
                    f"; target < {small['target_kib'] >> 10} MiB: "
                    + ("met" if large["peak_kib"] < small["target_kib"] else "NOT MET")
                    if "target_kib" in small
                    else ""
                ),
            )
        )
    if "bytes" in small:
        out[0] = (out[0][0], out[0][1], out[0][2] + f"; {small['bytes']:,} -> {large['bytes']:,} B")
    return out


if __name__ == "__main__":
    sys.exit(main())
