"""loopscribe._gc: the cyclic collector paused around scans that build many objects."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

from loopscribe import Workspace
from loopscribe._gc import collector_paused


def test_pauses_nest_and_restore_the_collector() -> None:
    """The collector is off inside, on again after the outermost pause, as it was before."""
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_host_stays_off() -> None:
    """A host that disabled the collector itself does not find it enabled after a scan."""
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_pauses_in_two_threads() -> None:
    """A pause ending in one thread does not enable the collector under another's."""
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # the other thread's pause is still on
    release.set()
    thread.join(10)
    assert gc.isenabled()


def _collections_listing(root: Path, sessions: int) -> int:
    """Cyclic collections started by a cold ``list()`` of ``sessions`` sessions."""
    ws = Workspace(root)
    for n in range(sessions):
        ws.create(title=f"s{n}").close()
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    fresh = Workspace(root)
    thresholds = gc.get_threshold()
    gc.set_threshold(1)  # unpaused, nearly every allocation would start a collection
    gc.callbacks.append(seen)
    try:
        listed = fresh.list()
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*thresholds)
    assert len(listed) == sessions
    return len(collections)


def test_a_cold_list_starts_no_more_collections_for_more_sessions(tmp_path: Path) -> None:
    """The summaries are built with the collector paused: 10x the sessions, the same
    few collections (around the scan), none inside it."""
    few = _collections_listing(tmp_path / "few", 5)
    many = _collections_listing(tmp_path / "many", 50)
    assert many == few
    assert gc.isenabled()
