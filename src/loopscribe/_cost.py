"""What model calls cost, from their recorded usage and a maintained price table.

Session files record usage, never prices: the cost is computed when it is
read, with the prices in force at the call's time, so an updated price table
gives updated costs. The table is `genai-prices <https://github.com/pydantic/genai-prices>`_
(MIT, maintained by Pydantic, updated as providers change prices): it holds
prices by date (a price change applies to calls after it), tiered prices,
cache reads and writes, and reasoning tokens where a provider bills them
apart. It brings pydantic and an HTTP client with it, so it is the optional
extra ``loopscribe[prices]``; without it every cost is ``unknown``.

A call whose model or provider the table does not know is ``unknown``,
never 0. A call that recorded no usage (a failed attempt) is not priced:
nothing says it was billed. Sums keep both: the dollars of the calls that
were priced and how many could not be (:class:`Cost`).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

from ._fields import TokenUsage, provider_name

logger = logging.getLogger("loopscribe")

__all__ = ["UNKNOWN", "Cost", "call_cost", "prices_available"]

UNKNOWN: Final = "unknown"
"""What a cost that could not be computed is shown as."""

_MILLION: Final = Decimal(1_000_000)

# Conventions' provider names (what the bridge and the timeline carry) to the
# table's provider IDs; a name not listed is looked up as it is.
_PROVIDERS: Final = {
    "gcp.gemini": "google",
    "gcp.vertex_ai": "google",
    "gcp.gen_ai": "google",
    "aws.bedrock": "aws",
    "azure.ai.openai": "azure",
    "azure.ai.inference": "azure",
    "x_ai": "x-ai",
    "mistral_ai": "mistral",
    "moonshot_ai": "moonshotai",
    "_OTHER": None,
}


@dataclass(frozen=True, slots=True)
class Cost:
    """The cost of some calls: dollars of those priced, and how many could not be priced."""

    usd: Decimal = Decimal(0)
    priced: int = 0
    """Calls whose cost is in ``usd``."""
    unknown: int = 0
    """Calls with usage whose model or provider has no price: not in ``usd``."""

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.usd + other.usd, self.priced + other.priced, self.unknown + other.unknown)

    @property
    def is_unknown(self) -> bool:
        """Nothing could be priced though calls were made."""
        return self.unknown > 0 and self.priced == 0

    def to_json(self) -> float | str:
        """Dollars as a number, or ``"unknown"``; partial sums say so in :attr:`unknown`."""
        return UNKNOWN if self.is_unknown else float(self.usd)

    def text(self) -> str:
        """``$0.0123``, ``unknown``, or ``≥$0.0123`` when some calls could not be priced."""
        if self.is_unknown:
            return UNKNOWN
        amount = _dollars(self.usd)
        return f"≥{amount}" if self.unknown else amount


ZERO: Final = Cost()


def _dollars(usd: Decimal) -> str:
    if usd == 0:
        return "$0"
    if usd >= 100:
        return f"${usd:,.0f}"
    if usd >= 1:
        return f"${usd:.2f}"
    return f"${usd:.4f}"


@functools.cache
def prices_available() -> bool:
    """Whether the price table (``loopscribe[prices]``) is installed."""
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _model(model: str, provider: str | None) -> tuple[Any, Any] | None:
    """The table's (provider, model) for a model name, or ``None`` when it has none."""
    from genai_prices.data_snapshot import get_snapshot

    try:
        return get_snapshot().find_provider_model(model, None, provider, None)
    except LookupError:
        return None


def call_cost(
    model: str | None, provider: str | None, usage: TokenUsage | None, at: datetime
) -> Cost:
    """The cost of one call, at the prices in force at ``at``.

    Args:
        model: The model that answered (the response's) or was asked for.
        provider: The provider as recorded or as the conventions name it
            (``openai``, ``gcp.gemini``, ``aws.bedrock``); ``None`` lets the
            table find the model's provider.
        usage: The call's token counts (input includes cache reads and
            writes, output includes reasoning, as the conventions count them).
        at: When the call was made.

    Returns:
        ``ZERO`` for a call without usage; one priced or one unknown call otherwise.
    """
    if usage is None or (not usage.input_tokens and not usage.output_tokens):
        return ZERO
    if not model or not prices_available():
        return Cost(unknown=1)
    normal = provider_name(provider) if provider else None
    table_provider = _PROVIDERS.get(normal, normal) if normal else None
    found = _model(model, table_provider)
    if found is None and table_provider is not None:
        # A provider the table names differently (a gateway): the model alone may still say.
        found = _model(model, None)
    if found is None:
        return Cost(unknown=1)
    usd = _price(found, usage, at if at.tzinfo else at.replace(tzinfo=UTC))
    return Cost(unknown=1) if usd is None else Cost(usd, priced=1)


_LINEAR: Final = frozenset(
    {"input_mtok", "cache_read_mtok", "cache_write_mtok", "output_mtok", "output_reasoning_mtok"}
)


def _price(found: tuple[Any, Any], usage: TokenUsage, at: datetime) -> Decimal | None:
    table_provider, model = found
    prices = model.get_prices(at)
    rates: dict[str, Any] = {k: v for k, v in vars(prices).items() if v is not None}
    inp, out = usage.input_tokens or 0, usage.output_tokens or 0
    cache_read, cache_write = usage.cache_read or 0, usage.cache_creation or 0
    reasoning = usage.reasoning or 0
    if rates.keys() <= _LINEAR and all(isinstance(v, Decimal) for v in rates.values()):
        # Flat per-token prices: what the table's own calculation gives, without
        # its general machinery (a test holds the two equal over the whole table).
        input_rate: Decimal = rates.get("input_mtok", Decimal(0))
        output_rate: Decimal = rates.get("output_mtok", Decimal(0))
        uncached = max(0, inp - cache_read - cache_write)
        total: Decimal = (
            uncached * input_rate
            + cache_read * rates.get("cache_read_mtok", input_rate)
            + cache_write * rates.get("cache_write_mtok", input_rate)
            + (out - reasoning if "output_reasoning_mtok" in rates else out) * output_rate
            + reasoning * rates.get("output_reasoning_mtok", Decimal(0))
        )
        return total / _MILLION
    return _table_price(table_provider, model, usage, at)


def _table_price(provider: Any, model: Any, usage: TokenUsage, at: datetime) -> Decimal | None:
    from genai_prices import Usage

    counts = {
        "input_tokens": usage.input_tokens or 0,
        "output_tokens": usage.output_tokens or 0,
        "cache_read_tokens": usage.cache_read or 0,
        "cache_write_tokens": usage.cache_creation or 0,
    }
    if usage.reasoning:
        counts["output_reasoning_tokens"] = usage.reasoning
    try:
        calculation = model.calc_price(Usage(**counts), provider, genai_request_timestamp=at)
    except (ValueError, LookupError, ArithmeticError):
        logger.debug("genai-prices could not price %s", model.id, exc_info=True)
        return None
    total = calculation.total_price
    return total if isinstance(total, Decimal) else None
