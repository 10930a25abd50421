"""The run a ``with`` block makes current: seen by callees, copied threads and asyncio tasks."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from pathlib import Path

from loopscribe import Session, current_run


def test_with_block_makes_the_run_current_and_restores_the_outer_one(tmp_path: Path) -> None:
    """Inside ``with run:`` current_run() is that run; after it, the one before."""
    assert current_run() is None
    with Session.create(tmp_path / "a.jsonl") as a, Session.create(tmp_path / "b.jsonl") as b:
        with a.begin_run() as outer:
            assert current_run() is outer
            with b.begin_run() as inner:
                assert current_run() is inner
            assert current_run() is outer
        assert current_run() is None


def test_a_run_begun_without_with_is_not_current(tmp_path: Path) -> None:
    """Only the ``with`` block sets the context; a closed run is never current."""
    with Session.create(tmp_path / "a.jsonl") as session:
        run = session.begin_run()
        assert current_run() is None
        with run:
            run.close()
            assert current_run() is None


def test_copied_context_threads_and_tasks_see_the_run(tmp_path: Path) -> None:
    """A thread started in a copied context and an asyncio task see the run; a bare thread not."""
    seen: dict[str, object] = {}
    with Session.create(tmp_path / "a.jsonl") as session, session.begin_run() as run:
        ctx = contextvars.copy_context()
        copied = threading.Thread(target=ctx.run, args=(lambda: seen.update(copied=current_run()),))
        bare = threading.Thread(target=lambda: seen.update(bare=current_run()))
        for thread in (copied, bare):
            thread.start()
        for thread in (copied, bare):
            thread.join()

        async def look() -> object:
            await asyncio.sleep(0)
            return current_run()

        async def main() -> object:
            return await asyncio.create_task(look())

        seen["task"] = asyncio.run(main())
    assert seen == {"copied": run, "bare": None, "task": run}
