"""Where a confined program finds the runner's own code: :data:`LIB`, never a host path.

A confined run's view holds the runner's packages (:data:`PACKAGES`, and any other module
the runner loaded from beside them, such as msgspec's ``typing_extensions``) read-only, as
it must (the runner imports from them once confined), but not at their host paths: each
is bound at ``/sandbox/lib/<name>`` (:func:`places`), so that nothing the
program reads of itself (``sys.path``, a module's ``__file__``, the runner's frames in a
stack or a traceback it formats) names the host's checkout or virtual environment.

Two steps make the names agree with the view:

* :func:`relocate_code`, once per process that will become confined runners (the
  zygote, a cold confined runner), after the imports and before any of the runner's
  functions that stay on the stack is called: every function of those packages gets its
  code object again with ``co_filename`` under :data:`LIB` (nested code included), which
  is what frames and tracebacks show. Done in the zygote, the new code objects are
  shared by every child it forks, at every level; at ``process`` (where the host's
  files are the program's to read anyway) the source of those frames is still found,
  through each module's loader.
* :func:`enter_view`, in each confined runner once its walls are up: ``sys.path`` and the
  modules' file attributes (``__file__``, ``__path__``, ``__cached__``, the spec's and
  the loader's) move under :data:`LIB`, the importer cache is emptied (it names the host
  paths), and a virtual environment's prefix, which the view does not hold, gives way
  to the installation's. Later imports from the packages then find their files in the
  view, under the same names.

The interpreter's installation (``sys.executable``, the standard library) stays at its
host path: the view binds it there, and the README says so.
"""

from __future__ import annotations

import gc
import os
import sys
import types
from collections.abc import Mapping
from importlib.util import cache_from_source
from typing import Final

__all__ = ["LIB", "PACKAGES", "enter_view", "places", "relocate_code", "warm"]

#: The directory of a confined run's view that holds the runner's packages.
LIB: Final = "/sandbox/lib"
#: The top-level packages a confined runner imports from once its walls are up.
PACKAGES: Final = ("protocol", "runner", "msgspec")


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


def _moved(path: str, where: Mapping[str, str]) -> str | None:
    """``path`` under its new place, or None if it is in none of ``where``."""
    for old, new in where.items():
        if _within(path, old):
            return new + path[len(old) :]
    return None


def relocate_code(where: Mapping[str, str] | None = None) -> int:
    """Give every function defined in ``where``'s directories (default :func:`places`)
    code that names its file by the new place; the number of functions changed.

    Frames already running keep their code: call this before the functions that stay on
    the stack are entered.
    """
    where = places() if where is None else where
    done: dict[int, types.CodeType] = {}

    def moved(code: types.CodeType) -> types.CodeType:
        found = done.get(id(code))
        if found is not None:
            return found
        consts = tuple(moved(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        filename = _moved(code.co_filename, where) or code.co_filename
        new = code.replace(co_filename=filename, co_consts=consts)
        done[id(code)] = new
        done[id(new)] = new
        return new

    changed = 0
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            if _moved(code.co_filename, where) is not None:
                obj.__code__ = moved(code)
                changed += 1
    return changed


def enter_view(where: Mapping[str, str]) -> None:
    """In a confined runner, walls up: the module attributes and ``sys.path`` that name
    ``where``'s host paths name their places in the view.

    What to write is worked out once per process (:func:`warm`, in the zygote), so that
    each runner only writes it: about a hundred attributes, whose pages the runner then
    copies from the zygote's. Nothing kept for it names a host path afterwards.
    """
    global _plan
    path, writes = warm(where)
    _plan = None
    sys.path[:] = path
    _forget_finders(where)  # those the zygote made again since it warmed, if any
    for attrs, values in writes:
        attrs.update(values)
    if sys.prefix != sys.base_prefix:  # a virtual environment: not in the view
        sys.prefix = sys.base_prefix
        sys.exec_prefix = sys.base_exec_prefix


#: What :func:`enter_view` writes: ``sys.path``, and the attribute dictionaries with their
#: new values (nothing of it names a host path once written).
_Plan = tuple[list[str], list[tuple[dict[str, object], dict[str, object]]]]
_plan: _Plan | None = None


def warm(where: Mapping[str, str]) -> _Plan:
    """What :func:`enter_view` writes for ``where``, worked out once per process (a zygote
    does it for every runner it forks). Empties the importer cache of the finders that
    name ``where``'s directories (an import recreates one where it needs it)."""
    global _plan
    if _plan is not None:
        return _plan
    parents = {os.path.dirname(old) for old in where}
    path: list[str] = []
    for entry in sys.path:
        entry = LIB if entry in parents else entry
        if entry not in path:
            path.append(entry)
    _forget_finders(where)
    writes: list[tuple[dict[str, object], dict[str, object]]] = []
    for module in list(sys.modules.values()):
        writes.extend(_module_writes(module, where))
    _plan = (path, writes)
    return _plan


def _forget_finders(where: Mapping[str, str]) -> None:
    """Drop the importer cache's finders of the directories that hold ``where``'s paths."""
    parents = {os.path.dirname(old) for old in where}
    for key in [k for k in sys.path_importer_cache if any(_within(k, p) for p in parents)]:
        del sys.path_importer_cache[key]


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent + "/")


def _module_writes(
    module: types.ModuleType, where: Mapping[str, str]
) -> list[tuple[dict[str, object], dict[str, object]]]:
    """The attributes of ``module``, its spec and its loader that name a host path of
    ``where``, with their new values."""
    origin = getattr(module, "__file__", None)
    if not isinstance(origin, str) or _moved(origin, where) is None:
        return []

    def move(value: object) -> object:
        if isinstance(value, str):
            return _moved(value, where) or value
        if isinstance(value, list):
            return [move(item) for item in value]
        return value

    def cached(value: object) -> object:  # beside a module's file, not within its place
        return cache_from_source(new_origin) if isinstance(value, str) else value

    new_origin = _moved(origin, where) or origin
    attrs: dict[str, object] = vars(module)
    values: dict[str, object] = {"__file__": new_origin}
    if "__cached__" in attrs:
        values["__cached__"] = cached(attrs["__cached__"])
    if isinstance(attrs.get("__path__"), list):
        values["__path__"] = move(attrs["__path__"])
    writes: list[tuple[dict[str, object], dict[str, object]]] = [(attrs, values)]
    spec = getattr(module, "__spec__", None)
    if spec is not None and hasattr(spec, "__dict__"):
        found: dict[str, object] = {"origin": move(spec.origin), "_cached": cached(spec.cached)}
        if isinstance(spec.submodule_search_locations, list):
            found["submodule_search_locations"] = move(spec.submodule_search_locations)
        writes.append((vars(spec), found))
    loader = attrs.get("__loader__")
    path = getattr(loader, "path", None)
    if isinstance(path, str) and hasattr(loader, "__dict__"):
        writes.append((vars(loader), {"path": move(path)}))
    return writes
