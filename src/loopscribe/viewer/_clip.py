"""A record's body cut to what a browser shows at once, and where it was cut.

Pages never get a body whole by default: :func:`clip` keeps long strings'
heads and long containers' first items up to a budget and lists every cut,
so the page can say what is missing and offer the whole line
(``/session/{id}/record/{seq}/raw``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["BODY_BUDGET_CHARS", "STRING_LIMIT_CHARS", "Clipped", "clip", "record_view"]

STRING_LIMIT_CHARS = 16_384
"""A string longer than this is cut in record previews."""
BODY_BUDGET_CHARS = 131_072
"""Characters of string content one record preview may carry in all."""
_ITEM_BUDGET = 2_000
"""Values (array items, object members) one record preview may carry."""
_FLOOR_CHARS = 200
_MEMBER_FLOOR = 8
"""What a string still shows once the budget is spent."""


@dataclass(slots=True)
class Clipped:
    """A record body cut to a budget, and where it was cut.

    Attributes:
        value: The body, with long strings shortened and long containers elided.
        cuts: One entry per cut: ``path`` (keys and indexes from the record's
            root), ``kind`` (``string``, ``items`` or ``keys``), ``total``
            (characters or entries in the full value) and ``shown``.
    """

    value: Any
    cuts: list[dict[str, Any]] = field(default_factory=list)


def clip(
    value: Any,
    *,
    string_limit: int = STRING_LIMIT_CHARS,
    budget: int = BODY_BUDGET_CHARS,
    item_budget: int = _ITEM_BUDGET,
) -> Clipped:
    """Cut a parsed JSON value to a size a browser shows at once.

    A string keeps at most ``string_limit`` characters, and once ``budget``
    characters were kept in all, later strings keep only a short head.
    Arrays and objects keep items until ``item_budget`` values were kept.

    Args:
        value: Parsed JSON.
        string_limit: Longest string kept whole.
        budget: Total string characters kept.
        item_budget: Total values kept.

    Returns:
        The clipped value and the list of cuts (empty when nothing was cut).
    """
    out = Clipped(None)
    left = [budget, item_budget]

    def walk(v: Any, path: list[str | int]) -> Any:
        if isinstance(v, str):
            keep = min(len(v), string_limit, max(left[0], _FLOOR_CHARS))
            left[0] -= keep
            if keep < len(v):
                out.cuts.append({"path": path, "kind": "string", "total": len(v), "shown": keep})
                return v[:keep]
            return v
        if isinstance(v, list):
            items: list[Any] = []
            for i, item in enumerate(v):
                if left[1] <= 0:
                    out.cuts.append(
                        {"path": path, "kind": "items", "total": len(v), "shown": len(items)}
                    )
                    break
                left[1] -= 1
                items.append(walk(item, [*path, i]))
            return items
        if isinstance(v, dict):
            members: dict[str, Any] = {}
            for key, item in v.items():
                # An object keeps its first few members past the budget: they are
                # usually the labels (type, is_error) that make the cut readable.
                if left[1] <= 0 and len(members) >= _MEMBER_FLOOR:
                    out.cuts.append(
                        {"path": path, "kind": "keys", "total": len(v), "shown": len(members)}
                    )
                    break
                left[1] -= 1
                members[key] = walk(item, [*path, key])
            return members
        return v

    out.value = walk(value, [])
    return out


def record_view(
    obj: dict[str, Any], offset: int, size: int, string_limit: int | None, budget: int
) -> dict[str, Any]:
    """A parsed record line as the viewer shows it, its ``data`` clipped."""
    data = obj.get("data") or {}
    if string_limit is None:
        clipped = Clipped(data)
    else:
        clipped = clip(data, string_limit=string_limit, budget=budget)
    return {
        "session_id": obj.get("session_id"),
        "seq": obj.get("seq"),
        "type": obj.get("type"),
        "ts": obj.get("ts"),
        "run_id": obj.get("run_id"),
        "execution": obj.get("execution"),
        "data": clipped.value,
        "offset": offset,
        "size": size,
        "cuts": [{**cut, "path": ["data", *cut["path"]]} for cut in clipped.cuts],
    }
