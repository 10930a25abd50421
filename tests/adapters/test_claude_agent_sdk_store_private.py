"""LoopscribeSessionStore keeps what it writes private: secrets scrubbed, files 0600, folders 0700.

A key pasted into a prompt reaches the store in the main transcript, in a
subagent's lines, in the summary beside the file (its first prompt) and in
``load``; with ``redact=`` none of those holds it. Every file and folder the
store creates is readable by its owner only, whatever the umask.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from loopscribe import COMMON_PATTERNS, Redactor
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

SECRET = "sk-ant-api03-Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0Lz"
KNOWN = "hunter2-correct-horse-battery"
"""A known secret (given by value), not a token shape."""
KEY: SessionKey = {"project_key": "-home-user-project", "session_id": "private"}
SUB: SessionKey = cast(SessionKey, {**KEY, "subpath": "subagents/agent-a1"})


def entries(secret: str) -> tuple[list[Any], list[Any]]:
    """Main and subagent entries carrying ``secret`` wherever a transcript can."""
    main: list[Any] = [
        {
            "type": "user",
            "uuid": "u1",
            "timestamp": "2024-05-01T10:00:00.000Z",
            "sessionId": "private",
            "message": {"role": "user", "content": f"use the key {secret} please"},
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "timestamp": "2024-05-01T10:00:01.000Z",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "model": "claude",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Bash",
                        "input": {"command": f"export KEY={secret}"},
                    }
                ],
            },
        },
        {
            "type": "user",
            "uuid": "u2",
            "timestamp": "2024-05-01T10:00:02.000Z",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": f"KEY={secret}"}
                ],
            },
            "toolUseResult": {"stdout": json.dumps({"key": secret})},
        },
        # Kept as tagged text (inf): the secret is inside a JSON string there.
        {"type": "x", "uuid": "x1", "odd": math.inf, "note": f"again {secret}"},
        # A lone surrogate beside it: the string is tagged, its text stays text.
        {"type": "x", "uuid": "x2", "note": f"{secret} \ud800"},
        {"type": "last-prompt", "lastPrompt": f"and {secret}"},
    ]
    sub: list[Any] = [{"type": "user", "uuid": "s1", "message": {"content": secret}}]
    return main, sub


def every_byte(folder: Path) -> bytes:
    """All the bytes of every file under ``folder``."""
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


@pytest.mark.parametrize(
    ("secret", "redactor"),
    [(SECRET, Redactor(patterns=COMMON_PATTERNS)), (KNOWN, Redactor([KNOWN]))],
    ids=["pattern", "known value"],
)
def test_redact_scrubs_every_file_the_store_writes(
    secret: str, redactor: Redactor, tmp_path: Path
) -> None:
    """No file holds the secret in any form; ``load`` and the listings show it scrubbed."""
    main, sub = entries(secret)
    folder = tmp_path / "store"

    async def scenario(store: LoopscribeSessionStore) -> list[Any]:
        await store.append(KEY, cast(list[SessionStoreEntry], main[:2]))
        await store.append(SUB, cast(list[SessionStoreEntry], sub))
        await store.append(KEY, cast(list[SessionStoreEntry], main[2:]))
        return [
            await store.load(KEY),
            await store.load(SUB),
            await store.list_session_summaries(KEY["project_key"]),
        ]

    with LoopscribeSessionStore(folder, redact=redactor) as store:
        mine = asyncio.run(scenario(store))
    with LoopscribeSessionStore(folder) as other:
        theirs: list[Any] = [
            asyncio.run(other.load(KEY)),
            asyncio.run(other.load(SUB)),
            asyncio.run(other.list_session_summaries(KEY["project_key"])),
        ]
    written = every_byte(folder)
    assert written
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(json.dumps(secret))[1:-1]}
    for form in forms:
        assert form.encode() not in written
    for shown in (mine, theirs):
        text = repr(shown)
        assert secret not in text
        assert "[REDACTED]" in text
    assert mine == theirs
    loaded_main = theirs[0]
    assert loaded_main[0]["message"]["content"] == "use the key [REDACTED] please"
    assert theirs[2][0]["data"]["first_prompt"] == "use the key [REDACTED] please"


@pytest.fixture
def umask() -> Iterator[None]:
    """The common default umask (022), which leaves new files world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_every_file_and_folder_the_store_creates_is_private(tmp_path: Path, umask: None) -> None:
    """Session files, summaries and folders (missing parents too) are 0600 / 0700."""
    folder = tmp_path / "a" / "b" / "store"
    main, sub = entries("nothing secret")
    other: SessionKey = {"project_key": "-home-user-other", "session_id": "o" * 300}

    async def scenario(store: LoopscribeSessionStore) -> None:
        await store.append(KEY, cast(list[SessionStoreEntry], main))
        await store.append(SUB, cast(list[SessionStoreEntry], sub))
        await store.append(other, cast(list[SessionStoreEntry], main[:1]))
        await store.delete(SUB)

    with LoopscribeSessionStore(folder) as store:
        asyncio.run(scenario(store))
    with LoopscribeSessionStore(folder) as again:  # reopened, appended, summaries rewritten
        asyncio.run(again.append(KEY, [cast(SessionStoreEntry, {"type": "x", "uuid": "more"})]))
        asyncio.run(again.delete(other))
        asyncio.run(again.append(other, cast(list[SessionStoreEntry], main[:1])))
    found = list((tmp_path / "a").rglob("*"))
    files = [p for p in found if p.is_file()]
    assert {p.name.rsplit(".jsonl", 1)[-1] for p in files} == {"", ".sdk-summary.json"}
    assert len(files) == 4
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for path in [tmp_path / "a", *(p for p in found if p.is_dir())]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
