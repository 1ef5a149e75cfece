"""Upstreams against real MCP servers nobody here wrote, installed at pinned versions
(``make upstreams``; see servers.py): the reference filesystem, memory and everything
servers from npm, and mcp-server-time from PyPI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sandbox
from sandbox import upstream
from sandbox.upstream import Upstreams, read_only, stdio

from .servers import command, free_port, http_server

# The filesystem test stays in the fast tier: one real server there.
pytestmark = pytest.mark.anyio


def run(program: str, up: Upstreams, **options: Any) -> Any:
    return sandbox.run(program, tools=up.host_tools(), **options)


async def test_filesystem_list_read_grep_and_writes_denied(tmp_path: Path) -> None:
    """A program lists, reads and greps files through the filesystem server; the policy
    (read-only tools only) denies its write, and nothing is written."""
    for i in range(6):
        (tmp_path / f"f{i}.txt").write_text(("needle " if i % 2 else "hay ") * (i + 1))
    fs = stdio(command("filesystem", str(tmp_path)), name="fs")
    program = f"""
import asyncio
root = {str(tmp_path)!r}
listing = (await host.fs__list_directory(path=root))["content"].splitlines()
names = sorted(line.removeprefix("[FILE] ") for line in listing if line.startswith("[FILE] "))
texts = await asyncio.gather(*(host.fs__read_text_file(path=f"{{root}}/{{n}}") for n in names))
hits = [n for n, t in zip(names, texts) if "needle" in t["content"]]
try:
    await host.fs__write_file(path=f"{{root}}/new.txt", content="x")
    wrote = "written"
except Exception as e:
    wrote = [e.kind, e.message]
{{"hits": hits, "wrote": wrote}}
"""
    async with Upstreams([fs], policy=read_only) as up:
        r = await run(program, up)
    assert r.ok, r.error
    assert r.value["hits"] == ["f1.txt", "f3.txt", "f5.txt"]
    assert r.value["wrote"][0] == "denied"
    assert "fs__write_file" in r.value["wrote"][1]
    assert not (tmp_path / "new.txt").exists()
    assert r.calls == 8  # the list, six reads, and the refused write


@pytest.mark.slow
async def test_filesystem_refuses_a_path_outside_its_root(tmp_path: Path) -> None:
    """The server's own refusal (an error result) is CallError ``raised`` with its text."""
    fs = stdio(command("filesystem", str(tmp_path)), name="fs")
    async with Upstreams([fs]) as up:
        r = await run(
            "try:\n    await host.fs__read_text_file(path='/etc/hostname')\n"
            "except Exception as e:\n    out = [e.kind, e.message]\nout",
            up,
        )
    assert r.ok, r.error
    assert r.value[0] == "raised"
    assert "outside allowed directories" in r.value[1].lower() or "denied" in r.value[1].lower()


@pytest.mark.slow
async def test_memory_builds_and_queries_a_knowledge_graph(tmp_path: Path) -> None:
    """A program builds a small knowledge graph in the memory server and queries it."""
    memory = stdio(
        command("memory"), name="memory", env={"MEMORY_FILE_PATH": str(tmp_path / "graph.jsonl")}
    )
    program = """
await host.memory__create_entities(entities=[
    {"name": "anyio", "entityType": "library", "observations": ["runs on asyncio and trio"]},
    {"name": "trio", "entityType": "library", "observations": ["structured concurrency"]},
    {"name": "sandbox", "entityType": "project", "observations": ["runs untrusted programs"]},
])
await host.memory__create_relations(relations=[
    {"from": "sandbox", "to": "anyio", "relationType": "depends on"},
    {"from": "anyio", "to": "trio", "relationType": "runs on"},
])
found = await host.memory__search_nodes(query="concurrency")
graph = await host.memory__read_graph()
{
    "found": [e["name"] for e in found["entities"]],
    "deps": sorted((r["from"], r["to"]) for r in graph["relations"]),
    "libraries": sorted(e["name"] for e in graph["entities"] if e["entityType"] == "library"),
}
"""
    async with Upstreams([memory]) as up:
        r = await run(program, up)
    assert r.ok, r.error
    assert r.value == {
        "found": ["trio"],
        "deps": [["anyio", "trio"], ["sandbox", "anyio"]],
        "libraries": ["anyio", "trio"],
    }


@pytest.mark.slow
async def test_everything_structured_content_images_and_invalid_arguments() -> None:
    """The everything server: structured content is the value, image content comes as
    content blocks, and arguments its schema refuses never leave the host."""
    everything = stdio(command("everything"), name="everything")
    program = """
weather = await host.everything__get_structured_content(location="Chicago")
total = await host.everything__get_sum(a=2, b=3)
image = await host.everything__get_tiny_image()
try:
    await host.everything__get_structured_content(location="Paris")
except Exception as e:
    bad = [e.kind, e.message]
[weather, total, [b["type"] for b in image], bad]
"""
    async with Upstreams([everything]) as up:
        r = await run(program, up)
    assert r.ok, r.error
    weather, total, kinds, bad = r.value
    assert weather == {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}
    assert "5" in total
    assert "image" in kinds
    assert bad[0] == "invalid"
    assert "location" in bad[1]
    assert r.calls == 4


@pytest.mark.slow
async def test_everything_long_running_call_ends_at_its_deadline() -> None:
    """A long-running tool (30 s of progress) is cut off at the per-call deadline and the
    connection stays usable."""
    everything = stdio(command("everything"), name="everything")
    program = """
try:
    await host.everything__trigger_long_running_operation(duration=30, steps=30)
    out = "finished"
except Exception as e:
    out = e.kind
[out, await host.everything__echo(message="after")]
"""
    async with Upstreams([everything]) as up:
        r = await run(program, up, budget=sandbox.Budget(max_call_deadline=1.0, wall_clock=20))
        assert up.connections("everything") == 1
    assert r.ok, r.error
    assert r.value[0] == "transient"
    assert "after" in r.value[1]


@pytest.mark.slow
async def test_everything_long_running_call_tells_its_progress() -> None:
    """A long-running tool that finishes: its value comes back, and the progress the
    server sends while it runs is told to the host as it comes, in order."""
    everything = stdio(command("everything"), name="everything")
    told: list[tuple[str, float, float | None]] = []
    program = "await host.everything__trigger_long_running_operation(duration=2, steps=4)"

    async def on_progress(tool: str, done: float, total: float | None, _: str | None) -> None:
        told.append((tool, done, total))

    async with Upstreams([everything], on_progress=on_progress) as up:
        r = await run(program, up, budget=sandbox.Budget(wall_clock=20))
    assert r.ok, r.error
    assert "completed" in str(r.value).lower()
    assert [t for t, _, _ in told] == ["everything__trigger_long_running_operation"] * len(told)
    assert [done for _, done, _ in told] == [1, 2, 3, 4]
    assert {total for _, _, total in told} == {4}


@pytest.mark.slow
async def test_everything_over_streamable_http() -> None:
    """The everything server served over streamable HTTP, as an upstream."""
    port = free_port()
    argv = command("everything", "streamableHttp")
    with http_server(argv, port, env={"PORT": str(port)}) as url:
        async with Upstreams([upstream.http(url, name="everything")]) as up:
            r = await run("await host.everything__get_structured_content(location='New York')", up)
    assert r.ok, r.error
    assert r.value["conditions"] == "Cloudy"


@pytest.mark.slow
async def test_time_server_from_pypi() -> None:
    """mcp-server-time (Python, from PyPI) converts a time between zones; its server name,
    given at initialize, names its tools when no name is given."""
    async with Upstreams([stdio(command("time"))]) as up:
        (name,) = up.servers
        r = await run(
            f"await host.{name}__convert_time(source_timezone='Europe/London', time='12:00', "
            "target_timezone='Asia/Tokyo')",
            up,
        )
    assert name == "mcp_time"
    assert r.ok, r.error
    assert r.value["target"]["datetime"].endswith("T20:00:00+09:00") or r.value["target"][
        "datetime"
    ].endswith("T21:00:00+09:00")


@pytest.mark.slow
async def test_describe_gives_typed_stubs_of_real_tools(tmp_path: Path) -> None:
    """The stubs of real tools compile, with signatures and return types from their schemas."""
    fs = stdio(command("filesystem", str(tmp_path)), name="fs")
    async with Upstreams([fs]) as up:
        text = up.describe()
    compile(text, "<stubs>", "exec")
    assert "async def fs__read_text_file(path: str, *, tail: float | None = None" in text
    assert "-> FsReadTextFileResult:" in text
    assert "class FsReadTextFileResult(TypedDict):\n    content: str" in text
