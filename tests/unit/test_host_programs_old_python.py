"""The host programs (notify.pyz, retry.pyz) run on the host's own Python, 3.8 included
(core/host/notify_send.sh leaves a host whose Python cannot run them to the clients, so a
module that fails to import there silences every host-sent message without a word).

The check is on the source, so it needs no old interpreter on the test machine: every
module a bundle carries parses as Python 3.8 and evaluates no 3.9/3.10 typing at run time: a subscripted builtin
(`tuple[int, int]`) or a `|` union (`int | None`) outside an annotation (deferred where
the module has `from __future__ import annotations`) raises TypeError when that line runs
on 3.8.
"""

from __future__ import annotations

import ast
from importlib import util
from pathlib import Path

import pytest

from rtrain_tui.core.host import unattended
from rtrain_tui.core.notify import host_send

BUILTIN_GENERICS = {"tuple", "list", "dict", "set", "frozenset", "type"}
TYPE_NAMES = BUILTIN_GENERICS | {"int", "str", "float", "bool", "bytes", "object"}
BUNDLED = sorted({*host_send.MODULES[1], *unattended.RETRY_MODULES[1]})


def _annotations(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (deferred, so never evaluated)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.AST | None] = []
        if isinstance(node, ast.arg):
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        for root in roots:
            if root is not None:
                inside.update(id(n) for n in ast.walk(root))
    return inside


def _typeish(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    if isinstance(node, ast.Name):
        return node.id in TYPE_NAMES
    if isinstance(node, ast.Subscript):
        return _typeish(node.value)
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and (
        _typeish(node.left) or _typeish(node.right))


def newer_typing_at_run_time(source: str) -> list[str]:
    """Each line that evaluates 3.9+/3.10+ typing when it runs, as `LINE: TEXT`."""
    tree = ast.parse(source)
    # Without the __future__ import, annotations are evaluated on 3.8 too.
    deferred = _annotations(tree) if "from __future__ import annotations" in source else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in deferred:
            continue
        generic = (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
                   and node.value.id in BUILTIN_GENERICS)
        union = isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and (
            _typeish(node.left) and _typeish(node.right))
        if generic or union:
            found.append(f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_the_check_finds_what_fails_on_python_3_8() -> None:
    source = ("from __future__ import annotations\n"
              "Span = tuple[int | None, int | None]\n"
              "def f(x: tuple[int, ...] | None) -> dict[str, int]:\n"
              "    return isinstance(x, int | str)\n"
              "Ok = Tuple[Optional[int], int]\n"
              "flags = 1 | 2\n")
    # The annotations of `f` are deferred; typing's names and an int's `|` are fine.
    assert sorted(newer_typing_at_run_time(source)) == [
        "2: int | None", "2: int | None", "2: tuple[int | None, int | None]", "4: int | str"]


@pytest.mark.parametrize("module", BUNDLED)
def test_a_bundled_module_runs_on_the_hosts_python_3_8(module: str) -> None:
    spec = util.find_spec(module)
    assert spec is not None and spec.origin is not None
    source = Path(spec.origin).read_text()
    ast.parse(source, feature_version=(3, 8))  # a SyntaxError names the line
    assert newer_typing_at_run_time(source) == [], module
