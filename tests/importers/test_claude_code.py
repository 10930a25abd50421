"""The Claude Code importer, on real transcripts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan

import loopscribe
from loopscribe.importers import SOURCE_EVENT, ImportStateError, claude_code
from loopscribe.importers._cursor import cursor_path
from loopscribe.otel import _bridge

from ._support import (
    attribute_text,
    body_strings,
    copy_transcript,
    freshen,
    ids,
    line_offsets,
    lines,
    normal_form,
    records,
    source_line,
    source_ref,
    span_structure,
    spans,
    split_at,
    transcripts,
)

FILES = transcripts("claude-code")
BIG = next(p for p in FILES if p.stem.startswith("4d5611e5"))
SUBAGENT_PROGRESS = next(p for p in FILES if p.stem == "subagent")
SHORT = next(p for p in FILES if p.stem == "short")
INLINE_SIDECHAINS = next(p for p in FILES if p.stem.startswith("5c0375b4"))
HAS_SOURCE_REFS = hasattr(_bridge, "LS_SOURCE_FILE")


# -- independent counts ------------------------------------------------------------


@dataclass
class Counts:
    """What a transcript holds, counted straight from its lines."""

    tool_calls: int = 0
    tool_results: int = 0
    responses: int = 0
    usage: Counter[str] = field(default_factory=Counter)

    def add_lines(self, objs: list[dict[str, Any]]) -> None:
        """Count assistant responses, tool calls and results, and usage once per message id."""
        last_usage: dict[str, dict[str, int]] = {}
        for obj in objs:
            message = obj.get("message")
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            if obj.get("type") == "assistant":
                last_usage[message["id"]] = message.get("usage") or {}
                self.tool_calls += sum(1 for b in blocks if b.get("type") == "tool_use")
            elif obj.get("type") == "user":
                self.tool_results += sum(1 for b in blocks if b.get("type") == "tool_result")
        self.responses += len(last_usage)
        for usage in last_usage.values():
            for key in (
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            ):
                self.usage[key] += usage.get(key) or 0


def source_counts(path: Path) -> Counts:
    """Count a transcript, its subagent files, and subagents only seen in progress lines."""
    counts = Counts()
    main = list(lines(path))
    counts.add_lines(main)
    sub_dir = path.parent / path.stem / "subagents"
    progress: dict[str, list[dict[str, Any]]] = {}
    for obj in main:
        data = obj.get("data") or {}
        if obj.get("type") == "progress" and data.get("type") == "agent_progress":
            agent = data["agentId"]
            if not (sub_dir / f"agent-{agent}.jsonl").exists():
                progress.setdefault(agent, []).append(data["message"])
    for messages in progress.values():
        counts.add_lines(messages)
    if sub_dir.is_dir():
        for sub in sorted(sub_dir.glob("agent-*.jsonl")):
            counts.add_lines(list(lines(sub)))
    for beside in sorted(path.parent.glob("agent-*.jsonl")):  # Claude Code 2.0's layout
        sub_lines = list(lines(beside))
        if sub_lines and sub_lines[0].get("sessionId") == path.stem:
            counts.add_lines(sub_lines)
    return counts


def dest_counts(dest: Path) -> Counts:
    """The same counts, from the records of an imported session."""
    counts = Counts()
    for r in records(dest):
        if r.type == "tool_exec_start":
            counts.tool_calls += 1
        elif r.type == "tool_exec_end":
            counts.tool_results += 1
        elif r.type == "model_exec_end":
            counts.responses += 1
            for key, value in (r.data.get("usage") or {}).items():
                if isinstance(value, int):
                    counts.usage[key] += value
    keep = (
        "input_tokens",
        "output_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    )
    counts.usage = Counter({k: v for k, v in counts.usage.items() if k in keep})
    return counts


def imported(source: Path, out: Path, **options: Any) -> Path:
    """Import ``source`` (finished unless told otherwise); the destination path."""
    options.setdefault("finished", True)
    claude_code.import_transcript(source, out, **options)
    return out / f"{source.stem}.jsonl"


@pytest.fixture(scope="module")
def whole_spans(whole: dict[str, Path]) -> dict[str, list[ReadableSpan]]:
    """The spans of every whole import, replayed once."""
    return {p.stem: spans(whole[p.stem + ":dest"]) for p in FILES}


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every transcript copied and imported whole once: source and destination by name."""
    root = tmp_path_factory.mktemp("whole")
    out: dict[str, Path] = {}
    for path in FILES:
        source = copy_transcript(path, root / "src")
        out[path.stem] = source
        out[path.stem + ":dest"] = imported(source, root / "out")
    return out


# -- every file --------------------------------------------------------------------


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_counts_match_the_source(path: Path, whole: dict[str, Path]) -> None:
    """Tool calls, results, responses and token totals equal counts taken from the source."""
    expected = source_counts(whole[path.stem])
    found = dest_counts(whole[path.stem + ":dest"])
    assert found.tool_calls == expected.tool_calls
    assert found.tool_results == expected.tool_results
    assert found.responses == expected.responses
    assert found.usage == expected.usage
    assert expected.responses > 0


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_report_matches_the_records(path: Path, tmp_path: Path) -> None:
    """The import report counts what was written, and every tool call is paired or reported."""
    source = copy_transcript(path, tmp_path / "src")
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    dest = report.destination
    found = records(dest)
    kinds = Counter(r.type for r in found)
    assert report.records == len(found) - 1  # all but session_start
    assert report.tool_calls == kinds["tool_exec_start"]
    assert report.tool_results == kinds["tool_exec_end"]
    assert report.model_calls == kinds["model_exec_end"]
    assert sum(report.unknown.values()) == kinds[SOURCE_EVENT]
    starts = {r.execution.id for r in found if r.type == "tool_exec_start" and r.execution}
    ends = {r.execution.id for r in found if r.type == "tool_exec_end" and r.execution}
    assert len(starts - ends) == report.unpaired_calls
    assert report.pending_calls == 0
    assert kinds["run_start"] == kinds["run_close"]  # finished: every turn closed
    counts = dest_counts(dest)
    assert report.output_tokens == counts.usage["output_tokens"]
    assert report.input_tokens == (
        counts.usage["input_tokens"]
        + counts.usage["cache_read_input_tokens"]
        + counts.usage["cache_creation_input_tokens"]
    )


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_importing_twice_changes_nothing(path: Path, tmp_path: Path) -> None:
    """A second import of an unchanged transcript writes nothing and keeps the cursor."""
    source = copy_transcript(path, tmp_path / "src")
    dest = imported(source, tmp_path / "out")
    before = dest.read_bytes(), cursor_path(dest).read_bytes()
    again = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert again.up_to_date
    assert again.records == 0
    assert (dest.read_bytes(), cursor_path(dest).read_bytes()) == before


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_split_import_equals_whole(
    path: Path,
    tmp_path: Path,
    whole: dict[str, Path],
    whole_spans: dict[str, list[ReadableSpan]],
) -> None:
    """A transcript imported as it grows (cut at the middle, inside a line) equals one import."""
    offsets = line_offsets(path)
    middle = offsets[len(offsets) // 2]
    cuts = [middle, middle + 7] if middle + 7 < offsets[-1] else [middle]
    if path == BIG:
        cuts = [middle + 7]  # line boundaries of BIG: test_a_response_split_across_imports
    expected = normal_form(whole[path.stem + ":dest"])
    there = {
        str(whole[path.stem].parent): "<src>",
        str(whole[path.stem + ":dest"].parent): "<out>",
    }
    expected_spans = span_structure(whole_spans[path.stem], there)
    for cut in cuts:
        folder = tmp_path / f"cut{cut}"
        source = copy_transcript(path, folder / "src")
        rest = split_at(path, cut, source)
        first = claude_code.import_transcript(source, folder / "out", finished=False)
        with open(source, "ab") as stream:
            stream.write(rest)
        second = claude_code.import_transcript(source, folder / "out", finished=True)
        dest = folder / "out" / f"{path.stem}.jsonl"
        # The source path is in every record; both copies have the same name.
        assert _relocated(normal_form(dest), source, whole[path.stem]) == expected
        here = {str(source.parent): "<src>", str(dest.parent): "<out>"}
        assert span_structure(spans(dest), here) == expected_spans
        assert first.records + second.records == len(expected)


def _relocated(form: list[tuple[Any, ...]], old: Path, new: Path) -> list[tuple[Any, ...]]:
    """A normal form with one transcript's folder replaced by another's."""
    a, b = str(old.parent).encode(), str(new.parent).encode()
    return [(*row[:-1], row[-1].replace(a, b)) for row in form]


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_spans_carry_no_body_text(
    path: Path, whole: dict[str, Path], whole_spans: dict[str, list[ReadableSpan]]
) -> None:
    """No message, argument or tool-output text from the transcript reaches a span."""
    found = whole_spans[path.stem]
    haystack = attribute_text(found)
    bodies = body_strings(whole[path.stem])
    assert bodies
    leaked = [b for b in bodies if b in haystack]
    assert leaked == []


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_tool_spans_nest_under_their_chat_span(
    path: Path, whole_spans: dict[str, list[ReadableSpan]]
) -> None:
    """Every tool call is an execute_tool span whose parent is the chat span that requested it."""
    found = whole_spans[path.stem]
    by_id = {s.context.span_id: s for s in found}
    tools = [s for s in found if s.name.startswith("execute_tool ")]
    assert tools
    for span in tools:
        assert span.parent is not None
        parent = by_id[span.parent.span_id]
        assert parent.name.startswith("chat claude")
        assert span.attributes is not None
        assert span.attributes["gen_ai.tool.call.id"] == span.attributes["loopscribe.execution.id"]


# -- subagents and compaction ----------------------------------------------------------


def _ancestors(span_id: int, by_id: dict[int, Any]) -> list[str]:
    names = []
    span = by_id.get(span_id)
    while span is not None and span.parent is not None:
        span = by_id.get(span.parent.span_id)
        if span is not None:
            names.append(span.name)
    return names


def _execution(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get("loopscribe.execution.id", ""))


def _kind(span: ReadableSpan) -> str:
    return str((span.attributes or {}).get("loopscribe.execution.kind", ""))


def test_subagent_file_nests_under_its_task_call(whole: dict[str, Path]) -> None:
    """The records of a subagents/agent-*.jsonl file nest under the Task tool call that ran it."""
    dest = whole[BIG.stem + ":dest"]
    sub_file = str(whole[BIG.stem].parent / BIG.stem / "subagents" / "agent-a2898e3.jsonl")
    found = records(dest)
    from_file = [r for r in found if r.data.get("source", {}).get("file") == sub_file]
    assert len(from_file) > 40
    found_spans = spans(dest)
    by_id = {s.context.span_id: s for s in found_spans}
    agent = next(s for s in found_spans if _execution(s).startswith("agent-a2898e3"))
    assert agent.name.startswith("invoke_agent")
    assert agent.parent is not None
    task = by_id[agent.parent.span_id]
    assert task.name == "execute_tool Task"
    assert task.attributes is not None
    assert task.attributes["gen_ai.tool.call.id"] == "toolu_017pLRuPHYTX5t99EnLyV53m"
    inside = [
        s
        for s in found_spans
        if "execute_tool Task" in _ancestors(s.context.span_id, by_id)
        and s.name.startswith(("chat", "execute_tool"))
    ]
    assert sum(1 for s in inside if s.name.startswith("execute_tool")) == 33
    assert all(s.name.startswith(("chat claude-sonnet", "execute_tool")) for s in inside)


def test_subagent_from_progress_lines_nests_under_its_task_call(whole: dict[str, Path]) -> None:
    """Without a subagent file, the agent_progress lines give the nested subagent."""
    found_spans = spans(whole[SUBAGENT_PROGRESS.stem + ":dest"])
    by_id = {s.context.span_id: s for s in found_spans}
    agent = next(s for s in found_spans if _kind(s) == "agent")
    assert agent.name.startswith("invoke_agent")
    assert agent.parent is not None
    assert by_id[agent.parent.span_id].name == "execute_tool Task"
    chats = [s for s in found_spans if s.parent and s.parent.span_id == agent.context.span_id]
    assert chats
    assert all(s.name == "chat claude-haiku-4-5-20251001" for s in chats)


def test_inline_sidechain_lines_nest_under_their_task_call(whole: dict[str, Path]) -> None:
    """Claude Code 1.0 writes a subagent's lines into the main transcript: they nest too."""
    objs = list(lines(INLINE_SIDECHAINS))
    prompts = {
        b["id"]: b["input"]["prompt"]
        for o in objs
        if o.get("type") == "assistant"
        for b in o["message"]["content"]
        if b.get("type") == "tool_use" and "prompt" in b["input"]
    }
    roots = {
        n: o["message"]["content"]
        for n, o in enumerate(objs, 1)
        if o.get("isSidechain") and o.get("parentUuid") is None
    }
    assert len(prompts) == len(roots) == 2
    found = records(whole[INLINE_SIDECHAINS.stem + ":dest"])
    agents = {r.execution.id: r.execution for r in found if r.type == "agent_start" and r.execution}
    assert len(agents) == 2
    # Each subagent's first record is its root line, and its prompt is that of its Task call.
    for r in found:
        if r.type == "agent_start" and r.execution:
            assert r.data["source"]["line"] in roots
            assert prompts[str(r.execution.parent_id)] == roots[r.data["source"]["line"]]
    sidechain_lines = {n for n, o in enumerate(objs, 1) if o.get("isSidechain")}
    under: dict[str, str | None] = {}
    for r in found:
        if r.execution is not None:
            under[r.execution.id] = r.execution.parent_id
    for r in found:
        line = r.data.get("source", {}).get("line") if isinstance(r.data, dict) else None
        if line in sidechain_lines and r.type in ("message_end", "tool_exec_start"):
            assert r.execution is not None
            chain = [r.execution.id]
            while under.get(chain[-1]) is not None:
                chain.append(str(under[chain[-1]]))
            assert any(c in agents for c in chain), f"line {line} is not inside a subagent"
        elif line not in sidechain_lines and r.execution and r.type != "agent_end":
            assert not r.execution.id.startswith("agent-")  # the main agent's own lines
    found_spans = spans(whole[INLINE_SIDECHAINS.stem + ":dest"])
    by_id = {s.context.span_id: s for s in found_spans}
    invoked = [s for s in found_spans if _kind(s) == "agent"]
    assert len(invoked) == 2
    for agent in invoked:
        assert agent.parent is not None
        assert by_id[agent.parent.span_id].name == "execute_tool Task"
        assert any(s.parent and s.parent.span_id == agent.context.span_id for s in found_spans)


def test_a_sidechain_no_call_claims_is_a_subagent_of_its_own(tmp_path: Path) -> None:
    """Sidechain lines no waiting Task call claims are a subagent still, not the main agent."""
    base = {"sessionId": "s1", "version": "1.0.98", "cwd": "/w"}
    objs: list[dict[str, Any]] = [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "isSidechain": False,
            "timestamp": "2025-09-03T00:00:00.000Z",
            "message": {"role": "user", "content": "go"},
        },
        {
            "type": "user",
            "uuid": "s1",
            "parentUuid": None,
            "isSidechain": True,
            "timestamp": "2025-09-03T00:00:01.000Z",
            "message": {"role": "user", "content": "Warmup"},
        },
        {
            "type": "assistant",
            "uuid": "s2",
            "parentUuid": "s1",
            "isSidechain": True,
            "timestamp": "2025-09-03T00:00:02.000Z",
            "message": {
                "id": "msg_s",
                "role": "assistant",
                "model": "claude-haiku",
                "content": [{"type": "text", "text": "ready"}],
            },
        },
        {
            "type": "assistant",
            "uuid": "a1",
            "parentUuid": "u1",
            "isSidechain": False,
            "timestamp": "2025-09-03T00:00:03.000Z",
            "message": {
                "id": "msg_m",
                "role": "assistant",
                "model": "claude-sonnet",
                "content": [{"type": "text", "text": "done"}],
            },
        },
    ]
    source = tmp_path / "t.jsonl"
    source.write_bytes(b"".join(orjson.dumps({**base, **o}) + b"\n" for o in objs))
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert report.subagents == 1
    found = records(report.destination)
    agent = next(r.execution for r in found if r.type == "agent_start")
    assert agent is not None
    assert agent.parent_id is None
    side = [r for r in found if r.data.get("source", {}).get("line") in (2, 3)]
    assert {r.type for r in side} >= {"message_end", "model_request", "model_exec_end"}
    assert all(r.execution is not None for r in side)
    main_call = next(
        r for r in found if r.type == "model_exec_end" and r.data["model"] == "claude-sonnet"
    )
    assert main_call.execution is not None
    assert main_call.execution.parent_id is None
    sub_call = next(
        r for r in found if r.type == "model_exec_end" and r.data["model"] == "claude-haiku"
    )
    assert sub_call.execution is not None
    assert sub_call.execution.parent_id == agent.id


def _jsonl(path: Path, objs: list[dict[str, Any]], **common: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps({**common, **o}) + b"\n" for o in objs))
    return path


def _said(uuid: str, parent: str | None, ts: str, kind: str, content: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message.update(id=f"msg_{uuid}", model="claude-sonnet-4-5")
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "timestamp": ts, "message": message}


def test_subagent_files_beside_the_transcript_are_its_own(tmp_path: Path) -> None:
    """Claude Code 2.0 kept agent-<id>.jsonl beside its sessions: each joins the one it names."""
    project = tmp_path / "projects" / "-w"
    task: dict[str, Any] = {"type": "tool_use", "id": "toolu_t1", "name": "Task"}
    task["input"] = {"subagent_type": "Explore", "prompt": "look around"}
    result = {"type": "tool_result", "tool_use_id": "toolu_t1", "content": "found it"}
    main = [
        _said("u1", None, "2026-01-02T19:11:20.000Z", "user", "explore please"),
        _said("a1", "u1", "2026-01-02T19:11:21.000Z", "assistant", [task]),
        {
            **_said("u2", "a1", "2026-01-02T19:11:30.000Z", "user", [result]),
            "toolUseResult": {"status": "completed", "agentId": "e5f6a7b"},
        },
        _said(
            "a2", "u2", "2026-01-02T19:11:31.000Z", "assistant", [{"type": "text", "text": "ok"}]
        ),
    ]
    agent = [
        _said("s1", None, "2026-01-02T19:11:22.000Z", "user", "look around"),
        _said("s2", "s1", "2026-01-02T19:11:29.000Z", "assistant", [{"type": "text", "text": "x"}]),
    ]
    warmup = [
        _said("w1", None, "2026-01-02T19:11:19.000Z", "user", "Warmup"),
        _said(
            "w2", "w1", "2026-01-02T19:11:19.500Z", "assistant", [{"type": "text", "text": "hi"}]
        ),
    ]
    source = _jsonl(project / "s-main.jsonl", main, sessionId="s-main", version="2.0.76")
    side = {"sessionId": "s-main", "isSidechain": True, "version": "2.0.76"}
    _jsonl(project / "agent-e5f6a7b.jsonl", agent, agentId="e5f6a7b", **side)
    _jsonl(project / "agent-0a1b2c3.jsonl", warmup, agentId="0a1b2c3", **side)
    other = {**side, "sessionId": "s-other"}
    _jsonl(project / "agent-9d8e7f6.jsonl", warmup, agentId="9d8e7f6", **other)
    assert claude_code.find_transcripts(tmp_path / "projects") == [source]
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert report.subagents == 2
    found = records(report.destination)
    files = {Path(r.data["source"]["file"]).name for r in found if "source" in r.data}
    assert files == {"s-main.jsonl", "agent-e5f6a7b.jsonl", "agent-0a1b2c3.jsonl"}
    starts = {
        r.execution.id: r.execution.parent_id
        for r in found
        if r.type == "agent_start" and r.execution
    }
    assert starts == {"agent-e5f6a7b": "toolu_t1", "agent-0a1b2c3": None}
    spans_found = spans(report.destination)
    by_id = {s.context.span_id: s for s in spans_found}
    explore = next(s for s in spans_found if _execution(s) == "agent-e5f6a7b")
    assert explore.parent is not None
    assert by_id[explore.parent.span_id].name == "execute_tool Task"


def test_lines_before_the_first_timestamp_take_it(tmp_path: Path) -> None:
    """Summary lines heading a resumed transcript have no time: they get the first line's."""
    objs = [
        {"type": "summary", "summary": "Repo setup", "leafUuid": "x"},
        {"type": "summary", "summary": "Older summary", "leafUuid": "y"},
        {**_said("u1", None, "2025-09-03T00:52:31.217Z", "user", "hello"), "sessionId": "s"},
        {**_said("a1", "u1", "2025-09-03T00:52:34.495Z", "assistant", "hi"), "sessionId": "s"},
    ]
    source = _jsonl(tmp_path / "s.jsonl", objs)
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    found = records(report.destination)
    first = datetime(2025, 9, 3, 0, 52, 31, 217000, tzinfo=UTC)
    from_summaries = [r for r in found if r.data.get("source", {}).get("line") in (1, 2)]
    assert {r.type for r in from_summaries} == {"session_update", "source_event"}
    assert all(r.ts == first for r in from_summaries)
    assert next(r for r in found if r.type == "session_update").data["fields"] == {
        "title": "Repo setup"
    }
    # The summaries' records open no run of their own: the prompt joins theirs.
    runs = {r.run_id for r in found if r.run_id is not None}
    assert len(runs) == 1
    assert sum(1 for r in found if r.type == "run_start") == 1


def test_a_command_and_its_output_are_one_turn(whole: dict[str, Path]) -> None:
    """A command's caveat before it and what it printed after it are in the command's run."""
    tool_heavy = next(p for p in FILES if p.stem == "tool_heavy")
    objs = list(lines(tool_heavy))
    command = next(
        n
        for n, o in enumerate(objs, 1)
        if o.get("type") == "user" and str(o["message"]["content"]).startswith("<command-name>")
    )
    printed = command + 1
    assert str(objs[printed - 1]["message"]["content"]).startswith("<local-command-stdout>")
    found = records(whole[tool_heavy.stem + ":dest"])
    run_of = {
        r.data["source"]["line"]: r.run_id
        for r in found
        if r.type == "message_end" and "source" in r.data
    }
    assert run_of[printed] == run_of[command]
    assert run_of[command - 1] == run_of[command]  # the caveat before the command
    assert objs[command - 2]["isMeta"]
    prompts = [
        n
        for n, o in enumerate(objs, 1)
        if o.get("type") == "user"
        and isinstance(o["message"]["content"], str)
        and not o.get("isMeta")
        and not o["message"]["content"].startswith("<local-command-stdout>")
    ]
    assert sum(1 for r in found if r.type == "run_start") == len(prompts)


def test_an_api_error_in_the_models_place_is_a_failed_model_call(tmp_path: Path) -> None:
    """Claude Code writes a failed API call as a synthetic assistant line: the call failed."""
    text = "API Error: 529 Overloaded. This is a server-side issue, usually temporary."
    failed = _said("a1", "u1", "2026-08-19T13:41:00.000Z", "assistant", [])
    failed["message"].update(model="<synthetic>", content=[{"type": "text", "text": text}])
    failed.update(isApiErrorMessage=True, error="server_error", apiErrorStatus=529)
    limited = _said("a2", "u2", "2026-08-19T13:42:00.000Z", "assistant", [])
    limited["message"].update(model="<synthetic>", content=[{"type": "text", "text": "limit"}])
    limited.update(isApiErrorMessage=True, error={"status": 429, "message": "rate limited"})
    objs = [
        _said("u1", None, "2026-08-19T13:40:00.000Z", "user", "hello"),
        failed,
        _said("u2", "a1", "2026-08-19T13:41:30.000Z", "user", "again"),
        limited,
        _said("u3", "a2", "2026-08-19T13:43:00.000Z", "user", "and again"),
        _said("a3", "u3", "2026-08-19T13:43:05.000Z", "assistant", "hi"),
    ]
    source = _jsonl(tmp_path / "s.jsonl", objs, sessionId="s", version="2.1.226")
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    ends = [r for r in records(report.destination) if r.type == "model_exec_end"]
    assert [r.data.get("error") for r in ends] == [
        {"type": "server_error", "status": 529, "message": text},
        {"status": 429, "message": "rate limited"},
        None,
    ]
    assert "stop_reason" not in ends[0].data
    chats = sorted(
        (s for s in spans(report.destination) if s.name.startswith("chat")),
        key=lambda s: s.start_time or 0,
    )
    assert [s.status.status_code.name for s in chats] == ["ERROR", "ERROR", "UNSET"]
    assert [(s.attributes or {}).get("error.type") for s in chats] == [
        "server_error",
        "429",
        None,
    ]


def test_a_local_command_leaves_the_title_to_the_request_after_it(tmp_path: Path) -> None:
    """/clear prints and runs no model: the prompt after it titles the session, not /clear."""
    caveat = "Caveat: The messages below were generated by the user while running local commands."
    clear = "<command-name>/clear</command-name>\n<command-message>clear</command-message>\n"
    clear += "<command-args></command-args>"
    objs = [
        {**_said("u1", None, "2025-10-20T10:00:00.000Z", "user", caveat), "isMeta": True},
        _said("u2", "u1", "2025-10-20T10:00:00.000Z", "user", clear),
        _said(
            "u3",
            "u2",
            "2025-10-20T10:00:00.000Z",
            "user",
            "<local-command-stdout></local-command-stdout>",
        ),
        _said("u4", "u3", "2025-10-20T10:00:05.000Z", "user", "move the + button next to search"),
        _said("a1", "u4", "2025-10-20T10:00:09.000Z", "assistant", "done"),
        _said("u5", "a1", "2025-10-20T10:01:00.000Z", "user", "/init is not a title now"),
    ]
    source = _jsonl(tmp_path / "s.jsonl", objs, sessionId="s", version="2.0.28")
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    found = records(report.destination)
    titles = [r.data["fields"]["title"] for r in found if r.type == "session_update"]
    assert titles[-1] == "move the + button next to search"
    assert sum(1 for r in found if r.type == "run_start") == 3  # /clear, the request, the next


def test_compaction_is_a_context_span_with_its_summarizer(whole: dict[str, Path]) -> None:
    """A compact_boundary gives a context span with the acompact subagent inside, and a record."""
    dest = whole[BIG.stem + ":dest"]
    found = records(dest)
    compactions = [r for r in found if r.type == "compaction"]
    assert len(compactions) == 1
    assert "continued from a previous conversation" in orjson.dumps(compactions[0].data).decode()
    found_spans = spans(dest)
    by_id = {s.context.span_id: s for s in found_spans}
    context = next(s for s in found_spans if _execution(s).startswith("compact-"))
    assert context.name == "context"
    assert (context.attributes or {})["openinference.span.kind"] == "CHAIN"
    agent = next(s for s in found_spans if _execution(s).startswith("agent-acompact"))
    assert agent.parent is not None
    assert by_id[agent.parent.span_id] is context
    assert context.start_time is not None
    assert context.end_time is not None
    assert 60 < (context.end_time - context.start_time) / 1e9 < 120  # the summarizing call


def test_runs_are_turns_with_source_times(whole: dict[str, Path]) -> None:
    """Each prompt begins a run at its own timestamp; turn_duration closes it at its own."""
    dest = whole[BIG.stem + ":dest"]
    found = records(dest)
    starts = [r for r in found if r.type == "run_start"]
    closes = [r for r in found if r.type == "run_close"]
    assert len(starts) == len(closes) == 3
    assert starts[0].ts.isoformat().startswith("2026-02-12T16:02:25.284")
    assert closes[0].ts.isoformat().startswith("2026-02-12T16:08:07.223")  # turn_duration
    runs = [s for s in spans(dest) if "loopscribe.execution.id" not in (s.attributes or {})]
    assert len(runs) == 3
    assert all(s.name.startswith("invoke_agent") for s in runs)


def test_usage_is_counted_once_per_response(whole: dict[str, Path]) -> None:
    """A response split over five lines is one chat span with the usage of its last line."""
    found = records(whole[BIG.stem + ":dest"])
    ends = [r for r in found if r.type == "model_exec_end"]
    wanted = "msg_01Aci2WjhVxhEoZK5GJvwVrD"
    matching = [r for r in ends if r.execution is not None and r.execution.id == wanted]
    assert len(matching) == 1
    assert matching[0].data["usage"]["output_tokens"] == 299
    assert matching[0].data["stop_reason"] == "tool_use"


# -- source references -------------------------------------------------------------


def test_records_name_their_source_line(whole: dict[str, Path]) -> None:
    """Every host record names the transcript line it came from, and the line holds its ID."""
    found = records(whole[BIG.stem + ":dest"])
    for r in found:
        if r.type in ("session_start", "run_start", "run_close", "compaction"):
            continue
        source = r.data["source"]
        raw = source_line(source["file"], source["line"])
        if r.type in ("tool_exec_start", "model_exec_end") and r.execution is not None:
            assert r.execution.id.encode() in raw


@pytest.mark.skipif(not HAS_SOURCE_REFS, reason="the bridge does not copy source refs yet")
def test_spans_reference_the_transcript_line(whole: dict[str, Path]) -> None:
    """An execute_tool span names the transcript file and the line of its tool_use."""
    found = spans(whole[BIG.stem + ":dest"])
    tools = [s for s in found if s.name.startswith("execute_tool")]
    for span in tools:
        ref = source_ref(span)
        assert ref is not None
        call_id = (span.attributes or {})["gen_ai.tool.call.id"]
        assert str(call_id).encode() in source_line(*ref)


# -- incremental import ------------------------------------------------------------


def test_a_response_split_across_imports_is_one_span(
    tmp_path: Path, whole: dict[str, Path]
) -> None:
    """Cut between two lines of one response while its tool calls wait: same records and spans."""
    offsets = line_offsets(BIG)
    for line in (115, 121):  # inside msg_01Aci2WjhVxhEoZK5GJvwVrD, results pending
        folder = tmp_path / str(line)
        source = copy_transcript(BIG, folder / "src")
        rest = split_at(BIG, offsets[line], source)
        first = claude_code.import_transcript(source, folder / "out", finished=False)
        assert first.pending_calls > 0 or line == 115
        with open(source, "ab") as stream:
            stream.write(rest)
        claude_code.import_transcript(source, folder / "out", finished=True)
        dest = folder / "out" / f"{BIG.stem}.jsonl"
        assert _relocated(normal_form(dest), source, whole[BIG.stem]) == normal_form(
            whole[BIG.stem + ":dest"]
        )


def test_many_small_imports_equal_one(tmp_path: Path, whole: dict[str, Path]) -> None:
    """Importing after every few lines gives exactly the records of one import."""
    source = copy_transcript(SUBAGENT_PROGRESS, tmp_path / "src")
    data = SUBAGENT_PROGRESS.read_bytes()
    offsets = line_offsets(SUBAGENT_PROGRESS)
    source.write_bytes(b"")
    written = 0
    for end in [*offsets[5::7], len(data)]:
        with open(source, "ab") as stream:
            stream.write(data[written:end])
        written = end
        claude_code.import_transcript(source, tmp_path / "out", finished=end == len(data))
    dest = tmp_path / "out" / f"{SUBAGENT_PROGRESS.stem}.jsonl"
    assert _relocated(normal_form(dest), source, whole[SUBAGENT_PROGRESS.stem]) == normal_form(
        whole[SUBAGENT_PROGRESS.stem + ":dest"]
    )


def test_an_unfinished_last_line_waits(tmp_path: Path) -> None:
    """A final line without its newline is not imported until it is complete."""
    source = copy_transcript(SHORT, tmp_path / "src")
    offsets = line_offsets(SHORT)
    rest = split_at(SHORT, offsets[4] + 30, source)
    first = claude_code.import_transcript(source, tmp_path / "out", finished=False)
    assert first.lines == 4
    cursor = orjson.loads(cursor_path(first.destination).read_bytes())
    assert (cursor["offset"], cursor["line"]) == (offsets[4], 4)
    with open(source, "ab") as stream:
        stream.write(rest)
    second = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert second.lines == len(offsets) - 1 - 4


def test_an_interrupted_import_is_not_written_twice(tmp_path: Path, whole: dict[str, Path]) -> None:
    """Records written by an import whose cursor was never saved are matched, not duplicated."""
    source = copy_transcript(BIG, tmp_path / "src")
    offsets = line_offsets(BIG)
    rest = split_at(BIG, offsets[600], source)
    claude_code.import_transcript(source, tmp_path / "out", finished=False)
    dest = tmp_path / "out" / f"{BIG.stem}.jsonl"
    saved = cursor_path(dest).read_bytes()
    with open(source, "ab") as stream:
        stream.write(rest)
    claude_code.import_transcript(source, tmp_path / "out", finished=False)
    cursor_path(dest).write_bytes(saved)  # as if the process died before saving the cursor
    claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert _relocated(normal_form(dest), source, whole[BIG.stem]) == normal_form(
        whole[BIG.stem + ":dest"]
    )


_KILLED_MID_BLOCK = """
import os, signal, sys
from pathlib import Path
from loopscribe.importers import claude_code

real_write = os.write

def write(fd, data):
    # Half of the first block of records reaches the file, then the process dies.
    if len(data) > 4096:
        real_write(fd, bytes(data)[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return real_write(fd, data)

os.write = write
claude_code.import_transcript(Path(sys.argv[1]), Path(sys.argv[2]), finished=False)
"""


def test_an_import_killed_inside_a_block_recovers(tmp_path: Path, whole: dict[str, Path]) -> None:
    """SIGKILL halfway through writing a block of records: the next import matches, then goes on."""
    source = copy_transcript(BIG, tmp_path / "src")
    offsets = line_offsets(BIG)
    rest = split_at(BIG, offsets[600], source)
    out = tmp_path / "out"
    claude_code.import_transcript(source, out, finished=False)
    dest = out / f"{BIG.stem}.jsonl"
    with open(source, "ab") as stream:
        stream.write(rest)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_BLOCK, str(source), str(out)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    assert not dest.read_bytes().endswith(b"\n")  # the block was cut inside a line
    report = claude_code.import_transcript(source, out, finished=True)
    assert report.records > 0
    assert _relocated(normal_form(dest), source, whole[BIG.stem]) == normal_form(
        whole[BIG.stem + ":dest"]
    )


def test_stopping_early_resumes_where_it_stopped(tmp_path: Path, whole: dict[str, Path]) -> None:
    """An import asked to stop saves its cursor; the next import finishes the same records."""
    source = copy_transcript(BIG, tmp_path / "src")
    stop = threading.Event()

    def progress(done: int) -> None:
        if done > 1_000_000:
            stop.set()

    first = claude_code.import_transcript(
        source, tmp_path / "out", finished=True, stop=stop, on_progress=progress
    )
    assert first.stopped
    assert not first.finished
    second = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert second.finished
    dest = tmp_path / "out" / f"{BIG.stem}.jsonl"
    assert _relocated(normal_form(dest), source, whole[BIG.stem]) == normal_form(
        whole[BIG.stem + ":dest"]
    )


def test_a_turn_stays_open_until_the_transcript_settles(tmp_path: Path) -> None:
    """Without finished=, a transcript whose own last timestamp is recent keeps its last run
    open; one untouched for the settle time closes it."""
    source = freshen(copy_transcript(SHORT, tmp_path / "src"))
    report = claude_code.import_transcript(source, tmp_path / "out", settle_seconds=3600)
    assert not report.finished
    kinds = Counter(r.type for r in records(report.destination))
    assert kinds["run_start"] == kinds["run_close"] + 1
    old = time.time() - 7200
    os.utime(source, (old, old))
    later = claude_code.import_transcript(source, tmp_path / "out", settle_seconds=3600)
    assert later.finished
    kinds = Counter(r.type for r in records(report.destination))
    assert kinds["run_start"] == kinds["run_close"]


def test_a_fresh_copy_of_an_old_transcript_is_finished(tmp_path: Path) -> None:
    """A copy or clone refreshes the mtime, not the transcript's own clock: its turn is over."""
    source = copy_transcript(SHORT, tmp_path / "src")
    os.utime(source)  # just copied
    report = claude_code.import_transcript(source, tmp_path / "out", settle_seconds=3600)
    assert report.finished
    kinds = Counter(r.type for r in records(report.destination))
    assert kinds["run_start"] == kinds["run_close"]


def test_a_call_without_result_is_reported_unpaired(tmp_path: Path) -> None:
    """A tool call whose result never came is counted, and its span is marked incomplete."""
    source = tmp_path / "cut.jsonl"
    kept = SHORT.read_bytes().splitlines(keepends=True)
    del kept[11]  # the result of toolu_01FdQ8qTyVyZjE3Kw4dguQGx
    source.write_bytes(b"".join(kept))
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert report.unpaired_calls == 1
    tool = next(s for s in spans(report.destination) if s.name == "execute_tool Glob")
    assert tool.attributes is not None
    assert tool.attributes.get("loopscribe.incomplete") is True


def test_unknown_and_damaged_lines_are_kept_and_counted(tmp_path: Path) -> None:
    """A line of an unknown type and a line that is not JSON become counted source events."""
    source = tmp_path / "odd.jsonl"
    data = SHORT.read_bytes().splitlines(keepends=True)
    novel = {"type": "brand-new-kind", "timestamp": "2026-02-10T21:12:00.000Z", "x": 1}
    data.insert(5, orjson.dumps(novel) + b"\n")
    data.insert(7, b"{not json\n")
    source.write_bytes(b"".join(data))
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    assert report.unknown["brand-new-kind"] == 1
    assert report.invalid_lines == 1
    kept = [r for r in records(report.destination) if r.type == SOURCE_EVENT]
    by_type = {r.data["type"]: r for r in kept}
    assert by_type["brand-new-kind"].data["line"] == novel
    assert by_type["brand-new-kind"].data["source"]["line"] == 6
    assert by_type["invalid_line"].data["line"] == "{not json"


def test_a_transcript_using_the_reserved_key_reads_back_equal(tmp_path: Path) -> None:
    """A source key "$ls" is escaped by the codec, so the line reads back as it was."""
    source = tmp_path / "dollar.jsonl"
    data = SHORT.read_bytes().splitlines(keepends=True)
    novel = {"type": "brand-new-kind", "timestamp": "2026-02-10T21:12:00.000Z", "env": {"$ls": 1}}
    data.insert(5, orjson.dumps(novel) + b"\n")
    source.write_bytes(b"".join(data))
    report = claude_code.import_transcript(source, tmp_path / "out", finished=True)
    kept = next(r for r in loopscribe.read(report.destination) if r.type == SOURCE_EVENT)
    assert kept.data["line"]["env"] == {"$ls": 1}


# -- errors ------------------------------------------------------------------------


def test_a_rewritten_transcript_is_refused(tmp_path: Path) -> None:
    """A transcript whose first line changed since the last import names the fix."""
    source = copy_transcript(SHORT, tmp_path / "src")
    imported(source, tmp_path / "out", finished=False)
    data = source.read_bytes()
    source.write_bytes(data.replace(b"file-history-snapshot", b"file-history-snapshoT", 1))
    with pytest.raises(ImportStateError, match=r"short\.jsonl:1: .*delete .*import-cursor"):
        claude_code.import_transcript(source, tmp_path / "out")


def test_a_truncated_transcript_is_refused(tmp_path: Path) -> None:
    """A transcript shorter than what was imported names its size and the fix."""
    source = copy_transcript(SHORT, tmp_path / "src")
    imported(source, tmp_path / "out")
    source.write_bytes(source.read_bytes()[:2000])
    with pytest.raises(ImportStateError, match=r"is 2000 bytes, shorter than .* rewritten"):
        claude_code.import_transcript(source, tmp_path / "out")


def test_a_destination_without_cursor_is_moved_aside_and_imported_again(tmp_path: Path) -> None:
    """A destination of this transcript without cursor is never appended to: kept aside, redone."""
    source = copy_transcript(SHORT, tmp_path / "src")
    dest = imported(source, tmp_path / "out")
    before = dest.read_bytes()
    cursor_path(dest).unlink()
    report = claude_code.import_transcript(source, tmp_path / "out")
    assert report.records > 0
    assert dest.with_name(dest.name + ".leftover").read_bytes() == before
    assert cursor_path(dest).exists()


def test_a_foreign_destination_without_cursor_is_refused(tmp_path: Path) -> None:
    """A session of another transcript where the destination goes is never touched."""
    source = copy_transcript(SHORT, tmp_path / "src")
    dest = tmp_path / "out" / "short.jsonl"
    dest.parent.mkdir()
    with loopscribe.Session.create(dest, metadata={"other": True}):
        pass
    before = dest.read_bytes()
    with pytest.raises(ImportStateError, match="has no import cursor"):
        claude_code.import_transcript(source, tmp_path / "out")
    assert dest.read_bytes() == before


def test_find_transcripts_skips_subagent_files(tmp_path: Path) -> None:
    """Discovery lists main transcripts only; subagent files are imported with their parent."""
    copy_transcript(BIG, tmp_path / "project")
    shutil.copyfile(SHORT, tmp_path / "project" / SHORT.name)
    found = claude_code.find_transcripts(tmp_path)
    assert [p.name for p in found] == sorted([BIG.name, SHORT.name])
