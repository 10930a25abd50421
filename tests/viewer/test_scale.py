"""A folder of thousands of sessions: a paged list, a small home page, answers before indexing ends.

The 100,000-session figures (start time, memory, bytes) are in
``benchmarks/viewer.py``; here every check counts, none times.
"""

from __future__ import annotations

import gc
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from loopscribe.otel import trace_id
from loopscribe.viewer import Catalog, SessionTimeline, create_app
from loopscribe.viewer._catalog import TIMELINES_KEPT
from loopscribe.viewer._index import MAX_PAGE_SIZE, PAGE_SIZE, Filters

from .many_sessions import TOOLS, write_sessions

BASE = "http://127.0.0.1"


def page_data(html: str) -> Any:
    """The JSON a page embeds for its script."""
    match = re.search(r'<script id="ls-data" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    return orjson.loads(match[1])


@pytest.fixture
def indexed() -> Iterator[Any]:
    """A test client of the viewer over a folder, once every file in it was read."""
    clients: list[TestClient] = []

    def open_client(folder: Path) -> TestClient:
        app = create_app(folder)
        client = TestClient(app, base_url=BASE)
        client.__enter__()
        clients.append(client)
        assert app.state.catalog.index.wait_complete(None)
        return client

    yield open_client
    for client in clients:
        client.__exit__(None, None, None)


def all_pages(client: TestClient, query: str = "", limit: int = PAGE_SIZE) -> list[list[str]]:
    """The IDs of every page of /api/sessions, following ``next``."""
    pages = []
    cursor = None
    while True:
        url = f"/api/sessions?limit={limit}{query}" + (f"&cursor={cursor}" if cursor else "")
        data = client.get(url).json()
        pages.append([s["id"] for s in data["sessions"]])
        cursor = data["next"]
        if cursor is None:
            return pages


def test_home_page_size_does_not_grow_with_the_sessions(tmp_path: Path, indexed: Any) -> None:
    """The home page of 2,000 sessions is one page of rows, the size of the page of 200."""
    small = indexed(write_folder(tmp_path / "small", 200))
    large = indexed(write_folder(tmp_path / "large", 2_000))
    small_home, large_home = small.get("/"), large.get("/")
    assert len(page_data(small_home.text)["sessions"]) == PAGE_SIZE
    assert len(page_data(large_home.text)["sessions"]) == PAGE_SIZE
    assert page_data(large_home.text)["count"] == 2_000
    # Only the digits of the counts and the rows' own text differ.
    assert abs(len(large_home.content) - len(small_home.content)) < 2_000
    api = large.get("/api/sessions")
    assert len(api.json()["sessions"]) == PAGE_SIZE
    assert len(api.content) < len(large_home.content)


def write_folder(folder: Path, count: int) -> Path:
    write_sessions(folder, count)
    return folder


def test_pages_go_newest_first_and_cover_every_session_once(tmp_path: Path, indexed: Any) -> None:
    """``next`` walks the list: newest first, no session twice, none left out."""
    ids = write_sessions(tmp_path / "s", 250)
    client = indexed(tmp_path / "s")
    pages = all_pages(client, limit=100)
    assert [len(p) for p in pages] == [100, 100, 50]
    assert [sid for page in pages for sid in page] == ids[::-1]  # a higher index is newer
    assert client.get("/api/sessions?limit=100000").json()["limit"] == MAX_PAGE_SIZE
    assert client.get("/api/sessions?limit=0").json()["limit"] == PAGE_SIZE


def test_a_cursor_holds_its_place_when_new_sessions_appear(tmp_path: Path, indexed: Any) -> None:
    """Sessions written after a page was shown go on the first page, never into the next."""
    folder = tmp_path / "s"
    ids = write_sessions(folder, 30)
    client = indexed(folder)
    first = client.get("/api/sessions?limit=10").json()
    assert [s["id"] for s in first["sessions"]] == ids[29:19:-1]
    newer = write_sessions(folder, 5, start=30)
    second = client.get(f"/api/sessions?limit=10&cursor={first['next']}").json()
    assert [s["id"] for s in second["sessions"]] == ids[19:9:-1]
    fresh = client.get("/api/sessions?limit=10").json()
    assert [s["id"] for s in fresh["sessions"]][:5] == newer[::-1]
    assert fresh["count"] == 35


def test_search_and_filters_run_on_the_server_and_page(tmp_path: Path, indexed: Any) -> None:
    """q matches names or record text, the filters narrow, and both stay in the page's URL."""
    ids = write_sessions(tmp_path / "s", 120)
    client = indexed(tmp_path / "s")
    tool = TOOLS[2]  # sessions 2, 6, 10, ... call it
    pages = all_pages(client, f"&q={tool}", limit=7)
    found = [sid for page in pages for sid in page]
    assert found == [ids[i] for i in range(119, -1, -1) if i % len(TOOLS) == 2]
    assert all(len(page) <= 7 for page in pages)
    # Only a record holds it (a tool's result): sessions 17 and 170-179, of which 17 exists.
    data = client.get("/api/sessions", params={"q": "RESULT 17"}).json()
    assert [s["id"] for s in data["sessions"]] == [ids[17]]
    assert data["searched"] > 0
    assert client.get("/api/sessions", params={"text": tool}).json()["matched"] is None
    failed = all_pages(client, "&errors=1")
    assert [sid for page in failed for sid in page] == [
        ids[i] for i in range(119, -1, -1) if i % 3 == 2
    ]
    narrowed = client.get("/api/sessions?errors=1&status=idle&source=loopscribe").json()
    assert narrowed["matched"] == 40
    assert client.get("/api/sessions?source=nowhere").json()["sessions"] == []
    home = page_data(client.get("/", params={"q": tool, "errors": "1"}).text)
    assert (home["q"], home["errors"]) == (tool, True)
    assert {s["id"] for s in home["sessions"]} <= set(found)
    assert all(s["errors"] and tool in s["tools"] for s in home["sessions"])


def test_a_search_of_the_records_stops_at_its_budget_and_goes_on(tmp_path: Path) -> None:
    """A search that would read every file reads a bounded amount, then says where to go on."""
    ids = write_sessions(tmp_path / "s", 40)
    catalog = Catalog(tmp_path / "s")
    assert catalog.refresh(None)
    from loopscribe.viewer._index import decode_cursor

    seen: list[str] = []
    cursor = None
    requests = 0
    while True:
        page = catalog.index.page(Filters(q="result 3"), cursor=cursor, budget_bytes=1)
        requests += 1
        seen += [row["id"] for row in orjson.loads(orjson.dumps(page["sessions"]))]
        if page["next"] is None:
            break
        cursor = decode_cursor(page["next"])
    assert seen == [ids[i] for i in range(39, 29, -1)] + [ids[3]]
    assert requests >= 40  # each request read one file: the budget held
    catalog.close()


def test_bad_cursors_and_limits_are_400(tmp_path: Path, indexed: Any) -> None:
    """A cursor the viewer did not give, or a limit that is no number, is refused with a reason."""
    client = indexed(write_folder(tmp_path / "s", 3))
    for cursor in ("%FF%FE", "AAAA", "not*base64", "MQBh"):
        response = client.get(f"/api/sessions?cursor={cursor}")
        assert response.status_code == 400, cursor
        assert "is not one this viewer gives" in response.json()["error"]
    assert client.get("/api/sessions?limit=-1").status_code == 400
    assert client.get("/?cursor=AAAA").status_code == 400


def test_the_viewer_answers_before_indexing_finishes(tmp_path: Path) -> None:
    """Indexing held after its first file: the list says how far it got, a session opens,
    a trace lookup says it must wait; once released, everything resolves."""
    count = 60
    ids = write_sessions(tmp_path / "s", count)
    newest = tmp_path / "s" / f"s{count - 1:07d}.jsonl"
    later = newest.stat().st_mtime_ns + 10**10  # file times are coarse: make it the newest
    os.utime(newest, ns=(later, later))
    release = threading.Event()
    first = threading.Event()
    read: list[Path] = []

    def hold(path: Path) -> None:
        read.append(path)
        first.set()
        release.wait(60)

    catalog = Catalog(tmp_path / "s", on_file=hold, lookup_wait=0, list_wait=0)
    try:
        with TestClient(create_app(tmp_path / "s", catalog=catalog), base_url=BASE) as client:
            assert first.wait(60)
            home = client.get("/")
            assert home.status_code == 200
            data = page_data(home.text)
            assert data["indexing"] == {
                "done": 1,
                "total": count,
                "walking": False,
                "filling": False,
            }
            assert len(data["sessions"]) == 1 == len(read)
            # The newest file is read first.
            assert data["sessions"][0]["id"] == ids[-1]
            # A session not read yet opens: its ID was seen in the file's first bytes.
            assert client.get(f"/session/{ids[30]}").status_code == 200
            assert client.get(f"/api/session/{ids[3]}").json()["session"]["id"] == ids[3]
            # A trace needs every file read: a 503 that says how far indexing got.
            run_id = client.get(f"/api/session/{ids[30]}").json()["runs"][0]["run_id"]
            trace = f"{trace_id(ids[30], run_id):032x}"
            waiting = client.get(f"/api/trace/{trace}")
            assert waiting.status_code == 503
            assert "still indexing: 1 of 60 session files read" in waiting.json()["error"]
            assert waiting.headers["retry-after"]
            assert client.get(f"/trace/{trace}").status_code == 503
            release.set()
            assert catalog.index.wait_complete(60)
            assert client.get(f"/trace/{trace}", follow_redirects=False).status_code == 302
            assert client.get("/api/sessions").json()["indexing"] is None
    finally:
        release.set()
        catalog.close()


def test_timelines_are_kept_for_the_sessions_in_use_only(tmp_path: Path) -> None:
    """Indexing 600 sessions leaves a few timelines in memory, not one a session."""
    ids = write_sessions(tmp_path / "s", 600)
    catalog = Catalog(tmp_path / "s")
    try:
        assert catalog.refresh(None)
        for sid in ids[:40]:
            catalog.session(sid)
        gc.collect()
        alive = sum(isinstance(o, SessionTimeline) for o in gc.get_objects())
        assert alive <= TIMELINES_KEPT
        assert catalog.index.counts() == (600, 0)
    finally:
        catalog.close()


def test_trace_lookups_stay_right_as_files_change(tmp_path: Path, indexed: Any) -> None:
    """A run appended after indexing, and a file removed, are found (or not) by the next lookup."""
    from loopscribe import Session

    folder = write_folder(tmp_path / "s", 5)
    client = indexed(folder)
    path = folder / "late.jsonl"
    with Session.create(path) as session:
        with session.begin_run() as run:
            first = trace_id(session.id, run.id)
        assert client.get(f"/api/trace/{first:032x}").status_code == 200
        with session.begin_run() as run:
            second = trace_id(session.id, run.id)
    assert client.get(f"/api/trace/{second:032x}").status_code == 200
    path.unlink()
    assert client.get(f"/api/trace/{second:032x}").status_code == 404


def test_indexing_takes_over_a_file_a_request_is_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed file whose timeline a request holds is read once: the pass does the rest,
    waits for the request, then takes its timeline over instead of folding the file again."""
    import loopscribe.viewer._catalog as store
    from loopscribe import Session

    ids = write_sessions(tmp_path / "s", 3)
    catalog = Catalog(tmp_path / "s")
    built: list[str] = []

    class Counted(SessionTimeline):
        def __init__(self, path: str | os.PathLike[str]) -> None:
            built.append(Path(path).name)
            super().__init__(path)

    monkeypatch.setattr(store, "SessionTimeline", Counted)
    try:
        assert catalog.refresh(60)
        path = tmp_path / "s" / "s0000001.jsonl"
        with Session.open(path) as session:
            session.begin_run().close()
        built.clear()
        held, release = threading.Event(), threading.Event()

        def request() -> None:
            with catalog.reading():
                catalog.session(ids[1])
                held.set()
                release.wait(60)

        reader = threading.Thread(target=request)
        reader.start()
        assert held.wait(60)
        ticket = catalog.index.request()
        assert not catalog.index.wait(ticket, 0.5)  # waiting for the request, not done
        release.set()
        reader.join(60)
        assert catalog.index.wait(ticket, 60)
        assert built == ["s0000001.jsonl"]  # the request's timeline, and no other
        row = catalog.page(Filters(q=ids[1]))["sessions"]
        assert orjson.loads(orjson.dumps(row))[0]["runs"] == 2
    finally:
        release.set()
        catalog.close()
