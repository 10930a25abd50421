"""``encode_otlp_protobuf`` and ``encode_otlp_json`` against the SDK, for many more batches.

The unit suite runs the same property with a few examples; here it runs
``LOOPSCRIBE_FUZZ_EXAMPLES / 4`` of them (default 500; ``make reliability``
raises it to 2,500): mixed Resources, scopes, every attribute value kind,
values the protocol cannot carry, events, links, statuses and span limits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from opentelemetry.sdk.trace import ReadableSpan

from loopscribe.otel import encode_otlp_json

from ..test_otel_otlp_encoding import assert_sdk_bytes, batches, sdk_json_line

EXAMPLES = max(1, int(os.environ.get("LOOPSCRIBE_FUZZ_EXAMPLES", "2000")) // 4)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    # Both encoders log each attribute they leave out, with a traceback.
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches())
def test_many_batches_encode_to_the_sdks_bytes(spans: list[ReadableSpan]) -> None:
    """The SDK's protobuf bytes, and protobuf's JSON mapping of its request."""
    assert_sdk_bytes(spans)
    assert encode_otlp_json(spans) == sdk_json_line(spans)
