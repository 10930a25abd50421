"""Problems on every page (a store's copy that failed to sync, a damaged object), shown as text."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import orjson
from starlette.testclient import TestClient

from loopscribe.viewer import create_app
from loopscribe.viewer._app import PROBLEMS_SHOWN

from .conftest import Demo

BASE = "http://127.0.0.1"
HOSTILE = "<img src=x onerror=alert(1)>\x1b[31mred\x00\r\nnext line \u202egnp.exe</script><!--"


def page_data(html: str) -> Any:
    """The JSON a page embeds for its script."""
    match = re.search(r'<script id="ls-data" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    return orjson.loads(match[1])


def test_every_page_and_answer_carries_the_current_problems(demo: Demo) -> None:
    """Pages, /api/sessions and errors show what the callable reports now, every time."""
    current = ["syncing the store's copy failed: ConnectionError: unreachable"]
    app = create_app(demo.path.parent, problems=lambda: list(current))
    run = f"/session/{demo.session_id}/run/{demo.run_id}"
    with TestClient(app, base_url=BASE) as client:
        pages = [
            "/",
            f"/session/{demo.session_id}",
            run,
            f"{run}?span={demo.span_hex('call_search')}",
            f"/session/{demo.session_id}/record/3",
            f"/trace/{demo.trace_hex}",
            "/session/" + "0" * 32,
            "/no/such/page",
        ]
        for url in pages:
            assert page_data(client.get(url).text)["problems"] == current, url
        assert client.get("/api/sessions").json()["problems"] == current
        missing = client.get("/api/session/" + "0" * 32)
        assert (missing.status_code, missing.json()["problems"]) == (404, current)
        current[:] = []
        assert page_data(client.get("/").text)["problems"] == []
        assert client.get("/api/sessions").json()["problems"] == []


def test_hostile_problem_text_is_text_on_one_line(demo: Demo) -> None:
    """HTML, control characters, a line break, a bidi override, a lone surrogate and a
    password in a URL reach the page as escaped text on one line, never as markup."""
    reported = [
        HOSTILE,
        "fetching s3://reader:hunter2secret@store.example/b failed",
        "bad name \ud800 here",
    ]
    app = create_app(demo.path.parent, problems=lambda: reported)
    with TestClient(app, base_url=BASE) as client:
        page = client.get("/")
        api = client.get("/api/sessions").json()
    assert page.status_code == 200
    html = page.text
    assert "<img" not in html
    assert html.count("</script>") == 2  # the data's and the script's: none from the text
    assert "<!--" not in html
    assert "hunter2secret" not in html
    assert not set(html) & {"\x00", "\x1b", "\r", "\u202e"}
    shown = page_data(html)["problems"]
    assert shown == api["problems"]
    assert shown[0] == (
        "<img src=x onerror=alert(1)>\\u001b[31mred\\u0000\\u000d\\u000anext line "
        "\\u202egnp.exe</script><!--"
    )
    assert "\n" not in "".join(shown)
    assert "hunter2secret" not in shown[1]
    assert shown[2] == "bad name \\ud800 here"


def test_a_failing_or_endless_problems_callable_never_breaks_a_page(demo: Demo) -> None:
    """A callable that raises is itself the problem; an endless one is cut to a few lines."""

    def broken() -> list[str]:
        raise RuntimeError("the mirror is gone")

    def endless() -> Iterator[str]:
        return (f"problem {i}" for i in itertools.count())

    with TestClient(create_app(demo.path.parent, problems=broken), base_url=BASE) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert page_data(page.text)["problems"] == [
            "the list of problems could not be read (RuntimeError)"
        ]
    with TestClient(create_app(demo.path.parent, problems=endless), base_url=BASE) as client:
        shown = client.get("/api/sessions").json()["problems"]
    assert shown[:PROBLEMS_SHOWN] == [f"problem {i}" for i in range(PROBLEMS_SHOWN)]
    assert len(shown) == PROBLEMS_SHOWN + 1
    assert "more problems than these" in shown[-1]
    long = "x" * 100_000
    with TestClient(create_app(demo.path.parent, problems=lambda: [long]), base_url=BASE) as c:
        (line,) = c.get("/api/sessions").json()["problems"]
    assert len(line) <= 500
