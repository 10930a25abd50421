"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def session_path(tmp_path: Path) -> Path:
    """A fresh, not yet existing session file path."""
    return tmp_path / "session.jsonl"
