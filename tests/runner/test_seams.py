"""The runner's seams and layering, in process: the backend registry, run(argv), imports."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

import runner
from runner import Backend, Outcome, backend_names, get_backend, register_backend
from runner._backends import _REGISTRY
from runner._backends.python import PythonBackend
from runner._main import EXIT_USAGE, run

from .helpers import ROOT


class _Constant:
    """A backend whose every program has the value 42."""

    def prepare(self) -> None:
        pass

    def run(self, start: object, client: object) -> Outcome:
        return Outcome.success("42")


@pytest.fixture
def clean_registry() -> Iterator[None]:
    """Undo registrations made by a test."""
    saved = dict(_REGISTRY)
    yield
    _REGISTRY.clear()
    _REGISTRY.update(saved)


@pytest.mark.usefixtures("clean_registry")
def test_backends_are_registered_and_built_by_name() -> None:
    """A factory registered under a name is what get_backend builds for that name."""
    register_backend("constant", _Constant)
    assert "constant" in backend_names()
    backend: Backend = get_backend("constant")
    assert isinstance(backend, _Constant)


@pytest.mark.usefixtures("clean_registry")
def test_a_backend_path_is_imported_on_first_use() -> None:
    """``"module:attribute"`` names a factory without importing it until it is needed."""
    register_backend("py-again", "runner._backends.python:PythonBackend")
    assert isinstance(get_backend("py-again"), PythonBackend)


def test_unknown_backends_and_bad_registrations_are_refused() -> None:
    """An unknown name is a LookupError listing the known ones; a path needs a colon."""
    with pytest.raises(LookupError, match="python"):
        get_backend("cobol")
    with pytest.raises(ValueError):
        register_backend("x", "no_colon_here")
    with pytest.raises(ValueError):
        register_backend("", _Constant)


def test_run_takes_an_explicit_argv_and_returns_the_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``run(argv)`` parses the given list, not sys.argv, and reports usage errors as 64."""
    assert run(["7", "8"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("runner: expected 4 file descriptors, got 2\n")


def _imports(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runner").rglob("*.py"))
)
def test_runner_imports_neither_sandbox_nor_an_async_framework(path: str) -> None:
    """DESIGN: runner depends on protocol only; it never imports sandbox, anyio or trio."""
    assert not _imports(path) & {"sandbox", "anyio", "trio", "sniffio"}


def test_the_package_exports_main_and_the_backend_seam() -> None:
    """``runner`` exports main and the Backend seam, and every name in __all__ resolves."""
    assert {"main", "Backend", "register_backend", "Outcome"} <= set(runner.__all__)
    for name in runner.__all__:
        assert getattr(runner, name) is not None
