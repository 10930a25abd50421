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

import copy
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


_COUNTS: Final = (
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "output_reasoning_tokens",
)
_PROBE: Final = 1_000_000
_rates: dict[tuple[int, int], tuple[Any, tuple[Decimal, ...] | None]] = {}
"""Per price set and tier (by identity, kept alive beside it): a fee and a rate per count."""


def _segment(prices: Any, inp: int) -> tuple[int, Any]:
    """The tier a call's input falls in, and the prices with every tiered price resolved for it.

    The table's tiers are cliffs decided by the call's input tokens (above
    200k, every token pays the higher rate): within one tier, prices are flat.
    """
    from genai_prices.types import TieredPrices

    tiered = [(k, v) for k, v in vars(prices).items() if isinstance(v, TieredPrices)]
    if not tiered:
        return 0, prices
    starts = sorted({tier.start for _, v in tiered for tier in v.tiers})
    segment = sum(1 for start in starts if inp > start)
    cached = _rates.get((id(prices), -1 - segment))
    if cached is not None and cached[0] is prices:
        return segment, cached[1]
    flat = copy.copy(prices)
    for key, value in tiered:
        applicable = value.base
        for tier in reversed(value.tiers):
            if inp > tier.start:
                applicable = tier.price
                break
        flat.__dict__[key] = applicable
    _rates[(id(prices), -1 - segment)] = (prices, flat)
    return segment, flat


def _linear(prices: Any, flat: Any, segment: int) -> tuple[Decimal, ...] | None:
    """Flat prices as ``(fee, rate per token of each count)``, or ``None`` if not linear.

    Found by asking the table itself: the price of no tokens (a per-request
    fee, if any), then of a million of each kind of token alone, checked
    against a mixed call.
    """
    cached = _rates.get((id(prices), segment))
    if cached is not None and cached[0] is prices:
        return cached[1]
    rates: tuple[Decimal, ...] | None = None
    fee = _flat_total(flat, {})
    found = [] if fee is None else [fee]
    for name in _COUNTS if found else ():
        counts = {name: _PROBE}
        if name in ("cache_read_tokens", "cache_write_tokens"):
            counts["input_tokens"] = _PROBE  # cached tokens are part of the input
        if name == "output_reasoning_tokens":
            counts["output_tokens"] = _PROBE  # and reasoning of the output
        total = _flat_total(flat, counts)
        if total is None or fee is None:
            found = []
            break
        found.append(total - fee)
    if found:
        _, inp, read, write, out, reasoning = found
        per = (inp, read - inp, write - inp, out, reasoning - out)
        candidate = (found[0], *(r / _PROBE for r in per))
        mixed = {"input_tokens": 9_000, "cache_read_tokens": 3_000, "cache_write_tokens": 1_000}
        mixed |= {"output_tokens": 700, "output_reasoning_tokens": 200}
        if _flat_total(flat, mixed) == _apply(candidate, 9_000, 3_000, 1_000, 700, 200):
            rates = candidate
    _rates[(id(prices), segment)] = (prices, rates)
    return rates


def _apply(
    rates: tuple[Decimal, ...], inp: int, read: int, write: int, out: int, reasoning: int
) -> Decimal:
    fee, r_in, r_read, r_write, r_out, r_reasoning = rates
    return (
        fee + inp * r_in + read * r_read + write * r_write + out * r_out + reasoning * r_reasoning
    )


def _price(found: tuple[Any, Any], usage: TokenUsage, at: datetime) -> Decimal | None:
    table_provider, model = found
    prices = model.get_prices(at)
    inp, out = usage.input_tokens or 0, usage.output_tokens or 0
    cache_read, cache_write = usage.cache_read or 0, usage.cache_creation or 0
    reasoning = usage.reasoning or 0
    segment, flat = _segment(prices, inp)
    rates = _linear(prices, flat, segment)
    if rates is not None:
        # What the table's own calculation gives (a test holds the two equal over the
        # whole table), without its general machinery: microseconds instead of a tenth
        # of a millisecond.
        return _apply(rates, inp, cache_read, cache_write, out, reasoning)
    return _table_price(table_provider, model, usage, at)


def _flat_total(prices: Any, counts: dict[str, int]) -> Decimal | None:
    from genai_prices import Usage

    try:
        total = prices.calc_price(Usage(**counts))["total_price"]
    except (ValueError, LookupError, ArithmeticError, TypeError):
        return None
    return total if isinstance(total, Decimal) else None


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
