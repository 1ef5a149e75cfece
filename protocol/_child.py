"""The child's two roles, on the standard library alone: :class:`Client` and :class:`Runner`.

The child must start fast, so nothing here imports an async framework: the blocking forms
use ``os.read``/``os.write`` and ``select.poll``; the asyncio form of :class:`Client`
registers a reader on the running loop (asyncio is imported only by a program that is
already running under it).

Reading is non-blocking underneath (``poll`` then ``read``), so the blocking and asyncio
forms can share one channel: whichever form reads a Response hands it to the call that is
waiting for it, matched by id (invariant 6). Blocking calls from several threads take
turns reading (one reads, the others wait on a condition and are woken when their answer
arrives). Writes are blocking: the parent always keeps reading (its ``Server`` queues its
answers rather than stop reading), so a write cannot wait forever on a live parent.

The in-flight cap, the child's half
-----------------------------------
The parent answers ``limit`` at once to a call over its in-flight cap (invariant 4), so a
client that sent every call a program makes would see ``asyncio.gather`` over more calls
than the cap fail in part. The client is told the cap (``Start.budget.max_inflight``) and
never has more calls sent and unanswered than that: a call past it waits in a queue, in
the order the calls were made, and is sent when an answer frees a place. The place is
freed when the answer *arrives*, not when its caller collects it: the parent forgot the
call before it wrote the answer, so the parent never counts more calls in flight than the
client does, and never refuses one for the cap. A queued call whose caller gives up (an
asyncio task cancelled) is dropped and never sent; a sent one's answer is dropped when it
comes. Frames are written outside the client's lock, by the thread that made the call or
the one whose read freed the place, so that a reader never waits on a write while holding
the others up. The parent still refuses a child that sends more than the cap: this queue
is for the program's sake, never a thing the parent relies on.

Invariant 5, the child's half: when the parent closes the call channel, every call in
flight fails with ``CallError(Kind.CANCELED)``, queued ones included, and so does every
later call.
"""

from __future__ import annotations

import errno
import math
import os
import select
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Final, final

from ._calls import ClientCore, utf8_len
from ._constants import DEFAULT_MAX_INFLIGHT, INT64_MAX
from ._errors import CallError, ChannelClosed, ProtocolError, RemoteProtocolError
from ._frames import Signal
from ._kinds import Kind
from ._messages import Response, Result, Start
from ._pipesize import DEFAULT_PIPE_BYTES, fit_pipe
from ._start import RunnerCore

if TYPE_CHECKING:
    import asyncio

__all__ = ["Client", "Runner"]

_READ_CHUNK: Final = 1 << 16


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    with view:
        while view:
            try:
                n = os.write(fd, view)
            except BlockingIOError:
                select.select([], [fd], [])
                continue
            view = view[n:]


def _writev_all(fd: int, pieces: list[bytes | bytearray | memoryview]) -> None:
    """Write ``pieces`` in order, as few system calls as the kernel takes them in."""
    views = [memoryview(piece) for piece in pieces if len(piece)]
    most = os.sysconf("SC_IOV_MAX")
    while views:
        try:
            n = os.writev(fd, views[:most])
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if n:
            views[0] = views[0][n:]


def _poller(fd: int) -> select.poll:
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return poller


def _wait_readable(poller: select.poll, timeout: float | None) -> bool:
    ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
    return bool(poller.poll(ms))


def _deadline(timeout: float | None) -> float | None:
    """The monotonic time ``timeout`` seconds from now (None: no deadline)."""
    return None if timeout is None else time.monotonic() + timeout


def _readable_before(poller: select.poll, deadline: float | None) -> bool:
    """Wait until the channel is readable; False if ``deadline`` passes first."""
    if deadline is None:
        return _wait_readable(poller, None)
    left = deadline - time.monotonic()
    return left > 0 and _wait_readable(poller, left)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    asyncio = sys.modules.get("asyncio")
    return None if asyncio is None else asyncio._get_running_loop()


def _resolve(future: asyncio.Future[Response], outcome: Response | BaseException) -> None:
    if future.done():  # the caller gave up on it (cancelled)
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _outcome(response: Response | BaseException) -> str:
    if isinstance(response, BaseException):
        raise response
    if response.ok:
        return response.value
    raise CallError(response.kind or Kind.UNKNOWN, response.error)


def _check_cap(max_inflight: int) -> None:
    """Raise unless ``max_inflight`` is an in-flight cap as Start says one."""
    if isinstance(max_inflight, bool) or not isinstance(max_inflight, int):
        raise TypeError(f"max_inflight must be an int, got {max_inflight!r}")
    if not 0 <= max_inflight <= INT64_MAX:
        raise ValueError(
            f"max_inflight must be from 0 (the default cap) to {INT64_MAX}, got {max_inflight}"
        )


@final
class Client:
    """The program's side of the call channel: calls to the host's tools.

    At most ``max_inflight`` calls are sent and unanswered at once; calls past that wait,
    in order, until an answer frees a place (see the module docstring). A call's
    ``deadline_ms`` is counted by the parent from when the call is sent, so time spent
    waiting here is not part of it.

    Args:
        read_fd: the descriptor the parent's Responses arrive on.
        write_fd: the descriptor Requests leave by (may equal ``read_fd``).
        max_inflight: the parent's in-flight cap, as the Start says it
            (``Start.budget.max_inflight``); 0, the Start's "not said", means
            :data:`~protocol.DEFAULT_MAX_INFLIGHT`.

    Raises:
        ValueError: ``max_inflight`` is negative or past Go's int64.
        TypeError: ``max_inflight`` is not an ``int``.
    """

    def __init__(self, read_fd: int, write_fd: int, *, max_inflight: int = 0) -> None:
        _check_cap(max_inflight)
        os.set_blocking(read_fd, False)
        if write_fd != read_fd:
            os.set_blocking(write_fd, True)
        self._rfd = read_fd
        self._wfd = write_fd
        self._poller = _poller(read_fd)
        self._core = ClientCore()
        self._cond = threading.Condition(threading.Lock())
        self._write_lock = threading.Lock()
        self._fds_closed = False  # under _write_lock: no write after close()
        self._holds = DEFAULT_PIPE_BYTES  # under _write_lock: what the write pipe holds
        self._reading = False
        # Settled calls of blocking callers, by id, until they collect them.
        self._done: dict[str, Response | BaseException] = {}
        # Pending calls of asyncio callers, by id.
        self._futures: dict[str, asyncio.Future[Response]] = {}
        self._reader_loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._calls = 0
        self._bytes = 0
        # The in-flight cap (all under _cond but _outbox, see _flush): calls sent and not
        # answered; calls waiting for a place, by id in call order (an id whose caller
        # gave up is skipped), and their frames; frames with a place, to write; and the
        # calls whose callers gave up, whose answers are dropped.
        self._max_inflight = max_inflight or DEFAULT_MAX_INFLIGHT
        self._inflight = 0
        self._waiting: deque[str] = deque()
        self._queued: dict[str, bytearray] = {}
        self._outbox: deque[bytearray] = deque()
        self._abandoned: set[str] = set()

    @property
    def max_inflight(self) -> int:
        """The cap this client keeps to: the most calls it has sent and unanswered at once."""
        return self._max_inflight

    def limit_inflight(self, max_inflight: int) -> None:
        """Keep to the cap ``max_inflight`` (as in the constructor), for a client made
        before its Start said the cap (a runner makes it while it waits, off the run's
        path).

        Raises:
            RuntimeError: a call was made already.
            ValueError, TypeError: as the constructor's.
        """
        _check_cap(max_inflight)
        with self._cond:
            if self._calls:
                raise RuntimeError("the in-flight cap is set before the first call")
            self._max_inflight = max_inflight or DEFAULT_MAX_INFLIGHT

    @property
    def calls_made(self) -> int:
        """Calls this client sent (what the child reports in Result; not authoritative)."""
        return self._calls

    @property
    def bytes_received(self) -> int:
        """Result bytes this client received (reported in Result; not authoritative)."""
        return self._bytes

    # -- making calls -------------------------------------------------------------------

    def _send(self, tool: str, args: str, deadline_ms: int) -> str:
        """Register a call and send it, or queue it if the cap is reached; its id."""
        with self._cond:
            if self._failure is not None:
                raise self._failure
            call_id, frame = self._core.request(tool, args, deadline_ms)
            if self._inflight < self._max_inflight and not self._queued:
                self._inflight += 1
                self._calls += 1
                self._outbox.append(frame)
            else:
                self._queued[call_id] = frame
                self._waiting.append(call_id)
        self._flush()
        return call_id

    def _flush(self) -> None:
        """Write the frames that have a place (never called holding ``_cond``).

        Whoever puts a frame in the outbox flushes after: a flush that finds the writing
        lock taken waits for it, then writes whatever the other left.
        """
        outbox = self._outbox
        if not outbox:
            return
        with self._write_lock:
            while outbox and not self._fds_closed:
                try:
                    frame = outbox.popleft()
                except IndexError:  # the channel failed meanwhile and emptied it
                    return
                try:
                    if len(frame) > self._holds:  # (most frames: no call at all)
                        self._holds = fit_pipe(self._wfd, len(frame), self._holds)
                    _write_all(self._wfd, frame)
                except OSError as exc:
                    self._fail_all(CallError(Kind.CANCELED, f"call channel broken: {exc}"))
                    return

    def _promote(self) -> None:
        """Give the places answers freed to the calls waiting longest (holding the lock)."""
        waiting = self._waiting
        queued = self._queued
        while self._inflight < self._max_inflight and waiting:
            frame = queued.pop(waiting.popleft(), None)
            if frame is None:
                continue  # its caller gave up while it waited
            self._inflight += 1
            self._calls += 1
            self._outbox.append(frame)

    def _abandon(self, call_id: str) -> None:
        """The caller of ``call_id`` gave up on it (holding the lock): a queued call is
        never sent; a sent call's answer, when it comes, is dropped."""
        if self._failure is None:
            self._queued.pop(call_id, None)
            self._abandoned.add(call_id)

    def call(self, tool: str, args: str = "", *, deadline_ms: int = 0) -> str:
        """Call ``tool`` with ``args`` (raw text) and block until the parent answers.

        At the in-flight cap, the call first waits for a place (see the class docstring).

        Returns:
            The value, as text.

        Raises:
            CallError: the parent answered with a failure, or the channel closed
                (``Kind.CANCELED``).
            ProtocolError: the parent broke the protocol.
        """
        call_id = self._send(tool, args, deadline_ms)
        with self._cond:
            try:
                done = self._wait_blocking(call_id)
            except BaseException:  # interrupted (KeyboardInterrupt, say): give it up
                if self._done.pop(call_id, None) is None:
                    self._abandon(call_id)
                raise
        return self._collect(done)

    def _wait_blocking(self, call_id: str) -> Response | BaseException:
        """Read (or wait for another thread to read) until ``call_id`` is settled; called
        and returns holding the lock."""
        while True:
            done = self._done.pop(call_id, None)
            if done is not None:
                return done
            if self._reading:
                self._cond.wait()
                continue
            self._reading = True
            into = self._buffer()  # (only the reader feeds the core: it stays valid)
            self._cond.release()
            try:
                _wait_readable(self._poller, None)
                data = self._read(into)
            finally:
                self._cond.acquire()
                self._reading = False
            self._feed(data)
            self._cond.notify_all()
            if self._outbox:  # answers freed places: send the calls that waited for them
                self._cond.release()
                try:
                    self._flush()
                finally:
                    self._cond.acquire()

    async def acall(self, tool: str, args: str = "", *, deadline_ms: int = 0) -> str:
        """Call ``tool`` from asyncio; many such calls run concurrently, matched by id.

        Calls past the in-flight cap wait for a place, in order; one cancelled while it
        waits is never sent.

        Raises:
            CallError: as :meth:`call`.
            ProtocolError: as :meth:`call`.
        """
        import asyncio  # already imported: the caller is running under it

        loop = asyncio.get_running_loop()
        future: asyncio.Future[Response] = loop.create_future()
        call_id = self._send(tool, args, deadline_ms)
        with self._cond:
            done = self._done.pop(call_id, None)
            if done is not None:  # settled (or failed) before we could register
                return self._collect(done)
            self._futures[call_id] = future
            if self._reader_loop is None:
                loop.add_reader(self._rfd, self._on_readable)
                self._reader_loop = loop
        try:
            response = await future
        finally:
            with self._cond:
                if self._futures.pop(call_id, None) is not None:  # not settled: given up
                    self._abandon(call_id)
                self._maybe_remove_reader()
        return self._collect(response)

    def _collect(self, done: Response | BaseException) -> str:
        value = _outcome(done)
        self._bytes += utf8_len(value)
        return value

    # -- reading ------------------------------------------------------------------------

    def _buffer(self) -> memoryview | None:
        """Where the core would have the next read go (the rest of a large frame), or
        None: into bytes (holding the lock)."""
        try:
            return self._core.receive_buffer()
        except ProtocolError:
            return None  # failed: the next feed says so

    def _read(self, into: memoryview | None) -> bytes | int | None:
        """One non-blocking read: bytes, or the count read ``into`` the core's buffer (its
        view is released then); ``b""`` or ``0`` at EOF; None if nothing is there yet."""
        try:
            if into is None:
                return os.read(self._rfd, _READ_CHUNK)
            with into:
                return os.readv(self._rfd, (into,))
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno == errno.EBADF:
                return b"" if into is None else 0
            raise

    def _on_readable(self) -> None:
        with self._cond:
            if self._reading:
                return  # a blocking caller is reading; it will settle our futures
            data = self._read(self._buffer())
            self._feed(data)
            self._cond.notify_all()
            self._maybe_remove_reader()
        self._flush()

    def _maybe_remove_reader(self) -> None:
        loop = self._reader_loop
        if loop is not None and not self._futures:
            self._reader_loop = None
            if not loop.is_closed():
                loop.remove_reader(self._rfd)

    def _feed(self, data: bytes | int | None) -> None:
        """Give ``data`` (bytes, or the count read into the core's buffer) to the core and
        settle what it completes (holding the lock)."""
        if data is None:
            return
        core = self._core
        try:
            if isinstance(data, int):
                core.received_into(data)
            else:
                core.receive_data(data)
            while True:
                item = core.next_response()
                if item is Signal.NEED_DATA:
                    return
                if item is Signal.CLOSED:
                    self._fail_locked(
                        CallError(Kind.CANCELED, "the parent closed the call channel")
                    )
                    return
                assert isinstance(item, Response)
                if item.id in self._queued:  # the core took it for pending: fail it here
                    error = RemoteProtocolError(f"response for call id {item.id!r}, never sent")
                    self._fail_locked(error)
                    self._settle(item.id, error)
                    return
                self._inflight -= 1
                self._promote()
                self._settle(item.id, item)
        except ProtocolError as exc:
            self._fail_locked(exc)

    def _settle(self, call_id: str, outcome: Response | BaseException) -> None:
        future = self._futures.pop(call_id, None)
        if future is None:
            if call_id in self._abandoned:
                self._abandoned.discard(call_id)  # nobody waits for it any more
            else:
                self._done[call_id] = outcome
            return
        loop = future.get_loop()
        if _running_loop() is loop:
            _resolve(future, outcome)
        else:
            # A blocking caller in another thread read this answer: hand it to the
            # future's own loop, which must be woken to see it.
            loop.call_soon_threadsafe(_resolve, future, outcome)

    def _fail_all(self, error: BaseException) -> None:
        with self._cond:
            self._fail_locked(error)
            self._cond.notify_all()

    def _fail_locked(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        self._waiting.clear()
        self._queued.clear()
        self._outbox.clear()
        for call_id in self._core.close():
            self._settle(call_id, error)
        self._abandoned.clear()

    def close(self) -> None:
        """Close the channel; calls in flight and queued fail with
        ``CallError(Kind.CANCELED)``.

        The writing descriptor is closed last, so a parent that reads EOF knows that both
        are closed (the ``in_process`` level returns on that EOF).
        """
        self._fail_all(CallError(Kind.CANCELED, "the call channel was closed"))
        with self._cond:
            self._maybe_remove_reader()
        with self._write_lock:  # a thread still flushing writes to no reused descriptor
            self._fds_closed = True
            for fd in dict.fromkeys((self._rfd, self._wfd)):
                try:
                    os.close(fd)
                except OSError:
                    pass


@final
class Runner:
    """The child's side of the start channel: receive the Start, send the Result once.

    Args:
        read_fd: the descriptor the Start arrives on.
        write_fd: the descriptor the Result leaves by (may equal ``read_fd``).
    """

    def __init__(self, read_fd: int, write_fd: int) -> None:
        os.set_blocking(read_fd, False)
        if write_fd != read_fd:
            os.set_blocking(write_fd, True)
        self._rfd = read_fd
        self._wfd = write_fd
        self._poller = _poller(read_fd)
        self._core = RunnerCore()
        self._holds = DEFAULT_PIPE_BYTES  # what the write pipe holds
        self._closed = False

    def await_start(self, timeout: float | None = None) -> Start:
        """Wait for the parent's Start.

        Always returns or raises within ``timeout``, even when the parent is alive and
        silent: on timeout the channel is closed.

        Raises:
            TimeoutError: no Start within ``timeout`` seconds (the channel is closed).
            ChannelClosed: the parent closed the channel first.
            RemoteProtocolError: the parent sent garbage.
        """
        if self._closed:
            raise ChannelClosed("the start channel is closed")
        deadline = _deadline(timeout)
        core = self._core
        while True:
            item = core.next_start()
            if isinstance(item, Start):
                return item
            if not _readable_before(self._poller, deadline):
                self.close()
                raise TimeoutError(f"no Start within {timeout} s")
            try:
                data = os.read(self._rfd, _READ_CHUNK)
            except BlockingIOError:
                continue
            core.receive_data(data)

    def send_result(self, result: Result) -> None:
        """Send the run's Result (once).

        Raises:
            LocalProtocolError: no Start yet, or a Result was sent already.
            LocalFrameTooLarge: the Result is too large; send a smaller one instead.
            ChannelClosed: the channel is closed.
            OSError: the parent is gone (EPIPE).
        """
        if self._closed:
            raise ChannelClosed("the start channel is closed")
        self._write_result([self._core.send_result(result)])

    def send_result_json(self, result: Result, value_json: bytes) -> None:
        """Send the run's Result with ``value_json`` (the value's JSON text, as msgspec
        writes it) as its value (once); a large value goes from where it lies, not copied
        (:meth:`RunnerCore.send_result_json`).

        Raises:
            as :meth:`send_result`; and UnicodeDecodeError or MemoryError, when nothing
            was sent.
        """
        if self._closed:
            raise ChannelClosed("the start channel is closed")
        self._write_result(self._core.send_result_json(result, value_json))

    def _write_result(self, pieces: list[bytes | bytearray | memoryview]) -> None:
        """Write the Result's frame, in ``pieces``; a large one crosses in one pipe-full,
        not in many (best effort)."""
        size = sum(len(piece) for piece in pieces)
        if size > self._holds:
            self._holds = fit_pipe(self._wfd, size, self._holds)
        _writev_all(self._wfd, pieces)

    def wait_closed(self, timeout: float | None = None) -> bool:
        """After the Result: wait until the parent closes the start channel (EOF).

        The parent closes it once it has finished with the run's other processes, so a
        runner that waits here keeps holding its descendants (as their subreaper) until
        the parent has counted them. Anything the parent sends meanwhile is ignored.

        Returns:
            True at EOF; False if ``timeout`` passed first or the channel is closed here.
        """
        if self._closed:
            return False
        deadline = _deadline(timeout)
        while _readable_before(self._poller, deadline):
            try:
                if not os.read(self._rfd, _READ_CHUNK):
                    return True
            except BlockingIOError:
                continue
            except OSError:
                return True  # the channel broke: as good as closed
        return False

    def close(self) -> None:
        """Close the channel (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for fd in {self._rfd, self._wfd}:
            try:
                os.close(fd)
            except OSError:
                pass
