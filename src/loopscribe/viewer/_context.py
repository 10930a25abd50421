"""The context of a model call recorded without its messages, derived from the conversation.

An imported transcript (Claude Code, Codex) holds only the conversation, so
its ``model_request`` records carry the model and request ID but no
messages. What the model saw is still in the file: the committed messages
(``message_end``) of the call's own conversation (the top level's, or a
nested agent's such as a Claude Code subagent's) since that conversation's
last ``compaction`` (its summary first), up to the request.
:func:`derived_context` reads exactly those, the same messages
:func:`loopscribe.otel.resolve_reference` returns for the call's
``gen_ai.input.messages_ref``, so the viewer shows an imported call with its
context, labelled as derived rather than recorded.

The fold indexes the seqs of ``message_end`` and ``compaction`` records per
conversation (:attr:`SessionTimeline.scoped_commits`), so a call's context
is found by bisection and read record by record with ``os.pread``, never by
scanning the file.
"""

from __future__ import annotations

import bisect
import os
from array import array
from collections.abc import Mapping
from typing import Any, Final

import orjson

from .. import events as ev
from .._errors import FormatError
from .._safeopen import open_session_fd
from .._timeline import SessionTimeline
from ._clip import BODY_BUDGET_CHARS, STRING_LIMIT_CHARS, Clipped, clip

__all__ = ["CONTEXT_MESSAGES", "DERIVED_FROM", "derived_context", "has_messages"]

CONTEXT_MESSAGES: Final = 200
"""Committed messages one view of a call's context shows at most: the latest ones."""
DERIVED_FROM: Final = "conversation"
"""The ``derived_from`` value of a context read from the committed conversation."""
_NONE: Final = array("q")


def has_messages(data: Any) -> bool:
    """Whether a ``model_request``'s data records the messages it sent."""
    if not isinstance(data, Mapping):
        return False
    messages = data.get("messages")
    return isinstance(messages, list) and bool(messages)


def derived_context(
    timeline: SessionTimeline,
    seq: int,
    *,
    seqs_only: bool = False,
    string_limit: int | None = STRING_LIMIT_CHARS,
    budget: int = BODY_BUDGET_CHARS,
    limit: int = CONTEXT_MESSAGES,
) -> dict[str, Any]:
    """The committed messages that formed the context of the model call at record ``seq``.

    Args:
        timeline: The session's fold (its record offsets and the commit index).
        seq: The ``model_request`` record's seq; only records before it count.
        seqs_only: Give the record seqs without reading the messages (a
            report, which embeds those records anyway, looks them up itself).
        string_limit: Longest string kept whole (``None``: keep every body whole).
        budget: String characters kept across the messages.
        limit: The latest committed messages to show at most.

    Returns:
        ``derived_from`` (``"conversation"``), ``summary_seq`` (the
        compaction whose summary opens the context, or ``None``), ``seqs``
        (the ``message_end`` records shown, oldest first), ``omitted``
        (earlier committed messages not shown, past ``limit``), and unless
        ``seqs_only``: ``messages`` (the summary as a system message, then
        each committed message, clipped) and ``cuts`` (paths from the
        record root, under ``["context", "messages"]``).

    Raises:
        FormatError: A record is not where the fold saw it (the file changed).
        OSError: The file cannot be read.
    """
    scope = timeline.request_scopes.get(seq)
    compactions = timeline.scoped_compactions.get(scope, _NONE)
    at = bisect.bisect_left(compactions, seq)
    summary_seq = compactions[at - 1] if at else None
    commits = timeline.scoped_commits.get(scope, _NONE)
    first = bisect.bisect_right(commits, -1 if summary_seq is None else summary_seq)
    last = bisect.bisect_left(commits, seq)
    shown = max(first, last - max(limit, 0))
    out: dict[str, Any] = {
        "derived_from": DERIVED_FROM,
        "summary_seq": summary_seq,
        "seqs": list(commits[shown:last]),
        "omitted": shown - first,
    }
    if seqs_only:
        return out
    messages: list[Any] = []
    wanted = ([] if summary_seq is None else [summary_seq]) + out["seqs"]
    fd = open_session_fd(timeline.path)
    try:
        for number in wanted:
            data = _data(timeline, fd, number)
            if number == summary_seq:
                summary = data.get("summary")
                if summary is not None:
                    messages.append(
                        {"role": "system", "content": summary}
                        if isinstance(summary, str)
                        else summary
                    )
            else:
                messages.append(data.get("message"))
    finally:
        os.close(fd)
    cut = (
        Clipped(messages)
        if string_limit is None
        else clip(messages, string_limit=string_limit, budget=budget)
    )
    out["messages"] = cut.value
    out["cuts"] = [{**c, "path": ["context", "messages", *c["path"]]} for c in cut.cuts]
    return out


def _data(timeline: SessionTimeline, fd: int, seq: int) -> Mapping[str, Any]:
    where = timeline.locate(seq)
    raw = b"" if where is None else os.pread(fd, where[1], where[0])
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if (
        not isinstance(obj, dict)
        or obj.get("seq") != seq
        or obj.get("type")
        not in (
            ev.MESSAGE_END,
            ev.COMPACTION,
        )
    ):
        raise FormatError(
            f"{timeline.path}: record {seq} is not where the index saw it; the file was "
            "replaced or changed outside loopscribe (reload the page)",
            path=timeline.path,
        )
    data = obj.get("data")
    return data if isinstance(data, Mapping) else {}
