"""The parent's call-channel role: answer the child's calls, as the budget authority.

Theory of operation
-------------------
One reader loop takes bytes from the channel, feeds :class:`ServerCore`, and for each
Request applies admission (cap, quotas) and calls the handler. The handler decides how it
runs:

* It returns a ``str``: the call is answered inline, in the reader loop, with no task
  spawned and no checkpoint. Fast tools (a dictionary lookup, an echo) cost a few
  microseconds this way; PERF-NOTES measured a task per call at 9-19x the raw pipe.
* It returns an awaitable: the call gets its own task, so one slow call blocks no other
  (seed: each request is handled concurrently), and its deadline is armed.

Deadlines are kept by one watcher task over the core's heap, not by a cancel scope around
each handler: at the deadline the parent answers ``transient`` at once, *then* cancels the
handler, so a handler stuck where cancellation cannot reach it (a thread, a shielded
section) cannot hold the answer back.

Responses leave through a write backlog with a single writer task. The reader never waits
for the child to read: a child that writes a large request while the parent has a large
answer for it would otherwise deadlock, each blocked writing to the other. The backlog is
bounded (:data:`MAX_BACKLOG_BYTES`): past it the reader stops reading until the child
drains its answers, so a child that never reads cannot grow the host's memory.

The watcher and the writer are started on first need (the first deadline armed, the first
answer the channel would not take whole), not with ``serve``: a run whose calls are all
answered inline, or that makes none, spawns no task at all (two task spawns and their
cancellation cost about 0.1 ms of the host's work per run).

A host that already waits on the call channel among other descriptors can go further and
start no task for ``serve`` either, until one is needed: :meth:`Server.pump` answers what
the child has sent so far without waiting, inline calls only, and says when ``serve``
must take over (a call that needs a task of its own, an answer the channel would not
take whole). ``serve`` then goes on from there.

How ``serve`` ends:

* the child closes its end (EOF): handlers still running are cancelled and ``serve``
  returns. Their calls can no longer be answered.
* the child sends garbage: the channel is closed, handlers cancelled, and the
  :class:`~protocol.RemoteProtocolError` raised.
* the caller cancels: the channel is closed (invariant 5: the child reads EOF and fails
  every call in flight), handlers are cancelled, cancellation propagates.
"""

from __future__ import annotations

import enum
import inspect
import math
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Final, final

import anyio
import anyio.abc

from ._calls import _DEFAULT_LIMITS, CallLimits, CallStats, ServerCore
from ._channel import FdChannel
from ._constants import MAX_FRAME_BYTES
from ._errors import CallError
from ._frames import Signal
from ._kinds import Kind
from ._messages import Request

__all__ = ["MAX_BACKLOG_BYTES", "Handler", "Pumped", "Server"]

#: A tool call's handler: returns the value (inline) or an awaitable of it (own task).
#: Raise :class:`~protocol.CallError` to classify a failure; anything else is ``unknown``.
Handler = Callable[[Request], "str | Awaitable[str]"]

#: Bytes of answers the parent holds for a child that is not reading before it stops
#: reading that child's calls: two maximal frames, so one large answer never stalls.
MAX_BACKLOG_BYTES: Final = 2 * MAX_FRAME_BYTES

#: Reads one :meth:`Server.pump` makes at most, so that a child that keeps writing cannot
#: keep the caller from its event loop.
PUMP_READS: Final = 8


class Pumped(enum.Enum):
    """What :meth:`Server.pump` leaves its caller to do."""

    #: Everything the child sent is answered: call ``pump`` again when the channel is
    #: readable.
    WATCH = "watch"
    #: Start :meth:`Server.serve` now: a call needs a task of its own (or the answers a
    #: writer), and ``serve`` starts it and goes on reading; ``pump`` may not be called
    #: again.
    SERVE = "serve"
    #: The child closed its end (or the channel was closed here): nothing more to serve.
    ENDED = "ended"


@final
class Server:
    """Serve one call channel: the child's calls, answered by ``handler``.

    Args:
        channel: the call channel (the server closes it when :meth:`serve` ends).
        handler: answers one call; see :data:`Handler`.
        limits: the calls, result bytes, calls in flight and seconds per call allowed
            (:class:`~protocol.CallLimits`; by default no quotas and the default in-flight
            cap). The child's ``deadline_ms`` can only shorten a call's deadline.
    """

    def __init__(
        self, channel: FdChannel, handler: Handler, limits: CallLimits = _DEFAULT_LIMITS
    ) -> None:
        self._core = ServerCore(limits)
        self._channel = channel
        self._handler = handler
        self._tg: anyio.abc.TaskGroup | None = None
        # Tasks wanted while no task group runs (pump): serve starts them first.
        self._wanted: list[Callable[[], Coroutine[Any, Any, None]]] = []
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._unstarted: dict[str, Awaitable[str]] = {}
        # The write backlog (see the module docstring).
        self._backlog: deque[memoryview] = deque()
        self._backlog_bytes = 0
        # The writer and the deadline watcher are tasks started on first need: a backlog,
        # a deadline. Their events are made then (None: the task is not running).
        self._backlog_ready: anyio.Event | None = None
        self._backlog_drained: anyio.Event | None = None
        # The deadline watcher sleeps until this; a nearer new deadline wakes it.
        self._watch_until = math.inf
        self._watch_wake: anyio.Event | None = None
        self._served = False
        self._error: Exception | None = None

    def statistics(self) -> CallStats:
        """The parent's own accounting of this channel (the authority, invariant 3)."""
        return self._core.statistics()

    async def serve(self) -> None:
        """Answer calls until the child closes the channel.

        Closing the channel from outside (:meth:`FdChannel.close`) stops the server: serve
        then returns normally.

        Raises:
            RemoteProtocolError: the child broke the protocol (the channel is closed).
            anyio.BrokenResourceError: the child closed its reading end, or the channel
                failed under us.
            RuntimeError: ``serve`` was called twice.
        """
        if self._served:
            raise RuntimeError("Server.serve() can run only once")
        self._served = True
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                for task in self._wanted:
                    tg.start_soon(task)
                self._wanted.clear()
                try:
                    await self._read_loop()
                except anyio.ClosedResourceError:
                    pass  # the channel was closed on our side: that is how to stop a server
                except Exception as exc:
                    # Raised after the task group, so that it comes out plain rather than
                    # wrapped in an ExceptionGroup.
                    self._error = self._error or exc
                tg.cancel_scope.cancel()
            if self._error is not None:
                raise self._error
        finally:
            self._tg = None
            self.close()

    def close(self) -> None:
        """Close the channel and forget the calls in flight, as ``serve`` does when it
        ends: for a caller that pumped and never started ``serve`` (or started it, and
        ended the run before it ran). Idempotent."""
        self._channel.close()
        self._core.abandon_all()
        for aw in self._unstarted.values():
            if inspect.iscoroutine(aw):
                aw.close()  # a task cancelled before it ran never awaited its handler
        self._unstarted.clear()
        self._wanted.clear()

    def pump(self) -> Pumped:
        """Answer what the child has sent so far, without waiting and without a task:
        read what the channel holds now (a few reads at most) and dispatch each whole
        call, as ``serve`` would. A call answered inline is answered here; the first that
        needs a task (its handler returned an awaitable), or an answer the channel would
        not take whole, leaves the rest to ``serve`` (:attr:`Pumped.SERVE`).

        Raises:
            RemoteProtocolError: the child broke the protocol.
            anyio.BrokenResourceError: the channel failed (the child closed its reading
                end, say).
            RuntimeError: ``serve`` has started.
        """
        if self._served:
            raise RuntimeError("Server.pump() once serve has started")
        core = self._core
        reads = 0
        while not self._wanted:
            if self._error is not None:
                raise self._error
            item = core.next_request()
            if item is Signal.NEED_DATA:
                if reads == PUMP_READS:
                    return Pumped.WATCH
                try:
                    if not self._channel.feed_nowait(core):
                        return Pumped.WATCH
                except anyio.ClosedResourceError:
                    return Pumped.ENDED
                reads += 1
                continue
            if item is Signal.CLOSED:
                return Pumped.ENDED
            assert isinstance(item, Request)
            self._take(item)
        if self._error is not None:
            raise self._error
        return Pumped.SERVE

    def _start(self, task: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start ``task`` in serve's task group; without one (pumping), when serve starts."""
        if self._tg is None:
            self._wanted.append(task)
        else:
            self._tg.start_soon(task)

    # -- reading ----------------------------------------------------------------------

    async def _read_loop(self) -> None:
        core = self._core
        channel = self._channel
        while True:
            item = core.next_request()
            if item is Signal.NEED_DATA:
                if self._backlog_bytes > MAX_BACKLOG_BYTES:
                    await self._wait_drained()
                await channel.feed(core)
                continue
            if item is Signal.CLOSED:
                return
            assert isinstance(item, Request)
            self._take(item)

    def _take(self, request: Request) -> None:
        """Admit ``request`` (the cap, the quotas) and dispatch it, or answer its refusal."""
        refusal = self._core.admit(request)
        if refusal is not None:
            self._send(refusal)
        else:
            self._dispatch(request)

    def _dispatch(self, request: Request) -> None:
        call_id = request.id
        try:
            out = self._handler(request)
        except Exception as exc:
            frame = self._settle_failure(call_id, exc)
        else:
            if type(out) is not str and inspect.isawaitable(out):
                # Held first, so that serve closes it whatever happens before its task runs.
                self._unstarted[call_id] = out
                self._core.arm_deadline(
                    call_id, request.deadline_ms, anyio.current_time(), request.tool
                )
                self._wake_watcher()
                self._start(partial(self._run_async, call_id))
                return
            frame = self._settle_value(call_id, out)
        if frame is not None:
            self._send(frame)

    async def _run_async(self, call_id: str) -> None:
        aw = self._unstarted.pop(call_id)
        if not self._core.is_inflight(call_id):  # expired before it even started
            if inspect.iscoroutine(aw):
                aw.close()
            return
        frame: bytearray | None = None
        with anyio.CancelScope() as scope:
            self._scopes[call_id] = scope
            try:
                value = await aw
            except Exception as exc:
                frame = self._settle_failure(call_id, exc)
            else:
                frame = self._settle_value(call_id, value)
            finally:
                self._scopes.pop(call_id, None)
        if frame is not None:
            self._send(frame)

    def _settle_value(self, call_id: str, value: object) -> bytearray | None:
        if type(value) is str:
            return self._core.settle(call_id, value)
        return self._core.settle_error(
            call_id, Kind.UNKNOWN, f"handler returned {type(value).__name__}, not str"
        )

    def _settle_failure(self, call_id: str, exc: Exception) -> bytearray | None:
        """Invariant 2: a CallError keeps its kind; anything unclassified is ``unknown``."""
        if isinstance(exc, CallError):
            return self._core.settle_error(call_id, exc.kind, exc.message)
        return self._core.settle_error(call_id, Kind.UNKNOWN, _describe(exc))

    # -- deadlines --------------------------------------------------------------------

    def _wake_watcher(self) -> None:
        nxt = self._core.next_deadline()
        if nxt is None:
            return
        if self._watch_wake is None:
            # The first deadline: start the watcher now (a run whose calls all settle
            # inline never pays for it). It reads the heap when it starts.
            self._watch_wake = anyio.Event()
            self._start(self._watch_deadlines)
        elif nxt < self._watch_until:
            self._watch_wake.set()

    async def _watch_deadlines(self) -> None:
        core = self._core
        while True:
            nxt = core.next_deadline()
            self._watch_until = math.inf if nxt is None else nxt
            wake = self._watch_wake = anyio.Event()
            with anyio.move_on_at(self._watch_until):
                await wake.wait()
            for call_id, frame in core.expire(anyio.current_time()):
                self._send(frame)  # answer first ...
                scope = self._scopes.get(call_id)
                if scope is not None:
                    scope.cancel()  # ... then cancel the handler

    # -- writing ----------------------------------------------------------------------

    def _send(self, frame: bytearray) -> None:
        """Queue ``frame``; written at once when nothing is queued ahead of it."""
        try:
            self._queue(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._stop(exc)

    def _stop(self, exc: Exception) -> None:
        """The channel broke: stop serving, and report ``exc`` plainly from serve.

        ``ClosedResourceError`` means the channel was closed on our side, which is how a
        server is stopped from outside; it is not an error.
        """
        if not isinstance(exc, anyio.ClosedResourceError):
            self._error = self._error or exc
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    def _queue(self, frame: bytearray) -> None:
        if not self._backlog:
            n = self._channel.try_write(frame)
            if n == len(frame):
                return
            self._backlog.append(memoryview(frame)[n:])
            self._backlog_bytes += len(frame) - n
            if self._backlog_ready is None:
                # The first answer the pipe would not take at once: start the writer now
                # (a run whose answers all fit never pays for it).
                self._backlog_ready = anyio.Event()
                self._start(self._write_backlog)
            self._backlog_ready.set()
        else:
            self._backlog.append(memoryview(frame))
            self._backlog_bytes += len(frame)

    async def _write_backlog(self) -> None:
        try:
            await self._write_backlog_loop()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._stop(exc)

    async def _write_backlog_loop(self) -> None:
        backlog = self._backlog
        channel = self._channel
        while True:
            assert self._backlog_ready is not None
            await self._backlog_ready.wait()
            while backlog:
                await channel.wait_writable()
                head = backlog[0]
                n = channel.try_write(head)
                self._backlog_bytes -= n
                if n == len(head):
                    backlog.popleft()
                else:
                    backlog[0] = head[n:]
            self._backlog_ready = anyio.Event()
            if self._backlog_drained is not None:
                self._backlog_drained.set()
                self._backlog_drained = None

    async def _wait_drained(self) -> None:
        while self._backlog_bytes > MAX_BACKLOG_BYTES:
            if self._backlog_drained is None:
                self._backlog_drained = anyio.Event()
            await self._backlog_drained.wait()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
