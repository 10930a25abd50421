"""The public face: ``__all__`` matches what the package exports, and stays light."""

from __future__ import annotations

import importlib
import subprocess
import sys
import types

import pytest

import loopscribe


def test_all_is_sorted_and_complete() -> None:
    """Every public name is in a sorted __all__, and every name in it exists."""
    public = {n for n in dir(loopscribe) if not n.startswith("_")}
    # Subpackages appear as attributes once anything imports them.
    modules = {n for n in public if isinstance(getattr(loopscribe, n), types.ModuleType)}
    assert set(loopscribe.__all__) == public - (modules - set(loopscribe.__all__))
    # Constants, then classes, then functions and modules (ruff's RUF022 order).
    order = sorted(loopscribe.__all__, key=lambda n: (not n.isupper(), n.islower(), n))
    assert list(loopscribe.__all__) == order
    missing = [name for name in loopscribe.__all__ if not hasattr(loopscribe, name)]
    assert not missing


def test_import_does_not_pull_in_adapter_frameworks_or_exporters() -> None:
    """`import loopscribe` imports no agent framework and no OTLP exporter."""
    code = (
        "import sys, loopscribe; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "{'openai', 'agents', 'langchain_core', 'pydantic_ai', 'grpc'} "
        "or m.startswith('opentelemetry.exporter')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_modules_export_what_they_list() -> None:
    """live and summary: every name in __all__ exists, and the new public names are listed."""
    from loopscribe import live, summary

    for module in (live, summary):
        assert [n for n in module.__all__ if not hasattr(module, n)] == [], module.__name__
    assert {"global_bus", "is_terminal", "Bus", "TERMINAL_TYPES"} <= set(live.__all__)
    assert live.global_bus() is live.global_bus()
    assert summary.summarize is loopscribe.summarize


def test_every_public_module_lists_what_it_exports() -> None:
    """Each public (sub)module has an ``__all__``; every name in it exists, listed once."""
    import pkgutil

    checked = []
    for info in pkgutil.walk_packages(loopscribe.__path__, "loopscribe."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        module = importlib.import_module(info.name)
        listed = getattr(module, "__all__", None)
        assert listed is not None, f"{info.name} has no __all__"
        assert [n for n in listed if not hasattr(module, n)] == [], info.name
        assert len(set(listed)) == len(listed), f"{info.name}: a name listed twice"
        checked.append(info.name)
    assert {"loopscribe.otel", "loopscribe.store", "loopscribe.viewer"} <= set(checked)


def test_a_reading_command_loads_neither_the_recorder_nor_opentelemetry() -> None:
    """The command line and the stats fold import what they use: no recorder, SDK or importer.

    Every import of a submodule runs its package's ``__init__`` first, so a
    package that imported all it offers would make ``loopscribe stats`` pay
    for the recorder, the OpenTelemetry SDK, the importers and the store.
    """
    heavy = (
        "loopscribe._session",
        "loopscribe.importers.claude_code",
        "loopscribe.importers.codex",
        "loopscribe.store._shipper",
        "loopscribe.otel._bridge",
        "opentelemetry.sdk",
        "opentelemetry.trace",
        "asyncio",
        "genai_prices",
    )
    code = (
        "import sys, loopscribe.cli, loopscribe._stats, loopscribe._timeline\n"
        "loopscribe.cli.build_parser()\n"
        f"print([m for m in {heavy!r} if m in sys.modules])\n"
        # Each name is still there, imported when first used.
        "from loopscribe import Session\n"
        "from loopscribe.otel import SpanBridge\n"
        "from loopscribe.store import Shipper\n"
        "from loopscribe.importers import Cursor\n"
        "print(all(m in sys.modules for m in ('loopscribe._session', 'loopscribe.otel._bridge')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_the_lazy_packages_resolve_every_listed_name() -> None:
    """``loopscribe``, ``loopscribe.otel``, ``.store`` and ``.importers`` give each name they list,
    in ``dir()`` too, and an unknown name is an AttributeError naming the package."""
    for name in ("loopscribe", "loopscribe.otel", "loopscribe.store", "loopscribe.importers"):
        package = importlib.import_module(name)
        for member in package.__all__:
            assert getattr(package, member) is not None, f"{name}.{member}"
        assert set(package.__all__) <= set(dir(package))
        with pytest.raises(AttributeError, match=name.replace(".", r"\.")):
            package.NoSuchName  # noqa: B018


def test_a_lazy_package_types_every_name_it_lists() -> None:
    """Each name a lazy root lists is imported under ``TYPE_CHECKING`` (for type checkers and
    editors), unless the root defines it itself; and nothing more is imported there."""
    import ast
    from pathlib import Path

    for name in ("loopscribe", "loopscribe.otel", "loopscribe.store", "loopscribe.importers"):
        package = importlib.import_module(name)
        tree = ast.parse(Path(str(package.__file__)).read_text(encoding="utf-8"))
        typed: set[str] = set()
        defined: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                for imp in node.body:
                    assert isinstance(imp, ast.ImportFrom), ast.unparse(imp)
                    typed |= {a.asname or a.name for a in imp.names}
            elif isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        provided = {"OffloadingProcessor"} if name == "loopscribe.otel" else set()
        assert typed == set(package.__all__) - defined - provided, name
