"""A long table printed part by part looks exactly as the whole table would."""

from __future__ import annotations

import io

import pytest
from rich import box
from rich.markup import escape
from rich.table import Table

from loopscribe.cli import _tables
from loopscribe.cli._tables import print_in_parts
from loopscribe.cli._terminal import SafeConsole


def _table(rows: int) -> Table:
    # The stats table's shape: minimum widths, an ellipsised name column, styled
    # cells, two-line headers; names with wide characters and escaped markup.
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("run", no_wrap=True, min_width=8)
    table.add_column("agent", overflow="ellipsis", no_wrap=True)
    table.add_column("state", no_wrap=True, min_width=5)
    table.add_column("tokens\nin/out", justify="right", no_wrap=True)
    names = ["planner", "研究エージェント", escape("[bold]x[/]"), "", "a" * 30]
    longest = "the-one-very-long-agent-name-in-the-middle"
    for i in range(rows):
        table.add_row(
            f"{i:08x}",
            names[i % len(names)] if i != rows // 2 else longest,
            "[green]ok[/]" if i % 3 else "[red]error[/]",
            f"{i * 7919}/{i}",
        )
    return table


def _printed(width: int, rows: int, *, parts: bool) -> str:
    out = io.StringIO()
    console = SafeConsole(file=out, width=width, force_terminal=True, color_system="standard")
    table = _table(rows)
    if parts:
        print_in_parts(console, table)
    else:
        console.print(table)
    return out.getvalue()


@pytest.mark.parametrize("width", [24, 50, 80, 200])
@pytest.mark.parametrize("rows", [0, 1, 450])
def test_parts_print_what_the_whole_table_prints(width: int, rows: int) -> None:
    """At any terminal width, with colours, wide characters and one long cell far down."""
    assert _printed(width, rows, parts=True) == _printed(width, rows, parts=False)


def test_a_long_table_is_rendered_a_part_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each print holds one part of the rows, not the whole table."""
    printed: list[int] = []
    console = SafeConsole(file=io.StringIO(), width=200)
    real = console.print

    def counted(table: Table) -> None:
        printed.append(table.row_count)
        real(table)

    monkeypatch.setattr(console, "print", counted)
    print_in_parts(console, _table(450))
    assert printed == [_tables._PART_ROWS, _tables._PART_ROWS, 450 - 2 * _tables._PART_ROWS]
