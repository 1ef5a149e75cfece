"""Start-up stress: many runs at once, each batch on a freshly started zygote; count failures.

Usage::

    .venv/bin/python -m benchmarks.stress_start [--runs 5000] [--concurrency 4]
        [--level process --level confined] [--spawn zygote] [--backend asyncio]
        [--json PATH]

Not a timing claim: a reliability one. Runs are made in batches of ``--concurrency``
callers started at once; before each batch the host's zygote (and every pool) is shut
down, so every batch's children come from a zygote that has only just started, which is
when start-up races show. Every run is the trivial program ``1 + 1`` with a 20 s wall
clock; a run that does not return ``2`` is a failure, printed with its kind, cause, error,
exit status and stderr. The exit status is 0 only when no run failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import sandbox
from sandbox import Budget, Level, RunResult, Spawn
from sandbox._children import _supervisor

from ._levels import add_level_option, levels_here
from ._machine import report_head, write_report


async def _batch(level: Level, spawn: Spawn, n: int) -> list[RunResult]:
    results: list[RunResult] = []

    async def one() -> None:
        result = await sandbox.run("1 + 1", level=level, spawn=spawn, budget=Budget(wall_clock=20))
        results.append(result)

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return results


async def _stress(level: Level, spawn: Spawn, runs: int, concurrency: int) -> dict[str, Any]:
    failures: list[dict[str, Any]] = []
    done = 0
    t0 = time.perf_counter()
    while done < runs:
        _supervisor.shutdown()  # the next batch starts a new zygote
        for result in await _batch(level, spawn, min(concurrency, runs - done)):
            done += 1
            if not (result.ok and result.value == 2):
                failure = {
                    "kind": str(result.kind),
                    "cause": result.cause,
                    "error": result.error,
                    "exit_code": result.exit_code,
                    "signal": result.signal,
                    "stderr": result.stderr[:2000],
                }
                failures.append(failure)
                print(f"FAIL {level.value} {spawn.value}: {failure}", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    return {
        "level": level.value,
        "spawn": spawn.value,
        "runs": done,
        "failures": len(failures),
        "seconds": round(seconds, 1),
        "failed": failures,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stress_start")
    parser.add_argument("--runs", type=int, default=5000, help="runs per level and spawn mode")
    parser.add_argument("--concurrency", type=int, default=4, help="runs started at once")
    add_level_option(parser)
    parser.add_argument("--spawn", action="append", choices=[m.value for m in Spawn])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    args = parser.parse_args(argv)
    levels = levels_here(args.level)
    if levels is None:
        return 2
    spawns = [Spawn(v) for v in args.spawn or [Spawn.ZYGOTE.value]]
    report: dict[str, Any] = {
        **report_head(argv, ["trio"]),
        "backend": args.backend,
        "rows": [],
    }
    for level in levels:
        for spawn in spawns:
            row = anyio.run(
                _stress, level, spawn, args.runs, args.concurrency, backend=args.backend
            )
            report["rows"].append(row)
            print(
                f"{row['level']:9} {row['spawn']:7} {row['runs']} runs, "
                f"{row['failures']} failures, {row['seconds']} s",
                flush=True,
            )
    write_report(args.json, report)
    return 1 if any(row["failures"] for row in report["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
