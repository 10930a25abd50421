"""The web viewer, through Starlette's test client: every route, unknown IDs, live files, 10 MiB."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from loopscribe import Execution, Session, UserMessage
from loopscribe import events as ev
from loopscribe.viewer import create_app

from .conftest import TOOL_OUTPUT, Demo, record_demo

HOST_TRACE = "ab" * 16
HOST_SPAN = "cd" * 8
TRACEPARENT = f"00-{HOST_TRACE}-{HOST_SPAN}-01"


@pytest.fixture
def client(demo: Demo) -> Iterator[TestClient]:
    """A test client of the viewer over the demo's folder."""
    with TestClient(create_app(demo.path.parent), base_url="http://127.0.0.1") as c:
        yield c


def page_data(html: str) -> Any:
    """The JSON a page embeds for its script."""
    match = re.search(r'<script id="ls-data" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    return orjson.loads(match[1])


def run_url(demo: Demo) -> str:
    return f"/session/{demo.session_id}/run/{demo.run_id}"


# -- pages ------------------------------------------------------------------------------


def test_session_list_session_and_run_pages(client: TestClient, demo: Demo) -> None:
    """/, /session/{id} and the run page embed the data their script draws."""
    home = client.get("/")
    assert home.status_code == 200
    assert home.headers["content-type"].startswith("text/html")
    sessions = page_data(home.text)["sessions"]
    assert [(s["id"], s["title"], s["status"]) for s in sessions] == [
        (demo.session_id, "research demo", "idle")
    ]

    session = page_data(client.get(f"/session/{demo.session_id}").text)
    assert session["view"] == "session"
    (run,) = session["runs"]
    assert run["trace_id"] == demo.trace_hex
    assert run["counts"]["model_calls"] == 4

    data = page_data(client.get(run_url(demo)).text)
    assert data["view"] == "run"
    assert data["run"]["span_id"] == demo.run_span_hex
    labels = [row["label"] for row in data["run"]["rows"]]
    assert labels[:4] == ["research-bot", "turn_1", "gpt-demo", "search"]
    assert data["select"] is None


def test_static_assets_and_security_headers(client: TestClient) -> None:
    """The script and stylesheet are served; pages forbid inline script and foreign hosts."""
    js = client.get("/static/viewer.js")
    assert js.status_code == 200
    assert "RunView" in js.text
    assert client.get("/static/viewer.css").status_code == 200
    page = client.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    # DNS rebinding: a page of another site that resolves to 127.0.0.1 gets nothing.
    assert client.get("/", headers={"host": "evil.example"}).status_code == 400


def test_trace_link_redirects_to_the_run(client: TestClient, demo: Demo) -> None:
    """/trace/{trace_id} opens the run of that trace."""
    response = client.get(f"/trace/{demo.trace_hex}", follow_redirects=False)
    assert response.status_code == 302
    assert response.headers["location"] == run_url(demo)


def test_span_link_resolves_the_execution_behind_a_span(client: TestClient, demo: Demo) -> None:
    """/trace/{trace_id}/span/{span_id} opens the run with the tool's bar selected."""
    span = demo.span_hex("call_search")
    response = client.get(f"/trace/{demo.trace_hex}/span/{span}", follow_redirects=False)
    assert response.status_code == 302
    assert response.headers["location"] == f"{run_url(demo)}?span={span}"
    page = client.get(response.headers["location"])
    assert page_data(page.text)["select"] == span
    # The run's own span resolves too.
    root = client.get(f"/trace/{demo.trace_hex}/span/{demo.run_span_hex}", follow_redirects=False)
    assert root.headers["location"].endswith(f"?span={demo.run_span_hex}")
    # Upper-case hex, as some backends show it, is the same span.
    upper = client.get(f"/trace/{demo.trace_hex.upper()}/span/{span.upper()}")
    assert upper.status_code == 200


def test_run_page_selects_by_execution_or_seq(client: TestClient, demo: Demo) -> None:
    """Jaeger's links name the execution and attempt; a record names its seq."""
    data = page_data(client.get(f"{run_url(demo)}?execution=model_2&attempt=2").text)
    assert data["select"] == demo.span_hex("model_2", 2)
    api = client.get(f"/api/trace/{demo.trace_hex}/span/{demo.span_hex('call_py')}").json()
    first = client.get(f"/api/session/{demo.session_id}/span/{api['span_id']}").json()
    seq = first["records"][0]["seq"]
    data = page_data(client.get(f"{run_url(demo)}?seq={seq}").text)
    assert data["select"] == demo.span_hex("call_py")


def test_span_records_have_decoded_bodies(client: TestClient, demo: Demo) -> None:
    """A bar's records carry messages, tool arguments, results and errors."""
    span = demo.span_hex("call_search")
    body = client.get(f"/api/session/{demo.session_id}/span/{span}").json()
    assert body["kind"] == "tool"
    assert [r["type"] for r in body["records"]] == [
        "tool_exec_start",
        "tool_invoke_start",
        "tool_exec_end",
    ]
    assert body["records"][0]["data"]["args"] == {"query": "opentelemetry genai conventions"}
    result = body["records"][-1]["data"]["result"]
    assert result["content"][0]["text"] == TOOL_OUTPUT
    failed = client.get(f"/api/session/{demo.session_id}/span/{demo.span_hex('call_py')}").json()
    assert failed["records"][-1]["data"]["error"]["type"] == "ToolError"
    model = client.get(f"/api/session/{demo.session_id}/span/{demo.span_hex('model_1')}").json()
    request = next(r for r in model["records"] if r["type"] == "model_request")
    assert request["data"]["messages"][0]["content"].startswith("Which OpenTelemetry")
    run = client.get(f"/api/session/{demo.session_id}/span/{demo.run_span_hex}").json()
    assert [r["type"] for r in run["records"]][:2] == ["run_start", "message_end"]


def test_record_page_api_and_raw_line(client: TestClient, demo: Demo) -> None:
    """One record: a page, its JSON, and its line exactly as in the file."""
    page = page_data(client.get(f"/session/{demo.session_id}/record/3").text)
    assert page["view"] == "record"
    assert page["record"]["type"] == "message_end"
    assert page["run"] == demo.run_id
    assert page["span"]["span_id"] == demo.run_span_hex
    api = client.get(f"/api/session/{demo.session_id}/record/3").json()
    assert api["data"]["message"]["role"] == "user"
    raw = client.get(f"/session/{demo.session_id}/record/3/raw")
    assert raw.status_code == 200
    assert raw.headers["content-type"].startswith("application/json")
    with open(demo.path, "rb") as f:
        lines = f.readlines()
    assert raw.content == lines[3]


def test_trace_shared_by_several_runs_lists_them(tmp_path: Path) -> None:
    """Runs begun inside one host span share its trace: /trace shows the choice."""
    path = tmp_path / "host.jsonl"
    with Session.create(path) as session:
        for _ in range(2):
            with session.begin_run(parent=TRACEPARENT) as run:
                run.record(ev.model_request(Execution("m", "model"), [UserMessage("hi")]))
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        page = client.get(f"/trace/{HOST_TRACE}")
        assert page.status_code == 200
        data = page_data(page.text)
        assert data["view"] == "trace"
        assert len(data["runs"]) == 2
        assert len(client.get(f"/api/trace/{HOST_TRACE}").json()["runs"]) == 2
        # The host's own span is not recorded by loopscribe, and the 404 says so.
        missing = client.get(f"/trace/{HOST_TRACE}/span/{HOST_SPAN}")
        assert missing.status_code == 404
        assert "host's span" in page_data(missing.text)["message"]


# -- unknown IDs: 404 with a message that helps ------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/session/" + "0" * 32, "no session '00000000000000000000000000000000'"),
        ("/session/nope/run/x", "no session 'nope'"),
        ("/session/{sid}/run/ffff", "has no run 'ffff' (its runs: {rid})"),
        ("/session/{sid}/record/9999", "has no record 9999"),
        ("/session/{sid}/record/9999/raw", "has no record 9999"),
        ("/trace/" + "1" * 32, "no run in"),
        ("/trace/xyz", "expected 32 hex digits"),
        ("/trace/" + "0" * 32, "all zeros"),
        ("/trace/{tid}/span/" + "2" * 16, "has no span 2222222222222222"),
        ("/trace/{tid}/span/123", "expected 16 hex digits"),
        ("/session/{sid}/run/{rid}?span=" + "3" * 16, "has no span 3333333333333333"),
        (
            "/session/{sid}/run/{rid}?execution=model_2&attempt=7",
            "no execution 'model_2' attempt 7",
        ),
        ("/no/such/page", "nothing at /no/such/page"),
    ],
)
def test_unknown_ids_are_404_with_a_helpful_message(
    client: TestClient, demo: Demo, url: str, expected: str
) -> None:
    """Pages answer 404 with an HTML page, /api/ with JSON; both say what was searched."""
    fill = {"sid": demo.session_id, "rid": demo.run_id, "tid": demo.trace_hex}
    url, expected = url.format(**fill), expected.format(**fill)
    page = client.get(url)
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert expected in page_data(page.text)["message"]
    if url.endswith("/raw") or "?" in url:
        return  # no /api twin: the raw line and the page's selection are page-only
    api = client.get("/api" + url)
    assert api.status_code == 404
    assert expected in api.json()["error"] or "nothing at" in api.json()["error"]


def test_api_span_of_an_unknown_span_and_bad_offset(client: TestClient, demo: Demo) -> None:
    """A session's span lookup and its paging reject what they cannot serve."""
    missing = client.get(f"/api/session/{demo.session_id}/span/{'4' * 16}")
    assert missing.status_code == 404
    assert f"/session/{demo.session_id}" in missing.json()["error"]
    span = demo.span_hex("call_search")
    bad = client.get(f"/api/session/{demo.session_id}/span/{span}?offset=x")
    assert bad.status_code == 400
    paged = client.get(f"/api/session/{demo.session_id}/span/{span}?offset=2").json()
    assert (paged["total"], paged["offset"], len(paged["records"])) == (3, 2, 1)


def test_unreadable_files_are_listed_as_skipped(tmp_path: Path, demo: Demo) -> None:
    """A .jsonl that is not a session does not hide the others; it is named with its error."""
    (demo.path.parent / "notes.jsonl").write_text('{"hello": 1}\n')
    (demo.path.parent / "research.jsonl.otlp.jsonl").write_text("{}\n")
    with TestClient(create_app(demo.path.parent), base_url="http://127.0.0.1") as client:
        data = client.get("/api/sessions").json()
    assert [s["id"] for s in data["sessions"]] == [demo.session_id]
    (skipped,) = data["skipped"]
    assert skipped["file"].endswith("notes.jsonl")


# -- a session written while it is viewed ---------------------------------------------------


def test_a_session_being_written_while_it_is_viewed(tmp_path: Path) -> None:
    """New records appear on the next request; an open bar is open; the status is running."""
    path = tmp_path / "live.jsonl"
    with (
        TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client,
        Session.create(path, metadata={"title": "live"}) as session,
    ):
        run = session.begin_run()
        sid, rid = session.id, run.id
        assert client.get("/api/sessions").json()["sessions"][0]["status"] == "running"
        first = client.get(f"/api/session/{sid}/run/{rid}").json()["run"]
        assert (first["rows"], first["closed"], first["state"]) == ([], False, "open")

        tool = Execution("call_1", "tool")
        run.record(ev.tool_exec_start(tool, "grep", {"pattern": "TODO"}))
        growing = client.get(f"/api/session/{sid}/run/{rid}").json()["run"]
        (bar,) = growing["rows"][0]["bars"]
        assert bar["state"] == "open"
        records = client.get(f"/api/session/{sid}/span/{bar['span_id']}").json()["records"]
        assert [r["type"] for r in records] == ["tool_exec_start"]

        run.record(ev.tool_exec_end(tool, "grep", "3 matches"))
        done = client.get(f"/api/session/{sid}/run/{rid}").json()["run"]
        assert done["rows"][0]["bars"][0]["state"] == "ok"
        records = client.get(f"/api/session/{sid}/span/{bar['span_id']}").json()["records"]
        assert records[-1]["data"]["result"] == "3 matches"
        run.close()
        closed = client.get(f"/api/session/{sid}/run/{rid}").json()["run"]
        assert (closed["closed"], closed["state"]) == (True, "ok")
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        assert client.get("/api/sessions").json()["sessions"][0]["status"] == "idle"


# -- large bodies -------------------------------------------------------------------------------


def test_a_10_mib_body_is_clipped_and_loaded_in_full_on_demand(tmp_path: Path) -> None:
    """Pages and the API send a clipped body; /raw streams the record's exact bytes."""
    big = "x" * (10 << 20)
    demo = record_demo(tmp_path / "big.jsonl", big_output=big)
    span = demo.span_hex("call_fetch")
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        timeline = client.get(f"/api/session/{demo.session_id}/run/{demo.run_id}")
        assert len(timeline.content) < 64 << 10

        records = client.get(f"/api/session/{demo.session_id}/span/{span}")
        assert len(records.content) < 256 << 10
        end = records.json()["records"][-1]
        assert end["size"] > 10 << 20
        (cut,) = end["cuts"]
        assert cut["path"] == ["data", "result", "content", 0, "text"]
        assert (cut["kind"], cut["total"]) == ("string", 10 << 20)
        assert cut["shown"] < 64 << 10

        page = client.get(f"/session/{demo.session_id}/record/{end['seq']}")
        assert len(page.content) < 256 << 10

        raw = client.get(f"/session/{demo.session_id}/record/{end['seq']}/raw")
        assert raw.status_code == 200
        assert int(raw.headers["content-length"]) == end["size"] == len(raw.content)
        with open(demo.path, "rb") as f:
            f.seek(end["offset"])
            assert raw.content == f.read(end["size"])
        assert orjson.loads(raw.content)["data"]["result"]["content"][0]["text"] == big


def test_many_small_values_are_clipped_too(tmp_path: Path) -> None:
    """A body of many entries is cut by count, and the cut says how many there were."""
    path = tmp_path / "wide.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        tool = Execution("t", "tool")
        run.record(ev.tool_exec_end(tool, "ls", [f"file-{i}" for i in range(50_000)]))
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        sid = client.get("/api/sessions").json()["sessions"][0]["id"]
        record = client.get(f"/api/session/{sid}/record/2").json()
    (cut,) = record["cuts"]
    assert (cut["path"], cut["kind"], cut["total"]) == (["data", "result"], "items", 50_000)
    assert len(record["data"]["result"]) == cut["shown"] < 50_000


# -- packaging ------------------------------------------------------------------------------------


def test_core_imports_do_not_load_the_web_framework() -> None:
    """`import loopscribe` and `import loopscribe.viewer` import neither Starlette nor uvicorn."""
    code = (
        "import sys, loopscribe, loopscribe.viewer, loopscribe._stats; "
        "print([m for m in sys.modules if m.split('.')[0] in {'starlette', 'uvicorn'}])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_create_app_names_the_extra_when_the_framework_is_missing(
    monkeypatch: pytest.MonkeyPatch, demo: Demo
) -> None:
    """Without Starlette, the error says: pip install 'loopscribe[serve]'."""
    for name in [m for m in sys.modules if m.split(".")[0] == "starlette"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "loopscribe.viewer._app", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'loopscribe\[serve\]'"):
        create_app(demo.path.parent)


def test_a_long_run_page_embeds_one_page_of_rows(tmp_path: Path) -> None:
    """The page's JSON is bounded: rows come a page at a time, a deep link brings its page."""
    from loopscribe.otel import span_id
    from loopscribe.viewer._app import ROW_PAGE

    from .test_timeline import record_many

    (tmp_path / "s").mkdir()
    sid, rid = record_many(tmp_path / "s" / "many.jsonl", 2_000)
    with TestClient(create_app(tmp_path / "s"), base_url="http://127.0.0.1") as client:
        page = client.get(f"/session/{sid}/run/{rid}")
        data = page_data(page.text)["run"]
        assert len(data["rows"]) == ROW_PAGE
        assert data["total_rows"] == 2_002
        assert len(page.content) < 400_000
        span = f"{span_id(sid, rid, 'call_1999', 1):016x}"
        deep = page_data(client.get(f"/session/{sid}/run/{rid}?span={span}").text)
        assert deep["select"] == span
        assert deep["run"]["offset"] == 2_001 // ROW_PAGE * ROW_PAGE
        api = client.get(f"/api/session/{sid}/run/{rid}?offset=300&limit=50&collapsed=x").json()
        assert [r["index"] for r in api["run"]["rows"]] == list(range(300, 350))
        folded = client.get(f"/api/session/{sid}/run/{rid}?collapsed=turn").json()["run"]
        assert folded["total_rows"] == 2
        assert client.get(f"/api/session/{sid}/run/{rid}?offset=-1").status_code == 400
