"""The child process: wait for one Start, run the program, report one Result.

``python -m runner START_R START_W CALL_R CALL_W [--backend NAME] [--start-timeout SECONDS]``
(see :mod:`runner._main`). The program's language is a backend's business: :class:`Backend`
is the seam, and :func:`register_backend` adds one by name (the Python backend is built in).

What the host uses of the runner is here, and nothing private: the entry points of a
runner process (:func:`main`) and of the zygote (:func:`zygote_main`), the backend the
``in_process`` level runs in the host's own process (:class:`PythonBackend`), the probe of
the confined level's walls (:func:`probe_walls`), and the defaults of a confined run's
file system. The messages between host and zygote are ``protocol``'s.

Importing this package loads the standard library, msgspec and the child side of
``protocol``; nothing else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._backends import (
    DEFAULT_BACKEND,
    Backend,
    BackendFactory,
    Outcome,
    backend_names,
    get_backend,
    register_backend,
)
from ._main import main

if TYPE_CHECKING:
    from ._backends.python import PythonBackend
    from ._namespaces import DEFAULT_DISK_BYTES, default_disk_files
    from ._probe import Walls, probe_walls
    from ._zygote import main as zygote_main

__all__ = [
    "DEFAULT_BACKEND",
    "DEFAULT_DISK_BYTES",
    "Backend",
    "BackendFactory",
    "Outcome",
    "PythonBackend",
    "Walls",
    "backend_names",
    "default_disk_files",
    "get_backend",
    "main",
    "probe_walls",
    "register_backend",
    "zygote_main",
]

# What only the host uses is loaded on first use (PEP 562): a runner starts without it.
_LAZY = {
    "PythonBackend": ("._backends.python", "PythonBackend"),
    "DEFAULT_DISK_BYTES": ("._namespaces", "DEFAULT_DISK_BYTES"),
    "default_disk_files": ("._namespaces", "default_disk_files"),
    "Walls": ("._probe", "Walls"),
    "probe_walls": ("._probe", "probe_walls"),
    "zygote_main": ("._zygote", "main"),
}


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module, __name__), attribute)
    globals()[name] = value
    return value
