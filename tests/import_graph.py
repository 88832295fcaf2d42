"""The project's import graph, read from the source (nothing is imported).

Every import counts wherever it stands: at the top, inside a function, or under
``if TYPE_CHECKING:`` (an annotation that needs another module is a dependency too).
A package face's lazy tables count as well: a string naming a module of the project
in a package's ``__init__.py`` (or ``gateway/aio.py``) is an import made on first use.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("gateway", "replication", "durable_queue")

#: Modules whose string constants name modules they import on first use (PEP 562).
_LAZY_FACES = ("__init__.py", "aio.py")


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line`` (as ``name`` in the source)."""

    source: str
    target: str
    line: int
    name: str


def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the project."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _edges_of(module: str, path: Path, known: dict[str, Path]) -> Iterator[Edge]:
    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, known)
                if target:
                    yield Edge(module, target, node.lineno, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            source = (f"{base}.{node.module}" if node.module else base) if node.level else (
                node.module or "")
            for alias in node.names:
                # ``from pkg import submodule`` depends on the submodule itself.
                full = f"{source}.{alias.name}"
                target = full if full in known else _known(source, known)
                if target:
                    yield Edge(module, target, node.lineno, full if full in known else source)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and path.name in _LAZY_FACES):
            name = package + node.value if node.value.startswith(".") else node.value
            if name in known:
                yield Edge(module, name, node.lineno, node.value)


def graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, list[Edge]]:
    """Module -> the edges to the other modules of the project it imports."""
    known = modules(root, packages)
    return {m: [e for e in _edges_of(m, p, known) if e.target != m] for m, p in known.items()}


def cycles(edges: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One loop of imports per strongly connected group of modules, as its edges."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the graph is small
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for e in edges[v]:
            if e.target not in index:
                visit(e.target)
                low[v] = min(low[v], low[e.target])
            elif e.target in on_stack:
                low[v] = min(low[v], index[e.target])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [_loop_in(group, edges) for group in groups]


def _loop_in(group: set[str], edges: dict[str, list[Edge]]) -> list[Edge]:
    # A shortest way back to the start, by breadth-first search inside the group.
    start = min(group)
    came: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for e in edges[v]:
                if e.target not in group:
                    continue
                if e.target == start:
                    loop = [e]
                    while loop[0].source != start:
                        loop.insert(0, came[loop[0].source])
                    return loop
                if e.target not in came:
                    came[e.target] = e
                    following.append(e.target)
        frontier = following
    raise AssertionError(f"no loop in {sorted(group)}")  # pragma: no cover


def describe(loop: list[Edge]) -> str:
    return " -> ".join(f"{e.source} (line {e.line})" for e in loop) + f" -> {loop[0].source}"


def private_reaches(edges: dict[str, list[Edge]]) -> list[Edge]:
    """Imports of another package's ``_`` module.

    ``a.b._c`` belongs to ``a.b``: ``a.b`` and everything under it may import it
    (a subpackage may use its parent's helpers); nothing else may.
    """
    found = []
    for module, outgoing in edges.items():
        for e in outgoing:
            parts = e.target.split(".")
            for k, part in enumerate(parts):
                if part.startswith("_") and not part.startswith("__"):
                    owner = ".".join(parts[:k])
                    if module != owner and not module.startswith(owner + "."):
                        found.append(e)
                    break
    return found
