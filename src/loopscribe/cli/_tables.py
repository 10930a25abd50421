"""Tables that fit the terminal: numbers and IDs whole, names and paths shortened with …."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.markup import escape
from rich.table import Table

__all__ = ["clip_left", "fitted_table", "short_count"]


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
