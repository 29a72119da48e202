"""Every ``TUNEPLAT_*`` setting is in the one table (``tuneplat/_settings.py``) and is read when used, not at import."""

from __future__ import annotations

import ast
import os
import re

import tuneplat

PACKAGE = os.path.dirname(tuneplat.__file__)
NAME = re.compile(r"TUNEPLAT_[A-Z0-9_]+")


def _sources() -> dict[str, str]:
    out = {}
    for root, _dirs, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                with open(path, encoding="utf-8") as fh:
                    out[os.path.relpath(path, PACKAGE)] = fh.read()
    return out


def test_every_setting_the_package_reads_is_in_the_table():
    sources = _sources()
    table = sources.pop("_settings.py")
    documented = set(re.findall(r"``(TUNEPLAT_[A-Z0-9_]+)``", table))
    used = {n for text in sources.values() for n in NAME.findall(text)}
    assert used - documented == set(), "add these to the table in tuneplat/_settings.py"


def _walk_outside_lambdas(node: ast.AST) -> list[ast.AST]:
    """The nodes under ``node``, leaving out lambdas' bodies (a default_factory runs per use, not at import)."""
    out, todo = [], [node]
    while todo:
        n = todo.pop()
        out.append(n)
        todo.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, ast.Lambda))
    return out


def _import_time_reads(tree: ast.Module) -> list[str]:
    """Calls naming a TUNEPLAT_ variable that run when the module (or a class body in it) is executed."""
    found = []

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue  # (runs when called)
            if isinstance(stmt, ast.ClassDef):
                visit(stmt.body)
                continue
            for node in _walk_outside_lambdas(stmt):
                if isinstance(node, ast.Call) and any(
                        isinstance(a, ast.Constant) and isinstance(a.value, str) and NAME.fullmatch(a.value)
                        for a in node.args):
                    found.append(ast.unparse(node))

    visit(tree.body)
    return found


def test_no_setting_is_read_when_a_module_is_imported():
    reads = {path: _import_time_reads(ast.parse(text)) for path, text in _sources().items()}
    assert {p: r for p, r in reads.items() if r} == {}


def test_a_setting_changed_after_import_takes_effect(monkeypatch):
    from tuneplat.execution import _channel
    from tuneplat.execution._dask_executor import DaskTrialExecutor

    monkeypatch.setenv("TUNEPLAT_AUTH_TIMEOUT_S", "3.5")
    monkeypatch.setenv("TUNEPLAT_TASK_LOST_GRACE_S", "7")
    assert _channel.auth_timeout_s() == 3.5
    assert DaskTrialExecutor().task_lost_grace_s == 7.0
