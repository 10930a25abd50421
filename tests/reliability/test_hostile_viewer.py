"""Hostile requests to a real ``loopscribe serve`` process: a 4xx or an answer, never a 500.

The server is started as users start it, on a socket; requests are written
by hand, so the ``Host`` header and the path bytes are exactly what an
attacker (or a DNS-rebinding web page) would send.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loopscribe import Execution, Session
from loopscribe import events as ev

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(port: int, path: bytes, host: bytes) -> int:
    """Send one GET with the given Host; the response's status code."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(
            b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"
        )
        head = b""
        while b"\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                break
            head += chunk
    return int(head.split(b" ", 2)[1])


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A served folder: a session, a file with spaces after ':' and ',', a symlink out,
    a session whose name is not UTF-8 and holds a line break, and one with a 60 KB title."""
    served = tmp_path / "served"
    served.mkdir()
    with Session.create(served / "a.jsonl") as session, session.begin_run() as run:
        tool = Execution("t1", "tool")
        run.record(ev.tool_exec_start(tool, "lookup", {}))
        run.record(ev.tool_exec_end(tool, "lookup", "ok"))
    outside = tmp_path / "outside"
    outside.mkdir()
    with Session.create(outside / "secret.jsonl") as session, session.begin_run() as run:
        run.record(ev.tool_exec_start(Execution("t", "tool"), "SECRET_TOOL", {}))
    (served / "link.jsonl").symlink_to(outside / "secret.jsonl")
    spaced = (served / "a.jsonl").read_text().replace('":', '": ').replace('",', '", ')
    (served / "spaced.jsonl").write_text(spaced)
    odd = served / os.fsdecode(b"odd \xff\xfe name\n<b>.jsonl")
    with Session.create(odd, metadata={"title": "T" * 60_000}) as session:
        session.begin_run().close()
    return served


@pytest.fixture
def server(folder: Path) -> Iterator[tuple[int, Path]]:
    """``loopscribe serve --host 0.0.0.0 --allow-host viewer.example`` on a free port."""
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopscribe.viewer",
            "serve",
            str(folder),
            "--host",
            "0.0.0.0",
            "--allow-host",
            "viewer.example",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the viewer did not start"
                time.sleep(0.05)
        yield port, folder
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()


def test_host_is_checked_even_on_all_interfaces(server: tuple[int, Path]) -> None:
    """With --host 0.0.0.0, loopback and --allow-host names answer; any other Host is refused."""
    port, _ = server
    assert _get(port, b"/api/sessions", b"127.0.0.1:%d" % port) == 200
    assert _get(port, b"/api/sessions", b"localhost") == 200
    assert _get(port, b"/api/sessions", b"viewer.example:%d" % port) == 200
    assert _get(port, b"/api/sessions", b"attacker.example") == 400
    assert _get(port, b"/api/sessions", b"0.0.0.0") == 400


def test_hostile_paths_and_queries_never_give_a_500(server: tuple[int, Path]) -> None:
    """Odd ids, quotes, CR/LF, slashes, non-ASCII digits: 4xx or an answer, never 5xx."""
    port, _ = server
    host = b"127.0.0.1"
    paths = [
        "/session/%E2%82%AC%E2%82%AC",
        "/session/%22quoted%22",
        "/session/a%0D%0Ab",
        "/session/a%2Fb",
        "/api/session/%FF%FE",
        "/trace/%E0%A5%A7%E0%A5%A8",
        "/trace/" + "f" * 32 + "/span/%C2%B2",
        "/session/x/record/%C2%B2",
        "/api/session/x/span/" + "0" * 16 + "?offset=%D9%A1",
        "/session/x/run/y?seq=%C2%B2&attempt=%D9%A1&execution=e",
        "/api/sessions?x=%00",
        "/api/sessions?cursor=%FF%FE",
        "/?cursor=AAAA%00",
        "/api/sessions?cursor=" + "A" * 5000,
        "/api/sessions?limit=99999999999999999999999999",
        "/api/sessions?limit=%D9%A1",
        "/?q=%00%FF%0A&status=%0D%0A&source=%E2%80%AE",
        "/api/sessions?text=%ED%A0%80&q=%F0%9F%98%80",
        "/api/sessions?errors=%FF",
    ]
    for path in paths:
        status = _get(port, path.encode(), host)
        assert 200 <= status < 500, (path, status)


def test_odd_file_names_and_huge_titles_are_listed(server: tuple[int, Path]) -> None:
    """A name that is not UTF-8 (with a line break) is listed escaped; a 60 KB title is cut."""
    port, _ = server
    status, body = _fetch(port, b"/api/sessions")
    assert status == 200
    rows = orjson.loads(body)["sessions"]
    odd = next(row for row in rows if row["file"].endswith(".jsonl") and "\n" in row["file"])
    assert odd["file"].endswith("odd \\xff\\xfe name\n<b>.jsonl")
    assert len(odd["title"]) < 1_000
    assert len(body) < 100_000
    status, page = _fetch(port, b"/")
    assert status == 200
    assert b"<b>" not in page


def _fetch(port: int, path: bytes) -> tuple[int, bytes]:
    """One GET on loopback; the status and the body."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        raw = b""
        while chunk := conn.recv(65536):
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"chunked" in head.lower():
        body = _unchunk(body)
    return int(head.split(b" ", 2)[1]), body


def _unchunk(body: bytes) -> bytes:
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, body = out + body[:size], body[size + 2 :]
    return out


def test_a_symlink_out_of_the_folder_is_not_served(server: tuple[int, Path]) -> None:
    """The listing holds the session inside the folder, not the one a symlink points to."""
    port, folder = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        body = b""
        while chunk := conn.recv(65536):
            body += chunk
    assert b"SECRET_TOOL" not in body
    assert str(folder / "link.jsonl").encode() not in body
    assert str(folder / "a.jsonl").encode() in body


def test_report_files_are_private(tmp_path: Path, folder: Path) -> None:
    """``loopscribe report`` writes 0600, like session files, whatever the umask."""
    out = tmp_path / "r.html"
    old = os.umask(0o022)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "loopscribe", "report", str(folder / "a.jsonl"), "-o", str(out)],
            capture_output=True,
            timeout=120,
            check=False,
        )
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_the_allow_list_holds_the_bound_address_and_never_all_interfaces() -> None:
    """A loopback address the viewer is bound to answers; 0.0.0.0 and :: are never a name."""
    from loopscribe.cli._viewer import allowed_hosts

    assert "127.0.0.2" in allowed_hosts("127.0.0.2")
    assert "[::1]" in allowed_hosts("::1")
    assert "0.0.0.0" not in allowed_hosts("0.0.0.0")
    assert "::" not in allowed_hosts("::")
    assert "viewer.example" in allowed_hosts("0.0.0.0", ["viewer.example"])
    assert "localhost" in allowed_hosts("0.0.0.0")
