"""The session list: nested folders, search, filters' facts; requests served concurrently."""

from __future__ import annotations

import threading
from pathlib import Path

from starlette.testclient import TestClient

from loopscribe.importers.claude_code import import_transcript
from loopscribe.viewer import Catalog, create_app

from .conftest import record_chat, record_demo

TRANSCRIPTS = Path(__file__).parents[1] / "data" / "transcripts"


def nested(tmp_path: Path) -> Path:
    root = tmp_path / "sessions"
    (root / "team-a" / "2026").mkdir(parents=True)
    record_demo(root / "team-a" / "2026" / "research.jsonl")
    (root / "team-b").mkdir(parents=True)
    record_chat(root / "team-b" / "chat.jsonl")
    import_transcript(TRANSCRIPTS / "claude-code" / "subagent.jsonl", root / "imported")
    return root


def test_serve_lists_sessions_in_subfolders(tmp_path: Path) -> None:
    """Sessions nested at any depth are listed, not skipped as unreadable."""
    root = nested(tmp_path)
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:
        data = client.get("/api/sessions").json()
        assert data["skipped"] == []
        files = sorted(Path(s["file"]).relative_to(root).as_posix() for s in data["sessions"])
        assert files == [
            "imported/subagent.jsonl",
            "team-a/2026/research.jsonl",
            "team-b/chat.jsonl",
        ]
        # And each opens.
        for s in data["sessions"]:
            assert client.get(f"/session/{s['id']}").status_code == 200


def test_the_list_carries_what_search_and_filters_need(tmp_path: Path) -> None:
    root = nested(tmp_path)
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:
        sessions = {s["title"]: s for s in client.get("/api/sessions").json()["sessions"]}
    research = sessions["research demo"]
    assert research["tools"] == ["search", "fetch_page", "run_python"]
    assert research["models"] == ["gpt-demo"]
    assert research["errors"] == 2  # the rate-limited model call and the failing tool
    assert research["source"] == "loopscribe"
    assert research["tool_calls"] == 3
    assert research["duration_us"] > 2_000_000  # the scripted clock spans seconds
    assert research["input_tokens"] > 0
    imported = next(s for s in sessions.values() if s["file"].endswith("subagent.jsonl"))
    assert imported["source"] == "claude-code"
    assert "WebSearch" in imported["tools"]
    assert sessions["release notes"]["errors"] == 1


def test_text_search_looks_into_the_records(tmp_path: Path) -> None:
    """?text= finds sessions by what their records say, case ignored, escapes included."""
    root = nested(tmp_path)
    with TestClient(create_app(root), base_url="http://127.0.0.1") as client:

        def titles(text: str) -> set[str | None]:
            response = client.get("/api/sessions", params={"text": text})
            return {s["title"] for s in response.json()["sessions"]}

        assert titles("NAMEERROR: name 'spans'") == {"research demo"}
        assert titles("channel #releases is ARCHIVED") == {"release notes"}
        assert titles('"mix igniter.install" credo') != set()  # quotes stored escaped
        assert titles("no session says this 0x5eed") == set()


def test_requests_about_other_sessions_do_not_wait(tmp_path: Path) -> None:
    """While one request holds a session (a long read), others are answered at once."""
    root = nested(tmp_path)
    app = create_app(root)
    catalog: Catalog = app.state.catalog
    with TestClient(app, base_url="http://127.0.0.1") as client:
        ids = {s["title"]: s["id"] for s in client.get("/api/sessions").json()["sessions"]}
        held = threading.Event()
        release = threading.Event()

        def long_read() -> None:
            with catalog.reading():
                catalog.session(ids["research demo"])
                held.set()
                release.wait(20)

        reader = threading.Thread(target=long_read)
        reader.start()
        try:
            assert held.wait(10)
            assert client.get(f"/session/{ids['release notes']}").status_code == 200
            listed = client.get("/api/sessions").json()["sessions"]
            # Answered while the long read still holds its session (release is never set
            # before this point): a request that waited for it would get its answer only
            # once the read gave up, and the reader would be gone by now.
            assert reader.is_alive(), "the request waited for the held session"
            # The held session is still listed, as last seen.
            assert ids["research demo"] in {s["id"] for s in listed}
        finally:
            release.set()
            reader.join()
