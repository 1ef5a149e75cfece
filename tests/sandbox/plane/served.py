"""Tools that the execution-plane tests serve with ``sandbox serve --tools``."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import anyio
import psutil

import sandbox
from sandbox import plane


def _append(path: str, line: str) -> None:
    with Path(path).open("a") as f:  # a line, at once: no reader sees half of it
        f.write(line)


def pid() -> int:
    """The serving process's pid."""
    return os.getpid()


async def mark(path: str, seconds: float = 0.0) -> str:
    """Append a line to ``path``, then wait ``seconds``."""
    _append(path, f"{os.getpid()}\n")
    await anyio.sleep(seconds)
    return "marked"


async def _slow_facts(path: str, seconds: float = 0.0) -> plane.Facts:
    _append(str(Path(path).with_suffix(".readings")), f"{os.getpid()}\n")
    await anyio.sleep(seconds)
    return plane.Facts(writes=(path,))


def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


def nodelay() -> list[bool]:
    """Whether TCP_NODELAY is set on each connection this server accepted (HTTP only)."""
    tcp = psutil.Process().net_connections(kind="tcp")
    listening = {c.laddr.port for c in tcp if c.status == psutil.CONN_LISTEN}
    flags = []
    for c in tcp:
        if c.status == psutil.CONN_ESTABLISHED and c.laddr.port in listening and c.fd >= 0:
            with socket.socket(fileno=os.dup(c.fd)) as s:
                flags.append(bool(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
    return flags


def clock() -> float:
    """The server's clock."""
    return time.time()


_TOOLS = [
    sandbox.Tool(pid, annotations=plane.Annotations(read_only=True)),
    sandbox.Tool(mark, facts=_slow_facts),
    sandbox.Tool(
        lookup,
        annotations=plane.Annotations(read_only=True),
        facts=lambda key: plane.Facts(reads=(f"/db/{key}",)),
        replay=plane.Replay.YES,
    ),
    sandbox.Tool(nodelay, annotations=plane.Annotations(read_only=True)),
]

#: With SERVED_TOOLS=other in its environment, the server is another executor: the same
#: tools but one, for "the executor changed".
TOOLS = [*_TOOLS[:2], sandbox.Tool(clock)] if os.environ.get("SERVED_TOOLS") == "other" else _TOOLS
