"""Where a confined program finds the runner's own code: :data:`LIB`, never a host path.

A confined run's view holds the runner's packages (:data:`PACKAGES`, and any other module
the runner loaded from beside them, such as msgspec's ``typing_extensions``) read-only, as
it must (the runner imports from them once confined), but not at their host paths: each
is bound at ``/sandbox/lib/<name>`` (:func:`places`), so that nothing the program reads of
itself (``sys.path``, a module's ``__file__``, the runner's frames in a stack or a
traceback it formats, their code) names the host's checkout or virtual environment.

Two steps make the names agree with the view:

* :func:`relocate`, once per process that forks or becomes runners, after its imports:
  the zygote, for all its children; a cold confined runner, for itself, once its walls are
  up (:func:`enter_view` does it). Every function loaded from a place has its code
  renamed, where it is, with ``co_filename`` under :data:`LIB` (nested code included),
  which is what frames and tracebacks show; every module loaded from one names its place
  in ``__file__``,
  ``__cached__``, ``__path__``, its spec and its loader. Done in the zygote, all of it is
  shared by every child it forks, at every level, and no child writes it again. While
  :data:`_HOST` says where each place is on the host, the modules' loaders read their
  files there, and a path hook finds submodules there: a zygote's child at ``process``,
  whose file system is the host's, imports and shows source as before (what it imports
  from then on is named by its host path: at ``process`` nothing is hidden).
* :func:`enter_view`, in each confined runner once its walls are up: :data:`_HOST` is
  emptied (the places are the view's own paths now), ``sys.path`` names :data:`LIB`
  instead of the host's directories, the importer cache forgets the finders that named
  them, and a virtual environment's prefix, which the view does not hold, gives way to
  the installation's. A few writes: the zygote's pages stay shared.

The interpreter's executable is in the view at ``/sandbox/bin`` (:func:`executable`), which
``sys.executable`` names. The rest of its installation (the standard library, and the
prefix that the interpreter and ``sys.base_prefix`` name) stays at its host path: the view
binds it there, and the README says so.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import types
from collections.abc import Callable, Mapping
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    FileFinder,
    SourceFileLoader,
    SourcelessFileLoader,
)
from importlib.util import cache_from_source
from typing import Final

__all__ = [
    "BIN",
    "LIB",
    "PACKAGES",
    "enter_view",
    "executable",
    "placed",
    "places",
    "relocate",
    "relocate_code",
]

#: The directory of a confined run's view that holds the runner's packages.
LIB: Final = "/sandbox/lib"
#: The top-level packages a confined runner imports from once its walls are up.
PACKAGES: Final = ("protocol", "runner", "msgspec")
#: The directory of a confined run's view that holds the interpreter's executable, which
#: ``sys.executable`` names there (:func:`executable`).
BIN: Final = "/sandbox/bin"

#: Once :func:`relocate` has run: each place, and where it is on the host (emptied in a
#: confined runner, whose view holds the places themselves).
_HOST: dict[str, str] = {}
#: The interpreter's executable, and its place (:func:`executable`), once worked out.
_executable: tuple[str, str] | None = None
#: What :func:`relocate` moved, host path to place (None: nothing was moved yet).
_relocated: dict[str, str] | None = None
#: What :func:`enter_view` writes (worked out by :func:`relocate`): ``sys.path``, and the
#: importer cache's keys to forget.
_view: tuple[list[str], list[str]] | None = None


def places(modules: Mapping[str, types.ModuleType] | None = None) -> dict[str, str]:
    """Where a confined view holds what the runner has imported from outside the
    interpreter's installation: each top-level package (its directory) or module (its
    file) loaded from a directory that holds one of :data:`PACKAGES` (the host's checkout,
    a virtual environment's ``site-packages``), by its host path, at ``LIB/<name>``.

    ``modules``: the loaded modules (default ``sys.modules``), which hold
    :data:`PACKAGES`.
    """
    modules = sys.modules if modules is None else modules
    roots: set[str] = set()
    for name in PACKAGES:
        module = modules[name]
        origin = getattr(module, "__file__", None)
        if isinstance(origin, str):
            roots.add(os.path.dirname(os.path.dirname(os.path.abspath(origin))))
    found: dict[str, str] = {}
    for name, module in list(modules.items()):
        origin = getattr(module, "__file__", None)
        if "." in name or not isinstance(origin, str):
            continue
        origin = os.path.abspath(origin)
        for root in sorted(roots, key=len, reverse=True):  # the innermost (a venv in a checkout)
            if origin.startswith(root + "/"):
                top = origin[len(root) + 1 :].split("/")[0]
                found[f"{root}/{top}"] = f"{LIB}/{top}"
                break
    return found


def placed() -> tuple[tuple[str, str], ...]:
    """The ``(host path, place)`` pairs a confined view binds: those :func:`relocate`
    moved, if it ran, else :func:`places` of this process now; and the interpreter's
    executable (:func:`executable`)."""
    where = places() if _relocated is None else _relocated
    return (*sorted(where.items()), executable())


def executable() -> tuple[str, str]:
    """The interpreter's executable (the file behind a virtual environment's link), and
    where a confined view holds it: ``sys.executable`` there, which a program can run
    (the same interpreter, under the same walls). The view holds it at its host path too,
    where py-spy looks for it (``stack_on_timeout``): a program that walks the view finds
    the installation there, as it does the standard library."""
    global _executable
    if _executable is None:  # worked out before the view, where the link leads somewhere
        real = os.path.realpath(sys.executable)
        _executable = (real, f"{BIN}/{os.path.basename(real)}")
    return _executable


def _moved(path: str, where: Mapping[str, str]) -> str | None:
    """``path`` under its new place, or None if it is in none of ``where``."""
    for old, new in where.items():
        if _within(path, old):
            return new + path[len(old) :]
    return None


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent + "/")


def _on_host(path: str) -> str:
    """``path`` where the host has it, if it is in a place and :data:`_HOST` says where."""
    return _moved(path, _HOST) or path if _HOST else path


class _PlacedLoader(SourceFileLoader):
    """The loader of a module named by its place: reads its files on the host while
    :data:`_HOST` says where (a ``process`` child), else at the place itself (in the view)."""

    def get_data(self, path: str) -> bytes:
        return super().get_data(_on_host(path))

    def path_stats(self, path: str) -> Mapping[str, float | int]:
        return super().path_stats(_on_host(path))


def _hook(path: str) -> FileFinder:
    """``sys.path_hooks``: a place's directory, while :data:`_HOST` says where it is on the
    host, is looked for there (a package's submodules, in a ``process`` child)."""
    host = _on_host(path)
    if host == path:
        raise ImportError("not a place with a host path")  # the next hook takes it
    return FileFinder(
        host,
        (ExtensionFileLoader, EXTENSION_SUFFIXES),
        (SourceFileLoader, SOURCE_SUFFIXES),
        (SourcelessFileLoader, BYTECODE_SUFFIXES),
    )


def relocate_code(where: Mapping[str, str]) -> int:
    """Name the file of every function defined in ``where``'s paths by its place, nested
    code included; the number of functions whose code changed.

    The code objects are changed where they are (``_imp._fix_co_filename``, what the import
    system does to a module's code loaded from a moved ``.pyc``), not replaced: new code
    objects would start again without what running them taught the interpreter, and every
    child of the zygote would relearn it in pages of its own (0.45 MB more per idle
    confined child, measured). Frames already running show the new name too.
    """
    import _imp

    fix: Callable[[types.CodeType, str], None] = getattr(_imp, "_fix_co_filename")  # noqa: B009
    changed = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            moved = _moved(code.co_filename, where)
            if moved is not None:
                fix(code, moved)
                changed += 1
    return changed


def relocate(where: Mapping[str, str] | None = None) -> None:
    """Name everything loaded from ``where``'s paths (default :func:`places`) by its place:
    code, modules, specs, loaders (see the module docstring). Once per process; a
    second call does nothing."""
    global _relocated, _view
    if _relocated is not None:
        return
    where = dict(places() if where is None else where)
    executable()
    relocate_code(where)
    for module in list(sys.modules.values()):
        _move_module(module, where)
    _HOST.update({new: old for old, new in where.items()})
    if _hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _hook)
    _forget_finders(where)
    _relocated = where
    # What enter_view() writes, worked out here: sys.path with the places for the host's
    # directories that hold them, and the importer cache's keys that may name either.
    parents = {os.path.dirname(old) for old in where}
    path: list[str] = []
    for entry in sys.path:
        entry = LIB if entry in parents else entry
        if entry not in path:
            path.append(entry)
    stale = {*parents, LIB, *where.values()}
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            stale.update(p for p in search if isinstance(p, str) and _within(p, LIB))
    _view = (path, sorted(stale))


def enter_view() -> None:
    """In a confined runner, walls up: ``sys.path`` and the importer cache name the view's
    places, not the host's directories, and nothing reads a place on the host any more
    (see the module docstring). Relocates first if the process has not yet: a runner the
    zygote did not fork (a cold one) does it here, for itself."""
    global _relocated, _view, _executable
    relocate()
    path, stale = _view or ([], [])
    inside = executable()[1]
    # What named the host is not kept for the program (a few small objects freed).
    _relocated, _view, _executable = {}, None, (inside, inside)
    _HOST.clear()
    sys.path[:] = path
    for key in stale:  # finders made since relocate(), if any
        sys.path_importer_cache.pop(key, None)
    sys.executable = inside
    if hasattr(sys, "_base_executable"):  # the interpreter a virtual environment's points at
        sys._base_executable = sys.executable
    if sys.prefix != sys.base_prefix:  # a virtual environment: not in the view
        sys.prefix = sys.base_prefix
        sys.exec_prefix = sys.base_exec_prefix


def _forget_finders(where: Mapping[str, str]) -> None:
    """Drop the importer cache's finders of the directories that hold ``where``'s paths,
    and of the places (a finder the hook made reads the host)."""
    parents = {os.path.dirname(old) for old in where} | {LIB}
    for key in [k for k in sys.path_importer_cache if any(_within(k, p) for p in parents)]:
        del sys.path_importer_cache[key]


def _move_value(value: object, where: Mapping[str, str]) -> object:
    """``value`` (a path, or a list of them) with each path in ``where``'s paths under its
    place.

    A function of the module's, not one nested in :func:`_move_module`: nested, it named
    itself through its closure, and each module moved left a cycle holding ``where``
    (the host's paths) for the garbage collector, which a runner that relocates itself
    (a cold one) never runs before its program, whose ``gc.get_objects()`` listed them."""
    if isinstance(value, str):
        return _moved(value, where) or value
    if isinstance(value, list):
        return [_move_value(item, where) for item in value]
    return value


def _move_module(module: types.ModuleType, where: Mapping[str, str]) -> None:
    """Name ``module``'s file, and its spec's and loader's, by its place, if it was loaded
    from one of ``where``'s paths; its loader then reads the host's file while
    :data:`_HOST` says where it is (:class:`_PlacedLoader`)."""
    origin = getattr(module, "__file__", None)
    new_origin = _moved(origin, where) if isinstance(origin, str) else None
    if new_origin is None:
        return
    move = functools.partial(_move_value, where=where)

    def cached(value: object) -> object:  # beside a module's file, not within its place
        return cache_from_source(new_origin) if isinstance(value, str) else value

    attrs = vars(module)
    attrs["__file__"] = new_origin
    if "__cached__" in attrs:
        attrs["__cached__"] = cached(attrs["__cached__"])
    if isinstance(attrs.get("__path__"), list):
        attrs["__path__"] = move(attrs["__path__"])
    spec = getattr(module, "__spec__", None)
    if spec is not None and hasattr(spec, "__dict__"):
        spec.origin = move(spec.origin)
        spec.cached = cached(spec.cached)
        if isinstance(spec.submodule_search_locations, list):
            spec.submodule_search_locations = move(spec.submodule_search_locations)
    loader = attrs.get("__loader__")
    path = getattr(loader, "path", None)
    if loader is not None and isinstance(path, str) and hasattr(loader, "__dict__"):
        loader.path = move(path)
        if type(loader) is SourceFileLoader:
            loader.__class__ = _PlacedLoader
