"""LoopscribeSessionStore with two writer processes on one folder: every acknowledged entry kept.

Each writer is a real process (this one, or ``tests/scripted.py``) with its own store. An
``append`` the store acknowledged must be in ``load``'s result, in the order
it was acknowledged; one refused because the other process holds the session
(``SessionLockedError``) must be in no one's way later.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any, cast

import orjson
from claude_agent_sdk.types import SessionKey, SessionStoreEntry

from loopscribe import read
from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

from ..scripted import Scripted, scripted

KEY: SessionKey = {"project_key": "-home-user-project", "session_id": "two-writers"}

# Each "go" runs the next step of the plan given in argv and prints its outcome. Both
# scripts say "ready" before their imports, so two of them start side by side.
_STEPS = textwrap.dedent(
    """
    print("ready", flush=True)
    import asyncio, sys
    import orjson
    from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

    folder, key, plan = sys.argv[1], orjson.loads(sys.argv[2]), orjson.loads(sys.argv[3])
    store = LoopscribeSessionStore(folder)

    async def step(kind, batches):
        if kind == "close":
            store.close()
            return ["closed"]
        # "append": the batches are issued at once, as the SDK's mirror may.
        found = await asyncio.gather(
            *(store.append(key, batch) for batch in batches), return_exceptions=True
        )
        return [type(r).__name__ if isinstance(r, BaseException) else "ok" for r in found]

    for kind, batches in plan:
        sys.stdin.readline()
        print(orjson.dumps(asyncio.run(step(kind, batches))).decode(), flush=True)
    store.close()
    """
)

# Appends its batches one by one, each until it is acknowledged, releasing the
# session after each so the other writer gets its turn; prints each acknowledged batch.
_RACER = textwrap.dedent(
    """
    print("ready", flush=True)
    import asyncio, sys
    import orjson
    from loopscribe import SessionLockedError
    from loopscribe.adapters.claude_agent_sdk import LoopscribeSessionStore

    folder, key, batches = sys.argv[1], orjson.loads(sys.argv[2]), orjson.loads(sys.argv[3])
    store = LoopscribeSessionStore(folder)

    async def main():
        for index, batch in enumerate(batches):
            while True:
                try:
                    await store.append(key, batch)
                    break
                except SessionLockedError:
                    continue
            await store.aclose()
            print(index, flush=True)

    sys.stdin.readline()
    asyncio.run(main())
    print("done", flush=True)
    """
)


def batch(writer: str, number: int, size: int = 3) -> list[dict[str, Any]]:
    """Entries unique to one writer's batch, each with a uuid (one without: titles have none)."""
    entries: list[dict[str, Any]] = [
        {"type": "x", "uuid": f"{writer}-{number}-{i}", "writer": writer, "n": number}
        for i in range(size - 1)
    ]
    entries.append({"type": "custom-title", "customTitle": f"{writer} {number}", "writer": writer})
    return entries


def loaded(folder: Path) -> list[dict[str, Any]]:
    """What a fresh store's ``load`` returns for :data:`KEY`."""
    with LoopscribeSessionStore(folder) as store:
        found = asyncio.run(store.load(KEY))
    return cast(list[dict[str, Any]], found or [])


def steps(folder: Path, plan: list[tuple[str, list[list[dict[str, Any]]]]]) -> Any:
    """A writer process that runs ``plan`` one step per ``go``."""
    return scripted(_STEPS, str(folder), orjson.dumps(KEY).decode(), orjson.dumps(plan).decode())


def run(writer: Scripted) -> list[str]:
    """Let a writer run its next step; the outcome of each append in it."""
    writer.go()
    return cast(list[str], orjson.loads(writer.said()))


def test_an_append_refused_by_the_lock_leaves_no_stale_state(tmp_path: Path) -> None:
    """B's appends fail while A (this process) holds the session; B's next one is in ``load``.

    Before, B kept the half-opened state of its refused append and took A's
    records for its own: the acknowledged batch was never written.
    """
    a1, b1, b2, b3, a2 = batch("a", 1), batch("b", 1), batch("b", 2), batch("b", 3), batch("a", 2)
    a = LoopscribeSessionStore(tmp_path)
    with steps(tmp_path, [("append", [b1, b2]), ("append", [b3]), ("close", [])]) as b:
        asyncio.run(a.append(KEY, cast(list[SessionStoreEntry], a1)))  # A holds the session now
        assert run(b) == ["SessionLockedError", "SessionLockedError"]
        a.close()
        assert run(b) == ["ok"]
        assert run(b) == ["closed"]
        asyncio.run(a.append(KEY, cast(list[SessionStoreEntry], a2)))
        a.close()
    assert loaded(tmp_path) == a1 + b3 + a2
    records = list(read(tmp_path / "two-writers+-home-user-project.jsonl", decode=False))
    assert len({r.session_id for r in records}) == 1
    assert [r.seq for r in records] == list(range(len(records)))


def test_two_writer_processes_racing_keep_every_acknowledged_entry(tmp_path: Path) -> None:
    """Two processes append interleaved batches to one session: ``load`` has each, in order."""
    plans = {w: [batch(w, n) for n in range(12)] for w in ("a", "b")}
    acknowledged: dict[str, list[int]] = {}
    key = orjson.dumps(KEY).decode()
    with (
        scripted(_RACER, str(tmp_path), key, orjson.dumps(plans["a"]).decode()) as a,
        scripted(_RACER, str(tmp_path), key, orjson.dumps(plans["b"]).decode()) as b,
    ):
        a.go()
        b.go()
        for name, writer in (("a", a), ("b", b)):
            said = [writer.said() for _ in range(len(plans[name]) + 1)]
            assert said[-1] == "done", said
            acknowledged[name] = [int(line) for line in said[:-1]]
    found = loaded(tmp_path)
    for name, plan in plans.items():
        assert acknowledged[name] == list(range(len(plan)))
        mine = [e for e in found if e["writer"] == name]
        # Every acknowledged entry, once, in the order of acknowledgment.
        assert mine == [entry for b in plan for entry in b]
    assert len(found) == sum(len(b) for plan in plans.values() for b in plan)
