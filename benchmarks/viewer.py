"""Benchmark: the viewer over 100,000 sessions, on a run of 100,000 tool calls, and ``report``.

Each figure against a baseline measured in the same run:

* **sessions**: ``loopscribe serve`` over a folder of 100,000 small sessions
  (written straight in the format by ``tests/viewer/many_sessions.py``), in
  a fresh process: the time to the first 200 of ``/`` against one plain
  ``os.scandir`` + ``stat`` pass over the folder; the bytes of the home page
  and of one ``/api/sessions`` page against the whole list (every page,
  followed by cursor: what the home page embedded before it was paged);
  the time until every file is indexed, and the process's peak RSS
  (``VmHWM``) then, against the target; a trace lookup once indexed.

* **index**: folding the big run into its timeline (what ``serve`` does once
  per file) against one raw pass of ``read(path, decode=False)`` over it.
* **run page**: the JSON a run page loads — the first page of rows
  (``RunTimeline.to_json(limit=300)``, what the viewer sends) against the
  whole timeline in one document (what it sent before rows were paged):
  time to build and encode it, and its bytes. Then the same page through
  the web application (Starlette's test client, warm index), and a deep link
  to a span near the end (its page found and sent).
* **report memory**: peak RSS of ``loopscribe report`` (``write_report``,
  which streams record by record) on a 150 MB session, in a fresh process,
  against the same report built as one string in memory (``build_report``)
  and against a process that only imported the same modules (the floor).
  With ``--full`` bodies too, so the output is as large as the input.
* **report open**: a generated session of 12,000 calls (``--report-calls``;
  model calls with their requests and replies, tool calls with 1-64 KiB
  outputs), its report opened from disk in headless Chromium: the time from
  navigation to the timeline's first rows on screen, and from selecting a
  bar to its records drawn, against the time the same browser takes only to
  parse the page's records as one JSON document (what the report embedded
  before its records were chunked), and the report's bytes against the
  uncompressed records'.

Run: ``.venv/bin/python benchmarks/viewer.py [--sessions N] [--calls N] [--report-mib N]
[--report-calls N] [--reps N] [--only sessions|run|report|report-open]`` (defaults
100,000, 100,000, 150 and 12,000). The
machine is shared and noisy: each timing is the best of ``--reps`` alternating
repetitions.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from tests.viewer.many_sessions import write_sessions

from benchmarks._workload import scratch_dir
from loopscribe import Execution, Session, events, read
from loopscribe.otel import trace_id
from loopscribe.viewer import load_timeline

PAGE_ROWS = 300
TARGET_INDEX_RATIO = 5.0
"""Indexing a run may cost at most this many raw read passes over its file."""
TARGET_PAGE_BYTES_RATIO = 100.0
"""The first page of rows must be at least this much smaller than the whole timeline."""
TARGET_REPORT_RSS_MIB = 150.0
"""Peak RSS of a streamed report of a 150 MB session: well under the file's size."""
TARGET_START_SECONDS = 10.0
"""``serve`` over 100,000 sessions answers its home page within this (a fresh interpreter
that imports the web framework takes seconds of it on a loaded machine)."""
TARGET_SERVE_RSS_MIB = 300.0
"""Peak RSS of ``serve`` over 100,000 sessions, every file indexed (issue 31's target)."""
TARGET_HOME_BYTES = 200_000
"""The home page's bytes, whatever the number of sessions."""
TARGET_REPORT_OPEN_SECONDS = 3.0
"""A report of a 12,000-call session shows its timeline within this, opened from disk."""


def record_big_run(path: Path, calls: int) -> tuple[str, str]:
    """One agent turn that makes ``calls`` tool calls; 1% of them fail."""
    # Scripted times that end just before run_close, which is written at the real time.
    t = datetime.now(UTC) - timedelta(milliseconds=calls * 2 + 100)
    title = {"title": f"{calls:,} tool calls"}
    with Session.create(path, metadata=title) as session, session.begin_run() as run:
        agent = Execution("agent", "agent")
        run.record(events.agent_start(agent, "bulk", timestamp=t))
        turn = Execution("turn_1", "turn", parent_id="agent")
        run.record(events.turn_start(turn, 1, timestamp=t))
        for i in range(calls):
            ex = Execution(f"call_{i}", "tool", parent_id="turn_1")
            start = t + timedelta(milliseconds=i * 2)
            run.record(events.tool_exec_start(ex, "lookup", {"key": i}, timestamp=start))
            failed = i % 100 == 99
            run.record(
                events.tool_exec_end(
                    ex,
                    "lookup",
                    f"value of key {i}",
                    error={"type": "KeyError", "message": str(i)} if failed else None,
                    timestamp=start + timedelta(milliseconds=1),
                )
            )
        end = t + timedelta(milliseconds=calls * 2 + 1)
        run.record(events.turn_end(turn, 1, timestamp=end))
        run.record(events.agent_end(agent, "bulk", timestamp=end))
        return session.id, run.id


def record_big_bodies(path: Path, mib: int) -> None:
    """Tool calls with 1-256 KiB outputs until the file holds ``mib`` MiB."""
    rng = random.Random(7)
    words = ["session", "record", "event", "model", "tool", "result", "message", "usage"]
    target = mib << 20
    t = datetime(2026, 1, 1, tzinfo=UTC)
    with Session.create(path) as session, session.begin_run() as run:
        i = 0
        while path.stat().st_size < target:
            ex = Execution(f"call_{i}", "tool")
            size = int(2 ** rng.uniform(10, 18))
            output = " ".join(rng.choice(words) for _ in range(size // 6))
            run.record(events.tool_exec_start(ex, "read_file", {"n": i}, timestamp=t))
            run.record(events.tool_exec_end(ex, "read_file", output, timestamp=t))
            t += timedelta(milliseconds=5)
            i += 1


def best(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    times = []
    result = None
    for _ in range(reps):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return min(times), result


_RSS_SCRIPT = """
import sys
from loopscribe.viewer import build_report, write_report
import loopscribe.viewer._report
mode, src, out, full = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
if mode == "stream":
    write_report(src, out, full=full)
elif mode == "string":
    text = build_report(src, full=full)
    open(out, "w", encoding="utf-8").write(text)
# VmHWM is this process's own peak (ru_maxrss would include the parent's, kept over exec).
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def peak_rss_mib(mode: str, src: Path, out: Path, full: bool) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _RSS_SCRIPT, mode, str(src), str(out), "1" if full else "0"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.strip().splitlines()[-1]) / 1024  # VmHWM is in KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--report-mib", type=int, default=150)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--report-calls", type=int, default=12_000)
    parser.add_argument(
        "--only", choices=("sessions", "run", "report", "report-open"), help="one part only"
    )
    args = parser.parse_args()
    missed: list[str] = []
    with scratch_dir() as folder:
        if args.only in (None, "sessions"):
            sessions_part(folder, args, missed)
        if args.only in (None, "run"):
            run_part(folder, args, missed)
        if args.only in (None, "report"):
            report_part(folder, args, missed)
        if args.only in (None, "report-open"):
            report_open_part(folder, args, missed)
    print("targets missed: " + ", ".join(missed) if missed else "targets met")
    return 1 if missed and args.strict else 0


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=600) as response:
        body: bytes = response.read()
        return body


def _peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def sessions_part(folder: Path, args: argparse.Namespace, missed: list[str]) -> None:
    """``serve`` over ``args.sessions`` sessions: start, pages, indexing, memory."""
    target = folder / "sessions"
    started = time.perf_counter()
    ids = write_sessions(target, args.sessions)
    print(f"wrote {args.sessions:,} sessions in {time.perf_counter() - started:.1f} s")

    def scan() -> int:
        with os.scandir(target) as entries:
            return sum(1 for entry in entries if entry.stat().st_size)

    scanned, _ = best(scan, args.reps)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    started = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "loopscribe.viewer", "serve", str(target), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while True:
            assert server.poll() is None, "loopscribe serve exited"
            try:
                home = _get(base + "/")
                break
            except OSError:
                time.sleep(0.02)
        first = time.perf_counter() - started
        while orjson.loads(_get(base + "/api/sessions?limit=1"))["indexing"] is not None:
            time.sleep(0.5)
        indexed = time.perf_counter() - started
        home = _get(base + "/")
        page = _get(base + "/api/sessions")
        whole, cursor, rows = 0, None, 0
        while True:
            body = orjson.loads(
                _get(base + "/api/sessions?limit=500" + (f"&cursor={cursor}" if cursor else ""))
            )
            whole += len(orjson.dumps(body["sessions"]))
            rows += len(body["sessions"])
            cursor = body["next"]
            if cursor is None:
                break
        assert rows == args.sessions, rows
        sid = ids[len(ids) // 2]
        run_id = orjson.loads(_get(f"{base}/api/session/{sid}"))["runs"][0]["run_id"]
        t0 = time.perf_counter()
        _get(f"{base}/api/trace/{trace_id(sid, run_id):032x}")
        traced = time.perf_counter() - t0
        rss = _peak_rss_mib(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"serve over {args.sessions:,} sessions: first 200 of / after {first:.2f} s "
        f"(one os.scandir + stat pass of the folder: {scanned:.2f} s); "
        f"every file indexed after {indexed:.1f} s, peak RSS {rss:.0f} MiB "
        f"(target {TARGET_SERVE_RSS_MIB:.0f})"
    )
    print(
        f"  home page {len(home) / 1e3:,.1f} KB and an /api/sessions page "
        f"{len(page) / 1e3:,.1f} KB vs the whole list {whole / 1e6:,.1f} MB "
        f"({whole / len(home):,.0f}x); a trace lookup once indexed {traced * 1000:.0f} ms"
    )
    if first > TARGET_START_SECONDS:
        missed.append("serve start")
    if rss > TARGET_SERVE_RSS_MIB:
        missed.append("serve memory")
    if len(home) > TARGET_HOME_BYTES:
        missed.append("home page bytes")
    for path in target.iterdir():
        path.unlink()


def run_part(folder: Path, args: argparse.Namespace, missed: list[str]) -> None:
    """Index, page and serve a run of ``args.calls`` tool calls."""
    path = folder / "big-run.jsonl"
    started = time.perf_counter()
    sid, rid = record_big_run(path, args.calls)
    size = path.stat().st_size
    print(
        f"recorded {args.calls:,} tool calls: {size / 1e6:.1f} MB "
        f"in {time.perf_counter() - started:.1f} s"
    )

    # -- index vs one raw read, alternating ---------------------------------------
    raw_times, fold_times = [], []
    timeline = None
    for _ in range(args.reps):
        t0 = time.perf_counter()
        for _record in read(path, decode=False):
            pass
        raw_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        timeline = load_timeline(path)
        fold_times.append(time.perf_counter() - t0)
    assert timeline is not None
    raw, fold = min(raw_times), min(fold_times)
    print(
        f"index: fold {fold:.2f} s vs read(decode=False) {raw:.2f} s: "
        f"{fold / raw:.2f}x the raw pass"
    )
    run = timeline.runs[rid]

    # -- the run page's JSON: one page vs the whole timeline ---------------------
    def page() -> bytes:
        run._rows = None  # build the rows again, as after the file grew
        return orjson.dumps(run.to_json(limit=PAGE_ROWS))

    def whole() -> bytes:
        run._rows = None
        return orjson.dumps(run.to_json())

    page_t, page_b, whole_t, whole_b = [], b"", [], b""
    for _ in range(args.reps):
        t, page_b = best(page, 1)
        page_t.append(t)
        t, whole_b = best(whole, 1)
        whole_t.append(t)
    print(
        f"run page JSON: first {PAGE_ROWS} rows {min(page_t) * 1000:.0f} ms, "
        f"{len(page_b) / 1e3:,.0f} KB vs the whole timeline {min(whole_t) * 1000:.0f} ms, "
        f"{len(whole_b) / 1e6:,.1f} MB: {len(whole_b) / len(page_b):,.0f}x fewer bytes, "
        f"{min(whole_t) / min(page_t):.1f}x faster"
    )
    opened = fold + min(page_t)
    print(f"open a {args.calls:,}-call run from cold (index + first page): {opened:.2f} s")
    if fold / raw > TARGET_INDEX_RATIO:
        missed.append("index")
    if len(whole_b) / len(page_b) < TARGET_PAGE_BYTES_RATIO:
        missed.append("page bytes")

    # -- through the web application --------------------------------------------
    from starlette.testclient import TestClient

    from loopscribe.otel import span_id
    from loopscribe.viewer import create_app

    with TestClient(create_app(folder), base_url="http://127.0.0.1") as client:
        t0 = time.perf_counter()
        client.get("/api/sessions")
        cold = time.perf_counter() - t0
        url = f"/session/{sid}/run/{rid}"
        warm, response = best(lambda: client.get(url), args.reps)
        deep = f"{span_id(sid, rid, f'call_{args.calls - 5}', 1):016x}"
        linked, deep_response = best(lambda: client.get(f"{url}?span={deep}"), args.reps)
        assert response.status_code == 200
        assert deep_response.status_code == 200
        print(
            f"web: session list (indexes the file) {cold:.2f} s; "
            f"run page {warm * 1000:.0f} ms, "
            f"{len(response.content) / 1e3:,.0f} KB; deep link to call_{args.calls - 5} "
            f"{linked * 1000:.0f} ms"
        )
    path.unlink()


def report_part(folder: Path, args: argparse.Namespace, missed: list[str]) -> None:
    """Peak memory of a streamed report of a large session, against building it in memory."""
    big = folder / "bodies.jsonl"
    started = time.perf_counter()
    record_big_bodies(big, args.report_mib)
    print(
        f"recorded {big.stat().st_size / 1e6:.0f} MB of 1-256 KiB tool outputs "
        f"in {time.perf_counter() - started:.1f} s"
    )
    out = folder / "report.html"
    floor = peak_rss_mib("none", big, out, False)
    for full in (False, True):
        t0 = time.perf_counter()
        streamed = peak_rss_mib("stream", big, out, full)
        took = time.perf_counter() - t0
        written = out.stat().st_size
        held = peak_rss_mib("string", big, out, full)
        label = "--full" if full else "clipped"
        print(
            f"report ({label}, {written / 1e6:.0f} MB written in {took:.1f} s): peak RSS "
            f"streamed {streamed:.0f} MiB vs held in memory {held:.0f} MiB "
            f"(import floor {floor:.0f} MiB): {held / streamed:.1f}x less"
        )
        if streamed >= TARGET_REPORT_RSS_MIB:
            missed.append(f"report {label}")


_PARSE_ONLY = (
    "<!doctype html><meta charset=utf-8><title>loading</title>"
    '<script id="ls-data" type="application/json">{records}</script>'
    "<script>JSON.parse(document.getElementById('ls-data').textContent);"
    "document.title = 'parsed';</script>"
)


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    options.page_load_strategy = "none"  # time what the page shows, not the load event
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--window-size=1440,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def _until(driver: Any, script: str, timeout: float = 300.0) -> float:
    """Seconds until ``script`` returns true (polled every 20 ms)."""
    started = time.perf_counter()
    while not driver.execute_script(script):
        if time.perf_counter() - started > timeout:
            raise TimeoutError(script)
        time.sleep(0.02)
    return time.perf_counter() - started


def report_open_part(folder: Path, args: argparse.Namespace, missed: list[str]) -> None:
    """A 12,000-call session's report opened from disk in Chromium, against parsing its records."""
    from benchmarks._workload import build_events
    from loopscribe.viewer import load_timeline, write_report
    from loopscribe.viewer._clip import record_view
    from loopscribe.viewer._report import REPORT_STRING_LIMIT_CHARS

    src = folder / "calls.jsonl"
    events_ = build_events(max(1, args.report_calls // 3), seed=1)
    with (
        Session.create(src, metadata={"title": "report open"}) as session,
        session.begin_run() as run,
    ):
        for event in events_:
            run.record(event)
    timeline = load_timeline(src)
    (big,) = timeline.iter_runs()
    calls = big.counts()["model_calls"] + big.counts()["tool_calls"]
    started = time.perf_counter()
    report = write_report(src, folder / "report.html")
    wrote = time.perf_counter() - started
    # The baseline: every record (clipped as the report clips them) in one JSON document.
    baseline = folder / "parse-only.html"
    with open(src, "rb") as stream, open(baseline, "w", encoding="utf-8") as out:
        parts = []
        for line in stream:
            record = orjson.loads(line)
            view = record_view(record, 0, len(line), REPORT_STRING_LIMIT_CHARS, 1 << 20)
            parts.append(f'"{record["seq"]}":' + orjson.dumps(view).decode())
        records = ("{" + ",".join(parts) + "}").replace("</", "<\\/")
        out.write(_PARSE_ONLY.format(records=records))
    print(
        f"report of {calls:,} calls ({src.stat().st_size / 1e6:.0f} MB session): written in "
        f"{wrote:.1f} s, {report.stat().st_size / 1e6:.0f} MB "
        f"(the records as one JSON document: {baseline.stat().st_size / 1e6:.0f} MB)"
    )
    driver = _browser()
    try:
        opened, parsed, shown = [], [], []
        for _ in range(args.reps):
            driver.get("about:blank")
            driver.get(baseline.as_uri())
            parsed.append(_until(driver, "return document.title === 'parsed'"))
            driver.get("about:blank")
            driver.get(report.as_uri())
            opened.append(_until(driver, "return !!document.querySelector('.tl-row[data-exec]')"))
            _until(driver, "return document.readyState !== 'loading'")
            driver.execute_script(
                "document.querySelectorAll('.tl-row[data-exec] .bar')[250].click()"
            )
            shown.append(_until(driver, "return !!document.querySelector('#details .rec')"))
    finally:
        driver.quit()
    print(
        f"report open: first rows in {min(opened):.2f} s vs {min(parsed):.2f} s to parse its "
        f"records as one JSON document ({min(parsed) / min(opened):.1f}x); "
        f"a bar's records in {min(shown) * 1000:.0f} ms"
    )
    if min(opened) >= TARGET_REPORT_OPEN_SECONDS:
        missed.append("report open")


if __name__ == "__main__":
    sys.exit(main())
