"""Tokens and cost per day and model, over the sessions of a folder: the viewer's usage chart.

Each session contributes one small tuple per (day, model) it used, folded
from its timeline's model calls when the index reads it; the chart adds
them up over every indexed session. Days are UTC dates of the calls' start.
Costs are computed from usage with the price table (``docs/cost.md``), at
each call's own time; a call whose model has no price is counted as
unknown, never as 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from .._cost import ZERO, Cost

if TYPE_CHECKING:
    from .._timeline import SessionTimeline

__all__ = ["DayUsage", "daily_usage", "usage_json"]

_UNKNOWN_MODEL = "(unknown model)"
_MAX_ROWS = 400
"""At most this many (day, model) pairs per session: a row in the index stays small."""


class DayUsage(NamedTuple):
    """One model's calls on one day in one session."""

    day: str
    model: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost: Cost


def daily_usage(timeline: SessionTimeline) -> tuple[DayUsage, ...]:
    """The session's model calls added up per UTC day and model."""
    acc: dict[tuple[str, str], list[Any]] = {}
    for run in timeline.iter_runs():
        for bar in run.bars.values():
            if bar.execution.kind != "model":
                continue
            model = bar.response_model or bar.model or _UNKNOWN_MODEL
            day = bar.start.date().isoformat()
            row = acc.get((day, model))
            if row is None:
                if len(acc) >= _MAX_ROWS:
                    continue
                row = acc[(day, model)] = [0, 0, 0, ZERO]
            row[0] += 1
            row[1] += bar.input_tokens or 0
            row[2] += bar.output_tokens or 0
            row[3] += bar.cost
    return tuple(DayUsage(d, m, *row) for (d, m), row in sorted(acc.items()))


def usage_json(rows: Iterable[DayUsage]) -> dict[str, Any]:
    """What the chart draws: per day and model, tokens and cost, over all ``rows``."""
    acc: dict[tuple[str, str], list[Any]] = {}
    for r in rows:
        row = acc.setdefault((r.day, r.model), [0, 0, 0, ZERO])
        row[0] += r.calls
        row[1] += r.input_tokens
        row[2] += r.output_tokens
        row[3] += r.cost
    days = sorted({d for d, _ in acc})
    models = sorted({m for _, m in acc})
    total = sum((row[3] for row in acc.values()), ZERO)
    return {
        "days": days,
        "models": models,
        "rows": [
            {
                "day": d,
                "model": m,
                "calls": row[0],
                "input_tokens": row[1],
                "output_tokens": row[2],
                "cost_usd": row[3].to_json(),
                "cost_unknown_calls": row[3].unknown,
            }
            for (d, m), row in sorted(acc.items())
        ],
        "cost_usd": total.to_json(),
        "cost_text": total.text(),
        "cost_unknown_calls": total.unknown,
    }
