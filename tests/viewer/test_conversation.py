"""The conversation view's data: messages, tool calls, results, errors, subagent threads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from loopscribe.importers.claude_code import import_transcript
from loopscribe.viewer import create_app, load_timeline
from loopscribe.viewer._conversation import conversation

from .conftest import SUBAGENT_OUTPUT, THINKING, TOOL_OUTPUT, Demo, record_chat, record_demo

TRANSCRIPTS = Path(__file__).parents[1] / "data" / "transcripts"


@pytest.fixture
def chat(tmp_path: Path) -> Demo:
    return record_chat(tmp_path / "chat.jsonl")


def test_messages_calls_and_results_in_order_with_their_coordinates(chat: Demo) -> None:
    """Every item names its record and the span of its bar; the order is the file's."""
    items = conversation(load_timeline(chat.path))["items"]
    kinds = [(i["kind"], i.get("role") or i.get("tool")) for i in items]
    assert kinds == [
        ("message", "user"),
        ("message", "assistant"),
        ("tool_call", "git_log"),
        ("tool_result", "git_log"),
        ("agent", None),
        ("message", "assistant"),
        ("tool_call", "count_commits"),
        ("tool_result", "count_commits"),
        ("agent", None),
        ("message", "assistant"),
        ("tool_call", "publish"),
        ("tool_result", "publish"),
        ("message", "assistant"),
    ]
    seqs = [i["seq"] for i in items]
    assert seqs == sorted(seqs)
    by_tool = {i.get("tool"): i for i in items if i["kind"] == "tool_result"}
    assert by_tool["git_log"]["span_id"] == chat.span_hex("call_log")
    assert by_tool["git_log"]["run_id"] == chat.run_id
    # The user message (outside any execution) sits on the run's own bar.
    assert items[0]["span_id"] == chat.run_span_hex
    # The committed reply is shown once, from message_end, not again from model_exec_end.
    assert [i["type"] for i in items if i["kind"] == "message"] == ["message_end"] * 5


def test_native_content_is_kept_for_the_page(chat: Demo) -> None:
    """loopscribe's typed blocks and the OpenAI/Anthropic dicts arrive as recorded."""
    items = conversation(load_timeline(chat.path))["items"]
    user = items[0]["body"]
    assert [b["$ls"] for b in user["content"]] == ["text", "image", "file"]
    assert user["content"][2]["uri"] == "file:///repo/CHANGELOG.md"
    thinking = items[1]["body"]["content"][0]
    assert thinking == {"$ls": "thinking", "thinking": THINKING, "signature": thinking["signature"]}
    openai = items[9]["body"]
    assert openai["tool_calls"][0]["function"]["name"] == "publish"
    anthropic = items[-1]["body"]
    assert [b["type"] for b in anthropic["content"]] == ["thinking", "text"]


def test_subagent_items_form_a_nested_thread(chat: Demo) -> None:
    items = conversation(load_timeline(chat.path))["items"]
    nested = [i for i in items if i["depth"] == 1]
    assert {i["thread"] for i in nested} == {"sub_1"}
    assert {i["thread_agent"] for i in nested} == {"summariser"}
    assert any(SUBAGENT_OUTPUT in str(i["body"]) for i in nested)
    assert all(i["depth"] == 0 for i in items if i not in nested)


def test_an_error_without_a_type_keeps_its_text(chat: Demo) -> None:
    """A failed call with no error type is _OTHER on the span; the page shows its message."""
    items = conversation(load_timeline(chat.path))["items"]
    failed = next(i for i in items if i["kind"] == "tool_result" and i["is_error"])
    assert failed["error_text"] == "channel #releases is archived"
    run = next(load_timeline(chat.path).iter_runs()).to_json()
    (error,) = run["errors"]
    assert (error["error_type"], error["error_text"]) == ("_OTHER", "channel #releases is archived")


def test_errors_and_retries_of_the_research_demo(demo: Demo) -> None:
    items = conversation(load_timeline(demo.path))["items"]
    errors = [i for i in items if i["kind"] == "error"]
    assert [e["body"]["type"] for e in errors] == ["RateLimitError"]
    assert errors[0]["span_id"] == demo.span_hex("model_2", 1)
    results = [i for i in items if i["kind"] == "tool_result"]
    assert TOOL_OUTPUT in str(results[0]["body"])
    assert [r["is_error"] for r in results] == [False, False, True]


def test_pages_resume_where_the_last_one_stopped(chat: Demo) -> None:
    timeline = load_timeline(chat.path)
    whole = conversation(timeline)["items"]
    seen = []
    start: int | None = 0
    while start is not None:
        page = conversation(timeline, start=start, limit=3)
        assert len(page["items"]) <= 3
        seen.extend(page["items"])
        start = page["next"]
    assert [i["seq"] for i in seen] == [i["seq"] for i in whole]


def test_long_bodies_are_clipped_and_say_so(tmp_path: Path) -> None:
    demo = record_demo(tmp_path / "big.jsonl", big_output="page " * 20_000)
    items = conversation(load_timeline(demo.path))["items"]
    fetch = next(i for i in items if i["kind"] == "tool_result" and i["tool"] == "fetch_page")
    (cut,) = fetch["cuts"]
    assert cut["kind"] == "string"
    assert cut["total"] == 100_000
    assert len(str(fetch["body"])) < 20_000


def test_a_run_without_committed_messages_shows_requests_and_replies(tmp_path: Path) -> None:
    """Frameworks that never write message_end: the prompt and the reply still show."""
    from loopscribe import AssistantMessage, Execution, Session, TextContent, UserMessage
    from loopscribe import events as ev

    path = tmp_path / "plain.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        ex = Execution("m1", "model")
        run.record(ev.model_request(ex, [UserMessage("first question")]))
        run.record(ev.model_exec_end(ex, message=AssistantMessage((TextContent("first answer"),))))
    items = conversation(load_timeline(path))["items"]
    assert [(i["kind"], i["role"], i["type"]) for i in items] == [
        ("message", "user", "model_request"),
        ("message", "assistant", "model_exec_end"),
    ]


def test_an_imported_claude_code_subagent_is_a_thread(tmp_path: Path) -> None:
    report = import_transcript(TRANSCRIPTS / "claude-code" / "subagent.jsonl", tmp_path)
    items = conversation(load_timeline(report.destination))["items"]
    nested = [i for i in items if i["depth"] > 0]
    assert nested, "the Task subagent's records form a thread"
    assert {i["thread_agent"] for i in nested} == {"Plan"}
    assert any(i["kind"] == "tool_call" for i in nested)
    # Anthropic message dicts reach the page as recorded.
    first = next(i for i in items if i["kind"] == "message" and i["role"] == "assistant")
    assert first["body"]["type"] == "message"


@pytest.fixture
def client(chat: Demo) -> Iterator[TestClient]:
    with TestClient(create_app(chat.path.parent), base_url="http://127.0.0.1") as c:
        yield c


def test_session_page_embeds_the_first_page_and_the_api_pages_on(
    client: TestClient, chat: Demo
) -> None:
    from .test_app import page_data

    data = page_data(client.get(f"/session/{chat.session_id}").text)
    assert data["conversation"]["items"][0]["kind"] == "message"
    api = client.get(f"/api/session/{chat.session_id}/conversation?from=12&limit=2").json()
    assert [i["seq"] for i in api["items"]] == [12, 16]
    assert api["next"] == 17
    assert client.get(f"/api/session/{chat.session_id}/conversation?from=x").status_code == 400


def test_an_imported_codex_session_keeps_its_reasoning_items(tmp_path: Path) -> None:
    from loopscribe.importers.codex import import_transcript as import_codex

    rollout = sorted((TRANSCRIPTS / "codex").glob("*.jsonl"))[0]
    report = import_codex(rollout, tmp_path)
    items = conversation(load_timeline(report.destination))["items"]
    reasoning = [i for i in items if i["kind"] == "message" and i["role"] == "reasoning"]
    assert reasoning
    assert reasoning[0]["body"]["summary"][0]["type"] == "summary_text"
    calls = [i for i in items if i["kind"] == "tool_call"]
    results = [i for i in items if i["kind"] == "tool_result"]
    assert len(calls) == len(results) > 0
