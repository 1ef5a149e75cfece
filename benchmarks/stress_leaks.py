"""Leak stress: thousands of runs, then count what they left on the host.

Usage::

    .venv/bin/python -m benchmarks.stress_leaks [--runs 10000] [--concurrency 4]
        [--level process --level confined] [--spawn zygote --spawn pool]
        [--backend asyncio] [--json PATH]

Not a timing claim: a reliability one, for the guarantee a run makes since it returns
before its remains are cleared (:mod:`sandbox._children._remains`): once every run has
returned and the host has cleared every remains, nothing of any run is left. The runs mix
five programs, in turn: a trivial one, one host call, one that forks a child that sleeps
(killed with the run), one that awaits two host calls together, and, every 50th run, one
that outlives its 0.5 s wall clock. While
they run, the number of remains waiting to be cleared is sampled after every run and must
never pass its bound. At the end the host closes its pools and removes the workspaces it
keeps for runs to come (one per kind of run forked on demand, as closing the host does),
waits until every remains is cleared, and counts, against a count taken the same way
before the first run: the processes under its zygotes and under itself, its runs' working
directories (wherever the host makes them) and cgroups, and its own open descriptors.
The exit status is 0 only when every run returned what its program should and nothing
was left.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import psutil

import sandbox
from protocol import CGROUP_PREFIX, _channel
from sandbox import Budget, Level, Pool, RunResult, Spawn
from sandbox._children import REMAINS, _supervisor, hierarchy, workdir_bases
from sandbox._children._remains import MAX_PENDING
from sandbox._children._workspace import SPARES

from ._levels import add_level_option, levels_here
from ._machine import report_head, write_report

FORKS = """
import os, time
if os.fork() == 0:
    time.sleep(600)
    os._exit(0)
1
"""
#: A program that awaits two host calls together (a pool that has seen it warms the
#: children it makes next for such programs).
AWAITS = "import asyncio\nawait asyncio.gather(host.echo({i}), host.echo({i} + 1))"
#: A program that calls an inline tool twice (answered from the run's own wait, with no
#: serving task: ``Server.pump``).
INLINE_CALLS = "[host.quick({i}), host.quick({i} + 1)]"
#: Every this many runs, a program that outlives its wall clock of this many seconds.
SLOW_EVERY = 50
SLOW_WALL_CLOCK = 0.5


def echo(n: int) -> int:
    return n


#: The tools of every run: ``echo`` in a worker thread (each call a task of its own on the
#: host), ``quick`` the same function inline.
TOOLS = [sandbox.Tool(echo), sandbox.Tool(echo, name="quick", inline=True)]


def _program(i: int) -> tuple[str, Budget, Any]:
    """The i-th run's program, its budget, and the value it must return (None: a limit)."""
    if i % SLOW_EVERY == SLOW_EVERY - 1:
        return "import time\ntime.sleep(30)", Budget(wall_clock=SLOW_WALL_CLOCK), None
    return [
        ("1", Budget(wall_clock=20), 1),
        (f"host.echo({i})", Budget(wall_clock=20), i),
        (FORKS, Budget(wall_clock=20), 1),
        (AWAITS.format(i=i), Budget(wall_clock=20), [i, i + 1]),
        (INLINE_CALLS.format(i=i), Budget(wall_clock=20), [i, i + 1]),
    ][i % 5]


def _as_expected(result: RunResult, expected: Any) -> bool:
    if expected is None:
        return result.cause == "wall_clock"
    return result.ok and result.value == expected


def host_state() -> dict[str, int]:
    """What this host's runs hold now (besides what the host keeps between runs)."""
    keep = _supervisor.host_processes()
    processes: set[int] = set()
    for pid in keep:
        try:
            processes.update(p.pid for p in psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            continue
    processes.update(p.pid for p in psutil.Process().children(recursive=True))
    processes -= keep
    mine = f"{CGROUP_PREFIX}{os.getpid()}-"
    cgroups = 0
    for base in hierarchy().bases():
        if base.is_dir():
            cgroups += sum(1 for _ in base.glob(f"{mine}*"))
    mine = f"{_supervisor.WORKDIR_PREFIX}{os.getpid()}-*"
    dirs = [d for base in workdir_bases() for d in Path(base).glob(mine)]
    return {
        "processes": len(processes),
        "cgroups": cgroups,
        "directories": sum(1 for _ in dirs),
        "descriptors": len(os.listdir("/proc/self/fd")),
    }


async def _stress(level: Level, spawn: Spawn, runs: int, concurrency: int) -> dict[str, Any]:
    wrong: list[dict[str, Any]] = []
    most_pending = 0
    next_run = 0
    t0 = time.perf_counter()
    pool = Pool(size=concurrency) if spawn is Spawn.POOL else None
    source: Spawn | Pool = pool if pool is not None else spawn

    async def caller() -> None:
        nonlocal next_run, most_pending
        while next_run < runs:
            i = next_run
            next_run += 1
            program, budget, expected = _program(i)
            result = await sandbox.run(
                program, tools=TOOLS, level=level, spawn=source, budget=budget
            )
            most_pending = max(most_pending, REMAINS.pending())
            if not _as_expected(result, expected):
                failure = {"run": i, "kind": str(result.kind), "cause": result.cause}
                failure["error"] = result.error[:2000]
                wrong.append(failure)
                print(f"WRONG {level.value} {spawn.value}: {failure}", file=sys.stderr)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(caller)
    finally:
        if pool is not None:
            pool.close()
    seconds = time.perf_counter() - t0
    return {
        "level": level.value,
        "spawn": spawn.value,
        "runs": runs,
        "wrong": len(wrong),
        "most_pending": most_pending,
        "seconds": round(seconds, 1),
        "failed": wrong[:20],
    }


def _settled(before: dict[str, int]) -> dict[str, int]:
    """What is left, beyond ``before``, once every remains is cleared (up to 30 s) and the
    workspaces the host keeps for runs to come (one per kind of run forked on demand,
    removed when the host closes) are removed, as closing the host removes them."""
    REMAINS.wait_empty(30.0)
    SPARES.close()
    deadline = time.monotonic() + 5.0
    while True:
        now = host_state()
        left = {key: now[key] - before[key] for key in now}
        if not any(v > 0 for v in left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stress_leaks")
    parser.add_argument("--runs", type=int, default=10_000, help="runs per level and spawn")
    parser.add_argument("--concurrency", type=int, default=4, help="callers at once")
    add_level_option(parser)
    parser.add_argument("--spawn", action="append", choices=[Spawn.ZYGOTE.value, Spawn.POOL.value])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    args = parser.parse_args(argv)
    levels = levels_here(args.level)
    if levels is None:
        return 2
    spawns = [Spawn(v) for v in args.spawn or [Spawn.ZYGOTE.value, Spawn.POOL.value]]
    report: dict[str, Any] = {
        **report_head(argv, ["trio"]),
        "backend": args.backend,
        "max_pending": MAX_PENDING,
        "concurrency": args.concurrency,
        "slow_every": SLOW_EVERY,
        "slow_wall_clock": SLOW_WALL_CLOCK,
        "rows": [],
    }
    # One run first, so that the zygote (kept between runs, not a leftover) is up.
    anyio.run(sandbox.run, "1", backend=args.backend)
    REMAINS.wait_empty(30.0)
    SPARES.close()  # (what it made ahead for the next run: see _settled)
    # The one /dev/null descriptor a process keeps for channels closed under a waiting
    # task (protocol._channel), opened by the first such close: the host's, not a run's.
    _channel._null()
    before = host_state()
    for level in levels:
        for spawn in spawns:
            row = anyio.run(
                _stress, level, spawn, args.runs, args.concurrency, backend=args.backend
            )
            row["left"] = _settled(before)
            report["rows"].append(row)
            print(
                f"{row['level']:9} {row['spawn']:7} {row['runs']} runs in {row['seconds']} s, "
                f"{row['wrong']} wrong, at most {row['most_pending']} remains pending "
                f"(bound {MAX_PENDING}), left: {row['left']}",
                flush=True,
            )
    write_report(args.json, report)
    bad = any(
        row["wrong"]
        or row["most_pending"] > MAX_PENDING
        or any(v > 0 for v in row["left"].values())
        for row in report["rows"]
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
