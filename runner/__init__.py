"""The child process: wait for one Start, run the program, report one Result.

``python -m runner START_R START_W CALL_R CALL_W [--backend NAME] [--start-timeout SECONDS]``
(see :mod:`runner._main`). The program's language is a backend's business: :class:`Backend`
is the seam, and :func:`register_backend` adds one by name (the Python backend is built in).

Importing this package loads the standard library, msgspec and the child side of
``protocol``; nothing else.
"""

from __future__ import annotations

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

__all__ = [
    "DEFAULT_BACKEND",
    "Backend",
    "BackendFactory",
    "Outcome",
    "backend_names",
    "get_backend",
    "main",
    "register_backend",
]
