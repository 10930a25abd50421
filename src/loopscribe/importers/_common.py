"""What every transcript importer shares, in one place to import it from.

Each concept lives in its own module: the source's lines (``_lines``), the
report (``_report``), the cursor (``_cursor``), the destination session
(``_destination``), the mapping state machine (``_mapper``), the import of
one file (``_importer``) and session titles (``_titles``). This module
re-exports their names for the importers, the CLI and the Claude Agent SDK
store.
"""

from __future__ import annotations

from ._cursor import CURSOR_SUFFIX, CURSOR_VERSION, Cursor, ImportStateError, cursor_path
from ._destination import LEFTOVER_SUFFIX, Destination, Write, import_redactor
from ._importer import DEFAULT_SETTLE_SECONDS, Importer, result_of
from ._lines import (
    MAX_LINE_DEPTH,
    format_ts,
    has_reserved_key,
    head_digest,
    nested_type,
    parse_ts,
    read_lines,
    strip_reserved,
    too_deep,
)
from ._mapper import SOURCE_EVENT, Mapper, Source
from ._report import ImportReport
from ._titles import TITLE_CHARS, title_text

__all__ = [
    "CURSOR_SUFFIX",
    "CURSOR_VERSION",
    "DEFAULT_SETTLE_SECONDS",
    "LEFTOVER_SUFFIX",
    "MAX_LINE_DEPTH",
    "SOURCE_EVENT",
    "TITLE_CHARS",
    "Cursor",
    "Destination",
    "ImportReport",
    "ImportStateError",
    "Importer",
    "Mapper",
    "Source",
    "Write",
    "cursor_path",
    "format_ts",
    "has_reserved_key",
    "head_digest",
    "import_redactor",
    "nested_type",
    "parse_ts",
    "read_lines",
    "result_of",
    "strip_reserved",
    "title_text",
    "too_deep",
]
