"""Helpers shared by the tests: OS pipe pairs, child processes that clean up, and code that
a child runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from protocol import FdChannel

ROOT = Path(__file__).resolve().parent.parent
PEER = ROOT / "tests" / "children" / "peer.py"

#: Lines of a child's Python (which has imported ``fcntl``, ``socket`` and ``struct``) that
#: look at its network namespace's loopback: ``flags``, the flags of ``lo``, and ``echoed``,
#: what came back of a datagram it sent itself there ("ping").
LOOPBACK_PROBE = """
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    request = struct.pack("16sH14x", b"lo", 0)
    flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), 0x8913, request))[1]
    sock.bind(("127.0.0.1", 0))
    sock.sendto(b"ping", sock.getsockname())
    echoed = sock.recv(4).decode()
"""


@dataclass
class PeerProcess:
    """A child running ``tests/children/peer.py``, with the parent's ends of its channels."""

    process: subprocess.Popen[bytes]
    start: FdChannel
    call: FdChannel


@contextmanager
def spawn_peer(mode: str, arg: str = "") -> Iterator[PeerProcess]:
    """Start the peer child over four OS pipes; kill and reap it on exit, whatever happens."""
    start_down, start_up, call_down, call_up = os.pipe(), os.pipe(), os.pipe(), os.pipe()
    child_fds = (start_down[0], start_up[1], call_down[0], call_up[1])
    parent_fds = (start_up[0], start_down[1], call_up[0], call_down[1])
    try:
        proc = subprocess.Popen(
            [sys.executable, str(PEER), *(str(fd) for fd in child_fds), mode, arg],
            pass_fds=child_fds,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except BaseException:
        for fd in (*child_fds, *parent_fds):
            os.close(fd)
        raise
    for fd in child_fds:
        os.close(fd)
    start = FdChannel(start_up[0], start_down[1])
    call = FdChannel(call_up[0], call_down[1])
    try:
        yield PeerProcess(proc, start, call)
    finally:
        start.close()
        call.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


async def until(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    """Wait until ``condition()`` holds, looking every 20 ms; fail after ``seconds``.

    For states that nothing announces (a process gone, a file written by another process).
    """
    with anyio.fail_after(seconds):
        while not condition():  # noqa: ASYNC110 (nothing announces these states)
            await anyio.sleep(0.02)
