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

Invariant 5, the child's half: when the parent closes the call channel, every call in
flight fails with ``CallError(Kind.CANCELED)`` and so does every later call.
"""

from __future__ import annotations

import errno
import math
import os
import select
import sys
import threading
import time
from typing import TYPE_CHECKING, Final, final

from ._calls import ClientCore, utf8_len
from ._errors import CallError, ChannelClosed, ProtocolError
from ._frames import Signal
from ._kinds import Kind
from ._messages import Response, Result, Start
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


@final
class Client:
    """The program's side of the call channel: calls to the host's tools.

    Args:
        read_fd: the descriptor the parent's Responses arrive on.
        write_fd: the descriptor Requests leave by (may equal ``read_fd``).
    """

    def __init__(self, read_fd: int, write_fd: int) -> None:
        os.set_blocking(read_fd, False)
        if write_fd != read_fd:
            os.set_blocking(write_fd, True)
        self._rfd = read_fd
        self._wfd = write_fd
        self._poller = _poller(read_fd)
        self._core = ClientCore()
        self._cond = threading.Condition(threading.Lock())
        self._write_lock = threading.Lock()
        self._reading = False
        # Settled calls of blocking callers, by id, until they collect them.
        self._done: dict[str, Response | BaseException] = {}
        # Pending calls of asyncio callers, by id.
        self._futures: dict[str, asyncio.Future[Response]] = {}
        self._reader_loop: asyncio.AbstractEventLoop | None = None
        self._failure: BaseException | None = None
        self._calls = 0
        self._bytes = 0

    @property
    def calls_made(self) -> int:
        """Calls this client made (what the child reports in Result; not authoritative)."""
        return self._calls

    @property
    def bytes_received(self) -> int:
        """Result bytes this client received (reported in Result; not authoritative)."""
        return self._bytes

    # -- making calls -------------------------------------------------------------------

    def _send(self, tool: str, args: str, deadline_ms: int) -> str:
        with self._cond:
            if self._failure is not None:
                raise self._failure
            call_id, frame = self._core.request(tool, args, deadline_ms)
            self._calls += 1
        with self._write_lock:
            try:
                _write_all(self._wfd, frame)
            except OSError as exc:
                self._fail_all(CallError(Kind.CANCELED, f"call channel broken: {exc}"))
        return call_id

    def call(self, tool: str, args: str = "", *, deadline_ms: int = 0) -> str:
        """Call ``tool`` with ``args`` (raw text) and block until the parent answers.

        Returns:
            The value, as text.

        Raises:
            CallError: the parent answered with a failure, or the channel closed
                (``Kind.CANCELED``).
            ProtocolError: the parent broke the protocol.
        """
        call_id = self._send(tool, args, deadline_ms)
        with self._cond:
            while True:
                done = self._done.pop(call_id, None)
                if done is not None:
                    return self._collect(done)
                if self._reading:
                    self._cond.wait()
                    continue
                self._reading = True
                self._cond.release()
                try:
                    _wait_readable(self._poller, None)
                    data = self._read()
                finally:
                    self._cond.acquire()
                    self._reading = False
                self._feed(data)
                self._cond.notify_all()

    async def acall(self, tool: str, args: str = "", *, deadline_ms: int = 0) -> str:
        """Call ``tool`` from asyncio; many such calls run concurrently, matched by id.

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
                self._futures.pop(call_id, None)
                self._maybe_remove_reader()
        return self._collect(response)

    def _collect(self, done: Response | BaseException) -> str:
        value = _outcome(done)
        self._bytes += utf8_len(value)
        return value

    # -- reading ------------------------------------------------------------------------

    def _read(self) -> bytes | None:
        """One non-blocking read: bytes, ``b""`` at EOF, None if nothing is there yet."""
        try:
            return os.read(self._rfd, _READ_CHUNK)
        except BlockingIOError:
            return None
        except OSError as exc:
            if exc.errno == errno.EBADF:
                return b""
            raise

    def _on_readable(self) -> None:
        with self._cond:
            if self._reading:
                return  # a blocking caller is reading; it will settle our futures
            data = self._read()
            self._feed(data)
            self._cond.notify_all()
            self._maybe_remove_reader()

    def _maybe_remove_reader(self) -> None:
        loop = self._reader_loop
        if loop is not None and not self._futures:
            self._reader_loop = None
            if not loop.is_closed():
                loop.remove_reader(self._rfd)

    def _feed(self, data: bytes | None) -> None:
        """Give ``data`` to the core and settle what it completes (holding the lock)."""
        if data is None:
            return
        core = self._core
        try:
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
                self._settle(item.id, item)
        except ProtocolError as exc:
            self._fail_locked(exc)

    def _settle(self, call_id: str, outcome: Response | BaseException) -> None:
        future = self._futures.pop(call_id, None)
        if future is None:
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
        for call_id in self._core.close():
            self._settle(call_id, error)

    def close(self) -> None:
        """Close the channel; calls in flight fail with ``CallError(Kind.CANCELED)``.

        The writing descriptor is closed last, so a parent that reads EOF knows that both
        are closed (the ``in_process`` level returns on that EOF).
        """
        self._fail_all(CallError(Kind.CANCELED, "the call channel was closed"))
        with self._cond:
            self._maybe_remove_reader()
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
        _write_all(self._wfd, self._core.send_result(result))

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
