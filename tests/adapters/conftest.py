"""Fixtures the adapter tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_trace_provider
from agents.tracing import get_trace_provider
from agents.tracing.provider import DefaultTraceProvider


@pytest.fixture
def agents_tracing() -> Iterator[DefaultTraceProvider]:
    """The OpenAI Agents SDK's tracing on, through a provider of the test's own (no
    exporter); the SDK's own provider is put back after the test."""
    previous = get_trace_provider()
    fresh = DefaultTraceProvider()
    fresh.set_disabled(False)
    set_trace_provider(fresh)
    try:
        yield fresh
    finally:
        set_trace_provider(previous)
