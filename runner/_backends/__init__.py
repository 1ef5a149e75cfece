"""The backend seam: how the runner hands a program to a language, and gets an outcome back.

The wire does not fix the program's language (seed 001: the program "is interpreted by the
backend"). A backend is what gives ``Start.program`` a meaning: the Python backend compiles
it as Python; another could hand it to an embedded interpreter of some other language. A
runner for a language Python cannot host (a Node.js runner, say) does not need this seam at
all: it is a separate executable that speaks the same frames.

A backend receives the whole :class:`~protocol.Start` (program, bindings, budget) and the
call channel's :class:`~protocol.Client`, runs the program to its end, and returns an
:class:`Outcome`. It never touches the start channel: the runner sends the one Result.

Backends are registered by name. The registry holds factories (or ``"module:attribute"``
paths, imported on first use), so the runner loads only the backend it was asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol, final

import msgspec

from protocol import Kind

if TYPE_CHECKING:
    from protocol import Client, Start

__all__ = [
    "DEFAULT_BACKEND",
    "Backend",
    "BackendFactory",
    "Outcome",
    "VALUE_OUT_OF_MEMORY",
    "backend_names",
    "get_backend",
    "register_backend",
]

#: Why a program that succeeded fails after all, when its value could not be encoded or
#: framed for want of memory (kind ``limit``).
VALUE_OUT_OF_MEMORY: Final = "out of memory while encoding the program's value (MemoryError)"


@final
class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a program ended, as a backend reports it (the Result, less the bookkeeping).

    Attributes:
        ok: whether the program succeeded.
        value: on success, the program's value as text (JSON text for the Python backend);
            on failure, data that goes with it, if any (the Python backend: the code of a
            program that exited with ``SystemExit``).
        kind: on failure, why, from the closed set of :class:`~protocol.Kind`.
        error: on failure, a reason for people (a traceback, say).
    """

    ok: bool
    value: str = ""
    kind: Kind | None = None
    error: str = ""

    @classmethod
    def success(cls, value: str) -> Outcome:
        """A successful run whose value is ``value`` (already encoded as text)."""
        return cls(ok=True, value=value)

    @classmethod
    def failure(cls, kind: Kind, error: str, *, value: str = "") -> Outcome:
        """A failed run, classified by ``kind``, explained by ``error``; ``value`` is the
        failure's data, if it has any (as text)."""
        return cls(ok=False, kind=kind, error=error, value=value)


class Backend(Protocol):
    """A language the runner can run programs in.

    Implementations must not raise: every way a program can end, its own failures
    included, is an :class:`Outcome`. (Should one raise anyway, the runner reports the run
    as failed with kind ``unknown``.)
    """

    def prepare(self) -> None:
        """Load what running a program needs, before the Start arrives.

        Called while the runner waits for nothing; whatever it imports is paid for
        before the parent's clock for the run starts (and, in a pool of warm runners,
        before the runner is needed at all). The zygote calls it once before it forks
        runners, which use the same backend, and a runner forked ahead of its run calls
        it again (for what its first run would write to pages it shares with the zygote):
        it must be safe to call more than once.

        A backend may also have ``prepare_for(*, calls: bool, awaits: bool)``: the same,
        for what a program that calls tools, or one that awaits, needs besides (a first
        call, an event loop's first run), which costs a child memory and time that other
        programs do not repay. The zygote calls it once with both; a runner forked ahead
        calls it for what the host expects of its program.

        And ``ahead_of_run(*, awaits: bool)``: called in a runner forked ahead of its one
        run only (never in the zygote), once its walls are up, before it says ready: what
        that run alone will use, made now (the Python backend: an event loop, where the
        program may await). Whatever it makes must be invisible to a program that does
        not use it.
        """
        ...

    def run(self, start: Start, client: Client) -> Outcome:
        """Run ``start.program`` to its end with ``start.bindings`` callable over ``client``.

        ``start.budget`` is informational: the parent enforces every item of it.

        A backend may also have ``run_json(start, client) -> Outcome | bytes``: the same,
        but a successful program's value comes as its JSON text in UTF-8 bytes, as msgspec
        writes it. The runner then calls that instead, and writes those bytes into the
        Result where they lie, without copying them into a ``str`` and then into the frame
        (two fresh buffers the size of the value, in a child that has never touched them).
        """
        ...


#: Builds a backend; called once per runner process.
BackendFactory = Callable[[], Backend]

#: The backend ``--backend`` selects when it is not given.
DEFAULT_BACKEND: Final = "python"

# name -> factory, or "module:attribute" of a factory not imported yet.
_REGISTRY: dict[str, BackendFactory | str] = {
    "python": "runner._backends.python:PythonBackend",
}


def register_backend(name: str, factory: BackendFactory | str) -> None:
    """Make ``factory`` the backend called ``name`` (replacing any earlier one).

    Args:
        name: what ``--backend`` names it by.
        factory: a callable returning the backend, or a ``"module:attribute"`` path to
            one, imported only when the backend is asked for.

    Raises:
        ValueError: an empty name, or a path without ``":"``.
    """
    if not name:
        raise ValueError("a backend needs a name")
    if isinstance(factory, str) and ":" not in factory:
        raise ValueError(f"backend path must be 'module:attribute', got {factory!r}")
    _REGISTRY[name] = factory


def backend_names() -> list[str]:
    """The names of the registered backends, sorted."""
    return sorted(_REGISTRY)


def get_backend(name: str) -> Backend:
    """Build the backend called ``name``.

    Raises:
        LookupError: no backend has that name (the message lists those that do).
        ImportError: the backend's module could not be imported.
    """
    try:
        factory = _REGISTRY[name]
    except KeyError:
        known = ", ".join(backend_names())
        raise LookupError(f"no backend named {name!r} (known: {known})") from None
    if isinstance(factory, str):
        import importlib

        module_name, _, attribute = factory.partition(":")
        loaded: BackendFactory = getattr(importlib.import_module(module_name), attribute)
        _REGISTRY[name] = factory = loaded
    return factory()
