"""The DESIGN's dependency rules, checked on the source: who may import what."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import protocol

from .helpers import ROOT

PROTOCOL = ROOT / "protocol"
# The sans-I/O core: no descriptors, no clocks, no event loop.
CORE = ["_constants", "_errors", "_kinds", "_messages", "_frames", "_calls", "_start"]
# The child's side (with the pipe sizing it shares with the host): the standard
# library and msgspec only.
CHILD = [*CORE, "_child", "_pipesize", "__init__"]


def _imports(path: Path) -> set[str]:
    """Top-level names of every module ``path`` imports (relative imports as ``.name``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add("." + (node.module or "").split(".")[0])
            elif node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", sorted(p.stem for p in PROTOCOL.glob("*.py")))
def test_protocol_imports_neither_runner_nor_sandbox(module: str) -> None:
    """protocol sits at the bottom: it imports neither of its siblings."""
    assert not _imports(PROTOCOL / f"{module}.py") & {"runner", "sandbox"}


@pytest.mark.parametrize("module", CORE)
def test_sans_io_core_does_no_io(module: str) -> None:
    """The core imports neither anyio nor os nor time (now is always an argument)."""
    assert not _imports(PROTOCOL / f"{module}.py") & {
        "anyio",
        "trio",
        "asyncio",
        "os",
        "time",
        "socket",
        "select",
        "._channel",
        "._server",
        "._starter",
        "._child",
    }


@pytest.mark.parametrize("module", CHILD)
def test_child_side_uses_stdlib_and_msgspec_only(module: str) -> None:
    """What the child imports is the standard library, msgspec and protocol's own modules.

    ``__init__`` may name the anyio-based roles only under TYPE_CHECKING or lazily; the
    subprocess test in test_e2e checks what a real child import loads.
    """
    allowed = set(sys.stdlib_module_names) | {"msgspec"}
    for name in _imports(PROTOCOL / f"{module}.py"):
        if name.startswith("."):
            assert module == "__init__" or name[1:] in CHILD, name
        else:
            assert name in allowed, name


def test_all_is_complete_and_importable() -> None:
    """Every name in protocol.__all__ resolves, lazily loaded ones included."""
    for name in protocol.__all__:
        assert getattr(protocol, name) is not None, name


SANDBOX = ROOT / "sandbox"


def _from_imports(path: Path) -> list[tuple[str, list[str], int]]:
    """Every absolute ``import``/``from ... import`` of ``path``: (module, names, line)."""
    found: list[tuple[str, list[str], int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, [], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
    return found


@pytest.mark.parametrize(
    "path", sorted(SANDBOX.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_sandbox_uses_only_what_runner_and_protocol_export(path: Path) -> None:
    """The host-runner contract is public: ``sandbox`` imports no private module of
    ``runner`` or ``protocol``, and only names in their ``__all__``."""
    import runner

    exported = {"runner": set(runner.__all__), "protocol": set(protocol.__all__)}
    wrong: list[str] = []
    for module, names, line in _from_imports(path):
        top = module.split(".")[0]
        if top not in exported:
            continue
        if module != top:
            wrong.append(f"line {line}: imports the module {module}")
        wrong.extend(
            f"line {line}: {name} is not in {top}.__all__"
            for name in names
            if name not in exported[top]
        )
    assert wrong == []


@pytest.mark.parametrize("path", sorted((ROOT / "runner").rglob("*.py")), ids=lambda p: p.name)
def test_runner_never_imports_sandbox(path: Path) -> None:
    """The child never depends on the host's package."""
    assert "sandbox" not in {module.split(".")[0] for module, _, _ in _from_imports(path)}


#: sandbox's layers, bottom up: each module imports only from its own layer and those
#: below, and from another folder only through its public face (its package, or a module
#: of it whose name has no leading underscore).
LAYERS: dict[str, int] = {
    "_errors": 0,
    "_budget": 0,
    "_result": 0,
    "_text": 0,
    "_model": 0,
    "_children": 1,
    "_engine": 2,
    "plane": 3,
    "agent": 4,
    "upstream": 4,
    "_commands": 5,
}


def _sandbox_module(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _sandbox_imports(path: Path) -> list[tuple[list[str], int]]:
    """The sandbox modules ``path`` imports, as absolute parts, with their line numbers."""
    here = _sandbox_module(path)
    package = here if path.name == "__init__.py" else here[:-1]
    found: list[tuple[list[str], int]] = []
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # for the type checker only: never imported at run time
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "sandbox":
                target = node.module.split(".")
            else:
                continue
            if node.module is None:  # from . import name: the names are modules
                found.extend(([*target, alias.name], node.lineno) for alias in node.names)
            else:
                found.append((target, node.lineno))
        elif isinstance(node, ast.Import):
            found.extend(
                (alias.name.split("."), node.lineno)
                for alias in node.names
                if alias.name.split(".")[0] == "sandbox"
            )
    return found


def _layer(parts: list[str]) -> int | None:
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


@pytest.mark.parametrize(
    "path", sorted(SANDBOX.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_sandbox_imports_only_its_own_layer_and_those_below(path: Path) -> None:
    here = _sandbox_module(path)
    mine = _layer(here)
    if mine is None:  # the package's face and __main__: on top of everything
        return
    wrong: list[str] = []
    for target, line in _sandbox_imports(path):
        theirs = _layer(target)
        if theirs is None:
            wrong.append(f"line {line}: {'.'.join(target)} is the package's face")
        elif theirs > mine:
            wrong.append(f"line {line}: {'.'.join(target)} is a layer above")
        elif target[1] != here[1] and len(target) > 2 and target[2].startswith("_"):
            wrong.append(f"line {line}: {'.'.join(target)} is private to another folder")
    assert wrong == []


def test_sandbox_has_no_import_circle() -> None:
    """No module of sandbox imports, directly or not, one that imports it (lazy imports
    inside functions included)."""
    graph: dict[str, set[str]] = {}
    modules = {".".join(_sandbox_module(p)): p for p in SANDBOX.rglob("*.py")}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        for target, _ in _sandbox_imports(path):
            for size in range(len(target), 0, -1):  # the longest prefix that is a module
                candidate = ".".join(target[:size])
                if candidate in modules and candidate != name:
                    edges.add(candidate)
                    break
    # A package imports its own modules to re-export them: those edges do not make a
    # circle of meaning, so they are dropped.
    for name in graph:
        graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    seen: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if seen.get(nxt) == 1:
                circles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in seen:
                visit(nxt)
        stack.pop()
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node)
    assert circles == []
