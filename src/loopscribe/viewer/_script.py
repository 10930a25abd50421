"""The viewer's script: native ES modules, served as they are or linked into one for the report.

A served page loads ``static/viewer.js`` as ``<script type="module">`` and the
browser fetches the modules it imports from ``/static/viewer/``: there is no
build step and nothing generated in the tree. The report is one file opened
from disk, where a module cannot import another (a ``file://`` page has no
origin, and the report's policy allows no request), so :func:`linked_script`
links the same modules into one classic script when a report is written:
each module becomes a function scope that returns its exports, each
``import`` a ``const`` taken from them, in the order the imports need.

The modules keep to the forms this linker reads, and it refuses any other
(the browser would accept them, the report would break):
``import { a, b } from "./x.js";`` (a relative path, plain names) at the start
of a line, and ``export function name`` / ``export const name`` /
``export let name`` / ``export class name``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from functools import cache
from importlib import resources

__all__ = ["ENTRY", "link", "linked_script", "module_names", "modules", "packaged"]

ENTRY = "static/viewer.js"
"""The page's script, relative to the viewer package; the modules it imports are beside it."""

_IMPORT = re.compile(r'^import \{([^}]*)\} from "([^"]*)";[ \t]*\n?', re.M)
_EXPORT = re.compile(r"^export (function|const|let|class) ([A-Za-z_$][\w$]*)", re.M)
_NAME = re.compile(r"[A-Za-z_$][\w$]*")
_OTHER_MODULE_SYNTAX = re.compile(r"^[ \t]*(?:import|export)\b.*", re.M)
"""A line the two forms above do not account for: ``export default``, ``import x from``, ..."""


def packaged(name: str) -> str:
    """The text of a file of the viewer package (``static/viewer.js``, ...)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def modules(read: Callable[[str], str] = packaged, entry: str = ENTRY) -> list[tuple[str, str]]:
    """The script's modules, ``(name, text)``, each after the modules it imports.

    Args:
        read: Returns the text of a module by its name (a path in the viewer package).
        entry: The module the page loads.

    Raises:
        ValueError: An import is not in the form above, leaves the static folder, or
            closes a circle.
    """
    done: dict[str, str] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in visiting:
            circle = " -> ".join([*visiting[visiting.index(name) :], name])
            raise ValueError(f"{name}: the viewer's modules import in a circle ({circle})")
        visiting.append(name)
        text = read(name)
        for match in _IMPORT.finditer(text):
            visit(_target(name, match[2]))
        visiting.pop()
        done[name] = text

    visit(entry)
    return list(done.items())


def link(read: Callable[[str], str] = packaged, entry: str = ENTRY) -> str:
    """The modules from ``entry`` as one classic script (see the module docstring).

    Raises:
        ValueError: A module uses a form of ``import`` or ``export`` this linker does
            not read, imports a name its target does not export, or imports in a circle.
    """
    exported: dict[str, set[str]] = {}
    parts = ['(function () {\n"use strict";\n']
    for name, text in modules(read, entry):

        def imported(match: re.Match[str], name: str = name) -> str:
            target = _target(name, match[2])
            names = [n.strip() for n in match[1].split(",") if n.strip()]
            for each in names:
                if not _NAME.fullmatch(each):
                    raise ValueError(f"{name}: import {{ {each} }}: only plain names are linked")
                if each not in exported[target]:
                    raise ValueError(f"{name}: imports {each} that {target} does not export")
            return f"const {{ {', '.join(names)} }} = {_scope(target)};\n"

        body = _IMPORT.sub(imported, text)
        exported[name] = {m[2] for m in _EXPORT.finditer(body)}
        body = _EXPORT.sub(r"\1 \2", body)
        other = _OTHER_MODULE_SYNTAX.search(body)
        if other:
            raise ValueError(
                f"{name}: {other[0].strip()!r}: the report links only "
                '`import { a } from "./x.js";` and `export function/const/let/class`'
            )
        names = ", ".join(sorted(exported[name]))
        parts.append(
            f"// {name}\nconst {_scope(name)} = (function () {{\n{body}"
            f"return {{ {names} }};\n}})();\n"
        )
    parts.append("})();\n")
    return "".join(parts)


@cache
def module_names() -> tuple[str, ...]:
    """The packaged script's modules, each after those it imports, the entry last (cached)."""
    return tuple(name for name, _ in modules())


@cache
def linked_script() -> str:
    """The packaged viewer script as one classic script, for the report (cached)."""
    return link()


def _target(name: str, spec: str) -> str:
    """The module ``spec`` names, imported from ``name``; only one beside or below ``static``."""
    if not spec.startswith(("./", "../")) or not spec.endswith(".js"):
        raise ValueError(f'{name}: import from "{spec}": only relative paths to .js files link')
    target = posixpath.normpath(posixpath.join(posixpath.dirname(name), spec))
    if not target.startswith("static/"):
        raise ValueError(f'{name}: import from "{spec}" leaves the static folder')
    return target


def _scope(name: str) -> str:
    """The variable that holds a module's exports in the linked script."""
    return "module_" + re.sub(r"\W", "_", name.removeprefix("static/").removesuffix(".js"))
