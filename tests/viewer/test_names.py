"""Runs named by their prompt and models; failures as one clean line of text."""

from __future__ import annotations

from pathlib import Path

from loopscribe import AssistantMessage, Execution, Session, TextContent, UserMessage
from loopscribe import events as ev
from loopscribe._preview import clean_error, error_text
from loopscribe._runnames import PROMPT_CHARS, run_names
from loopscribe.viewer import load_timeline

from .first_hour import PROMPT, record_fix


def test_a_run_is_named_by_its_first_prompt_and_its_models(tmp_path: Path) -> None:
    """The first user message the run committed, and the models that answered."""
    path = tmp_path / "fix.jsonl"
    record_fix(path)
    (run,) = load_timeline(path).iter_runs()
    assert run_names(run) == {"prompt": PROMPT, "models": ["claude-demo"]}


def test_wrapped_context_is_not_the_prompt(tmp_path: Path) -> None:
    """<environment_context> and the like are skipped; a long prompt is cut to its first words."""
    path = tmp_path / "codex.jsonl"
    asked = "Evaluate the services package and write a plan " * 5
    with Session.create(path) as session, session.begin_run() as run:
        run.record(
            ev.message_end(None, UserMessage("<environment_context>cwd</environment_context>"))
        )
        run.record(ev.message_end(None, UserMessage(asked)))
        model = Execution("m", "model")
        run.record(ev.model_exec_start(model, "gpt-x"))
        run.record(ev.model_exec_end(model, message=AssistantMessage((TextContent("ok"),))))
    (timeline_run,) = load_timeline(path).iter_runs()
    prompt = run_names(timeline_run)["prompt"]
    assert prompt.startswith("Evaluate the services package")
    assert len(prompt) <= PROMPT_CHARS


def test_a_run_that_commits_nothing_is_named_by_its_first_request(tmp_path: Path) -> None:
    """Without committed messages, the prompt of the first model call names the run."""
    path = tmp_path / "plain.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        model = Execution("m", "model")
        run.record(ev.model_exec_start(model, "gpt-x"))
        run.record(ev.model_request(model, [UserMessage("Summarise the changelog")], model="gpt-x"))
        run.record(ev.model_exec_end(model, error="boom"))
    (timeline_run,) = load_timeline(path).iter_runs()
    assert run_names(timeline_run) == {"prompt": "Summarise the changelog", "models": ["gpt-x"]}


def test_failures_read_as_one_clean_line() -> None:
    """Tags go (their text stays); escaped newlines read as spaces, as real ones do."""
    assert clean_error("<tool_use_error>File does not exist.</tool_use_error>") == (
        "File does not exist."
    )
    assert clean_error("failed:\\n\\n[FORMAT] bad\\tformat") == "failed: [FORMAT] bad format"
    wrapped = {
        "is_error": True,
        "result": "<tool_use_error>Sibling tool call errored</tool_use_error>",
    }
    assert error_text(wrapped) == "Sibling tool call errored"
    assert error_text({"error": {"type": "X", "message": "a\\nb"}}) == "a b"
