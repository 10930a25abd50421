"""A package's public names imported when first used (a module ``__getattr__``, PEP 562).

Importing any submodule runs its package's ``__init__`` first, so a package
that imported everything it offers would make each command pay for all of it:
reading a file would load the recorder, the OpenTelemetry SDK and the
exporters. A package instead lists where each name lives and imports that
module on first use; its ``if TYPE_CHECKING:`` imports give type checkers and
editors the same names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["listing", "loader"]


def loader(
    package: str, exports: Mapping[str, tuple[str, ...]], namespace: dict[str, Any]
) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``.

    Args:
        package: The package's ``__name__``.
        exports: Each relative module (``"._codec"``) and the names it gives; a name
            equal to the module's own (``".events": ("events",)``) is the module.
        namespace: The package's ``globals()``: a name found is kept there, so the
            next lookup is an ordinary attribute.
    """
    home = {name: module for module, names in exports.items() for name in names}

    def load(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module, package)
        value = imported if module.rpartition(".")[2] == name else getattr(imported, name)
        namespace[name] = value
        return value

    return load


def listing(namespace: dict[str, Any]) -> Callable[[], list[str]]:
    """The module ``__dir__`` of a package whose ``globals()`` is ``namespace``: what it
    holds now and every name its ``__all__`` lists, imported yet or not."""
    return lambda: sorted({*namespace, *namespace["__all__"]})
