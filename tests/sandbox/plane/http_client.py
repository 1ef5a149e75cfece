"""``sandbox serve --http`` for the tests, and a plain JSON-RPC client of it that keeps its
connection (as the TypeScript SDK's client does), to see exactly what goes over the wire."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2

SERVED = str(Path(__file__).parent / "served.py")
PROTOCOL_VERSION = "2025-11-25"
INITIALIZE: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


@asynccontextmanager
async def http_server(
    *extra: str,
    address: str = "127.0.0.1:0",
    env: Mapping[str, str] | None = None,
    said: bytearray | None = None,
) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """``sandbox serve --http ADDRESS`` of the test tools; its URL and process. Killed at the
    end, however the test ends. What it writes on standard error goes to ``said``."""
    command = [sys.executable, "-m", "sandbox", "serve", "--level", "process"]
    command += ["--tools", SERVED, "--http", address, *extra]
    environ = {**os.environ, **(env or {})}
    proc = await anyio.open_process(command, stderr=subprocess.PIPE, env=environ)
    said = bytearray() if said is None else said
    async with proc, anyio.create_task_group() as tg:
        try:
            assert proc.stderr is not None
            with anyio.fail_after(30):
                async for chunk in proc.stderr:
                    said += chunk
                    if b"\n" in said and b"serving" in said:
                        break
            found = re.search(rb"serving (https?://\S+)", said)
            assert found, said.decode(errors="replace")

            async def drain() -> None:
                async for chunk in proc.stderr:  # type: ignore[union-attr]
                    said.extend(chunk)

            tg.start_soon(drain)
            yield found.group(1).decode(), proc
        finally:
            proc.kill()
            tg.cancel_scope.cancel()


def sse_messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (its ``data:`` lines)."""
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:")]


class RawClient:
    """JSON-RPC over streamable HTTP by hand, on one kept-alive connection (httpx2 keeps it
    open between requests because every response is read to its end)."""

    def __init__(self, client: httpx2.AsyncClient, url: str) -> None:
        self.client = client
        self.url = url
        self.headers: dict[str, str] = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        self._next = 0

    async def post(self, body: bytes | dict[str, Any], **headers: str) -> httpx2.Response:
        """POST ``body`` (bytes as they are), the whole response read."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.client.post(
            self.url, content=content, headers={**self.headers, **headers}
        )

    async def initialize(self) -> None:
        """Open a session: initialize, then the initialized notification."""
        response = await self.post(INITIALIZE)
        assert response.status_code == 200, response.text
        self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = PROTOCOL_VERSION
        done = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert done.status_code == 202, done.text

    def next_id(self) -> int:
        self._next += 1
        return self._next

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; the message that answers it."""
        rid = self.next_id()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        response = await self.post(message)
        assert response.status_code == 200, response.text
        answers = [m for m in sse_messages(response.text) if m.get("id") == rid]
        assert len(answers) == 1, response.text
        return answers[0]

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A tools/call; its result (the test fails on a JSON-RPC error)."""
        answer = await self.request("tools/call", {"name": tool, "arguments": arguments})
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result


@asynccontextmanager
async def raw_client(url: str, **options: Any) -> AsyncIterator[RawClient]:
    """A :class:`RawClient` of ``url`` with a session open (``options`` go to httpx2)."""
    async with httpx2.AsyncClient(timeout=30, **options) as client:
        raw = RawClient(client, url)
        await raw.initialize()
        yield raw
