"""Host tools: plain Python callables that a sandboxed program may call by name.

A tool has a name, a description and a signature taken from the function. The program
calls ``host.<name>(...)``; its arguments arrive as a JSON object of parameter names to
values, the function is called with them, and its return value goes back as JSON.

How a tool runs, chosen by what it is:

* ``async def``: its own task, concurrent with other calls, cancelled at its deadline.
* plain ``def``: in a worker thread by default, so a slow or blocking tool never stalls
  the host's event loop (and with it every wall clock); ``inline=True`` runs it directly
  in the event loop instead: for fast, pure functions, a few microseconds per call.
"""

from __future__ import annotations

import contextlib
import inspect
import keyword
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, final

import anyio
import anyio.to_thread
import msgspec

from protocol import CallError, Kind, Request, StartBinding

from .._errors import ToolError

__all__ = ["Tool", "Toolset", "tool"]

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


@final
class Tool:
    """One host tool.

    Args:
        fn: the function (sync or async).
        name: the name the program calls it by; defaults to the function's name.
        description: for people and models; defaults to the docstring's first line.
        inline: run a sync function directly in the event loop (fast tools only).

    Raises:
        ToolError: the name is not an identifier, or the function takes ``*args``.
    """

    __slots__ = ("_sig", "description", "fn", "inline", "is_async", "name", "relay", "signature")

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        inline: bool = False,
    ) -> None:
        self.fn = fn
        self.relay = False
        self.name: str = _checked_name(name or str(getattr(fn, "__name__", "")))
        doc = inspect.getdoc(fn) or ""
        self.description = description if description is not None else doc.split("\n", 1)[0]
        self.is_async = inspect.iscoroutinefunction(fn)
        self.inline = inline
        self._sig: inspect.Signature | None = inspect.signature(fn)
        params = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolError(f"tool {self.name!r}: *args and **kwargs cannot be bound")
            params.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
        self.signature = f"{self.name}({', '.join(params)})"

    @classmethod
    def relayed(
        cls,
        name: str,
        handler: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        signature: str,
        description: str = "",
    ) -> Tool:
        """A tool that hands each call's arguments, as one dict, to ``handler`` unchecked:
        for tools that live elsewhere and check their own input (the execution plane's).

        Raises:
            ToolError: the name is not an identifier.
        """
        self = cls.__new__(cls)
        self.fn = handler
        self.relay = True
        self.name = _checked_name(name)
        self.description = description
        self.is_async = True
        self.inline = False
        self._sig = None
        self.signature = signature
        return self

    def binding(self) -> StartBinding:
        """How the program sees this tool (name and call shape, never the code)."""
        return StartBinding(name=self.name, signature=self.signature)

    def __repr__(self) -> str:
        return f"Tool({self.signature})"


def _checked_name(name: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ToolError(f"tool name {name!r} is not a Python identifier")
    return name


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    inline: bool = False,
) -> Any:
    """Decorator form of :class:`Tool`: ``@tool`` or ``@tool(name=..., inline=True)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, name=name, description=description, inline=inline)

    return wrap if fn is None else wrap(fn)


@final
class Toolset:
    """The tools bound for one run, by name; builds the call handler for the Server.

    Args:
        tools: Tool objects, or plain callables (wrapped with default settings).

    Raises:
        ToolError: two tools with one name.
    """

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] = ()) -> None:
        items: Iterable[Any] = tools.values() if isinstance(tools, Mapping) else tools
        self._tools: dict[str, Tool] = {}
        for t in items:
            t = t if isinstance(t, Tool) else Tool(t)
            if t.name in self._tools:
                raise ToolError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def bindings(self) -> tuple[StartBinding, ...]:
        """The Start's bindings for these tools."""
        return tuple(t.binding() for t in self._tools.values())

    def handle(self, request: Request) -> str | Awaitable[str]:
        """Answer one call: inline for inline tools, else an awaitable (see module doc).

        Raises:
            CallError: unknown tool or bad arguments (``invalid``); the tool's own
                CallError passes through; other exceptions become ``raised`` with the
                exception's type and message.
        """
        t = self._tools.get(request.tool)
        if t is None:
            raise CallError(Kind.INVALID, f"no tool named {request.tool!r}")
        kwargs = _parse_args(t, request.args)
        if t.is_async:
            return _run_async(t, kwargs)
        if t.inline:
            return _call(t, kwargs)
        return _run_thread(t, kwargs)


def _parse_args(t: Tool, args: str) -> dict[str, Any]:
    try:
        parsed = _DECODER.decode(args) if args else {}
    except msgspec.DecodeError as exc:
        raise CallError(Kind.INVALID, f"{t.name}: arguments are not JSON: {exc}") from None
    if parsed is None:
        parsed = {}
    if not isinstance(parsed, dict):
        raise CallError(Kind.INVALID, f"{t.name}: arguments must be a JSON object of parameters")
    return parsed


def _bind_error(t: Tool, exc: TypeError) -> CallError:
    return CallError(Kind.INVALID, f"{t.signature}: {exc}")


def _encode(t: Tool, value: Any) -> str:
    try:
        return _ENCODER.encode(value).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise CallError(Kind.RAISED, f"{t.name} returned a value that is not JSON: {exc}") from None


def _check_args(t: Tool, kwargs: dict[str, Any]) -> None:
    if t._sig is None:
        return
    try:
        t._sig.bind(**kwargs)
    except TypeError as exc:
        raise _bind_error(t, exc) from None


@contextlib.contextmanager
def _raised_as_call_error(t: Tool) -> Iterator[None]:
    """A tool's own CallError passes through; any other exception becomes ``raised``."""
    try:
        yield
    except CallError:
        raise
    except Exception as exc:
        raise CallError(Kind.RAISED, f"{t.name}: {type(exc).__name__}: {exc}") from exc


def _call(t: Tool, kwargs: dict[str, Any]) -> str:
    _check_args(t, kwargs)
    with _raised_as_call_error(t):
        value = t.fn(**kwargs)
    return _encode(t, value)


async def _run_thread(t: Tool, kwargs: dict[str, Any]) -> str:
    _check_args(t, kwargs)
    with _raised_as_call_error(t):
        value = await anyio.to_thread.run_sync(lambda: t.fn(**kwargs), abandon_on_cancel=True)
    return _encode(t, value)


async def _run_async(t: Tool, kwargs: dict[str, Any]) -> str:
    _check_args(t, kwargs)
    with _raised_as_call_error(t):
        value = await (t.fn(kwargs) if t.relay else t.fn(**kwargs))
    return _encode(t, value)
