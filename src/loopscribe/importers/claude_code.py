"""Import Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

One transcript becomes one loopscribe session, one run per turn (a user
prompt and everything the agent did until the next prompt, or until
``system/turn_duration``). Subagents, whose lines Claude Code writes to
``<session>/subagents/agent-<id>.jsonl``, are nested under the ``Task`` tool
call that started them (Claude Code 2.0 wrote them as ``agent-<id>.jsonl``
beside the transcript); when a transcript has no such file, the subagent's
messages are taken from the ``agent_progress`` lines of the main transcript.

================================  =================================================
source line                       records
================================  =================================================
``user`` prompt                   closes the previous turn's run, begins a run, then
                                  ``message_end`` (no execution)
``user`` other text (meta,        ``message_end`` in the current run (a subagent's
interruption, command output,     under its ``agent`` execution)
subagent prompt)
``user`` ``tool_result`` blocks   ``tool_exec_end`` of the ``tool`` execution with the
                                  same id: result, ``is_error``, small ``details``
``user`` compact summary          session-level ``compaction`` record (its summary)
``assistant`` (``message.id``)    first line of a response: ``model_request``
                                  (model, request id); each line: ``message_end``
                                  of its text/thinking blocks, ``tool_exec_start``
                                  per ``tool_use`` block; when the response is over:
                                  ``model_exec_end`` with model, the usage of its last
                                  line (counted once) and the stop reason
``system/compact_boundary``       ``context_transform_start``/``_end`` of a
                                  ``context`` execution, the summarizing subagent
                                  (``agent-acompact-*``) nested in it
``system/turn_duration``          ends the turn: ``run_close``
``progress/agent_progress``       a subagent's messages, when it has no file
``isSidechain`` ``user`` and      a subagent's messages written into the transcript
``assistant`` lines               (Claude Code 1.0): under the ``Task`` call whose
                                  prompt the chain's first line repeats
other ``progress``, ``file-       not recorded, counted in ``report.skipped``
history-snapshot``,
``queue-operation``
anything else                     ``source_event`` with the whole line, counted in
                                  ``report.unknown``
================================  =================================================

Every record's data has ``source: {"file", "line", "uuid"}`` naming the line
it came from. A response is over when another response, a prompt, a
compaction or the end of the turn follows: until then it stays open, also
across imports (its state is kept in the cursor).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from .. import events as ev
from .._errors import LoopscribeError
from .._model import Execution
from .._redact import LineRedactor
from ._common import (
    DEFAULT_SETTLE_SECONDS,
    MAX_LINE_DEPTH,
    Importer,
    ImportReport,
    Mapper,
    Source,
    format_ts,
    nested_type,
    parse_ts,
    read_lines,
    result_of,
    too_deep,
)

__all__ = [
    "ClaudeCodeImporter",
    "ClaudeCodeMapping",
    "default_dir",
    "find_transcripts",
    "import_transcript",
]

NAME = "claude-code"
TASK_TOOLS = frozenset({"Task", "Agent"})
"""Tool names that start a subagent."""
SKIPPED_TYPES = frozenset({"file-history-snapshot", "queue-operation"})

# toolUseResult is Claude Code's own structured copy of a tool's result (for
# an edit it holds the whole original file). Only these small facts are kept.
_DETAIL_STRINGS = frozenset(
    {
        "type",
        "filePath",
        "status",
        "agentId",
        "mode",
        "url",
        "codeText",
        "retrieval_status",
        "returnCodeInterpretation",
        "backgroundTaskId",
    }
)
_INTERRUPTED = "[Request interrupted by user"
_COMMAND_OUTPUT = (
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
)
"""User lines that hold what a slash command or ``!`` shell command printed: not a prompt."""


def default_dir() -> Path:
    """Where Claude Code keeps transcripts: ``~/.claude/projects``.

    ``$CLAUDE_CONFIG_DIR`` replaces ``~/.claude`` when it is set.
    """
    base = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base) if base else Path.home() / ".claude") / "projects"


def find_transcripts(root: Path) -> list[Path]:
    """The transcripts under ``root`` (or ``root`` itself), without subagent files.

    Subagent files are ``<session>/subagents/agent-<id>.jsonl`` (Claude Code
    2.1) or ``agent-<id>.jsonl`` beside the sessions (2.0); they are imported
    with the session they name.
    """
    if root.is_file():
        return [root]
    return sorted(
        p
        for p in root.rglob("*.jsonl")
        if p.parent.name != "subagents" and not p.name.startswith("agent-") and p.is_file()
    )


def import_transcript(
    path: Path,
    out_dir: Path,
    *,
    finished: bool | None = None,
    settle_seconds: float = DEFAULT_SETTLE_SECONDS,
    redact: LineRedactor | bool | None = True,
    **options: Any,
) -> ImportReport:
    """Import what is new in one Claude Code transcript into ``out_dir/<session>.jsonl``.

    Args:
        path: The transcript (``<session id>.jsonl``); its subagents are read
            from ``<session id>/subagents/`` beside it.
        out_dir: The folder of destination sessions (created if missing).
        finished: Whether the transcript is complete, so its last response
            and run can be closed. ``None`` decides by age: unchanged for
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
        ImportStateError: The transcript, destination and cursor disagree.
        OSError: A file cannot be read or written.
    """
    return result_of(
        ClaudeCodeImporter,
        path,
        out_dir,
        path.stem,
        finished=finished,
        settle_seconds=settle_seconds,
        redact=redact,
        **options,
    )


# -- pairing state ---------------------------------------------------------------


@dataclass(slots=True)
class _Response:
    """A model response whose lines may still continue."""

    id: str
    exec_id: str
    parent: str | None
    model: str | None
    request_id: str | None
    usage: dict[str, Any] | None
    stop_reason: str | None
    tools: bool
    ts: datetime | None
    source: Source
    execution: Execution | None = None
    error: dict[str, Any] | None = None
    """What failed, when Claude Code wrote an API error in the model's place."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "exec_id": self.exec_id,
            "parent": self.parent,
            "model": self.model,
            "request_id": self.request_id,
            "usage": self.usage,
            "stop_reason": self.stop_reason,
            "tools": self.tools,
            "ts": format_ts(self.ts),
            "source": self.source,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> _Response:
        return cls(
            id=obj["id"],
            exec_id=obj["exec_id"],
            parent=obj.get("parent"),
            model=obj.get("model"),
            request_id=obj.get("request_id"),
            usage=obj.get("usage"),
            stop_reason=obj.get("stop_reason"),
            tools=bool(obj.get("tools")),
            ts=parse_ts(obj.get("ts")),
            source=obj.get("source") or {},
            error=obj.get("error"),
        )


@dataclass(slots=True)
class AgentContext:
    """The agent a line belongs to: the main agent, or a subagent (an ``agent`` execution)."""

    agent: str | None = None
    agent_parent: str | None = None
    agent_id: str | None = None
    name: str | None = None
    response: _Response | None = None
    request_ts: datetime | None = None
    """When the last input reached this agent: where its next model call starts."""

    @property
    def execution(self) -> Execution | None:
        if self.agent is None:
            return None
        return Execution(self.agent, "agent", 1, self.agent_parent)

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "agent_parent": self.agent_parent,
            "agent_id": self.agent_id,
            "name": self.name,
            "response": None if self.response is None else self.response.to_json(),
            "request_ts": format_ts(self.request_ts),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> AgentContext:
        response = obj.get("response")
        return cls(
            agent=obj.get("agent"),
            agent_parent=obj.get("agent_parent"),
            agent_id=obj.get("agent_id"),
            name=obj.get("name"),
            response=None if response is None else _Response.from_json(response),
            request_ts=parse_ts(obj.get("request_ts")),
        )


@dataclass(slots=True)
class _Call:
    """A tool call waiting for its result."""

    name: str
    parent: str
    agent_id: str | None = None
    agent_type: str | None = None
    prompt: str | None = None
    """A digest of a subagent call's prompt: what its inline sidechain begins with."""
    execution: Execution | None = None


def _details(value: Any) -> Any:
    """The small facts of ``toolUseResult`` worth keeping (never file contents)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    kept = {
        k: v
        for k, v in value.items()
        if type(v) in (bool, int, float) or (k in _DETAIL_STRINGS and isinstance(v, str))
    }
    return kept or None


class ClaudeCodeMapping(Mapper):
    """Maps Claude Code transcript lines to loopscribe records (see the module docs).

    The one mapping of Claude Code lines: :class:`ClaudeCodeImporter` feeds it
    a transcript file and reads subagents from their files; the Claude Agent
    SDK session store (``loopscribe.adapters.claude_agent_sdk``) feeds it the
    entries it receives. A driver gives the subagents' own lines through
    :meth:`_has_own_lines`, :meth:`_map_agent`, :meth:`_compact_agent` and
    :meth:`_unlinked_agents`, feeding them with :meth:`_begin_agent`,
    :meth:`_handle_in` and :meth:`_finish_agent`.
    """

    name = NAME
    anthropic_usage = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.main = AgentContext()
        self.subs: dict[str, AgentContext] = {}
        self.calls: dict[str, _Call] = {}
        self.agent_files: dict[str, list[int]] = {}
        """Per subagent: ``[offset, line, times mapped]`` of its own lines."""
        self.chains: dict[str, str] = {}
        """Inline sidechain lines (Claude Code 1.0) of subagents in flight: uuid -> their key."""
        self.closed: str | None = None
        self.context_run = False
        """The open run began with context lines (a ``summary``, a command's caveat or
        output), no prompt or response yet: the next prompt joins it."""

    # -- where subagents' own lines come from (the driver's) ---------------------

    def _has_own_lines(self, agent_id: str) -> bool:
        """Whether a subagent's lines come apart (its file), not as ``agent_progress`` copies."""
        raise NotImplementedError

    def _map_agent(self, agent_id: str, parent: str | None, name: str | None) -> bool:
        """Map what is new of a subagent's own lines as an ``agent`` execution under ``parent``.

        Returns whether anything was mapped.
        """
        raise NotImplementedError

    def _compact_agent(self, boundary: datetime | None) -> tuple[str | None, datetime | None]:
        """The summarizing subagent of a compaction and when it started, if known."""
        raise NotImplementedError

    def _unlinked_agents(self) -> list[str]:
        """Subagents with own lines that no tool call or compaction claimed, at the end."""
        raise NotImplementedError

    # -- state -------------------------------------------------------------------

    def dump_state(self) -> dict[str, Any]:
        """The pairing state: open responses, subagents in flight, waiting calls, file cursors."""
        return {
            "main": self.main.to_json(),
            "subs": {k: v.to_json() for k, v in self.subs.items()},
            "calls": {
                k: [c.name, c.parent, c.agent_id, c.agent_type, c.prompt]
                for k, c in self.calls.items()
            },
            "chains": self.chains,
            "agent_files": self.agent_files,
            "closed": self.closed,
            "context_run": self.context_run,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`dump_state` saved."""
        if not state:
            return
        self.main = AgentContext.from_json(state.get("main") or {})
        self.subs = {k: AgentContext.from_json(v) for k, v in (state.get("subs") or {}).items()}
        self.calls = {k: _Call(*v) for k, v in (state.get("calls") or {}).items()}
        self.chains = dict(state.get("chains") or {})
        self.agent_files = {k: list(v) for k, v in (state.get("agent_files") or {}).items()}
        self.closed = state.get("closed")
        self.context_run = bool(state.get("context_run"))

    def pending_calls(self) -> int:
        """Tool calls still waiting for a result."""
        return len(self.calls)

    # -- dispatch ----------------------------------------------------------------

    def handle(self, obj: Any, line: int, raw: bytes, source: Source) -> None:
        """Map one line of the main transcript."""
        if type(obj) is not dict:
            self.source_event("non_object", obj, source, self.last_ts)
            return
        ts = self.line_ts(obj.get("timestamp"))
        uuid = obj.get("uuid")
        if uuid is not None:
            source["uuid"] = uuid
        if not self.meta and "sessionId" in obj:
            self.meta = {
                "session_id": obj.get("sessionId"),
                "cwd": obj.get("cwd"),
                "version": obj.get("version"),
                "git_branch": obj.get("gitBranch"),
            }
        kind = obj.get("type")
        if kind == "summary" and not self.dest.run_open:
            self.context_run = True  # a resumed session's summaries: context of the next prompt
        if obj.get("isSidechain") is True and kind in ("user", "assistant"):
            self._sidechain(obj, source, ts)
        elif kind == "assistant":
            self._assistant(self.main, obj, source, ts)
        elif kind == "user":
            self._user(self.main, obj, source, ts)
        elif kind == "progress":
            self._progress(obj, source, ts)
        elif kind == "system":
            self._system(obj, source, ts)
        elif kind in SKIPPED_TYPES:
            self.report.skipped[kind] += 1
        else:
            if kind == "summary":
                self.offer_title(obj.get("summary"), source, ts, summary=True)
            self.source_event(str(kind), obj, source, ts)

    def _handle_in(self, ctx: AgentContext, obj: Any, source: Source, ts: datetime | None) -> None:
        """Map one line of a subagent (from its file or an ``agent_progress`` line)."""
        if type(obj) is not dict:
            self.source_event("non_object", obj, source, ts, ctx.execution)
            return
        uuid = obj.get("uuid")
        if uuid is not None:
            source["uuid"] = uuid
        kind = obj.get("type")
        if kind == "assistant":
            self._assistant(ctx, obj, source, ts)
        elif kind == "user":
            self._user(ctx, obj, source, ts)
        elif kind == "progress":
            data = obj.get("data")
            sub = data.get("type") if isinstance(data, dict) else None
            self.report.skipped[f"progress/{sub}"] += 1
        elif kind in SKIPPED_TYPES:
            self.report.skipped[kind] += 1
        else:
            label = f"system/{obj.get('subtype')}" if kind == "system" else str(kind)
            self.source_event(label, obj, source, ts, ctx.execution)

    # -- messages, model calls, tool calls ---------------------------------------

    def _assistant(
        self, ctx: AgentContext, obj: dict[str, Any], source: Source, ts: datetime | None
    ) -> None:
        self.context_run = False
        msg = obj.get("message")
        if not isinstance(msg, dict):
            self.source_event("assistant/no_message", obj, source, ts, ctx.execution)
            return
        mid = msg.get("id")
        if not isinstance(mid, str) or not mid:
            mid = f"response-{ctx.agent or 'main'}-{source['line']}"
        resp = ctx.response
        if resp is None or resp.id != mid:
            self._end_response(ctx)
            model = msg.get("model")
            request_id = obj.get("requestId")
            exec_id = mid if mid != self.closed else f"{mid}@{source['line']}"
            resp = _Response(
                id=mid,
                exec_id=exec_id,
                parent=ctx.agent,
                model=model if isinstance(model, str) else None,
                request_id=request_id if isinstance(request_id, str) else None,
                usage=None,
                stop_reason=None,
                tools=False,
                ts=ts,
                source=source,
            )
            ctx.response = resp
            request: dict[str, Any] = {"model": resp.model, "provider": "anthropic", "messages": []}
            if resp.request_id is not None:
                request["request_id"] = resp.request_id
            request["source"] = source
            # The call began when its input arrived, not with its first streamed block.
            started = ctx.request_ts
            if started is None or ts is None or started > ts:
                started = ts
            ctx.request_ts = None
            resp.execution = Execution(exec_id, "model", 1, ctx.agent)
            self.emit(ev.MODEL_REQUEST, resp.execution, request, started)
        if obj.get("isApiErrorMessage") is True:
            resp.error = _api_error(obj, msg)
        usage = msg.get("usage")
        if isinstance(usage, dict):
            resp.usage = usage
        stop = msg.get("stop_reason")
        if isinstance(stop, str) and stop:
            resp.stop_reason = stop
        resp.ts = ts
        resp.source = source
        execution = resp.execution
        if execution is None:
            execution = resp.execution = Execution(resp.exec_id, "model", 1, ctx.agent)
        content = msg.get("content")
        tools: list[dict[str, Any]] = []
        others: list[Any] = []
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    tools.append(block)
                else:
                    others.append(block)
        if others or not tools:
            message = {k: v for k, v in msg.items() if k != "usage"}
            if tools:
                message["content"] = others
            self.emit(ev.MESSAGE_END, execution, {"message": message, "source": source}, ts)
            self.report.messages += 1
        for index, block in enumerate(tools):
            tool_id = block.get("id")
            if not isinstance(tool_id, str) or not tool_id:
                tool_id = f"tool-{source['line']}-{index}"
            name = block.get("name")
            name = name if isinstance(name, str) and name else "tool"
            args = block.get("input")
            call = _Call(name, resp.exec_id, execution=Execution(tool_id, "tool", 1, resp.exec_id))
            if name in TASK_TOOLS and isinstance(args, dict):
                kind = args.get("subagent_type")
                call.agent_type = kind if isinstance(kind, str) else None
                call.prompt = _digest(args.get("prompt"))
            self.calls[tool_id] = call
            resp.tools = True
            self.emit(
                ev.TOOL_EXEC_START,
                call.execution,
                {"tool": name, "args": args, "source": source},
                ts,
            )
            self.report.tool_calls += 1

    def _end_response(self, ctx: AgentContext) -> None:
        resp = ctx.response
        if resp is None:
            return
        ctx.response = None
        self.closed = resp.exec_id
        stop = resp.stop_reason
        data: dict[str, Any] = {"model": resp.model, "provider": "anthropic"}
        if resp.usage is not None:
            data["usage"] = resp.usage
        if resp.error is not None:
            data["error"] = resp.error
        elif stop is None:
            # Claude Code writes stop_reason null on every line; what the
            # response did tells it apart.
            data["stop_reason"] = "tool_use" if resp.tools else "end_turn"
            data["stop_reason_inferred"] = True
        else:
            data["stop_reason"] = stop
        if resp.request_id is not None:
            data["request_id"] = resp.request_id
        data["source"] = resp.source
        execution = resp.execution or Execution(resp.exec_id, "model", 1, resp.parent)
        self.emit(ev.MODEL_EXEC_END, execution, data, resp.ts)
        self.report.model_calls += 1
        self.report.add_usage(resp.usage, anthropic=True)

    def _user(
        self, ctx: AgentContext, obj: dict[str, Any], source: Source, ts: datetime | None
    ) -> None:
        msg = obj.get("message")
        if not isinstance(msg, dict):
            self.source_event("user/no_message", obj, source, ts, ctx.execution)
            return
        content = msg.get("content")
        ctx.request_ts = ts
        if isinstance(content, list):
            results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
            if results:
                details = obj.get("toolUseResult") if len(results) == 1 else None
                for block in results:
                    self._tool_result(ctx, block, details, source, ts)
                others = [
                    b
                    for b in content
                    if not (isinstance(b, dict) and b.get("type") == "tool_result")
                ]
                if others:
                    self.emit(
                        ev.MESSAGE_END,
                        ctx.execution,
                        {"message": {**msg, "content": others}, "source": source},
                        ts,
                    )
                    self.report.messages += 1
                return
        main = ctx.agent is None
        self._end_response(ctx)
        if main and obj.get("isCompactSummary"):
            self.dest.annotate(ev.COMPACTION, {"summary": msg, "source": source}, ts)
            return
        text = content if isinstance(content, str) else _first_text(content)
        printed = text is not None and text.lstrip().startswith(_COMMAND_OUTPUT)
        if main and printed and self.title_from == "command":
            # A local command (/clear, /model): it printed and ran no model, so
            # the request that follows titles the session.
            self.title_from = None
        elif main and not obj.get("isMeta") and self.title_from is None:
            self.offer_title(content, source, ts, summary=False)
            if self.title_from == "user" and text is not None and "<command-name>" in text:
                self.title_from = "command"
        interrupted = text is not None and text.startswith(_INTERRUPTED)
        if (
            main
            and not interrupted
            and not printed
            and not obj.get("isMeta")
            and not obj.get("isSidechain")
            and not obj.get("isVisibleInTranscriptOnly")
        ):
            if self.context_run and self.dest.run_open:
                self.context_run = False  # the prompt joins the run its context lines opened
            else:
                self._begin_turn(source, ts)
        elif main and not interrupted and not self.dest.run_open:
            self.context_run = True  # a command's caveat or output: the run opens here
        self.emit(ev.MESSAGE_END, ctx.execution, {"message": msg, "source": source}, ts)
        self.report.messages += 1
        if main and interrupted:
            self._end_turn(ts)

    def _tool_result(
        self,
        ctx: AgentContext,
        block: dict[str, Any],
        details: Any,
        source: Source,
        ts: datetime | None,
    ) -> None:
        tool_id = block.get("tool_use_id")
        call = self.calls.pop(tool_id, None) if isinstance(tool_id, str) else None
        if call is not None and isinstance(tool_id, str):
            agent_id = call.agent_id
            if agent_id is None and isinstance(details, dict):
                found = details.get("agentId")
                agent_id = found if isinstance(found, str) else None
            sub = self.subs.pop(tool_id, None)
            if sub is not None:
                self._end_subagent(sub, source, ts)
                self._forget_chain(tool_id)
            elif agent_id is not None:
                self._map_agent(agent_id, tool_id, call.agent_type)
            execution = call.execution or Execution(tool_id, "tool", 1, call.parent)
            data: dict[str, Any] = {"tool": call.name}
        else:
            if not isinstance(tool_id, str) or not tool_id:
                tool_id = f"result-{source['line']}"
            execution = Execution(tool_id, "tool", 1, ctx.agent)
            data = {"unpaired": True}
            self.report.unpaired_results += 1
        data["result"] = block.get("content")
        data["is_error"] = block.get("is_error") is True
        kept = _details(details)
        if kept is not None:
            data["details"] = kept
        data["source"] = source
        self.emit(ev.TOOL_EXEC_END, execution, data, ts)
        self.report.tool_results += 1

    # -- turns -------------------------------------------------------------------

    def _begin_turn(self, source: Source, ts: datetime | None) -> None:
        self._end_turn(self.record_ts)
        self.begin_run(ts)
        self.context_run = False

    def _end_turn(self, ts: datetime | None) -> None:
        """The turn is over: end its responses, give up on its calls, close its run."""
        self.context_run = False
        self._end_response(self.main)
        for sub in self.subs.values():
            self._end_response(sub)
        self.subs.clear()
        self.chains.clear()
        self.report.unpaired_calls += len(self.calls)
        self.calls.clear()
        if self.dest.run_open:
            self.dest.close_run(ts)

    def finish(self) -> None:
        """Import the subagents still waiting for a result or never linked, then close the turn."""
        for tool_id, call in list(self.calls.items()):
            if call.agent_id is not None and tool_id not in self.subs:
                self._map_agent(call.agent_id, tool_id, call.agent_type)
        for agent_id in self._unlinked_agents():
            self._map_agent(agent_id, None, None)
        self._end_turn(self.record_ts)

    def _system(self, obj: dict[str, Any], source: Source, ts: datetime | None) -> None:
        subtype = obj.get("subtype")
        if subtype == "compact_boundary":
            self._compaction(obj, source, ts)
        elif subtype == "turn_duration":
            self._end_turn(ts)
        else:
            self.source_event(f"system/{subtype}", obj, source, ts)

    # -- subagents and compaction ------------------------------------------------

    def _progress(self, obj: dict[str, Any], source: Source, ts: datetime | None) -> None:
        data = obj.get("data")
        kind = data.get("type") if isinstance(data, dict) else None
        if kind != "agent_progress" or not isinstance(data, dict):
            self.report.skipped[f"progress/{kind}"] += 1
            return
        tool_id = obj.get("parentToolUseID")
        agent_id = data.get("agentId")
        agent_id = agent_id if isinstance(agent_id, str) and agent_id else None
        call = self.calls.get(tool_id) if isinstance(tool_id, str) else None
        if call is not None and call.agent_id is None:
            call.agent_id = agent_id
        if agent_id is not None and self._has_own_lines(agent_id):
            self.report.skipped["progress/agent_progress (in subagent file)"] += 1
            return
        message = data.get("message")
        if not isinstance(tool_id, str) or not isinstance(message, dict):
            self.report.skipped["progress/agent_progress"] += 1
            return
        sub = self.subs.get(tool_id)
        if sub is None:
            exec_id = f"agent-{agent_id or tool_id}"
            name = call.agent_type if call is not None else None
            sub = AgentContext(exec_id, tool_id, agent_id, name or "subagent")
            self.subs[tool_id] = sub
            self._agent_record(ev.AGENT_START, sub, source, ts)
            self.report.subagents += 1
        self._handle_in(sub, message, source, parse_ts(message.get("timestamp")) or ts)

    def _sidechain(self, obj: dict[str, Any], source: Source, ts: datetime | None) -> None:
        """A subagent's line written into the main transcript (Claude Code 1.0).

        Its lines follow their ``parentUuid`` chain from a root line (no parent)
        holding the prompt of the ``Task`` call that started it; that call's
        result ends it, as for ``agent_progress``. A chain no waiting call
        claims is an ``agent`` execution of its own in the turn.
        """
        parent = obj.get("parentUuid")
        uuid = obj.get("uuid")
        found = self.chains.get(parent) if isinstance(parent, str) else None
        sub = None if found is None else self.subs.get(found)
        if found is None or sub is None:
            found = self._sidechain_call(obj.get("message"))
            call = None if found is None else self.calls.get(found)
            if found is None:
                found = f"sidechain-{uuid if isinstance(uuid, str) else source['line']}"
            agent_id = obj.get("agentId")
            agent_id = agent_id if isinstance(agent_id, str) and agent_id else None
            name = call.agent_type if call is not None else None
            parent_call = found if call is not None else None
            sub = AgentContext(
                f"agent-{agent_id or found}", parent_call, agent_id, name or "subagent"
            )
            self.subs[found] = sub
            self._agent_record(ev.AGENT_START, sub, source, ts)
            self.report.subagents += 1
        if isinstance(uuid, str):
            self.chains[uuid] = found
        self._handle_in(sub, obj, source, ts)

    def _sidechain_call(self, message: Any) -> str | None:
        """The waiting subagent call a sidechain's first message answers.

        The one whose prompt it repeats, else the only one waiting.
        """
        content = message.get("content") if isinstance(message, dict) else None
        text = content if isinstance(content, str) else _first_text(content)
        digest = _digest(text)
        waiting = [k for k, c in self.calls.items() if c.name in TASK_TOOLS and k not in self.subs]
        for key in waiting:
            if digest is not None and self.calls[key].prompt == digest:
                return key
        return waiting[0] if len(waiting) == 1 else None

    def _forget_chain(self, key: str) -> None:
        """Drop the sidechain lines of a subagent that ended (the cursor keeps what is open)."""
        if self.chains:
            self.chains = {k: v for k, v in self.chains.items() if v != key}

    def _agent_record(
        self, kind: str, ctx: AgentContext, source: Source, ts: datetime | None
    ) -> None:
        data: dict[str, Any] = {"agent": ctx.name}
        if ctx.agent_id is not None:
            data["agent_id"] = ctx.agent_id
        data["source"] = source
        self.emit(kind, ctx.execution, data, ts)

    def _end_subagent(self, sub: AgentContext, source: Source, ts: datetime | None) -> None:
        self._end_response(sub)
        self._agent_record(ev.AGENT_END, sub, source, ts)

    def _begin_agent(
        self,
        agent_id: str,
        parent: str | None,
        name: str | None,
        source: Source,
        started: datetime | None,
    ) -> AgentContext:
        """Start mapping a subagent's own lines: ``agent_start`` of a new ``agent`` execution.

        A subagent mapped again (its file grew after it was mapped) is another
        execution, ``agent-<id>.2``, ``.3``, ...
        """
        runs = self.agent_files.get(agent_id, [0, 0, 0])[2]
        exec_id = f"agent-{agent_id}" if runs == 0 else f"agent-{agent_id}.{runs + 1}"
        ctx = AgentContext(exec_id, parent, agent_id, name or "subagent")
        self._agent_record(ev.AGENT_START, ctx, source, started)
        self.report.subagents += 1
        return ctx

    def _finish_agent(
        self,
        ctx: AgentContext,
        position: tuple[int, int],
        source: Source,
        ts: datetime | None,
    ) -> None:
        """End a subagent after its last own line; ``position`` is ``(offset, line)`` after it."""
        self._end_subagent(ctx, source, ts)
        agent_id = ctx.agent_id
        assert agent_id is not None
        runs = self.agent_files.get(agent_id, [0, 0, 0])[2]
        self.agent_files[agent_id] = [position[0], position[1], runs + 1]

    def _compaction(self, obj: dict[str, Any], source: Source, ts: datetime | None) -> None:
        self._end_response(self.main)
        self._record_compaction(obj, source, ts)

    def _record_compaction(self, obj: dict[str, Any], source: Source, ts: datetime | None) -> None:
        """A ``context`` execution for a compaction boundary, its summarizing agent inside."""
        uuid = obj.get("uuid")
        exec_id = f"compact-{uuid}" if isinstance(uuid, str) else f"compact-{source['line']}"
        execution = Execution(exec_id, "context")
        meta = obj.get("compactMetadata")
        info: dict[str, Any] = {}
        if isinstance(meta, dict):
            info = {"trigger": meta.get("trigger"), "pre_tokens": meta.get("preTokens")}
        agent_id, started = self._compact_agent(ts)
        self.emit(ev.CONTEXT_TRANSFORM_START, execution, {**info, "source": source}, started or ts)
        if agent_id is not None:
            self._map_agent(agent_id, exec_id, "compact")
        self.emit(ev.CONTEXT_TRANSFORM_END, execution, {**info, "source": source}, ts)
        self.report.compactions += 1


class ClaudeCodeImporter(ClaudeCodeMapping, Importer):
    """Imports a Claude Code transcript file; subagents come from their own files."""

    def __init__(self, source: Path, destination: Path, **options: Any) -> None:
        super().__init__(source, destination, **options)
        self.subagent_dir = self.source.parent / self.source.stem / "subagents"
        self._has_file: dict[str, bool] = {}

    def skip_line(self, raw: bytes) -> str | None:
        """Progress (but agent progress), file-history and queue lines, told apart unparsed."""
        if raw.startswith(b'{"type":"file-history-snapshot"'):
            return "file-history-snapshot"
        if raw.startswith(b'{"type":"queue-operation"'):
            return "queue-operation"
        kind = nested_type(raw, b'"type":"progress","data":')
        if kind is None or kind == b"agent_progress":
            return None
        return f"progress/{kind.decode('ascii', 'replace')}"

    def _has_own_lines(self, agent_id: str) -> bool:
        found = self._has_file.get(agent_id)
        if found is None:
            found = self._has_file[agent_id] = self._agent_path(agent_id).is_file()
        return found

    def _agent_path(self, agent_id: str) -> Path:
        """A subagent's file: in ``<session>/subagents/``, else beside the transcript (2.0)."""
        path = self.subagent_dir / f"agent-{agent_id}.jsonl"
        if not path.is_file():
            beside = self.source.parent / f"agent-{agent_id}.jsonl"
            if beside != self.source and self._names_this_session(beside):
                return beside
        return path

    def _names_this_session(self, path: Path) -> bool:
        """Whether a subagent file beside the transcript belongs to this session.

        Claude Code 2.0 kept every session's subagent files in the project
        folder; a file's lines name the session it ran in.
        """
        return _first_session_id(path) == self.source.stem

    def _map_agent(self, agent_id: str, parent: str | None, name: str | None) -> bool:
        """Import what is new in a subagent's file as an ``agent`` execution under ``parent``."""
        path = self._agent_path(agent_id)
        if not path.is_file():
            return False
        offset, line, _runs = self.agent_files.get(agent_id, [0, 0, 0])
        file = str(path)
        report = self.report
        ctx: AgentContext | None = None
        last_source: Source | None = None
        last_ts: datetime | None = None
        started = _start_ts(path, offset)
        for number, end, raw in read_lines(path, offset, line):
            source: Source = {"file": file, "line": number}
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = raw.decode("utf-8", "replace").rstrip("\n")
                report.invalid_lines += 1
            ts = (parse_ts(obj.get("timestamp")) if isinstance(obj, dict) else None) or last_ts
            if ctx is None:
                ctx = self._begin_agent(agent_id, parent, name, source, started or ts)
            try:
                if too_deep(raw, obj):
                    raise ValueError(f"nested deeper than {MAX_LINE_DEPTH} levels")
                self._handle_in(ctx, obj, source, ts)
            except (LoopscribeError, OSError):
                raise  # the destination's failures, not the line's
            except Exception as exc:
                self.bad_line(path, number, raw, exc)
            report.lines += 1
            report.bytes += len(raw)
            offset, line = end, number
            last_source, last_ts = source, ts
        if ctx is None or last_source is None:
            return False
        self._finish_agent(ctx, (offset, line), last_source, last_ts)
        return True

    def _compact_agent(self, boundary: datetime | None) -> tuple[str | None, datetime | None]:
        """The summarizing subagent of a compaction: the latest new one begun before it."""
        if boundary is None or not self.subagent_dir.is_dir():
            return None, None
        best: tuple[datetime, str] | None = None
        for path in self.subagent_dir.glob("agent-acompact*.jsonl"):
            agent_id = path.stem.removeprefix("agent-")
            if agent_id in self.agent_files:
                continue
            started = _start_ts(path)
            if started is not None and started <= boundary and (best is None or started > best[0]):
                best = (started, agent_id)
        return (None, None) if best is None else (best[1], best[0])

    def _unlinked_agents(self) -> list[str]:
        found: set[str] = set()
        if self.subagent_dir.is_dir():
            found.update(p.stem[6:] for p in self.subagent_dir.glob("agent-*.jsonl"))
        for path in self.source.parent.glob("agent-*.jsonl"):
            if path != self.source and self._names_this_session(path):
                found.add(path.stem[6:])
        return sorted(a for a in found if a not in self.agent_files)


_SESSION_ID = re.compile(rb'"sessionId"\s*:\s*"([^"\\]*)"')
_SESSION_OF: dict[str, str] = {}
"""The session each subagent file beside transcripts names, read once per process."""


def _first_session_id(path: Path) -> str | None:
    """The ``sessionId`` the first line of a transcript file names.

    Claude Code writes it among the first keys of a line: the first 4 KiB
    almost always hold it (at most 64 KiB are read). A project folder of
    Claude Code 2.0 holds every session's subagent files, and each import of
    one of its sessions asks about all of them, so answers are kept.
    """
    key = str(path)
    if key in _SESSION_OF:
        return _SESSION_OF[key]
    found = None
    try:
        with open(path, "rb") as stream:
            head = stream.read(4096)
            line = head.split(b"\n", 1)[0]
            found = _SESSION_ID.search(line)
            if found is None and len(line) == len(head) == 4096:
                found = _SESSION_ID.search((head + stream.read(61440)).split(b"\n", 1)[0])
    except OSError:
        return None
    if found is None:
        return None  # not written yet, or names none: ask again next time
    answer = found.group(1).decode("utf-8", "replace")
    if len(_SESSION_OF) < 100_000:
        _SESSION_OF[key] = answer
    return answer


def _api_error(obj: Mapping[str, Any], msg: Mapping[str, Any]) -> dict[str, Any]:
    """The failure of an API error Claude Code wrote as an assistant line (``isApiErrorMessage``).

    Its ``error`` is a kind (``rate_limit``, ``authentication_failed``) or an
    object, ``apiErrorStatus`` the HTTP status, the text what the user saw.
    """
    found = obj.get("error")
    error: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
    if isinstance(found, str) and found:
        error["type"] = found
    status = obj.get("apiErrorStatus")
    if type(status) is int:
        error.setdefault("status", status)
    if not error:
        error["type"] = "api_error"
    content = msg.get("content")
    text = content if isinstance(content, str) else _first_text(content)
    if text is not None:
        error.setdefault("message", text)
    return error


def _digest(text: Any) -> str | None:
    """A short, stable digest of a prompt (what the cursor keeps instead of the text)."""
    if not isinstance(text, str) or not text:
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _first_text(content: Any) -> str | None:
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                return text if isinstance(text, str) else None
    return None


def _start_ts(path: Path, offset: int = 0) -> datetime | None:
    """When a subagent started: its last line before its first model response.

    A subagent file begins with the messages it was given, some copied with
    their original, older timestamps (a compaction agent gets the hook
    reminders of the conversation); the agent starts with the last of them.
    """
    return start_ts(_parsed(read_lines(path, offset, 0)))


def _parsed(found: Iterator[tuple[int, int, bytes]]) -> Iterator[Any]:
    for _number, _end, raw in found:
        try:
            yield orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue


def start_ts(lines: Iterable[Any]) -> datetime | None:
    """When a subagent started, from its parsed lines: see :func:`_start_ts`.

    ``None`` when its first model response is not among ``lines`` yet and no
    line has a timestamp.
    """
    started: datetime | None = None
    for obj in lines:
        if not isinstance(obj, dict):
            continue
        ts = parse_ts(obj.get("timestamp"))
        if obj.get("type") == "assistant":
            return started or ts
        if ts is not None and (started is None or ts > started):
            started = ts
    return started
