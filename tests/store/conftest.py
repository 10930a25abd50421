"""Stores for the tests: a local folder, and an S3 API server (moto) on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import os
import secrets
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopscribe import (
    AssistantMessage,
    Execution,
    Session,
    TextContent,
    Usage,
    UserMessage,
    Workspace,
)
from loopscribe import events as ev

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """An S3 API server on 127.0.0.1 (moto's server mode, which s3fs tests against)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Point s3fs at the server, in this process and in subprocesses (via the environment)."""
    import fsspec.config
    import s3fs

    env = {**S3_ENV, "FSSPEC_S3_ENDPOINT_URL": moto_endpoint}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": moto_endpoint})
    yield env
    # s3fs's clients hold event-loop sockets that they leave to the garbage
    # collector; collect them here rather than inside some later test.
    s3fs.S3FileSystem.clear_instance_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
    # Closing a client outside its loop, s3fs calls asyncio.get_event_loop(),
    # which leaves a new loop set on this thread; close it now, or it is
    # reported as unclosed whenever a later test replaces it.
    policy = asyncio.get_event_loop_policy()
    loop = getattr(getattr(policy, "_local", None), "_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running():
        loop.close()
        policy.set_event_loop(None)


@pytest.fixture
def s3_url(s3_env: dict[str, str]) -> str:
    """A fresh bucket (and prefix) on the S3 server."""
    import s3fs

    bucket = f"team-{secrets.token_hex(4)}"
    fs = s3fs.S3FileSystem(endpoint_url=s3_env["FSSPEC_S3_ENDPOINT_URL"])
    fs.mkdir(bucket)
    return f"s3://{bucket}/agents"


@pytest.fixture
def folder_url(tmp_path: Path) -> str:
    """A store in a local folder (a network mount looks the same)."""
    return (tmp_path / "store").as_uri()


def converse(session: Session, turns: int, *, size: int = 0, tag: str = "") -> None:
    """Record ``turns`` user/assistant exchanges in one run (``size``: padding per answer)."""
    with session.begin_run() as run:
        for t in range(turns):
            model = Execution(f"m{t}", "model")
            run.record(ev.message_end(None, UserMessage(f"{tag}question {t}")))
            run.record(ev.model_exec_start(model, "demo-1"))
            reply = AssistantMessage(
                (TextContent(f"{tag}answer {t}" + "x" * size),), usage=Usage(10, 2)
            )
            run.record(ev.model_exec_end(model, message=reply, usage=reply.usage))
            run.record(ev.message_end(model, reply))


def shipped_bytes(store_dir: Path, session_id: str) -> bytes:
    """A session's segments in a folder store, concatenated in name order."""
    folder = store_dir / "sessions" / session_id
    return b"".join(p.read_bytes() for p in sorted(folder.glob("*.jsonl")))


def child_env(extra: dict[str, str] | None = None) -> dict[str, Any]:
    """The environment for a loopscribe subprocess (this interpreter's path, plus ``extra``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env.update(extra or {})
    return env


@pytest.fixture(params=["folder", "s3"])
def store_url(request: pytest.FixtureRequest) -> str:
    """Each kind of store: a local folder, and S3 (moto on 127.0.0.1)."""
    name = "folder_url" if request.param == "folder" else "s3_url"
    url: str = request.getfixturevalue(name)
    return url


def plant(url: str, key: str, data: bytes) -> None:
    """Write an object into a store behind loopscribe's back (as an attacker or a bug would)."""
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(url)
    path = f"{str(root).rstrip('/')}/{key}"
    if url.startswith("file:"):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
    else:
        fs.pipe_file(path, data)
        fs.invalidate_cache()


def store_keys(url: str) -> dict[str, int]:
    """Every object of a store (key relative to its root) and its size."""
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(url)
    base = str(root).rstrip("/")
    fs.invalidate_cache()
    try:
        found = fs.find(base, detail=True)
    except FileNotFoundError:
        return {}
    return {str(p)[len(base) + 1 :]: int(info.get("size") or 0) for p, info in found.items()}


def ship_sessions(
    root: Path, url: str, count: int, *, turns: int = 2, segment_bytes: int = 4096
) -> tuple[Workspace, list[str]]:
    """Record ``count`` sessions under ``root`` and ship them to ``url``."""
    from loopscribe.store import Shipper

    ws = Workspace(root)
    ids = []
    for n in range(count):
        with ws.create(title=f"session {n}", model="demo-1") as s:
            converse(s, turns)
            ids.append(s.id)
    result = Shipper(ws.root, url, segment_bytes=segment_bytes).ship_once()
    assert not result.errors, result.errors
    return ws, ids
