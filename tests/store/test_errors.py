"""Every backend failure is one StoreError line (what, where, what to do); the CLI exits 1."""

from __future__ import annotations

import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from loopscribe import StoreError, Workspace
from loopscribe.store import Shipper, Store

from .conftest import child_env, converse

PASSWORD = "Fz9/pQ+r2sXk"


class _Refusing(socketserver.StreamRequestHandler):
    """An FTP server that logs anyone in, then answers every command with 550."""

    def handle(self) -> None:
        self.wfile.write(b"220 fake FTP\r\n")
        for line in self.rfile:
            word = line.split()[0].upper() if line.split() else b""
            if word == b"USER":
                self.wfile.write(b"331 password please\r\n")
            elif word == b"PASS":
                self.wfile.write(b"230 logged in\r\n")
            elif word == b"QUIT":
                self.wfile.write(b"221 bye\r\n")
                return
            else:
                self.wfile.write(b"550 Permission denied.\r\n")


@pytest.fixture
def refusing_ftp() -> Iterator[str]:
    """``ftp://user:PASSWORD@127.0.0.1:PORT/agents`` of a server that refuses everything."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Refusing)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    try:
        yield f"ftp://deploy:{PASSWORD.replace('/', '%2F')}@127.0.0.1:{port}/agents"
    finally:
        server.shutdown()
        server.server_close()


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopscribe", *args],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=120,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("loopscribe: error: ")
    return line


def test_an_ftp_550_is_one_line_without_the_password(tmp_path: Path, refusing_ftp: str) -> None:
    """The server's refusal: what failed, where (no password) and what to check."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 1)
    shipped = _one_line(_cli(["ship", str(ws.root), "--to", refusing_ftp]))
    assert "550" in shipped
    assert "refused: check the path and the rights" in shipped
    # Listing: FTP says 550 for a missing folder too, so ls says where to look.
    listed = _one_line(_cli(["ls", refusing_ftp]))
    assert "check the bucket (or folder) and prefix" in listed
    for line in (shipped, listed):
        assert "127.0.0.1" in line
        for piece in (PASSWORD, *PASSWORD.split("/"), PASSWORD.replace("/", "%2F")):
            assert piece not in line
    with pytest.raises(StoreError, match="550"):
        Shipper(ws.root, refusing_ftp).ship_once()


def _dead_endpoint() -> dict[str, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s3 = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "config_kwargs": {"retries": {"max_attempts": 1}},
    }
    return {
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "FSSPEC_S3": orjson.dumps(s3).decode(),
    }


def test_an_unreachable_s3_endpoint_is_one_line(tmp_path: Path) -> None:
    """ship, ship --follow and ls against a dead endpoint: one line that says to check it."""
    ws = Workspace(tmp_path / "src")
    with ws.create() as s:
        converse(s, 1)
    env = _dead_endpoint()
    url = "s3://team-traces/agents"
    for args in (
        ["ship", str(ws.root), "--to", url],
        ["ship", str(ws.root), "--to", url, "--follow"],
        ["ls", url],
        ["show", f"{url}/sessions/{s.id}"],
    ):
        line = _one_line(_cli(args, env))
        assert "cannot be reached" in line, line
        assert url.split("/")[2] in line


def test_a_missing_bucket_and_a_missing_backend_say_what_to_do(
    tmp_path: Path, s3_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """No such bucket: check the URL. No gcsfs: the pip command. Each one line, StoreError."""
    from loopscribe.cli import main

    with pytest.raises(StoreError, match="check the bucket"):
        Store("s3://no-such-bucket-here/agents").manifests()
    with pytest.raises(StoreError, match="pip install gcsfs"):
        Store("gs://bucket/agents")
    assert main(["ls", "s3://no-such-bucket-here/agents"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "check the bucket" in err
