"""The viewer's docs show screenshots that exist (made by the browser tests)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]


def images(markdown: Path) -> list[Path]:
    text = markdown.read_text(encoding="utf-8")
    return [markdown.parent / m for m in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)]


def test_every_screenshot_in_the_readme_and_docs_is_there() -> None:
    shown = images(ROOT / "README.md") + images(ROOT / "docs" / "viewer.md")
    names = {p.name for p in shown}
    assert {"viewer-sessions.png", "viewer-conversation.png", "viewer-100k.png"} <= names
    for path in shown:
        assert path.is_file(), f"{path} is shown but missing"
        head = path.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
        assert path.stat().st_size > 10_000, f"{path} looks empty"
