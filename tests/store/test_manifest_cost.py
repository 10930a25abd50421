"""A session's cost travels in its manifest exactly, and a hostile amount is refused."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from loopscribe import Session, StoreError, Workspace
from loopscribe._cost import Cost
from loopscribe.store._manifest import summary_from_json, summary_to_json


def _summary(tmp_path: Path) -> Any:
    with Session.create(tmp_path / "s.jsonl") as session, session.begin_run():
        pass
    (summary,) = Workspace(tmp_path).list()
    return summary


def test_a_cost_round_trips_through_the_manifest_to_the_last_digit(tmp_path: Path) -> None:
    cost = Cost(Decimal("0.000012345678901234567890"), priced=3, unknown=1)
    summary = replace(_summary(tmp_path), cost=cost)
    obj = orjson.loads(orjson.dumps(summary_to_json(summary)))
    assert summary_from_json(obj, summary.path).cost == cost


@pytest.mark.parametrize("usd", ["NaN", "-1", "Infinity", "1e", 0.5, None, ["1"], "9" * 65])
def test_a_hostile_amount_is_one_store_error(tmp_path: Path, usd: Any) -> None:
    obj = orjson.loads(orjson.dumps(summary_to_json(_summary(tmp_path))))
    obj["cost"] = {"usd": usd, "priced": 1, "unknown": 0}
    with pytest.raises(StoreError, match=r"cost\.usd"):
        summary_from_json(obj, tmp_path / "s.jsonl")
