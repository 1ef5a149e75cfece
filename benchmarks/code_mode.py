"""Code mode against tool calls: one sandboxed program against 51 MCP tool calls, on the
reference filesystem server, in the same run.

Usage::

    .venv/bin/python -m benchmarks.code_mode [--rounds N] [--files N] [--level LEVEL]
        [--backend asyncio|trio] [--json PATH]

Theory of operation
-------------------
The task: of the ``--files`` (50) files in a directory, return the 5 largest that contain
a word. It needs the directory's listing and every file's text. Both ways talk to the same
``@modelcontextprotocol/server-filesystem`` process kind (installed by ``make upstreams``),
each over a connection opened before the clock starts, so that neither pays a server's
start-up:

* ``code``: one program run in the sandbox (``--level``, default ``process``), its host
  tools the server's (:class:`sandbox.upstream.Upstreams`). It lists the directory, reads
  every file (``asyncio.gather``: the calls are in flight together), filters, sorts and
  returns the 5 names with their sizes. What would enter a model's context is the
  program's value (and, counted apart, the program itself, which the model writes).
* ``calls``: what an agent does without code mode: the same 51 calls one after another
  from the SDK's ``ClientSession`` (a model calls one tool per turn, or a few; the model's
  own time is left out, which flatters this side), the filtering done by whoever reads the
  results. What would enter the model's context is the text of every result.

Wall time is per task, from the first call to the answer (``perf_counter``), median and
range over ``--rounds`` rounds, the two ways alternating within a round. Bytes are UTF-8
bytes of the JSON or text as a client would put it in a prompt. Ratios are
``code / calls`` for time and ``calls / code`` for bytes, per round, then the median. The
issue's goal: time within 1.5x of the calls' or better, at least 10x fewer bytes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import sandbox
from sandbox.upstream import Upstreams, stdio

from ._machine import ROOT, changed_sources, environment, git_head

WORD = "needle"
TOP = 5

PROGRAM = """
import asyncio
root = {root!r}
listing = (await host.fs__list_directory(path=root))["content"].splitlines()
names = [line.removeprefix("[FILE] ") for line in listing if line.startswith("[FILE] ")]
texts = await asyncio.gather(*(host.fs__read_text_file(path=f"{{root}}/{{n}}") for n in names))
hits = [(len(t["content"].encode()), n) for n, t in zip(names, texts) if {word!r} in t["content"]]
[[n, size] for size, n in sorted(hits, reverse=True)[:{top}]]
"""


def server_path() -> Path:
    root = Path(
        os.environ.get("SANDBOX_UPSTREAMS")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "sandbox"
        / "upstreams"
    )
    return root / "node_modules" / ".bin" / "mcp-server-filesystem"


def make_files(where: Path, count: int) -> list[list[Any]]:
    """``count`` text files of 1-40 KB, a third of them holding the word; the expected
    answer."""
    rng = random.Random(17)
    words = ["alpha", "beta", "gamma", "delta", "sandbox", "program", "tool", "call"]
    sizes: list[tuple[int, str]] = []
    for i in range(count):
        target = rng.randint(1_000, 40_000)
        body = " ".join(rng.choice(words) for _ in range(target // 6))
        if i % 3 == 0:
            at = rng.randint(0, len(body))
            body = body[:at] + f" {WORD} " + body[at:]
        name = f"doc{i:03d}.txt"
        (where / name).write_text(body)
        if WORD in body:
            sizes.append((len(body.encode()), name))
    return [[n, s] for s, n in sorted(sizes, reverse=True)[:TOP]]


async def by_calls(session: ClientSession, root: str) -> tuple[list[list[Any]], int, int]:
    """The task as separate tool calls: (answer, bytes of every result's text, calls)."""
    seen = 0
    listing = await session.call_tool("list_directory", {"path": root})
    text = _text(listing)
    seen += len(text.encode())
    names = [ln.removeprefix("[FILE] ") for ln in text.splitlines() if ln.startswith("[FILE] ")]
    hits: list[tuple[int, str]] = []
    for name in names:
        got = _text(await session.call_tool("read_text_file", {"path": f"{root}/{name}"}))
        seen += len(got.encode())
        if WORD in got:
            hits.append((len(got.encode()), name))
    answer = [[n, s] for s, n in sorted(hits, reverse=True)[:TOP]]
    return answer, seen, 1 + len(names)


def _text(result: Any) -> str:
    assert isinstance(result, types.CallToolResult), result
    assert not result.is_error, result
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def measure(
    args: argparse.Namespace, files: Path, expected: list[list[Any]]
) -> dict[str, Any]:
    server = str(server_path())
    root = str(files)
    program = PROGRAM.format(root=root, word=WORD, top=TOP)
    params = StdioServerParameters(command=server, args=[root], env=dict(os.environ))
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryFile("w+") as errlog:
        async with (
            Upstreams([stdio([server, root], name="fs")]) as up,
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            tools = up.host_tools()
            for n in range(args.rounds + 1):  # round 0 warms both up and is not kept
                order = ["code", "calls"] if n % 2 else ["calls", "code"]
                row: dict[str, Any] = {}
                for way in order:
                    start = time.perf_counter()
                    if way == "code":
                        r = await sandbox.run(program, tools=tools, level=args.level)
                        row["code_s"] = time.perf_counter() - start
                        assert r.ok, r.error
                        assert r.value == expected, (r.value, expected)
                        row["code_calls"] = r.calls
                        row["code_result_bytes_in_sandbox"] = r.bytes
                        row["code_value_bytes"] = len(json.dumps(r.value).encode())
                    else:
                        answer, seen, calls = await by_calls(session, root)
                        row["calls_s"] = time.perf_counter() - start
                        assert answer == expected, (answer, expected)
                        row["calls_calls"] = calls
                        row["calls_bytes"] = seen
                if n:
                    row["time_ratio"] = row["code_s"] / row["calls_s"]
                    row["bytes_ratio"] = row["calls_bytes"] / row["code_value_bytes"]
                    rounds.append(row)
                    print(
                        f"round {n}: code {row['code_s'] * 1000:.1f} ms, calls "
                        f"{row['calls_s'] * 1000:.1f} ms (x{row['time_ratio']:.2f}); bytes "
                        f"{row['code_value_bytes']} against {row['calls_bytes']} "
                        f"({row['bytes_ratio']:.0f}x fewer)",
                        file=sys.stderr,
                    )
    program_bytes = len(program.encode())
    summary = {
        "code_ms_median": 1000 * statistics.median(r["code_s"] for r in rounds),
        "code_ms_range": [
            1000 * min(r["code_s"] for r in rounds),
            1000 * max(r["code_s"] for r in rounds),
        ],
        "calls_ms_median": 1000 * statistics.median(r["calls_s"] for r in rounds),
        "calls_ms_range": [
            1000 * min(r["calls_s"] for r in rounds),
            1000 * max(r["calls_s"] for r in rounds),
        ],
        "time_ratio_median": statistics.median(r["time_ratio"] for r in rounds),
        "code_value_bytes": rounds[0]["code_value_bytes"],
        "program_bytes": program_bytes,
        "calls_bytes": rounds[0]["calls_bytes"],
        "bytes_ratio": rounds[0]["bytes_ratio"],
        "bytes_ratio_with_program": rounds[0]["calls_bytes"]
        / (rounds[0]["code_value_bytes"] + program_bytes),
        "calls_per_task": rounds[0]["calls_calls"],
    }
    summary["time_goal_met"] = summary["time_ratio_median"] <= 1.5
    summary["bytes_goal_met"] = summary["bytes_ratio"] >= 10
    return {"rounds": rounds, "summary": summary, "expected": expected}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="benchmarks.code_mode", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--files", type=int, default=50)
    p.add_argument("--level", default="process", choices=["in_process", "process", "confined"])
    p.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not server_path().exists():
        print(f"no filesystem server at {server_path()}: run `make upstreams`", file=sys.stderr)
        return 2
    meta = environment(argv, extra_packages=("mcp", "mcp-types", "pydantic"))
    meta["git"] = git_head(ROOT)
    meta["server"] = "@modelcontextprotocol/server-filesystem 2026.8.31"
    meta["task"] = {"files": args.files, "word": WORD, "top": TOP, "level": args.level}
    meta["backend"] = args.backend
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as where:
        files = Path(where)
        expected = make_files(files, args.files)
        doc = anyio.run(measure, args, files, expected, backend=args.backend)
    meta["duration_s"] = time.perf_counter() - started
    meta["loadavg_at_end"] = list(os.getloadavg())
    meta["changed_during_run"] = changed_sources(meta["git"].get("measured_sources", {}), ROOT)
    doc = {"meta": meta, **doc}
    date = dt.date.today().isoformat()
    out = args.json or ROOT / "benchmarks" / "results" / f"code-mode-{date}.json"
    out.write_text(json.dumps(doc, indent=2) + "\n")
    s = doc["summary"]
    print(
        f"code mode: {s['code_ms_median']:.1f} ms against {s['calls_ms_median']:.1f} ms for "
        f"{s['calls_per_task']} calls (x{s['time_ratio_median']:.2f}); {s['code_value_bytes']} "
        f"bytes to the model against {s['calls_bytes']} ({s['bytes_ratio']:.0f}x fewer; "
        f"{s['bytes_ratio_with_program']:.0f}x counting the program). Written to {out}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
