"""What write-through output costs a program that prints a lot, against a buffered stdout.

Usage::

    .venv/bin/python -m benchmarks.bench_output [--lines 100000] [--runs 5]
        [--level process --level confined] [--json PATH]

The claim measured: the runner makes the program's ``sys.stdout`` and ``sys.stderr`` write
through to their pipes (``runner._main._write_through``), so that a run killed by SIGKILL
(its wall clock, its CPU or memory limit, the program's own ``os.kill``) loses nothing the
program printed; each write is then a system call rather than a copy into a buffer, and
the runner's ``print`` makes one write of its whole text (the built-in one makes one per
argument, separator and end: four for ``print("line", i)``). The host lets a trickle of
output gather in the pipe for a few milliseconds between reads rather than wake for every
write (``sandbox._engine._process._GATHER``). Each round runs, at each level and from the
zygote, the same program three times: as it is (write-through); after it has put back the
interpreter's own buffered stdout and built-in ``print`` (the baseline: the behaviour
without the runner's change, in the same run); and with the built-in ``print`` over the
write-through stdout (what ``python -u`` does: how much the one-write ``print`` saves).
The program prints ``--lines`` short lines (``print("line", i)``) and times its own loop,
the final flush included; the host's ``wall_time`` of each run is recorded as well (it
includes the host's reading of the pipe and the run's start and end).

Reported per level: the medians of both, for each variant, and the ratios to the buffered
baseline.
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

#: Puts back the built-in ``print`` (which the runner's one-write ``print`` holds in its
#: closure): each argument, separator and end is a write.
BUILTIN_PRINT = """
import builtins
for cell in print.__closure__ or ():
    if type(cell.cell_contents) is type(len) and cell.cell_contents.__name__ == "print":
        builtins.print = cell.cell_contents
"""
#: And a stdout as the interpreter makes it for a pipe (block-buffered, 8 KiB).
BUFFERED = (
    BUILTIN_PRINT
    + """
import io, sys
sys.stdout = io.TextIOWrapper(
    io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
    encoding=sys.stdout.encoding, errors=sys.stdout.errors, newline="\\n",
)
"""
)
PRINTS = """
import sys, time
t0 = time.perf_counter()
for i in range({lines}):
    print("line", i)
sys.stdout.flush()
time.perf_counter() - t0
"""


async def _once(program: str, level: Level, lines: int) -> tuple[float, float]:
    """The program's own loop time and the run's wall time, in seconds."""
    result = await sandbox.run(
        program,
        level=level,
        spawn=Spawn.ZYGOTE,
        budget=Budget(wall_clock=120.0, max_output=None),
    )
    if not result.ok:
        raise SystemExit(f"the program failed: {result.error}")
    expected = sum(len(f"line {i}\n") for i in range(lines))
    if result.stdout_bytes != expected:
        raise SystemExit(f"expected {expected} bytes of stdout, got {result.stdout_bytes}")
    return float(result.value), result.wall_time


async def _measure(levels: list[Level], runs: int, lines: int) -> list[dict[str, Any]]:
    through_program = PRINTS.format(lines=lines)
    programs = {
        "buffered": BUFFERED + through_program,
        "write_through": through_program,
        "write_through_builtin_print": BUILTIN_PRINT + through_program,
    }
    rows = []
    for level in levels:
        await sandbox.run("1", level=level)  # the zygote is up
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in programs}
        for _ in range(runs):  # interleaved: the machine's load falls on all alike
            for name, program in programs.items():
                samples[name].append(await _once(program, level, lines))
        row: dict[str, Any] = {"level": level.value, "runs": runs, "lines": lines}
        for name, pairs in samples.items():
            row[name] = {
                "loop_s": round(statistics.median(p[0] for p in pairs), 4),
                "wall_s": round(statistics.median(p[1] for p in pairs), 4),
                "loop_samples": [round(p[0], 4) for p in pairs],
                "wall_samples": [round(p[1], 4) for p in pairs],
            }
        through, buffered = row["write_through"], row["buffered"]
        builtin = row["write_through_builtin_print"]
        row["loop_ratio"] = round(through["loop_s"] / buffered["loop_s"], 2)
        row["wall_ratio"] = round(through["wall_s"] / buffered["wall_s"], 2)
        row["builtin_print_loop_ratio"] = round(builtin["loop_s"] / buffered["loop_s"], 2)
        rows.append(row)
        print(
            f"{level.value:9} {lines} lines: loop {buffered['loop_s']:.3f} s buffered, "
            f"{through['loop_s']:.3f} s write-through (x{row['loop_ratio']}), "
            f"{builtin['loop_s']:.3f} s write-through with the built-in print "
            f"(x{row['builtin_print_loop_ratio']}); run {buffered['wall_s']:.3f} s vs "
            f"{through['wall_s']:.3f} s (x{row['wall_ratio']})",
            flush=True,
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_output")
    parser.add_argument("--lines", type=int, default=100_000, help="lines printed per run")
    parser.add_argument("--runs", type=int, default=5, help="rounds per level")
    add_level_option(parser)
    parser.add_argument("--json", type=Path, help="write the report here as JSON")
    args = parser.parse_args(argv)
    levels = levels_here(args.level)
    if levels is None:
        return 2
    rows = anyio.run(_measure, levels, args.runs, args.lines)
    report = {**report_head(argv), "rows": rows}
    write_report(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
