"""Shipping: incremental, complete lines only, idempotent, and what a crash leaves behind."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loopscribe import Execution, Session, StoreError, Workspace, read
from loopscribe import events as ev
from loopscribe.store import Shipper, ShipResult, cursor_path

from ..scripted import scripted
from .conftest import converse, shipped_bytes


def _store_dir(url: str) -> Path:
    return Path(url.removeprefix("file://"))


def test_ship_copies_sessions_byte_for_byte_and_lays_them_out(
    tmp_path: Path, folder_url: str
) -> None:
    """Segments named by first and last seq concatenate to the file; the manifest says so."""
    ws = Workspace(tmp_path / "src")
    ids = []
    for n in range(3):
        with ws.create(title=f"s{n}") as s:
            converse(s, 2 + n)
            ids.append(s.id)
    result = Shipper(ws.root, folder_url, segment_bytes=700).ship_once()
    store = _store_dir(folder_url)
    assert result.sessions == 3
    assert result.shipped == 3
    assert not result.errors
    assert (store / "loopscribe-store.json").read_bytes() == b'{"layout":1}'
    for sid in ids:
        source = ws.path(sid).read_bytes()
        assert shipped_bytes(store, sid) == source
        manifest = orjson.loads((store / "sessions" / f"{sid}.json").read_bytes())
        assert manifest["bytes"] == len(source)
        assert manifest["records"] == source.count(b"\n")
        names = sorted(p.name for p in (store / "sessions" / sid).glob("*.jsonl"))
        # Names are first-last seq, contiguous from 0 to the last record.
        seqs = [tuple(int(x) for x in n.removesuffix(".jsonl").split("-")) for n in names]
        assert seqs[0][0] == 0
        assert seqs[-1][1] == manifest["records"] - 1
        assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(seqs))
    assert result.records == sum(ws.path(s).read_bytes().count(b"\n") for s in ids)


def test_a_pass_uploads_about_the_bytes_added(tmp_path: Path, folder_url: str) -> None:
    """The second pass puts only the new lines (plus a manifest); an idle pass puts nothing."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="grows") as s:
        converse(s, 40, size=200)
        sid = s.id
    shipper = Shipper(ws.root, folder_url)
    first = shipper.ship_once()
    size_before = ws.path(sid).stat().st_size
    assert first.bytes_uploaded >= size_before
    with Session.open(ws.path(sid)) as s:
        converse(s, 3, size=200, tag="new ")
    added = ws.path(sid).stat().st_size - size_before
    second = Shipper(ws.root, folder_url).ship_once()  # a new process: cursor and manifest
    manifest_bytes = len((_store_dir(folder_url) / "sessions" / f"{sid}.json").read_bytes())
    assert second.segments == 1
    assert second.bytes_uploaded == added + manifest_bytes
    assert added < size_before / 5  # the point: far less than the whole file again
    idle = Shipper(ws.root, folder_url).ship_once()
    assert idle.bytes_uploaded == 0
    assert idle.shipped == 0
    assert shipped_bytes(_store_dir(folder_url), sid) == ws.path(sid).read_bytes()


def test_a_session_being_written_ships_its_complete_lines_only(
    tmp_path: Path, folder_url: str
) -> None:
    """An unfinished final line waits in the file until it ends with a newline."""
    ws = Workspace(tmp_path / "src")
    writer = ws.create(title="live")
    converse(writer, 1)
    path = ws.path(writer.id)
    complete = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b'{"session_id":"' + writer.id.encode() + b'","seq":')  # a write cut mid-line
    shipper = Shipper(ws.root, folder_url)
    result = shipper.ship_once()
    assert not result.errors
    assert shipped_bytes(_store_dir(folder_url), writer.id) == complete
    summary = Workspace(folder_url).get(writer.id)
    assert summary.status == "running"  # the writer held the lock while it shipped
    writer.close()  # Session.open would cut the tail; close leaves it, so cut it here
    with open(path, "r+b") as f:
        f.truncate(len(complete))
    with Session.open(path) as s:
        converse(s, 1, tag="more ")
    shipper.ship_once()
    assert shipped_bytes(_store_dir(folder_url), writer.id) == path.read_bytes()
    assert Workspace(folder_url).get(writer.id).status == "idle"


def test_a_leftover_segment_of_a_killed_pass_is_adopted_not_uploaded_again(
    tmp_path: Path, folder_url: str
) -> None:
    """A segment put before its manifest was written is kept, and its bytes not sent twice."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 5, size=100)
        sid = s.id
    Shipper(ws.root, folder_url).ship_once()
    store = _store_dir(folder_url)
    before = (store / "sessions" / f"{sid}.json").read_bytes()
    committed = orjson.loads(before)
    with Session.open(ws.path(sid)) as s:
        converse(s, 2, tag="late ")
    # What a pass killed between the segment PUT and the manifest PUT leaves behind.
    data = ws.path(sid).read_bytes()
    first, last = committed["records"], data.count(b"\n") - 1
    leftover = store / "sessions" / sid / f"{first:012d}-{last:012d}.jsonl"
    leftover.write_bytes(data[committed["bytes"] :])
    os.unlink(cursor_path(ws.path(sid)))
    result = Shipper(ws.root, folder_url).ship_once()
    assert result.adopted == 1
    assert result.segments == 0
    assert result.bytes_uploaded == len((store / "sessions" / f"{sid}.json").read_bytes())
    assert shipped_bytes(store, sid) == data


def test_a_partial_leftover_segment_is_removed_and_shipped_again(
    tmp_path: Path, folder_url: str
) -> None:
    """A leftover that does not hold its records' bytes (a cut write) is replaced."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 3)
        sid = s.id
    data = ws.path(sid).read_bytes()
    last = data.count(b"\n") - 1
    folder = _store_dir(folder_url) / "sessions" / sid
    folder.mkdir(parents=True)
    (folder / f"{0:012d}-{last:012d}.jsonl").write_bytes(data[:100])
    (folder / f"{0:012d}-{1:012d}.jsonl").write_bytes(b"junk\n")
    result = Shipper(ws.root, folder_url).ship_once()
    assert not result.errors
    assert result.adopted == 0
    assert shipped_bytes(_store_dir(folder_url), sid) == data
    assert [r.seq for r in read(f"{folder_url}/sessions/{sid}")] == list(range(last + 1))


def test_a_file_shorter_than_what_was_shipped_is_refused(tmp_path: Path, folder_url: str) -> None:
    """A replaced or cut file is reported with its path; other sessions still ship."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 3)
        bad = s.id
    Shipper(ws.root, folder_url).ship_once()
    with ws.create() as s:
        converse(s, 1)
        good = s.id
    data = ws.path(bad).read_bytes()
    ws.path(bad).write_bytes(data[: data.index(b"\n") + 1])
    result = Shipper(ws.root, folder_url).ship_once()
    assert len(result.errors) == 1
    assert str(ws.path(bad)) in result.errors[0]
    assert "shipped" in result.errors[0]
    assert shipped_bytes(_store_dir(folder_url), good) == ws.path(good).read_bytes()


def test_a_damaged_line_ships_the_records_before_it(tmp_path: Path, folder_url: str) -> None:
    """Records before a corrupt line are shipped; the error names the file and line."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 2)
        sid = s.id
    good = ws.path(sid).read_bytes()
    with open(ws.path(sid), "ab") as f:
        f.write(b"not json\n")
    result = Shipper(ws.root, folder_url).ship_once()
    assert len(result.errors) == 1
    assert ":" in result.errors[0]
    assert "not valid JSON" in result.errors[0]
    assert shipped_bytes(_store_dir(folder_url), sid) == good


def test_artifacts_are_shipped_when_new_or_changed(tmp_path: Path, folder_url: str) -> None:
    """Files in <id>.artifacts/ follow the session; a changed one is put again."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 1)
        sid = s.id
    folder = ws.artifact_dir(sid)
    (folder / "plots").mkdir(parents=True)
    (folder / "plots" / "a.txt").write_text("first")
    shipper = Shipper(ws.root, folder_url)
    shipper.ship_once()
    store = Workspace(folder_url)
    arts = store.artifacts(sid)
    assert [(a.name, a.size) for a in arts] == [("plots/a.txt", 5)]
    assert str(arts[0].path).endswith(f"/sessions/{sid}/artifacts/plots/a.txt")
    (folder / "plots" / "a.txt").write_text("second version")
    result = shipper.ship_once()
    assert result.bytes_uploaded > len("second version")
    assert [(a.name, a.size) for a in store.artifacts(sid)] == [("plots/a.txt", 14)]


HOLDER = """
import sys
from loopscribe import Session
s = Session.open(sys.argv[1])
run = s.begin_run()
print("ready", flush=True)
sys.stdin.readline()
run.close()
s.close()
"""


def test_facts_a_ui_wrote_while_the_agent_held_the_file_ship_with_it(
    tmp_path: Path, folder_url: str
) -> None:
    """A rename, todos and a compaction from the side log reach the store's summary and pages."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="draft") as s:
        converse(s, 3)
        sid = s.id
    path = ws.path(sid)
    shipper = Shipper(ws.root, folder_url)
    with scripted(HOLDER, str(path)) as agent:
        ws.update(sid, title="Trip to Lisbon")
        ws.set_todos(sid, [{"id": "1", "text": "book a hotel", "status": "open"}])
        ws.compact(sid, "they planned a trip", keep_last=2)
        assert path.with_name(path.name + ".meta").exists()  # the facts went aside
        shipper.ship_once()
        shipped = Workspace(folder_url)
        got, local = shipped.get(sid), ws.get(sid)
        assert got.title == "Trip to Lisbon"
        assert [t["text"] for t in got.todos] == ["book a hotel"]
        assert got.compaction is not None
        assert got.compaction.summary == "they planned a trip"
        assert (got.message_count, got.messages_total) == (
            local.message_count,
            local.messages_total,
        )
        page, mine = shipped.messages(sid, last=50), ws.messages(sid, last=50)
        assert page.messages == mine.messages
        assert page.total == mine.total
        assert shipper.ship_once().bytes_uploaded == 0  # nothing new: nothing put
        ws.update(sid, title="Lisbon, final")  # still aside: the agent holds the file
        assert shipper.ship_once().bytes_uploaded > 0
        assert Workspace(folder_url).get(sid).title == "Lisbon, final"
        agent.go()
        assert agent.process.wait(timeout=60) == 0
    shipper.ship_once()
    assert Workspace(folder_url).get(sid).status == "idle"
    assert Workspace(folder_url).get(sid).title == "Lisbon, final"


def test_a_session_whose_last_run_failed_ships_as_failed(tmp_path: Path, folder_url: str) -> None:
    """The shipped status is the local one: ``failed`` when the last run ended in an error."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s, s.begin_run() as run:
        agent = Execution("agent", "agent")
        run.record(ev.agent_start(agent, "a"))
        run.record(ev.agent_end(agent, "a", stop_reason="error", error="ModelError"))
    assert ws.status(s.id) == "failed"
    Shipper(ws.root, folder_url).ship_once()
    assert Workspace(folder_url).get(s.id).status == "failed"


def test_the_store_workspace_is_read_only(tmp_path: Path, folder_url: str) -> None:
    """Changing a shipped session is refused with a message that says where to change it."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 1)
        sid = s.id
    Shipper(ws.root, folder_url).ship_once()
    store = Workspace(folder_url)
    with pytest.raises(StoreError, match="read-only"):
        store.update(sid, title="x")
    with pytest.raises(StoreError, match="read-only"):
        store.delete(sid)
    with pytest.raises(StoreError, match="read-only"):
        store.add_artifact(sid, "notes.md", b"x")
    assert not list(tmp_path.glob("**/notes.md"))


def test_missing_backend_names_the_package_to_install() -> None:
    """An unknown scheme fails with a clear error, not an ImportError trace."""
    with pytest.raises(StoreError, match=r"nosuchscheme"):
        Shipper(".", "nosuchscheme://bucket/x")


def test_two_shippers_never_ship_one_file_at_once(tmp_path: Path, folder_url: str) -> None:
    """A file whose cursor another shipper holds is skipped this pass, not shipped twice."""
    import fcntl

    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 1)
        sid = s.id
    fd = os.open(cursor_path(ws.path(sid)), os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = Shipper(ws.root, folder_url).ship_once()
        assert result.shipped == 0
        assert not (_store_dir(folder_url) / "sessions" / f"{sid}.json").exists()
    finally:
        os.close(fd)
    assert Shipper(ws.root, folder_url).ship_once().shipped == 1


def test_follow_ships_records_as_they_are_written(tmp_path: Path, folder_url: str) -> None:
    """run(follow=True) keeps passing until stopped; a live session's new lines arrive."""
    import threading
    import time

    ws = Workspace(tmp_path / "src")
    writer = ws.create(title="live")
    converse(writer, 1)
    stop = threading.Event()
    shipper = Shipper(ws.root, folder_url)
    passes: list[int] = []
    first_pass = threading.Event()

    def on_pass(result: ShipResult) -> None:
        passes.append(result.records)
        first_pass.set()

    thread = threading.Thread(
        target=shipper.run,
        kwargs={"follow": True, "interval_s": 0.05, "stop": stop, "on_pass": on_pass},
    )
    thread.start()
    try:
        assert first_pass.wait(30)
        assert Workspace(folder_url).get(writer.id).status == "running"
        converse(writer, 2, tag="later ")
        writer.close()
        deadline = time.monotonic() + 20
        target = ws.path(writer.id).read_bytes()
        while time.monotonic() < deadline:
            done = shipped_bytes(_store_dir(folder_url), writer.id) == target
            if done and Workspace(folder_url).get(writer.id).status == "idle":
                break  # the lines, and the writer's close, have arrived
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(10)
    assert shipped_bytes(_store_dir(folder_url), writer.id) == target
    assert len(passes) >= 2
    assert Workspace(folder_url).get(writer.id).status == "idle"


def test_a_store_that_cannot_be_written_fails_the_first_pass(tmp_path: Path) -> None:
    """A wrong location is one clear error at once, not a silent loop."""
    (tmp_path / "file").write_text("not a folder")
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 1)
    with pytest.raises(StoreError, match="cannot write to the store"):
        Shipper(ws.root, (tmp_path / "file" / "store").as_uri()).run(follow=True)


def test_the_core_never_imports_fsspec() -> None:
    """import loopscribe (and loopscribe.store, the CLI) leave fsspec and s3fs unimported."""

    code = (
        "import sys, loopscribe, loopscribe.store, loopscribe.cli; "
        "loopscribe.cli.build_parser(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'fsspec', 's3fs', 'botocore'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_pass_commits_each_session_once_after_every_object_it_names(
    tmp_path: Path, folder_url: str
) -> None:
    """Many segments, an artifact and adopted leftovers: one manifest per session per pass.

    At the moment the manifest is replaced, every segment and artifact it
    names is already in the store, so a kill anywhere leaves a manifest
    whose objects all exist.
    """
    ws = Workspace(tmp_path / "src")
    with ws.create(title="big") as s:
        converse(s, 12, size=300)
        sid = s.id
    artifacts = ws.path(sid).with_name(f"{sid}.artifacts")
    artifacts.mkdir()
    (artifacts / "report.txt").write_bytes(b"findings\n")
    store = _store_dir(folder_url)
    shipper = Shipper(ws.root, folder_url, segment_bytes=700)
    commits: list[dict[str, object]] = []
    replace_if = shipper.backend.replace_if

    def observed(key: str, data: bytes, version: str | None) -> str | None:
        manifest = orjson.loads(data)
        on_disk = {p.name for p in (store / "sessions" / sid).glob("*.jsonl")}
        segments = shipped_segments(store, sid)
        assert sum(len(b) for b in segments) == manifest["bytes"]
        assert len(on_disk) == len(segments)
        for name in manifest.get("artifacts", {}):
            assert (store / "sessions" / sid / "artifacts" / name).is_file()
        commits.append(manifest)
        return replace_if(key, data, version)

    shipper.backend.replace_if = observed  # type: ignore[method-assign]
    result = shipper.ship_once()
    assert not result.errors
    assert result.segments > 3
    assert len(commits) == 1
    assert shipped_bytes(store, sid) == ws.path(sid).read_bytes()
    # A pass killed after its segments and before its manifest: the next adopts them all.
    with Session.open(ws.path(sid)) as s:
        converse(s, 6, size=300, tag="late ")
    data = ws.path(sid).read_bytes()
    committed = orjson.loads((store / "sessions" / f"{sid}.json").read_bytes())
    uploader = Shipper(ws.root, folder_url, segment_bytes=700)
    uploader.backend.replace_if = _killed  # type: ignore[method-assign]
    assert uploader.ship_once().errors
    assert orjson.loads((store / "sessions" / f"{sid}.json").read_bytes()) == committed
    commits.clear()
    again = Shipper(ws.root, folder_url, segment_bytes=700)
    replace_if = again.backend.replace_if
    again.backend.replace_if = observed  # type: ignore[method-assign]
    result = again.ship_once()
    assert not result.errors
    assert result.adopted > 1
    assert result.segments == 0
    assert len(commits) == 1
    assert shipped_bytes(store, sid) == data


def _killed(key: str, data: bytes, version: str | None) -> str | None:
    raise OSError(5, "killed before the manifest")


def shipped_segments(store: Path, sid: str) -> list[bytes]:
    """The segments of the chain the store holds, in order (leftovers included)."""
    paths = sorted((store / "sessions" / sid).glob("*.jsonl"))
    return [p.read_bytes() for p in paths]
