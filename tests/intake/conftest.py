"""Fixtures of the intake tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


def _patchable() -> list[type]:
    """The openai client's classes that instrumentations patch."""
    classes: list[type] = []
    for name, module in list(sys.modules.items()):
        if module is None or not (
            name == "openai" or name.startswith(("openai.resources", "openai._"))
        ):
            continue
        classes.extend(v for v in vars(module).values() if isinstance(v, type))
    return classes


@pytest.fixture(autouse=True)
def openai_unpatched() -> Iterator[None]:
    """Each test starts from the openai client as it was: an uninstrument that misses a patch
    (OpenLLMetry's leaves ``chat.completions`` wrapped) must not stack two instrumentations."""
    import openai  # noqa: F401  (its modules are what is saved)

    saved = [(cls, dict(vars(cls))) for cls in _patchable()]
    yield
    for cls, attributes in saved:
        for key, value in attributes.items():
            if vars(cls).get(key) is not value:
                setattr(cls, key, value)
