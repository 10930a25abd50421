"""install() / uninstall() of the LangChain adapter, with real LangChain runnables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableLambda

import loopscribe
from loopscribe import Session
from loopscribe.adapters.langchain import LoopscribeCallbackHandler, install, installed, uninstall


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    uninstall()
    yield
    uninstall()


def shout(text: str) -> str:
    return text.upper()


def exclaim(text: str) -> str:
    return f"{text}!"


def stop(text: str) -> str:
    """A step that stops recording in the middle of the chain, as a host shutting down would."""
    uninstall()
    return text


def kinds(path: Path) -> list[tuple[str, str]]:
    return [(r.type, r.execution.id) for r in loopscribe.read(path) if r.execution is not None]


def test_install_records_runs_given_no_callbacks_until_uninstall(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    chain = (RunnableLambda(shout) | RunnableLambda(exclaim)).with_config(run_name="pipeline")
    with Session.create(path) as session, session.begin_run() as run:
        handler = install(run)
        assert install(run) is handler  # twice: the same handler, added to a run once
        assert installed() is handler
        assert chain.invoke("hi") == "HI!"
        assert chain.invoke("hi", {"callbacks": [handler]}) == "HI!"
        uninstall()
        assert installed() is None
        assert handler.closed
        written = kinds(path)
        assert chain.invoke("again") == "AGAIN!"
        assert kinds(path) == written
    assert handler.errors == 0
    assert [k for k in written if k[0] == "agent_end"] == [
        ("agent_end", "shout_1"),
        ("agent_end", "exclaim_1"),
        ("agent_end", "pipeline_1"),
        ("agent_end", "shout_2"),
        ("agent_end", "exclaim_2"),
        ("agent_end", "pipeline_2"),
    ]


def test_uninstall_in_the_middle_of_a_chain_closes_what_is_open(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    chain = (RunnableLambda(shout) | RunnableLambda(stop) | RunnableLambda(exclaim)).with_config(
        run_name="pipeline"
    )
    with Session.create(path) as session, session.begin_run() as run:
        handler = install(run)
        assert chain.invoke("hi") == "HI!"
    records = [r for r in loopscribe.read(path) if r.execution is not None]
    assert [(r.type, r.execution.id) for r in records if r.execution][-2:] == [
        ("agent_end", "stop_1"),
        ("agent_end", "pipeline_1"),
    ]
    for record in records[-2:]:
        assert record.data["error"]["type"] == "NotEnded"
    assert not [r for r in records if r.execution and r.execution.id.startswith("exclaim")]
    assert handler.errors == 0


def test_installing_for_another_run_closes_the_first_handler(tmp_path: Path) -> None:
    with Session.create(tmp_path / "s.jsonl") as session:
        with session.begin_run() as first:
            handler = install(first)
        with session.begin_run() as second:
            other = install(second)
            assert other is not handler
            assert handler.closed
            assert not other.closed
            assert isinstance(installed(), LoopscribeCallbackHandler)
