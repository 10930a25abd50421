"""Whose conversation a record belongs to: the top level's, or a nested agent's.

A sub-agent (a Claude Code ``Task``, an agent used as a tool) talks to its
model in a context of its own: its prompt and its own turns, not the
conversation of the agent that started it. Its records sit under an
``agent`` execution that has a parent; everything else belongs to the top
level (a top-level ``agent`` execution, which has no parent, included).
"""

from __future__ import annotations

from ._model import Execution

__all__ = ["AgentScopes"]


class AgentScopes:
    """Folds executions in file order and tells each record's conversation scope."""

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope: dict[str, str | None] = {}

    def scope(self, execution: Execution | None) -> str | None:
        """The id of the nested agent ``execution`` belongs to (itself included); ``None``: top.

        A parent starts before its children, so one look-up per record is
        enough, and a damaged file's cycle cannot loop.
        """
        if execution is None:
            return None
        known = self._scope.get(execution.id, False)
        if known is not False:
            return known  # type: ignore[return-value]
        if execution.kind == "agent" and execution.parent_id is not None:
            scope: str | None = execution.id
        else:
            scope = None if execution.parent_id is None else self._scope.get(execution.parent_id)
        self._scope[execution.id] = scope
        return scope
