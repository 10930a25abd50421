"""Cost from recorded usage: dates, cache tokens, reasoning billed apart, unknown models."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from genai_prices import Usage
from genai_prices.data_snapshot import get_snapshot

from loopscribe._cost import UNKNOWN, Cost, _model, _price, call_cost
from loopscribe._fields import TokenUsage

BEFORE = datetime(2026, 3, 1, 12, tzinfo=UTC)
AFTER = datetime(2026, 3, 20, 12, tzinfo=UTC)


def test_the_price_in_force_at_the_call_s_time() -> None:
    """A long prompt to claude-opus-4-6 cost more before its 2026-03-13 flat pricing than after."""
    usage = TokenUsage(input_tokens=300_000, output_tokens=1_000)
    before = call_cost("claude-opus-4-6", "anthropic", usage, BEFORE)
    after = call_cost("claude-opus-4-6", "anthropic", usage, AFTER)
    # Before: 300k input above the 200k tier at $10/M, output at $37.50/M; after: $5 and $25.
    assert before == Cost(Decimal("3.0375"), priced=1)
    assert after == Cost(Decimal("1.525"), priced=1)


def test_cache_reads_and_writes_are_priced_as_the_provider_prices_them() -> None:
    """Cached input costs its own rate: reads at $0.30/M, writes at $3.75/M, the rest at $3/M."""
    usage = TokenUsage(input_tokens=1_000, output_tokens=1_000, cache_read=500, cache_creation=100)
    cost = call_cost("claude-sonnet-4-5", "anthropic", usage, AFTER)
    expected = (400 * Decimal(3) + 500 * Decimal("0.3") + 100 * Decimal("3.75")) / 10**6
    assert cost.usd == expected + Decimal(15) * 1_000 / 10**6
    uncached = call_cost("claude-sonnet-4-5", "anthropic", TokenUsage(1_000, 1_000), AFTER)
    assert uncached.usd > cost.usd


def test_reasoning_billed_apart() -> None:
    """Perplexity's sonar-deep-research bills reasoning tokens at $3/M instead of $8/M output."""
    plain = call_cost("sonar-deep-research", "perplexity", TokenUsage(1_000, 1_000), AFTER)
    reasoning = call_cost(
        "sonar-deep-research", "perplexity", TokenUsage(1_000, 1_000, reasoning=800), AFTER
    )
    assert plain.usd == Decimal("0.010")
    assert reasoning.usd == (1_000 * 2 + 200 * 8 + 800 * 3) / Decimal(10**6)


@pytest.mark.parametrize(
    ("model", "provider"),
    [("my-finetune-7b", None), ("gpt-4o", "acme-unknown-cloud-xyz"), (None, "openai")],
)
def test_an_unknown_model_is_unknown_never_zero(model: str | None, provider: str | None) -> None:
    """A model the table lacks is unknown: its cost is not 0 and sums say so."""
    cost = call_cost(model, provider, TokenUsage(100, 10), AFTER)
    if model == "gpt-4o":
        # An unknown gateway: the model alone still finds its price.
        assert cost.priced == 1
        return
    assert cost == Cost(unknown=1)
    assert cost.to_json() == UNKNOWN
    assert cost.text() == UNKNOWN
    known = call_cost("claude-sonnet-4-5", "anthropic", TokenUsage(1_000, 0), AFTER)
    both = cost + known
    assert both.text() == "≥$0.0030"
    assert both.unknown == 1


def test_a_call_without_usage_is_not_priced() -> None:
    """A failed attempt that recorded no usage adds nothing, and is not unknown."""
    assert call_cost("claude-sonnet-4-5", "anthropic", None, AFTER) == Cost()
    assert Cost().to_json() == 0.0


def test_conventions_provider_names_find_the_table_s() -> None:
    """``gcp.gemini`` (the conventions' name) prices with the table's ``google``."""
    cost = call_cost("gemini-2.5-flash", "gcp.gemini", TokenUsage(1_000, 1_000), AFTER)
    assert cost.priced == 1


def test_the_fast_path_equals_the_table_s_own_calculation() -> None:
    """Over the whole table, loopscribe's flat-price arithmetic gives genai-prices' total."""
    rng = random.Random(7)
    snapshot = get_snapshot()
    checked = 0
    for provider in snapshot.providers:
        for model in provider.models:
            inp = rng.choice((rng.randrange(0, 50_000), rng.randrange(150_000, 400_000)))
            cache_read = rng.randrange(0, inp + 1)
            cache_write = rng.randrange(0, inp - cache_read + 1)
            out = rng.randrange(0, 5_000)
            reasoning = rng.randrange(0, out + 1)
            usage = TokenUsage(inp, out, cache_read, cache_write, reasoning)
            ours = _price((provider, model), usage, AFTER)
            counts = {
                "input_tokens": inp,
                "output_tokens": out,
                "cache_read_tokens": cache_read,
                "cache_write_tokens": cache_write,
                "output_reasoning_tokens": reasoning,
            }
            try:
                theirs = model.calc_price(Usage(**counts), provider, genai_request_timestamp=AFTER)
            except (ValueError, LookupError, ArithmeticError):
                continue
            assert ours == theirs.total_price, (provider.id, model.id)
            checked += 1
    assert checked > 500
    assert _model("claude-sonnet-4-5", "anthropic") is not None


def priced_session(path: Path) -> None:
    """Two calls to claude-opus-4-6 on both sides of its price change, one to an unknown model."""
    from loopscribe import AssistantMessage, Execution, Session, TextContent, Usage
    from loopscribe import events as ev

    with Session.create(path) as session, session.begin_run() as run:
        for number, (model, at, usage) in enumerate(
            [
                ("claude-opus-4-6", BEFORE, Usage(300_000, 1_000)),
                ("claude-opus-4-6", AFTER, Usage(300_000, 1_000)),
                ("house-model-1", AFTER, Usage(10, 10)),
            ]
        ):
            call = Execution(f"m{number}", "model")
            run.record(ev.model_exec_start(call, model, provider="anthropic", timestamp=at))
            message = AssistantMessage((TextContent("x"),), model=model, usage=usage)
            run.record(ev.model_exec_end(call, message=message, usage=usage, timestamp=at))


def test_stats_price_each_run_and_model(tmp_path: Path) -> None:
    """``stats --json`` prices a known model per call date and says unknown for an unknown one."""
    from loopscribe._stats import session_stats

    path = tmp_path / "s.jsonl"
    priced_session(path)
    stats = session_stats(path).to_json()
    by_model = {m["model"]: m for m in stats["tokens_by_model"]}
    assert by_model["claude-opus-4-6"]["cost_usd"] == pytest.approx(3.0375 + 1.525)
    assert by_model["house-model-1"]["cost_usd"] == UNKNOWN
    assert stats["cost_usd"] == pytest.approx(4.5625)
    assert stats["cost_unknown_calls"] == 1
    assert stats["runs"][0]["cost_usd"] == stats["cost_usd"]
    without = session_stats(path, cost=False).to_json()
    assert without["cost_usd"] == 0.0


def test_ls_and_show_give_the_session_s_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ls --json`` carries the cost and how many calls had no price; ``show`` prints it."""
    import orjson

    from loopscribe.cli import main

    priced_session(tmp_path / "s.jsonl")
    assert main(["--json", "ls", str(tmp_path)]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    listed = orjson.loads(line)
    assert listed["cost"] == pytest.approx(4.5625)
    assert listed["cost_unknown_calls"] == 1
    assert main(["show", str(tmp_path / "s.jsonl")]) == 0
    assert "cost ≥$4.56" in capsys.readouterr().out


def test_a_store_manifest_keeps_the_cost_exactly_and_an_old_one_reads_unknown(
    tmp_path: Path,
) -> None:
    """A shipped summary holds the cost as priced when shipped; one shipped without it reads
    back unknown, never $0."""
    from loopscribe.store._manifest import summary_from_json, summary_to_json
    from loopscribe.workspace import Workspace

    priced_session(tmp_path / "s.jsonl")
    summary = Workspace(tmp_path).summary_of_path(tmp_path / "s.jsonl")
    assert summary.cost.priced == 2
    shipped = orjson.loads(orjson.dumps(summary_to_json(summary)))
    assert summary_from_json(shipped, "s3://bucket/sessions/x", "manifest").cost == summary.cost
    del shipped["cost"]
    back = summary_from_json(shipped, "s3://bucket/sessions/x", "manifest")
    assert back.cost.text() == UNKNOWN
