"""The executor over streamable HTTP on loopback: sessions, their idle expiry, and what a
browser's page must not be able to do."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import anyio
import anyio.to_thread
import psutil
import pytest

from protocol import Kind
from sandbox import plane

from ...helpers import until
from .http_client import http_server, raw_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def post(url: str, headers: dict[str, str]) -> int:
    """An initialize request with ``headers``; the HTTP status (stdlib, in a thread)."""
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":'
        b'"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}'
    )
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json, text/event-stream")
    for k, v in headers.items():
        request.add_header(k, v)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_remote_and_the_official_client_over_http() -> None:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with http_server() as (url, _):
        async with plane.Remote.connect(plane.http(url), keepalive=30) as remote:
            assert [t.name for t in await remote.tools()] == [
                "pid",
                "mark",
                "lookup",
                "nodelay",
                "run_program",
            ]
            r = await remote.call(plane.Call(tool="lookup", arguments={"key": "h"}))
            assert (r.data, r.is_error) == ("H", False)
            s = await plane.Set.bind(
                remote, policy=lambda c, i, f: plane.deny("no") if c.tool == "mark" else plane.ALLOW
            )
            r = await s.call(
                plane.Call(
                    tool="run_program",
                    arguments={
                        "code": "a = await host.lookup(key='q')\n"
                        "try:\n    await host.mark(path='/tmp/x')\nexcept Exception as e:\n"
                        "    b = e.kind\n[a, b]"
                    },
                )
            )
            assert r.data["value"] == ["Q", "denied"]
        async with streamable_http_client(url) as streams, ClientSession(*streams[:2]) as session:
            init = await session.initialize()
            assert (init.capabilities.experimental or {})[plane.CAPABILITY_KEY]["version"] == 1
            r2 = await session.call_tool("lookup", {"key": "k"})
            assert r2.structured_content == {"value": "K"}


async def test_rebinding_and_cross_origin_requests_are_refused() -> None:
    async with http_server() as (url, _):
        port = url.split(":")[2].split("/")[0]
        ok = await anyio.to_thread.run_sync(post, url, {})
        assert ok == 200
        # A name that resolves to loopback in an attacker's DNS: not the host served.
        assert await anyio.to_thread.run_sync(post, url, {"Host": f"evil.example:{port}"}) == 421
        # A page of another origin, in a browser on this machine.
        origin = {"Origin": "http://evil.example"}
        assert await anyio.to_thread.run_sync(post, url, origin) == 403
        same = {"Origin": f"http://127.0.0.1:{port}"}
        assert await anyio.to_thread.run_sync(post, url, same) == 200


async def test_an_allowed_host_is_accepted() -> None:
    async with http_server("--allow-host", "sandbox.internal:*") as (url, _):
        port = url.split(":")[2].split("/")[0]
        allowed = {"Host": f"sandbox.internal:{port}"}
        assert await anyio.to_thread.run_sync(post, url, allowed) == 200


async def test_an_idle_session_is_closed_and_its_program_ended(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    program = (
        f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"
    )
    async with http_server("--idle", "1") as (url, server):
        async with plane.Remote.connect(plane.http(url)) as remote:
            with anyio.fail_after(30):
                try:
                    r = await remote.call(
                        plane.Call(tool="run_program", arguments={"code": program})
                    )
                except plane.CallLost:
                    pass  # the session went while the call was in flight
                else:
                    assert (r.is_error, r.kind) == (True, Kind.CANCELED)
        runner = int(pidfile.read_text())
        await until(lambda: not psutil.pid_exists(runner), 10)
        assert server.returncode is None, "the server itself lives on"


async def test_pings_keep_a_session_open_and_a_lost_one_is_dialed_again() -> None:
    async with http_server("--idle", "1") as (url, _):
        async with plane.Remote.dial(plane.http(url), keepalive=0.2) as remote:
            await remote.call(plane.Call(tool="pid"))
            await anyio.sleep(2.5)
            assert remote.connected
            await remote.call(plane.Call(tool="pid"))
            assert remote.dials == 1, "the pings kept the session"
        warned: list[str] = []
        async with plane.Remote.dial(plane.http(url), warn=warned.append) as remote:
            await remote.call(plane.Call(tool="pid"))
            await anyio.sleep(2.5)  # no pings: the server closes the session
            r = await remote.call(plane.Call(tool="lookup", arguments={"key": "z"}))
            assert r.data == "Z"
            assert remote.dials == 2
            assert warned


async def test_accepted_connections_send_small_writes_at_once() -> None:
    """TCP_NODELAY on every connection the server accepts: without it, a kept-alive client
    waits out the delayed ACK (about 40 ms) on every call, for the SSE body's second write."""
    async with http_server() as (url, _), raw_client(url) as client:
        for _ in range(3):
            result = await client.call("nodelay")
            flags = result["structuredContent"]["value"]
            assert flags, "the client's connection is among the server's"
            assert all(flags), flags
