"""A session's view of an executor: its tools bound, its policy, and pinned facts readings."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import final

import anyio
import msgspec

from protocol import Kind

from .._model import Call, CallContext, Facts, Replay, Result, ToolInfo
from ._executor import Batcher, Executor
from .errors import FactsUnavailable, PlaneError, Refused, UnknownTool

__all__ = ["ALLOW", "Batch", "Decision", "Policy", "Set", "deny"]


@final
class Decision(msgspec.Struct, frozen=True):
    """A policy's verdict on one call."""

    allow: bool
    reason: str = ""


ALLOW = Decision(True)


def deny(reason: str) -> Decision:
    """A refusal, with the reason the caller (a model, a program) is told."""
    return Decision(False, reason)


#: Decides one call from the tool's definition and the call's facts (the pinned reading;
#: the zero Facts for a tool that makes no claim, see ToolInfo.factual).
Policy = Callable[[Call, ToolInfo, Facts], Decision | Awaitable[Decision]]


class _Reading:
    """One reading of one call's claim, shared by every reader while it is pinned."""

    __slots__ = ("done", "error", "facts", "refs", "started")

    def __init__(self) -> None:
        self.refs = 0
        self.started = False
        self.done = anyio.Event()
        self.facts: Facts | None = None
        self.error: Exception | None = None

    async def get(self, read: Callable[[], Awaitable[Facts]]) -> Facts:
        if not self.started:
            self.started = True
            try:
                self.facts = await read()
            except Exception as exc:
                self.error = exc
            finally:
                self.done.set()
        else:
            await self.done.wait()
        if self.error is not None:
            raise _blocked(self.error)
        assert self.facts is not None
        return self.facts


def _blocked(exc: Exception) -> Exception:
    """A reading's failure, as every reader of it sees it (the same error each time)."""
    if isinstance(exc, PlaneError):
        return exc
    return FactsUnavailable(f"{type(exc).__name__}: {exc}")


_batch: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("plane_batch", default=None)


@final
class Batch:
    """The facts of one model response's calls, read together on the first reading under
    it and held for the decisions about them (see :meth:`Set.pin_batch`)."""

    def __init__(self, owner: Set, calls: Sequence[Call]) -> None:
        self._owner = owner
        self._calls = [c for c in calls if owner._factual(c.tool)]
        self._keys = {c.key() for c in self._calls}
        self._readings: dict[bytes, Facts | Exception] | None = None
        self._reading: anyio.Event | None = None
        self.released = False

    def holds(self, call: Call) -> bool:
        return call.key() in self._keys

    async def facts(self, call: Call) -> Facts:
        if self.released:
            raise FactsUnavailable(f"{call.tool}: its batch was released; read it afresh")
        if self._reading is None:
            self._reading = anyio.Event()
            try:
                self._readings = await self._owner._read_batch(self._calls)
            except Exception as exc:
                self._readings = dict.fromkeys(self._keys, exc)
            finally:
                self._reading.set()
        else:
            await self._reading.wait()
        if self.released:
            raise FactsUnavailable(f"{call.tool}: its batch was released; read it afresh")
        assert self._readings is not None
        got = self._readings[call.key()]
        if isinstance(got, Exception):
            raise _blocked(got)
        return got

    def release(self) -> None:
        self.released = True
        self._readings = None


@final
class Set:
    """An executor's tools bound for one session: what the model is offered, what the
    policy decides on, and how every call, direct or made by a program, is carried out.

    Readings are pinned so that one decision reads one claim: under :meth:`pin`, every
    reading of a call's facts is the first one; under :meth:`pin_batch`, a model
    response's calls are read in one request (when the executor is a
    :class:`~sandbox.plane.parts.Batcher`) and held until the batch is let go. A failed reading
    blocks its call each time it is read.

    Make one with :meth:`bind`.
    """

    def __init__(
        self, executor: Executor, tools: Sequence[ToolInfo], policy: Policy | None = None
    ) -> None:
        self.executor = executor
        self._tools = tuple(tools)
        self._by_name: dict[str, ToolInfo] = {}
        for t in self._tools:
            self._by_name.setdefault(t.name, t)
        self._policy = policy
        self._pins: dict[bytes, _Reading] = {}
        self._batches: list[Batch] = []

    @classmethod
    async def bind(cls, executor: Executor, *, policy: Policy | None = None) -> Set:
        """Bind ``executor``'s tools; ``policy`` decides every call (None allows all)."""
        return cls(executor, await executor.tools(), policy)

    @property
    def tools(self) -> tuple[ToolInfo, ...]:
        """The bound tools, in the executor's order."""
        return self._tools

    def by_name(self, name: str) -> ToolInfo | None:
        """The tool named ``name``, the first if two have it."""
        return self._by_name.get(name)

    def _factual(self, name: str) -> bool:
        t = self._by_name.get(name)
        return t is not None and t.factual

    # -- readings --

    async def _read_batch(self, calls: Sequence[Call]) -> dict[bytes, Facts | Exception]:
        if not calls:
            return {}
        if isinstance(self.executor, Batcher):
            got = await self.executor.batch_facts(calls)
            return {c.key(): g for c, g in zip(calls, got, strict=True)}
        out: dict[bytes, Facts | Exception] = {}
        for c in calls:
            try:
                out[c.key()] = await self.executor.facts(c)
            except Exception as exc:
                out[c.key()] = exc
        return out

    async def facts(self, call: Call) -> Facts:
        """The call's facts as its decision reads them: the batch's reading under
        :meth:`pin_batch`, the pinned one under :meth:`pin`, else a fresh one.

        Raises:
            UnknownTool: no such tool.
            FactsUnavailable: the reading failed (the same error for every reader).
        """
        if call.tool not in self._by_name:
            raise UnknownTool(f"no tool named {call.tool!r}")
        if not self._factual(call.tool):
            return Facts()
        batch = _batch.get()
        if batch is not None and batch.holds(call) and batch in self._batches:
            return await batch.facts(call)
        pinned = self._pins.get(call.key())
        if pinned is not None:
            return await pinned.get(lambda: self.executor.facts(call))
        try:
            return await self.executor.facts(call)
        except Exception as exc:
            raise _blocked(exc) from exc

    async def replay(self, call: Call) -> Replay:
        """Whether the call may run again (:attr:`Replay.UNKNOWN` when unreadable)."""
        if call.tool not in self._by_name:
            raise UnknownTool(f"no tool named {call.tool!r}")
        return await self.executor.replay(call)

    @contextlib.contextmanager
    def pin(self, call: Call) -> Iterator[None]:
        """Hold one reading of ``call``'s facts for a decision about it: every reading
        inside is the first one, made by whichever comes first. Two pins of one call share
        it; it goes with the last. A tool that makes no claim pins nothing."""
        if not self._factual(call.tool):
            yield
            return
        key = call.key()
        entry = self._pins.get(key)
        if entry is None:
            entry = self._pins[key] = _Reading()
        entry.refs += 1
        try:
            yield
        finally:
            entry.refs -= 1
            if entry.refs == 0 and self._pins.get(key) is entry:
                del self._pins[key]

    @contextlib.contextmanager
    def pin_batch(self, calls: Sequence[Call]) -> Iterator[Batch]:
        """Hold the facts of one model response's ``calls`` for the decisions about them.

        On the first reading inside, every claiming call of the batch is read in one
        request; every reading of one of them inside is that reading. The batch is let
        go when the block ends, when a newer batch starts (the run moved on), on
        :meth:`release` and on :meth:`release_all`; a reading under it after that fails.
        """
        for old in self._batches:
            old.release()
        batch = Batch(self, calls)
        self._batches = [batch]
        token = _batch.set(batch)
        try:
            yield batch
        finally:
            _batch.reset(token)
            batch.release()
            if batch in self._batches:
                self._batches.remove(batch)

    def release(self) -> None:
        """Let go of the batch the current context reads, at once (before asking a person,
        so that a slow answer holds no reading open)."""
        batch = _batch.get()
        if batch is not None:
            batch.release()
            if batch in self._batches:
                self._batches.remove(batch)

    def release_all(self) -> None:
        """Let go of every batch and pin, as the session closes."""
        for b in self._batches:
            b.release()
        self._batches = []
        self._pins.clear()

    # -- decisions and calls --

    async def decide(self, call: Call) -> Decision:
        """The policy's verdict on ``call``, from the pinned reading of its facts.

        Raises:
            UnknownTool: no such tool.
            FactsUnavailable: the facts could not be read: the call is blocked.
        """
        info = self._by_name.get(call.tool)
        if info is None:
            raise UnknownTool(f"no tool named {call.tool!r}")
        facts = await self.facts(call)
        if self._policy is None:
            return ALLOW
        verdict = self._policy(call, info, facts)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if not isinstance(verdict, Decision):
            raise TypeError(f"the policy returned {verdict!r}, not a Decision")
        return verdict

    async def call(self, call: Call) -> Result:
        """Decide ``call`` and, if the policy allows it, run it. Calls the tool makes of
        other tools (a program's host calls) come back here and are decided the same way.

        Raises:
            Refused: the policy refused it.
            UnknownTool, FactsUnavailable: as :meth:`decide`.
            PlaneError: the executor's own errors (closed, unreachable, lost).
        """
        with self.pin(call):
            verdict = await self.decide(call)
        if not verdict.allow:
            raise Refused(call.tool, verdict.reason)
        return await self.executor.call(call, CallContext(invoke=self._nested))

    async def _nested(self, call: Call) -> Result:
        token = _batch.set(None)  # a nested call is a batch of its own
        try:
            return await self.call(call)
        except Refused as exc:
            return Result(text=str(exc), is_error=True, kind=Kind.DENIED)
        except FactsUnavailable as exc:
            return Result(text=f"{call.tool}: blocked: {exc}", is_error=True, kind=Kind.DENIED)
        except UnknownTool as exc:
            return Result(text=str(exc), is_error=True, kind=Kind.INVALID)
        except PlaneError as exc:
            return Result(text=f"{call.tool}: {exc}", is_error=True, kind=Kind.TRANSIENT)
        finally:
            _batch.reset(token)
