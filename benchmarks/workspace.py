"""Benchmark: ``Workspace.messages``, ``Workspace.list`` and ``follow`` at scale.

Four checks, each against a baseline measured in the same run:

* **messages**: ``Workspace.messages(id, last=50)`` on a large session (1 GiB
  by default, recorded through the real API from the shared agent workload)
  against a full forward scan with ``read`` that keeps the last 50
  ``message_end`` messages. Timed on a warm Workspace (its summary of the
  file cached, as in a UI that lists first) and on a fresh one (the first
  call of a new ``Workspace``, as in a CLI). The page must also equal the
  scan's last 50 messages, and its ``total`` and ``messages_total`` the
  scan's count. The fresh call reads the total from the counts the writer
  carries in the last ``message_end`` line; a file written without them is
  counted instead (a byte search of the whole file), timed too for comparison.
* **list**: a warm ``Workspace(root).list()`` over many small sessions
  (10,000 by default; every file already folded, so each only needs a
  ``stat``) against one bare ``os.stat`` call per session file, the two
  taking turns. A cold ``list()`` (a new Workspace: every file is read) is
  printed for scale. The operating system's page cache is warm in all of
  them: "cold" is the Workspace's.
* **follow**: a writer records the workload's events a few ms apart while
  ``follow(path)`` (default poll interval) yields them on another thread;
  latency runs from the host's ``Run.record`` call to the record's arrival
  (so it includes encoding and the write).
* **huge-line**: ``Workspace.messages`` and ``tail_offset`` on a session
  whose one tool result is a single line of 8, 32 and 200 MB (``--line-mib``)
  against a full forward ``read`` of the same file: reading backwards must
  stay linear in the line's length, a small multiple of the scan at every
  size.

Run: ``.venv/bin/python benchmarks/workspace.py [--size-mib N] [--sessions N]
[--events N] [--reps N] [--line-mib N ...] [--profile] [--strict]
[--only messages|list|follow|huge-line]``
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import random
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import build_events, median, percentile, scratch_dir
from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    TextContent,
    ToolResultMessage,
    Usage,
    UserMessage,
    Workspace,
    events,
    read,
)
from loopscribe._backread import count_visible, tail_offset
from loopscribe.live import follow
from loopscribe.workspace import MessagePage

TARGET_MESSAGES_RATIO = 100.0
TARGET_LIST_RATIO = 2.0
LIST_TURNS = 15  # warm lists, each paired with a pass of bare os.stat calls
TARGET_FOLLOW_P99_MS = 50.0
TARGET_HUGE_LINE_RATIO = 4.0  # messages() over a full forward read, at every line length
HUGE_LINE_MIB = (8, 32, 200)
PAGE = 50
INTERRUPTED_EVERY = 10  # every 10th listed session lost its run_close, as a crash leaves it


def _ms(ns: float) -> str:
    """A duration for humans: ms below 1 s, else s."""
    return f"{ns / 1e6:.1f} ms" if ns < 1e9 else f"{ns / 1e9:.2f} s"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def _timed(call: Callable[[], Any]) -> tuple[int, Any]:
    gc.collect()
    start = time.perf_counter_ns()
    out = call()
    return time.perf_counter_ns() - start, out


def _profiled(title: str, call: Callable[[], Any]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    print(f"--- profile: {title}")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(14)


# -- messages ------------------------------------------------------------------


def generate(ws: Workspace, size_bytes: int) -> str:
    """Record the shared workload into a new workspace session until it holds ``size_bytes``."""
    workload = build_events(300)
    with ws.create(title="benchmark", model="model-x") as session:
        while session.size < size_bytes:
            with session.begin_run() as run:
                for event in workload:
                    run.record(event)
                    if session.size >= size_bytes:
                        break
        return session.id


def _scan_last(path: Path) -> tuple[deque[tuple[int, Any]], int]:
    """The baseline: every record, forward; the last ``PAGE + 1`` messages and the count.

    One message beyond the page is kept (with its offset) only to report how
    far back ``messages`` has to read.
    """
    window: deque[tuple[int, Any]] = deque(maxlen=PAGE + 1)
    count = 0
    for record in read(path):
        if record.type == "message_end":
            window.append((record.offset, record.data.get("message")))
            count += 1
    return window, count


def _page_problem(page: MessagePage, expected: list[Any], count: int | None) -> str:
    """What is wrong with ``page`` against the scan's last messages and count; "" if nothing.

    ``count`` is the total the page must report: the scan's count, on a warm
    Workspace from its summary and on a fresh one counted from the bytes.
    """
    wrong = [i for i, (a, b) in enumerate(zip(page.messages, expected, strict=False)) if a != b]
    totals = (page.total, page.messages_total)
    if len(page.messages) == len(expected) and not wrong and totals == (count, count):
        return ""
    return (
        f"{len(page.messages)} messages, totals {totals}; the scan's last {len(expected)} "
        f"of {count} differ at {len(wrong)} positions (first: index {wrong[:1]})"
    )


def bench_messages(size_mib: int, reps: int, profile: bool) -> bool:
    """Print messages(last=50) on a fresh and a warm Workspace against a full scan."""
    with scratch_dir() as root:
        ws = Workspace(root)
        start = time.perf_counter()
        sid = generate(ws, size_mib << 20)
        path = ws.path(sid)
        size = path.stat().st_size
        print(
            f"messages file: {size / 2**20:.0f} MiB, written in {time.perf_counter() - start:.1f} s"
        )
        try:
            scan_ns, (window, count) = _timed(lambda: _scan_last(path))
            expected = [message for _offset, message in window][-PAGE:]
            span = size - window[0][0] if count > PAGE else size
            print(
                f"  full scan: {count} messages in {_ms(scan_ns)} "
                f"({size / scan_ns * 1000:.0f} MB/s); the last {PAGE} span the final "
                f"{span / 2**20:.2f} MiB"
            )
            fresh: list[int] = []
            for _ in range(reps):
                took, fresh_page = _timed(lambda: Workspace(root).messages(sid, last=PAGE))
                fresh.append(took)
            # What a fresh Workspace does with a file written without counts.
            counted: list[int] = []
            for _ in range(reps):
                took, (_visible, counted_total) = _timed(
                    lambda: count_visible(path, None, ws.codec)
                )
                counted.append(took)
            warm_ws = Workspace(root)
            warm_ws.get(sid)  # a current summary: the page can report the total
            warm_ws.messages(sid, last=PAGE)
            warm: list[int] = []
            for _ in range(max(reps, 20)):
                took, warm_page = _timed(lambda: warm_ws.messages(sid, last=PAGE))
                warm.append(took)
            if profile:
                _profiled("messages, warm", lambda: warm_ws.messages(sid, last=PAGE))
                _profiled("messages, fresh", lambda: Workspace(root).messages(sid, last=PAGE))
        finally:
            path.unlink()

    counted_mid = median([float(t) for t in counted])
    print(
        f"  a file without counts: counted in {_ms(counted_mid)} (median of {len(counted)}; "
        f"{counted_total} messages{'' if counted_total == count else ', WRONG'}) -> "
        f"a fresh page would be {scan_ns / counted_mid:.0f}x a full scan at best"
    )
    ok = True
    for label, times, page, total in (
        ("warm Workspace", warm, warm_page, count),
        ("fresh Workspace", fresh, fresh_page, count),
    ):
        problem = _page_problem(page, expected, total)
        if problem:
            print(f"  {label} page: {problem}")
        mid, best = median([float(t) for t in times]), min(times)
        ratio = scan_ns / mid
        passed = ratio >= TARGET_MESSAGES_RATIO and not problem
        ok = ok and passed
        print(
            f"messages(last={PAGE}) on {size / 2**20:.0f} MiB, {label}: {_ms(mid)} "
            f"(best {_ms(best)}, median of {len(times)}) vs full scan {_ms(scan_ns)} -> "
            f"{ratio:.0f}x (target >= {TARGET_MESSAGES_RATIO:.0f}x) {_verdict(passed)}"
            + (" (wrong page)" if problem else "")
        )
    return ok


# -- list ----------------------------------------------------------------------


def _template(folder: Path) -> tuple[str, list[bytes]]:
    """A small session recorded through the real API: its ID and its lines."""
    ws = Workspace(folder)
    agent = Execution("agent", "agent")
    turn = Execution("turn_1", "turn", parent_id=agent.id)
    model = Execution("model_1", "model", parent_id=turn.id)
    question = UserMessage("Which tests fail on main, and why?")
    reply = AssistantMessage(
        (TextContent("Two tests fail: both expect the old config key."),),
        model="model-x",
        provider="provider-y",
        usage=Usage(1800, 240, 0),
        stop_reason="end_turn",
    )
    with (
        ws.create(title="session 00000", model="model-x", source="bench") as session,
        session.begin_run() as run,
    ):
        for event in (
            events.message_end(None, question),
            events.turn_start(turn, 1),
            events.model_exec_start(model, "model-x", provider="provider-y"),
            events.model_request(model, [question], [], {"temperature": 0.2}, model="model-x"),
            events.model_exec_end(model, message=reply, usage=reply.usage, model="model-x"),
            events.message_end(model, reply),
            events.turn_end(turn, 1, stop_reason="end_turn"),
        ):
            run.record(event)
    with ws.path(session.id).open("rb") as stream:
        return session.id, stream.readlines()


def make_sessions(root: Path, scratch: Path, count: int) -> int:
    """Write ``count`` small sessions: the real API's bytes under fresh IDs and titles.

    Recording each through ``Session.create`` would fsync every file and the
    folder twice over; copying one recorded template keeps the bytes exact.
    Every ``INTERRUPTED_EVERY``-th copy lacks its final ``run_close``.
    """
    template_id, lines = _template(scratch)
    assert lines[-1].find(b'"type":"run_close"') > 0
    whole, interrupted = b"".join(lines), b"".join(lines[:-1])
    old_id, old_title = template_id.encode(), b"session 00000"
    rng = random.Random(0)
    total = 0
    for n in range(count):
        sid = f"{rng.getrandbits(128) | 1:032x}"
        body = interrupted if n % INTERRUPTED_EVERY == 0 else whole
        data = body.replace(old_id, sid.encode()).replace(old_title, f"session {n:05d}".encode())
        (root / f"{sid}.jsonl").write_bytes(data)
        total += len(data)
    return total


def _stat_all(paths: list[str]) -> int:
    """The baseline: one bare ``os.stat`` per session file."""
    for path in paths:
        os.stat(path)
    return len(paths)


def bench_list(sessions: int, reps: int, profile: bool) -> bool:
    """Print a warm ``list()`` against bare ``os.stat`` calls; a cold one for scale."""
    with scratch_dir() as folder:
        root, scratch = folder / "ws", folder / "template"
        root.mkdir()
        start = time.perf_counter()
        total = make_sessions(root, scratch, sessions)
        print(
            f"list: {sessions} sessions, {total / sessions / 1024:.1f} KiB each, "
            f"written in {time.perf_counter() - start:.1f} s"
        )
        paths = [str(root / name) for name in os.listdir(root)]
        cold: list[int] = []
        for _ in range(reps):
            took_cold, listed = _timed(Workspace(root).list)
            cold.append(took_cold)
        ws = Workspace(root)
        ws.list()
        read_before = ws.files_read
        # Warm lists and stat passes take turns, so both see the machine alike.
        warm: list[int] = []
        stats: list[int] = []
        ratios: list[float] = []
        for turn in range(LIST_TURNS):
            if turn % 2:
                took_stat, _ = _timed(lambda: _stat_all(paths))
                took_warm, listed = _timed(ws.list)
            else:
                took_warm, listed = _timed(ws.list)
                took_stat, _ = _timed(lambda: _stat_all(paths))
            warm.append(took_warm)
            stats.append(took_stat)
            ratios.append(took_warm / took_stat)
        reread = ws.files_read - read_before
        interrupted = sum(1 for s in listed if s.status == "interrupted")
        if profile:
            _profiled("list, cold", Workspace(root).list)
            _profiled("list, warm", ws.list)

    expected_interrupted = len(range(0, sessions, INTERRUPTED_EVERY))
    correct = len(listed) == sessions and reread == 0 and interrupted == expected_interrupted
    print(
        f"  listed {len(listed)} sessions ({interrupted} interrupted, expected "
        f"{expected_interrupted}); files re-read by the warm lists: {reread}; cold list "
        f"(new Workspace, every file read) {_ms(median([float(t) for t in cold]))}"
    )
    warm_mid, stat_mid = median([float(t) for t in warm]), median([float(t) for t in stats])
    ratio = median(ratios)
    passed = ratio <= TARGET_LIST_RATIO and correct
    print(
        f"list() of {sessions} sessions, warm: {_ms(warm_mid)} (best {_ms(min(warm))}) vs "
        f"{sessions} os.stat calls {_ms(stat_mid)} (best {_ms(min(stats))}); median of "
        f"{LIST_TURNS} adjacent pairs -> {ratio:.2f}x, best vs best "
        f"{min(warm) / min(stats):.2f}x (target <= {TARGET_LIST_RATIO:.0f}x) {_verdict(passed)}"
        + ("" if correct else " (wrong listing)")
    )
    return passed


# -- follow --------------------------------------------------------------------


def bench_follow(count: int, spacing_ms: float) -> bool:
    """Print write-to-delivery latency of ``follow`` with its default poll interval."""
    workload = build_events(count // 6 + 10)[:count]
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    sizes: list[int] = []
    started, stop = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def consume(path: Path) -> None:
        clock = time.perf_counter_ns
        try:
            for record in follow(path, stop=stop):
                received[record.seq] = clock()
                started.set()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            started.set()

    with scratch_dir() as folder:
        path = folder / "follow.jsonl"
        with Session.create(path) as session:
            consumer = threading.Thread(target=consume, args=(path,), name="follower")
            consumer.start()
            started.wait(5)  # session_start delivered: the follower is polling
            period_ns = int(spacing_ms * 1e6)
            with session.begin_run() as run:
                clock = time.perf_counter_ns
                due = clock()
                for event in workload:
                    due += period_ns
                    while (wait := due - clock()) > 0:
                        time.sleep(wait / 1e9)
                    seq = session.next_seq
                    sent[seq] = clock()
                    record = run.record(event)
                    assert record is not None
                    assert record.seq == seq
                    sizes.append(record.end_offset - record.offset)
            deadline = time.monotonic() + 5
            while not set(sent) <= set(received) and time.monotonic() < deadline:
                time.sleep(0.01)
            stop.set()
            consumer.join(10)
    if errors:
        raise errors[0]

    lost = [seq for seq in sent if seq not in received]
    latencies = sorted(received[seq] - at for seq, at in sent.items() if seq in received)
    p50, p99 = percentile(latencies, 0.5) / 1e6, percentile(latencies, 0.99) / 1e6
    worst = latencies[-1] / 1e6
    typical_kib = median([float(s) for s in sizes]) / 1024
    print(
        f"follow: {len(sent)} events {spacing_ms:g} ms apart, {typical_kib:.1f} KiB median "
        f"(max {max(sizes) / 1024:.0f} KiB); delivered {len(latencies)}, lost {len(lost)}"
    )
    passed = p99 < TARGET_FOLLOW_P99_MS and not lost
    print(
        f"follow latency (poll 20 ms): p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {worst:.1f} ms "
        f"(target p99 < {TARGET_FOLLOW_P99_MS:.0f} ms) {_verdict(passed)}"
    )
    return passed


# -- huge line -------------------------------------------------------------------


def _huge_session(ws: Workspace, line_bytes: int) -> str:
    """A session whose middle message is one tool result of ``line_bytes`` characters."""
    tool = Execution("call_1", "tool")
    output = ("0123456789abcdef" * (line_bytes // 16 + 1))[:line_bytes]
    with ws.create(title="huge tool output") as session, session.begin_run() as run:
        run.record(events.message_end(None, UserMessage("Dump the table.")))
        result = ToolResultMessage("call_1", "dump", (TextContent(output),))
        run.record(events.message_end(tool, result))
        run.record(events.message_end(None, AssistantMessage((TextContent("Done."),))))
        return session.id


def _huge_line_check(root: Path, mib: int, reps: int) -> bool:
    """Time one line of ``mib`` MB read backwards, by the library and by ``loopscribe show``."""
    ws = Workspace(root)
    sid = _huge_session(ws, mib * 1_000_000)
    path = ws.path(sid)
    try:
        scans, pages, tails, shows = [], [], [], []
        for _ in range(reps):
            scans.append(_timed(lambda: sum(1 for _ in read(path, decode=False)))[0])
            took, page = _timed(lambda: Workspace(root).messages(sid, last=50))
            pages.append(took)
            tails.append(_timed(lambda: tail_offset(path, 10))[0])
            shows.append(_timed(lambda: _show(path))[0])
    finally:
        path.unlink()
    scan, best = min(scans), min(pages)
    correct = len(page.messages) == 3 and page.total == 3
    ratio = best / scan
    passed = ratio <= TARGET_HUGE_LINE_RATIO and correct
    print(
        f"huge line of {mib} MB: messages(last=50) {_ms(best)}, tail_offset "
        f"{_ms(min(tails))}, `loopscribe show` {_ms(min(shows))} (a process); full read "
        f"{_ms(scan)} (best of {reps}) -> messages {ratio:.1f}x a full read "
        f"(target <= {TARGET_HUGE_LINE_RATIO:.0f}x) {_verdict(passed)}"
        + ("" if correct else " (wrong page)")
    )
    return passed


def _show(path: Path) -> None:
    """``loopscribe show FILE`` in its own process, its output thrown away."""
    subprocess.run(
        [sys.executable, "-m", "loopscribe", "show", str(path)],
        stdout=subprocess.DEVNULL,
        check=True,
    )


def bench_huge_line(sizes_mib: list[int], reps: int) -> bool:
    """Print messages(), tail_offset() and ``show`` on one huge line against a full read."""
    with scratch_dir() as root:
        results = [_huge_line_check(root, mib, reps) for mib in sizes_mib]  # every size, always
    return all(results)


def main() -> int:
    """Run the four checks; with ``--strict``, return 1 if any target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="messages session size")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions to list")
    parser.add_argument("--events", type=int, default=2_000, help="events to follow")
    parser.add_argument("--spacing-ms", type=float, default=3.0, help="gap between events")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions of slow calls")
    parser.add_argument(
        "--line-mib",
        type=int,
        nargs="+",
        default=list(HUGE_LINE_MIB),
        help="huge-line lengths in MB (10^6 bytes)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the measured calls")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--only",
        choices=("messages", "list", "follow", "huge-line"),
        help="run one of the four checks",
    )
    args = parser.parse_args()
    args.reps = max(1, args.reps)
    checks: dict[str, Callable[[], bool]] = {
        "messages": lambda: bench_messages(args.size_mib, args.reps, args.profile),
        "list": lambda: bench_list(args.sessions, args.reps, args.profile),
        "follow": lambda: bench_follow(args.events, args.spacing_ms),
        "huge-line": lambda: bench_huge_line(args.line_mib, args.reps),
    }
    results = [check() for name, check in checks.items() if args.only in (None, name)]
    return 1 if args.strict and not all(results) else 0


if __name__ == "__main__":
    sys.exit(main())
