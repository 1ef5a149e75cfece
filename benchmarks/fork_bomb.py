"""How late a run ends when a fork bomb fills its process limit, against a sleeping program.

Usage::

    .venv/bin/python -m benchmarks.fork_bomb [--runs 20] [--wall-clock 2]
        [--level process --level confined] [--json PATH]

The claim measured: under the default budget (a process limit of 256 where a pids cgroup or
a pid namespace enforces it), the wall clock still holds while a fork bomb runs. Each round
runs, at each level and from the zygote, a fork bomb and then, as the baseline, a program
that only sleeps past the same wall clock; both are ended by it. Reported per level: how
long after its wall clock each run returned (``wall_time - wall_clock``), as median, 90th
percentile and worst, for the bomb and for the baseline, and the bomb's median over the
baseline's. The test suite keeps a looser bound (a second, for a loaded machine:
``tests/sandbox/test_hostile.py``); this is where the figure is measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

import sandbox
from sandbox import Budget, Level, Spawn

from ._levels import add_level_option, levels_here
from ._machine import report_head, write_report

BOMB = """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
"""
SLEEPS = "import time\ntime.sleep(600)"


async def _late(program: str, level: Level, wall_clock: float) -> float:
    result = await sandbox.run(
        program, level=level, spawn=Spawn.ZYGOTE, budget=Budget(wall_clock=wall_clock)
    )
    if result.cause != "wall_clock":
        raise SystemExit(f"expected a wall-clock end, got {result.cause}: {result.error}")
    return result.wall_time - wall_clock


def _summary(late: list[float]) -> dict[str, float]:
    ordered = sorted(late)
    return {
        "p50": round(statistics.median(ordered), 3),
        "p90": round(ordered[max(0, round(0.9 * len(ordered)) - 1)], 3),
        "max": round(ordered[-1], 3),
    }


async def _measure(levels: list[Level], runs: int, wall_clock: float) -> list[dict[str, Any]]:
    rows = []
    for level in levels:
        await sandbox.run("1", level=level)  # the zygote is up
        bomb: list[float] = []
        base: list[float] = []
        for _ in range(runs):  # interleaved: the machine's load falls on both alike
            bomb.append(await _late(BOMB, level, wall_clock))
            base.append(await _late(SLEEPS, level, wall_clock))
        b, s = _summary(bomb), _summary(base)
        rows.append(
            {
                "level": level.value,
                "runs": runs,
                "bomb_late": b,
                "baseline_late": s,
                "bomb_late_samples": [round(x, 4) for x in bomb],
                "baseline_late_samples": [round(x, 4) for x in base],
            }
        )
        print(
            f"{level.value:9} late after the wall clock, s: fork bomb p50 {b['p50']} "
            f"p90 {b['p90']} max {b['max']}; sleeping baseline p50 {s['p50']} "
            f"p90 {s['p90']} max {s['max']}",
            flush=True,
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fork_bomb")
    parser.add_argument("--runs", type=int, default=20, help="rounds per level")
    parser.add_argument("--wall-clock", type=float, default=2.0, help="seconds")
    add_level_option(parser)
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    args = parser.parse_args(argv)
    levels = levels_here(args.level)
    if levels is None:
        return 2
    rows = anyio.run(_measure, levels, args.runs, args.wall_clock)
    report = {
        **report_head(argv),
        "wall_clock": args.wall_clock,
        "max_processes": sandbox.DEFAULTS["max_processes"],
        "rows": rows,
    }
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
