"""The package's layout rules, held by reading the code: each test fails when a rule breaks.

- no import cycles among raytf's modules (imports inside functions count: a
  cycle hidden in a function is still a cycle; ``if TYPE_CHECKING`` imports
  do not, they never run);
- ``raytf/worker`` never imports ``raytf/driver``; the driver never imports
  ``raytf/worker`` (it reaches workers through ``raytf.group`` and
  ``raytf.messages``); the group, the run directory, data and the worker
  never import the driver, Keras, the integrations or the tools;
  ``messages`` and ``settings`` import nothing of raytf;
- the checkpoint component (``raytf/checkpoint``) stands below both the worker
  and the driver: it imports neither, nor the group, Keras, the integrations or
  the tools; the run directory's files (``raytf/rundir``) stand below it;
- the controller's docstring diagram is its ``TRANSITIONS``;
- the controller tests' fakes have the seams' (``raytf.group.protocols``)
  methods with the real classes' signatures.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import raytf

PACKAGE = Path(raytf.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str) -> set[str]:
    """The raytf modules ``module`` imports at run time, anywhere in its body."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.split(".")[0] == "raytf")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            if base.split(".")[0] == "raytf":
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    out.add(sub if sub in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(module)
    return {m for m in out if m in MODULES}


GRAPH = {m: _imports(m) for m in MODULES}


def _cycles() -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(GRAPH):
        if v not in index:
            strong(v)
    return found


def test_the_graph_was_read():
    # The reading must find real edges, or every rule below would pass vacuously.
    assert "raytf.driver.controller" in GRAPH
    assert "raytf.messages" in GRAPH["raytf.driver.controller"]
    assert "raytf.group.worker_group" in GRAPH["raytf.driver.controller"]
    assert len(MODULES) > 40


def test_no_import_cycles():
    assert _cycles() == []


def _crossing(from_prefix: str, to_prefix: str) -> list[tuple[str, str]]:
    return sorted(
        (m, t)
        for m, targets in GRAPH.items()
        if m.startswith(from_prefix)
        for t in targets
        if t.startswith(to_prefix)
    )


def test_workers_never_import_the_driver():
    assert _crossing("raytf.worker", "raytf.driver") == []


def test_the_driver_reaches_workers_only_through_messages_and_the_group():
    assert _crossing("raytf.driver", "raytf.worker") == []


@pytest.mark.parametrize(
    "low, high",
    [
        (low, high)
        for low in ("raytf.group", "raytf.rundir", "raytf.data", "raytf.worker")
        for high in ("raytf.driver", "raytf.keras", "raytf.integrations", "raytf.tools")
    ]
    + [("raytf.rundir", "raytf.group"), ("raytf.data", "raytf.group")],
)
def test_lower_floors_never_import_higher_ones(low, high):
    assert _crossing(low, high) == []


@pytest.mark.parametrize(
    "high",
    [
        "raytf.worker",
        "raytf.driver",
        "raytf.group",
        "raytf.keras",
        "raytf.integrations",
        "raytf.tools",
    ],
)
def test_the_checkpoint_component_stands_below_the_worker_and_the_driver(high):
    assert _crossing("raytf.checkpoint", high) == []


def test_the_run_directory_stands_below_the_checkpoint_component():
    assert _crossing("raytf.rundir", "raytf.checkpoint") == []


@pytest.mark.parametrize("leaf", ["raytf.messages", "raytf.settings"])
def test_leaf_modules_import_nothing_of_raytf(leaf):
    assert GRAPH[leaf] <= {"raytf.errors"}


def test_no_module_is_over_400_lines():
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def test_the_controller_docstring_diagram_is_its_transitions():
    from raytf.driver import controller
    from raytf.driver.states import TRANSITIONS, State

    drawn = {}
    for line in controller.__doc__.splitlines():
        m = re.match(r"^\s+([A-Z]+) -> ([A-Z, ]+)$", line)
        if m:
            drawn[State[m.group(1)]] = frozenset(State[s.strip()] for s in m.group(2).split(","))
    assert drawn == TRANSITIONS
    assert "any state -> STOPPED" in controller.__doc__


def _methods(protocol) -> list[str]:
    return [n for n, v in vars(protocol).items() if inspect.isfunction(v) and not n.startswith("_")]


def _params(fn) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_fakes_and_real_classes_share_the_seams():
    from raytf.group.pool import WorkerPool
    from raytf.group.protocols import Group, Pool
    from raytf.group.worker_group import WorkerGroup

    from .test_controller import FakeGroup, FakePool

    for protocol, real, fake in ((Group, WorkerGroup, FakeGroup), (Pool, WorkerPool, FakePool)):
        names = _methods(protocol)
        assert len(names) >= 5
        for name in names:
            want = _params(getattr(protocol, name))
            assert _params(getattr(real, name)) == want, f"{real.__name__}.{name}"
            assert _params(getattr(fake, name)) == want, f"{fake.__name__}.{name}"
