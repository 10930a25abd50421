"""Import coding-agent transcripts into loopscribe sessions.

* :mod:`loopscribe.importers.claude_code` reads Claude Code transcripts
  (``~/.claude/projects/<project>/<session>.jsonl`` and their subagents);
* :mod:`loopscribe.importers.codex` reads OpenAI Codex CLI rollouts
  (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Both stream the transcript, write one destination session per transcript
(``<out>/<name>.jsonl``) and keep a cursor beside it
(``<out>/<name>.jsonl.import-cursor``), so importing again appends only
what is new and never writes a record twice. Secrets are removed from what
they write unless told otherwise (``redact=``, by default
``Redactor.default()``). See ``docs/importers.md`` for what is mapped, what
is not, and why.
"""

from typing import TYPE_CHECKING

from .._lazy import listing, loader

if TYPE_CHECKING:
    from ._cursor import CURSOR_SUFFIX, Cursor, ImportStateError
    from ._mapper import SOURCE_EVENT
    from ._report import ImportReport

__getattr__ = loader(
    __name__,
    {
        "._cursor": ("CURSOR_SUFFIX", "Cursor", "ImportStateError"),
        "._mapper": ("SOURCE_EVENT",),
        "._report": ("ImportReport",),
    },
    globals(),
)
"""Each name imported on first use (``loopscribe._lazy``)."""

__all__ = ["CURSOR_SUFFIX", "SOURCE_EVENT", "Cursor", "ImportReport", "ImportStateError"]

__dir__ = listing(globals())
