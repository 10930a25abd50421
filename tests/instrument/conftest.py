"""Fakes for the SDKs' HTTP clients: canned responses, SSE bodies, broken streams."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest

from loopscribe import Record, Session, read


def sse(*events: Any, named: bool = False, done: bool = False) -> bytes:
    """A server-sent event body: ``data:`` lines (with ``event:`` names when ``named``)."""
    out = bytearray()
    for event in events:
        if named:
            out += b"event: " + event["type"].encode() + b"\n"
        out += b"data: " + orjson.dumps(event) + b"\n\n"
    if done:
        out += b"data: [DONE]\n\n"
    return bytes(out)


class Chunks(httpx2.SyncByteStream):
    """A response body in chunks; ``fail`` raises after them, like a connection cut mid-body."""

    def __init__(self, chunks: list[bytes], fail: bool = False) -> None:
        self.chunks, self.fail, self.closed, self.sent = chunks, fail, False, 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.sent += 1
            yield chunk
        if self.fail:
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete body")

    def close(self) -> None:
        self.closed = True


class AsyncChunks(httpx2.AsyncByteStream):
    """The async twin of :class:`Chunks`."""

    def __init__(self, chunks: list[bytes], fail: bool = False) -> None:
        self.chunks, self.fail, self.closed = chunks, fail, False

    async def __aiter__(self) -> Any:
        for chunk in self.chunks:
            yield chunk
        if self.fail:
            raise httpx2.RemoteProtocolError("peer closed connection without sending complete body")

    async def aclose(self) -> None:
        self.closed = True


class Server:
    """A queue of canned responses; remembers every request's exact body."""

    def __init__(self) -> None:
        self.replies: list[Callable[[httpx2.Request], httpx2.Response]] = []
        self.bodies: list[bytes] = []

    def reply(self, status: int = 200, **kwargs: Any) -> None:
        self.replies.append(lambda request: httpx2.Response(status, **kwargs))

    def stream(
        self, body: bytes, *, cut: int | None = None, fail: bool = False, asynchronous: bool = False
    ) -> None:
        body = body if cut is None else body[:cut]
        parts = [body[i : i + 40] for i in range(0, len(body), 40)]
        stream: Any = AsyncChunks(parts, fail) if asynchronous else Chunks(parts, fail)
        headers = {"content-type": "text/event-stream"}
        self.replies.append(lambda request: httpx2.Response(200, headers=headers, stream=stream))

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(request.read())
        return self.replies.pop(0)(request)

    async def handle_async(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(await request.aread())
        return self.replies.pop(0)(request)


@pytest.fixture
def server() -> Server:
    return Server()


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with Session.create(tmp_path / "s.jsonl") as s:
        yield s


def records(session: Session) -> list[Record]:
    """The session file's records (the file, not memory)."""
    return list(read(session.path))


def of(session: Session, kind: str) -> list[Record]:
    return [r for r in records(session) if r.type == kind]


@pytest.fixture(autouse=True)
def _process_session_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A call outside a run never writes into the working folder of the test run."""
    from loopscribe import instrument

    monkeypatch.setenv("LOOPSCRIBE_DIR", str(tmp_path / "process-sessions"))
    instrument.configure()
    yield
    instrument.configure()
