"""Fixtures of the intake tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

_WRAPPERS = frozenset({"FunctionWrapper", "BoundFunctionWrapper"})


def _wrapped(value: Any) -> bool:
    """Whether ``value`` is a wrapt function wrapper (wrapt's C and Python classes alike)."""
    return type(value).__name__ in _WRAPPERS and hasattr(value, "__wrapped__")


def _innermost(value: Any) -> Any:
    while _wrapped(value):
        value = value.__wrapped__
    return value


@pytest.fixture(autouse=True)
def openai_unpatched() -> Iterator[None]:
    """Each test ends with the openai client's methods as they were.

    Instrumentations patch them with wrapt; an uninstrument that misses a
    patch (OpenLLMetry's leaves ``chat.completions`` and others wrapped)
    must not stack two instrumentations in the next test.
    """
    yield
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "openai" or name.startswith("openai.")):
            continue
        for cls in [v for v in vars(module).values() if isinstance(v, type)]:
            for key, value in list(vars(cls).items()):
                if _wrapped(value):
                    setattr(cls, key, _innermost(value))
