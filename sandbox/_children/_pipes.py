"""The descriptors between the host and one child: its channels, and its word that it is ready.

Theory of operation
-------------------
A run talks to its child over seven pipes and one socket, all made by the host before the
child is asked for (:func:`open_pipes`). The child's ends go to the zygote with the fork
request, in the order of :data:`protocol.FD_NAMES`, and the host closes its copies of them
as soon as the zygote has its own (:meth:`Pipes.sent`): from then on, end of file on a
host's end means that the child's side is closed, never that the host still holds it.

Each of the host's ends has one owner at a time:

* the run's channels (the start and the call channel, stdout and stderr): :class:`Pipes`,
  until the run takes them (:meth:`Pipes.hand_over`) and closes them itself. Closing them
  is the protocol's cancel signal (DESIGN invariant 5), so nothing else holds a copy;
* the ready pipe, on which the child says once whether it waits for its Start (``R``),
  or why not (``!`` and the reason), or nothing (it ended first): :class:`ReadyPipe`;
* the report socket, on which the zygote reports the child's process: the process handle
  (:class:`~sandbox._children._runner.RunnerProcess`).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket

import anyio

from protocol import FD_NAMES

__all__ = ["Pipes", "ReadyPipe", "open_pipes"]


def open_pipes() -> tuple[Pipes, ReadyPipe, socket.socket]:
    """Make one run's pipes and report socket.

    Returns:
        The run's channels (with the child's ends of everything), the host's end of the
        ready pipe, and the host's end of the report socket (non-blocking).

    Raises:
        OSError: they could not be made (nothing is left open).
    """
    reads: list[int] = []  # the read ends of the run's seven pipes
    writes: list[int] = []  # and their write ends, in the same order
    try:
        for _ in range(7):
            r, w = os.pipe2(os.O_CLOEXEC)
            reads.append(r)
            writes.append(w)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    except OSError:
        for fd in (*reads, *writes):
            os.close(fd)
        raise
    mine.setblocking(False)  # read only when there is something to read
    # Pipes as (read end, write end): start down, start up, call down, call up, stdout,
    # stderr, ready. Which end is the child's follows FD_NAMES.
    down_s, up_s, down_c, up_c, out, err, ready = zip(reads, writes, strict=True)
    # (Every pipe keeps the kernel's 64 KiB until a frame larger than that is written to
    # it: the writer grows it then, protocol._pipesize.)
    pipes = Pipes(
        start_fds=(up_s[0], down_s[1]),  # we read the child's up, write its down
        call_fds=(up_c[0], down_c[1]),
        out_fd=out[0],
        err_fd=err[0],
        theirs=[down_s[0], up_s[1], down_c[0], up_c[1], out[1], err[1], ready[1], theirs.detach()],
    )
    return pipes, ReadyPipe(ready[0]), mine


class Pipes:
    """The run's channels: the host's ends of its pipes, and the child's ends of every
    descriptor until the fork request has carried them to the zygote."""

    def __init__(
        self,
        *,
        start_fds: tuple[int, int],
        call_fds: tuple[int, int],
        out_fd: int,
        err_fd: int,
        theirs: list[int],
    ) -> None:
        assert len(theirs) == len(FD_NAMES)
        #: The host's (read, write) ends of the start and the call channel.
        self.start_fds = start_fds
        self.call_fds = call_fds
        #: The host's read ends of the child's stdout and stderr.
        self.out_fd = out_fd
        self.err_fd = err_fd
        #: The child's ends, in the order of :data:`protocol.FD_NAMES` (empty once sent).
        self.theirs = theirs
        self._mine = [*start_fds, *call_fds, out_fd, err_fd]  # empty once handed over

    def sent(self) -> None:
        """The zygote has its copies of the child's ends: close the host's."""
        for fd in self.theirs:
            os.close(fd)
        self.theirs = []

    def hand_over(self) -> None:
        """The host's ends of the pipes are now owned (and closed) by someone else."""
        self._mine = []

    def close(self) -> None:
        """Close every end still held: the child's, if not sent, and the host's, if not
        handed over (idempotent)."""
        for fd in (*self.theirs, *self._mine):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.theirs = []
        self._mine = []


class ReadyPipe:
    """The host's end of the ready pipe, and what the child said on it (read once)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        #: What the child said: ``b"R"`` when ready, ``b"!"`` and why not, ``b""`` when it
        #: ended first, anything else when it was not ready in time; None until read.
        self.said: bytes | None = None

    def said_nowait(self) -> bytes | None:
        """What the child said, without waiting; None if it has said nothing yet."""
        if self.said is None:
            if not select.select([self.fd], [], [], 0)[0]:
                return None
            self.said = os.read(self.fd, 4096)
        return self.said

    async def wait(self, seconds: float) -> bytes:
        """What the child said, waiting up to ``seconds`` for it to say it (or end)."""
        if self.said is None:
            got = bytearray()
            with anyio.move_on_after(seconds):
                while True:
                    await anyio.wait_readable(self.fd)
                    chunk = os.read(self.fd, 4096)
                    if not chunk:
                        break
                    got += chunk
                    if got == b"R":
                        break
            self.said = bytes(got)
        return self.said

    def close(self) -> None:
        """Close the host's end (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
