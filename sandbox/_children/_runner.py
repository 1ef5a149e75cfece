"""The host's handle on a run's runner process, which always ends reaped.

Theory of operation
-------------------
The host is not the parent of a run's runner: the zygote is (:mod:`runner._zygote`), and
reaps it. What the host has of the process is what the zygote reports on the run's own
report socket (:mod:`protocol._fork`), in order: :class:`~protocol.Forked` with the pid
and a pidfd; for a confined child, :class:`~protocol.Moved` with the pid and a pidfd of
its PID 1, the runner proper (the pidfd replaces the first one); and
:class:`~protocol.Exited` with the exit status and resource usage, once the zygote has
reaped the runner. Or :class:`~protocol.Failed` instead of all that, when no child could
be made.

:class:`RunnerProcess` has the shape of ``trio.Process`` (whose ``returncode`` is our
:attr:`~RunnerProcess.exited`): a ``pid``, a pidfd to signal it by (never by a pid, which
may be someone else's once the process is reaped), a non-blocking :meth:`poll`, an
awaitable :meth:`~RunnerProcess.wait_exit`, and an end that every path goes through:
:meth:`~RunnerProcess.wait_reaped` waits for the zygote's report of the reaping, sends
SIGKILL if it is late, and waits again.

If the zygote dies, the runner lives on (the keeper reaps it) but nothing more is
reported: the socket reads end of file, the handle says so
(:attr:`~RunnerProcess.zygote_lost`), and from then on only the pidfd tells that the
runner has exited; its exit status stays unknown.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import signal
import socket
import time
from collections.abc import Callable

import anyio

from protocol import (
    MAX_FORK_MESSAGE,
    REPORT_DECODER,
    Exited,
    Failed,
    Forked,
    Moved,
    RemoteProtocolError,
    decode_fork,
)

__all__ = ["RunnerProcess"]


class _ReportSocket:
    """The host's end of one child's report socket: the zygote's reports, decoded."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock  # non-blocking: read only when there is something to read
        #: Nothing more will be reported: the zygote died, broke the wire, or failed.
        self.lost = False
        self.failure: str | None = None  # the zygote could not make the child

    def receive_nowait(self) -> tuple[Forked | Moved | Exited | None, int | None] | None:
        """The next report and the pidfd sent with it; None if nothing is waiting.

        The report is None when nothing more will come (:attr:`lost`): end of file, a
        message that is not of the wire, or :class:`~protocol.Failed`.
        """
        try:
            # (The socket is non-blocking: Python 3.11's recv_fds drops its flags.)
            data, received, _, _ = socket.recv_fds(self.sock, MAX_FORK_MESSAGE, 1)
        except BlockingIOError:
            return None
        except OSError:
            data, received = b"", []
        pidfd = received.pop(0) if received else None
        for fd in received:
            os.close(fd)
        return self._decode(data), pidfd

    def _decode(self, data: bytes) -> Forked | Moved | Exited | None:
        if not data:
            self.lost = True  # the zygote died: the child lives on, unreported
            return None
        try:
            report = decode_fork(REPORT_DECODER, data)
        except RemoteProtocolError:
            self.lost = True
            return None
        if isinstance(report, Failed):
            self.failure = report.error
            self.lost = True
            return None
        return report


class RunnerProcess:
    """One run's runner, as the zygote reports it (see the module docstring)."""

    def __init__(self, report: socket.socket) -> None:
        """``report``: the host's end of the run's report socket (non-blocking); the
        handle owns it."""
        self.pid: int | None = None  # None until the zygote reports the fork
        self.pidfd: int | None = None
        #: The zygote's report that it reaped the runner: status and resource usage.
        self.exited: Exited | None = None
        self.moved = False  # a confined child's PID 1 has been reported as its runner
        self._reports = _ReportSocket(report)

    @property
    def zygote_lost(self) -> bool:
        """Whether the zygote will report nothing more (see the module docstring)."""
        return self._reports.lost

    @property
    def failure(self) -> str | None:
        """Why the zygote could not make the child, if it said so."""
        return self._reports.failure

    def poll(self) -> None:
        """Read what the zygote has reported, without waiting."""
        while self.exited is None and not self._reports.lost:
            got = self._reports.receive_nowait()
            if got is None:
                return
            report, pidfd = got
            if pidfd is not None:
                if self.pidfd is not None:  # the runner moved: the new pidfd replaces the old
                    os.close(self.pidfd)
                self.pidfd = pidfd
            if isinstance(report, Forked):
                self.pid = report.pid
            elif isinstance(report, Moved):
                self.pid = report.pid
                self.moved = True
            elif isinstance(report, Exited):
                self.exited = report

    def exit_on_pidfd(self) -> bool:
        """Whether the pidfd says that the process has exited (reports left unread)."""
        return self.pidfd is not None and bool(select.select([self.pidfd], [], [], 0)[0])

    def exit_seen(self) -> bool:
        """Whether the runner has exited (reported, or seen on its pidfd)."""
        self.poll()
        return self.exited is not None or self.exit_on_pidfd()

    async def wait_reported(self, done: Callable[[], bool], seconds: float) -> None:
        """Read the zygote's reports until ``done()``, the zygote is lost, or ``seconds``."""
        if done():  # (a pool's child, reported long ago: no timer to set and cancel)
            return
        with anyio.move_on_after(seconds):
            while not done() and not self._reports.lost:
                await anyio.wait_readable(self._reports.sock)
                self.poll()

    async def wait_exit(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the runner to exit. Returns whether it did.

        The exit status comes from the zygote; if the zygote is gone, only the pidfd says
        that the runner has exited, and the status stays unknown.
        """
        with anyio.move_on_after(seconds):
            await self.wait_reported(lambda: self.exited is not None, math.inf)
            if self.exited is None:  # the zygote is lost: only the pidfd can tell
                if self.pidfd is not None:
                    await anyio.wait_readable(self.pidfd)
                return True
        return self.exited is not None or self.exit_seen()

    def block_until(self, done: Callable[[], bool], seconds: float) -> bool:
        """Wait (blocking) for ``done()``, waking on the zygote's reports or, once the
        zygote is lost, on the runner's pidfd; False if ``seconds`` passed first."""
        deadline = time.monotonic() + seconds
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not self._reports.lost:
                select.select([self._reports.sock], [], [], min(left, 0.05))
                self.poll()
            else:
                select.select([] if self.pidfd is None else [self.pidfd], [], [], min(left, 0.05))
        return True

    def wait_reaped(self, grace: float, after_kill: float) -> None:
        """Wait (blocking) up to ``grace`` for the runner's end, send SIGKILL if it has not
        come, and wait up to ``after_kill`` more. Nothing to wait for if it was never
        forked."""
        if self.pid is not None and not self.block_until(self.reaped, grace):
            self.kill()
            self.block_until(self.reaped, after_kill)

    def reaped(self) -> bool:
        """Whether the runner is gone for good: the zygote reported reaping it (it reaps
        what the runner left in the same pass), or, the zygote lost, its pidfd says it
        exited (the keeper reaps it). An exit seen on the pidfd alone while the zygote
        lives is not enough: the runner may still be a zombie with a pid."""
        self.poll()
        if self.exited is not None:
            return True
        return self.zygote_lost and self.exit_on_pidfd()

    def send_signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` through the pidfd (nothing if there is none, or it is gone)."""
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def kill_unreaped(self) -> int | None:
        """SIGKILL through the pidfd; the pid if the signal was sent (the process was not
        reaped yet: a zombie takes it too), None if it was reaped or there is no pidfd."""
        if self.pidfd is None or self.pid is None:
            return None
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            return None
        return self.pid

    def close(self) -> None:
        """Close the report socket and the pidfd (idempotent): nothing more is read."""
        self._reports.sock.close()
        if self.pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self.pidfd)
            self.pidfd = None
