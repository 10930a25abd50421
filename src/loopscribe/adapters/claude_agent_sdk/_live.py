"""The Claude Code mapping, driven by the entries a session store receives.

:class:`~loopscribe.importers.claude_code.ClaudeCodeMapping` is the one
mapping of Claude Code transcript lines; the importer feeds it files. Here it
is fed the entries the Claude Agent SDK mirrors, key by key, as they arrive:
the main transcript's entries go straight to it, and a subagent's entries
(``subpath`` ``subagents/agent-<id>``) are mapped as an ``agent`` execution
under the tool call that started it, as soon as that call is known.

What differs from reading files is only *when* a subagent's lines are there:

* The SDK flushes a batch per file it coalesced, main transcript first, so a
  ``Task`` tool result, or a compaction boundary, often arrives before the
  subagent's own lines, or before their last ones. That entry and the main
  transcript's entries after it then wait (they are stored at once, and mapped
  in order) until more of the subagent's lines have come in the batches that
  follow, or until the next batch of the main transcript, or for
  ``settle_seconds``: the records, their order and their runs are those of an
  import of the finished files.
* A subagent's ``agent_start`` carries the time of its last line before its
  first model response (as the importer computes it from the file), so its
  lines are held until that response, or its end, has arrived.
* ``agent_progress`` copies of a subagent's messages are never mapped: the
  SDK mirrors every subagent's own transcript, which is mapped instead.
* ``agent_metadata`` entries (the SDK's copy of a subagent's ``.meta.json``)
  name the tool call that started the subagent; they are counted in
  ``report.skipped``, not recorded (the verbatim entry is kept all the same).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...importers._destination import Destination
from ...importers._lines import parse_ts
from ...importers._mapper import Source
from ...importers._report import ImportReport
from ...importers.claude_code import AgentContext, ClaudeCodeMapping, start_ts

__all__ = ["LiveClaudeCode", "agent_id_of"]

AGENT_METADATA = "agent_metadata"


def agent_id_of(subpath: str) -> str:
    """The subagent ID of a ``subpath`` (``subagents/agent-<id>`` gives ``<id>``)."""
    return subpath.rsplit("/", 1)[-1].removeprefix("agent-")


@dataclass(slots=True)
class _Agent:
    """A subagent whose own lines arrive through its ``subpath``."""

    agent_id: str
    file: str
    held: list[tuple[Any, Source, datetime | None]] = field(default_factory=list)
    """Lines received and not mapped yet."""
    parent: str | None = None
    name: str | None = None
    parent_is_call: bool = False
    """The parent is a tool call: its result ends the subagent."""
    ended: bool = False
    """What started it has ended: map what comes and end it at the end of the batch."""
    ctx: AgentContext | None = None
    line: int = 0
    last_source: Source | None = None
    last_ts: datetime | None = None


class LiveClaudeCode(ClaudeCodeMapping):
    """The Claude Code mapping fed entry by entry, main transcript and subagents apart.

    Args:
        report: Counts what the mapping did.
        dest: Where its records go.
        main_file: The name the main transcript's ``source.file`` carries;
            a subagent's is ``<main_file without .jsonl>/<subpath>.jsonl``.
    """

    def __init__(self, report: ImportReport, dest: Destination, main_file: str) -> None:
        super().__init__(report)
        self.dest = dest
        self.main_file = main_file
        self._base = main_file.removesuffix(".jsonl")
        self.agents: dict[str, _Agent] = {}
        self._expected: dict[str, int] = {}
        """Subagents whose tool result heads the paused main entries: lines received then."""
        self._held_compactions: list[tuple[dict[str, Any], Source, datetime | None]] = []
        self._compact_lines: dict[str, int] = {}
        """Lines of the unclaimed summarizing agents when the first held compaction came."""
        """Compaction boundaries whose summarizing agent has not arrived yet."""
        self._paused: deque[tuple[Any, int, str | None, bool]] = deque()
        """Main transcript entries waiting, in order, for the subagents above.

        Each with whether its own tool results were looked at already.
        """

    # -- feeding -----------------------------------------------------------------

    def feed_main(self, obj: Any, line: int, invalid: str | None = None) -> None:
        """Map one entry of the main transcript (``invalid``: the text of an unencodable one)."""
        self.report.lines += 1
        checked = not self._paused
        if checked and invalid is None:
            # A subagent's tool result: the rest of its lines come in the batches
            # right after (the SDK sends the main transcript first).
            self._expected.update(self._result_agents(obj))
        if self._paused or self._waiting:
            self._paused.append((obj, line, invalid, checked))
            return
        self._map_main(obj, line, invalid)

    def _map_main(self, obj: Any, line: int, invalid: str | None) -> None:
        source: Source = {"file": self.main_file, "line": line}
        if invalid is not None:
            self.report.invalid_lines += 1
            self.source_event("invalid_line", invalid, source, self.last_ts)
            return
        self.handle(obj, line, b"", source)

    def feed_agent(self, subpath: str, obj: Any, line: int, invalid: str | None = None) -> None:
        """Take one entry of a subagent's transcript; map it once its place is known."""
        agent_id = agent_id_of(subpath)
        agent = self._agent(agent_id, subpath)
        self.report.lines += 1
        source: Source = {"file": agent.file, "line": line}
        if invalid is not None:
            self.report.invalid_lines += 1
            obj = invalid
        elif type(obj) is dict and obj.get("type") == AGENT_METADATA:
            self.report.skipped[AGENT_METADATA] += 1
            tool_id = obj.get("toolUseId")
            if agent.parent is None and isinstance(tool_id, str) and tool_id:
                call = self.calls.get(tool_id)
                kind = obj.get("agentType")
                self._link(agent, tool_id, call.agent_type if call else None, call is not None)
                if agent.name is None and isinstance(kind, str):
                    agent.name = kind
            self._advance(agent)
            return
        ts = (parse_ts(obj.get("timestamp")) if type(obj) is dict else None) or agent.last_ts
        agent.held.append((obj, source, ts))
        agent.line = line
        agent.last_ts = ts
        self._advance(agent)

    def begin_batch(self, subpath: str | None) -> None:
        """One ``append`` begins; a main transcript's batch gives up on older compactions.

        A compaction's summarizing agent comes in the batch right after the one
        holding its boundary (or before it): one still missing then never comes.
        """
        if subpath is None:
            # What the main transcript waited for did not come with the batches
            # after it: give up waiting, and go on.
            self.give_up()

    def give_up(self) -> None:
        """Stop waiting for subagents' lines: map the paused main entries now."""
        self._expected.clear()
        self._record_held_compactions()
        while self._paused:
            obj, line, invalid, _ = self._paused.popleft()
            self._map_main(obj, line, invalid)

    @property
    def pending(self) -> bool:
        """Whether main entries (or a compaction) wait for subagents' lines to arrive."""
        return bool(self._paused or self._held_compactions)

    def end_batch(self) -> None:
        """One ``append`` is done: end the subagents whose tool call already has its result."""
        if self._held_compactions and self._compact_candidates() != self._compact_lines:
            # More of a summarizing agent came after the boundary: its lines are here.
            self._record_held_compactions()
        for agent in self.agents.values():
            if agent.parent_is_call and agent.parent not in self.calls:
                agent.ended = True
            if agent.ended and agent.held:
                self._advance(agent, force=True)
            if agent.ended and agent.ctx is not None:
                self._finish(agent)
        self._resume()

    @property
    def _waiting(self) -> bool:
        """Whether main entries must wait for subagents' lines that the main transcript expects."""
        return bool(self._expected or self._held_compactions)

    def _resume(self) -> None:
        """Map the paused main entries until one makes the mapping wait again."""
        self._expected = {a: n for a, n in self._expected.items() if self._lines_of(a) == n}
        while self._paused and not self._waiting:
            obj, line, invalid, checked = self._paused.popleft()
            if not checked and invalid is None:
                self._expected.update(self._result_agents(obj))
                if self._expected:
                    self._paused.appendleft((obj, line, invalid, True))
                    return
            self._map_main(obj, line, invalid)

    def _result_agents(self, obj: Any) -> dict[str, int]:
        """The unfinished subagents a main entry's tool results end, with their lines so far.

        The entry waits until more of their lines arrive (they were still on
        their way), or until the next batch of the main transcript.
        """
        if type(obj) is not dict or obj.get("type") != "user":
            return {}
        message = obj.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            return {}
        ids = [
            b.get("tool_use_id")
            for b in content
            if isinstance(b, dict) and b.get("type") == "tool_result"
        ]
        details = obj.get("toolUseResult") if len(ids) == 1 else None
        missing: dict[str, int] = {}
        for tool_id in ids:
            call = self.calls.get(tool_id) if isinstance(tool_id, str) else None
            if call is None:
                continue
            agent_id = call.agent_id
            if agent_id is None and isinstance(details, dict):
                found = details.get("agentId")
                agent_id = found if isinstance(found, str) and found else None
            if agent_id is not None and agent_id not in self.agent_files:
                missing[agent_id] = self._lines_of(agent_id)
        return missing

    def _lines_of(self, agent_id: str) -> int:
        """How many own lines of a subagent have arrived."""
        agent = self.agents.get(agent_id)
        return 0 if agent is None else agent.line

    # -- the mapping's hooks -------------------------------------------------------

    def _has_own_lines(self, agent_id: str) -> bool:
        # The SDK mirrors every subagent's transcript: agent_progress copies are redundant.
        return True

    def _map_agent(self, agent_id: str, parent: str | None, name: str | None) -> bool:
        agent = self._agent(agent_id, f"subagents/agent-{agent_id}")
        if agent.parent is None:
            self._link(agent, parent, name, False)
        agent.ended = True
        self._advance(agent, force=True)
        if agent.ctx is None:
            return False
        self._finish(agent)
        return True

    def _compaction(self, obj: dict[str, Any], source: Source, ts: datetime | None) -> None:
        self._end_response(self.main)
        # Its summarizing agent, or the rest of it, may come after the boundary
        # (the SDK sends the main transcript first): record it once more of the
        # agent's lines arrive, or with the next batch of the main transcript.
        if not self._held_compactions:
            self._compact_lines = self._compact_candidates()
        self._held_compactions.append((obj, source, ts))

    def _compact_candidates(self) -> dict[str, int]:
        """Lines received of each summarizing agent that no compaction claimed yet."""
        return {
            a.agent_id: a.line
            for a in self.agents.values()
            if a.agent_id.startswith("acompact") and a.parent is None
        }

    def _record_held_compactions(self) -> None:
        held, self._held_compactions = self._held_compactions, []
        for obj, source, ts in held:
            self._record_compaction(obj, source, ts)

    def _compact_agent(self, boundary: datetime | None) -> tuple[str | None, datetime | None]:
        best: tuple[datetime, str] | None = None
        if boundary is not None:
            for agent in self.agents.values():
                if (
                    not agent.agent_id.startswith("acompact")
                    or agent.parent is not None
                    or not agent.held
                ):
                    continue
                started = start_ts(obj for obj, _, _ in agent.held)
                if (
                    started is not None
                    and started <= boundary
                    and (best is None or started > best[0])
                ):
                    best = (started, agent.agent_id)
        return (None, None) if best is None else (best[1], best[0])

    def _unlinked_agents(self) -> list[str]:
        return sorted(a.agent_id for a in self.agents.values() if a.parent is None and a.held)

    # -- subagents -----------------------------------------------------------------

    def _agent(self, agent_id: str, subpath: str) -> _Agent:
        agent = self.agents.get(agent_id)
        if agent is None:
            agent = self.agents[agent_id] = _Agent(agent_id, f"{self._base}/{subpath}.jsonl")
        return agent

    def _link(self, agent: _Agent, parent: str | None, name: str | None, is_call: bool) -> None:
        agent.parent = parent
        agent.name = name
        agent.parent_is_call = is_call

    def _advance(self, agent: _Agent, *, force: bool = False) -> None:
        """Map the held lines of a subagent whose place is known.

        Its ``agent_start`` waits for its first model response (which fixes its
        start time) unless ``force``: all its lines are there.
        """
        if agent.parent is None:
            self._find_parent(agent)
            if agent.parent is None:
                return
        if agent.ctx is None:
            if not agent.held:
                return
            lines = [obj for obj, _, _ in agent.held]
            if not force and not any(_is_response(obj) for obj in lines):
                return  # its start is the last line before its first response
            _, first_source, first_ts = agent.held[0]
            started = start_ts(lines)
            agent.ctx = self._begin_agent(
                agent.agent_id, agent.parent, agent.name, first_source, started or first_ts
            )
        ctx = agent.ctx
        for obj, source, ts in agent.held:
            self._handle_in(ctx, obj, source, ts)
            agent.last_source = source
        agent.held.clear()

    def _find_parent(self, agent: _Agent) -> None:
        for tool_id, call in self.calls.items():
            if call.agent_id == agent.agent_id:
                self._link(agent, tool_id, call.agent_type, True)
                return

    def _finish(self, agent: _Agent) -> None:
        ctx = agent.ctx
        assert ctx is not None
        assert agent.last_source is not None
        agent.ctx = None
        self._finish_agent(ctx, (0, agent.line), agent.last_source, agent.last_ts)


def _is_response(obj: Any) -> bool:
    return type(obj) is dict and obj.get("type") == "assistant"
