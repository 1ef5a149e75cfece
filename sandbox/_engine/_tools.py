"""Tools: plain Python callables that a sandboxed program (or an agent) may call by name.

One type, :class:`Tool`, for every use of a function as a tool: a run's host tool
(``host.<name>(...)`` in the program) and an execution-plane tool (with a definition and
claims, in an executor). A tool has a name, a description, and an input taken from the
function's parameters and their annotations: its JSON schema, and the check a call's
arguments pass before the function runs (a bad argument is an ``invalid`` failure, and
nothing runs). Annotations that do not resolve, or that name a type with no JSON form,
accept any value. Its return value goes back as JSON.

How a tool runs, chosen by what it is:

* ``async def``: its own task, concurrent with other calls, cancelled at its deadline.
* plain ``def``: in a worker thread by default, so a slow or blocking tool never stalls
  the host's event loop (and with it every wall clock); ``inline=True`` runs it directly
  in the event loop instead: for fast, pure functions, a few microseconds per call.

In an executor, a tool may also claim, per call, what the call would touch (``facts``) and
whether it may run again (``replay``); see :mod:`sandbox.plane`.
"""

from __future__ import annotations

import contextlib
import inspect
import keyword
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, final

import anyio
import anyio.to_thread
import msgspec

from protocol import CallError, Kind, Request, StartBinding

from .._errors import ToolError
from .._model import Annotations, CallContext, Facts, Replay, Result, ToolInfo, facts_from

__all__ = ["Tool", "Toolset", "input_schema", "tool"]

_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()

FactsFn = Callable[..., Facts | Mapping[str, Any] | Awaitable[Facts | Mapping[str, Any]]]
ReplayFn = Callable[..., Replay | str | Awaitable[Replay | str]]


@final
class Tool:
    """A function as a tool (see the module docstring).

    Args:
        fn: the function (sync or async).
        name: the name it is called by; defaults to the function's name.
        description: for people and models; defaults to the docstring.
        inline: run a sync function directly in the event loop (fast tools only).
        annotations: behaviour hints for an executor's policy (read-only, destructive,
            idempotent, open-world).
        facts: a function of the same arguments giving what a call would touch (a
            :class:`~sandbox.plane.Facts` or a mapping of its fields); without it the tool
            makes no claim.
        replay: a function of the same arguments saying whether a call may run again, or a
            constant :class:`~sandbox.plane.Replay` for every call.

    Raises:
        ToolError: the name is not an identifier, or a parameter cannot be given by name.
    """

    __slots__ = (
        "_arguments",
        "_facts",
        "_info",
        "_replay",
        "description",
        "fn",
        "inline",
        "is_async",
        "name",
        "relay",
        "signature",
    )

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        inline: bool = False,
        annotations: Annotations | None = None,
        facts: FactsFn | None = None,
        replay: ReplayFn | Replay | None = None,
    ) -> None:
        self.fn = fn
        self.relay = False
        self.name: str = _checked_name(name or str(getattr(fn, "__name__", "")))
        self.description = description if description is not None else inspect.getdoc(fn) or ""
        self.is_async = inspect.iscoroutinefunction(fn)
        self.inline = inline
        self._arguments: type[msgspec.Struct] | None = _arguments_type(fn, self.name)
        self._facts = facts
        self._replay = replay
        params = [
            p.name if p.default is p.empty else f"{p.name}={p.default!r}"
            for p in inspect.signature(fn).parameters.values()
        ]
        self.signature = f"{self.name}({', '.join(params)})"
        self._info = ToolInfo(
            name=self.name,
            description=self.description,
            input_schema=input_schema(self._arguments),
            annotations=annotations or Annotations(),
            factual=facts is not None,
            replayable=replay is not None,
        )

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
        self._arguments = None
        self._facts = None
        self._replay = None
        self.signature = signature
        self._info = ToolInfo(
            name=self.name,
            description=description,
            input_schema={"type": "object"},
            annotations=Annotations(),
            factual=False,
            replayable=False,
        )
        return self

    def binding(self) -> StartBinding:
        """How the program sees this tool (name and call shape, never the code)."""
        return StartBinding(name=self.name, signature=self.signature)

    @property
    def info(self) -> ToolInfo:
        """The tool's definition for an executor (name, description, input schema,
        annotations, and whether it makes claims)."""
        return self._info

    def arguments(self, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` checked against the function's parameters, as its keyword arguments.

        Raises:
            CallError: ``invalid``, saying what is wrong; the function must not run.
        """
        if self._arguments is None:
            return given
        try:
            parsed = msgspec.convert(given, self._arguments)
        except msgspec.ValidationError as exc:
            raise CallError(Kind.INVALID, f"{self.signature}: {exc}") from None
        return {f: getattr(parsed, f) for f in parsed.__struct_fields__}

    # -- as an execution-plane tool (sandbox.plane's Tool protocol) ------------------------

    async def call(self, arguments: dict[str, Any], context: CallContext) -> Result:
        """Run one call for an executor: its result, or a failure with a kind."""
        try:
            kwargs = self.arguments(arguments)
        except CallError as exc:
            return Result(text=exc.message, is_error=True, kind=exc.kind)
        if self.is_async:
            value = await (self.fn(kwargs) if self.relay else self.fn(**kwargs))
        else:
            value = await anyio.to_thread.run_sync(lambda: self.fn(**kwargs))
        try:
            text = value if isinstance(value, str) else _ENCODER.encode(value).decode()
        except (TypeError, msgspec.EncodeError) as exc:
            return Result(
                text=f"{self.name} returned a value that is not JSON: {exc}",
                is_error=True,
                kind=Kind.RAISED,
            )
        return Result(text=text, data=value)

    async def facts(self, arguments: dict[str, Any]) -> Facts:
        """What a call with ``arguments`` would touch, as the tool claims it.

        Raises:
            ValueError: the arguments are not the tool's (no claim can be read).
        """
        if self._facts is None:
            return Facts()
        try:
            kwargs = self.arguments(arguments)
        except CallError as exc:
            raise ValueError(exc.message) from None
        return facts_from(await _maybe_await(self._facts(**kwargs)))

    async def replay(self, arguments: dict[str, Any]) -> Replay:
        """Whether a call with ``arguments`` may run again, as the tool claims it."""
        if self._replay is None:
            return Replay.UNKNOWN
        if isinstance(self._replay, Replay):
            return self._replay
        try:
            kwargs = self.arguments(arguments)
        except CallError:
            return Replay.UNKNOWN
        return Replay(await _maybe_await(self._replay(**kwargs)))

    def __repr__(self) -> str:
        return f"Tool({self.signature})"


def _checked_name(name: str) -> str:
    if not name.isidentifier() or keyword.iskeyword(name):
        raise ToolError(f"tool name {name!r} is not a Python identifier")
    return name


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _arguments_type(fn: Callable[..., Any], name: str) -> type[msgspec.Struct]:
    """A struct with one field per parameter of ``fn``: it checks a call's input and gives
    the tool's JSON schema. A parameter whose annotation does not resolve, or names a type
    with no JSON form, takes any value.

    Raises:
        ToolError: a parameter that cannot be given by name (``*args``, ``**kwargs``,
            positional-only).
    """
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # annotations naming what is not importable here: take anything
        hints = {}
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ToolError(f"tool {name!r}: parameter {p.name!r} cannot be given by name")
        hint = hints.get(p.name, Any)
        try:
            msgspec.json.schema(hint)
        except (TypeError, ValueError):  # no JSON form: take anything
            hint = Any
        fields.append((p.name, hint) if p.default is p.empty else (p.name, hint, p.default))
    try:
        return msgspec.defstruct(
            f"{name}_arguments", fields, forbid_unknown_fields=True, kw_only=True
        )
    except (TypeError, ValueError) as exc:
        raise ToolError(f"tool {name!r}: {exc}") from None


def input_schema(arguments: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of ``arguments`` as a tool's input: an object at the top level."""
    try:
        (top,), components = msgspec.json.schema_components(
            [arguments], ref_template="#/$defs/{name}"
        )
    except (TypeError, ValueError) as exc:
        raise ToolError(f"no JSON schema for {arguments.__name__}: {exc}") from None
    ref = top["$ref"].rsplit("/", 1)[1]
    schema = dict(components.pop(ref))
    schema.pop("title", None)
    if components:
        schema["$defs"] = components
    return schema


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    inline: bool = False,
    annotations: Annotations | None = None,
    facts: FactsFn | None = None,
    replay: ReplayFn | Replay | None = None,
) -> Any:
    """Decorator form of :class:`Tool`: ``@tool`` or ``@tool(name=..., inline=True)``."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            inline=inline,
            annotations=annotations,
            facts=facts,
            replay=replay,
        )

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
        kwargs = t.arguments(_parse_args(t, request.args))
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


def _encode(t: Tool, value: Any) -> str:
    try:
        return _ENCODER.encode(value).decode()
    except (TypeError, msgspec.EncodeError) as exc:
        raise CallError(Kind.RAISED, f"{t.name} returned a value that is not JSON: {exc}") from None


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
    with _raised_as_call_error(t):
        value = t.fn(**kwargs)
    return _encode(t, value)


async def _run_thread(t: Tool, kwargs: dict[str, Any]) -> str:
    with _raised_as_call_error(t):
        value = await anyio.to_thread.run_sync(lambda: t.fn(**kwargs), abandon_on_cancel=True)
    return _encode(t, value)


async def _run_async(t: Tool, kwargs: dict[str, Any]) -> str:
    with _raised_as_call_error(t):
        value = await (t.fn(kwargs) if t.relay else t.fn(**kwargs))
    return _encode(t, value)
