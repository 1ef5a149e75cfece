"""``sandbox serve --mcp`` and ``sandbox agent --mcp``: upstream tools beside the program
tool, and the program's calls of them."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

from sandbox import plane
from tests.agent.scripted import ScriptedServer, reply

from .servers import FAKE

pytestmark = [pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
FAKE_LINE = "fake=" + " ".join(FAKE)
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _dialer(argv: list[str]) -> Any:
    """``sandbox serve`` over stdio, its standard error into a file of its own (pytest's
    capture of this process's has no descriptor when another test replaced it)."""
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=ENV, cwd=str(ROOT))

    @contextlib.asynccontextmanager
    async def dial() -> AsyncIterator[Any]:
        with tempfile.TemporaryFile("w+") as errlog:
            async with stdio_client(params, errlog=errlog) as streams:
                yield streams

    return dial


@pytest.mark.anyio
async def test_serve_offers_upstream_tools_to_its_programs() -> None:
    """``sandbox serve --mcp`` lists the upstream's tools, and a program run by the program
    tool calls them as host tools; --mcp-read-only refuses the others."""
    argv = [sys.executable, "-m", "sandbox", "serve", "--level", "process", "--mcp", FAKE_LINE]
    code = (
        "try:\n    await host.fake__echo(text='x')\n    out = 'called'\n"
        "except Exception as e:\n    out = e.kind\nout"
    )
    async with plane.Remote.connect(_dialer(argv)) as remote:
        names = [t.name for t in await remote.tools()]
        assert names == ["fake__echo", "fake__pid", "fake__fail", "run_program"]
        run_program = next(t for t in await remote.tools() if t.name == "run_program")
        assert "host.fake__echo(text, times=...)" in run_program.description
        # The typed stubs too, as `sandbox describe` prints them, but not how the upstream
        # is reached from this host.
        stub = "async def fake__echo(text: str, *, times: int = 1) -> FakeEchoResult:"
        assert stub in run_program.description
        assert "fake_upstream" not in run_program.description
        assert "512 MiB of memory" in run_program.description
        r = await remote.call(plane.Call(tool="run_program", arguments={"code": code}))
    assert not r.is_error, r.text
    assert r.data["value"] == "called"
    async with plane.Remote.connect(_dialer([*argv, "--mcp-read-only"])) as remote:
        r = await remote.call(plane.Call(tool="run_program", arguments={"code": code}))
    assert r.data["value"] == "denied"


def test_agent_gives_the_model_the_stubs_and_the_tools() -> None:
    """``sandbox agent --mcp``: the system prompt carries the upstream tools' stubs, and
    the model's program calls them."""
    program = "(await host.fake__echo(text='ab', times=2))['result']"
    script = [
        reply(tool_calls=[("c1", "run_program", {"code": program})]),
        reply(tool_calls=[("c2", "finish", {"answer": "done"})]),
    ]
    with ScriptedServer(script) as server:
        ran = subprocess.run(
            [
                sys.executable,
                "-m",
                "sandbox",
                "agent",
                "echo twice",
                "--base-url",
                server.base_url,
                "--model",
                "m",
                "--level",
                "process",
                "--mcp",
                FAKE_LINE,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=ENV,
            timeout=90,
            check=False,
        )
        first = server.requests[0]
    assert ran.returncode == 0, ran.stderr
    assert '"value":"abab"' in ran.stderr
    system = first["messages"][0]["content"]
    assert "async def fake__echo(text: str, *, times: int = 1) -> FakeEchoResult:" in system


def test_serve_names_an_upstream_that_cannot_start() -> None:
    """An upstream that cannot start ends ``sandbox serve`` at once: exit 4, named."""
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "sandbox",
            "serve",
            "--level",
            "process",
            "--mcp",
            "gone=/nonexistent/server",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 4
    assert "upstream 'gone'" in ran.stderr
