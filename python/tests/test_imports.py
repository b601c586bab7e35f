"""The chute package has no import cycle: no two of its modules import each other, directly or through a chain.

The graph is read from the source with ``ast`` (nothing is imported). Its nodes are the package's modules
(``chute.dataloader.plan``, ``chute.doctor.api``, ...; a package is its ``__init__``) and the native extension
``chute._native``. An edge A -> B is any ``import`` statement in A that names B, at module level or inside a
function or method alike (strict: a lazy import still ties the two modules together, it only defers the
failure). Imports under ``if TYPE_CHECKING:`` are no edge: they never run.

* ``import chute.x.y`` and ``from chute.x import y`` (y a module) give an edge to ``chute.x.y``;
* ``from chute.x import name`` (name not a module) gives an edge to ``chute.x``; relative imports resolve the
  same way.

Inside the doctor (``chute.doctor``) the check is stricter: an import under ``if TYPE_CHECKING:`` counts too.
There the model (``findings``) is data that the rule engine and the views import, never the other way, so no
module of the doctor needs even a type-only import of a module that imports it; and the views import the
model, never each other nor the rule engine. The doctor never imports the bench.

One node is left out: the facade ``chute`` (``chute/__init__.py``), which re-exports the public names. Python
always runs a package's ``__init__`` before any of its submodules, so a submodule that reads ``chute.Loader``
from the facade at call time cannot meet a half-made submodule through it; the facade is the top of the
graph. What is checked about it instead: no module below the tools (doctor, bench, CLI) imports the facade.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "chute"
FACADE = "chute"
EXTENSIONS = {"chute._native"}
# The tools: they sit above the front doors and may use the facade (``import chute``).
TOOLS = ("chute.doctor", "chute.bench", "chute.cli")


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    return out


def import_graph(root: Path, *, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports (module level and function level), itself excluded; with
    ``type_checking``, the imports under ``if TYPE_CHECKING:`` too."""
    mods = modules(root)
    known = set(mods) | EXTENSIONS
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in mods.items():
        package = name if is_package else name.rpartition(".")[0]
        edges = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree) if type_checking else _runtime_nodes(tree):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in known:
                        edges.add(f"{target}.{a.name}")
                    elif target in known:
                        edges.add(target)
        graph[name] = edges - {name}
    for ext in EXTENSIONS:
        graph.setdefault(ext, set())
    return graph


def _runtime_nodes(tree: ast.AST):
    """Every node of the tree, the bodies of ``if TYPE_CHECKING:`` (type annotations only) left out."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def tangles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One shortest cycle through each tangle's first module, as ``[a, b, ..., a]``."""
    return [_one_cycle(graph, set(t)) for t in tangles(graph)]


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module, as ``[a, b, ..., a]``, for the message."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    raise AssertionError("a strongly connected component without a cycle")


def _without_facade(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: edges - {FACADE} for m, edges in graph.items() if m != FACADE}


def test_package_has_no_import_cycle():
    graph = _without_facade(import_graph(PACKAGE))
    found = tangles(graph)
    assert not found, "import cycles: " + "; ".join(
        f"{' -> '.join(c)} (modules tied together: {', '.join(t)})" for c, t in zip(cycles(graph), found)
    )


def test_only_tools_import_the_facade():
    graph = import_graph(PACKAGE)
    below = sorted(m for m, edges in graph.items() if FACADE in edges and m != FACADE and not m.startswith(TOOLS))
    assert not below, f"modules below the tools that import the chute facade (import a submodule instead): {below}"


DOCTOR = "chute.doctor"
DOCTOR_MODEL = "chute.doctor.findings"
DOCTOR_VIEWS = ("chute.doctor.report_term", "chute.doctor.report_html")
# What the model is made of: each layer's measurements (and nothing that builds or shows a verdict).
DOCTOR_MEASUREMENTS = {
    f"chute.doctor.{m}" for m in ("compare", "cpu", "device", "measure", "profile", "remote", "sampling", "storage")
}


def _doctor_graph(root: Path) -> dict[str, set[str]]:
    """The doctor's modules and the doctor's modules each imports, type-only imports included."""
    graph = import_graph(root, type_checking=True)
    inside = {m for m in graph if m == DOCTOR or m.startswith(DOCTOR + ".")}
    return {m: graph[m] & inside for m in inside}


def test_the_doctor_has_no_import_cycle_even_through_type_only_imports():
    graph = _doctor_graph(PACKAGE)
    found = tangles(graph)
    assert not found, "import cycles in the doctor: " + "; ".join(" -> ".join(c) for c in cycles(graph))


def test_the_doctors_views_render_the_model_and_the_model_is_data():
    graph = _doctor_graph(PACKAGE)
    for view in DOCTOR_VIEWS:
        assert graph[view] == {DOCTOR_MODEL}, f"{view} imports {sorted(graph[view])}: the views import the model only"
    assert graph[DOCTOR_MODEL] <= DOCTOR_MEASUREMENTS, (
        f"the model imports {sorted(graph[DOCTOR_MODEL] - DOCTOR_MEASUREMENTS)}: it is data, built by the rule engine"
    )


def test_the_doctor_does_not_import_the_bench():
    graph = import_graph(PACKAGE, type_checking=True)
    bad = sorted(
        f"{m} -> {e}"
        for m, edges in graph.items()
        if m.startswith(DOCTOR)
        for e in edges
        if e.startswith("chute.bench")
    )
    assert not bad, f"the doctor imports the bench: {bad}"


# ---- the checker itself, on small trees ------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "chute"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_finds_a_cycle_through_a_function_level_import(tmp_path):
    # Today's shape before the drop-in moved into dataloader/: the seam imported the folder path lazily, the
    # folder path imported the seam's classes.
    root = _tree(
        tmp_path,
        {
            "__init__.py": "from chute.dataloader import DataLoader\n",
            "native_folder.py": "from chute.dataloader.fastpath import Fallback, Plan\n",
            "dataloader/__init__.py": "from chute.dataloader.loader import DataLoader\n",
            "dataloader/loader.py": "from chute.dataloader import fastpath\n",
            "dataloader/fastpath.py": "def plan():\n    from chute import native_folder\n",
        },
    )
    found = cycles(_without_facade(import_graph(root)))
    assert found == [["chute.dataloader.fastpath", "chute.native_folder", "chute.dataloader.fastpath"]]


def test_checker_ignores_type_checking_imports(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "def f():\n    from chute import b\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from chute.a import A\n",
        },
    )
    assert cycles(import_graph(root)) == []
    assert cycles(import_graph(root, type_checking=True)) == [["chute.a", "chute.b", "chute.a"]]
    (root / "b.py").write_text("import chute.a\n")
    assert cycles(import_graph(root)) == [["chute.a", "chute.b", "chute.a"]]


@pytest.mark.parametrize(
    "text, edge",
    [
        ("from . import b\n", "chute.pkg.b"),
        ("from .b import thing\n", "chute.pkg.b"),
        ("from .. import top\n", "chute.top"),
        ("import chute.pkg.b as bee\n", "chute.pkg.b"),
        ("from chute.pkg import thing\n", "chute.pkg"),
        ("from chute import _native\n", "chute._native"),
    ],
)
def test_checker_resolves_each_import_form(tmp_path, text, edge):
    root = _tree(tmp_path, {"__init__.py": "", "top.py": "", "pkg/__init__.py": "", "pkg/b.py": "", "pkg/a.py": text})
    assert import_graph(root)["chute.pkg.a"] == {edge}
