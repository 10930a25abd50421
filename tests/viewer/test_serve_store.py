"""`serve URL`: the viewer answers before the store's first sync ends, shows what the
sync could not do, and its sync loop survives every failure."""

from __future__ import annotations

import argparse
import io
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from starlette.testclient import TestClient

from loopscribe.cli._output import Out
from loopscribe.cli._viewer import StoreSync, serve_app
from loopscribe.viewer import Catalog, IndexingError

from .many_sessions import write_sessions

BASE = "http://127.0.0.1"


class FlakyMirror:
    """A store's copy whose passes fail in every way given, then copy ``copies`` sessions."""

    def __init__(self, cache: Path, failures: list[BaseException], copies: int = 0) -> None:
        self.cache = cache
        self.failures = list(failures)
        self.copies = copies
        self.problems: tuple[str, ...] = ()
        self.calls = 0
        self.passed = threading.Event()

    def sync(self) -> int:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        if self.copies:
            write_sessions(self.cache, self.copies)
            self.copies = 0
        self.passed.set()
        return 0


FAILURES: list[BaseException] = [
    RuntimeError("boom"),
    KeyError("runs"),
    AttributeError("'list' object has no attribute 'get'"),
    OSError(5, "Input/output error"),
    ValueError("bad date escape"),
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    RecursionError("maximum recursion depth exceeded"),
]


def test_a_failed_pass_is_reported_until_a_pass_succeeds(tmp_path: Path) -> None:
    """Whatever a pass raises is one problem line, replaced by the next pass's outcome."""
    mirror = FlakyMirror(tmp_path, FAILURES)
    sync = StoreSync(mirror, 0.5, threading.Event())
    for failure in FAILURES:
        sync.sync_once()  # never raises
        (line,) = sync.problems()
        assert line.startswith("syncing the store's copy failed (retried every 0.5 s): ")
        assert type(failure).__name__ in line
    mirror.problems = ("sessions/x/manifest.json: not a manifest",)
    sync.sync_once()
    assert sync.problems() == ("sessions/x/manifest.json: not a manifest",)
    assert sync.passes == len(FAILURES) + 1
    assert sync.first_pass.is_set()


def test_the_sync_thread_outlives_every_failure(tmp_path: Path) -> None:
    """The loop goes on after each kind of exception, and stops only when told to."""
    mirror = FlakyMirror(tmp_path, FAILURES)
    stop = threading.Event()
    after: list[int] = []
    sync = StoreSync(mirror, 0, stop, after_pass=lambda: after.append(mirror.calls))
    thread = sync.start()
    try:
        assert mirror.passed.wait(60)
        assert thread.is_alive()
        assert len(after) >= len(FAILURES) + 1  # every failed pass, then one that copied
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()


def serve_args(url: str) -> argparse.Namespace:
    return argparse.Namespace(dir=url, interval=3600.0, allow_host=[])


def test_serve_url_answers_before_the_first_sync_and_shows_its_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages answer while the first sync runs, say the folder is being filled, then list
    what it fetched; the mirror's problems are on every page."""
    import loopscribe.store._mirror as mirror_module

    cache = tmp_path / "cache"
    release = threading.Event()
    made: list[Any] = []

    class SlowMirror(FlakyMirror):
        def __init__(self, url: str) -> None:
            super().__init__(cache, [], copies=3)
            cache.mkdir()
            made.append(self)

        def sync(self) -> int:
            release.wait(60)
            self.problems = ("sessions/0badc0de/manifest.json: <b>damaged</b>",)
            return super().sync()

    monkeypatch.setattr(mirror_module, "Mirror", SlowMirror)
    out = Out(Console(file=io.StringIO()), Console(file=io.StringIO()), json=False)
    app, catalog = serve_app(serve_args("s3://team-bucket/agents"), out, "127.0.0.1")
    try:
        with TestClient(app, base_url=BASE) as client:
            listed = client.get("/api/sessions").json()
            assert listed["sessions"] == []
            assert listed["indexing"]["filling"] is True
            assert client.get("/").status_code == 200
            release.set()
            assert made[0].passed.wait(60)
            assert catalog.refresh(60)
            listed = client.get("/api/sessions").json()
            assert len(listed["sessions"]) == 3
            assert listed["indexing"] is None
            assert listed["problems"] == ["sessions/0badc0de/manifest.json: <b>damaged</b>"]
    finally:
        release.set()
        catalog.close()


def test_a_lookup_waits_for_the_folder_to_be_filled(tmp_path: Path) -> None:
    """Before the first sync ends, an unknown session is 'not yet', not 'no such session'."""
    ready = threading.Event()
    catalog = Catalog(tmp_path, ready=ready, lookup_wait=0)
    try:
        with pytest.raises(IndexingError, match="still being fetched"):
            catalog.session("0" * 32)
        ids = write_sessions(tmp_path, 1)
        ready.set()
        catalog.lookup_wait = 60
        assert catalog.session(ids[0]).session_id == ids[0]
    finally:
        catalog.close()


SECRET_STORE = "s3://AKIAEXAMPLEKEY:se/cr@t-Pw@team-bucket/agents"
SECRET_URL = f"{SECRET_STORE}?token=tok3n-value"
SECRETS = ("AKIAEXAMPLEKEY", "se/cr", "t-Pw", "tok3n-value")


class EmptyMirror(FlakyMirror):
    """A store's copy as ``Mirror`` makes it: ``url`` without credentials; a sync that cannot
    read the store returns 0 and says why in ``problems`` instead of raising."""

    def __init__(self, cache: Path, url: str | None) -> None:
        super().__init__(cache, [])
        if url is not None:
            self.url = url

    def sync(self) -> int:
        self.calls += 1
        self.problems = (
            f"{SECRET_STORE}/sessions/0badc0de/manifest.json: not a manifest; ship it again",
            "s3://team-bucket/agents: unreachable (connection refused); check the endpoint",
        )
        return 0


def serve_mirror(
    monkeypatch: pytest.MonkeyPatch, mirror: FlakyMirror, url: str = SECRET_URL
) -> tuple[Any, Catalog, str]:
    """``serve_app`` over ``mirror`` as if it were the store at ``url``; what it printed."""
    import loopscribe.store._mirror as mirror_module

    mirror.cache.mkdir(exist_ok=True)
    monkeypatch.setattr(mirror_module, "Mirror", lambda _url: mirror)
    stderr = io.StringIO()
    out = Out(Console(file=io.StringIO()), Console(file=stderr, width=300), json=False)
    app, catalog = serve_app(serve_args(url), out, "127.0.0.1")
    return app, catalog, stderr.getvalue()


@pytest.mark.parametrize(
    ("own_url", "shown"),
    [
        ("s3://team-bucket/agents", "s3://team-bucket/agents"),
        (None, "s3://[REDACTED]@team-bucket/agents?token=[REDACTED]"),
    ],
)
def test_serve_url_names_the_store_without_its_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_url: str | None, shown: str
) -> None:
    """`serve URL` names the mirror's URL (or the given one stripped of its user info and
    secret parameters), and no credential reaches the output, a page or /api/sessions."""
    mirror = EmptyMirror(tmp_path / "cache", own_url)
    app, catalog, printed = serve_mirror(monkeypatch, mirror)
    try:
        assert f"fetching the sessions of {shown} into {mirror.cache}" in printed
        assert catalog.ready is not None
        assert catalog.ready.wait(60)
        with TestClient(app, base_url=BASE) as client:
            answers = [client.get("/").text, client.get("/api/sessions").text]
        for text in (printed, *answers):
            assert not [s for s in SECRETS if s in text], text
        assert "0badc0de/manifest.json: not a manifest" in answers[1]
    finally:
        catalog.close()


def test_a_first_sync_that_copies_nothing_is_served_with_its_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first sync that returns 0 with problems (it no longer raises) ends the filling: the
    list is empty, not 'being fetched', and shows the mirror's problems and nothing else."""
    mirror = EmptyMirror(tmp_path / "cache", "s3://team-bucket/agents")
    app, catalog, _ = serve_mirror(monkeypatch, mirror)
    try:
        assert catalog.ready is not None
        assert catalog.ready.wait(60)
        assert catalog.refresh(60)
        with TestClient(app, base_url=BASE) as client:
            listed = client.get("/api/sessions").json()
            session = client.get("/session/" + "0" * 32, headers={"accept": "application/json"})
        assert listed["sessions"] == []
        assert listed["indexing"] is None
        assert listed["problems"] == [
            "s3://[REDACTED]@team-bucket/agents/sessions/0badc0de/manifest.json: not a manifest; "
            "ship it again",
            "s3://team-bucket/agents: unreachable (connection refused); check the endpoint",
        ]
        # An unknown session is not found now, rather than 'still being fetched'.
        assert session.status_code == 404
    finally:
        catalog.close()


def test_a_failed_pass_never_shows_the_credentials_its_error_quotes(tmp_path: Path) -> None:
    """An exception whose text holds the store's URL, or a piece of its user info alone, is
    reported without them; so is a problem line of the mirror's."""
    failures: list[BaseException] = [
        OSError(f"cannot reach {SECRET_URL}"),
        ValueError("Invalid bucket name 'AKIAEXAMPLEKEY:se/cr@t-Pw@team-bucket':\n  not valid"),
        PermissionError("access key AKIAEXAMPLEKEY with secret se%2Fcr%40t-Pw was refused"),
    ]
    mirror = FlakyMirror(tmp_path, failures)
    sync = StoreSync(mirror, 1, threading.Event(), url=SECRET_URL.replace("se/cr@t", "se%2Fcr%40t"))
    lines: list[str] = []
    for _ in failures:
        sync.sync_once()
        lines += sync.problems()
    mirror.problems = (f"{SECRET_URL}: listing refused",)
    sync.sync_once()
    lines += sync.problems()
    assert len(lines) == 4
    assert "cannot reach s3://[REDACTED]@team-bucket/agents?token=[REDACTED]" in lines[0]
    assert "bucket name '[REDACTED]@team-bucket': not valid" in lines[1]  # on one line
    assert "access key [REDACTED] with secret [REDACTED] was refused" in lines[2]
    for line in lines:
        assert not [s for s in SECRETS if s in line], line
