"""A pipe grown to fit a large frame, by the side about to write it.

A pipe holds 64 KiB by default, so a frame of 1 MiB crosses it in sixteen pipe-fulls: the
writer blocks sixteen times and the reader is woken sixteen times, one process switch
each. Growing the pipe first lets the frame cross in one write and one wake-up
(``F_SETPIPE_SZ``; PERF-NOTES).

Grown on demand, not when the pipe is made: the kernel counts a pipe's capacity, not its
contents, against its creator's pipe quota (``pipe-user-pages-soft``, 64 MiB by default
for a user without ``CAP_SYS_RESOURCE``; past it every new pipe of that user gets a single
page). A pipe that only ever carries small frames keeps its 64 KiB, and only a run that
moves a large frame holds more, for as long as the pipe lives.

Best effort: where the kernel refuses (the quota, ``pipe-max-size``, a descriptor that is
not a pipe, such as a socket), the frame crosses as before, in pieces.
"""

from __future__ import annotations

import fcntl
from typing import Final

__all__ = ["DEFAULT_PIPE_BYTES", "MAX_PIPE_BYTES", "fit_pipe"]

#: What a new pipe holds (16 pages).
DEFAULT_PIPE_BYTES: Final = 1 << 16
#: The most a pipe is grown to: ``pipe-max-size``'s default, the most an unprivileged
#: process may ask for.
MAX_PIPE_BYTES: Final = 1 << 20


def fit_pipe(fd: int, size: int, holds: int = DEFAULT_PIPE_BYTES) -> int:
    """Grow the pipe written through ``fd`` to hold ``size`` bytes (at most
    :data:`MAX_PIPE_BYTES`) if it holds less; ``holds``: what it is known to hold.

    Returns what the pipe holds now, as far as this call knows: the caller passes it back
    next time, so a pipe is asked at most once per size it must grow to.
    """
    wanted = min(size, MAX_PIPE_BYTES)
    if wanted <= holds:
        return holds
    try:
        return max(fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, wanted), holds)
    except OSError:  # refused: a quota, pipe-max-size, not a pipe; stop asking
        return MAX_PIPE_BYTES
