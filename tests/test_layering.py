"""The packages' import graph: no circle, and imports only run downward.

marft_algos: cli -> trainers (and serving) -> runs -> rollout -> policy -> common; ``protocols`` and
``distributed`` are used by everyone and import nothing of the package but ``common``.
marft_envs: registration and the env list -> task families -> sandbox and core.

Every ``import`` counts, at module level or inside a function ("lazily"), except those under
``if TYPE_CHECKING:``, which never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: Layer of each top-level part of a package: a module may import only its own part or lower ones.
LAYERS = {
    "marft_algos": {
        "common": 0,
        "protocols": 1,
        "distributed": 1,
        "policy": 2,
        "rollout": 3,
        "runs": 4,
        "trainers": 5,
        "serving": 5,  # loads runs and policies; nothing below imports it
        "cli": 6,
    },
    "marft_envs": {
        "core": 0,
        "sandbox": 0,
        "wire": 0,  # the OpenAI wire surface: programs and marft_algos.serving import it
        "math": 1,
        "code": 1,
        "puzzles": 1,
        "toy": 1,
        "programs": 1,
        "tools": 2,  # calls the sandbox and grades with math
        "debate": 2,  # grades with math
        "choice": 2,  # grades with math
        "gym_bridge": 4,
        "env_spec": 2,  # what one registration is (EnvSpec, the errors)
        "registration": 3,
        "envs": 4,
    },
}


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in (REPO / package).rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run: everything but the bodies of ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a package's ``__init__`` is its name)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        base = name.split(".") if is_package else name.split(".")[:-1]
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                stem = (
                    ".".join([*base[: len(base) - node.level + 1], node.module or ""]).strip(".")
                    if node.level
                    else node.module or ""
                )
                candidates = [stem] + [f"{stem}.{a.name}" for a in node.names]
            targets |= {c for c in candidates if c in modules and c != name}
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
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
            connect(v)
    return found


def _part(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # the package root is the public facade


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_import_circle(package):
    assert cycles(import_graph(package)) == []


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_run_downward(package):
    layers = LAYERS[package]
    upward = []
    for module, targets in import_graph(package).items():
        part = _part(module)
        if part is None:
            continue
        assert part in layers, f"{module}: give {part!r} a layer in LAYERS"
        for target in targets:
            other = _part(target)
            if other is not None and other != part and layers[other] >= layers[part]:
                upward.append(f"{module} -> {target}")
    assert upward == []


def test_the_checker_sees_circles_and_upward_imports():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import x\n"
        "def f():\n    import y\n"
    )
    assert [ast.unparse(n) for n in _runtime_imports(tree)] == [
        "from typing import TYPE_CHECKING",
        "import y",
    ]
