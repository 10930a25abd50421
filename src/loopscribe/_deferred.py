"""Names a package offers that a higher layer provides: wired from above, loaded on first use.

A lower package never imports a higher one (``tests/test_layers.py``). Where
it still offers a name that lives higher up (``loopscribe.otel.OffloadingProcessor``,
kept where users import it from, is the intake's), the package facade
(``loopscribe/__init__.py``, which every import of a subpackage runs first)
registers how to load it with :func:`provide`, and the lower package's
``__getattr__`` asks :func:`provided` for it. The import happens in the
layer that may make it, when the name is first used.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["provide", "provided"]

_loaders: dict[tuple[str, str], Callable[[], object]] = {}


def provide(module: str, name: str, load: Callable[[], object]) -> None:
    """Make ``load()`` what ``module.name`` gives (``module`` is a dotted module name)."""
    _loaders[module, name] = load


def provided(module: str, name: str) -> object:
    """What :func:`provide` registered for ``module.name``.

    Raises:
        AttributeError: Nothing was registered (as a missing module attribute does).
    """
    load = _loaders.get((module, name))
    if load is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return load()
