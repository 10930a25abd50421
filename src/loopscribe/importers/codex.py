"""Import OpenAI Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

One rollout becomes one loopscribe session, one run per turn (a user prompt
and everything the agent did for it: ``task_started`` .. ``task_complete``
where the rollout has them, also when the user sent more input while the
turn ran, else from one user message after agent activity to the next).

A rollout has no response IDs. A model call is the run of output items
(``reasoning``, assistant ``message``, ``function_call``, ...) between two
inputs to the model (a tool output, a user message, a ``turn_context``);
its execution ID is ``model-<line>`` of its first item, so importing the
same lines always gives the same IDs. Its usage is the ``last_token_usage``
of the ``token_count`` event that belongs to it: the one inside the call, or
(as Codex 0.40 writes it) the one just before it; a ``token_count`` whose
running total did not change repeats the previous one and is not counted.

================================  =================================================
source line                       records
================================  =================================================
``session_meta``                  the destination's ``session_start`` metadata;
                                  its ``instructions`` as a system ``message_end``
``turn_context``                  the ``config`` (and model) of the following
                                  ``model_request`` records
``response_item`` ``message``     ``message_end``: an assistant message under its
                                  model call, other roles in the run; a user message
                                  after agent activity begins a new run
``response_item`` ``reasoning``   ``message_end`` under its model call
``function_call``,                ``tool_exec_start`` under the model call (arguments
``custom_tool_call``,             parsed from their JSON string)
``local_shell_call``
``function_call_output``,         ``tool_exec_end``; ``is_error`` true when the output
``custom_tool_call_output``       says ``success: false``, a shell exit code is not 0,
                                  or its text says a shell command could not run;
                                  false on success or exit code 0; ``null`` (unknown)
                                  when the output holds no such evidence
``web_search_call`` and other      ``tool_exec_start`` and ``tool_exec_end`` at once
``*_call`` items without a        (the provider ran the tool; ``result``, ``status``)
``call_id``
other ``*_call`` / ``*_output``   a tool call and its result, paired by ``call_id``
items
``event_msg`` ``token_count``     the usage of ``model_exec_end`` (see above)
``event_msg`` ``task_started``,   begin / end the turn's run (``turn_aborted``: the
``task_complete``                 items after it still belong to the turn, which the
                                  next one closes)
``compacted``                     a ``context`` execution and a session-level
                                  ``compaction`` record with the summary
``event_msg`` ``user_message``,   not recorded: copies of response items
``agent_message``,
``agent_reasoning``, ...
anything else                     ``source_event`` with the whole line
================================  =================================================
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from .. import events as ev
from .._freeze import freeze_config
from .._model import Execution
from .._redact import LineRedactor
from ._defaults import DEFAULT_SETTLE_SECONDS
from ._defaults import codex_dir as default_dir
from ._importer import Importer, result_of
from ._lines import format_ts, nested_type, parse_ts
from ._mapper import Source
from ._report import ImportReport

__all__ = ["CodexImporter", "default_dir", "find_transcripts", "import_transcript"]

NAME = "codex"
DUPLICATE_EVENTS = frozenset(
    {
        "user_message",
        "agent_message",
        "agent_reasoning",
        "agent_reasoning_raw_content",
        "context_compacted",
    }
)
"""``event_msg`` types that repeat a response item of the same rollout."""
_OUTPUT_ITEMS = frozenset(
    {"reasoning", "function_call", "custom_tool_call", "local_shell_call", "web_search_call"}
)
_CALL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_RESULT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
_ITEM_TYPES = _OUTPUT_ITEMS | _RESULT_ITEMS | {"message"}
_TURN_STARTS = frozenset({"task_started", "turn_started"})
_TURN_ENDS = frozenset({"task_complete", "turn_complete"})


def find_transcripts(root: Path) -> list[Path]:
    """The rollouts under ``root`` (or ``root`` itself)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.jsonl") if p.is_file())


def import_transcript(
    path: Path,
    out_dir: Path,
    *,
    finished: bool | None = None,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    redact: LineRedactor | bool | None = True,
    **options: Any,
) -> ImportReport:
    """Import what is new in one Codex rollout into ``out_dir/<rollout name>.jsonl``.

    Args:
        path: The rollout file.
        out_dir: The folder of destination sessions (created if missing).
        finished: Whether the rollout is complete, so its last model call and
            run can be closed. ``None`` decides by age: unchanged for
            ``settle_seconds``.
        settle_seconds: See ``finished``.
        redact: What to scrub from the records (and the cursor): ``True``
            (the default) applies ``Redactor.default()`` (the common token
            shapes and the values of credential-named environment
            variables); a ``Redactor`` or any line hook is used as it is;
            ``False`` or ``None`` keeps everything.
        options: ``stop`` (a ``threading.Event``) and ``on_progress`` (called
            with the bytes read so far).

    Returns:
        What was imported.

    Raises:
        ImportStateError: The rollout, destination and cursor disagree.
        OSError: A file cannot be read or written.
    """
    return result_of(
        CodexImporter,
        path,
        out_dir,
        path.stem,
        finished=finished,
        settle_seconds=settle_seconds,
        redact=redact,
        **options,
    )


@dataclass(slots=True)
class _Response:
    """A model call whose output items may still continue."""

    exec_id: str
    model: str | None
    usage: dict[str, Any] | None
    tools: bool
    ts: datetime | None
    source: Source

    def to_json(self) -> dict[str, Any]:
        return {
            "exec_id": self.exec_id,
            "model": self.model,
            "usage": self.usage,
            "tools": self.tools,
            "ts": format_ts(self.ts),
            "source": self.source,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> _Response:
        return cls(
            obj["exec_id"],
            obj.get("model"),
            obj.get("usage"),
            bool(obj.get("tools")),
            parse_ts(obj.get("ts")),
            obj.get("source") or {},
        )


def _arguments(value: Any) -> Any:
    """Function-call arguments: the JSON string parsed, or kept as it is."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


SHELL_TOOLS = frozenset(
    {"shell", "shell_command", "local_shell", "container.exec", "exec_command", "write_stdin"}
)
"""Tools whose output reports an exit code; plain text from them is Codex's error message."""
_EXEC_HEADERS = ("Chunk ID: ", "Wall time: ", "Process exited with code ", "Process running with")


_ERROR_TEXT = re.compile(
    r"\b(failed|failure|error|denied|rejected|timed out|timeout|not allowed|aborted|"
    r"refused|cannot|could not|no such)\b|SandboxErr",
    re.IGNORECASE,
)
"""Words that say a shell command could not run, in the first line of Codex's plain text."""


def _output(value: Any, shell: bool) -> tuple[Any, bool | None, Any]:
    """``(result, is_error, details)`` of a tool output in the shapes Codex has written.

    ``is_error`` is ``None`` (unknown) where the output carries no evidence:
    no success flag, no exit code, no error text (a redacted output, say).

    A shell command that ran reports ``{"output", "metadata": {"exit_code"}}``
    (Codex 0.40), ``Exit code: N`` text (``shell``, later versions) or, from
    ``exec_command``/``write_stdin``, header lines (``Chunk ID``, ``Wall
    time``, ``Process exited with code N`` or ``Process running with session
    ID N``) before ``Output:``; one that could not run (sandbox denial,
    rejection, timeout) gets a plain error message instead.
    """
    if isinstance(value, dict):
        success = value.get("success")
        flag = (success is False) if isinstance(success, bool) else None
        return value.get("content", value), flag, None
    if not isinstance(value, str):
        return value, None, None
    if value.startswith("{"):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and "output" in parsed:
            meta = parsed.get("metadata")
            code = meta.get("exit_code") if isinstance(meta, dict) else None
            failed = (code != 0) if type(code) is int else None
            return parsed["output"], failed, meta if isinstance(meta, dict) else None
    if value.startswith("Exit code: "):
        first = value[11 : value.find("\n") if "\n" in value else None]
        if first.strip().lstrip("-").isdigit():
            return value, int(first) != 0, {"exit_code": int(first)}
    if value.startswith(_EXEC_HEADERS):
        details = _exec_headers(value)
        if details is not None:
            code = details.get("exit_code")
            if type(code) is int:
                return value, code != 0, details
            return value, False if details.get("running") else None, details
    if shell and _ERROR_TEXT.search(value.split("\n", 1)[0]) is not None:
        return value, True, None  # "exec_command failed: SandboxErr ...": it could not run
    return value, None, None


def _exec_headers(value: str) -> dict[str, Any] | None:
    """The exit code (or running session) a unified-exec output states before ``Output:``.

    ``None`` when the text does not end its headers with an ``Output:`` line:
    then it is not that format.
    """
    details: dict[str, Any] = {}
    for line in value.split("\n", 6)[:6]:
        if line == "Output:":
            return details
        if line.startswith("Process exited with code "):
            code = line[25:].strip()
            if code.lstrip("-").isdigit():
                details["exit_code"] = int(code)
        elif line.startswith("Process running with session ID "):
            details["running"] = True
            details["session_id"] = line[32:].strip()
        elif line.startswith("Wall time: ") and line.endswith(" seconds"):
            with contextlib.suppress(ValueError):
                details["wall_time_seconds"] = float(line[11:-8])
        elif not line.startswith(("Chunk ID: ", "Original token count: ")):
            return None
    return None


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    """Codex usage with loopscribe's name for cached input added, so spans show it."""
    cached = usage.get("cached_input_tokens")
    if type(cached) is int and "cache_read_tokens" not in usage:
        return {**usage, "cache_read_tokens": cached}
    return usage


class CodexImporter(Importer):
    """Maps Codex rollout lines to loopscribe records (see the module docs)."""

    name = NAME

    def __init__(self, source: Path, destination: Path, **options: Any) -> None:
        super().__init__(source, destination, **options)
        self.response: _Response | None = None
        self.pending_usage: dict[str, Any] | None = None
        self.last_total: Any = None
        self.context: dict[str, Any] | None = None
        self.calls: dict[str, list[str]] = {}
        self.activity = False
        self.in_task = False
        """Between ``task_started`` and its end: user input there joins the running turn."""
        self.provider = "openai"
        self.request_ts: datetime | None = None
        self._config: tuple[object, dict[str, Any] | None] = (None, None)
        """The turn context a request's config was last frozen from, and that config: each
        request of a turn carries it, frozen once (``Run.record`` freezes a config)."""

    # -- state -------------------------------------------------------------------

    def dump_state(self) -> dict[str, Any]:
        """The pairing state: the open model call, unassigned usage, waiting calls."""
        return {
            "response": None if self.response is None else self.response.to_json(),
            "pending_usage": self.pending_usage,
            "last_total": self.last_total,
            "context": self.context,
            "calls": self.calls,
            "activity": self.activity,
            "in_task": self.in_task,
            "provider": self.provider,
            "meta": self.meta,
            "request_ts": format_ts(self.request_ts),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`dump_state` saved."""
        if not state:
            return
        response = state.get("response")
        self.response = None if response is None else _Response.from_json(response)
        self.pending_usage = state.get("pending_usage")
        self.last_total = state.get("last_total")
        self.context = state.get("context")
        self.calls = {k: list(v) for k, v in (state.get("calls") or {}).items()}
        self.activity = bool(state.get("activity"))
        self.in_task = bool(state.get("in_task"))
        self.provider = state.get("provider") or "openai"
        self.meta = dict(state.get("meta") or {})
        self.request_ts = parse_ts(state.get("request_ts"))

    def pending_calls(self) -> int:
        """Tool calls still waiting for an output."""
        return len(self.calls)

    # -- dispatch ----------------------------------------------------------------

    def skip_line(self, raw: bytes) -> str | None:
        """Events that copy a response item, told apart without parsing the line."""
        kind = nested_type(raw, b'"type":"event_msg","payload":')
        if kind is None:
            return None
        name = kind.decode("ascii", "replace")
        return f"event_msg/{name}" if name in DUPLICATE_EVENTS else None

    def handle(self, obj: Any, line: int, raw: bytes, source: Source) -> None:
        """Map one rollout line."""
        if type(obj) is not dict:
            self.source_event("non_object", obj, source, self.last_ts)
            return
        ts = self.line_ts(obj.get("timestamp"))
        kind = obj.get("type")
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            if "payload" not in obj and kind in _ITEM_TYPES:
                # Rollouts before the {timestamp, type, payload} wrapper hold bare items.
                self._item(obj, source, ts)
            elif "payload" not in obj and line == 1 and "id" in obj:
                self._session_meta(obj, source, ts)
            elif obj.get("record_type") == "state":
                self.report.skipped["state"] += 1
            else:
                self.source_event(str(kind), obj, source, ts)
            return
        if kind == "response_item":
            self._item(payload, source, ts)
        elif kind == "event_msg":
            self._event(obj, payload, source, ts)
        elif kind == "turn_context":
            self._end_response()
            self.context = payload
            self.request_ts = ts
        elif kind == "session_meta":
            self._session_meta(payload, source, ts)
        elif kind == "compacted":
            self._compacted(payload, source, ts)
        else:
            self.source_event(str(kind), obj, source, ts)

    def _session_meta(self, payload: dict[str, Any], source: Source, ts: datetime | None) -> None:
        if self.meta:
            self.source_event("session_meta", payload, source, ts)
            return
        self.meta = {
            k: payload[k]
            for k in ("id", "cwd", "cli_version", "originator", "source", "model_provider", "git")
            if payload.get(k) is not None
        }
        provider = payload.get("model_provider")
        if isinstance(provider, str) and provider:
            self.provider = provider
        instructions = payload.get("instructions")
        base = payload.get("base_instructions")
        if not instructions and isinstance(base, dict):
            instructions = base.get("text")
        if isinstance(instructions, str) and instructions:
            message = {"role": "system", "content": instructions}
            self.emit(ev.MESSAGE_END, None, {"message": message, "source": source}, ts)
            self.report.messages += 1

    # -- items -------------------------------------------------------------------

    def _item(self, item: dict[str, Any], source: Source, ts: datetime | None) -> None:
        kind = item.get("type")
        if kind == "message":
            if item.get("role") == "assistant":
                response = self._response(source, ts)
                execution = Execution(response.exec_id, "model")
            else:
                self._end_response()
                if item.get("role") == "user" and self.activity and not self.in_task:
                    self._begin_turn(source, ts)
                self.request_ts = ts
                execution = None
                if item.get("role") == "user":
                    self.offer_title(item.get("content"), source, ts, summary=False)
            self.emit(ev.MESSAGE_END, execution, {"message": item, "source": source}, ts)
            self.report.messages += 1
        elif kind == "reasoning":
            response = self._response(source, ts)
            data = {"message": item, "source": source}
            self.emit(ev.MESSAGE_END, Execution(response.exec_id, "model"), data, ts)
            self.report.messages += 1
        elif kind in _CALL_ITEMS:
            self._call(kind, item, source, ts)
        elif kind in _RESULT_ITEMS:
            self._result(item, source, ts)
        elif isinstance(kind, str) and kind.endswith("_call"):
            if isinstance(item.get("call_id"), str) and kind != "web_search_call":
                self._call(kind, item, source, ts)  # answered by an item of its own
            else:
                self._hosted_call(kind, item, source, ts)
        elif isinstance(kind, str) and kind.endswith("_output") and "call_id" in item:
            self._result(item, source, ts)
        else:
            self.source_event(f"response_item/{kind}", item, source, ts)

    def _hosted_call(
        self, kind: str, item: dict[str, Any], source: Source, ts: datetime | None
    ) -> None:
        """A tool the provider ran inside the model call (web search, image generation, ...).

        Its item holds the outcome (``status``, and ``result`` where there is
        one): ``tool_exec_start`` and ``tool_exec_end`` at once.
        """
        response = self._response(source, ts)
        name = kind[:-5]
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"{name}-{source['line']}"
        execution = Execution(call_id, "tool", 1, response.exec_id)
        response.tools = True
        args = item.get("action") if "action" in item else _arguments(item.get("arguments"))
        self.emit(ev.TOOL_EXEC_START, execution, {"tool": name, "args": args, "source": source}, ts)
        end = {
            "tool": name,
            "result": item.get("result"),
            "is_error": item.get("status") == "failed",
        }
        end["details"] = {"status": item.get("status")}
        end["source"] = source
        self.emit(ev.TOOL_EXEC_END, execution, end, ts)
        self.report.tool_calls += 1
        self.report.tool_results += 1

    def _call(self, kind: str, item: dict[str, Any], source: Source, ts: datetime | None) -> None:
        response = self._response(source, ts)
        call_id = item.get("call_id") or item.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call-{source['line']}"
        if kind == "local_shell_call":
            name: Any = "local_shell"
            args = item.get("action")
        elif kind == "custom_tool_call":
            name = item.get("name")
            args = item.get("input")
        else:
            name = item.get("name")
            args = _arguments(item.get("arguments"))
            if args is None and "input" in item:
                args = item.get("input")
        fallback = "tool" if kind in _CALL_ITEMS else kind[:-5]
        name = name if isinstance(name, str) and name else fallback
        self.calls[call_id] = [name, response.exec_id]
        response.tools = True
        self.emit(
            ev.TOOL_EXEC_START,
            Execution(call_id, "tool", 1, response.exec_id),
            {"tool": name, "args": args, "source": source},
            ts,
        )
        self.report.tool_calls += 1

    def _result(self, item: dict[str, Any], source: Source, ts: datetime | None) -> None:
        self._end_response()
        self.activity = True
        self.request_ts = ts
        call_id = item.get("call_id")
        call = self.calls.pop(call_id, None) if isinstance(call_id, str) else None
        if call is not None and isinstance(call_id, str):
            execution = Execution(call_id, "tool", 1, call[1])
            data: dict[str, Any] = {"tool": call[0]}
        else:
            if not isinstance(call_id, str) or not call_id:
                call_id = f"output-{source['line']}"
            execution = Execution(call_id, "tool")
            data = {"unpaired": True}
            self.report.unpaired_results += 1
        shell = call is not None and call[0] in SHELL_TOOLS
        if "output" in item:
            output = item["output"]
        else:  # a newer kind of output item: what it holds besides its ids
            output = {k: v for k, v in item.items() if k not in ("type", "id", "call_id")}
        result, failed, details = _output(output, shell)
        if item.get("status") == "failed":
            failed = True
        elif item.get("status") == "completed" and failed is None:
            failed = False
        data["result"] = result
        data["is_error"] = failed
        if details is not None:
            data["details"] = details
        data["source"] = source
        self.emit(ev.TOOL_EXEC_END, execution, data, ts)
        self.report.tool_results += 1

    # -- model calls -------------------------------------------------------------

    def _response(self, source: Source, ts: datetime | None) -> _Response:
        response = self.response
        if response is None:
            context = self.context or {}
            model = context.get("model")
            response = _Response(
                exec_id=f"model-{source['line']}",
                model=model if isinstance(model, str) else None,
                usage=None,
                tools=False,
                ts=ts,
                source=source,
            )
            if self.pending_usage is not None:
                response.usage = self.pending_usage["usage"]
                self.pending_usage = None
            self.response = response
            self.activity = True
            request: dict[str, Any] = {
                "model": response.model,
                "provider": self.provider,
                "messages": [],
            }
            config = self._frozen_config(context)
            if config is not None:
                request["config"] = config
            request["source"] = source
            # The call began when its input was complete, not with its first output item.
            started = self.request_ts
            if started is None or ts is None or started > ts:
                started = ts
            self.request_ts = None
            self.emit(ev.MODEL_REQUEST, Execution(response.exec_id, "model"), request, started)
        response.ts = ts
        response.source = source
        return response

    def _frozen_config(self, context: dict[str, Any]) -> dict[str, Any] | None:
        """A request's config from the turn context (``None``: it has none), frozen once a turn."""
        seen, frozen = self._config
        if seen is not context:
            config = {
                k: v for k, v in context.items() if k != "model" and not k.endswith("instructions")
            }
            frozen = freeze_config(config) if config else None
            self._config = (context, frozen)
        return frozen

    def _end_response(self) -> None:
        response = self.response
        if response is None:
            return
        self.response = None
        self._model_end(response, no_output=False)

    def _model_end(self, response: _Response, *, no_output: bool) -> None:
        data: dict[str, Any] = {"model": response.model, "provider": self.provider}
        if response.usage is not None:
            data["usage"] = _usage(response.usage)
        if no_output:
            data["no_output"] = True
        else:
            data["stop_reason"] = "tool_calls" if response.tools else "stop"
            data["stop_reason_inferred"] = True
        data["source"] = response.source
        self.emit(ev.MODEL_EXEC_END, Execution(response.exec_id, "model"), data, response.ts)
        self.report.model_calls += 1
        self.report.add_usage(response.usage, anthropic=False)

    def _token_count(self, payload: dict[str, Any], source: Source, ts: datetime | None) -> None:
        info = payload.get("info")
        if not isinstance(info, dict) or not isinstance(info.get("last_token_usage"), dict):
            self.report.skipped["event_msg/token_count (no usage)"] += 1
            return
        total = info.get("total_token_usage")
        if total is not None and total == self.last_total:
            self.report.skipped["event_msg/token_count (repeated)"] += 1
            return
        self.last_total = total
        usage: dict[str, Any] = info["last_token_usage"]
        response = self.response
        if response is not None and response.usage is None:
            response.usage = usage
            if ts is not None and (response.ts is None or ts > response.ts):
                response.ts = ts
            return
        if self.pending_usage is not None:
            self._usage_only_call()
        self.pending_usage = {"usage": usage, "ts": format_ts(ts), "source": source}

    def _usage_only_call(self) -> None:
        """Usage no output item claimed: a model call whose items the rollout does not hold."""
        pending = self.pending_usage
        if pending is None:
            return
        self.pending_usage = None
        source = pending["source"]
        ts = parse_ts(pending["ts"])
        model = (self.context or {}).get("model")
        response = _Response(
            f"model-{source['line']}",
            model if isinstance(model, str) else None,
            pending["usage"],
            False,
            ts,
            source,
        )
        request: dict[str, Any] = {
            "model": response.model,
            "provider": self.provider,
            "messages": [],
            "source": source,
        }
        self.emit(ev.MODEL_REQUEST, Execution(response.exec_id, "model"), request, ts)
        self._model_end(response, no_output=True)

    # -- events, turns, compaction -----------------------------------------------

    def _event(
        self, obj: dict[str, Any], payload: dict[str, Any], source: Source, ts: datetime | None
    ) -> None:
        kind = payload.get("type")
        if kind == "token_count":
            self._token_count(payload, source, ts)
        elif kind in DUPLICATE_EVENTS:
            self.report.skipped[f"event_msg/{kind}"] += 1
        elif kind in _TURN_STARTS:
            if self.activity or not self.dest.run_open:
                self._begin_turn(source, ts)
            self.in_task = True
        elif kind in _TURN_ENDS:
            self._end_turn(ts)
        elif kind == "turn_aborted":
            # The interrupted call's items come after this line: the turn keeps
            # them, and the next turn (or the end) closes its run.
            self.source_event(f"event_msg/{kind}", obj, source, ts)
            self._end_response()
            self.in_task = False
            self.activity = True
        else:
            self.source_event(f"event_msg/{kind}", obj, source, ts)

    def _begin_turn(self, source: Source, ts: datetime | None) -> None:
        self._end_turn(self.record_ts)
        self.begin_run(ts)
        self.activity = False

    def _end_turn(self, ts: datetime | None) -> None:
        self._end_response()
        self._usage_only_call()
        self.report.unpaired_calls += len(self.calls)
        self.calls.clear()
        self.activity = False
        self.in_task = False
        if self.dest.run_open:
            self.dest.close_run(ts)

    def finish(self) -> None:
        """The rollout is finished: end its last model call and close its run."""
        self._end_turn(self.record_ts)

    def _compacted(self, payload: dict[str, Any], source: Source, ts: datetime | None) -> None:
        self._end_response()
        execution = Execution(f"compact-{source['line']}", "context")
        self.emit(ev.CONTEXT_TRANSFORM_START, execution, {"source": source}, ts)
        self.emit(ev.CONTEXT_TRANSFORM_END, execution, {"source": source}, ts)
        data: dict[str, Any] = {"summary": payload.get("message")}
        if payload.get("replacement_history") is not None:
            data["replacement_history"] = payload["replacement_history"]
        data["source"] = source
        self.dest.annotate(ev.COMPACTION, data, ts)
        self.report.compactions += 1
