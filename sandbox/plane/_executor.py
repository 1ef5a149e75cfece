"""The seam between a session and what carries out its tool calls, and its in-process case."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import socket
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, Protocol, final, runtime_checkable

import anyio

from protocol import Kind

from .._model import (
    Call,
    CallContext,
    Closeable,
    Descriptor,
    Facts,
    Factual,
    NeedsPeers,
    Replay,
    Replayable,
    Result,
    Tool,
    ToolInfo,
)
from .errors import DuplicateTool, ExecutorClosed, FactsUnavailable, UnknownTool

__all__ = ["FACTS_TIMEOUT", "Batcher", "Executor", "InProcess"]

#: How long one facts or replay reading may take before it is an error that blocks the call.
FACTS_TIMEOUT = 10.0


@runtime_checkable
class Executor(Protocol):
    """Runs a session's tools on its behalf, wherever they are.

    The session decides on a call (its policy, its record); the executor carries it out,
    says what a call would touch (:meth:`facts`) and whether it may run again
    (:meth:`replay`). :class:`InProcess` is the case with the wire left out;
    :class:`~sandbox.plane.Remote` reaches one served over MCP.
    """

    async def tools(self) -> Sequence[ToolInfo]:
        """The tools the executor runs, in its order."""
        ...

    async def facts(self, call: Call) -> Facts:
        """The tool's facts claim for the call; the zero :class:`Facts` for a tool that
        makes none.

        Raises:
            UnknownTool: no such tool.
            FactsUnavailable: the reading failed or timed out; the call is blocked.
            PlaneError: a remote executor's connection state (Unreachable, Changed,
                ExecutorClosed), which blocks the call just as well.
        """
        ...

    async def replay(self, call: Call) -> Replay:
        """Whether the call may run again; :attr:`Replay.UNKNOWN` when it cannot be read."""
        ...

    async def call(self, call: Call, context: CallContext | None = None) -> Result:
        """Run the call.

        Raises:
            UnknownTool: no such tool.
            ExecutorClosed: the executor was closed.
        """
        ...

    @property
    def descriptor(self) -> Descriptor:
        """The workspace the tools act in."""
        ...

    async def aclose(self) -> None:
        """Release what the tools hold; once (later calls do nothing)."""
        ...


@runtime_checkable
class Batcher(Protocol):
    """An executor that reads the facts of several calls in one request, as a model
    response's calls arrive together (:meth:`~sandbox.plane.Set.pin_batch` uses it)."""

    async def batch_facts(self, calls: Sequence[Call]) -> list[Facts | Exception]:
        """Each call's claim, or the error reading it (an unknown tool, the tool's own).

        Raises:
            FactsUnavailable: the request itself failed; nothing was read and every call
                of the batch is blocked.
        """
        ...


async def _close_all(tools: Iterable[Any]) -> None:
    """Close every closeable tool, the last built first; the first error is raised after."""
    first: BaseException | None = None
    for t in reversed(list(tools)):
        if isinstance(t, Closeable):
            try:
                await t.aclose()
            except Exception as exc:
                first = first or exc
    if first is not None:
        raise first


def _check_claims(t: Tool, info: ToolInfo) -> None:
    if info.factual and not isinstance(t, Factual):
        raise TypeError(f"tool {info.name!r} says it makes the facts claim and has no facts()")
    if info.replayable and not isinstance(t, Replayable):
        raise TypeError(f"tool {info.name!r} says it answers replay and has no replay()")


def _by_name(tools: Iterable[Tool]) -> dict[str, Tool]:
    """The tools by name, in their order, each checked to be a tool that keeps its flags'
    promises, and named once."""
    named: dict[str, Tool] = {}
    for t in tools:
        if not isinstance(t, Tool):
            raise TypeError(f"{t!r} is not a tool (it needs info and call())")
        info = t.info
        if info.name in named:
            raise DuplicateTool(f"two tools are named {info.name!r}")
        _check_claims(t, info)
        named[info.name] = t
    return named


def _introduce(tools: Collection[Tool]) -> None:
    """Tell each tool that needs them its peers: the others, as they were given."""
    given = tuple(t.info for t in tools)
    for t in tools:
        if isinstance(t, NeedsPeers):
            t.peers(tuple(i for i in given if i.name != t.info.name))


@final
class InProcess:
    """The executor of ``tools`` in this process.

    Args:
        tools: the tools, in the order the session is offered them.
        descriptor: the workspace they act in (defaults to this host's, at the
            current directory).
        facts_timeout: seconds one facts or replay reading may take.

    Raises:
        DuplicateTool: two tools have one name.
        TypeError: something that is not a :class:`~sandbox.plane.Tool`, or a tool whose
            flags promise a claim it cannot make.

    Once built, the executor owns its tools and closes them when it closes; if building
    fails, the tools stay the caller's. :meth:`build` makes the tools too, and closes what
    it made when anything fails.
    """

    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        descriptor: Descriptor | None = None,
        facts_timeout: float = FACTS_TIMEOUT,
    ) -> None:
        if not (facts_timeout > 0 and math.isfinite(facts_timeout)):
            raise ValueError(f"facts_timeout must be a positive number, got {facts_timeout!r}")
        self._tools = _by_name(tools)
        _introduce(self._tools.values())
        # A tool told its peers may describe itself anew (the program tool lists them).
        self._infos = tuple(t.info for t in self._tools.values())
        self._descriptor = descriptor or _host_descriptor()
        self._facts_timeout = facts_timeout
        self._closed = False

    @classmethod
    async def build(
        cls,
        makers: Iterable[Callable[[], Any]],
        *,
        descriptor: Descriptor | None = None,
        facts_timeout: float = FACTS_TIMEOUT,
    ) -> InProcess:
        """Make the tools, each maker once (a maker returns a tool or several, and may be
        async), and the executor over them. If a maker raises, or the executor refuses what
        they made, every tool made so far is closed before the error is raised.
        """
        made: list[Any] = []
        try:
            for make in makers:
                out = make()
                if inspect.isawaitable(out):
                    out = await out
                if isinstance(out, Iterable) and not isinstance(out, Tool):
                    made.extend(out)
                else:
                    made.append(out)
            return cls(made, descriptor=descriptor, facts_timeout=facts_timeout)
        except BaseException:
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(Exception):
                    await _close_all(made)
            raise

    def __repr__(self) -> str:
        return f"InProcess({', '.join(self._tools)})"

    async def tools(self) -> Sequence[ToolInfo]:
        return self._infos

    @property
    def descriptor(self) -> Descriptor:
        return self._descriptor

    def _tool(self, name: str) -> Tool:
        if self._closed:
            raise ExecutorClosed("the executor is closed")
        t = self._tools.get(name)
        if t is None:
            raise UnknownTool(f"no tool named {name!r}")
        return t

    async def facts(self, call: Call) -> Facts:
        t = self._tool(call.tool)
        if not t.info.factual:
            return Facts()
        assert isinstance(t, Factual)
        try:
            with anyio.fail_after(self._facts_timeout):
                return await t.facts(call.arguments)
        except TimeoutError:
            raise FactsUnavailable(
                f"{call.tool}: the facts reading took longer than {self._facts_timeout} s"
            ) from None
        except Exception as exc:
            raise FactsUnavailable(f"{call.tool}: facts: {type(exc).__name__}: {exc}") from exc

    async def replay(self, call: Call) -> Replay:
        t = self._tool(call.tool)
        if not t.info.replayable:
            return Replay.UNKNOWN
        assert isinstance(t, Replayable)
        try:
            with anyio.fail_after(self._facts_timeout):
                return Replay(await t.replay(call.arguments))
        except Exception:
            return Replay.UNKNOWN

    async def call(self, call: Call, context: CallContext | None = None) -> Result:
        t = self._tool(call.tool)
        if context is None or context.invoke is None:
            context = CallContext(invoke=self._direct)
        try:
            return await t.call(call.arguments, context)
        except Exception as exc:
            return Result(
                text=f"{call.tool}: {type(exc).__name__}: {exc}", is_error=True, kind=Kind.RAISED
            )

    async def _direct(self, call: Call) -> Result:
        """A nested call when no session decides: the executor's own tool, as it is."""
        try:
            return await self.call(call)
        except UnknownTool as exc:
            return Result(text=str(exc), is_error=True, kind=Kind.INVALID)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        await _close_all(self._tools.values())


def _host_descriptor() -> Descriptor:
    return Descriptor(kind="host", ref=socket.gethostname(), root=os.getcwd())
