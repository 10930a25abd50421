"""The Codex rollout importer, on real rollouts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from loopscribe.importers import SOURCE_EVENT, codex
from loopscribe.importers._cursor import cursor_path
from loopscribe.otel import _bridge

from ._support import (
    attribute_text,
    body_strings,
    copy_transcript,
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

FILES = transcripts("codex")
TWO_TURNS = next(p for p in FILES if "0199812e" in p.name)
HAS_SOURCE_REFS = hasattr(_bridge, "LS_SOURCE_FILE")
CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
OUTPUTS = ("function_call_output", "custom_tool_call_output", "web_search_call")
USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")


OUTPUT_ITEMS = ("reasoning", "function_call", "custom_tool_call", "local_shell_call")
INPUTS = ("function_call_output", "custom_tool_call_output")


def items(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The response items of a rollout: wrapped (``response_item``) or bare (before Sept 2025)."""
    found = []
    for obj in objs:
        if obj.get("type") == "response_item" and isinstance(obj.get("payload"), dict):
            found.append(obj["payload"])
        elif "payload" not in obj and "record_type" not in obj and obj.get("type"):
            found.append(obj)
    return found


def source_counts(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """Tool calls, outputs, assistant messages, model calls and tokens, straight from the lines."""
    kinds: Counter[str] = Counter()
    usage: Counter[str] = Counter()
    last_total = None
    for obj in objs:
        payload = obj.get("payload") or {}
        if obj.get("type") == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if not info or info.get("total_token_usage") == last_total:
                continue  # a repeat of the previous usage
            last_total = info.get("total_token_usage")
            for key in USAGE_KEYS:
                usage[key] += info["last_token_usage"].get(key) or 0
    for item in items(objs):
        kind = item.get("type")
        kinds[str(kind)] += 1
        if kind == "message":
            kinds[f"message:{item.get('role')}"] += 1
    return {
        "tool_calls": sum(kinds[k] for k in CALLS),
        "tool_results": sum(kinds[k] for k in OUTPUTS),
        "assistant_messages": kinds["message:assistant"],
        "model_calls": _model_calls(objs),
        "usage": usage,
    }


TURN_EVENTS = ("task_started", "task_complete")


def _model_calls(objs: list[dict[str, Any]]) -> int:
    """Model calls, from the lines.

    Between two inputs to the model (a user message, a tool output, a
    turn_context, a task event) there is one model call per distinct
    ``token_count``, or one when there are output items but no count (the
    bare format has none). ``turn_aborted`` is no input: the interrupted
    call's items come after it, its usage before.
    """
    calls = counted = 0
    outputs = False
    last_total = None
    for obj in objs:
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            payload = obj if "payload" not in obj else {}
        wrapper = obj.get("type") if "payload" in obj else "response_item"
        kind = payload.get("type")
        output = wrapper == "response_item" and (
            kind in OUTPUT_ITEMS or kind == "web_search_call" or payload.get("role") == "assistant"
        )
        if wrapper == "event_msg" and kind == "token_count":
            info = payload.get("info")
            if info and info.get("total_token_usage") != last_total:
                last_total = info.get("total_token_usage")
                counted += 1
            continue
        is_input = (
            wrapper in ("turn_context", "compacted")
            or (wrapper == "event_msg" and kind in TURN_EVENTS)
            or (
                wrapper == "response_item"
                and (kind in INPUTS or (kind == "message" and not output))
            )
        )
        if is_input:
            calls += max(counted, 1 if outputs else 0)
            counted, outputs = 0, False
        elif output:
            outputs = True
    return calls + max(counted, 1 if outputs else 0)


def dest_counts(dest: Path) -> dict[str, Any]:
    """The same counts, from the records of an imported session."""
    kinds: Counter[str] = Counter()
    usage: Counter[str] = Counter()
    assistant = 0
    for r in records(dest):
        kinds[r.type] += 1
        if r.type == "message_end" and r.data["message"].get("role") == "assistant":
            assistant += 1
        if r.type == "model_exec_end":
            for key in USAGE_KEYS:
                usage[key] += (r.data.get("usage") or {}).get(key) or 0
    return {
        "tool_calls": kinds["tool_exec_start"],
        "tool_results": kinds["tool_exec_end"],
        "assistant_messages": assistant,
        "model_calls": kinds["model_exec_end"],
        "usage": usage,
    }


def expected_error(output: Any, shell: bool) -> bool | None:
    """Whether a tool output reports a failure, read the way each Codex version writes it:
    ``None`` where it holds no evidence either way (no flag, no exit code, no error text)."""
    if isinstance(output, dict):
        success = output.get("success")
        return (success is False) if isinstance(success, bool) else None
    if not isinstance(output, str):
        return None
    if output.startswith("{"):
        try:
            meta = orjson.loads(output)["metadata"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            meta = None
        if isinstance(meta, dict) and isinstance(meta.get("exit_code"), int):
            return bool(meta["exit_code"] != 0)
    head, _, _ = output.partition("\nOutput:")
    for line in head.splitlines():
        if line.startswith(("Exit code: ", "Process exited with code ")):
            return int(line.rsplit(" ", 1)[1]) != 0
        if line.startswith("Process running with session ID"):
            return False
    first = output.split("\n", 1)[0].lower()
    if shell and any(w in first for w in ("failed", "denied", "sandboxerr", "timed out")):
        return True
    return None


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every rollout copied and imported whole once: source and destination by name."""
    root = tmp_path_factory.mktemp("whole")
    out: dict[str, Path] = {}
    for path in FILES:
        source = copy_transcript(path, root / "src")
        codex.import_transcript(source, root / "out", finished=True)
        out[path.stem] = source
        out[path.stem + ":dest"] = root / "out" / f"{path.stem}.jsonl"
    return out


@pytest.fixture(scope="module")
def whole_spans(whole: dict[str, Path]) -> dict[str, list[ReadableSpan]]:
    """The spans of every whole import, replayed once."""
    return {p.stem: spans(whole[p.stem + ":dest"]) for p in FILES}


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_counts_match_the_source(path: Path, whole: dict[str, Path]) -> None:
    """Tool calls, outputs, assistant messages, model calls and tokens equal the source's."""
    expected = source_counts(list(lines(path)))
    assert dest_counts(whole[path.stem + ":dest"]) == expected
    assert expected["model_calls"] > 0


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_every_call_is_paired_or_reported(path: Path, tmp_path: Path) -> None:
    """Each tool_exec_start has its tool_exec_end, or the report counts it as unpaired."""
    report = codex.import_transcript(
        copy_transcript(path, tmp_path), tmp_path / "out", finished=True
    )
    found = records(report.destination)
    starts = {r.execution.id for r in found if r.type == "tool_exec_start" and r.execution}
    ends = {r.execution.id for r in found if r.type == "tool_exec_end" and r.execution}
    found_items = items(list(lines(path)))
    answered = {i.get("call_id") for i in found_items if i.get("type") in OUTPUTS[:2]}
    waiting = [i for i in found_items if i.get("type") in CALLS[:3]]
    unanswered = sum(1 for i in waiting if (i.get("call_id") or i.get("id")) not in answered)
    assert len(starts - ends) == report.unpaired_calls == unanswered
    assert report.unpaired_results == 0
    assert report.tool_calls == len(starts)
    assert sum(report.unknown.values()) == sum(1 for r in found if r.type == SOURCE_EVENT)


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_shell_failures_keep_their_error_flag(path: Path, whole: dict[str, Path]) -> None:
    """A command that exited non-zero or could not run is an error; one that exited 0 is
    not; an output without evidence (redacted, no exit code) is unknown (``null``)."""
    names = {i.get("call_id"): i.get("name") for i in items(list(lines(path))) if "name" in i}
    expected: dict[str, bool | None] = {}
    for item in items(list(lines(path))):
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            shell = names.get(item["call_id"]) in codex.SHELL_TOOLS
            expected[item["call_id"]] = expected_error(item["output"], shell)
    found = {
        r.execution.id: r.data["is_error"]
        for r in records(whole[path.stem + ":dest"])
        if r.type == "tool_exec_end" and r.execution and r.data.get("tool") != "web_search"
    }
    assert found == expected
    errors = [s for s in spans(whole[path.stem + ":dest"]) if s.status.status_code.name == "ERROR"]
    failed_searches = sum(
        1
        for i in items(list(lines(path)))
        if i.get("type") == "web_search_call" and i.get("status") == "failed"
    )
    assert len(errors) == sum(1 for v in expected.values() if v) + failed_searches


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_importing_twice_changes_nothing(path: Path, tmp_path: Path) -> None:
    """A second import of an unchanged rollout writes nothing and keeps the cursor."""
    source = copy_transcript(path, tmp_path / "src")
    first = codex.import_transcript(source, tmp_path / "out", finished=True)
    before = first.destination.read_bytes(), cursor_path(first.destination).read_bytes()
    again = codex.import_transcript(source, tmp_path / "out", finished=True)
    assert again.up_to_date
    after = first.destination.read_bytes(), cursor_path(first.destination).read_bytes()
    assert after == before


def _cuts(path: Path) -> list[int]:
    """Cut points: the middle, inside a line, right after a token_count, between call and output."""
    offsets = line_offsets(path)
    objs = list(lines(path))
    middle = offsets[len(offsets) // 2]
    cuts = [middle, middle + 11]
    for kind in ("token_count", "function_call"):
        at = next(
            (i for i, o in enumerate(objs) if (o.get("payload") or o).get("type") == kind), None
        )
        if at is not None:
            cuts.append(offsets[at + 1])
    return cuts


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_split_import_equals_whole(
    path: Path,
    tmp_path: Path,
    whole: dict[str, Path],
    whole_spans: dict[str, list[ReadableSpan]],
) -> None:
    """A rollout imported as it grows gives the records and spans of one import."""
    expected = normal_form(whole[path.stem + ":dest"])
    there = {
        str(whole[path.stem].parent): "<src>",
        str(whole[path.stem + ":dest"].parent): "<out>",
    }
    expected_spans = span_structure(whole_spans[path.stem], there)
    src_dir = str(whole[path.stem].parent).encode()
    for cut in _cuts(path):
        folder = tmp_path / str(cut)
        source = copy_transcript(path, folder / "src")
        rest = split_at(path, cut, source)
        codex.import_transcript(source, folder / "out", finished=False)
        with open(source, "ab") as stream:
            stream.write(rest)
        codex.import_transcript(source, folder / "out", finished=True)
        dest = folder / "out" / f"{path.stem}.jsonl"
        here = str(source.parent).encode()
        assert [(*r[:-1], r[-1].replace(here, src_dir)) for r in normal_form(dest)] == expected
        mine = {str(source.parent): "<src>", str(dest.parent): "<out>"}
        assert span_structure(spans(dest), mine) == expected_spans


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_spans_carry_no_body_text(path: Path, whole_spans: dict[str, list[ReadableSpan]]) -> None:
    """No message, reasoning, argument or output text of the rollout reaches a span."""
    haystack = attribute_text(whole_spans[path.stem])
    bodies = body_strings(path, bare=True)
    assert bodies
    assert [b for b in bodies if b in haystack] == []


@pytest.mark.parametrize("path", FILES, ids=ids(FILES))
def test_tool_spans_nest_under_their_chat_span(
    path: Path, whole_spans: dict[str, list[ReadableSpan]]
) -> None:
    """Every function call is an execute_tool span under the chat span of its model call."""
    found = whole_spans[path.stem]
    by_id = {s.context.span_id: s for s in found}
    tools = [s for s in found if s.name.startswith("execute_tool ")]
    assert tools
    for span in tools:
        assert span.parent is not None
        assert by_id[span.parent.span_id].name.startswith("chat")


def test_each_prompt_is_a_run(whole: dict[str, Path]) -> None:
    """The rollout with two prompts gives two runs, each beginning at its prompt's time."""
    found = records(whole[TWO_TURNS.stem + ":dest"])
    starts = [r for r in found if r.type == "run_start"]
    assert [r.ts.isoformat()[:23] for r in starts] == [
        "2025-09-25T14:02:05.435",
        "2025-09-25T14:12:09.697",
    ]
    assert sum(1 for r in found if r.type == "run_close") == 2


def test_model_calls_start_when_their_input_is_complete(whole: dict[str, Path]) -> None:
    """A chat span runs from the input before it (turn_context, tool output) to its last item."""
    found = records(whole[TWO_TURNS.stem + ":dest"])
    request = next(r for r in found if r.type == "model_request")
    end = next(r for r in found if r.type == "model_exec_end")
    assert request.ts.isoformat()[:23] == "2025-09-25T14:02:05.435"  # turn_context
    assert request.data["config"]["effort"] == "high"
    assert end.ts > request.ts


def test_usage_after_the_items_is_assigned_too(tmp_path: Path) -> None:
    """Rollouts that write token_count after a call's items (newer Codex) give the same usage."""
    objs = list(lines(TWO_TURNS))
    moved: list[dict[str, Any]] = []
    held: dict[str, Any] | None = None
    for obj in objs:
        payload = obj.get("payload") or {}
        if payload.get("type") == "token_count":
            held = obj  # move it forward: after the call's items, before the next input
            continue
        is_input = obj["type"] == "turn_context" or payload.get("type") in (
            "function_call_output",
            "user_message",
        )
        if held is not None and is_input:
            moved.append(held)
            held = None
        moved.append(obj)
    if held is not None:
        moved.append(held)
    assert moved != objs
    source = tmp_path / TWO_TURNS.name
    source.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in moved))
    report = codex.import_transcript(source, tmp_path / "out", finished=True)
    assert dest_counts(report.destination) == source_counts(objs)


def test_turn_events_and_compaction(tmp_path: Path) -> None:
    """task_started/task_complete bound the runs; a compacted line gives a context span."""
    objs = list(lines(TWO_TURNS))
    first_prompt = next(
        i for i, o in enumerate(objs) if (o.get("payload") or {}).get("type") == "user_message"
    )
    ts = objs[first_prompt]["timestamp"]
    objs.insert(2, {"timestamp": ts, "type": "event_msg", "payload": {"type": "task_started"}})
    later = objs[200]["timestamp"]
    objs.insert(200, {"timestamp": later, "type": "compacted", "payload": {"message": "SUMMARY"}})
    done = {"type": "task_complete", "last_agent_message": None}
    objs.append({"timestamp": objs[-1]["timestamp"], "type": "event_msg", "payload": done})
    novel = {"timestamp": later, "type": "event_msg", "payload": {"type": "brand_new"}}
    objs.insert(210, novel)
    second_prompt = next(
        i
        for i, o in enumerate(objs)
        if i > 210 and (o.get("payload") or {}).get("type") == "user_message"
    )
    second = {"type": "task_started"}
    objs.insert(second_prompt - 2, {**objs[second_prompt], "payload": second})
    source = tmp_path / "rollout-test.jsonl"
    source.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    report = codex.import_transcript(source, tmp_path / "out", finished=False)
    assert report.compactions == 1
    assert report.unknown == Counter({"event_msg/brand_new": 1})
    found = records(report.destination)
    assert sum(1 for r in found if r.type == "run_close") == 2  # task_complete closed the last
    compaction = next(r for r in found if r.type == "compaction")
    assert compaction.data["summary"] == "SUMMARY"
    contexts = [
        s.name
        for s in spans(report.destination)
        if (s.attributes or {}).get("loopscribe.execution.id") == "compact-201"
    ]
    assert contexts == ["context"]


@pytest.mark.skipif(not HAS_SOURCE_REFS, reason="the bridge does not copy source refs yet")
def test_spans_reference_the_rollout_line(whole_spans: dict[str, list[ReadableSpan]]) -> None:
    """A chat span names the rollout line of its first item; a tool span, its call."""
    checked = 0
    for span in whole_spans[TWO_TURNS.stem]:
        ref = source_ref(span)
        if not span.name.startswith(("chat", "execute_tool")):
            continue
        assert ref is not None
        attrs = span.attributes or {}
        if span.name.startswith("execute_tool"):
            assert str(attrs["gen_ai.tool.call.id"]).encode() in source_line(*ref)
            checked += 1
        else:
            assert attrs["loopscribe.execution.id"] == f"model-{ref[1]}"
    assert checked > 50


def _rollout(path: Path, objs: list[dict[str, Any]]) -> Path:
    """Write rollout lines, each stamped a second after the one before."""
    stamped = [{"timestamp": f"2026-02-23T12:00:{i:02d}.000Z", **obj} for i, obj in enumerate(objs)]
    path.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in stamped))
    return path


def test_exec_command_outputs_state_their_exit_code(tmp_path: Path) -> None:
    """exec_command/write_stdin results fail by the exit code they state, not by their shape."""
    outputs = {
        "ok": "Chunk ID: 1a2b\nWall time: 0.0512 seconds\nProcess exited with code 0\n"
        "Original token count: 1\nOutput:\nok\n",
        "failed": "Wall time: 1.2500 seconds\nProcess exited with code 2\nOutput:\nno such file\n",
        "running": "Chunk ID: 9f\nWall time: 10.0020 seconds\n"
        "Process running with session ID 7\nOutput:\nserving on :8000\n",
        "stdin": "Wall time: 0.2500 seconds\nProcess exited with code 0\nOutput:\n",
        "denied": "exec_command failed: SandboxErr { message: denied }",
        "headless": "Wall time: 0.1 seconds\nProcess exited with code 0\nno output line",
    }
    objs: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "s", "cwd": "/w", "cli_version": "0.104.0"}},
        {"type": "turn_context", "payload": {"model": "gpt-5.3-codex"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": []}},
    ]
    for call_id, output in outputs.items():
        name = "write_stdin" if call_id == "stdin" else "exec_command"
        call = {"type": "function_call", "name": name, "arguments": "{}", "call_id": call_id}
        result = {"type": "function_call_output", "call_id": call_id, "output": output}
        objs += [{"type": "response_item", "payload": call}]
        objs += [{"type": "response_item", "payload": result}]
    source = _rollout(tmp_path / "rollout-exec.jsonl", objs)
    report = codex.import_transcript(source, tmp_path / "out", finished=True)
    ends = {
        r.execution.id: r.data
        for r in records(report.destination)
        if r.type == "tool_exec_end" and r.execution
    }
    assert {k: v["is_error"] for k, v in ends.items()} == {
        "ok": False,
        "failed": True,
        "running": False,
        "stdin": False,
        "denied": True,
        "headless": None,  # no exit code it can read, no error text: unknown
    }
    assert ends["ok"]["details"] == {"wall_time_seconds": 0.0512, "exit_code": 0}
    assert ends["failed"]["details"]["exit_code"] == 2
    assert ends["running"]["details"] == {
        "wall_time_seconds": 10.002,
        "running": True,
        "session_id": "7",
    }
    assert ends["ok"]["result"] == outputs["ok"]  # the whole output is kept as it was
    errors = {
        (s.attributes or {}).get("gen_ai.tool.call.id")
        for s in spans(report.destination)
        if s.status.status_code.name == "ERROR"
    }
    assert errors == {"failed", "denied"}


def test_input_sent_while_a_turn_runs_stays_in_that_turn(tmp_path: Path) -> None:
    """A user message between task_started and task_complete steers the turn: no new run."""

    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response_item", "payload": payload}

    def event(kind: str) -> dict[str, Any]:
        return {"type": "event_msg", "payload": {"type": kind}}

    def said(role: str, text: str) -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return item({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})

    call = {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"}
    output = "Wall time: 0.1000 seconds\nProcess exited with code 0\nOutput:\n"
    objs: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "s", "cwd": "/w", "cli_version": "0.104.0"}},
        event("task_started"),
        said("user", "fix the tests"),
        item(call),
        item({"type": "function_call_output", "call_id": "c1", "output": output}),
        said("user", "and keep the old API"),
        said("assistant", "done, API kept"),
        event("task_complete"),
        event("task_started"),
        said("user", "thanks"),
        said("assistant", "welcome"),
        event("task_complete"),
    ]
    source = _rollout(tmp_path / "rollout-steer.jsonl", objs)
    report = codex.import_transcript(source, tmp_path / "out", finished=True)
    found = records(report.destination)
    runs = [r.run_id for r in found if r.type == "run_start"]
    assert len(runs) == 2
    steer = next(
        r
        for r in found
        if r.type == "message_end"
        and "keep the old API" in orjson.dumps(r.data["message"]).decode()
    )
    assert steer.run_id == runs[0]
    assert [r.ts.second for r in found if r.type == "run_close"] == [7, 11]


def test_items_after_an_aborted_turn_belong_to_it(tmp_path: Path) -> None:
    """Codex writes the interrupted call after turn_aborted: it stays in that turn's run."""

    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response_item", "payload": payload}

    def said(role: str, text: str) -> dict[str, Any]:
        kind = "output_text" if role == "assistant" else "input_text"
        return item({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})

    patch = {"type": "function_call", "name": "apply_patch", "arguments": "{}", "call_id": "p1"}
    rejected = {"type": "function_call_output", "call_id": "p1", "output": "patch rejected by user"}
    aborted = {"type": "event_msg", "payload": {"type": "turn_aborted", "reason": "interrupted"}}
    objs: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "s", "cwd": "/w", "cli_version": "0.40.0"}},
        {"type": "turn_context", "payload": {"model": "gpt-5-codex"}},
        said("user", "refactor it"),
        item({"type": "reasoning", "summary": []}),
        aborted,
        item({"type": "reasoning", "summary": []}),
        item(patch),
        item(rejected),
        {"type": "turn_context", "payload": {"model": "gpt-5-codex"}},
        said("user", "never mind"),
        said("assistant", "ok"),
    ]
    source = _rollout(tmp_path / "rollout-aborted.jsonl", objs)
    report = codex.import_transcript(source, tmp_path / "out", finished=True)
    found = records(report.destination)
    runs = [r.run_id for r in found if r.type == "run_start"]
    assert len(runs) == 2
    end = next(r for r in found if r.type == "tool_exec_end")
    assert end.run_id == runs[0]
    assert end.data["result"] == "patch rejected by user"
    closes = [r for r in found if r.type == "run_close"]
    assert [r.ts.second for r in closes] == [7, 10]  # the first closes at its last item
    assert report.unknown == Counter({"event_msg/turn_aborted": 1})


def test_newer_kinds_of_tool_items_are_tool_calls(tmp_path: Path) -> None:
    """*_call items are tool calls: paired with a *_output by call_id, or run by the provider."""

    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"type": "response_item", "payload": payload}

    search: dict[str, Any] = {"type": "tool_search_call", "id": "ts-1", "call_id": "call-3"}
    search["status"] = "completed"
    search["arguments"] = {"query": "calendar"}
    found_tools = [{"type": "function", "name": "list_events"}]
    answer: dict[str, Any] = {"type": "tool_search_output", "id": "tso-1", "call_id": "call-3"}
    answer.update(status="completed", tools=found_tools)
    image = {"type": "image_generation_call", "id": "ig-1", "status": "failed", "result": None}
    objs: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "s", "cwd": "/w", "cli_version": "0.146.0"}},
        {"type": "turn_context", "payload": {"model": "gpt-5.5"}},
        item(
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        ),
        item({"type": "reasoning", "summary": []}),
        item(search),
        item(answer),
        item(image),
        item({"type": "message", "role": "assistant", "content": []}),
    ]
    source = _rollout(tmp_path / "rollout-newer.jsonl", objs)
    report = codex.import_transcript(source, tmp_path / "out", finished=True)
    assert report.unknown == Counter()
    assert (report.tool_calls, report.tool_results, report.unpaired_results) == (2, 2, 0)
    found = records(report.destination)
    ends = {r.execution.id: r.data for r in found if r.type == "tool_exec_end" and r.execution}
    assert ends["call-3"]["tool"] == "tool_search"
    assert ends["call-3"]["result"] == {"status": "completed", "tools": found_tools}
    assert ends["call-3"]["is_error"] is False
    assert ends["ig-1"]["tool"] == "image_generation"
    assert ends["ig-1"]["is_error"] is True
    start = next(r for r in found if r.type == "tool_exec_start")
    assert start.data["args"] == {"query": "calendar"}
    tool_spans = {s.name: s for s in spans(report.destination) if s.name.startswith("execute_tool")}
    assert set(tool_spans) == {"execute_tool tool_search", "execute_tool image_generation"}
    assert tool_spans["execute_tool image_generation"].status.status_code.name == "ERROR"


def test_the_agents_md_message_gives_no_title(tmp_path: Path) -> None:
    """Codex hands AGENTS.md to the model as a user message: the title is the request after it."""
    agents = (
        "# AGENTS.md instructions for /repo\n\n<INSTRUCTIONS>\nKeep changes small.\n</INSTRUCTIONS>"
    )
    context = "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>"

    def said(text: str) -> dict[str, Any]:
        content = [{"type": "input_text", "text": text}]
        return {
            "type": "response_item",
            "payload": {"type": "message", "role": "user", "content": content},
        }

    objs: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"id": "s", "cwd": "/repo", "cli_version": "0.104.0"}},
        said(agents),
        said(context),
        said("Fix the flaky upload test"),
    ]
    source = _rollout(tmp_path / "rollout-agents.jsonl", objs)
    report = codex.import_transcript(source, tmp_path / "out", finished=True)
    titles = [
        r.data["fields"]["title"] for r in records(report.destination) if r.type == "session_update"
    ]
    assert titles == ["Fix the flaky upload test"]
