"""The ID derivation: fixed vectors, never zero, distinct coordinates give distinct IDs."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.trace import TraceFlags

from loopscribe import CallRef
from loopscribe.otel import run_span_id, span_context, span_id, trace_id
from loopscribe.otel._ids import _nonzero, parse_traceparent

SESSION = "0123456789abcdef0123456789abcdef"
RUN = "fedcba9876543210"

# Computed once from the DESIGN.md formula; they must never change.
TRACE_HEX = "f388fb598dc581a6cf8dd4680074ff38"
RUN_SPAN_HEX = "b90b20edac1e78a2"
CALL_1_ATTEMPT_1_HEX = "37c182b97565ff9c"
CALL_1_ATTEMPT_2_HEX = "d23a64c4971b6767"
TURN_1_ATTEMPT_1_HEX = "56fa0c892dca9db8"

# Session and run IDs are hex by construction; the NUL separator is unambiguous
# for them. Execution IDs are host strings and may hold any text a session file
# can hold (so no lone surrogates: they have no UTF-8 form).
coordinate = st.text(
    alphabet=st.characters(exclude_characters="\0", exclude_categories=["Cs"]), max_size=40
)
execution_id = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
attempt = st.integers(min_value=1, max_value=10**6)


def test_fixed_vectors() -> None:
    """The derived IDs of fixed coordinates equal the published hex vectors."""
    assert f"{trace_id(SESSION, RUN):032x}" == TRACE_HEX
    assert f"{run_span_id(SESSION, RUN):016x}" == RUN_SPAN_HEX
    assert f"{span_id(SESSION, RUN, 'call_1', 1):016x}" == CALL_1_ATTEMPT_1_HEX
    assert f"{span_id(SESSION, RUN, 'call_1', 2):016x}" == CALL_1_ATTEMPT_2_HEX
    assert f"{span_id(SESSION, RUN, 'turn_1', 1):016x}" == TURN_1_ATTEMPT_1_HEX


def test_vectors_follow_the_formula() -> None:
    """The vectors are the leading bytes of sha256 over the NUL-joined, prefixed parts."""

    def h(*parts: str) -> bytes:
        return hashlib.sha256("\0".join(["loopscribe/v1", *parts]).encode()).digest()

    assert h("trace", SESSION, RUN)[:16].hex() == TRACE_HEX
    assert h("span", SESSION, RUN, "", "0")[:8].hex() == RUN_SPAN_HEX
    assert h("span", SESSION, RUN, "call_1", "2")[:8].hex() == CALL_1_ATTEMPT_2_HEX


def test_all_zero_becomes_one() -> None:
    """An all-zero digest prefix maps to 1, because OpenTelemetry reads 0 as no ID."""
    assert _nonzero(bytes(8)) == 1
    assert _nonzero(bytes(16)) == 1
    assert _nonzero(b"\0" * 7 + b"\2") == 2


def test_span_context_uses_the_derived_trace_id() -> None:
    """span_context(ref) gives the derived IDs, sampled and remote."""
    ctx = span_context(CallRef(SESSION, RUN, "call_1", 2))
    assert f"{ctx.trace_id:032x}" == TRACE_HEX
    assert f"{ctx.span_id:016x}" == CALL_1_ATTEMPT_2_HEX
    assert ctx.is_remote
    assert ctx.trace_flags == TraceFlags.SAMPLED
    assert ctx.is_valid


def test_span_context_trace_id_override() -> None:
    """A run begun inside a host span is found by passing the host's trace ID."""
    host = 0x4BF92F3577B34DA6A3CE929D0E0E4736
    ctx = span_context(CallRef(SESSION, RUN, "call_1", 1), trace_id=host)
    assert ctx.trace_id == host
    assert f"{ctx.span_id:016x}" == CALL_1_ATTEMPT_1_HEX


@pytest.mark.parametrize("bad", [0, -1, 1 << 128])
def test_span_context_rejects_impossible_trace_ids(bad: int) -> None:
    """An override that is zero or wider than 128 bits is a ValueError."""
    with pytest.raises(ValueError, match="128-bit"):
        span_context(CallRef(SESSION, RUN, "call_1", 1), trace_id=bad)


def test_parse_traceparent() -> None:
    """Stored traceparents parse to remote contexts; anything else gives None."""
    ctx = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert ctx is not None
    assert (ctx.trace_id, ctx.span_id, ctx.is_remote) == (
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        True,
    )
    for bad in (None, 42, "", "00-" + "0" * 32 + "-00f067aa0ba902b7-01", "garbage"):
        assert parse_traceparent(bad) is None


@given(coordinate, coordinate, execution_id, attempt)
def test_ids_are_never_zero_and_fit(session_id: str, run_id: str, ex: str, n: int) -> None:
    """Every derived ID is non-zero and fits its width."""
    assert 0 < trace_id(session_id, run_id) < 1 << 128
    assert 0 < run_span_id(session_id, run_id) < 1 << 64
    assert 0 < span_id(session_id, run_id, ex, n) < 1 << 64


@given(
    st.tuples(coordinate, coordinate, execution_id, attempt),
    st.tuples(coordinate, coordinate, execution_id, attempt),
)
def test_distinct_coordinates_give_distinct_span_ids(
    a: tuple[str, str, str, int], b: tuple[str, str, str, int]
) -> None:
    """Two different execution attempts never share a span ID, nor one with a run span."""
    if a != b:
        assert span_id(*a) != span_id(*b)
    assert span_id(*a) != run_span_id(b[0], b[1])


@given(st.tuples(coordinate, coordinate), st.tuples(coordinate, coordinate))
def test_distinct_runs_give_distinct_trace_ids(a: tuple[str, str], b: tuple[str, str]) -> None:
    """Two different (session, run) pairs never share a trace ID or a run span ID."""
    if a != b:
        assert trace_id(*a) != trace_id(*b)
        assert run_span_id(*a) != run_span_id(*b)
