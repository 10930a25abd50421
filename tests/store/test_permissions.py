"""Every file a ship and a mirror create is private: files 0600, folders 0700."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopscribe import Workspace
from loopscribe.store import Shipper, cursor_path
from loopscribe.store._mirror import Mirror, default_cache

from ..scripted import scripted
from .conftest import converse

HOLDER = """
import sys
from loopscribe import Session
s = Session.open(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
s.close()
"""


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022): without care, created files would be world-readable."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        out[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def test_a_ship_and_a_mirror_create_only_private_files(
    tmp_path: Path, open_umask: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Segments, manifests, artifacts, side log, locks, cursors and the copy: 0600 and 0700."""
    ws = Workspace(tmp_path / "src")
    with ws.create(title="draft", chain=True) as writer:
        converse(writer, 4, size=400)
        sid = writer.id
    (ws.artifact_dir(sid) / "plots").mkdir(parents=True)
    (ws.artifact_dir(sid) / "plots" / "a.txt").write_text("plot")
    (ws.artifact_dir(sid) / "report.md").write_text("# report")
    store = tmp_path / "teams" / "store"
    url = store.as_uri()
    with scripted(HOLDER, str(ws.path(sid))) as agent:
        ws.update(sid, title="renamed while running")  # the agent holds it: the side log
        assert not Shipper(ws.root, url, segment_bytes=700).ship_once().errors
        agent.go()
        assert agent.process.wait(timeout=60) == 0
    assert not Shipper(ws.root, url, segment_bytes=700).ship_once().errors
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    mirror = Mirror(url)
    assert mirror.sync() == 1
    assert not mirror.problems
    cache = default_cache(url)
    assert (cache / f"{sid}.jsonl").read_bytes() == ws.path(sid).read_bytes()
    assert (cache / f"{sid}.artifacts" / "plots" / "a.txt").read_text() == "plot"
    created = {
        "store": _modes(tmp_path / "teams"),
        "cache": _modes(tmp_path / "xdg"),
        "cursor": {"cursor": stat.S_IMODE(cursor_path(ws.path(sid)).stat().st_mode)},
    }
    kinds = {"file": 0, "folder": 0}
    for where, modes in created.items():
        base = {"store": tmp_path / "teams", "cache": tmp_path / "xdg"}.get(where)
        for name, mode in modes.items():
            path = base / name if base else cursor_path(ws.path(sid))
            if path.is_dir():
                kinds["folder"] += 1
                assert mode == 0o700, f"{where}: {name} is {mode:o}"
            else:
                kinds["file"] += 1
                assert mode == 0o600, f"{where}: {name} is {mode:o}"
    assert kinds["file"] >= 10
    assert kinds["folder"] >= 6
    assert (store / "sessions" / sid / "side.jsonl").exists()
