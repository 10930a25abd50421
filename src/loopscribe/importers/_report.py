"""What one import of one transcript did: :class:`ImportReport`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(slots=True)
class ImportReport:
    """What one import of one transcript did.

    Token counts follow the OpenTelemetry GenAI conventions: ``input_tokens``
    includes cached prompt tokens (read and written), which are also given
    apart. Usage repeated across the lines of one response is counted once.
    """

    importer: str
    source: Path
    destination: Path
    session_id: str | None = None
    lines: int = 0
    """Source lines read (main transcript and subagent files)."""
    bytes: int = 0
    """Source bytes read."""
    records: int = 0
    """Records written to the destination."""
    model_calls: int = 0
    messages: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    unpaired_calls: int = 0
    """Tool calls that will never get a result (their turn ended without one)."""
    unpaired_results: int = 0
    """Tool results whose call was not seen."""
    pending_calls: int = 0
    """Tool calls still waiting for a result when this import stopped."""
    subagents: int = 0
    compactions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    invalid_lines: int = 0
    """Complete source lines that were not JSON objects (kept as source events)."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Source lines not recorded on purpose, by type (see docs/importers.md)."""
    unknown: Counter[str] = field(default_factory=Counter)
    """Source lines of types the importer does not know, kept as ``source_event`` records."""
    finished: bool = False
    """The transcript was taken as finished: its last run is closed."""
    stopped: bool = False
    """The import was asked to stop early; the next import continues."""
    error: str | None = None
    """The first source line that could not be imported (file and line), if any; the
    line is kept as an ``invalid_line`` source event and the import goes on."""
    bad_lines: int = 0
    """Source lines that could not be imported (see :attr:`error`)."""

    @property
    def up_to_date(self) -> bool:
        """Nothing new was found in the transcript."""
        return self.records == 0 and self.lines == 0

    def add_usage(self, usage: Mapping[str, Any] | None, *, anthropic: bool) -> None:
        """Count one response's usage."""
        if not usage:
            return
        inp = _int(usage.get("input_tokens"))
        out = _int(usage.get("output_tokens"))
        if anthropic:
            read_ = _int(usage.get("cache_read_input_tokens"))
            created = _int(usage.get("cache_creation_input_tokens"))
            inp += read_ + created
        else:
            read_ = _int(usage.get("cached_input_tokens"))
            created = 0
        self.input_tokens += inp
        self.output_tokens += out
        self.cache_read_tokens += read_
        self.cache_creation_tokens += created

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        return {
            "importer": self.importer,
            "source": str(self.source),
            "destination": str(self.destination),
            "session_id": self.session_id,
            "lines": self.lines,
            "bytes": self.bytes,
            "records": self.records,
            "model_calls": self.model_calls,
            "messages": self.messages,
            "tool_calls": self.tool_calls,
            "tool_results": self.tool_results,
            "unpaired_calls": self.unpaired_calls,
            "unpaired_results": self.unpaired_results,
            "pending_calls": self.pending_calls,
            "subagents": self.subagents,
            "compactions": self.compactions,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_creation_tokens": self.cache_creation_tokens,
            "invalid_lines": self.invalid_lines,
            "skipped": dict(sorted(self.skipped.items())),
            "unknown": dict(sorted(self.unknown.items())),
            "finished": self.finished,
            "stopped": self.stopped,
            "error": self.error,
            "bad_lines": self.bad_lines,
        }


def _int(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0
