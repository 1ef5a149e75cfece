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
# The child's side: the standard library and msgspec only.
CHILD = [*CORE, "_child", "__init__"]


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
