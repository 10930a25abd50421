"""The Claude Code mapping: transcript lines to records (messages, calls, turns, subagents)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .. import events as ev
from .._model import Execution
from ._claude_state import (
    _COMMAND_OUTPUT,
    _INTERRUPTED,
    NAME,
    SKIPPED_TYPES,
    TASK_TOOLS,
    AgentContext,
    _api_error,
    _Call,
    _details,
    _digest,
    _first_text,
    _Response,
)
from ._lines import parse_ts
from ._mapper import Mapper, Source


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
