"""Tables that fit the terminal: numbers and IDs whole, names and paths shortened with …."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

__all__ = ["clip_left", "fitted_table", "print_in_parts", "short_count"]

_PART_ROWS = 200
"""How many rows :func:`print_in_parts` renders at a time."""


def print_in_parts(console: Console, table: Table) -> None:
    """Print ``table`` a part of its rows at a time, each column as wide as in the whole table.

    ``console.print`` renders a whole table before writing any of it: for
    thousands of rows that is tens of MiB of cells and pieces held at once.
    Each part here is a table of the same columns, widened to the widest cell
    of the whole table, so the parts line up as the whole table would. A table
    wider than the terminal (whose columns rich shrinks) is printed whole.
    """
    unbounded = console.options.update_width(1 << 20)
    if (
        table.row_count <= _PART_ROWS
        or Measurement.get(console, unbounded, table).maximum > console.options.max_width
    ):
        console.print(table)
        return
    widths = [_width(console, column) for column in table.columns]
    rows = table.row_count
    for start in range(0, max(rows, 1), _PART_ROWS):
        part = Table(
            box=table.box,
            show_header=table.show_header and start == 0,
            show_edge=table.show_edge,
            pad_edge=table.pad_edge,
            collapse_padding=table.collapse_padding,
            padding=table.padding,
        )
        for column, width in zip(table.columns, widths, strict=True):
            cells = list(column.cells)[start : start + _PART_ROWS]
            part.columns.append(replace(column, width=width, _cells=cells))
        part.rows = table.rows[start : start + _PART_ROWS]
        console.print(part)


def _width(console: Console, column: Column) -> int:
    """The widest line of ``column``'s header and cells, as the terminal shows them."""
    widest = column.min_width or 0
    for cell in (column.header, *column.cells):
        text = console.render_str(cell) if isinstance(cell, str) else cell
        if isinstance(text, Text):
            widest = max(widest, *(cell_len(line) for line in text.plain.split("\n")))
    return widest if column.max_width is None else min(widest, column.max_width)


def clip_left(text: str, width: int) -> str:
    """``text`` cut from the left to ``width`` characters: a path keeps its file name."""
    if len(text) <= width:
        return text
    return "…" + text[len(text) - width + 1 :] if width > 1 else "…"


def fitted_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    flexible: Sequence[int],
    paths: Sequence[int] = (),
    title: str | None = None,
) -> Table:
    """A table of plain-text cells no wider than ``width``.

    Every column but the ``flexible`` ones keeps its widest cell whole and
    right-aligned (numbers, IDs). The flexible ones share the rest: a
    ``paths`` column is cut from the left (…/file.jsonl), another from the right.
    """
    fixed = [
        max(
            [len(part) for cell in (headers[i], *(r[i] for r in rows)) for part in cell.split("\n")]
        )
        for i in range(len(headers))
    ]
    spare = width - sum(w for i, w in enumerate(fixed) if i not in flexible) - 2 * len(headers)
    share = max(8, spare // max(1, len(flexible)))
    table = Table(
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
        pad_edge=False,
        title=title,
        title_justify="left",
    )
    for i, header in enumerate(headers):
        if i in flexible:
            table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=share)
        else:
            table.add_column(header, justify="right", no_wrap=True, min_width=fixed[i])
    for row in rows:
        table.add_row(
            *(escape(clip_left(c, share) if i in paths else c) for i, c in enumerate(row))
        )
    return table


def short_count(n: int) -> str:
    """A count short enough for a table column, its digits never broken: 950, 12.4k, 1.39M."""
    if n < 10_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"
