"""The viewer's script as ES modules: served with the page's headers, linked for the report."""

from __future__ import annotations

import mimetypes
import re
import socket
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.testclient import TestClient

from loopscribe.viewer import build_report, create_app
from loopscribe.viewer._script import ENTRY, link, modules

from .conftest import Demo

STATIC = Path(str(resources.files("loopscribe.viewer"))) / "static"


@pytest.fixture
def client(demo: Demo) -> Iterator[TestClient]:
    """A test client of the viewer over the demo's folder."""
    with TestClient(create_app(demo.path.parent), base_url="http://127.0.0.1") as c:
        yield c


# -- served as modules -----------------------------------------------------------------


def test_the_page_loads_the_entry_as_a_module_and_no_inline_script(client: TestClient) -> None:
    """The page's only script is the module at /static/viewer.js; its data is not script."""
    page = client.get("/").text
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts == [
        '<script id="ls-data" type="application/json">',
        '<script type="module" src="/static/viewer.js">',
    ]
    # Every module is asked for at once (not one level of imports after another).
    preloads = re.findall(r'<link rel="modulepreload" href="([^"]+)">', page)
    assert preloads == [f"/{name}" for name, _ in modules()[:-1]]
    csp = client.get("/").headers["content-security-policy"]
    assert "script-src 'self';" in csp
    assert "unsafe-inline" not in csp
    assert "unsafe-eval" not in csp


def test_every_module_is_served_as_javascript_with_the_page_headers(client: TestClient) -> None:
    """Each module the entry reaches is text/javascript, nosniff, under the page's CSP."""
    page = client.get("/")
    served = [name for name, _ in modules()]
    # Every file of static/viewer/ is reached from the entry: none is dead or forgotten.
    assert sorted(served) == sorted(
        [ENTRY] + [f"static/viewer/{p.name}" for p in (STATIC / "viewer").glob("*.js")]
    )
    assert len(served) >= 10
    for name in served:
        response = client.get("/" + name)
        assert response.status_code == 200, name
        assert response.headers["content-type"] == "text/javascript; charset=utf-8", name
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"
        csp = response.headers["content-security-policy"]
        assert csp == page.headers["content-security-policy"]
    assert "function RunView(" in client.get("/static/viewer/timeline.js").text


def test_a_script_stays_javascript_whatever_the_system_type_table_says(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A browser refuses a module served as text/plain (a Windows registry can map .js so)."""
    table = mimetypes.MimeTypes()
    table.add_type("text/plain", ".js")
    monkeypatch.setattr(mimetypes, "_db", table)
    assert mimetypes.guess_type("a.js")[0] == "text/plain"
    response = client.get("/static/viewer/common.js")
    assert response.headers["content-type"] == "text/javascript; charset=utf-8"
    assert (
        response.headers["content-type"] != client.get("/static/viewer.css").headers["content-type"]
    )


HOSTILE_PATHS = [
    "/static/../_app.py",
    "/static/..%2f_app.py",
    "/static/%2e%2e/_app.py",
    "/static/%2e%2e%2f_app.py",
    "/static/viewer/../../_app.py",
    "/static/viewer/%2e%2e/%2e%2e/_app.py",
    "/static/viewer/%2E%2E%2F%2E%2E%2F_app.py",
    "/static/..\\_app.py",
    "/static/..%5c_app.py",
    "/static/viewer/..%5c..%5c_app.py",
    "/static//etc/passwd",
    "/static/%2fetc%2fpasswd",
    "/static/../../../../../../../../etc/passwd",
    "/static/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "/static/viewer/..%00/..%00/_app.py",
    "/static/viewer.js%00.py",
    "/static/%c0%ae%c0%ae/_app.py",
]


def raw_get(url: str, target: str) -> tuple[int, bytes]:
    """Send ``GET target`` exactly as written (no client normalises it); status and body."""
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as conn:
        conn.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    status = int(answer.split(b" ", 2)[1])
    return status, answer.partition(b"\r\n\r\n")[2]


def test_hostile_static_paths_never_leave_the_static_folder(
    demo: Demo, serve_app: Callable[[Any], str]
) -> None:
    """Dot segments, encoded slashes, backslashes and NULs reach no file outside static/."""
    url = serve_app(create_app(demo.path.parent))
    outside = (STATIC.parent / "_app.py").read_bytes()[:60]
    assert raw_get(url, "/static/viewer/../viewer.js")[0] == 200  # inside: still served
    for target in HOSTILE_PATHS:
        status, body = raw_get(url, target)
        assert status == 404, (target, status)
        assert outside not in body, target
        assert b"root:" not in body, target


# -- linked for the report ---------------------------------------------------------------


def test_the_report_inlines_one_classic_script_linked_from_every_module(demo: Demo) -> None:
    """No module syntax is left in the report, and each module's code is in it once."""
    report = build_report(demo.path)
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", report, re.S)
    (code,) = [body for attrs, body in scripts if "type=" not in attrs]
    assert not re.search(r"^\s*(import|export)\b", code, re.M)
    for name, text in modules():
        assert code.count(f"// {name}\n") == 1
        for piece in re.split(r'^import \{[^}]*\} from "[^"]*";\n', text, flags=re.M):
            assert re.sub(r"^export ", "", piece, flags=re.M).replace("</", "<\\/") in code, name
    assert "use strict" in code


def fake(files: dict[str, str]) -> Callable[[str], str]:
    """A reader of the modules in ``files`` (names relative to the viewer package)."""

    def read(name: str) -> str:
        return files[name]

    return read


def test_the_linker_orders_modules_by_their_imports_and_scopes_each() -> None:
    """A module comes after what it imports; its names stay in its scope but its exports."""
    files = {
        ENTRY: 'import { twice } from "./viewer/b.js";\nconsole.log(twice(2));\n',
        "static/viewer/b.js": (
            'import { one } from "./a.js";\n'
            "const hidden = 2;\n"
            "export function twice(n) { return n * hidden * one; }\n"
        ),
        "static/viewer/a.js": "export const one = 1;\nexport let spare = 0;\n",
    }
    assert [n for n, _ in modules(fake(files))] == [
        "static/viewer/a.js",
        "static/viewer/b.js",
        ENTRY,
    ]
    linked = link(fake(files))
    assert "return { one, spare };" in linked
    assert "const { one } = module_viewer_a;" in linked
    assert "return { twice };" in linked
    assert "const { twice } = module_viewer_b;" in linked
    assert "function twice(n)" in linked
    assert "export" not in linked
    assert "import" not in linked


@pytest.mark.parametrize(
    ("entry", "others", "message"),
    [
        ("export default 1;\n", {}, "export default"),
        ('import a from "./viewer/a.js";\n', {"static/viewer/a.js": ""}, "import a from"),
        ('import * as a from "./viewer/a.js";\n', {"static/viewer/a.js": ""}, "import * as"),
        ("export { a };\nconst a = 1;\n", {}, "export { a }"),
        (
            'import { one as two } from "./viewer/a.js";\n',
            {"static/viewer/a.js": "export const one = 1;\n"},
            "only plain names",
        ),
        (
            'import { two } from "./viewer/a.js";\n',
            {"static/viewer/a.js": "export const one = 1;\n"},
            "does not export",
        ),
        ('import { a } from "lib";\n', {}, "only relative paths"),
        ('import { a } from "https://cdn.example/a.js";\n', {}, "only relative paths"),
        ('import { a } from "../../_app.js";\n', {}, "leaves the static folder"),
        (
            'import { a } from "./viewer/a.js";\n',
            {"static/viewer/a.js": 'import { b } from "../viewer.js";\nexport const a = 1;\n'},
            "in a circle",
        ),
    ],
)
def test_the_linker_refuses_what_it_cannot_link(
    entry: str, others: dict[str, str], message: str
) -> None:
    """A form the browser would take but the report could not is an error naming the module."""
    with pytest.raises(ValueError, match=re.escape(message)):
        link(fake({ENTRY: entry, **others}))


# -- the modules' imports ------------------------------------------------------------------


def code_only(text: str) -> str:
    """``text`` with its comments, strings and regular expressions blanked out.

    Enough of a JavaScript lexer for the viewer's own modules: a ``/`` after an
    operator, an opening bracket or ``return`` starts a regular expression.
    """
    out: list[str] = []
    i, n, last = 0, len(text), ""
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i) if "\n" in text[i:] else n
            continue
        if text.startswith("/*", i):
            i = text.index("*/", i) + 2
            continue
        if c in "\"'`":
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i, last = j + 1, "x"
            continue
        if c == "/" and (last in "(,=:[!&|?{};+" or last == "return"):
            j, in_class = i + 1, False
            while text[j] != "/" or in_class:
                if text[j] == "\\":
                    j += 1
                elif text[j] in "[]":
                    in_class = text[j] == "["
                j += 1
            j += 1
            while j < n and text[j].isalpha():
                j += 1
            out.append("/r/")
            i, last = j, "x"
            continue
        word = re.match(r"[\w$]+", text[i:])
        if word:
            out.append(word[0])
            i += len(word[0])
            last = "return" if word[0] == "return" else "x"
            continue
        out.append(c)
        last = last if c.isspace() else c
        i += 1
    return "".join(out)


def test_every_name_a_module_takes_from_another_is_imported() -> None:
    """A missing import is not always an error in the browser (``when`` is a method of
    ``window`` in recent Chromium), so each module's names are checked here."""
    texts = dict(modules())
    exported = {
        name: set(re.findall(r"^export (?:function|const|let|class) (\w+)", text, re.M))
        for name, text in texts.items()
    }
    problems = []
    for name, text in texts.items():
        imported = {
            each.strip()
            for names in re.findall(r"^import \{([^}]*)\} from", text, re.M)
            for each in names.split(",")
        }
        code = code_only(re.sub(r"^import \{[^}]*\} from [^;]*;", "", text, flags=re.M))
        own = set(re.findall(r"\b(?:var|let|const|function)\s+([\w$]+)", code))
        own |= {
            param.strip()
            for params in re.findall(r"function\s*[\w$]*\s*\(([^)]*)\)", code)
            for param in params.split(",")
        }
        for other, names in exported.items():
            for used in names - imported - own if other != name else ():
                # Not a property (.x) and not an object key (x: ...).
                if re.search(rf"(?<![\w$.]){re.escape(used)}(?![\w$:])", code):
                    problems.append(f"{name} uses {used} from {other} without importing it")
        for each in imported - {""}:
            if not re.search(rf"(?<![\w$.]){re.escape(each)}(?![\w$])", code):
                problems.append(f"{name} imports {each} and never uses it")
    assert problems == []
