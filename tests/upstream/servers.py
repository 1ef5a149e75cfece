"""Where the real upstream servers are installed (``make upstreams``), and how tests get them.

They are installed outside the checkout, at pinned versions, under ``SANDBOX_UPSTREAMS``
(default ``$XDG_CACHE_HOME/sandbox/upstreams``). A test that needs one that is missing is
skipped, saying how to install it, unless ``SANDBOX_REQUIRE_UPSTREAMS=1`` (set by
``.ci/run``) makes the absence a failure.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import anyio
import pytest

ROOT = Path(
    os.environ.get("SANDBOX_UPSTREAMS")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sandbox" / "upstreams"
)
REQUIRED = os.environ.get("SANDBOX_REQUIRE_UPSTREAMS") == "1"

#: The installed entry point of each server.
PATHS = {
    "filesystem": ROOT / "node_modules" / ".bin" / "mcp-server-filesystem",
    "memory": ROOT / "node_modules" / ".bin" / "mcp-server-memory",
    "everything": ROOT / "node_modules" / ".bin" / "mcp-server-everything",
    "time": ROOT / "python" / "bin" / "mcp-server-time",
}


def command(server: str, *args: str) -> list[str]:
    """The command that starts ``server`` over stdio; skips (or fails) if not installed."""
    path = PATHS[server]
    if not path.exists():
        why = f"upstream server {server!r} is not installed at {path}: run `make upstreams`"
        if REQUIRED:
            pytest.fail(why + " (SANDBOX_REQUIRE_UPSTREAMS=1)")
        pytest.skip(why)
    return [str(path), *args]


#: The in-repo fake upstream (tests/upstream/fake_upstream.py), over stdio.
FAKE = [sys.executable, "-m", "tests.upstream.fake_upstream"]


async def eventually(condition: Callable[[], bool]) -> None:
    """Waits until ``condition()`` holds (what it watches has no event to wait on).

    Raises:
        TimeoutError: it did not hold within ten seconds.
    """
    with anyio.fail_after(10):
        while not condition():  # noqa: ASYNC110 (a file or another process: no event)
            await anyio.sleep(0.05)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def http_server(argv: list[str], port: int, env: Mapping[str, str] = {}) -> Iterator[str]:
    """Runs ``argv`` (an MCP server over streamable HTTP on ``port``) until the block ends;
    yields its URL once it accepts connections. The process is ended however the test ends."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **env},
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv} did not start serving on {port}") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
