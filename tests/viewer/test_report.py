"""`loopscribe report`: one self-contained HTML file, no network, bodies embedded."""

from __future__ import annotations

import base64
import re
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import Execution, Session
from loopscribe import events as ev
from loopscribe.viewer import build_report, write_report
from loopscribe.viewer._report import REPORT_STRING_LIMIT_CHARS

from .conftest import TOOL_OUTPUT, Demo, record_demo


def embedded(html: str) -> dict[str, Any]:
    """The data the report's script draws."""
    match = re.search(r'<script id="ls-data" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    data: dict[str, Any] = orjson.loads(match[1])
    return data


def records_of(html: str) -> dict[str, Any]:
    """The records the report holds, by seq: its gzip chunks, decompressed."""
    out: dict[str, Any] = {}
    for b64 in re.findall(
        r'<script type="application/gzip" id="ls-chunk-\d+">([^<]*)</script>', html
    ):
        out.update(orjson.loads(zlib.decompress(base64.b64decode(b64), wbits=31)))
    return out


def test_the_report_needs_nothing_from_the_network(demo: Demo) -> None:
    """Script and style are inline; the CSP forbids every request; no URL is loaded."""
    html = build_report(demo.path)
    assert "default-src 'none'" in html
    assert not re.search(r"<script[^>]*\bsrc=", html)
    assert not re.search(r'<link[^>]*rel="stylesheet"', html)
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)
    assert "RunView" in html  # the viewer's script, inline


def test_the_report_embeds_timeline_and_records(demo: Demo) -> None:
    """Every run's timeline and every record behind its bars, bodies decoded."""
    html = build_report(demo.path)
    data: dict[str, Any] = embedded(html)
    assert data["mode"] == "report"
    (run,) = data["runs"]
    assert run["trace_id"] == demo.trace_hex
    records = records_of(html)
    seqs = {s for row in run["rows"] for bar in row["bars"] for s in bar["seqs"]}
    assert seqs | set(run["records"]) == {int(k) for k in records}
    # The index of the chunks names every record, each once.
    chunked = [seq for chunk in data["records"]["chunks"] for seq in chunk]
    assert sorted(chunked) == sorted(int(k) for k in records)
    results = [r for r in records.values() if r["type"] == "tool_exec_end"]
    assert any(r["data"]["result"]["content"][0]["text"] == TOOL_OUTPUT for r in results)


def test_long_bodies_are_cut_unless_full(tmp_path: Path) -> None:
    """A report keeps strings up to a limit; --full keeps them whole."""
    big = "y" * (REPORT_STRING_LIMIT_CHARS * 3)
    demo = record_demo(tmp_path / "s.jsonl", big_output=big)
    clipped = build_report(demo.path)
    assert big not in clipped
    assert len(clipped) < len(big)
    whole = write_report(demo.path, tmp_path / "full.html", full=True)
    assert any(
        r["data"]["result"]["content"][0]["text"] == big
        for r in records_of(whole.read_text()).values()
        if r["type"] == "tool_exec_end" and r["execution"]["id"] == "call_fetch"
    )
    assert not list(tmp_path.glob(".*.partial"))


def test_a_body_cannot_close_the_data_element(tmp_path: Path) -> None:
    """`</script>` inside a recorded body stays data."""
    path = tmp_path / "s.jsonl"
    evil = "</script><script>alert(1)</script><!--"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.tool_exec_end(Execution("t", "tool"), "echo", evil))
    html = build_report(path)
    # The data element, the viewer's script, and each chunk of records.
    assert html.count("</script>") == 2 + len(embedded(html)["records"]["chunks"])
    records = records_of(html)
    assert any(r["data"].get("result") == evil for r in records.values())


def test_only_the_runs_asked_for(tmp_path: Path) -> None:
    """run_ids picks runs; an unknown one is a LookupError naming the runs there are."""
    path = tmp_path / "two.jsonl"
    with Session.create(path) as session:
        ids = []
        for n in range(2):
            with session.begin_run() as run:
                run.record(ev.tool_exec_end(Execution("t", "tool"), "echo", f"run-{n}"))
                ids.append(run.id)
    data = embedded(build_report(path, run_ids=(ids[1],)))
    assert [r["run_id"] for r in data["runs"]] == [ids[1]]
    with pytest.raises(LookupError, match=ids[0]):
        build_report(path, run_ids=("nope",))


class _Writes:
    """A text stream that keeps what was written and the size of each write."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)


def test_the_report_is_written_a_record_at_a_time(tmp_path: Path) -> None:
    """A large session's report never passes through memory whole: each record is one write."""
    from loopscribe.viewer import stream_report

    big = "x" * 200_000
    path = tmp_path / "big.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        for i in range(20):
            ex = Execution(f"call_{i}", "tool")
            run.record(ev.tool_exec_start(ex, "read", {"i": i}))
            run.record(ev.tool_exec_end(ex, "read", big))
    out = _Writes()
    stream_report(path, out, full=True)  # type: ignore[arg-type]
    html = "".join(out.parts)
    # No write holds more than a chunk of records (compressed), and all of them are there.
    assert max(len(p) for p in out.parts if "RunView" not in p) < 200_000
    records = records_of(html)
    assert len(records) == 1 + 40 + 1  # run_start, the calls, run_close
    assert records["3"]["data"]["result"] == big
    # And through write_report: the same document, renamed into place, nothing left over.
    target = write_report(path, tmp_path / "report.html", full=True)
    assert target.read_text(encoding="utf-8") == html.replace(
        embedded(html)["generated"], embedded(target.read_text(encoding="utf-8"))["generated"]
    )
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
