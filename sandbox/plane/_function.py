"""Plain Python functions as execution-plane tools, with their claims."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, final

import anyio.to_thread
import msgspec

from protocol import Kind

from .._errors import ToolError
from ._model import (
    Annotations,
    CallContext,
    Facts,
    Replay,
    Result,
    ToolInfo,
    facts_from,
)

__all__ = ["FunctionTool", "input_schema"]

_ENCODER = msgspec.json.Encoder()

FactsFn = Callable[..., Facts | Mapping[str, Any] | Awaitable[Facts | Mapping[str, Any]]]
ReplayFn = Callable[..., Replay | str | Awaitable[Replay | str]]


def _arguments_type(fn: Callable[..., Any], name: str) -> type[msgspec.Struct]:
    """A struct with one field per parameter of ``fn``: it validates a call's input and
    gives the tool's JSON schema."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ToolError(f"tool {name!r}: its annotations do not resolve: {exc}") from None
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ToolError(f"tool {name!r}: parameter {p.name!r} cannot be given by name")
        hint = hints.get(p.name, Any)
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


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@final
class FunctionTool:
    """A Python function as a tool. Its input schema comes from the function's parameters
    and their annotations, and a call's input is checked against them before it runs.

    Args:
        fn: the function, sync or async. A sync one runs in a worker thread.
        name: defaults to the function's name.
        description: defaults to its docstring.
        annotations: behaviour hints (read-only, destructive, idempotent).
        facts: a function of the same arguments giving what a call would touch (a
            :class:`Facts` or a mapping of its fields); without it the tool makes no claim.
        replay: a function of the same arguments saying whether a call may run again,
            or a constant :class:`Replay` for every call.

    Raises:
        ToolError: a parameter that cannot be given by name, or a type with no JSON schema.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        annotations: Annotations | None = None,
        facts: FactsFn | None = None,
        replay: ReplayFn | Replay | None = None,
    ) -> None:
        self.fn = fn
        tool_name = name or str(getattr(fn, "__name__", ""))
        if not tool_name:
            raise ToolError(f"{fn!r} has no name; give one")
        self._arguments = _arguments_type(fn, tool_name)
        self._facts = facts
        self._replay = replay
        self._info = ToolInfo(
            name=tool_name,
            description=description if description is not None else inspect.getdoc(fn) or "",
            input_schema=input_schema(self._arguments),
            annotations=annotations or Annotations(),
            factual=facts is not None,
            replayable=replay is not None,
        )

    @property
    def info(self) -> ToolInfo:
        return self._info

    def _kwargs(self, arguments: dict[str, Any]) -> dict[str, Any] | str:
        try:
            parsed = msgspec.convert(arguments, self._arguments)
        except msgspec.ValidationError as exc:
            return f"{self._info.name}: bad arguments: {exc}"
        return {f: getattr(parsed, f) for f in parsed.__struct_fields__}

    async def call(self, arguments: dict[str, Any], context: CallContext) -> Result:
        kwargs = self._kwargs(arguments)
        if isinstance(kwargs, str):
            return Result(text=kwargs, is_error=True, kind=Kind.INVALID)
        if inspect.iscoroutinefunction(self.fn):
            value = await self.fn(**kwargs)
        else:
            value = await anyio.to_thread.run_sync(lambda: self.fn(**kwargs))
        try:
            text = value if isinstance(value, str) else _ENCODER.encode(value).decode()
        except (TypeError, msgspec.EncodeError) as exc:
            return Result(
                text=f"{self._info.name} returned a value that is not JSON: {exc}",
                is_error=True,
                kind=Kind.RAISED,
            )
        return Result(text=text, data=value)

    async def facts(self, arguments: dict[str, Any]) -> Facts:
        if self._facts is None:
            return Facts()
        kwargs = self._kwargs(arguments)
        if isinstance(kwargs, str):
            raise ValueError(kwargs)
        return facts_from(await _maybe_await(self._facts(**kwargs)))

    async def replay(self, arguments: dict[str, Any]) -> Replay:
        if self._replay is None:
            return Replay.UNKNOWN
        if isinstance(self._replay, Replay):
            return self._replay
        kwargs = self._kwargs(arguments)
        if isinstance(kwargs, str):
            return Replay.UNKNOWN
        return Replay(await _maybe_await(self._replay(**kwargs)))

    def __repr__(self) -> str:
        return f"FunctionTool({self._info.name!r})"
