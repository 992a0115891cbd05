"""The package's module-level imports form no cycle, and the operator library (kernels/) never imports the
package root: read from the source (ast), nothing imported. Imports inside functions are not counted (they
run at call time, after every module is loaded), nor those under ``if TYPE_CHECKING:``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOTS = {"alcop_triton": REPO / "alcop_triton", "alcop_triton.kernels": REPO / "kernels"}


def _modules() -> dict[str, Path]:
    """Module name -> source file, kernels/ under its installed name (setup.cfg package_dir)."""
    found: dict[str, Path] = {}
    for package, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs when it is loaded: at its top level, in class bodies, and in
    top-level ``if``/``try``/``with`` blocks, except under ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name != "TYPE_CHECKING":
                out += _module_level(node.body)
            out += _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _module_level(node.body)
            for handler in node.handlers:
                out += _module_level(handler.body)
            out += _module_level(node.orelse) + _module_level(node.finalbody)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            out += _module_level(node.body)
    return out


def _edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports when it is loaded (a parent package that Python loads
    first is not counted: importing ``a.b.c`` names ``a.b.c``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in _module_level(ast.parse(path.read_text(), str(path)).body):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[:len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            targets.add(sub if sub in modules else base)
    return {t for t in targets if t in modules and t != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _edges(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or one that imports itself): Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_walk_sees_the_package() -> None:
    graph = _graph()
    assert {"alcop_triton", "alcop_triton.ops.gemm", "alcop_triton.kernels.matmul", "alcop_triton.fastpath"} <= set(graph)
    # an edge of each kind the walk resolves: relative, absolute, `from package import module`
    assert "alcop_triton.fastpath" in graph["alcop_triton.ops.route"]
    assert "alcop_triton.kernels.pack" in graph["alcop_triton.kernels.matmul"]
    assert "alcop_triton.te" in graph["alcop_triton.kernels.matmul"]


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_kernels_never_import_the_package_root() -> None:
    graph = _graph()
    offenders = sorted(m for m, targets in graph.items()
                       if m.startswith("alcop_triton.kernels") and "alcop_triton" in targets)
    assert offenders == []


@pytest.mark.parametrize("graph, cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [["a", "b", "c"]]),
    ({"a": {"a"}}, [["a"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycle_finder(graph: dict[str, set[str]], cycle: list[list[str]]) -> None:
    assert _cycles(graph) == cycle


def test_type_checking_and_function_imports_are_not_counted(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import x\n"
                   "def f():\n    from . import y\ntry:\n    from . import z\nexcept ImportError:\n    pass\n")
    modules = {"p.m": src, "p.x": src, "p.y": src, "p.z": src}
    assert _edges("p.m", src, modules) == {"p.z"}
