"""The package's layers only point down, and no private name crosses a package line.

Read from the source's own ``import`` statements (top level and inside
functions alike: a lazy import is still a dependency). A module belongs to
the first layer whose table entry names it or its package; it may import its
own layer and the ones below, never one above. ``docs/architecture.md``
draws the same table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import loopscribe

ROOT = Path(loopscribe.__file__).parent

# Lowest first. A name is a module (``_codec``) or a package (``otel``) under loopscribe.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "format",
        frozenset(
            {
                "_errors",
                "_fields",
                "_format",
                "_freeze",
                "_codec",
                "_model",
                "_messages",
                "events",
                "_logsafe",
                "_redact",
                "_files",
                "_safeopen",
                "summary",
                "_gc",
                "_home",
                "_locks",
                "_deferred",
                "_lazy",
            }
        ),
    ),
    (
        "record",
        frozenset(
            {
                "_source",
                "_reader",
                "_attempts",
                "_verify",
                "_bus",
                "_scope",
                "_session",
                "_executor",
                "_hostkit",
                "_loop",
            }
        ),
    ),
    (
        "services",
        frozenset(
            {
                "workspace",
                "_workspace_source",
                "_folder_sessions",
                "_fold",
                "_sidelog",
                "_backread",
                "_timeline",
                "_bars",
                "_run_timeline",
                "_runnames",
                "_preview",
                "live",
                "_stats",
                "_cost",
                "_resumable_export",
                "otel",
                "store",
                "testing",
            }
        ),
    ),
    ("ways in", frozenset({"adapters", "importers", "intake", "instrument"})),
    ("faces", frozenset({"viewer", "cli", "__main__", "__init__"})),
)


def _layer(module: str) -> int:
    """The index in LAYERS of ``loopscribe.<...>`` module ``module``."""
    parts = module.split(".")[1:] or ["__init__"]
    for index, (_name, members) in enumerate(LAYERS):
        if parts[0] in members:
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in {__file__}")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


Import = tuple[str, tuple[str, ...], int, bool]
"""Imported module, names taken from it, line, and whether it runs (not typing-only)."""


def _typing_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:`` (any alias of it)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
            if name.lstrip("_") == "TYPE_CHECKING":
                found |= {id(n) for part in node.body for n in ast.walk(part)}
    return found


def _imports(module: str, path: Path) -> list[Import]:
    """Each import in ``path`` of a loopscribe module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[Import] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = _typing_only(tree)
    for node in ast.walk(tree):
        runs = id(node) not in typing_only
        if isinstance(node, ast.Import):
            out += [
                (a.name, (), node.lineno, runs)
                for a in node.names
                if a.name.startswith("loopscribe")
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("loopscribe"):
                out.append((target, tuple(a.name for a in node.names), node.lineno, runs))
    return out


def _targets(target: str, names: tuple[str, ...], modules: dict[str, Path]) -> set[str]:
    """The modules an import reaches: ``from . import x`` names module ``x``; else ``target``,
    or the module holding ``target`` when it names a name inside one."""
    found = {f"{target}.{n}" if f"{target}.{n}" in modules else target for n in names} or {target}
    return {m if m in modules else m.rpartition(".")[0] for m in found}


def _package(module: str, modules: dict[str, Path]) -> str:
    """The package a module is part of: the first level under loopscribe, or the root."""
    parts = module.split(".")
    if len(parts) == 2 and module in modules and modules[module].name == "__init__.py":
        return parts[1]
    return parts[1] if len(parts) > 2 else "loopscribe"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_every_import_points_down_and_no_private_name_crosses_a_package() -> None:
    modules = _modules()
    problems = []
    for module, path in modules.items():
        mine = _layer(module)
        where = path.relative_to(ROOT.parent)
        for target, names, line, _runs in _imports(module, path):
            for full in _targets(target, names, modules):
                theirs = _layer(full)
                if theirs > mine:
                    problems.append(
                        f"{where}:{line}: {LAYERS[mine][0]} imports {LAYERS[theirs][0]} ({full})"
                    )
            if _package(target, modules) != _package(module, modules):
                for name in names:
                    if _private(name):
                        problems.append(f"{where}:{line}: takes private {name} from {target}")
    assert not problems, "\n".join(problems)


def test_no_module_imports_itself_in_a_circle() -> None:
    """No import at run time closes a circle (typing-only imports aside)."""
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for target, names, _line, runs in _imports(module, path):
            if not runs:
                continue  # an annotation's import: no circle at run time
            for full in _targets(target, names, modules):
                if full in modules and full != module:
                    edges[module].add(full)
    # A package's __init__ re-exports its own modules: an edge into a package from
    # inside it is an edge to the module that defines the name, not a circle.
    edges = {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    assert not circles, "\n".join(circles)
