"""Shippers of one session never fork its chain; a store forked by earlier versions is repaired."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loopscribe import Session, Workspace, read, verify
from loopscribe.store import Shipper, Store, cursor_path
from loopscribe.store._backend import Conflict
from loopscribe.store._layout import manifest_key

from .conftest import child_env, converse, plant, store_keys


def _chain_only(url: str, sid: str, size: int) -> None:
    """The session's folder holds one chain: its segments add up to the file, nothing twice."""
    segments = {
        k: v
        for k, v in store_keys(url).items()
        if k.startswith(f"sessions/{sid}/") and k.endswith(".jsonl")
    }
    assert sum(segments.values()) == size, sorted(segments)


def _reads_back(url: str, ws: Workspace, sid: str) -> None:
    source = ws.path(sid).read_bytes()
    view = Store(url).session(sid)
    assert view.size == len(source)
    assert view.pread(len(source), 0) == source
    assert [r.seq for r in read(f"{url}/sessions/{sid}")] == list(range(source.count(b"\n")))


def test_a_conditional_write_refuses_a_changed_object(tmp_path: Path, store_url: str) -> None:
    """put_new refuses a taken name; replace_if refuses a manifest another writer replaced."""
    backend = Store(store_url).backend
    assert backend.put_new("sessions/x/a.jsonl", b"1\n")
    assert not backend.put_new("sessions/x/a.jsonl", b"2\n")
    assert backend.read("sessions/x/a.jsonl") == b"1\n"
    first = backend.replace_if("sessions/x.json", b"{}", None)
    with pytest.raises(Conflict):
        backend.replace_if("sessions/x.json", b"[]", None)  # "absent" no longer holds
    second = backend.replace_if("sessions/x.json", b"[1]", first)
    with pytest.raises(Conflict):
        backend.replace_if("sessions/x.json", b"[2]", first)  # someone replaced it since
    backend.replace_if("sessions/x.json", b"[3]", second)
    assert backend.read("sessions/x.json") == b"[3]"


def test_two_shippers_taking_turns_never_fork_the_chain(tmp_path: Path, store_url: str) -> None:
    """Long-lived shippers that do not see each other's cursor still extend one chain."""
    ws = Workspace(tmp_path / "src")
    writer = ws.create(title="shared", chain=True)  # running: each shipper keeps its state
    converse(writer, 3)
    sid = writer.id
    shippers = [Shipper(ws.root, store_url, segment_bytes=900) for _ in range(2)]
    for turn in range(8):
        converse(writer, 1 + turn % 3, size=50 * turn, tag=f"t{turn} ")
        # Another machine's shipper: it never saw the cursor this one wrote.
        cursor_path(ws.path(sid)).unlink(missing_ok=True)
        result = shippers[turn % 2].ship_once()
        assert not result.errors, result.errors
    writer.close()
    assert not shippers[0].ship_once().errors
    _reads_back(store_url, ws, sid)
    _chain_only(store_url, sid, ws.path(sid).stat().st_size)
    assert verify(f"{store_url}/sessions/{sid}").ok


FOLLOW = [sys.executable, "-m", "loopscribe", "--json", "ship"]


@contextlib.contextmanager
def _followers(
    src: Path, url: str, logs: list[tuple[Path, Path]]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``ship --follow`` processes, one per pair of (stdout, stderr) files; stopped by SIGINT."""
    procs = []
    with contextlib.ExitStack() as files:
        for out, err in logs:
            procs.append(
                subprocess.Popen(
                    [*FOLLOW, str(src), "--to", url, "--follow", "--interval", "0.02"],
                    stdout=files.enter_context(out.open("wb")),
                    stderr=files.enter_context(err.open("wb")),
                    env=child_env(),
                )
            )
        try:
            yield procs
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def _shipped(store_dir: Path, sid: str) -> int:
    try:
        return int(orjson.loads((store_dir / "sessions" / f"{sid}.json").read_bytes())["bytes"])
    except (FileNotFoundError, orjson.JSONDecodeError):
        return -1


def test_two_ship_follow_processes_on_one_folder(tmp_path: Path, folder_url: str) -> None:
    """Two real `ship --follow` processes while sessions grow: the store reads back exact."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    ws = Workspace(tmp_path / "src")
    writers = [ws.create(title=f"s{n}", chain=n == 0) for n in range(3)]  # agents at work
    for writer in writers:
        converse(writer, 2)
    ids = [w.id for w in writers]
    store_dir = Path(folder_url.removeprefix("file://"))
    logs = [(tmp_path / f"out{n}", tmp_path / f"err{n}") for n in range(2)]

    def wait_shipped(sid: str) -> None:
        size = ws.path(sid).stat().st_size
        deadline = time.monotonic() + 60
        # Wait on the store's file: the manifest commits the session's new size.
        while _shipped(store_dir, sid) != size:
            assert all(p.poll() is None for p in procs), f"seed {seed}: a shipper died"
            assert time.monotonic() < deadline, f"seed {seed}: {sid} never shipped"
            time.sleep(0.01)

    with _followers(ws.root, folder_url, logs) as procs:
        for step in range(24):
            writer = rng.choice(writers)
            converse(writer, 1, size=rng.randrange(0, 3000), tag=f"step{step} ")
            wait_shipped(writer.id)
        for writer in writers:
            writer.close()
            wait_shipped(writer.id)
    for out_file, err_file in logs:
        out, err = out_file.read_bytes(), err_file.read_bytes()
        passes = [orjson.loads(line) for line in out.splitlines()]
        assert passes, err
        assert not [e for p in passes for e in p["errors"]], f"seed {seed}: {err!r}"
        assert sum(p["records"] for p in passes) > 0, f"seed {seed}: one shipper never shipped"
        assert b"Traceback" not in err
    for sid in ids:
        _reads_back(folder_url, ws, sid)
    assert verify(f"{folder_url}/sessions/{ids[0]}").ok
    assert not Shipper(ws.root, folder_url).ship_once().errors  # a fresh pass tidies forks
    for sid in ids:
        _chain_only(folder_url, sid, ws.path(sid).stat().st_size)


def _offsets(data: bytes) -> list[int]:
    out = [0]
    for line in data.splitlines(keepends=True):
        out.append(out[-1] + len(line))
    return out


def _damage_the_old_way(url: str, ws: Workspace, sid: str, *, lose: bool) -> int:
    """The objects two shippers of earlier versions left, taking turns on a growing file.

    A shipped records 0-16; B (new) 17-25; A, still at 17, put 17-30 and its
    manifest; B, still at 26, put 26-35 and its manifest. The old reader took
    the longer 17-30 and then found no segment at 31. With ``lose``, 17-25 is
    gone too (a first visit of a third shipper removed it as a leftover).

    Returns:
        The bytes the damaged manifest commits.
    """
    data = ws.path(sid).read_bytes()
    at = _offsets(data)
    assert len(at) > 40
    good = orjson.loads(Store(url).backend.read(manifest_key(sid)))
    for key in [k for k in store_keys(url) if k.startswith(f"sessions/{sid}/")]:
        Store(url).backend.delete(key)
    pieces = [(0, 16), (17, 25), (17, 30), (26, 35)]
    if lose:
        pieces.remove((17, 25))
    for first, last in pieces:
        plant(url, f"sessions/{sid}/{first:012d}-{last:012d}.jsonl", data[at[first] : at[last + 1]])
    good.update(
        bytes=at[36],
        records=36,
        last_segment={"first_seq": 26, "last_seq": 35, "offset": at[26], "size": at[36] - at[26]},
    )
    plant(url, f"sessions/{sid}.json", orjson.dumps(good))
    return at[36]


@pytest.mark.parametrize("lose", [False, True], ids=["forked", "broken"])
def test_ship_repairs_a_store_forked_by_earlier_versions(
    tmp_path: Path, store_url: str, lose: bool
) -> None:
    """The next pass keeps the valid chain, removes the rest, and ships on: reads are exact."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="forked", chain=True) as s:
        converse(s, 10)
        sid = s.id
    Shipper(ws.root, store_url).ship_once()
    committed = _damage_the_old_way(store_url, ws, sid, lose=lose)
    view = Store(store_url).session(sid)
    # Readers already cope: the chain the manifest commits, or the longest valid one.
    assert view.size == (committed if not lose else _offsets(ws.path(sid).read_bytes())[31])
    assert bool(view.problem) == lose
    with Session.open(ws.path(sid)) as s:
        converse(s, 2, tag="after ")
    cursor_path(ws.path(sid)).unlink()
    result = Shipper(ws.root, store_url).ship_once()
    assert not result.errors, result.errors
    assert result.repaired == int(lose)
    _reads_back(store_url, ws, sid)
    _chain_only(store_url, sid, ws.path(sid).stat().st_size)
    assert verify(f"{store_url}/sessions/{sid}").ok


def test_temporary_files_of_killed_passes_are_removed(tmp_path: Path, folder_url: str) -> None:
    """A pass SIGKILLed mid-write leaves its temporary file; the next pass removes only such."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 3)
        sid = s.id
    child = (
        "import os, sys\n"
        "from loopscribe.store import _backend, Shipper\n"
        "link = os.link\n"
        "def stuck(src, dst, **kwargs):\n"
        "    if dst.endswith('.jsonl'):  # a segment: written, not yet published\n"
        "        print('ready', flush=True)\n"
        "        sys.stdin.readline()\n"
        "    return link(src, dst, **kwargs)\n"
        "_backend.os.link = stuck\n"
        "Shipper(sys.argv[1], sys.argv[2]).ship_once()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", child, str(ws.root), folder_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=child_env(),
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        proc.kill()
        proc.wait()
    store = Path(folder_url.removeprefix("file://"))
    left = [p for p in store.rglob(".loopscribe-tmp-*") if p.is_file()]
    assert left, "the killed pass left no temporary file"
    dead = (
        subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True
        )
        .stdout.decode()
        .strip()
    )
    sessions = store / "sessions"
    legacy = sessions / f"{sid}.json.tmp-{dead}"
    legacy.write_bytes(b"{}")
    keep = [
        sessions / "notes.tmp-1",  # not a name loopscribe gives
        sessions / f".loopscribe-tmp-00000000-{dead}-abcd1234-{sid}.json",  # another host's
        sessions / f"{sid}.json.tmp-{os.getpid()}",  # a live process's
    ]
    for path in keep:
        path.write_bytes(b"{}")
    result = Shipper(ws.root, folder_url).ship_once()
    assert not result.errors, result.errors
    assert not any(p.exists() for p in left)
    assert not legacy.exists()
    assert all(p.exists() for p in keep)
    _reads_back(folder_url, ws, sid)
