"""Text from session files, made safe to print on a terminal.

Session files, imported transcripts and file names are data someone else may
have written. A title, a model name, a message or a file name holding
``ESC [ 2 J``, an OSC title or link sequence, a carriage return or a
right-to-left override would, printed raw, clear the screen, retitle the
window, plant a link, or make a line read other than it is. The command line
prints every string through :func:`printable`, which shows each such
character as its escape (``\\x1b``, ``\\u202e``) instead of sending it.
Newlines and tabs stay: messages have lines.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from rich.console import Console
from rich.highlighter import JSONHighlighter
from rich.progress import ProgressColumn, Task
from rich.text import Text

_UNSAFE = [
    *(code for code in range(0x20) if chr(code) not in "\n\t"),  # C0 controls: ESC, BEL,
    # backspace, carriage return, ... (newlines and tabs stay: messages have lines)
    0x7F,  # DEL
    *range(0x80, 0xA0),  # C1 controls: CSI, OSC, ... as one character
    0x061C,  # Arabic letter mark
    0x200E,  # left-to-right and right-to-left marks
    0x200F,
    *range(0x202A, 0x202F),  # bidirectional embeddings and overrides
    *range(0x2066, 0x206A),  # bidirectional isolates
    0x2028,  # line and paragraph separators
    0x2029,
]
_ESCAPES = str.maketrans(
    {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in _UNSAFE}
)
_JSON_ESCAPES = str.maketrans({code: f"\\u{code:04x}" for code in _UNSAFE})
"""Inside JSON strings json.dumps escapes C0 itself; outside them newlines indent."""


def printable(text: str) -> str:
    """``text`` with every terminal control character shown as its escape."""
    return text.translate(_ESCAPES)


def printable_json(data: Any) -> Text:
    """``data`` as indented, highlighted JSON, each control character a ``\\u`` escape.

    What rich's ``print_json`` shows, except that it leaves C1 controls and
    bidirectional overrides raw (JSON needs only C0 escaped).
    """
    text = json.dumps(data, indent=2, ensure_ascii=False).translate(_JSON_ESCAPES)
    return JSONHighlighter()(Text(text))


class SafeConsole(Console):
    """A rich ``Console`` that prints every string it is given through :func:`printable`.

    Strings reach the terminal through ``render_str``: printed ones, table
    cells, rule titles. loopscribe's own styling is not text, so it stays.
    """

    def render_str(self, text: str, *args: Any, **kwargs: Any) -> Text:
        """Render ``text`` as rich does, its control characters shown as escapes."""
        return super().render_str(printable(text), *args, **kwargs)


class DescriptionColumn(ProgressColumn):
    """A progress bar's task description (a file name, say) as plain, printable text."""

    def render(self, task: Task) -> Text:
        """The description, markup and control characters shown as they are."""
        return Text(printable(task.description))


class PrintableFormatter(logging.Formatter):
    """A log formatter whose lines carry no terminal control characters."""

    def format(self, record: logging.LogRecord) -> str:
        """The formatted record, through :func:`printable`."""
        return printable(super().format(record))
