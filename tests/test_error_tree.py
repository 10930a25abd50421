"""Every exception the package exports is a LoopscribeError, named in the documented tree."""

from __future__ import annotations

import importlib
import pkgutil
import re

import loopscribe
from loopscribe import _errors
from loopscribe._errors import LoopscribeError


def _exported_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(loopscribe.__path__, "loopscribe."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue  # private modules export nothing of their own
        module = importlib.import_module(info.name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                found[f"{info.name}.{name}"] = value
    for name in loopscribe.__all__:
        value = getattr(loopscribe, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            found[f"loopscribe.{name}"] = value
    return found


def test_every_exported_exception_is_a_loopscribe_error_in_the_documented_tree() -> None:
    exported = _exported_exceptions()
    assert "loopscribe.otel.MessageReferenceError" in exported  # the walk reaches subpackages
    documented = set(re.findall(r"\w+", _errors.__doc__ or ""))
    outside = [name for name, cls in exported.items() if not issubclass(cls, LoopscribeError)]
    undocumented = [name for name, cls in exported.items() if cls.__name__ not in documented]
    assert not outside, f"not a LoopscribeError: {outside}"
    assert not undocumented, f"missing from the tree in loopscribe/_errors.py: {undocumented}"
