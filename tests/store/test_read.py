"""Reading a store: list, messages by range requests, read, verify across segments, CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loopscribe import Session, Workspace, read, verify
from loopscribe.cli import main
from loopscribe.store import Shipper, Store, StoreWorkspace
from loopscribe.workspace import SessionNotFoundError

from .conftest import child_env, converse


def _ship(
    tmp_path: Path,
    url: str,
    *,
    turns: int = 3,
    chain: bool = False,
    size: int = 0,
    segment_bytes: int = 4096,
) -> tuple[Workspace, str]:
    """Record one session in a local workspace and ship it to ``url``."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="shipped", model="demo-1", chain=chain) as s:
        converse(s, turns, size=size)
        sid = s.id
    result = Shipper(ws.root, url, segment_bytes=segment_bytes).ship_once()
    assert not result.errors
    return ws, sid


def test_a_store_reads_like_the_folder_it_came_from(tmp_path: Path, store_url: str) -> None:
    """list, get, messages and read give what the local workspace gives."""
    local, sid = _ship(tmp_path, store_url, turns=6, size=500)
    store = Workspace(store_url)
    assert isinstance(store, StoreWorkspace)
    [summary] = store.list()
    mine = local.get(sid)
    assert summary.id == sid
    assert summary.title == "shipped"
    assert summary.model == "demo-1"
    assert (summary.message_count, summary.records, summary.input_tokens) == (
        mine.message_count,
        mine.records,
        mine.input_tokens,
    )
    assert summary.created == mine.created
    assert summary.updated == mine.updated
    assert str(summary.path) == f"{store_url}/sessions/{sid}"
    assert store.get(sid) == summary
    for last, skip in ((3, 0), (4, 5), (50, 0)):
        assert store.messages(sid, last=last, skip=skip) == local.messages(
            sid, last=last, skip=skip
        )
    assert [r.seq for r in read(f"{store_url}/sessions/{sid}")] == [
        r.seq for r in read(local.path(sid))
    ]
    assert [r.data for r in read(f"{store_url}/sessions/{sid}")] == [
        r.data for r in read(local.path(sid))
    ]
    with pytest.raises(SessionNotFoundError, match="no session"):
        store.get("0" * 32)


def test_messages_last_fetches_about_the_page_not_the_session(
    tmp_path: Path, store_url: str
) -> None:
    """A page at the end of a long shipped session costs range requests near the page size."""
    _local, sid = _ship(tmp_path, store_url, turns=150, size=4000, segment_bytes=256 << 10)
    store = Workspace(store_url)
    assert isinstance(store, StoreWorkspace)
    page = store.messages(sid, last=10)
    assert len(page.messages) == 10
    assert page.has_more
    assert page.total == 300
    view = store.view(sid)
    session_bytes = view.size
    assert len(view.segments()) > 3
    # The page's lines span about 5 exchanges of ~8 KiB; reads go in 64 KiB blocks.
    assert view.fetched_bytes <= 2 * (64 << 10) + 5 * 8 * 1024
    assert view.fetched_bytes < session_bytes / 10


def test_a_chained_session_verifies_across_segments(tmp_path: Path, store_url: str) -> None:
    """The hash chain holds across segments, and a changed byte in one is found."""
    _local, sid = _ship(tmp_path, store_url, turns=8, chain=True, size=300)
    url = f"{store_url}/sessions/{sid}"
    report = verify(url)
    assert report.ok
    assert report.records > 20
    assert main(["verify", url]) == 0
    store = Store(store_url)
    segments = store.session(sid).segments()
    assert len(segments) > 2
    victim = f"{store.root}/sessions/{sid}/{segments[1].name}"
    data = store.fs.cat_file(victim)
    store.fs.pipe_file(victim, data.replace(b"answer", b"ANSWER", 1))
    broken = verify(url)
    assert not broken.ok
    assert broken.broken is not None
    assert broken.broken.seq is not None
    assert broken.broken.seq > segments[1].first_seq
    assert main(["verify", url]) == 1


def test_cli_ls_show_and_find_read_a_store(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """ls URL, show SESSION_URL, find URL --trace-id: the store's manifests lead the way."""
    local, sid = _ship(tmp_path, store_url)
    assert main(["--json", "ls", store_url]) == 0
    [listed] = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert listed["id"] == sid
    assert listed["path"] == f"{store_url}/sessions/{sid}"
    assert main(["--json", "show", f"{store_url}/sessions/{sid}#seq=3", "--last", "2"]) == 0
    shown = orjson.loads(capsys.readouterr().out)
    assert [
        m["content"][0]["text"] if isinstance(m["content"], list) else m["content"]
        for m in shown["messages"]
    ] == [
        "question 2",
        "answer 2",
    ]
    run_start = next(r for r in read(local.path(sid)) if r.type == "run_start")
    from loopscribe.otel import trace_id

    trace = f"{trace_id(sid, run_start.run_id or ''):032x}"
    assert main(["--json", "find", store_url, "--trace-id", trace]) == 0
    found = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(found) == sum(1 for r in read(local.path(sid)) if r.run_id) > 0
    assert all(f["file"] == f"{store_url}/sessions/{sid}" for f in found)
    assert main(["find", store_url, "--trace-id", "1" * 32]) == 3  # not found
    assert "1 shipped sessions searched" in capsys.readouterr().err


def test_cli_ship_in_a_subprocess_then_read_back(tmp_path: Path, s3_url: str) -> None:
    """`loopscribe ship DIR --to s3://...` reports the pass; a second pass ships nothing."""
    store_url = s3_url
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 2)
        sid = s.id
    cmd = [sys.executable, "-m", "loopscribe", "--json", "ship", str(ws.root), "--to", store_url]
    first = subprocess.run(cmd, capture_output=True, check=True, env=child_env(), timeout=60)
    assert orjson.loads(first.stdout)["shipped"] == 1
    second = subprocess.run(cmd, capture_output=True, check=True, env=child_env(), timeout=60)
    assert orjson.loads(second.stdout)["bytes_uploaded"] == 0
    assert [r.seq for r in read(f"{store_url}/sessions/{sid}")] == [
        r.seq for r in read(ws.path(sid))
    ]


def test_cli_ship_reports_a_bad_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A scheme without a backend is one error line, exit status 1."""
    assert main(["ship", str(tmp_path), "--to", "nosuchscheme://x/y"]) == 1
    assert "nosuchscheme" in capsys.readouterr().err


def test_a_grown_session_reads_with_its_new_segments(tmp_path: Path, folder_url: str) -> None:
    """A reader sees what the manifest commits: new records after the next pass."""
    local, sid = _ship(tmp_path, folder_url, turns=2)
    store = Workspace(folder_url)
    before = store.get(sid).records
    with Session.open(local.path(sid)) as s:
        converse(s, 2, tag="again ")
    Shipper(local.root, folder_url).ship_once()
    assert store.get(sid).records == local.get(sid).records > before
    assert store.messages(sid, last=1).messages == local.messages(sid, last=1).messages
