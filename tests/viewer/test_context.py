"""An imported call's context in the viewer: the committed messages that formed it.

Imported transcripts record model requests without messages. The viewer's
record JSON (the span's records, the record page, the record API) carries
``context``: the same messages :func:`resolve_reference` gives for the call's
``gen_ai.input.messages_ref``, labelled as derived from the conversation.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from starlette.testclient import TestClient

from loopscribe import Execution, Session, UserMessage, read
from loopscribe import events as ev
from loopscribe._preview import snippet
from loopscribe._timeline import load_timeline
from loopscribe.importers import claude_code
from loopscribe.otel import resolve_reference
from loopscribe.otel._genai import input_messages
from loopscribe.viewer import create_app
from loopscribe.viewer._context import derived_context
from loopscribe.viewer._report import build_report

from .test_report import records_of

TRANSCRIPTS = Path(__file__).parents[1] / "data" / "transcripts" / "claude-code"
COMPACTED = "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Claude Code session with a compaction, imported into a folder of its own."""
    out = tmp_path_factory.mktemp("imported")
    claude_code.import_transcript(TRANSCRIPTS / COMPACTED, out, finished=True)
    return out / COMPACTED


@pytest.fixture(scope="module")
def client(imported: Path) -> Iterator[TestClient]:
    with TestClient(create_app(imported.parent), base_url="http://127.0.0.1") as c:
        yield c


def page_data(html: str) -> Any:
    """The JSON a page embeds for its script."""
    match = re.search(r'<script id="ls-data" type="application/json">(.*?)</script>', html, re.S)
    assert match is not None
    return orjson.loads(match[1])


def requests_and_compaction(path: Path) -> tuple[list[Any], int]:
    records = list(read(path, decode=False))
    requests = [r for r in records if r.type == ev.MODEL_REQUEST]
    (compaction,) = [r.seq for r in records if r.type == ev.COMPACTION]
    return requests, compaction


def agent_of(executions: dict[str, Execution], execution: Execution | None) -> str | None:
    """The nested agent (a subagent) whose own conversation ``execution`` is part of."""
    while execution is not None:
        if execution.kind == "agent" and execution.parent_id is not None:
            return execution.id
        execution = executions.get(execution.parent_id or "")
    return None


def test_every_imported_call_shows_the_context_its_reference_resolves_to(imported: Path) -> None:
    """Before and after the compaction, the view's messages are the reference's messages."""
    timeline = load_timeline(imported)
    requests, compaction = requests_and_compaction(imported)
    records = {r.seq: r for r in read(imported, decode=False)}
    parents = {r.execution.id: r.execution for r in records.values() if r.execution is not None}
    before = [r for r in requests if r.seq < compaction]
    after = [r for r in requests if r.seq > compaction]
    # Both ends, both sides of the compaction, and a spread between them.
    chosen = {r.seq: r for r in [*requests[:: max(1, len(requests) // 6)], before[-1], after[0]]}
    chosen.update({requests[0].seq: requests[0], requests[-1].seq: requests[-1]})
    for request in chosen.values():
        context = derived_context(timeline, request.seq, string_limit=None, limit=10_000)
        resolved = resolve_reference(imported, request.seq)["gen_ai.input.messages"]
        assert resolved, request.seq  # never an empty context for an imported call
        assert input_messages(context["messages"]) == resolved, request.seq
        assert context["derived_from"] == "conversation"
        assert context["omitted"] == 0
        own = agent_of(parents, request.execution)
        compacted = own is None and request.seq > compaction
        assert context["summary_seq"] == (compaction if compacted else None)
        since = compaction if compacted else -1
        assert context["seqs"] == [
            s
            for s, r in records.items()
            if r.type == ev.MESSAGE_END
            and since < s < request.seq
            and agent_of(parents, r.execution) == own
        ]


def test_a_long_context_shows_its_latest_messages_and_counts_the_rest(imported: Path) -> None:
    timeline = load_timeline(imported)
    requests, compaction = requests_and_compaction(imported)
    last = requests[-1].seq
    whole = derived_context(timeline, last, limit=10_000)
    cut = derived_context(timeline, last, limit=3)
    assert len(whole["seqs"]) > 3
    assert cut["seqs"] == whole["seqs"][-3:]
    assert cut["omitted"] == len(whole["seqs"]) - 3
    assert cut["summary_seq"] == compaction
    # The summary still opens it, then the three latest messages.
    assert cut["messages"] == [whole["messages"][0], *whole["messages"][-3:]]
    assert "continued from a previous conversation" in orjson.dumps(cut["messages"][0]).decode()


def test_the_span_records_and_record_api_carry_the_context(
    imported: Path, client: TestClient
) -> None:
    """What the run page's details pane and the record page load has ``context``."""
    requests, _ = requests_and_compaction(imported)
    request = requests[-1]
    sid = request.session_id
    timeline = load_timeline(imported)
    run = timeline.runs[request.run_id or ""]
    bar = next(b for b in run.bars.values() if request.seq in b.seqs)
    span = client.get(f"/api/session/{sid}/span/{bar.span_id:016x}").json()
    shown = next(r for r in span["records"] if r["seq"] == request.seq)
    expected = derived_context(timeline, request.seq)
    assert shown["context"]["seqs"] == expected["seqs"]
    assert shown["context"]["messages"] == expected["messages"]
    assert shown["context"]["derived_from"] == "conversation"
    # The other records of the bar are as recorded: no context invented for them.
    assert all("context" not in r for r in span["records"] if r["seq"] != request.seq)

    api = client.get(f"/api/session/{sid}/record/{request.seq}").json()
    assert api["context"]["seqs"] == expected["seqs"]
    page = client.get(f"/session/{sid}/record/{request.seq}").text
    assert page_data(page)["record"]["context"]["seqs"] == expected["seqs"]


def test_a_huge_committed_message_is_clipped_with_a_cut_the_page_can_show(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    big = "x" * 100_000
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.message_end(None, UserMessage(big)))
        model = Execution("model_1", "model")
        run.record(ev.model_exec_start(model, "claude-x"))
        run.record(ev.model_request(model, [], model="claude-x"))
    request = next(r for r in read(path, decode=False) if r.type == ev.MODEL_REQUEST)
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        got = client.get(f"/api/session/{request.session_id}/record/{request.seq}").json()
    (cut,) = [c for c in got["cuts"] if c["path"][0] == "context"]
    assert cut["kind"] == "string"
    assert cut["total"] == 100_000
    assert cut["path"][:3] == ["context", "messages", 0]
    assert len(orjson.dumps(got["context"]["messages"])) < 50_000


def test_a_recorded_request_keeps_its_own_messages_and_gets_no_context(tmp_path: Path) -> None:
    path = tmp_path / "live.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        run.record(ev.message_end(None, UserMessage("earlier")))
        model = Execution("model_1", "model")
        run.record(ev.model_exec_start(model, "claude-x"))
        run.record(ev.model_request(model, [UserMessage("Weather in Lisbon?")]))
        bare = Execution("model_2", "model")
        run.record(ev.model_exec_start(bare, "claude-x"))
        run.record(ev.model_request(bare, [], model="claude-x"))
    requests = [r for r in read(path, decode=False) if r.type == ev.MODEL_REQUEST]
    with TestClient(create_app(tmp_path), base_url="http://127.0.0.1") as client:
        sid = requests[0].session_id
        own = client.get(f"/api/session/{sid}/record/{requests[0].seq}").json()
        assert "context" not in own
        assert own["data"]["messages"][0]["content"] == "Weather in Lisbon?"
        derived = client.get(f"/api/session/{sid}/record/{requests[1].seq}").json()
    # The only committed message before the bare request is "earlier".
    assert [m["content"] for m in derived["context"]["messages"]] == ["earlier"]


def test_a_call_before_any_commit_has_an_empty_derived_context(tmp_path: Path) -> None:
    path = tmp_path / "first.jsonl"
    with Session.create(path) as session, session.begin_run() as run:
        model = Execution("model_1", "model")
        run.record(ev.model_exec_start(model, "claude-x"))
        run.record(ev.model_request(model, [], model="claude-x"))
    request = next(r for r in read(path, decode=False) if r.type == ev.MODEL_REQUEST)
    context = derived_context(load_timeline(path), request.seq)
    assert context == {
        "derived_from": "conversation",
        "summary_seq": None,
        "seqs": [],
        "omitted": 0,
        "messages": [],
        "cuts": [],
    }


def test_the_report_names_the_context_records_and_embeds_them(imported: Path) -> None:
    """A report does not copy each call's context; it names records it holds."""
    requests, compaction = requests_and_compaction(imported)
    records = records_of(build_report(imported))
    last = records[str(requests[-1].seq)]
    assert "messages" not in last["context"]
    assert last["context"]["summary_seq"] == compaction
    assert str(compaction) in records  # the summary's record is there to look up
    assert all(str(seq) in records for seq in last["context"]["seqs"])


def test_a_subagents_call_sees_its_own_conversation_not_the_parents(tmp_path: Path) -> None:
    """A Claude Code subagent starts from its prompt: the main thread is not its context."""
    path = claude_code.import_transcript(
        TRANSCRIPTS / "subagent.jsonl", tmp_path, finished=True
    ).destination
    records = list(read(path, decode=False))
    agent = next(r.execution for r in records if r.type == ev.AGENT_START)
    assert agent is not None
    assert agent.parent_id is not None
    prompts = [
        r.data["message"]
        for r in records
        if r.type == ev.MESSAGE_END and r.execution is not None and r.execution.id == agent.id
    ]
    assert prompts  # the subagent's prompt is committed under its agent execution
    inner = [
        r
        for r in records
        if r.type == ev.MODEL_REQUEST
        and r.execution is not None
        and r.execution.parent_id == agent.id
    ]
    outer = [r for r in records if r.type == ev.MODEL_REQUEST and r.seq > inner[-1].seq]
    assert inner
    assert outer
    timeline = load_timeline(path)
    for request in inner:
        resolved = resolve_reference(path, request.seq)["gen_ai.input.messages"]
        assert resolved == input_messages(prompts), request.seq
        context = derived_context(timeline, request.seq, string_limit=None)
        assert input_messages(context["messages"]) == resolved
    # Back in the main thread, the context is the main conversation again, grown
    # by its own turns and without the subagent's prompt.
    after = resolve_reference(path, outer[0].seq)["gen_ai.input.messages"]
    assert input_messages(prompts)[0] not in after
    assert len(after) > len(prompts)


SMALL_TRANSCRIPTS = [
    ("claude-code", "short.jsonl"),
    ("claude-code", "subagent.jsonl"),
    ("claude-code", "tool_heavy.jsonl"),
    ("codex", "rollout-2025-09-25T08-02-05-0199812e-64f0-7f73-91fc-095dda01c36e.jsonl"),
]


@pytest.mark.parametrize(("source", "name"), SMALL_TRANSCRIPTS)
def test_other_imported_transcripts_agree_with_the_reference_too(
    tmp_path: Path, source: str, name: str
) -> None:
    """Subagents, many tools, another agent's format: every request, the same context."""
    if source == "codex":
        from loopscribe.importers import codex

        path = codex.import_transcript(TRANSCRIPTS.parent / source / name, tmp_path).destination
    else:
        path = claude_code.import_transcript(
            TRANSCRIPTS / name, tmp_path, finished=True
        ).destination
    timeline = load_timeline(path)
    bare = [
        r
        for r in read(path, decode=False)
        if r.type == ev.MODEL_REQUEST and not r.data.get("messages")
    ]
    assert bare
    for request in bare:
        context = derived_context(timeline, request.seq, string_limit=None, limit=10_000)
        resolved = resolve_reference(path, request.seq)["gen_ai.input.messages"]
        assert input_messages(context["messages"]) == resolved, request.seq


def test_an_imported_call_row_previews_the_last_user_message_before_it(imported: Path) -> None:
    """The timeline row's prompt preview, as a recorded request's: its run's last user
    message, committed before the call and since the last compaction (never across it)."""
    records = list(read(imported, decode=False))
    (compaction,) = [r.seq for r in records if r.type == ev.COMPACTION]

    def expected(request: Any) -> str | None:
        since = compaction if request.seq > compaction else -1
        for r in reversed(records[: request.seq]):
            if r.seq <= since:
                return None
            if r.type == ev.MESSAGE_END and r.run_id == request.run_id:
                message = r.data["message"]
                if isinstance(message, dict) and message.get("role") == "user":
                    return snippet(message.get("content")) or None
        return None

    timeline = load_timeline(imported)
    previews = {}
    for run in timeline.iter_runs():
        for row in run.to_json(limit=10_000)["rows"]:
            for bar in row["bars"]:
                if bar["kind"] == "model":
                    previews[bar["seqs"][0]] = bar["preview"]
    requests = {r.seq: r for r in records if r.type == ev.MODEL_REQUEST}
    assert set(previews) <= set(requests)
    shown = [seq for seq, text in previews.items() if text]
    assert shown  # some calls have a user message before them ...
    assert len(shown) < len(previews)  # ... and after the compaction some have none
    for seq, text in previews.items():
        assert text == expected(requests[seq]), seq
