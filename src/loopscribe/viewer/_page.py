"""The one HTML page both the server and the report render: a shell, JSON data, one script.

The page's content is built in the browser by ``static/viewer.js`` (an ES
module that imports one module per view from ``static/viewer/``) from the
JSON embedded in ``<script id="ls-data" type="application/json">``. The
server links the script and stylesheet; the report inlines them (the modules
linked into one script, see :mod:`._script`), so the report needs no network
and no server.
"""

from __future__ import annotations

import html
import re
from functools import cache
from importlib import resources
from typing import Any

import orjson

from ._script import ENTRY, linked_script, module_names

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
"""Host headers the viewer answers when it listens on a loopback address."""

_SLOT = re.compile(r"\{\{(\w+)\}\}")


@cache
def asset(name: str) -> str:
    """The text of a packaged file (``static/viewer.js``, ``templates/page.html``, ...)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``.

    ``<`` only occurs inside JSON strings, where ``\\u003c`` means the same,
    so no ``</script>`` or ``<!--`` in a body can end the element early.
    """
    return orjson.dumps(data).decode().replace("<", "\\u003c")


def render(title: str, data: Any, *, inline: bool, csp: str | None = None) -> str:
    """The page: ``title``, the embedded ``data``, and the viewer's assets (see :func:`shell`)."""
    before, after = shell(title, inline=inline, csp=csp)
    return before + embed_json(data) + after


def shell(title: str, *, inline: bool, csp: str | None = None) -> tuple[str, str]:
    """The page around its data: what comes before the embedded JSON, and what after.

    A caller that streams a large page writes the first part, the JSON (made
    safe with :func:`embed_json`) piece by piece, then the second part.

    Args:
        title: The document title (escaped here).
        inline: Inline the stylesheet and script (the report) instead of linking them.
        csp: A Content-Security-Policy for a ``<meta>`` element (the report's).
    """
    if inline:
        # "</" cannot occur in our own assets; guard it anyway so an edit cannot break out.
        css = asset("static/viewer.css").replace("</", "<\\/")
        js = linked_script().replace("</", "<\\/")
        head = f"<style>\n{css}\n</style>"
        scripts = f"<script>\n{js}\n</script>"
    else:
        # Every module is asked for at once, not one level of imports after another.
        preload = "".join(
            f'\n<link rel="modulepreload" href="/{name}">' for name in module_names()[:-1]
        )
        head = f'<link rel="stylesheet" href="/static/viewer.css">{preload}'
        # A module script runs once the document is parsed, as ``defer`` did.
        scripts = f'<script type="module" src="/{ENTRY}"></script>'
    if csp:
        policy = html.escape(csp, quote=False).replace('"', "&quot;")
        head = f'<meta http-equiv="Content-Security-Policy" content="{policy}">\n{head}'
    values = {"title": html.escape(title), "head": head, "scripts": scripts}
    before, after = asset("templates/page.html").split("{{data}}", 1)

    # One pass each: text put into a slot is never scanned for slots again.
    def fill(match: re.Match[str]) -> str:
        return values[match[1]]

    return _SLOT.sub(fill, before), _SLOT.sub(fill, after)
