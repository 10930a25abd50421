"""A store is untrusted input: hostile names and manifests never reach a path, never stop a list."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import LoopscribeError, StoreError, Workspace, read
from loopscribe._format import is_session_id
from loopscribe.cli import main
from loopscribe.store import Store, StoreWorkspace
from loopscribe.store._layout import (
    MAX_MANIFEST_BYTES,
    artifact_key,
    check_artifact_name,
    check_session_id,
    manifest_key,
    parse_segment_name,
    segment_key,
)

from .conftest import plant, ship_sessions

HOSTILE_IDS = [
    "0123456789abcdef0123456789abcdef\n",
    "0123456789abcdef0123456789abcde\n",
    "\n0123456789abcdef0123456789abcdef",
    "../../planted",
    "..",
    "/home/me/sessions/important",
    "0123456789abcdef0123456789abcdef/../x",
    "0123456789abcdef\x000123456789abcdef",
    "0123456789ABCDEF0123456789ABCDEF",
    "a" * 10_000,
    "\uff10" * 32,  # full-width digits
    "",
    5,
    None,
]
HOSTILE_ARTIFACTS = [
    "../escape.txt",
    "a/../../escape.txt",
    "/etc/passwd",
    "a//b",
    "./a",
    "a/.",
    "",
    "a\x00b",
    "a\nb",
    "a\\..\\b",
    "report\u202etxt.exe",  # a bidi override
    "x" * 300,
    "/".join(["d"] * 40),
    "\ud800",
    7,
]


@pytest.mark.parametrize("value", HOSTILE_IDS, ids=repr)
def test_a_hostile_session_id_never_becomes_a_key(value: Any) -> None:
    """Trailing newlines, traversal, paths, NUL, long and look-alike IDs are refused, one line."""
    assert not is_session_id(value)
    with pytest.raises(StoreError) as info:
        check_session_id(value, "s3://b/x/sessions/obj.json")
    assert "\n" not in str(info.value)
    assert len(str(info.value)) < 400
    for build in (manifest_key, lambda sid: segment_key(sid, 0, 1)):
        with pytest.raises(StoreError):
            build(value)


@pytest.mark.parametrize("name", HOSTILE_ARTIFACTS, ids=repr)
def test_a_hostile_artifact_name_is_refused(name: Any) -> None:
    """Artifact names that climb out, are absolute, hide characters or run long are refused."""
    with pytest.raises(StoreError) as info:
        check_artifact_name(name, "where")
    assert "\n" not in str(info.value)
    with pytest.raises(StoreError):
        artifact_key("0" * 32, name)


def test_safe_artifact_names_pass() -> None:
    """Nested folders, dots inside names and non-Latin letters are ordinary artifact names."""
    for name in ("report.md", "plots/a.b.png", "données/été.csv", ".hidden", "a/b/c/d.txt"):
        assert check_artifact_name(name, "where") == name


def test_segment_names_match_whole() -> None:
    """A segment name is exactly <12 digits>-<12 digits>.jsonl: no trailing newline, no more."""
    good = f"{0:012d}-{5:012d}.jsonl"
    assert parse_segment_name(good) == (0, 5)
    for bad in (good + "\n", "x" + good, good + ".tmp-1", f"{5:012d}-{0:012d}.jsonl"):
        assert parse_segment_name(bad) is None


def _valid_manifest(url: str, sid: str) -> dict[str, Any]:
    store = Store(url)
    obj: dict[str, Any] = orjson.loads(store.backend.read(manifest_key(sid)))
    return obj


Edit = Callable[[dict[str, Any]], Any]


def _set(path: str, value: Any) -> Edit:
    def edit(obj: dict[str, Any]) -> dict[str, Any]:
        target = obj
        *parents, last = path.split(".")
        for part in parents:
            target = target[part]
        target[last] = value
        return obj

    return edit


MALICIOUS: dict[str, Edit] = {
    "runs as a list": _set("runs", [1]),
    "empty compaction": _set("summary.compaction", {}),
    "bad date": _set("summary.updated", "yesterday"),
    "naive date": _set("summary.created", "2026-01-01T00:00:00"),
    "bytes as a string": _set("bytes", "12"),
    "bytes as true": _set("bytes", True),
    "negative records": _set("records", -1),
    "huge number": lambda obj: orjson.dumps(obj).replace(
        b'"bytes":', b'"bytes":1' + b"0" * 30 + b',"x":', 1
    ),
    "another session's id": _set("session_id", "f" * 32),
    "a path as the id": _set("session_id", "/home/me/sessions/important"),
    "a climbing id": _set("session_id", "../../planted"),
    "negative segment size": _set("last_segment.size", -5),
    "segment past the end": _set("last_segment.offset", 10**9),
    "climbing artifact": _set("artifacts", {"../../x": {"size": 1, "mtime_ns": 1}}),
    "artifact size as text": _set("artifacts", {"a.txt": {"size": "1", "mtime_ns": 1}}),
    "summary as a list": _set("summary", []),
    "unknown status": _set("summary.status", "owned"),
    "todos as text": _set("summary.todos", "x"),
    "trace not hex": _set("runs", {"r": "zz"}),
    "origin not text": _set("origin", {"host": 5}),
    "summary of another session": _set("summary.id", "e" * 32),
    "layout 2": _set("layout", 2),
    "not an object": lambda obj: [1, 2],
    "not JSON": lambda obj: b"not json",
    "empty": lambda obj: b"",
}


def _damage(url: str, sid: str, good: dict[str, Any], name: str) -> None:
    damaged = MALICIOUS[name](orjson.loads(orjson.dumps(good)))
    raw = damaged if isinstance(damaged, bytes) else orjson.dumps(damaged)
    plant(url, f"sessions/{sid}.json", raw)


def test_malicious_manifests_are_one_line_each_and_the_rest_is_listed(
    tmp_path: Path, store_url: str
) -> None:
    """Every kind of damaged manifest is one StoreError naming it; healthy sessions still list."""
    _ws, (victim, healthy) = ship_sessions(tmp_path / "src", store_url, 2)
    good = _valid_manifest(store_url, victim)
    for name in MALICIOUS:
        _damage(store_url, victim, good, name)
        store = Store(store_url)
        listed = [m.session_id for m in store.manifests()]
        assert listed == [healthy], name
        [problem] = store.problems
        assert f"sessions/{victim}.json" in problem, name
        assert "\n" not in problem, name
        with pytest.raises(StoreError) as info:
            store.manifest(victim)
        assert f"sessions/{victim}.json" in str(info.value), name
        workspace = Workspace(store_url)
        assert [s.id for s in workspace.list()] == [healthy], name
        assert isinstance(workspace, StoreWorkspace)
        assert len(workspace.problems) == 1, name


def test_ls_lists_the_healthy_sessions_and_names_the_damaged_object(
    tmp_path: Path, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls URL` prints the healthy session, one warning line per damaged object, no traceback."""
    _ws, (victim, healthy) = ship_sessions(tmp_path / "src", store_url, 2)
    _damage(store_url, victim, _valid_manifest(store_url, victim), "runs as a list")
    plant(store_url, "sessions/NOT-AN-ID.json", b"{}")
    odd = [f"sessions/{healthy}\n.json"] if store_url.startswith("file:") else []  # S3: no \n
    for key in odd:
        plant(store_url, key, b"{}")
    # A write under way is no damage: a temporary name, a lock file.
    plant(store_url, f"sessions/.loopscribe-tmp-0badc0de-1-0123abcd-{healthy}.json", b"{")
    plant(store_url, f"sessions/.{healthy}.json.lock", b"")
    assert main(["--json", "ls", store_url]) == 1
    captured = capsys.readouterr()
    assert [orjson.loads(line)["id"] for line in captured.out.splitlines()] == [healthy]
    lines = captured.err.splitlines()
    assert len(lines) == 2 + len(odd), lines
    assert any(f"sessions/{victim}.json" in line for line in lines)
    assert any("NOT-AN-ID.json" in line for line in lines)
    assert not odd or any(f"{healthy}\\n.json" in line for line in lines)
    assert "Traceback" not in captured.err


def test_an_oversized_manifest_is_refused_before_it_is_read(
    tmp_path: Path, folder_url: str
) -> None:
    """A 200 MB manifest costs a listing entry, not 200 MB of memory."""
    _ws, (victim, healthy) = ship_sessions(tmp_path / "src", folder_url, 2)
    path = Path(folder_url.removeprefix("file://")) / "sessions" / f"{victim}.json"
    with open(path, "r+b") as f:
        f.truncate(200 << 20)  # sparse: nothing is written, yet it is 200 MB long
    workspace = Workspace(folder_url)  # imports done before measuring
    tracemalloc.start()
    try:
        summaries = workspace.list()
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [s.id for s in summaries] == [healthy]
    assert isinstance(workspace, StoreWorkspace)
    [problem] = workspace.problems
    assert str(MAX_MANIFEST_BYTES) in problem
    assert peak < 4 << 20


def test_an_oversized_manifest_on_s3_is_refused_unread(tmp_path: Path, s3_url: str) -> None:
    """On S3 too, a manifest over the bound is refused by its listed size, never fetched whole."""
    _ws, (victim, healthy) = ship_sessions(tmp_path / "src", s3_url, 2)
    plant(s3_url, f"sessions/{victim}.json", b" " * (MAX_MANIFEST_BYTES + 1))
    store = Store(s3_url)
    before = store.requests
    assert [m.session_id for m in store.manifests()] == [healthy]
    assert store.requests - before == 2  # the listing and the healthy manifest
    [problem] = store.problems
    assert "more than a manifest may hold" in problem
    with pytest.raises(StoreError, match="more than a manifest may hold"):
        store.manifest(victim)


def test_a_missing_session_is_a_loopscribe_error_and_a_file_not_found_error(
    tmp_path: Path, folder_url: str
) -> None:
    """Store.manifest of an unknown session raises one error both kinds of caller catch."""
    ship_sessions(tmp_path / "src", folder_url, 1)
    store = Store(folder_url)
    for sid in ("0" * 32, "not an id\n"):
        with pytest.raises(FileNotFoundError) as info:
            store.manifest(sid)
        assert isinstance(info.value, LoopscribeError)


def test_a_segment_name_with_a_newline_is_not_read_as_a_segment(
    tmp_path: Path, folder_url: str
) -> None:
    """An object named like a segment plus a newline is ignored; the session reads as shipped."""
    ws, (sid,) = ship_sessions(tmp_path / "src", folder_url, 1, turns=6, segment_bytes=600)
    plant(folder_url, f"sessions/{sid}/{0:012d}-{999:012d}.jsonl\n", b"junk\n")
    assert [r.seq for r in read(f"{folder_url}/sessions/{sid}")] == [
        r.seq for r in read(ws.path(sid))
    ]


def test_a_symlink_planted_in_a_folder_store_is_not_followed(
    tmp_path: Path, folder_url: str
) -> None:
    """A manifest or session folder replaced by a symlink to a local file is refused, unread."""
    _ws, (victim, healthy) = ship_sessions(tmp_path / "src", folder_url, 2)
    sessions = Path(folder_url.removeprefix("file://")) / "sessions"
    secret = tmp_path / "secret.json"
    secret.write_bytes((sessions / f"{victim}.json").read_bytes())
    (sessions / f"{victim}.json").unlink()
    (sessions / f"{victim}.json").symlink_to(secret)
    store = Store(folder_url)
    assert [m.session_id for m in store.manifests()] == [healthy]  # a link is no manifest
    with pytest.raises(StoreError):
        store.manifest(victim)
