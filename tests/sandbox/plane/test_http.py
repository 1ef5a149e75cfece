"""The executor over streamable HTTP on loopback: sessions, their idle expiry, and what a
browser's page must not be able to do."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from sandbox import plane

from ...helpers import until
from .http_client import http_server, raw_client, sse_messages

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


@pytest.mark.slow
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


@pytest.mark.slow
async def test_an_allowed_host_is_accepted() -> None:
    async with http_server("--allow-host", "sandbox.internal:*") as (url, _):
        port = url.split(":")[2].split("/")[0]
        allowed = {"Host": f"sandbox.internal:{port}"}
        assert await anyio.to_thread.run_sync(post, url, allowed) == 200


@pytest.mark.slow
async def test_a_call_in_flight_keeps_its_session_open() -> None:
    """A session is idle when it has no request in flight: a program that runs longer than
    the idle limit, on a client that sends nothing else (no pings), runs to its end."""
    # Idle for a second, looked at every quarter of one: closed before 1.5 s if it were.
    program = "import time\ntime.sleep(3)\n42"
    async with (
        http_server("--idle", "1", "--timeout", "20") as (url, _),
        plane.Remote.connect(plane.http(url), keepalive=None) as remote,
    ):
        with anyio.fail_after(30):
            r = await remote.call(plane.Call(tool="run_program", arguments={"code": program}))
        assert (r.is_error, r.data["value"]) == (False, 42), r.text


@pytest.mark.slow
async def test_an_idle_session_is_closed() -> None:
    async with http_server("--idle", "1") as (url, _), raw_client(url) as client:
        await client.call("pid")
        await anyio.sleep(2.5)
        gone = await client.post(
            {"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "pid"}}
        )
        assert gone.status_code == 404, gone.text


@pytest.mark.slow
async def test_pings_keep_a_session_open_and_a_lost_one_is_dialed_again() -> None:
    """Idle for two seconds, looked at every half of one: pings every 0.2 s keep the
    session (a ping would have to be 1.8 s late to lose it), and without them it is
    closed by 2.5 s, a second before the client calls again."""
    async with http_server("--idle", "2") as (url, _):
        async with plane.Remote.dial(plane.http(url), keepalive=0.2) as remote:
            await remote.call(plane.Call(tool="pid"))
            await anyio.sleep(3.5)
            assert remote.connected
            await remote.call(plane.Call(tool="pid"))
            assert remote.dials == 1, "the pings kept the session"
        warned: list[str] = []
        async with plane.Remote.dial(plane.http(url), warn=warned.append) as remote:
            await remote.call(plane.Call(tool="pid"))
            await anyio.sleep(3.5)  # no pings: the server closes the session
            r = await remote.call(plane.Call(tool="lookup", arguments={"key": "z"}))
            assert r.data == "Z"
            assert remote.dials == 2
            assert warned


@pytest.mark.slow
async def test_accepted_connections_send_small_writes_at_once() -> None:
    """TCP_NODELAY on every connection the server accepts: without it, a kept-alive client
    waits out the delayed ACK (about 40 ms) on every call, for the SSE body's second write."""
    async with http_server() as (url, _), raw_client(url) as client:
        for _ in range(3):
            result = await client.call("nodelay")
            flags = result["structuredContent"]["value"]
            assert flags, "the client's connection is among the server's"
            assert all(flags), flags


@pytest.mark.slow
async def test_a_plain_answer_is_one_body_and_a_call_that_calls_back_streams() -> None:
    """An answer that is the stream's only event goes out with its length (fewer writes on
    the connection); a program's host call, sent back to the client before the answer,
    streams as before."""
    async with http_server() as (url, _), raw_client(url) as client:
        response = await client.post(
            {"jsonrpc": "2.0", "id": 50, "method": "tools/call", "params": {"name": "pid"}}
        )
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "transfer-encoding" not in response.headers
        assert int(response.headers["content-length"]) == len(response.content)
        (answer,) = sse_messages(response.text)
        assert answer["id"] == 50
    program = "await host.lookup(key='z')"
    async with (
        http_server() as (url, _),
        plane.Remote.connect(plane.http(url)) as remote,
    ):
        s = await plane.Set.bind(remote)
        r = await s.call(plane.Call(tool="run_program", arguments={"code": program}))
        assert r.data["value"] == "Z", r.text


@pytest.mark.slow
async def test_host_names_compare_without_case() -> None:
    async with http_server() as (url, _):
        port = url.split(":")[2].split("/")[0]
        upper = {"Host": f"LOCALHOST:{port}", "Origin": f"HTTP://LocalHost:{port}"}
        assert await anyio.to_thread.run_sync(post, url, upper) == 200
    async with http_server("--allow-host", "Sandbox.Internal:*") as (url, _):
        port = url.split(":")[2].split("/")[0]
        allowed = {"Host": f"sandbox.INTERNAL:{port}"}
        assert await anyio.to_thread.run_sync(post, url, allowed) == 200


@pytest.mark.slow
async def test_another_loopback_address_is_its_own_host() -> None:
    async with http_server(address="127.0.0.2:0") as (url, _):
        assert url.startswith("http://127.0.0.2:")
        assert await anyio.to_thread.run_sync(post, url, {}) == 200


def long_call(rid: int, marks: Path) -> bytes:
    """A tools/call that marks ``marks`` at once, then runs on for 30 seconds."""
    params = {"name": "mark", "arguments": {"path": str(marks), "seconds": 30}}
    return json.dumps(
        {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    ).encode()


@pytest.mark.slow
async def test_a_call_that_runs_on_has_its_response_started(tmp_path: Path) -> None:
    """The headers of a call's event stream, held a moment for an answer to go out with
    them, go out while the call runs: not at the stream's first ping, 15 seconds on."""
    marks = tmp_path / "marks"
    async with (
        http_server() as (url, _),
        raw_client(url) as client,
        AsyncExitStack() as stack,
    ):
        call = long_call(client.next_id(), marks)
        with anyio.fail_after(8):
            response = await stack.enter_async_context(
                client.client.stream("POST", url, content=call, headers=client.headers)
            )
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert marks.exists(), "the call is running"


@pytest.mark.slow
async def test_a_cancelled_call_gets_no_answer(tmp_path: Path) -> None:
    """After notifications/cancelled, the call's stream ends at once with nothing for its id
    (the spec forbids an answer; the SDK's transport sent -32800, which the TypeScript
    client reports as a response for an unknown message id)."""
    marks = tmp_path / "marks"
    async with http_server() as (url, _), raw_client(url) as client:
        rid = client.next_id()
        lines: list[str] = []
        with anyio.fail_after(30):
            async with client.client.stream(
                "POST", url, content=long_call(rid, marks), headers=client.headers
            ) as response:
                assert response.status_code == 200
                await until(marks.exists, 10)
                cancel = {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": rid, "reason": "test"},
                }
                assert (await client.post(cancel)).status_code == 202
                with anyio.fail_after(8):  # the call runs 30 seconds uncancelled
                    lines.extend([line async for line in response.aiter_lines()])
        assert sse_messages("\n".join(lines)) == [], lines
        # The session goes on.
        assert (await client.call("lookup", key="x"))["structuredContent"] == {"value": "X"}


MALFORMED = [
    pytest.param(b"{not json", -32700, None, "Parse error", id="unparseable"),
    pytest.param(b"[1, 2]", -32600, None, "not an array", id="an-array"),
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
]


@pytest.mark.parametrize(("body", "code", "rid", "says"), MALFORMED)
@pytest.mark.slow
async def test_a_malformed_message_gets_its_error_in_a_line(
    body: bytes, code: int, rid: int | None, says: str
) -> None:
    said = bytearray()
    async with http_server(said=said) as (url, _), raw_client(url) as client:
        response = await client.post(body)
        if response.headers["content-type"].startswith("text/event-stream"):
            (answer,) = sse_messages(response.text)
        else:
            assert response.status_code == 400, response.text
            answer = response.json()
        assert answer["id"] == rid, answer
        assert answer["error"]["code"] == code, answer
        message = answer["error"]["message"]
        assert says in message
        assert len(message) < 200, "one readable line, not a validator's report"
        await until(lambda: str(code).encode() in said, 10)
