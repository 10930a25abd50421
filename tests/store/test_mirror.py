"""The viewer's copy of a store: a hostile store writes nothing outside it, and syncs never die."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import Session, StoreError
from loopscribe.store import Shipper, Store
from loopscribe.store._layout import manifest_key
from loopscribe.store._mirror import Mirror

from .conftest import converse, plant, ship_sessions


def _manifest(url: str, sid: str) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads(Store(url).backend.read(manifest_key(sid)))
    return obj


def _hostile(url: str, name_sid: str, good: dict[str, Any], session_id: str, size: int) -> None:
    """A manifest named after a valid ID that claims another session ID and size."""
    bad = dict(good, session_id=session_id, bytes=size)
    if size == 0:
        bad.update(records=0, last_segment=None)
    plant(url, f"sessions/{name_sid}.json", orjson.dumps(bad))


def test_a_manifest_naming_a_local_file_deletes_nothing(tmp_path: Path, store_url: str) -> None:
    """`"session_id": "/home/me/sessions/important", "bytes": 0` leaves that file alone."""
    important = tmp_path / "home" / "me" / "sessions" / "important.jsonl"
    important.parent.mkdir(parents=True)
    important.write_bytes(b'{"precious": true}\n')
    ws, (victim, healthy) = ship_sessions(tmp_path / "src", store_url, 2)
    cache = tmp_path / "cache"
    mirror = Mirror(store_url, cache)
    assert mirror.sync() == 2
    _hostile(store_url, victim, _manifest(store_url, victim), str(important)[:-6], 0)
    mirror.sync()
    assert important.read_bytes() == b'{"precious": true}\n'
    [problem] = mirror.problems
    assert f"sessions/{victim}.json" in problem
    with Session.open(ws.path(healthy)) as s:
        converse(s, 1, tag="more ")
    Shipper(ws.root, store_url).ship_once()
    assert mirror.sync() == 1  # the healthy session still syncs beside the hostile one
    assert (cache / f"{healthy}.jsonl").read_bytes() == ws.path(healthy).read_bytes()


def test_a_climbing_session_id_writes_nothing_outside_the_cache(
    tmp_path: Path, store_url: str
) -> None:
    """`"session_id": "../../planted"` with a segment where it points writes no file anywhere."""
    ws, (victim, healthy) = ship_sessions(tmp_path / "src", store_url, 2)
    good = _manifest(store_url, victim)
    _hostile(store_url, victim, good, "../../planted", good["bytes"])
    segment = f"{0:012d}-{good['records'] - 1:012d}.jsonl"
    plant(store_url, f"sessions/../../planted/{segment}", ws.path(victim).read_bytes())
    if store_url.startswith("file:"):
        # What the old code read for that ID: <root>/sessions/../../planted, out of the store.
        outside = Path(store_url.removeprefix("file://")).parent / "planted"
        outside.mkdir(exist_ok=True)
        (outside / segment).write_bytes(ws.path(victim).read_bytes())
    before = set(tmp_path.rglob("*planted*"))
    cache = tmp_path / "deep" / "er" / "cache"
    mirror = Mirror(store_url, cache)
    mirror.sync()
    assert set(tmp_path.rglob("*planted*")) == before
    assert sorted(p.name for p in cache.glob("*.jsonl")) == [f"{healthy}.jsonl"]
    assert any(f"sessions/{victim}.json" in line for line in mirror.problems)


def test_the_mirror_changes_only_files_it_made(tmp_path: Path, folder_url: str) -> None:
    """A copy replaced by another file, or by a symlink, is left alone and reported."""
    ws, (one, two) = ship_sessions(tmp_path / "src", folder_url, 2)
    cache = tmp_path / "cache"
    mirror = Mirror(folder_url, cache)
    mirror.sync()
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b"mine\n")
    (cache / f"{one}.jsonl").unlink()
    (cache / f"{one}.jsonl").write_bytes(b"someone else's\n")
    (cache / f"{two}.jsonl").unlink()
    (cache / f"{two}.jsonl").symlink_to(outside)
    for sid in (one, two):
        with Session.open(ws.path(sid)) as s:
            converse(s, 1, tag="more ")
    Shipper(ws.root, folder_url).ship_once()
    assert mirror.sync() == 0, mirror.problems
    assert (cache / f"{one}.jsonl").read_bytes() == b"someone else's\n"
    assert outside.read_bytes() == b"mine\n"
    assert len(mirror.problems) == 2
    assert all("not made by this copy" in p for p in mirror.problems)
    # A store reset (a smaller manifest) never deletes a file the mirror did not make.
    good = _manifest(folder_url, one)
    _hostile(folder_url, one, good, one, 0)
    mirror.sync()
    assert (cache / f"{one}.jsonl").read_bytes() == b"someone else's\n"


def test_a_folder_with_other_files_is_not_taken_as_a_cache(tmp_path: Path, folder_url: str) -> None:
    """Pointing the copy at a folder of real sessions is refused before anything is written."""
    ship_sessions(tmp_path / "src", folder_url, 1)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(StoreError, match="did not put there"):
        Mirror(folder_url, mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


@pytest.fixture
def dead_s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An S3 URL whose endpoint refuses connections at once (one attempt per request)."""
    import fsspec.config
    import s3fs

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(
        fsspec.config.conf,
        "s3",
        {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "config_kwargs": {"retries": {"max_attempts": 1}},
        },
    )
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    yield "s3://team/agents"
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_sync_against_an_unreachable_backend_is_one_problem(tmp_path: Path, dead_s3: str) -> None:
    """The sync returns, the copy is as it was, and the one problem says what to check."""
    mirror = Mirror(dead_s3, tmp_path / "cache")
    assert mirror.sync() == 0
    [problem] = mirror.problems
    assert "cannot be reached" in problem
    assert "\n" not in problem


def test_the_sync_thread_survives_any_failure(tmp_path: Path, folder_url: str) -> None:
    """A sync that raises (a bug, a backend's odd error) is reported; the next one runs."""
    ship_sessions(tmp_path / "src", folder_url, 1)
    mirror = Mirror(folder_url, tmp_path / "cache")
    calls: list[int] = []
    second = threading.Event()
    real = mirror.store.listing

    def flaky() -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        second.set()
        return real()

    mirror.store.listing = flaky  # type: ignore[method-assign]
    stop = threading.Event()
    thread = mirror.keep_syncing(0.01, stop)
    try:
        assert second.wait(30)
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(10)


def test_a_broken_chain_copies_its_valid_start_and_says_so(tmp_path: Path, folder_url: str) -> None:
    """A missing middle segment: the copy holds the segments before it, and one problem line."""
    _ws, (sid,) = ship_sessions(tmp_path / "src", folder_url, 1, turns=6, segment_bytes=600)
    folder = Path(folder_url.removeprefix("file://")) / "sessions" / sid
    segments = sorted(folder.glob("*.jsonl"))
    assert len(segments) > 3
    segments[2].unlink()
    mirror = Mirror(folder_url, tmp_path / "cache")
    mirror.sync()
    copy = (tmp_path / "cache" / f"{sid}.jsonl").read_bytes()
    assert copy == b"".join(p.read_bytes() for p in segments[:2])
    [problem] = mirror.problems
    assert "loopscribe ship" in problem
