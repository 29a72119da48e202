"""tuneplat's modules import each other without a cycle.

Every ``import``/``from ... import`` in every module counts, at module level or inside a
function (a deferred import that dodges a cycle at import time is still a cycle in the
design), including ``from . import x`` of a submodule. Only imports under
``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tuneplat

ROOT = Path(tuneplat.__file__).resolve().parent.parent
PACKAGES = ("tuneplat", "schedulers")


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``)."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            found[".".join(parts)] = (path, is_package)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: anywhere in the module, except under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _nearest(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports."""
    modules = _modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        here = name if is_package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = here.split(".")
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # `from pkg import sub` imports the submodule pkg.sub; `from pkg import name` runs pkg
                targets = [f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                           for alias in node.names]
            for target in targets:
                found = _nearest(target, modules) if target.split(".")[0] in packages else None
                if found is not None and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for group in groups:  # a shortest way back to the start, within the group (breadth first)
        start = min(group)
        came_from: dict[str, str] = {}
        frontier = [start]
        while frontier and start not in came_from:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & group):
                    if w not in came_from:
                        came_from[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        v = came_from[start]
        while v != start:
            path.append(v)
            v = came_from[v]
        path.append(start)
        cycles.append([path[0], *reversed(path[1:-1]), start])
    return cycles


def test_tuneplat_has_no_import_cycle() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert len(graph) > 50 and graph["tuneplat._tuner"], "the walker found tuneplat's modules and their imports"
    cycles = find_cycles(graph)
    assert not cycles, "import cycles (an arrow is an import, at module level or in a function):\n" + "\n".join(
        " -> ".join(c) for c in cycles)


def test_the_walker_finds_a_cycle_through_a_deferred_and_a_package_relative_import(tmp_path: Path) -> None:
    pkg = tmp_path / "demo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n"
                              "import demo.a\n")
    (pkg / "d.py").write_text("from .c import x\n")  # d -> c only: no cycle, c's import of d never runs
    cycles = find_cycles(import_graph(tmp_path, ("demo",)))
    assert cycles == [["demo.a", "demo.sub.b", "demo.c", "demo.a"]]


@pytest.mark.parametrize("module", ["tuneplat.results._result", "tuneplat.tracking._mlflow", "tuneplat.plot._data"])
def test_results_tracking_and_plots_do_not_import_the_tuner(module: str) -> None:
    graph = import_graph(ROOT, PACKAGES)
    seen, todo = set(), [module]
    while todo:
        v = todo.pop()
        if v not in seen:
            seen.add(v)
            todo.extend(graph[v])
    assert "tuneplat._tuner" not in seen
