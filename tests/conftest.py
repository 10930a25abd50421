"""Shared fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def session_path(tmp_path: Path) -> Path:
    """A fresh, not yet existing session file path."""
    return tmp_path / "session.jsonl"


@pytest.fixture
def quiet_encoders() -> Iterator[None]:
    """OTLP encoders log each attribute they leave out, with a traceback: keep it out of sight."""
    names = ("loopscribe.otel", "opentelemetry")
    levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(autouse=True)
def _own_sessions_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every test gets an empty sessions home of its own: never the user's real one."""
    monkeypatch.delenv("LOOPSCRIBE_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
