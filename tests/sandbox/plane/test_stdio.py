"""``sandbox serve`` on standard input and output, spoken to line by line: what it answers to
lines that are not JSON-RPC, and how it ends when its client dies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import psutil
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from protocol import MAX_FRAME_BYTES

from ...helpers import until
from .http_client import INITIALIZE, SERVED

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


class Peer:
    """The client end of a ``sandbox serve`` process: lines out, lines in, its stderr."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        self.proc = proc
        self.lines = BufferedByteReceiveStream(proc.stdout) if proc.stdout else None
        self.stderr = bytearray()
        self.stderr_closed = anyio.Event()
        self._next = 100

    async def send(self, line: bytes | dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        raw = line if isinstance(line, bytes) else json.dumps(line).encode()
        with anyio.fail_after(20):
            await self.proc.stdin.send(raw + b"\n")

    async def receive(self) -> dict[str, Any]:
        assert self.lines is not None
        with anyio.fail_after(20):
            got: dict[str, Any] = json.loads(await self.lines.receive_until(b"\n", 1 << 26))
        return got

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        await self.send({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        answer = await self.receive()
        assert answer.get("id") == self._next, answer
        return answer

    async def initialize(self) -> None:
        await self.send(INITIALIZE)
        assert "result" in await self.receive()
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def said(self) -> str:
        return self.stderr.decode(errors="replace")


@asynccontextmanager
async def stdio_peer(stdout: int = subprocess.PIPE) -> AsyncIterator[Peer]:
    """``sandbox serve`` of the test tools on pipes (its standard output on ``stdout`` if
    given); killed at the end, however it ends."""
    command = [sys.executable, "-m", "sandbox", "serve", "--level", "process"]
    command += ["--tools", SERVED]
    proc = await anyio.open_process(
        command, stdin=subprocess.PIPE, stdout=stdout, stderr=subprocess.PIPE
    )
    peer = Peer(proc)
    async with proc, anyio.create_task_group() as tg:

        async def drain() -> None:
            assert proc.stderr is not None
            async for chunk in proc.stderr:
                peer.stderr += chunk
            peer.stderr_closed.set()

        tg.start_soon(drain)
        try:
            yield peer
        finally:
            if proc.returncode is None:
                proc.kill()
            tg.cancel_scope.cancel()


MALFORMED = [
    pytest.param(b"{not json", -32700, None, "Parse error", id="unparseable"),
    pytest.param(b"[1, 2]", -32600, None, "not an array", id="an-array"),
    pytest.param(b'"hello"', -32600, None, "not a string", id="a-string"),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": [1, 2]}',
        -32602,
        7,
        "tools/call takes its params as an object, not an array",
        id="params-an-array",
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": 5}}',
        -32602,
        8,
        "name",
        id="params-of-the-wrong-shape",
    ),
    pytest.param(
        b'{"jsonrpc": "1.0", "id": 9, "method": "ping"}', -32600, 9, '"2.0"', id="not-2.0"
    ),
]


@pytest.mark.parametrize(("line", "code", "rid", "says"), MALFORMED)
@pytest.mark.slow
async def test_a_malformed_line_gets_its_error_and_a_line_on_stderr(
    line: bytes, code: int, rid: int | None, says: str
) -> None:
    async with stdio_peer() as peer:
        await peer.initialize()
        await peer.send(line)
        answer = await peer.receive()
        assert answer["id"] == rid, answer
        assert answer["error"]["code"] == code, answer
        message = answer["error"]["message"]
        assert says in message
        assert len(message) < 200, "one readable line, not a validator's report"
        await until(lambda: str(code) in peer.said(), 10)
        assert len(peer.said().splitlines()) == 1, peer.said()
        # The session goes on.
        ok = await peer.request("tools/call", {"name": "lookup", "arguments": {"key": "k"}})
        assert ok["result"]["structuredContent"] == {"value": "K"}


@pytest.mark.slow
async def test_a_program_too_large_for_a_frame_gets_a_result_that_names_the_limit() -> None:
    code = "#" + "a" * MAX_FRAME_BYTES
    async with stdio_peer() as peer:
        await peer.initialize()
        call = {"name": "run_program", "arguments": {"code": code}}
        answer = await peer.request("tools/call", call)
        result = answer["result"]
        assert result["isError"] is True
        assert "16 MiB" in result["content"][0]["text"]


@pytest.mark.slow
async def test_a_malformed_notification_is_logged_and_not_answered() -> None:
    async with stdio_peer() as peer:
        await peer.initialize()
        await peer.send(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": [1]}')
        # The next thing that comes is the answer to the next request.
        ok = await peer.request("tools/call", {"name": "lookup", "arguments": {"key": "n"}})
        assert ok["result"]["structuredContent"] == {"value": "N"}
        await until(lambda: "-32602" in peer.said(), 10)


@pytest.mark.slow
async def test_a_client_that_dies_mid_call_ends_the_server_quietly(tmp_path: Path) -> None:
    """The server learns that its client is gone when a write finds no reader: here the
    answer to a second call, while a program runs. It ends the session (the program's run
    with it) and exits 0 with one line, even though its input is still open."""
    pidfile = tmp_path / "pid"
    program = (
        f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    )
    # The server's standard output is a pipe of the test's own, so that its reading end
    # can be closed for real (anyio's stream over it only stops reading).
    reading, writing = os.pipe()
    try:
        async with stdio_peer(stdout=writing) as peer:
            os.close(writing)
            writing = -1
            await peer.send(INITIALIZE)
            await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"name": "run_program", "arguments": {"code": program}}
            await peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
            await until(lambda: pidfile.exists() and pidfile.read_text().isdigit(), 20)
            runner = int(pidfile.read_text())
            os.close(reading)  # the client reads no more
            reading = -1
            call = {"name": "lookup", "arguments": {"key": "k"}}
            await peer.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            with anyio.fail_after(30):
                await peer.proc.wait()
                await peer.stderr_closed.wait()
            await until(lambda: not psutil.pid_exists(runner), 10)
            said = peer.said()
            assert peer.proc.returncode == 0, said
            assert "Traceback" not in said
            assert len(said.splitlines()) == 1, said
            assert "hung up" in said
    finally:
        for fd in (reading, writing):
            if fd >= 0:
                os.close(fd)
