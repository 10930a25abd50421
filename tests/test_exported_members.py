"""The public face: ``__all__`` matches what the package exports, and stays light."""

from __future__ import annotations

import subprocess
import sys
import types

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
    for name in loopscribe.__all__:
        assert getattr(loopscribe, name) is not None


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
        for name in module.__all__:
            assert getattr(module, name) is not None, (module.__name__, name)
    assert {"global_bus", "is_terminal", "Bus", "TERMINAL_TYPES"} <= set(live.__all__)
    assert live.global_bus() is live.global_bus()
    assert summary.summarize is loopscribe.summarize
