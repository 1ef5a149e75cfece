"""The isolation-overhead study: what a sandboxed run costs, by level and by spawn mode,
each number beside a baseline measured in the same run.

Usage::

    .venv/bin/python -m benchmarks.study             # full run, about 2.5 minutes on 2 vCPUs
    .venv/bin/python -m benchmarks.study --quick     # small sizes, about a minute
    .venv/bin/python -m benchmarks.study --smoke --out /tmp/study   # tiny, for the tests
    .venv/bin/python -m benchmarks.study --render benchmarks/results/study-DATE.json

Theory of operation
-------------------
A *cell* is one thing measured: a level (``in_process``, ``process``, ``confined``) with,
for the two child levels, a spawn mode (``cold``, ``zygote``, ``pool``); ``in_process``
has no child and is one cell. Five measurements, in this order, then the profiles:

1. **Latency** of a trivial run, ``await sandbox.run("1", level=..., spawn=...)``, timed
   on the host around the call. Pool cells use a :class:`sandbox.Pool` of their own and
   wait (``Pool.wait_full``, untimed) until every idle child is ready before each sample,
   so the fork is not on the run's path: that is what a pool is for. The baseline is
   ``python -I -S -c pass`` from ``Popen`` to reaped exit (``bench_levels.spawn_batch``).
   The samples come in rounds; every round visits every cell (the baseline included), the
   first cell moving by one each round, so that drift on a shared machine spreads over all
   cells rather than landing on one. The same rounds time two more programs: one that
   awaits one host call (``await host.echo(1)``, at the confined pool), and one whose
   value is a 1 MiB string (at ``in_process`` and both pools), against a second baseline,
   the raw pipe (:class:`RawPipe`: 1 MiB moved through an ``os.pipe`` from a second
   process); reported as (value's run - trivial run) / raw pipe, by p50.
2. **Sustained throughput**: K concurrent tasks (default ``2 x os.cpu_count()``) each
   doing trivial runs back to back for a fixed time; runs per second counted over the time
   until the last run ended, and failed runs. Pool cells use one pool of size K, filled
   before the clock starts. Baseline: K threads spawning ``python -I -S -c pass``. In the
   same window, the **CPU per run**, by part (:func:`cpu_per_run`, :data:`CPU_COUNTED`):
   this process's own, the zygote's and keeper's own, and every run's processes' as
   reaped, with their share inside the run's cgroups (``RunResult.cpu_time``) apart; the
   window closes once the pool is full again and every remains is cleared.
3. **Per-call round trip**: one run whose program calls ``host.echo(i)`` N times in a
   row (blocking calls) and times itself with ``time.perf_counter`` inside the program.
   Baseline: ``bench_wire``'s raw parent (blocking ``os.read``/``os.write`` and msgspec,
   no event loop) answering ``bench_wire``'s child, ``seq`` bench.
4. **Pipelined calls**: the program awaits ``asyncio.gather`` of 64 ``host.echo`` calls,
   repeatedly, and times itself. Baselines: the raw parent under the ``pipe_raw`` bench
   (the child writes 64 raw frames, then reads 64) and the ``pipe_gather`` bench (the
   child's own asyncio ``gather``, the closer match to the sandboxed program).
5. **Memory**: per idle warm child of a ``Pool(size=n)`` per child level, the USS and PSS
   of the child's processes (it and its descendants), from ``psutil``; the zygote and its
   keeper for context; a bare ``python -I -S`` interpreter at rest as the baseline. For
   ``cold`` and ``zygote``, which have no idle children, the same sums for the run's
   processes while the program waits in a host call (so: a running child, not an idle one).

The echo tool is ``sandbox.Tool(echo, inline=True)``: answered in the host's event loop,
so the per-call numbers are the sandbox's cost and not a thread hop's.

Every run is checked (``ok``, the expected value, the expected number of calls); a run that
fails, overruns ``--timeout`` or raises is counted and listed in the JSON with its reason,
never dropped silently. Every pool is closed when its cell ends, and the zygote is shut
down at the end; then this process checks that it has no children left.

The targets (:data:`TARGETS`, issue 15's table) each have a floor and a goal: the verdict,
PASS or MISS, is against the floor, and whether the goal is met is said beside it. Then
the **profiles** (:mod:`benchmarks.profiles`): the run's path phase by phase at the cells
the targets name, what a fresh process costs here before any wall, and an idle confined
child's memory by mapping; the page shows each MISS with the profile that explains it.

The JSON holds every sample; ``RESULTS.md`` and the plots are rendered from the JSON alone
(``--render`` does only that), so a result can be re-rendered, and checked, later. A JSON
of an earlier study (schema 1: one threshold per target, none of the new figures) renders
as it did then, and ``--render`` says that it predates the floors and goals.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import math
import os
import resource
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
import msgspec
import psutil
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

import sandbox
import sandbox._children._supervisor
import sandbox._engine._levels
from sandbox._children._remains import REMAINS

from ._machine import ROOT, changed_sources, cpu_ticks, environment, git_head, stolen_share
from .bench_levels import _KILLED, ECHO, SPAWNS, children_left, pstats, spawn_batch
from .bench_wire import RAW, Bench, make_benches, run_session, summarize, value_of

__all__ = ["main", "render", "run_study"]

BENCH_DIR: Final = ROOT / "benchmarks"
RESULTS_DIR: Final = BENCH_DIR / "results"
RESULTS_MD: Final = BENCH_DIR / "RESULTS.md"

LEVELS: Final = ("in_process", "process", "confined")
CHILD_LEVELS: Final = ("process", "confined")
SPAWN_MODES: Final = ("cold", "zygote", "pool")
BARE: Final = "bare_spawn"
BARE_ARGV: Final = SPAWNS["bare"][1]
BARE_LABEL: Final = SPAWNS["bare"][0]
#: Calls in flight in the pipelined measurement: the protocol's default in-flight cap.
INFLIGHT: Final = 64
#: The raw-pipe baselines taken from ``bench_wire``: the sequential one, and the two
#: pipelined ones (``pipe_raw`` as asked; ``pipe_gather`` is the closer match).
RAW_BENCHES: Final = ("seq", "pipe_raw", "pipe_gather")
MB: Final = 1e6  # memory is reported in MB of 10**6 bytes (the stricter reading of "4 MB")
#: The study's own measurements, in order (the peers section, ``--peers``, comes after).
SECTIONS: Final = ("latency", "sustained", "calls", "memory")
#: ``--peers``: "no" (the default), "also" (after the study's own) or "only".
PEER_MODES: Final = ("no", "also", "only")

TRIVIAL: Final = "1"
MEMORY_PROGRAM: Final = "host.measure()"
#: A program that awaits one host call (its value: 1).
AWAIT_PROGRAM: Final = "await host.echo(1)"
#: Characters (and bytes, in UTF-8) of the 1 MiB value.
VALUE_CHARS: Final = 1 << 20
#: A program whose value is a 1 MiB string.
VALUE_PROGRAM: Final = "'x' * (1 << 20)"
#: The latency phase's second baseline: 1 MiB moved through a raw ``os.pipe`` from one
#: process to another (:class:`RawPipe`).
RAW_PIPE: Final = "raw_pipe"
RAW_PIPE_LABEL: Final = "1 MiB through a raw os.pipe from a second process to this one"
#: Beyond the trivial run of every cell, the latency phase times these programs at these
#: cells (key ``workload@cell``): a program that awaits one host call at the confined
#: pool, and a 1 MiB value where issue 15 compares it with the raw pipe.
AWAIT_CELLS: Final = ("confined/pool",)
VALUE_CELLS: Final = ("in_process", "process/pool", "confined/pool")
#: The latency phase's baselines: a bare spawn and the raw pipe.
LATENCY_BASELINES: Final = (BARE, RAW_PIPE)


def cell_keys() -> list[str]:
    """Every level x spawn cell: ``in_process`` once, then ``level/spawn``."""
    return ["in_process", *(f"{lv}/{sp}" for lv in CHILD_LEVELS for sp in SPAWN_MODES)]


def latency_keys() -> list[str]:
    """The latency phase's cells: the bare spawn, every cell's trivial run, the awaiting
    program, the raw pipe and the 1 MiB values."""
    return [
        BARE,
        *cell_keys(),
        *(f"await@{key}" for key in AWAIT_CELLS),
        RAW_PIPE,
        *(f"value@{key}" for key in VALUE_CELLS),
    ]


def split_key(key: str) -> tuple[str, str | None]:
    """A cell key as (level, spawn mode or None)."""
    level, _, spawn = key.partition("/")
    return level, spawn or None


def split_workload(key: str) -> tuple[str, str]:
    """A latency key as (workload, cell): ``trivial``, ``await`` or ``value``."""
    workload, at, cell = key.partition("@")
    return (workload, cell) if at else ("trivial", key)


def seq_program(calls: int, warmup: int) -> str:
    """``calls`` blocking ``host.echo(i)`` in a row, timed inside the program.

    Its value is ``[correct answers, microseconds per call]``.
    """
    return (
        "import time\n"
        f"for i in range({warmup}):\n"
        "    host.echo(i)\n"
        "ok = 0\n"
        "t0 = time.perf_counter()\n"
        f"for i in range({calls}):\n"
        "    ok += host.echo(i) == i\n"
        "t1 = time.perf_counter()\n"
        f"[ok, (t1 - t0) * 1e6 / {calls}]\n"
    )


def pipe_program(batches: int, warmup: int) -> str:
    """``batches`` rounds of ``INFLIGHT`` ``host.echo`` under ``asyncio.gather``, timed.

    Its value is ``[correct answers, microseconds per call]``.
    """
    return (
        "import asyncio, time\n"
        "async def batch(first):\n"
        f"    ids = range(first, first + {INFLIGHT})\n"
        "    values = await asyncio.gather(*(host.echo(i) for i in ids))\n"
        "    return sum(v == i for v, i in zip(values, ids))\n"
        f"for b in range({warmup}):\n"
        f"    await batch(b * {INFLIGHT})\n"
        "ok = 0\n"
        "t0 = time.perf_counter()\n"
        f"for b in range({batches}):\n"
        f"    ok += await batch(b * {INFLIGHT})\n"
        "t1 = time.perf_counter()\n"
        f"[ok, (t1 - t0) * 1e6 / ({batches} * {INFLIGHT})]\n"
    )


@dataclass(frozen=True)
class Sizes:
    """How much of everything one study measures."""

    latency_rounds: int
    latency_per_round: int  # samples per cell per round
    latency_warmup: int  # uncounted (but checked) samples per cell
    latency_pool_size: int
    sustained_seconds: float
    call_rounds: int  # runs of each call program per cell, and raw sessions per bench
    seq_calls: int
    seq_warmup: int
    pipe_batches: int
    pipe_warmup: int
    memory_pool_size: int
    memory_runs: int  # in-run measurements per cell, and bare interpreters
    timeout: float  # seconds any one run or session may take


PRESETS: Final = {
    # About 2.5 minutes on a 2-vCPU VM: 300 latency samples per cell (cold confined, at
    # ~90 ms each, is the longest cell: 30 s), 5 s of sustained load per cell.
    "full": Sizes(
        latency_rounds=5,
        latency_per_round=60,
        latency_warmup=3,
        latency_pool_size=2,
        sustained_seconds=5.0,
        call_rounds=5,
        seq_calls=5000,
        seq_warmup=200,
        pipe_batches=100,
        pipe_warmup=5,
        memory_pool_size=8,
        memory_runs=5,
        timeout=60.0,
    ),
    "quick": Sizes(
        latency_rounds=3,
        latency_per_round=15,
        latency_warmup=2,
        latency_pool_size=2,
        sustained_seconds=3.0,
        call_rounds=3,
        seq_calls=1000,
        seq_warmup=50,
        pipe_batches=30,
        pipe_warmup=2,
        memory_pool_size=4,
        memory_runs=3,
        timeout=60.0,
    ),
    # For a test: every cell and every code path, a few samples each, well under 30 s.
    "smoke": Sizes(
        latency_rounds=1,
        latency_per_round=3,
        latency_warmup=1,
        latency_pool_size=1,
        sustained_seconds=0.5,
        call_rounds=1,
        seq_calls=50,
        seq_warmup=5,
        pipe_batches=3,
        pipe_warmup=1,
        memory_pool_size=2,
        memory_runs=1,
        timeout=30.0,
    ),
}


# -- targets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One figure of the study's targets table (issue 15): a floor and a goal.

    The verdict (PASS or MISS) is against the floor; whether the goal is met is said beside
    it. A miss is a finding, not an error.
    """

    id: str
    description: str
    comparison: str  # "<=", ">=" or "<": how the measured figure must stand to each
    floor: float
    goal: float
    unit: str


#: Issue 15's targets, in its table's order.
TARGETS: Final = (
    Target(
        "confined_pool_trivial_p50_ms",
        "trivial run, confined, from the pool, p50",
        "<=",
        1.0,
        0.3,
        "ms",
    ),
    Target(
        "confined_pool_await_p50_ms",
        "the same, for a program that awaits one host call (`await host.echo(1)`)",
        "<=",
        1.5,
        0.5,
        "ms",
    ),
    Target(
        "confined_zygote_trivial_p50_ms",
        "trivial run, confined, forked on demand (zygote), p50",
        "<=",
        3.0,
        1.5,
        "ms",
    ),
    Target(
        "process_pool_trivial_p50_ms",
        "trivial run, process, from the pool, p50",
        "<=",
        0.8,
        0.25,
        "ms",
    ),
    Target("in_process_trivial_p50_ms", "`in_process` trivial run, p50", "<=", 0.15, 0.05, "ms"),
    Target(
        "confined_runs_per_s",
        "fresh confined runs per second, 4 concurrent callers, 2 cores (the best spawn mode)",
        ">=",
        400.0,
        600.0,
        "runs/s",
    ),
    Target(
        "confined_cpu_per_run_ms",
        "CPU time per confined run, walls to teardown (reported; from the pool, under the "
        "sustained load)",
        "<=",
        2.5,
        1.5,
        "ms",
    ),
    Target(
        "idle_confined_child_uss_mb",
        "idle confined child, USS (the largest of the pool's children)",
        "<=",
        4.0,
        2.0,
        "MB",
    ),
    Target(
        "confined_1mib_value_vs_raw_pipe",
        "a run whose value is a 1 MiB string, minus a trivial run, against the raw pipe "
        "moving 1 MiB (confined, from the pool)",
        "<=",
        3.0,
        1.25,
        "x",
    ),
)
TARGET: Final = {t.id: t for t in TARGETS}
#: The latency cells issue 15 sets a target for, and the target.
LATENCY_TARGETS: Final = {
    "confined/pool": "confined_pool_trivial_p50_ms",
    "await@confined/pool": "confined_pool_await_p50_ms",
    "confined/zygote": "confined_zygote_trivial_p50_ms",
    "process/pool": "process_pool_trivial_p50_ms",
    "in_process": "in_process_trivial_p50_ms",
}


# -- bookkeeping --------------------------------------------------------------------------


class Recorder:
    """The progress display (one task per cell) and the list of failed samples."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.failures: list[dict[str, Any]] = []
        self._tasks: dict[str, tuple[TaskID, float]] = {}

    def add(self, key: str, label: str, total: float) -> None:
        self._tasks[key] = (self.progress.add_task(label, total=total, note=""), total)

    def advance(self, key: str, amount: float = 1) -> None:
        self.progress.advance(self._tasks[key][0], amount)

    def set(self, key: str, completed: float) -> None:
        self.progress.update(self._tasks[key][0], completed=completed)

    def display_thread(self) -> Any:
        """The progress display's refresh thread (its CPU is left out of the CPU per run),
        or None."""
        return getattr(self.progress.live, "_refresh_thread", None)

    def done(self, key: str, note: str) -> None:
        task, total = self._tasks[key]
        self.progress.update(task, completed=total, note=note)

    def fail(self, phase: str, cell: str, sample: int, error: str) -> None:
        """Count a failed sample (``sample`` < 0: a warm-up) and say so on the console."""
        self.failures.append({"phase": phase, "cell": cell, "sample": sample, "error": error})
        self.progress.console.print(
            f"FAILED {phase} {cell} sample {sample}: {error[:200]}", markup=False
        )


def describe(exc: BaseException) -> str:
    """An exception as a failure's reason: its type and message, capped."""
    return f"{type(exc).__name__}: {exc}"[:2000]


def _result_problem(result: sandbox.RunResult) -> str:
    return (
        f"ok={result.ok} kind={result.kind} cause={result.cause} calls={result.calls} "
        f"exit={result.exit_code} signal={result.signal} value={result.value!r:.80}: "
        f"{result.error[:1500]}"
    )


Expect = Callable[[sandbox.RunResult], str | None]


def expect_trivial(result: sandbox.RunResult) -> str | None:
    """The trivial program's check: ok, value 1, no calls."""
    if result.ok and result.value == 1 and result.calls == 0:
        return None
    return _result_problem(result)


def expect_await(result: sandbox.RunResult) -> str | None:
    """The awaiting program's check: ok, value 1, one call."""
    if result.ok and result.value == 1 and result.calls == 1:
        return None
    return _result_problem(result)


def expect_value(result: sandbox.RunResult) -> str | None:
    """The 1 MiB program's check: ok, the whole string, no calls."""
    v = result.value
    if result.ok and isinstance(v, str) and v == "x" * VALUE_CHARS and result.calls == 0:
        return None
    return _result_problem(result)


#: The latency phase's programs by workload: (program, check, tools).
WORKLOADS: Final[dict[str, tuple[str, Expect, tuple[sandbox.Tool, ...]]]] = {
    "trivial": (TRIVIAL, expect_trivial, ()),
    "await": (AWAIT_PROGRAM, expect_await, (ECHO,)),
    "value": (VALUE_PROGRAM, expect_value, ()),
}


def expect_timed(answers: int, calls: int) -> Expect:
    """A timed call program's check: ``[answers, positive µs]`` and exactly ``calls`` calls."""

    def check(result: sandbox.RunResult) -> str | None:
        v = result.value
        if (
            result.ok
            and isinstance(v, list)
            and len(v) == 2
            and v[0] == answers
            and isinstance(v[1], float)
            and v[1] > 0
            and result.calls == calls
        ):
            return None
        return _result_problem(result)

    return check


def expect_memory(result: sandbox.RunResult) -> str | None:
    """The memory program's check: ``[uss, pss, processes]`` with at least one process."""
    v = result.value
    if (
        result.ok
        and isinstance(v, list)
        and len(v) == 3
        and all(isinstance(x, int) for x in v)
        and v[2] >= 1
        and result.calls == 1
    ):
        return None
    return _result_problem(result)


async def timed_run(
    program: str,
    level: str,
    spawn: str | sandbox.Pool | None,
    expect: Expect,
    limit: float,
    tools: Sequence[sandbox.Tool] = (),
) -> tuple[float, sandbox.RunResult | None, str | None]:
    """One ``sandbox.run``, timed around the call: (seconds, result, problem or None)."""
    t0 = time.perf_counter()
    try:
        with anyio.fail_after(limit):
            if spawn is None:
                result = await sandbox.run(program, tools=tools, level=level)
            else:
                result = await sandbox.run(program, tools=tools, level=level, spawn=spawn)
    except TimeoutError:
        return time.perf_counter() - t0, None, f"no result within {limit} s"
    except Exception as exc:  # counted as a failed sample, with its reason
        return time.perf_counter() - t0, None, describe(exc)
    seconds = time.perf_counter() - t0
    return seconds, result, expect(result)


def _ms(seconds: float) -> float:
    """Seconds as milliseconds, to 0.1 µs (a raw sample in the JSON; the clock's own
    resolution is finer, the runs' noise far coarser)."""
    return round(seconds * 1e3, 4)


def _rotated(items: Sequence[str], shift: int) -> list[str]:
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@contextlib.asynccontextmanager
async def _pools(levels: Sequence[str], size: int, limit: float) -> Any:
    """A :class:`sandbox.Pool` of ``size`` per level, filled and ready; closed on exit."""
    use_cgroups = sandbox._engine._levels.cgroups_usable()
    async with contextlib.AsyncExitStack() as stack:
        pools: dict[str, sandbox.Pool] = {}
        for level in levels:
            pool = await stack.enter_async_context(sandbox.Pool(size=size))
            pool.refill(level == "confined", use_cgroups)
            pools[level] = pool
        for pool in pools.values():
            await anyio.to_thread.run_sync(pool.wait_full, limit)
        yield pools


# -- 1. latency ---------------------------------------------------------------------------


async def _bare_spawn(limit: float) -> float:
    """Seconds from ``Popen`` to reaped exit of ``python -I -S -c pass``.

    Raises:
        RuntimeError: it exited non-zero.
        TimeoutError: it overran ``limit`` seconds.
    """
    times = await anyio.to_thread.run_sync(spawn_batch, BARE_ARGV, 1, 0, limit)
    return times[0]


class RawPipe:
    """A second process that writes 1 MiB into a raw ``os.pipe`` each time it is asked:
    the floor under moving a run's 1 MiB value from its child to the host.

    The writer is a bare ``python -I -S``, started once (not timed) and kept for the
    latency phase. A sample: this process writes one byte on a request pipe, the writer
    writes 1 MiB (``os.write`` until all is written) on the data pipe, and this process
    reads it all (non-blocking ``os.read`` of up to what is left, ``select`` when the
    pipe is empty); timed from the request to the last byte read. Pipes of the default
    size; nothing pinned.
    """

    CODE: Final = (
        "import os\n"
        f"data = memoryview(b'x' * {VALUE_CHARS})\n"
        "while os.read(0, 1):\n"
        "    done = 0\n"
        f"    while done < {VALUE_CHARS}:\n"
        "        done += os.write(1, data[done:])\n"
    )

    def __init__(self) -> None:
        req_r, self._req_w = os.pipe()
        self._data_r, data_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", self.CODE],
                stdin=req_r,
                stdout=data_w,
                stderr=subprocess.DEVNULL,
                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            )
        except BaseException:
            for fd in (self._req_w, self._data_r):
                os.close(fd)
            raise
        finally:
            os.close(req_r)
            os.close(data_w)
        os.set_blocking(self._data_r, False)

    def sample(self, timeout: float) -> float:
        """Seconds to move 1 MiB from the writer to this process.

        Raises:
            RuntimeError: the writer is gone.
            TimeoutError: the 1 MiB did not arrive within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        left = VALUE_CHARS
        t0 = time.perf_counter()
        os.write(self._req_w, b"g")
        while left:
            try:
                chunk = os.read(self._data_r, left)
            except BlockingIOError:
                wait = deadline - time.monotonic()
                if wait <= 0 or not select.select([self._data_r], [], [], wait)[0]:
                    raise TimeoutError(f"1 MiB did not come through within {timeout} s") from None
                continue
            if not chunk:
                raise RuntimeError("the raw pipe's writer is gone")
            left -= len(chunk)
        return time.perf_counter() - t0

    def close(self) -> None:
        """End the writer (EOF on its requests) and reap it; close the pipes."""
        os.close(self._req_w)
        try:
            self._proc.wait(10.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        finally:
            os.close(self._data_r)


async def _latency_sample(
    rec: Recorder,
    phase: str,
    key: str,
    index: int,
    pools: dict[str, sandbox.Pool],
    raw: RawPipe,
    t: float,
) -> float | None:
    """One sample of latency cell ``key`` (a baseline, or a workload at a cell): seconds,
    or None if it failed."""
    if key in LATENCY_BASELINES:
        try:
            if key == BARE:
                return await _bare_spawn(t)
            return await anyio.to_thread.run_sync(raw.sample, t)
        except Exception as exc:  # counted as a failed sample, with its reason
            rec.fail(phase, key, index, describe(exc))
            return None
    workload, cell = split_workload(key)
    program, expect, tools = WORKLOADS[workload]
    level, spawn = split_key(cell)
    target: str | sandbox.Pool | None = spawn
    if spawn == "pool":
        target = pools[level]
        if not await anyio.to_thread.run_sync(pools[level].wait_full, t):
            rec.fail(phase, key, index, f"the pool was not full within {t} s")
            return None
    seconds, _, problem = await timed_run(program, level, target, expect, t, tools=tools)
    if problem is not None:
        rec.fail(phase, key, index, problem)
        return None
    return seconds


async def measure_latency(rec: Recorder, sizes: Sizes) -> dict[str, Any]:
    """Latency of every latency cell and of the two baselines, in interleaved rounds."""
    cells = latency_keys()
    rounds: dict[str, list[list[float]]] = {key: [] for key in cells}
    t = sizes.timeout
    raw = await anyio.to_thread.run_sync(RawPipe)
    try:
        async with _pools(CHILD_LEVELS, sizes.latency_pool_size, t) as pools:
            for w in range(sizes.latency_warmup):
                for key in cells:
                    await _latency_sample(rec, "latency warm-up", key, -1 - w, pools, raw, t)
                    rec.advance(f"latency/{key}")
            for r in range(sizes.latency_rounds):
                for key in _rotated(cells, r):
                    got = []
                    for i in range(sizes.latency_per_round):
                        index = r * sizes.latency_per_round + i
                        seconds = await _latency_sample(rec, "latency", key, index, pools, raw, t)
                        if seconds is not None:
                            got.append(seconds)
                        rec.advance(f"latency/{key}")
                    rounds[key].append(got)
    finally:
        await anyio.to_thread.run_sync(raw.close)
    out = analyse_latency(rounds)
    for key in cells:
        stats = out["cells"][key]["stats"]
        rec.done(f"latency/{key}", f"p50 {_n(stats and stats['p50'])} ms")
    return out


def analyse_latency(rounds: dict[str, list[list[float]]]) -> dict[str, Any]:
    """Pooled stats per cell, per-round p50s, ratios to the bare spawn; the 1 MiB values
    against the raw pipe (:func:`analyse_value`)."""
    cells: dict[str, Any] = {}
    for key, per_round in rounds.items():
        pooled = [x for r in per_round for x in r]
        workload, cell = split_workload(key)
        level, spawn = split_key(cell) if key not in LATENCY_BASELINES else ("", None)
        cells[key] = {
            "level": level or None,
            "spawn": spawn,
            "workload": None if key in LATENCY_BASELINES else workload,
            "samples_ms": [[_ms(x) for x in r] for r in per_round],
            "stats": pstats(pooled) if pooled else None,
            "per_round_p50_ms": [statistics.median(r) * 1e3 if r else None for r in per_round],
        }
    bare = cells[BARE]
    for key, cell in cells.items():
        if key not in LATENCY_BASELINES:
            cell["ratio_to_bare_spawn"] = _latency_ratios(cell, bare)
    out = {"baseline": BARE, "baseline_label": BARE_LABEL, "cells": cells}
    if RAW_PIPE in cells:
        out["raw_pipe_label"] = RAW_PIPE_LABEL
        out["value_1mib"] = analyse_value(cells)
    return out


def _p50(cell: dict[str, Any] | None) -> float | None:
    return ((cell or {}).get("stats") or {}).get("p50")


def analyse_value(cells: dict[str, Any]) -> dict[str, Any]:
    """Per cell of :data:`VALUE_CELLS`: (p50 of the 1 MiB value's run - p50 of the trivial
    run) / p50 of the raw pipe, over all samples and per round."""
    pipe = cells.get(RAW_PIPE)
    out: dict[str, Any] = {}
    for key in VALUE_CELLS:
        value, trivial = cells.get(f"value@{key}"), cells.get(key)
        value_p50, trivial_p50, pipe_p50 = _p50(value), _p50(trivial), _p50(pipe)
        extra = (
            value_p50 - trivial_p50 if value_p50 is not None and trivial_p50 is not None else None
        )
        per_round = [
            (v - t) / r
            for v, t, r in zip(
                (value or {}).get("per_round_p50_ms") or [],
                (trivial or {}).get("per_round_p50_ms") or [],
                (pipe or {}).get("per_round_p50_ms") or [],
                strict=False,
            )
            if v is not None and t is not None and r
        ]
        out[key] = {
            "value_p50_ms": value_p50,
            "trivial_p50_ms": trivial_p50,
            "extra_ms": extra,
            "raw_pipe_p50_ms": pipe_p50,
            "ratio": _div(extra, pipe_p50),
            "per_round": per_round,
            "per_round_summary": summarize(per_round) if per_round else None,
        }
    return {
        "chars": VALUE_CHARS,
        "program": VALUE_PROGRAM,
        "baseline": RAW_PIPE,
        "definition": "(p50 of the run whose value is the 1 MiB string - p50 of the trivial "
        "run at the same cell) / p50 of the raw pipe moving 1 MiB, all from the same rounds; "
        "per round: the same with that round's p50s",
        "cells": out,
    }


def _latency_ratios(cell: dict[str, Any], bare: dict[str, Any]) -> dict[str, Any]:
    stats, base = cell["stats"], bare["stats"]
    per_round = [
        a / b
        for a, b in zip(cell["per_round_p50_ms"], bare["per_round_p50_ms"], strict=True)
        if a is not None and b
    ]
    return {
        "p50": stats["p50"] / base["p50"] if stats and base else None,
        "p99": stats["p99"] / base["p99"] if stats and base else None,
        "p50_per_round": per_round,
        "p50_per_round_summary": summarize(per_round) if per_round else None,
        "definition": "cell p50 (p99) over all samples / bare spawn p50 (p99) over all "
        "samples; per round: that round's p50 / the same round's bare spawn p50",
    }


# -- 2. sustained throughput --------------------------------------------------------------


def _standing(attempts: int = 3) -> dict[tuple[int, float], dict[str, Any]]:
    """The zygote's keeper and every process under it now, by (pid, start time): each
    one's role and its CPU seconds, its own and its reaped children's. Listing the tree
    can fail while its processes come and go (a pool refilling, runs ending): it is tried
    again, ``attempts`` times in all, before nothing is returned."""
    zpid = sandbox._children._supervisor.zygote_pid()
    if zpid is None:
        return {}
    for _ in range(attempts):
        try:
            zygote = psutil.Process(zpid)
            keeper = zygote.parent()
            top = keeper if keeper is not None and keeper.pid != os.getpid() else zygote
            procs = [top, *top.children(recursive=True)]
            break
        except psutil.Error:
            continue
    else:
        return {}
    out: dict[tuple[int, float], dict[str, Any]] = {}
    for proc in procs:
        try:
            with proc.oneshot():
                times, created = proc.cpu_times(), proc.create_time()
        except psutil.Error:
            continue  # gone meanwhile: a run's process, not a standing one
        role = "zygote" if proc.pid == zpid else "keeper" if proc is top else "other"
        out[(proc.pid, created)] = {
            "role": role,
            "own": times.user + times.system,
            "reaped": times.children_user + times.children_system,
        }
    return out


def _thread_cpu(thread: Any) -> float | None:
    """CPU seconds of a live thread of this process, or None."""
    if thread is None or not thread.is_alive() or thread.ident is None:
        return None
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, AttributeError):
        return None


@dataclass
class CpuMark:
    """The CPU counters one end of a measured window reads."""

    host: float  # this process, every thread (getrusage RUSAGE_SELF)
    spawned: float  # this process's reaped children (getrusage RUSAGE_CHILDREN)
    display: float | None  # the progress display's thread, part of ``host``
    standing: dict[tuple[int, float], dict[str, Any]]

    @classmethod
    def now(cls, display: Any) -> CpuMark:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return cls(
            host=me.ru_utime + me.ru_stime,
            spawned=kids.ru_utime + kids.ru_stime,
            display=_thread_cpu(display),
            standing=_standing(),
        )


#: What the CPU per run counts and leaves out (written into the JSON beside the numbers).
CPU_COUNTED: Final = (
    "over the window from the pool full before the clock starts to the pool full again "
    "and every remains cleared after the last run: this process's own CPU (getrusage "
    "RUSAGE_SELF: the event loop, the pool's refills, the clearing of the remains; minus "
    "the progress display's thread, measured apart); its reaped children's (RUSAGE_CHILDREN: "
    "the bare spawns); the own CPU of the zygote, of its keeper and of any other process "
    "under the keeper present at both ends of the window (psutil cpu_times user + system); "
    "and the runs' processes: the CPU of every process the zygote and the keeper reaped in "
    "the window (their children_user + children_system), which is each run's processes "
    "from the fork to the exit, its walls included; that part's share inside the run's "
    "cgroups up to the kill (the sum of RunResult.cpu_time, cgroup cpuacct) is shown apart; "
    "divided by the runs that ended in the window (checked or failed). The children made "
    "in the window but still idle at its end stand for those the first runs took from the "
    "full pool"
)
CPU_NOT_COUNTED: Final = (
    "the kernel's work done outside these processes (kernel threads: deferred cgroup, "
    "namespace and memory teardown, interrupts), the progress display, and the study's own "
    "reads at the window's two ends; psutil's figures for the other processes come in "
    "clock ticks (10 ms), a few hundredths of a millisecond per run here"
)


def cpu_per_run(
    before: CpuMark, after: CpuMark, runs: int, cgroup_cpu: float, without_cpu: int
) -> dict[str, Any]:
    """The CPU of a window between two marks, per run, by part (see :data:`CPU_COUNTED`).

    ``cgroup_cpu``: the sum of the window's runs' ``RunResult.cpu_time`` (``without_cpu``
    runs had none).
    """
    own = {"zygote": 0.0, "keeper": 0.0, "other": 0.0}
    reaped = 0.0
    both = before.standing.keys() & after.standing.keys()
    for key in both:
        a, b = before.standing[key], after.standing[key]
        own[b["role"]] += b["own"] - a["own"]
        reaped += b["reaped"] - a["reaped"]
    display = (
        after.display - before.display
        if after.display is not None and before.display is not None
        else None
    )
    host = after.host - before.host - (display or 0.0)
    spawned = after.spawned - before.spawned
    source = "reaped"
    runs_cpu = reaped
    if cgroup_cpu > reaped:  # the runs' processes were not all reaped by a process seen here
        source, runs_cpu = "cgroups", cgroup_cpu
    parts = {
        "host": host,
        "spawned": spawned,
        "zygote": own["zygote"],
        "keeper": own["keeper"],
        "other_standing": own["other"],
        "runs_processes": runs_cpu,
    }
    total = sum(parts.values())

    def per_run(seconds: float) -> float | None:
        return seconds * 1e3 / runs if runs else None

    return {
        "runs": runs,
        "per_run_ms": {name: per_run(v) for name, v in parts.items()},
        "total_per_run_ms": per_run(total),
        "runs_cgroup_per_run_ms": per_run(cgroup_cpu),
        "runs_outside_cgroup_per_run_ms": per_run(runs_cpu - cgroup_cpu)
        if source == "reaped" and cgroup_cpu
        else None,
        "runs_source": source,
        "runs_without_cpu_time": without_cpu,
        "standing_processes": sorted(after.standing[k]["role"] for k in both),
        "display_ms_not_counted": None if display is None else display * 1e3,
        "total_ms": total * 1e3,
        "counted": CPU_COUNTED,
        "not_counted": CPU_NOT_COUNTED,
    }


async def _settle(pools: dict[str, sandbox.Pool], limit: float) -> bool:
    """Untimed, after a window's last run: every pool full again and every remains
    cleared (so that the window holds each run's whole cost). False if not within
    ``limit``."""
    ok = True
    for pool in pools.values():
        ok = await anyio.to_thread.run_sync(pool.wait_full, limit) and ok
    return await anyio.to_thread.run_sync(REMAINS.wait_empty, limit) and ok


async def sustained_cell(rec: Recorder, key: str, concurrency: int, sizes: Sizes) -> dict[str, Any]:
    """``concurrency`` tasks doing trivial runs (or bare spawns) back to back for a while;
    the CPU they cost, per run."""
    duration, t = sizes.sustained_seconds, sizes.timeout
    task = f"sustained/{key}"
    latencies: list[float] = []
    failed = 0
    cgroup_cpu, without_cpu = 0.0, 0
    level, spawn = split_key(key)
    async with contextlib.AsyncExitStack() as stack:
        pools: dict[str, sandbox.Pool] = {}
        if spawn == "pool":
            pools = await stack.enter_async_context(_pools([level], concurrency, t))
        target: str | sandbox.Pool | None = pools[level] if pools else spawn
        await _settle(pools, t)  # (the previous cell's remains, too)
        display = rec.display_thread()
        before = await anyio.to_thread.run_sync(CpuMark.now, display)
        t0 = time.perf_counter()
        deadline = t0 + duration
        attempts = 0

        async def worker() -> None:
            nonlocal failed, attempts, cgroup_cpu, without_cpu
            while time.perf_counter() < deadline:
                index = attempts  # the cell's attempts, numbered in the order they start
                attempts += 1
                if key == BARE:
                    try:
                        latencies.append(await _bare_spawn(t))
                    except Exception as exc:  # counted, with its reason
                        failed += 1
                        rec.fail("sustained", key, index, describe(exc))
                else:
                    seconds, result, problem = await timed_run(
                        TRIVIAL, level, target, expect_trivial, t
                    )
                    if level == "in_process":
                        pass  # (its CPU is this process's, counted as the host's)
                    elif result is not None and result.cpu_time is not None:
                        cgroup_cpu += result.cpu_time
                    else:
                        without_cpu += 1
                    if problem is None:
                        latencies.append(seconds)
                    else:
                        failed += 1
                        rec.fail("sustained", key, index, problem)
                rec.set(task, min(time.perf_counter() - t0, duration))

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        elapsed = time.perf_counter() - t0
        if not await _settle(pools, t):
            rec.fail("sustained", key, -1, f"the pool or the remains did not settle in {t} s")
        after = await anyio.to_thread.run_sync(CpuMark.now, display)
    runs_per_s = len(latencies) / elapsed
    cpu = cpu_per_run(before, after, len(latencies) + failed, cgroup_cpu, without_cpu)
    if key == BARE or level == "in_process":
        cpu["runs_cgroup_per_run_ms"] = None  # (no run's cgroup: nothing to show apart)
    rec.done(
        task,
        f"{runs_per_s:.0f}/s, {failed} failed, CPU {_n(cpu['total_per_run_ms'])} ms per run",
    )
    return {
        "level": None if key == BARE else level,
        "spawn": spawn,
        "concurrency": concurrency,
        "duration_s": duration,
        "elapsed_s": elapsed,
        "runs": len(latencies),
        "failed": failed,
        "runs_per_s": runs_per_s,
        "latency_under_load": pstats(latencies) if latencies else None,
        "cpu": cpu,
        "samples_ms": [_ms(x) for x in latencies],
    }


async def measure_sustained(rec: Recorder, sizes: Sizes, concurrency: int) -> dict[str, Any]:
    """Sustained runs per second of every cell, and bare spawns per second."""
    cells: dict[str, Any] = {}
    for key in (BARE, *cell_keys()):
        cells[key] = await sustained_cell(rec, key, concurrency, sizes)
    base = cells[BARE]["runs_per_s"]
    base_cpu = cells[BARE]["cpu"]["total_per_run_ms"]
    for key, cell in cells.items():
        if key != BARE:
            cell["ratio_to_bare_spawn"] = cell["runs_per_s"] / base if base else None
            cell["cpu"]["ratio_to_bare_spawn"] = _div(cell["cpu"]["total_per_run_ms"], base_cpu)
    return {
        "concurrency": concurrency,
        "duration_s": sizes.sustained_seconds,
        "baseline": BARE,
        "baseline_label": f"{concurrency} threads spawning {BARE_LABEL} back to back",
        "ratio_definition": "cell runs/s / bare spawns/s, same concurrency and duration",
        "cpu_ratio_definition": "the cell's CPU per run / the CPU per bare spawn (this "
        "process's and the spawned interpreter's), same concurrency and duration",
        "cells": cells,
    }


# -- 3 and 4. calls -----------------------------------------------------------------------


def raw_benches(sizes: Sizes) -> dict[str, Bench]:
    """``bench_wire``'s benches behind the raw baselines, sized like the sandbox programs."""
    benches = {b.key: b for b in make_benches(quick=True)}
    return {
        "seq": dataclasses.replace(benches["seq"], count=sizes.seq_calls, warmup=sizes.seq_warmup),
        "pipe_raw": dataclasses.replace(
            benches["pipe_raw"], count=sizes.pipe_batches, warmup=sizes.pipe_warmup
        ),
        "pipe_gather": dataclasses.replace(
            benches["pipe_gather"], count=sizes.pipe_batches, warmup=sizes.pipe_warmup
        ),
    }


async def measure_calls(rec: Recorder, sizes: Sizes) -> dict[str, Any]:
    """Per-call µs, sequential and pipelined, per cell; raw-pipe sessions beside them."""
    t = sizes.timeout
    programs: dict[str, tuple[str, Expect]] = {
        "seq": (
            seq_program(sizes.seq_calls, sizes.seq_warmup),
            expect_timed(sizes.seq_calls, sizes.seq_calls + sizes.seq_warmup),
        ),
        "pipe": (
            pipe_program(sizes.pipe_batches, sizes.pipe_warmup),
            expect_timed(
                sizes.pipe_batches * INFLIGHT, (sizes.pipe_batches + sizes.pipe_warmup) * INFLIGHT
            ),
        ),
    }
    benches = raw_benches(sizes)
    values: dict[str, dict[str, list[float]]] = {k: {"seq": [], "pipe": []} for k in cell_keys()}
    raw: dict[str, list[float]] = {name: [] for name in RAW_BENCHES}
    units = [*cell_keys(), "raw"]
    async with _pools(CHILD_LEVELS, 1, t) as pools:
        for r in range(sizes.call_rounds):
            for unit in _rotated(units, r):
                if unit == "raw":
                    for name in RAW_BENCHES:
                        bench = benches[name]
                        try:
                            report = await anyio.to_thread.run_sync(
                                run_session, bench, RAW, t, "none"
                            )
                        except Exception as exc:  # counted, with its reason
                            rec.fail("calls", f"raw/{name}", r, describe(exc))
                        else:
                            raw[name].append(value_of(bench, report))
                        rec.advance(f"calls/raw/{name}")
                    continue
                level, spawn = split_key(unit)
                for workload in ("seq", "pipe") if r % 2 == 0 else ("pipe", "seq"):
                    program, expect = programs[workload]
                    target: str | sandbox.Pool | None = spawn
                    if spawn == "pool":
                        target = pools[level]
                        await anyio.to_thread.run_sync(pools[level].wait_full, t)
                    _, result, problem = await timed_run(
                        program, level, target, expect, t, tools=(ECHO,)
                    )
                    if problem is not None or result is None:
                        rec.fail("calls", f"{unit}/{workload}", r, problem or "no result")
                    else:
                        values[unit][workload].append(float(result.value[1]))
                    rec.advance(f"calls/{unit}")
    out = analyse_calls(values, raw, sizes)
    for name in RAW_BENCHES:
        rec.done(f"calls/raw/{name}", f"{_n(out['baselines'][name]['us'])} us/call")
    for key in cell_keys():
        c = out["cells"][key]
        rec.done(f"calls/{key}", f"seq {_n(c['seq_us'])}, pipe {_n(c['pipe_us'])} us/call")
    return out


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _div(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def analyse_calls(
    values: dict[str, dict[str, list[float]]], raw: dict[str, list[float]], sizes: Sizes
) -> dict[str, Any]:
    """Medians over runs, and ratios to the raw baselines' medians."""
    baselines: dict[str, dict[str, Any]] = {
        name: {
            "samples_us": raw[name],
            "us": _median(raw[name]),
            "summary": summarize(raw[name]) if raw[name] else None,
        }
        for name in RAW_BENCHES
    }
    raw_seq = baselines["seq"]["us"]
    raw_pipe = baselines["pipe_raw"]["us"]
    raw_gather = baselines["pipe_gather"]["us"]
    cells = {}
    for key, v in values.items():
        seq, pipe = _median(v["seq"]), _median(v["pipe"])
        level, spawn = split_key(key)
        cells[key] = {
            "level": level,
            "spawn": spawn,
            "seq_samples_us": v["seq"],
            "pipe_samples_us": v["pipe"],
            "seq_us": seq,
            "pipe_us": pipe,
            "seq_summary": summarize(v["seq"]) if v["seq"] else None,
            "pipe_summary": summarize(v["pipe"]) if v["pipe"] else None,
            "seq_ratio_to_raw_seq": _div(seq, raw_seq),
            "pipe_ratio_to_raw_pipe_raw": _div(pipe, raw_pipe),
            "pipe_ratio_to_raw_pipe_gather": _div(pipe, raw_gather),
        }
    return {
        "seq_calls": sizes.seq_calls,
        "seq_warmup_calls": sizes.seq_warmup,
        "pipe_batches": sizes.pipe_batches,
        "pipe_warmup_batches": sizes.pipe_warmup,
        "inflight": INFLIGHT,
        "runs_per_cell": sizes.call_rounds,
        "tool": "sandbox.Tool(echo, inline=True)",
        "placement": "not pinned (the scheduler places host and child)",
        "baselines": baselines,
        "ratio_definition": "median us/call of the cell's runs / median us/call of the raw "
        "sessions (time ratio: lower is better)",
        "cells": cells,
    }


# -- 5. memory ----------------------------------------------------------------------------


def tree_memory(pid: int) -> dict[str, int]:
    """USS and PSS, in bytes, summed over ``pid`` and all its descendants.

    Raises:
        psutil.Error: the process is gone or cannot be read.
    """
    root = psutil.Process(pid)
    procs = [root, *root.children(recursive=True)]
    uss = pss = 0
    for proc in procs:
        info = proc.memory_full_info()
        uss += info.uss
        pss += info.pss
    return {"pid": pid, "processes": len(procs), "uss": uss, "pss": pss}


def process_memory(pid: int) -> dict[str, int]:
    """USS, PSS and RSS of one process, in bytes.

    Raises:
        psutil.Error: the process is gone or cannot be read.
    """
    info = psutil.Process(pid).memory_full_info()
    return {"pid": pid, "processes": 1, "uss": info.uss, "pss": info.pss, "rss": info.rss}


def bare_interpreter_memory(timeout: float) -> dict[str, int]:
    """USS and PSS of a bare ``python -I -S`` at rest (waiting on its stdin).

    Raises:
        RuntimeError: it did not say it was ready.
        TimeoutError: not ready within ``timeout``.
    """
    code = "import sys; sys.stdout.write('r'); sys.stdout.flush(); sys.stdin.read()"
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        if not select.select([proc.stdout], [], [], timeout)[0]:
            raise TimeoutError(f"a bare interpreter was not ready within {timeout} s")
        if proc.stdout.read(1) != b"r":
            raise RuntimeError("a bare interpreter did not start")
        return process_memory(proc.pid)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _zygote_descendants() -> set[int]:
    pid = sandbox._children._supervisor.zygote_pid()
    if pid is None:
        return set()
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def measure_tool(before: set[int]) -> sandbox.Tool:
    """A tool that sums the USS and PSS of the zygote's descendants not in ``before``.

    Called by a run's program while no other run and no pool is alive, those are exactly
    the run's own processes (its runner and anything under it).
    """

    def measure() -> list[int]:
        """USS, PSS and count of the calling run's processes."""
        uss = pss = count = 0
        for pid in sorted(_zygote_descendants() - before):
            try:
                info = psutil.Process(pid).memory_full_info()
            except psutil.NoSuchProcess:
                continue
            uss += info.uss
            pss += info.pss
            count += 1
        return [uss, pss, count]

    return sandbox.Tool(measure)


async def _idle_memory(
    rec: Recorder, pool: sandbox.Pool, cell: str, into: list[dict[str, Any]], limit: float
) -> None:
    """The memory of each of ``pool``'s idle children, once it is full, into ``into``."""
    if not await anyio.to_thread.run_sync(pool.wait_full, limit):
        rec.fail("memory", cell, -1, f"the pool was not full within {limit} s")
    for i, child in enumerate(pool.idle()):
        try:
            if child.process.pid is None:
                raise RuntimeError("an idle child without a pid")
            into.append(tree_memory(child.process.pid))
        except Exception as exc:  # counted, with its reason
            rec.fail("memory", cell, i, describe(exc))
        rec.advance(f"memory/{cell}")


def _mb_stats(items: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not items:
        return None
    uss = [x["uss"] / MB for x in items]
    pss = [x["pss"] / MB for x in items]
    return {
        "n": len(items),
        "uss_mb": {"mean": statistics.fmean(uss), "max": max(uss), "min": min(uss)},
        "pss_mb": {"mean": statistics.fmean(pss), "max": max(pss), "min": min(pss)},
        "processes": sorted({x["processes"] for x in items}),
    }


async def measure_memory(rec: Recorder, sizes: Sizes) -> dict[str, Any]:
    """Idle warm children per child level, the zygote, a bare interpreter, running children."""
    t = sizes.timeout
    bare: list[dict[str, Any]] = []
    for i in range(sizes.memory_runs):
        try:
            bare.append(await anyio.to_thread.run_sync(bare_interpreter_memory, t))
        except Exception as exc:  # counted, with its reason
            rec.fail("memory", "bare_interpreter", i, describe(exc))
        rec.advance("memory/bare_interpreter")

    idle: dict[str, list[dict[str, Any]]] = {level: [] for level in CHILD_LEVELS}
    idle_awaiting: dict[str, list[dict[str, Any]]] = {level: [] for level in CHILD_LEVELS}
    zygote: dict[str, Any] | None = None
    keeper: dict[str, Any] | None = None
    async with _pools(CHILD_LEVELS, sizes.memory_pool_size, t) as pools:
        for level, pool in pools.items():
            await _idle_memory(rec, pool, f"idle/{level}", idle[level], t)
        # A pool that has seen a program that calls a tool and awaits warms the children
        # it makes next for such programs too: as many such runs as the pool holds, and
        # every idle child is one of those.
        for level, pool in pools.items():
            for i in range(pool.size):
                await anyio.to_thread.run_sync(pool.wait_full, t)  # (an idle child each)
                _, _, problem = await timed_run(
                    AWAIT_PROGRAM, level, pool, expect_await, t, tools=(ECHO,)
                )
                if problem is not None:
                    rec.fail("memory", f"idle_awaiting/{level}", i, problem)
            await _idle_memory(rec, pool, f"idle_awaiting/{level}", idle_awaiting[level], t)
        try:
            zpid = sandbox._children._supervisor.zygote_pid()
            if zpid is None:
                raise RuntimeError("no zygote is running")
            zygote = process_memory(zpid)
            zygote["children"] = len(psutil.Process(zpid).children())
            parent = psutil.Process(zpid).parent()
            if parent is not None:
                keeper = process_memory(parent.pid)
        except Exception as exc:  # counted, with its reason
            rec.fail("memory", "zygote", 0, describe(exc))
        rec.advance("memory/zygote")

    in_run: dict[str, list[dict[str, Any]]] = {}
    for level in CHILD_LEVELS:
        for spawn in ("cold", "zygote"):
            key = f"{level}/{spawn}"
            in_run[key] = []
            for i in range(sizes.memory_runs):
                tool = measure_tool(_zygote_descendants())
                _, result, problem = await timed_run(
                    MEMORY_PROGRAM, level, spawn, expect_memory, t, tools=(tool,)
                )
                if problem is not None or result is None:
                    rec.fail("memory", f"in_run/{key}", i, problem or "no result")
                else:
                    uss, pss, count = result.value
                    in_run[key].append({"uss": uss, "pss": pss, "processes": count})
                rec.advance(f"memory/in_run/{key}")

    out: dict[str, Any] = {
        "unit": "MB (10**6 bytes)",
        "pool_size": sizes.memory_pool_size,
        "bare_interpreter": {"samples": bare, **(_mb_stats(bare) or {})},
        "idle": {
            level: {"children": idle[level], "summary": _mb_stats(idle[level])} for level in idle
        },
        "idle_awaiting": {
            level: {"children": v, "summary": _mb_stats(v)} for level, v in idle_awaiting.items()
        },
        "zygote": zygote,
        "keeper": keeper,
        "in_run": {key: {"samples": v, "summary": _mb_stats(v)} for key, v in in_run.items()},
    }
    bare_uss = out["bare_interpreter"].get("uss_mb", {}).get("mean")
    for level in CHILD_LEVELS:
        s = out["idle"][level]["summary"]
        out["idle"][level]["uss_max_over_bare_interpreter"] = _div(
            s and s["uss_mb"]["max"], bare_uss
        )
        rec.done(f"memory/idle/{level}", f"USS max {_n(s and s['uss_mb']['max'])} MB")
        s = out["idle_awaiting"][level]["summary"]
        rec.done(f"memory/idle_awaiting/{level}", f"USS max {_n(s and s['uss_mb']['max'])} MB")
    rec.done("memory/bare_interpreter", f"USS {_n(bare_uss)} MB")
    rec.done("memory/zygote", f"USS {_n(zygote['uss'] / MB if zygote else None)} MB")
    for key, v in out["in_run"].items():
        s = v["summary"]
        rec.done(f"memory/in_run/{key}", f"USS {_n(s and s['uss_mb']['mean'])} MB")
    return out


# -- targets ------------------------------------------------------------------------------


def meets(measured: float | None, threshold: float, comparison: str) -> bool:
    """Whether ``measured`` stands to ``threshold`` as ``comparison`` says (never, when
    it was not measured)."""
    if measured is None or math.isnan(measured):
        return False  # not measured: the target is not shown to be met
    return {
        "<=": measured <= threshold,
        ">=": measured >= threshold,
        "<": measured < threshold,
    }[comparison]


def _target(spec: Target, measured: float | None, baseline: str, detail: str) -> dict[str, Any]:
    """One row of the targets table: the verdict against the floor, the goal met or not."""
    return {
        "id": spec.id,
        "description": spec.description,
        "measured": measured,
        "comparison": spec.comparison,
        "floor": spec.floor,
        "goal": spec.goal,
        "unit": spec.unit,
        "verdict": "PASS" if meets(measured, spec.floor, spec.comparison) else "MISS",
        "goal_met": meets(measured, spec.goal, spec.comparison),
        "baseline": baseline,
        "detail": detail,
    }


def evaluate_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target against this run's numbers: PASS or MISS against its floor (MISS when
    not measured), and whether its goal is met.

    A document of the peers section alone (``--peers-only``) has the peers' targets and
    the failed runs only; one without a peers section has none of the peers' targets.
    """
    targets = [] if _peers_only(doc) else _overhead_targets(doc)
    if doc.get("peers"):
        targets += peer_targets(doc["peers"])
    targets.append(_failed_runs_target(doc))
    return targets


def _peers_only(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` holds the peers section and none of the study's own."""
    return bool(doc.get("peers")) and not any(doc.get(k) for k in SECTIONS)


def _spread(summary: dict[str, float] | None) -> str:
    """A per-round summary as ``median [min-max]``, or nothing."""
    if not summary:
        return ""
    return f"{summary['median']:.3g} [{summary['min']:.3g}-{summary['max']:.3g}]"


def _latency_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    lat = (doc.get("latency") or {}).get("cells", {})
    bare = _p50(lat.get(BARE))

    def row(tid: str, key: str, extra: str = "") -> dict[str, Any]:
        cell = lat.get(key) or {}
        stats = cell.get("stats") or {}
        p50 = stats.get("p50")
        per_round = _spread((cell.get("ratio_to_bare_spawn") or {}).get("p50_per_round_summary"))
        baseline = f"bare spawn p50 {_n(bare)} ms: {_ratio(_div(p50, bare))}"
        if per_round:
            baseline += f" (per round {per_round})"
        detail = f"{key}: p90 {_n(stats.get('p90'))} ms, p99 {_n(stats.get('p99'))} ms, " + (
            f"{stats.get('n', 0)} samples{extra}"
        )
        return _target(TARGET[tid], p50, baseline, detail)

    pool = _p50(lat.get("confined/pool"))
    waits = _p50(lat.get("await@confined/pool"))
    added = None if waits is None or pool is None else waits - pool
    extra = {
        "await@confined/pool": f"; the trivial run at the same cell {_n(pool)} ms, so the "
        f"await adds {_n(added)} ms"
    }
    return [row(tid, key, extra.get(key, "")) for key, tid in LATENCY_TARGETS.items()]


def _sustained_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    sus = doc.get("sustained") or {}
    cells = sus.get("cells", {})
    bare = cells.get(BARE) or {}
    best_key, best = None, None
    for spawn in SPAWN_MODES:
        cell = cells.get(f"confined/{spawn}")
        if cell and (best is None or cell["runs_per_s"] > best):
            best_key, best = f"confined/{spawn}", cell["runs_per_s"]
    failed = sum(c["failed"] for k, c in cells.items() if k.startswith("confined/"))
    each = ", ".join(
        f"{k} {_n(cells[k]['runs_per_s'])}"
        for k in (f"confined/{sp}" for sp in SPAWN_MODES)
        if k in cells
    )
    concurrency = sus.get("concurrency")
    cpus = (doc.get("environment") or {}).get("cpu_count")
    where = f"{concurrency} concurrent callers on {cpus or '?'} CPUs"
    if (concurrency, cpus) != (4, 2):
        where += " (the target's figure is for 4 on 2)"
    bare_rate = bare.get("runs_per_s")
    throughput = _target(
        TARGET["confined_runs_per_s"],
        best,
        f"bare spawns/s {_n(bare_rate)} at the same concurrency: {_ratio(_div(best, bare_rate))}",
        f"best: {best_key}, {where}; runs/s {each or 'n/a'}; failed confined runs: {failed}",
    )

    cpu = (cells.get("confined/pool") or {}).get("cpu") or {}
    bare_cpu = (bare.get("cpu") or {}).get("total_per_run_ms")
    total = cpu.get("total_per_run_ms")
    part = cpu.get("per_run_ms") or {}
    inside = cpu.get("runs_cgroup_per_run_ms")
    standing = cpu.get("standing_processes")
    if part and standing is not None and "zygote" not in standing:
        # Without the zygote at both ends, its CPU and the runs' processes' outside their
        # cgroups are missing: what was counted is less than a run costs.
        detail = (
            "not measured whole: the zygote was not found at both ends of the window, so "
            "its CPU and the runs' processes' outside their cgroups are missing; counted: "
            f"{_n(total)} ms per run over {cpu.get('runs')} runs"
        )
        total = None
    elif part:
        detail = (
            f"per run, ms: this process {_n(part.get('host'))} + the runs' processes "
            f"{_n(part.get('runs_processes'))} (inside their cgroups up to the kill: "
            f"{_n(inside)}) + zygote {_n(part.get('zygote'))} + keeper "
            f"{_n(part.get('keeper'))} + other standing {_n(part.get('other_standing'))} + "
            f"this process's reaped children {_n(part.get('spawned'))}; over {cpu.get('runs')} "
            f"runs of the sustained confined/pool cell (what is and is not counted: "
            f"Sustained throughput)"
        )
    else:
        detail = "not measured (a result of an earlier study has no CPU per run)"
    cpu_row = _target(
        TARGET["confined_cpu_per_run_ms"],
        total,
        f"a bare spawn's CPU (this process and the interpreter) {_n(bare_cpu)} ms: "
        f"{_ratio(_div(total, bare_cpu))}",
        detail,
    )
    return [throughput, cpu_row]


def _memory_target(doc: dict[str, Any]) -> dict[str, Any]:
    """The largest idle confined child, of a fresh pool's and of one warmed for programs
    that call tools and await (a study before the pools warmed for them has the first
    only)."""
    mem = doc.get("memory") or {}
    s = (mem.get("idle") or {}).get("confined", {}).get("summary")
    warmed = (mem.get("idle_awaiting") or {}).get("confined", {}).get("summary")
    maxima = [x["uss_mb"]["max"] for x in (s, warmed) if x]
    measured = max(maxima) if s else None
    bare = ((mem.get("bare_interpreter") or {}).get("uss_mb") or {}).get("mean")
    detail = f"mean {_n(s and s['uss_mb']['mean'])} MB over {s['n'] if s else 0} children"
    if "idle_awaiting" in mem:
        detail = (
            f"a fresh pool's children: max {_n(s and s['uss_mb']['max'])} MB, {detail}; "
            f"warmed for calls and awaits: max {_n(warmed and warmed['uss_mb']['max'])} "
            f"MB, mean {_n(warmed and warmed['uss_mb']['mean'])} MB over "
            f"{warmed['n'] if warmed else 0} children"
        )
    return _target(
        TARGET["idle_confined_child_uss_mb"],
        measured,
        f"bare `python -I -S` at rest {_n(bare)} MB: {_ratio(_div(measured, bare))}",
        detail,
    )


def _value_target(doc: dict[str, Any]) -> dict[str, Any]:
    value = (doc.get("latency") or {}).get("value_1mib") or {}
    cells = value.get("cells") or {}
    mine = cells.get("confined/pool") or {}
    per_round = _spread(mine.get("per_round_summary"))
    others = ", ".join(
        f"{k} {_ratio(c.get('ratio'))}" for k, c in cells.items() if k != "confined/pool"
    )
    detail = (
        f"confined/pool: value run p50 {_n(mine.get('value_p50_ms'))} ms - trivial run "
        f"{_n(mine.get('trivial_p50_ms'))} ms = {_n(mine.get('extra_ms'))} ms"
        + (f"; per round {per_round}" if per_round else "")
        + (f"; {others}" if others else "")
    )
    return _target(
        TARGET["confined_1mib_value_vs_raw_pipe"],
        mine.get("ratio"),
        f"raw pipe moving 1 MiB, p50 {_n(mine.get('raw_pipe_p50_ms'))} ms",
        detail,
    )


def _overhead_targets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 15's targets, in its table's order (:data:`TARGETS`)."""
    rows = [
        *_latency_targets(doc),
        *_sustained_targets(doc),
        _memory_target(doc),
        _value_target(doc),
    ]
    assert [r["id"] for r in rows] == [t.id for t in TARGETS]
    return rows


FAILED_RUNS: Final = Target(
    "failed_runs", "failed runs and samples in the whole study (must be 0)", "<=", 0.0, 0.0, "runs"
)


def _failed_runs_target(doc: dict[str, Any]) -> dict[str, Any]:
    total = len(doc["failures"])
    return _target(
        FAILED_RUNS,
        float(total),
        "none",
        "see Failed samples" if total else "every run was checked: ok, value and call count",
    )


#: The peers' targets (issue 15): (id, our cell, the peer's cell, what is compared). Each
#: is met when our trivial run's p50 is below the peer's, in the same run: ratio < 1 (the
#: issue gives a goal only, "faster": it is the floor too).
PEER_TARGETS: Final = (
    (
        "peers_confined_pool_vs_monty_reused",
        "confined/pool",
        "monty/reused",
        "trivial run, our confined pool p50 over Monty's reused worker p50 (goal: faster)",
    ),
    (
        "peers_confined_zygote_vs_monty_new_worker",
        "confined/zygote",
        "monty/new_worker",
        "trivial run, our confined on-demand run (zygote) p50 over Monty's new worker per "
        "run p50 (goal: faster)",
    ),
)
PEER_TARGET_RATIO: Final = 1.0


def peer_targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Our trivial run against Monty's, per :data:`PEER_TARGETS`: PASS if ours is faster."""
    cells = section.get("cells", {})
    out = []
    for tid, ours, peer, description in PEER_TARGETS:
        mine = cells.get(ours, {}).get("workloads", {}).get("trivial") or {}
        theirs = cells.get(peer, {}).get("workloads", {}).get("trivial") or {}
        mine_p50 = (mine.get("stats") or {}).get("p50")
        theirs_p50 = (theirs.get("stats") or {}).get("p50")
        status = cells.get(peer, {}).get("status", "not measured")
        if status != "ok":
            detail = f"{peer}: {status}"
        else:
            detail = f"{ours} p50 {_n(mine_p50)} ms / {peer} p50 {_n(theirs_p50)} ms"
            per_round = [
                a / b
                for a, b in zip(
                    mine.get("per_round_p50_ms") or [],
                    theirs.get("per_round_p50_ms") or [],
                    strict=False,
                )
                if a is not None and b
            ]
            if per_round:
                detail += f"; per round {_spread(summarize(per_round))}"
        spec = Target(tid, description, "<", PEER_TARGET_RATIO, PEER_TARGET_RATIO, "x")
        baseline = f"{peer} p50 {_n(theirs_p50)} ms" if status == "ok" else f"{peer}: n/a"
        out.append(_target(spec, _div(mine_p50, theirs_p50), baseline, detail))
    return out


# -- the study ----------------------------------------------------------------------------


def plan(rec: Recorder, sizes: Sizes) -> None:
    """One progress task per measurement cell, all shown from the start."""
    n_lat = sizes.latency_warmup + sizes.latency_rounds * sizes.latency_per_round
    for key in latency_keys():
        rec.add(f"latency/{key}", f"latency   {key}", n_lat)
    for key in (BARE, *cell_keys()):
        rec.add(f"sustained/{key}", f"sustained {key}", sizes.sustained_seconds)
    for name in RAW_BENCHES:
        rec.add(f"calls/raw/{name}", f"calls     raw/{name}", sizes.call_rounds)
    for key in cell_keys():
        rec.add(f"calls/{key}", f"calls     {key}", 2 * sizes.call_rounds)
    rec.add("memory/bare_interpreter", "memory    bare interpreter", sizes.memory_runs)
    for level in CHILD_LEVELS:
        rec.add(f"memory/idle/{level}", f"memory    idle {level}", sizes.memory_pool_size)
        rec.add(
            f"memory/idle_awaiting/{level}",
            f"memory    idle {level}, warmed for calls and awaits",
            sizes.memory_pool_size,
        )
    rec.add("memory/zygote", "memory    zygote", 1)
    for level in CHILD_LEVELS:
        for spawn in ("cold", "zygote"):
            key = f"{level}/{spawn}"
            rec.add(f"memory/in_run/{key}", f"memory    running {key}", sizes.memory_runs)


async def _measure(
    rec: Recorder, sizes: Sizes, concurrency: int, mode: str, peers: str
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if peers != "only":
        out["latency"] = await measure_latency(rec, sizes)
        out["sustained"] = await measure_sustained(rec, sizes, concurrency)
        out["calls"] = await measure_calls(rec, sizes)
        out["memory"] = await measure_memory(rec, sizes)
        from . import profiles

        out["profiles"] = await profiles.measure(rec, profiles.PRESETS[mode], sizes.timeout)
    if peers != "no":
        from . import peers as peers_section

        out["peers"] = await peers_section.measure_peers(
            rec, peers_section.PRESETS[mode], sizes.timeout
        )
    return out


def run_study(
    mode: str,
    sizes: Sizes,
    concurrency: int,
    backend: str,
    argv: list[str],
    peers: str = "no",
) -> dict[str, Any]:
    """Measure everything and return the JSON document (targets included).

    ``peers``: one of :data:`PEER_MODES`. The zygote is shut down at the end whatever
    happens.
    """
    extra: tuple[str, ...] = ("rich", "matplotlib")
    if peers != "no":
        extra += ("pydantic-monty", "smolagents", "RestrictedPython")
    meta = environment(argv, extra_packages=extra)
    meta["git"] = git_head(ROOT)
    meta["cgroups_usable"] = sandbox._engine._levels.cgroups_usable()
    meta["confinement_gaps"] = {str(k): str(v) for k, v in sandbox.confinement_gaps().items()}
    columns = (
        TextColumn("{task.description:<30}"),
        BarColumn(bar_width=10),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
    )
    t0 = time.perf_counter()
    with Progress(*columns) as progress:
        rec = Recorder(progress)
        if peers != "only":
            from . import profiles

            plan(rec, sizes)
            profiles.plan(rec, profiles.PRESETS[mode])
        if peers != "no":
            from . import peers as peers_section

            peers_section.plan(rec, peers_section.PRESETS[mode])
        try:
            measured = anyio.run(_measure, rec, sizes, concurrency, mode, peers, backend=backend)
        finally:
            sandbox._children._supervisor.shutdown()
    wall = time.perf_counter() - t0
    meta["loadavg_at_end"] = list(os.getloadavg())
    meta["cpu_stolen_share"] = stolen_share(meta.get("cpu_ticks_at_start"), cpu_ticks())
    meta["wall_seconds"] = round(wall, 2)
    meta["sources_changed_during_run"] = changed_sources(
        meta["git"].get("measured_sources", {}), ROOT
    )
    doc: dict[str, Any] = {
        "study": "isolation-overhead",
        # 2: issue 15's targets (floor and goal), the awaiting program, the 1 MiB value
        # against the raw pipe, the CPU per run. A schema-1 document renders as it did.
        "schema": 2,
        "mode": mode,
        "environment": meta,
        "parameters": {
            **dataclasses.asdict(sizes),
            "concurrency": concurrency,
            "backend": backend,
            "peers": peers,
            "levels": list(LEVELS),
            "spawn_modes": list(SPAWN_MODES),
            "programs": {
                "trivial": TRIVIAL,
                "await": AWAIT_PROGRAM,
                "value": VALUE_PROGRAM,
                "raw_pipe": RawPipe.CODE,
                "seq": seq_program(sizes.seq_calls, sizes.seq_warmup),
                "pipe": pipe_program(sizes.pipe_batches, sizes.pipe_warmup),
                "memory": MEMORY_PROGRAM,
            },
            "baseline_spawn_argv": list(BARE_ARGV),
            "units": "latency ms; calls us per call; memory MB (10**6 bytes); "
            "percentiles by linear interpolation",
        },
        **measured,
        "failures": rec.failures,
        # spawn_batch re-runs a bare spawn SIGKILLed from outside (a test suite sweeping
        # the machine) and lists it; those re-runs are shown here, not hidden.
        "externally_killed_spawns": list(_KILLED),
        "processes_left_behind": children_left(),
    }
    doc["targets"] = evaluate_targets(doc)
    return doc


# -- output: JSON, plots, RESULTS.md ------------------------------------------------------


def _n(x: float | None, digits: int | None = None) -> str:
    """A number for a table: 3 significant digits (or ``digits`` decimals), or n/a."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if digits is not None:
        return f"{x:.{digits}f}"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}x"


def _cell_label(key: str) -> str:
    if key == BARE:
        return "bare spawn (baseline)"
    if key == RAW_PIPE:
        return "raw pipe, 1 MiB (baseline)"
    workload, cell = split_workload(key)
    level, spawn = split_key(cell)
    label = level if spawn is None else f"{level} / {spawn}"
    return label + {"trivial": "", "await": ", awaits a call", "value": ", 1 MiB value"}[workload]


def _setup_matplotlib() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure


def _floor_and_goal(ax: Any, x: float, half: float, target: Target, first: bool) -> None:
    """A target's floor (red, dashed) and goal (green, dotted) over one bar group."""
    ax.hlines(
        target.floor,
        x - half,
        x + half,
        colors="red",
        linestyles="--",
        lw=1.2,
        label="floor (issue 15)" if first else None,
    )
    ax.hlines(
        target.goal,
        x - half,
        x + half,
        colors="green",
        linestyles=":",
        lw=1.5,
        label="goal (issue 15)" if first else None,
    )


def _tick(key: str) -> str:
    return _cell_label(key).replace(" / ", "\n").replace(", ", "\n")


def plot_latency(doc: dict[str, Any], path: Path) -> None:
    """p50/p90/p99 per cell (log scale); the bare spawn's p50 and the raw pipe's as lines;
    each target's floor and goal over its cell."""
    figure = _setup_matplotlib()
    lat = doc["latency"]["cells"]
    cells = {k: v for k, v in lat.items() if k not in LATENCY_BASELINES and v["stats"]}
    fig = figure(figsize=(13 if len(cells) > 7 else 11, 4.5))
    ax = fig.add_subplot()
    width = 0.27
    for j, stat in enumerate(("p50", "p90", "p99")):
        xs = [i + (j - 1) * width for i in range(len(cells))]
        ax.bar(xs, [c["stats"][stat] for c in cells.values()], width, label=stat)
    bare = lat.get(BARE, {}).get("stats")
    if bare:
        ax.axhline(
            bare["p50"], color="black", lw=1.2, label=f"bare spawn p50 ({bare['p50']:.1f} ms)"
        )
    pipe = (lat.get(RAW_PIPE) or {}).get("stats")
    if pipe:
        ax.axhline(
            pipe["p50"], color="grey", lw=1, label=f"raw pipe, 1 MiB, p50 ({pipe['p50']:.2g} ms)"
        )
    first = True
    for i, key in enumerate(cells):
        if key in LATENCY_TARGETS:
            _floor_and_goal(ax, i, 1.5 * width, TARGET[LATENCY_TARGETS[key]], first)
            first = False
    ax.set_yscale("log")
    ax.set_xticks(range(len(cells)), [_tick(k) for k in cells], fontsize=8)
    ax.set_ylabel("ms per run (log)")
    ax.set_title("Runs, end to end (pool: measured with the pool full)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_sustained(doc: dict[str, Any], path: Path) -> None:
    """Runs per second per cell, with the bare spawn rate and the confined floor and goal."""
    figure = _setup_matplotlib()
    cells = {k: v for k, v in doc["sustained"]["cells"].items() if k != BARE}
    fig = figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    ax.bar(range(len(cells)), [c["runs_per_s"] for c in cells.values()], color="tab:green")
    bare = doc["sustained"]["cells"].get(BARE)
    if bare:
        ax.axhline(
            bare["runs_per_s"],
            color="black",
            lw=1.2,
            label=f"bare spawns/s ({bare['runs_per_s']:.0f})",
        )
    target = TARGET["confined_runs_per_s"]
    ax.axhline(
        target.floor, color="red", ls="--", lw=1, label=f"floor {target.floor:g}/s (confined)"
    )
    ax.axhline(
        target.goal, color="green", ls=":", lw=1.5, label=f"goal {target.goal:g}/s (confined)"
    )
    ax.set_yscale("log")
    ax.set_xticks(range(len(cells)), [_tick(k) for k in cells])
    ax.set_ylabel("runs per second (log)")
    ax.set_title(f"Sustained trivial runs, {doc['sustained']['concurrency']} concurrent")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_calls(doc: dict[str, Any], path: Path) -> None:
    """µs per call, sequential and pipelined, per cell, with the raw-pipe baselines."""
    figure = _setup_matplotlib()
    cells = doc["calls"]["cells"]
    fig = figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    width = 0.4
    keys = list(cells)
    ax.bar(
        [i - width / 2 for i in range(len(keys))],
        [cells[k]["seq_us"] or 0 for k in keys],
        width,
        label="sequential",
    )
    ax.bar(
        [i + width / 2 for i in range(len(keys))],
        [cells[k]["pipe_us"] or 0 for k in keys],
        width,
        label=f"{INFLIGHT} in flight",
    )
    base = doc["calls"]["baselines"]
    for name, style in (("seq", "-"), ("pipe_raw", ":"), ("pipe_gather", "--")):
        us = base.get(name, {}).get("us")
        if us:
            ax.axhline(us, color="black", ls=style, lw=1, label=f"raw {name} ({us:.1f} us)")
    ax.set_xticks(range(len(keys)), [_cell_label(k).replace(" / ", "\n") for k in keys])
    ax.set_ylabel("us per call")
    ax.set_title("Host call round trip, timed inside the program")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_memory(doc: dict[str, Any], path: Path) -> None:
    """USS and PSS per idle warm child, running child, zygote, bare interpreter; the idle
    child's floor and goal as lines."""
    figure = _setup_matplotlib()
    mem = doc["memory"]
    bars: list[tuple[str, float, float, float]] = []  # label, uss mean, uss max, pss mean
    idle = [(f"idle {level}\n(pool)", e) for level, e in mem["idle"].items()]
    idle += [(f"idle {level}\n(for await)", e) for level, e in mem.get("idle_awaiting", {}).items()]
    for label, entry in idle:
        s = entry.get("summary")
        if s:
            bars.append((label, s["uss_mb"]["mean"], s["uss_mb"]["max"], s["pss_mb"]["mean"]))
    for key, entry in mem["in_run"].items():
        s = entry.get("summary")
        if s:
            bars.append(
                (f"running\n{key}", s["uss_mb"]["mean"], s["uss_mb"]["max"], s["pss_mb"]["mean"])
            )
    if mem.get("zygote"):
        z = mem["zygote"]
        bars.append(("zygote", z["uss"] / MB, z["uss"] / MB, z["pss"] / MB))
    bare = mem.get("bare_interpreter", {})
    if bare.get("uss_mb"):
        bars.append(
            (
                "bare\npython -I -S",
                bare["uss_mb"]["mean"],
                bare["uss_mb"]["max"],
                bare["pss_mb"]["mean"],
            )
        )
    fig = figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    width = 0.4
    xs = range(len(bars))
    ax.bar(
        [x - width / 2 for x in xs],
        [b[1] for b in bars],
        width,
        label="USS (mean)",
        # (max - mean: never below 0, but the mean of equal samples can come out a
        # rounding above them, and matplotlib refuses a negative error bar)
        yerr=[[0] * len(bars), [max(b[2] - b[1], 0.0) for b in bars]],
        capsize=3,
    )
    ax.bar([x + width / 2 for x in xs], [b[3] for b in bars], width, label="PSS (mean)")
    target = TARGET["idle_confined_child_uss_mb"]
    ax.axhline(
        target.floor, color="red", ls="--", lw=1, label=f"floor {target.floor:g} MB USS (idle)"
    )
    ax.axhline(
        target.goal, color="green", ls=":", lw=1.5, label=f"goal {target.goal:g} MB USS (idle)"
    )
    ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=8)
    ax.set_ylabel("MB (10**6 bytes); error bar: max")
    ax.set_title("Memory per child (USS: pages only it holds; PSS: its share of all)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_peers(doc: dict[str, Any], path: Path) -> None:
    """p50 per cell (log scale), one panel per workload of the peers section."""
    figure = _setup_matplotlib()
    section = doc["peers"]
    cells = {k: c for k, c in section["cells"].items() if c.get("status") == "ok"}
    workloads = section["workloads"]
    fig = figure(figsize=(14, 5.5))
    labels = [str(cells[k].get("label", k)).replace("`", "") for k in cells]
    for j, (key, w) in enumerate(workloads.items()):
        ax = fig.add_subplot(1, len(workloads), j + 1)
        values = [
            ((c["workloads"][key].get("stats") or {}).get("p50") or 0) for c in cells.values()
        ]
        colours = ["tab:blue" if c["kind"] == "ours" else "tab:orange" for c in cells.values()]
        ax.barh(range(len(cells)), values, color=colours)
        ax.set_xscale("log")
        ax.set_title(w["label"], fontsize=9)
        ax.invert_yaxis()
        ax.set_yticks(range(len(cells)), labels if j == 0 else [""] * len(cells), fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xlabel("p50 ms (log)", fontsize=8)
    fig.suptitle("Ours (blue) and the peers (orange) on the same workloads; missing bar: n/a")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


PLOTS: Final = {
    "latency": plot_latency,
    "sustained": plot_sustained,
    "calls": plot_calls,
    "memory": plot_memory,
    "peers": plot_peers,
}


def write_plots(doc: dict[str, Any], out_dir: Path, stem: str) -> list[Path]:
    """Every plot as ``<stem>-<name>.png`` in ``out_dir`` (of the sections the JSON has)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, plot in PLOTS.items():
        if not doc.get(name):
            continue
        path = out_dir / f"{stem}-{name}.png"
        plot(doc, path)
        paths.append(path)
    return paths


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(path.resolve(), start.resolve())


def _from_root(path: Path) -> str:
    """``path`` relative to the repository if it is inside it, else absolute."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _measured_dirty(env: dict[str, Any]) -> list[str]:
    """The measured packages' paths that differed from the commit when the run started."""
    dirty = env.get("git", {}).get("dirty_paths") or []
    # `git status --porcelain` lines: two status columns, a space, the path.
    return [line[3:] for line in dirty if line[3:].startswith(("protocol/", "runner/", "sandbox/"))]


def _machine_lines(env: dict[str, Any]) -> list[str]:
    git = env.get("git", {})
    commit = git.get("commit") or "unknown"
    dirty = git.get("dirty_paths") or []
    measured_dirty = _measured_dirty(env)
    versions = env.get("versions", {})
    load0 = env.get("loadavg_at_start") or []
    load1 = env.get("loadavg_at_end") or []
    stolen = env.get("cpu_stolen_share")
    stolen_rows: list[str] = []
    if "cpu_stolen_share" in env:  # (not in a study from before it was recorded)
        shown = (
            "not known here"
            if stolen is None
            else f"{stolen:.1%} of all CPU time: the share the other tenants of this "
            "machine's host took"
        )
        stolen_rows.append(
            "| CPU time stolen by the hypervisor during the study (steal, `/proc/stat`) | "
            f"{shown} |"
        )
    return [
        "| fact | value |",
        "|---|---|",
        f"| date (UTC) | {env.get('date', 'unknown')} |",
        f"| commit | `{commit}` |",
        "| uncommitted changes in the measured packages | "
        + (", ".join(f"`{p}`" for p in measured_dirty) or "none")
        + (f" (and {len(dirty) - len(measured_dirty)} other paths)" if dirty else "")
        + "; a digest of every measured source file is in the JSON |",
        f"| sources changed while measuring | "
        f"{', '.join(env.get('sources_changed_during_run') or []) or 'none'} |",
        f"| CPU | {env.get('cpu_count')} x {env.get('cpu_model', 'unknown')} |",
        f"| kernel | {env.get('kernel', 'unknown')} ({env.get('machine', '')}) |",
        f"| Python | {(env.get('python') or '').split()[0]} "
        f"({env.get('python_implementation', '')}) |",
        "| versions | "
        + ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None)
        + " |",
        f"| load average (1, 5, 15 min) | start {', '.join(f'{x:.2f}' for x in load0)}; "
        f"end {', '.join(f'{x:.2f}' for x in load1)} |",
        *stolen_rows,
        f"| cgroups usable | {env.get('cgroups_usable')} |",
        f"| wall time of the study | {env.get('wall_seconds', 'n/a')} s |",
        f"| command line | `{shlex.join(env.get('command_line') or [])}` |",
    ]


def render_markdown(doc: dict[str, Any], md_path: Path, json_path: Path, plots: list[Path]) -> str:
    """RESULTS.md, from the JSON document alone."""
    env = doc.get("environment", {})
    params = doc.get("parameters", {})
    mode = doc.get("mode", "full")
    here = md_path.parent
    plot_of = {p.stem.rsplit("-", 1)[-1]: _rel(p, here) for p in plots}
    regen = ".venv/bin/python -m benchmarks.study" + {
        "full": "",
        "quick": " --quick",
        "smoke": " --smoke --out DIR",
    }.get(mode, f" --{mode}")
    peers_only = _peers_only(doc)
    regen += {"also": " --peers", "only": " --peers-only"}.get(params.get("peers", "no"), "")
    wall = env.get("wall_seconds")
    took = f"this run took {wall:.0f} s" if isinstance(wall, (int, float)) else "minutes"
    commit = (env.get("git", {}).get("commit") or "unknown")[:12]
    commit_text = f"`{commit}`"
    if _measured_dirty(env):
        commit_text += " with uncommitted changes (listed under Machine and versions)"
    json_link = _rel(json_path, here)
    title = (
        "Isolation overhead beside the alternatives: ours and its peers on the same workloads"
        if peers_only
        else "Isolation overhead: what a sandboxed run costs, by level and spawn mode"
    )
    lines: list[str] = [
        f"# {title}",
        "",
        f"*Generated by `benchmarks/study.py` from [{json_link}]({json_link}) (every raw "
        f"sample is there). Run of {env.get('date', 'unknown')}, commit {commit_text}, {mode} "
        f"sizes, {env.get('cpu_count')} x {env.get('cpu_model', 'unknown CPU')}.*",
        "",
        f"Regenerate (measures again; {took}): `{regen}`. "
        "Re-render this page and its plots from the JSON without measuring: "
        f"`.venv/bin/python -m benchmarks.study --render {_from_root(json_path)}`.",
        "",
        f"To cite: sandbox-runtime isolation-overhead study, {env.get('date', '')[:10]}, "
        f"commit {commit_text}, `{_from_root(md_path)}`.",
        "",
    ]
    changed = env.get("sources_changed_during_run") or []
    if changed:
        lines += [
            f"> **Warning**: these sources changed on disk while the study ran: "
            f"{', '.join(changed)}. Runs after the change may have mixed code versions "
            "(a fresh interpreter loads the new files, the host and the zygote keep the old "
            "ones); failures below may come from that rather than from the sandbox.",
            "",
        ]
    if mode != "full":
        lines += [
            f"> **{mode} run**: small sizes, for checking the study itself; numbers are "
            "noisier than a full run's.",
            "",
        ]

    lines += _targets_lines(doc)
    if doc.get("profiles"):
        from . import profiles

        lines += profiles.render(doc)

    if not peers_only:
        lines += _method_lines(doc, params)
        for name, section in (
            ("latency", _latency_lines),
            ("sustained", _sustained_lines),
            ("calls", _calls_lines),
            ("memory", _memory_lines),
        ):
            if doc.get(name):
                lines += section(doc, plot_of)
            else:
                lines += [f"## {name}", "", "Not measured in this run.", ""]
    if doc.get("peers"):
        lines += _peers_lines(doc, plot_of)

    failures = doc.get("failures", [])
    lines += ["## Failed samples", ""]
    if not failures:
        lines += ["None: every run returned ok with the expected value and call count.", ""]
    else:
        counts: dict[str, int] = {}
        for f in failures:
            counts[f"{f['phase']} {f['cell']}"] = counts.get(f"{f['phase']} {f['cell']}", 0) + 1
        lines += [
            f"**{len(failures)} failed** (counted, not dropped silently):",
            "",
            "| phase and cell | failed |",
            "|---|---|",
        ]
        lines += [f"| {k} | {v} |" for k, v in sorted(counts.items())]
        lines += ["", "First reasons:", ""]
        lines += [
            f"- {f['phase']} {f['cell']} #{f['sample']}: `{f['error'][:200]}`"
            for f in failures[:10]
        ]
        lines.append("")
    killed = doc.get("externally_killed_spawns", [])
    if killed:
        lines += [
            f"Bare spawns killed from outside (SIGKILL) and run again: {len(killed)} "
            "(listed in the JSON).",
            "",
        ]
    left = doc.get("processes_left_behind", [])
    lines += [
        f"Processes left behind at the end: {'none' if not left else '; '.join(left)}.",
        "",
        "## Machine and versions",
        "",
        *_machine_lines(env),
        "",
    ]
    return "\n".join(lines)


def predates_floors(doc: dict[str, Any]) -> bool:
    """Whether ``doc``'s targets are an earlier study's (one threshold each, before issue
    15's floors and goals); such a document renders as it did then."""
    return any("floor" not in t for t in doc.get("targets", []))


def _threshold(t: dict[str, Any], value: float) -> str:
    unit = "x" if t["unit"] == "x" else f" {t['unit']}"
    return f"{t['comparison']} {value:g}{unit}"


def _measured(t: dict[str, Any]) -> str:
    """A target's measured figure with its unit."""
    if t["unit"] == "x":
        return _ratio(t["measured"])
    return f"{_n(t['measured'])} {t['unit']}"


def _targets_lines(doc: dict[str, Any]) -> list[str]:
    targets = doc.get("targets", [])
    if predates_floors(doc):
        return _threshold_lines(targets)
    lines = [
        "## Targets",
        "",
        "Issue 15's targets, each measured in this run beside its baseline measured in the "
        "same run. The verdict is against the floor; the goal column says whether the goal "
        "is met too.",
        "",
        "| figure | measured | floor | goal | verdict (floor) | goal met | baseline, same run "
        "| detail |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {t['description']} | {_measured(t)} | {_threshold(t, t['floor'])} | "
        f"{_threshold(t, t['goal'])} | **{t['verdict']}** | "
        f"{'**yes**' if t['goal_met'] else 'no'} | {t['baseline']} | {t['detail']} |"
        for t in targets
    ]
    lines += [
        "",
        "A MISS is recorded as measured, not adjusted; a figure that could not be measured "
        "is a MISS, its goal not met.",
        "",
    ]
    return lines


def _threshold_lines(targets: list[dict[str, Any]]) -> list[str]:
    """The targets table of a document that predates the floors and goals, as it was."""
    lines = [
        "## Targets",
        "",
        "| target | measured | threshold | verdict | detail |",
        "|---|---|---|---|---|",
    ]
    for t in targets:
        unit = "" if t["unit"] == "x" else f" {t['unit']}"
        measured = _ratio(t["measured"]) if t["unit"] == "x" else f"{_n(t['measured'])}{unit}"
        lines.append(
            f"| {t['description']} | {measured} | {_threshold(t, t['threshold'])} | "
            f"**{t['verdict']}** | {t['detail']} |"
        )
    lines += [
        "",
        "A MISS is recorded as measured, not adjusted; a target whose number could not be "
        "measured is a MISS too.",
        "",
    ]
    return lines


def _method_lines(doc: dict[str, Any], p: dict[str, Any]) -> list[str]:
    conc = p.get("concurrency", "K")
    return [
        "## Method",
        "",
        "Everything on this page was measured in one run of the study, on one machine, with "
        "its baselines measured in the same run (absolute numbers drift by tens of percent "
        "between runs on small shared VMs; the ratios drift less). Host: one process on "
        f"anyio's `{p.get('backend', 'asyncio')}` backend; nothing pinned to a CPU.",
        "",
        "Cells: the three isolation levels; `process` and `confined` each with the three "
        "spawn modes, `cold` (the zygote forks, the child executes a fresh `python -I -S` "
        "runner), `zygote` (the zygote forks, the child is the runner already) and `pool` "
        "(a `sandbox.Pool` of children forked and confined ahead of the run). "
        "`in_process` has no child process: one row, spawn mode n/a.",
        "",
        f"1. **Latency**: `await sandbox.run({p.get('programs', {}).get('trivial', '1')!r}, "
        "level=..., spawn=...)` timed on the host with `perf_counter` around the call, "
        "checked (ok, value 1, no calls). "
        f"{p.get('latency_rounds')} rounds x {p.get('latency_per_round')} samples per cell "
        f"after {p.get('latency_warmup')} uncounted warm-ups; every round visits every cell "
        "and the bare spawn, starting one cell later each round. **Pool cells are measured "
        f"with the pool full**: one `sandbox.Pool(size={p.get('latency_pool_size')})` per "
        "cell, and `pool.wait_full()` (untimed) before each sample, so the fork is not on "
        "the run's path, which is what a pool is for; the refill fork runs while the next "
        "sample waits. Baseline: `python -I -S -c pass`, `Popen` to reaped exit (waited on "
        "a pidfd). Percentiles by linear interpolation over all samples of the cell.",
        f"2. **Sustained**: {conc} concurrent tasks (2 x CPUs) each doing trivial runs back to "
        f"back for {p.get('sustained_seconds')} s; runs/s = checked runs / time until the "
        f"last run ended. Pool cells: one `Pool(size={conc})`, filled before the clock "
        f"starts. Baseline: {conc} threads spawning `python -I -S -c pass` back to back.",
        f"3. **Per-call round trip**: a program calls `host.echo(i)` {p.get('seq_calls')} "
        f"times in a row (blocking calls, after {p.get('seq_warmup')} untimed) and returns "
        "its own µs per call from `time.perf_counter` inside the program. The tool is "
        "`sandbox.Tool(echo, inline=True)` (answered in the host's event loop). Baseline: "
        "`bench_wire`'s raw parent (blocking `os.read`/`os.write` + msgspec, no event loop) "
        "against `bench_wire`'s child, `seq` bench, same number of calls.",
        f"4. **Pipelined**: the program awaits `asyncio.gather` of {INFLIGHT} `host.echo` "
        f"calls, {p.get('pipe_batches')} times (after {p.get('pipe_warmup')} untimed), and "
        "returns µs per call. Baselines: the raw parent under `bench_wire`'s `pipe_raw` "
        "(the child writes 64 raw frames then reads 64: the parent's cost alone) and "
        "`pipe_gather` (the child's own asyncio `gather` over `protocol.Client`: the closer "
        f"match to this program). Calls cells: {p.get('call_rounds')} runs per cell and "
        "program, median reported; raw sessions as many.",
        f"5. **Memory**: a `Pool(size={p.get('memory_pool_size')})` per child level, filled "
        "and `wait_full()`; for each idle child, `psutil` `memory_full_info()` of the child "
        "and its descendants, USS and PSS summed (the processes column counts them). "
        "USS counts the pages only that child holds (what starting it cost); PSS adds its "
        "share of the pages it shares with the zygote and its siblings. The zygote and its "
        "keeper are measured with those pools alive. Baseline: a bare `python -I -S` at "
        "rest (waiting on stdin). `cold` and `zygote` have no idle children: for them, the "
        "run's processes are measured while the program waits in a host call (a running "
        "child, so not comparable with the idle target). MB = 10^6 bytes.",
        "",
        *_method_added(doc),
        "Every run is checked; a failed, overrun or raising run is counted and listed "
        "below, never dropped silently. Every pool is closed when its cell ends and the "
        "zygote is shut down at the end.",
        "",
    ]


def _method_added(doc: dict[str, Any]) -> list[str]:
    """The method of what issue 15's targets added, for a document that has it."""
    lines: list[str] = []
    lat = (doc.get("latency") or {}).get("cells", {})
    if any(split_workload(k)[0] == "await" for k in lat):
        lines += [
            f"- **A program that awaits one host call**: `{AWAIT_PROGRAM}` (the echo tool) at "
            + ", ".join(f"`{k}`" for k in AWAIT_CELLS)
            + ", one more cell of the latency rounds, pool full before each sample like the "
            "trivial pool cell; checked: value 1, one call.",
        ]
    if (doc.get("latency") or {}).get("value_1mib"):
        lines += [
            f"- **A 1 MiB value**: `{VALUE_PROGRAM}` at "
            + ", ".join(f"`{k}`" for k in VALUE_CELLS)
            + ", cells of the latency rounds too (checked: the whole string). Its baseline, in "
            "the same rounds: the raw pipe (a second `python -I -S`, started once, writes 1 MiB "
            "into an `os.pipe` each time this process asks with one byte on another; timed from "
            "the request to the last byte read). Reported: (p50 of the value's run - p50 of the "
            "trivial run at the same cell) / p50 of the raw pipe, over all samples and per "
            "round.",
        ]
    sus = (doc.get("sustained") or {}).get("cells", {})
    cpu = next((c["cpu"] for c in sus.values() if c.get("cpu")), None)
    if cpu:
        lines += [
            "- **CPU per run**, in every sustained cell: "
            + cpu["counted"]
            + ". Not counted: "
            + cpu["not_counted"]
            + ". Baseline: the bare spawn cell's CPU per spawn (this process's and the "
            "spawned interpreter's).",
        ]
    return [*lines, ""] if lines else []


def _latency_lines(doc: dict[str, Any], plot_of: dict[str, str]) -> list[str]:
    lat = doc["latency"]["cells"]
    more = any(k == RAW_PIPE or "@" in k for k in lat)
    lines = [
        "## 1. Latency: a trivial run, a program that awaits, a 1 MiB value"
        if more
        else "## 1. Trivial-run latency",
        "",
        "ms per run, end to end on the host. Ratios: to the bare spawn's p50 (p99) over all "
        "samples; in brackets, the per-round p50 ratio as median [min-max] over rounds.",
        "",
        "| cell | n | p50 | p90 | p99 | mean | p50 / bare p50 | per round | p99 / bare p99 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for key, c in lat.items():
        s = c["stats"] or {}
        r = c.get("ratio_to_bare_spawn") or {}
        prs = r.get("p50_per_round_summary")
        per_round = f"{prs['median']:.3g} [{prs['min']:.3g}-{prs['max']:.3g}]" if prs else ""
        label = _cell_label(key) + (
            "" if key != BARE else f": `{doc['latency'].get('baseline_label', '')}`"
        )
        if key == RAW_PIPE:
            label += f": {doc['latency'].get('raw_pipe_label', '')}"
        lines.append(
            f"| {label} | {s.get('n', 0)} | {_n(s.get('p50'))} | {_n(s.get('p90'))} | "
            f"{_n(s.get('p99'))} | {_n(s.get('mean'))} | "
            f"{'1 (baseline)' if key == BARE else _ratio(r.get('p50'))} | {per_round} | "
            f"{'' if key == BARE else _ratio(r.get('p99'))} |"
        )
    lines.append("")
    value = doc["latency"].get("value_1mib")
    if value:
        lines += [
            "A run whose value is a 1 MiB string, against the raw pipe moving 1 MiB: (p50 of "
            "the value's run - p50 of the trivial run at the same cell) / p50 of the raw pipe; "
            "per round, the same from that round's p50s, median [min-max].",
            "",
            "| cell | value's run p50 ms | trivial run p50 ms | difference ms | raw pipe p50 ms "
            "| / raw pipe | per round |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, c in value["cells"].items():
            lines.append(
                f"| {_cell_label(key)} | {_n(c['value_p50_ms'])} | {_n(c['trivial_p50_ms'])} | "
                f"{_n(c['extra_ms'])} | {_n(c['raw_pipe_p50_ms'])} | {_ratio(c['ratio'])} | "
                f"{_spread(c.get('per_round_summary'))} |"
            )
        lines.append("")
    if "latency" in plot_of:
        lines += [f"![latency]({plot_of['latency']})", ""]
    return lines


def _sustained_lines(doc: dict[str, Any], plot_of: dict[str, str]) -> list[str]:
    sus = doc["sustained"]
    lines = [
        "## 2. Sustained throughput",
        "",
        f"{sus['concurrency']} concurrent tasks for {sus['duration_s']} s per cell. Ratio: "
        "runs/s over bare spawns/s at the same concurrency. Latency under load: p50 and "
        "p99 of the checked runs.",
        "",
        "| cell | runs | failed | runs/s | / bare spawns/s | p50 ms under load | p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, c in sus["cells"].items():
        s = c.get("latency_under_load") or {}
        failed = f"**{c['failed']}**" if c["failed"] else "0"
        lines.append(
            f"| {_cell_label(key)} | {c['runs']} | {failed} | {_n(c['runs_per_s'])} | "
            f"{'1 (baseline)' if key == BARE else _ratio(c.get('ratio_to_bare_spawn'))} | "
            f"{_n(s.get('p50'))} | {_n(s.get('p99'))} |"
        )
    lines.append("")
    if any(c.get("cpu") for c in sus["cells"].values()):
        lines += _cpu_lines(sus)
    if "sustained" in plot_of:
        lines += [f"![sustained]({plot_of['sustained']})", ""]
    return lines


def _cpu_lines(sus: dict[str, Any]) -> list[str]:
    """The CPU per run of every sustained cell, by part."""
    cpu = next(c["cpu"] for c in sus["cells"].values() if c.get("cpu"))
    lines = [
        "CPU per run, ms, by part (the whole of each cell's window, divided by its runs). "
        f"Counted: {cpu['counted']}. Not counted: {cpu['not_counted']}.",
        "",
        "| cell | runs | this process | the runs' processes | of which inside their "
        "cgroups | zygote | keeper | other standing | reaped by this process | total | "
        "/ bare spawn |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, c in sus["cells"].items():
        cpu = c.get("cpu")
        if not cpu:
            continue
        part = cpu["per_run_ms"]
        source = " (their cgroups)" if cpu.get("runs_source") == "cgroups" else ""
        lines.append(
            f"| {_cell_label(key)} | {cpu['runs']} | {_n(part['host'])} | "
            f"{_n(part['runs_processes'])}{source} | {_n(cpu.get('runs_cgroup_per_run_ms'))} | "
            f"{_n(part['zygote'])} | {_n(part['keeper'])} | {_n(part['other_standing'])} | "
            f"{_n(part['spawned'])} | **{_n(cpu['total_per_run_ms'])}** | "
            f"{'1 (baseline)' if key == BARE else _ratio(cpu.get('ratio_to_bare_spawn'))} |"
        )
    lines.append("")
    notes = [
        f"{_cell_label(k)}: {c['cpu']['runs_without_cpu_time']} runs without a CPU time"
        for k, c in sus["cells"].items()
        if (c.get("cpu") or {}).get("runs_without_cpu_time")
    ]
    if notes:
        lines += ["; ".join(notes) + ".", ""]
    return lines


def _calls_lines(doc: dict[str, Any], plot_of: dict[str, str]) -> list[str]:
    calls = doc["calls"]
    base = calls["baselines"]

    def spread(s: dict[str, float] | None) -> str:
        return "" if not s else f" [{_n(s['min'])}-{_n(s['max'])}]"

    lines = [
        "## 3 and 4. Host calls: per-call round trip and 64 in flight",
        "",
        f"µs per call, timed inside the program; median [min-max] over "
        f"{calls['runs_per_cell']} runs. Ratios are time ratios to the raw pipe (lower is "
        "better).",
        "",
        "| baseline (raw pipe, `bench_wire`) | µs per call |",
        "|---|---|",
    ]
    for name in RAW_BENCHES:
        b = base.get(name, {})
        lines.append(f"| raw `{name}` | {_n(b.get('us'))}{spread(b.get('summary'))} |")
    lines += [
        "",
        "| cell | sequential µs | / raw seq | pipelined µs | / raw pipe_raw | / raw pipe_gather |",
        "|---|---|---|---|---|---|",
    ]
    for key, c in calls["cells"].items():
        lines.append(
            f"| {_cell_label(key)} | {_n(c['seq_us'])}{spread(c.get('seq_summary'))} | "
            f"{_ratio(c['seq_ratio_to_raw_seq'])} | "
            f"{_n(c['pipe_us'])}{spread(c.get('pipe_summary'))} | "
            f"{_ratio(c['pipe_ratio_to_raw_pipe_raw'])} | "
            f"{_ratio(c['pipe_ratio_to_raw_pipe_gather'])} |"
        )
    lines += [
        "",
        "Unpinned, a sequential round trip is two wake-ups between processes (or threads, "
        "for `in_process`), and whether they cross CPUs is up to the scheduler, so the "
        "sequential numbers are bimodal on a 2-vCPU VM (see `bench_wire --pin`).",
        "",
    ]
    if "calls" in plot_of:
        lines += [f"![calls]({plot_of['calls']})", ""]
    return lines


def _memory_lines(doc: dict[str, Any], plot_of: dict[str, str]) -> list[str]:
    mem = doc["memory"]
    bare = mem.get("bare_interpreter", {})
    bare_uss = (bare.get("uss_mb") or {}).get("mean")
    lines = [
        "## 5. Memory",
        "",
        f"MB (10^6 bytes). Idle warm children: a pool of {mem.get('pool_size')} per level.",
        "",
        "| what | n | processes each | USS mean | USS max | PSS mean | PSS max | "
        "USS max / bare interpreter |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def row(label: str, s: dict[str, Any] | None, ratio: str) -> str:
        if not s:
            return f"| {label} | 0 | n/a | n/a | n/a | n/a | n/a | n/a |"
        u, p = s["uss_mb"], s["pss_mb"]
        procs = ", ".join(str(x) for x in s.get("processes", []))
        return (
            f"| {label} | {s['n']} | {procs} | {_n(u['mean'])} | {_n(u['max'])} | "
            f"{_n(p['mean'])} | {_n(p['max'])} | {ratio} |"
        )

    for level, entry in mem["idle"].items():
        s = entry.get("summary")
        lines.append(
            row(
                f"idle warm {level} child (pool)",
                s,
                _ratio(entry.get("uss_max_over_bare_interpreter")),
            )
        )
    for level, entry in (mem.get("idle_awaiting") or {}).items():
        s = entry.get("summary")
        lines.append(
            row(
                f"idle warm {level} child (pool), warmed for calls and awaits",
                s,
                _ratio(_div(s and s["uss_mb"]["max"], bare_uss)),
            )
        )
    lines.append(
        "| idle cold child | - | no idle children: a cold child starts on demand "
        "| n/a | n/a | n/a | n/a | n/a |"
    )
    for key, entry in mem["in_run"].items():
        s = entry.get("summary")
        lines.append(
            row(
                f"running {key} child (in a host call)",
                s,
                _ratio(_div(s and s["uss_mb"]["max"], bare_uss)),
            )
        )
    for name in ("zygote", "keeper"):
        z = mem.get(name)
        if z:
            extra = f", {z['children']} children alive" if "children" in z else ""
            lines.append(
                f"| {name} process (context{extra}) | 1 | 1 | {_n(z['uss'] / MB)} | "
                f"{_n(z['uss'] / MB)} | {_n(z['pss'] / MB)} | {_n(z['pss'] / MB)} | "
                f"{_ratio(_div(z['uss'] / MB, bare_uss))} |"
            )
    lines.append(
        row(
            "bare `python -I -S` at rest (baseline)",
            bare if bare.get("n") else None,
            "1 (baseline)" if bare.get("n") else "n/a",
        )
    )
    lines.append("")
    if "memory" in plot_of:
        lines += [f"![memory]({plot_of['memory']})", ""]
    return lines


#: The isolates table's columns: (key in the JSON, heading).
ISOLATES: Final = (
    ("process", "process boundary"),
    ("files", "file system"),
    ("network", "network"),
    ("memory", "memory limit"),
    ("time", "time limit"),
)
#: The probes' columns: (key in the JSON, heading).
PROBES: Final = (
    ("read_host_file", "reads a file in the host's temporary directory"),
    ("connect_host_loopback", "connects to a socket on the host's loopback"),
)


def _peer_label(key: str, cell: dict[str, Any]) -> str:
    label = str(cell.get("label") or key)
    return f"{label} (ours)" if cell.get("kind") == "ours" else label


def _peers_method(section: dict[str, Any]) -> list[str]:
    sizes = section.get("sizes", {})
    workloads = section.get("workloads", {})
    listed = "; ".join(
        f"{w['label']} (`{key}`: `{' '.join(w['program'].split())}`)"
        for key, w in workloads.items()
    )
    return [
        "## Peers: the alternatives on the same workloads",
        "",
        "The same programs (their last expression is the value, checked on every run) in "
        f"our cells and in each peer: {listed}. Host calls go to `host.echo(i)`, which "
        "returns `i`. Every round visits every cell, ours and the peers', starting one "
        "cell later each round, and in each cell every workload, starting one later each "
        f"round: {sizes.get('rounds')} rounds of {sizes.get('per_round')} runs per cell "
        f"and workload ({sizes.get('cpu_per_round')} of the CPU loop) after "
        f"{sizes.get('warmup')} uncounted warm-up. Ours are timed on the host around "
        "`await sandbox.run(...)` (pool cells with the pool full, as above); a peer's "
        "run is timed around the one call that makes it, in a thread kept for the "
        "peers. A peer that cannot be installed or started here has a row that says "
        "why; a workload a peer cannot express is n/a, with the reason; where a peer "
        "needs a shape of its own for one, that is said under the table.",
        "",
    ]


def _peers_lines(doc: dict[str, Any], plot_of: dict[str, str]) -> list[str]:
    section = doc["peers"]
    cells: dict[str, Any] = section.get("cells", {})
    workloads: dict[str, Any] = section.get("workloads", {})
    lines = _peers_method(section)

    lines += [
        "### Who is who",
        "",
        "| cell | how it was driven | versions | status |",
        "|---|---|---|---|",
    ]
    for key, c in cells.items():
        versions = ", ".join(
            f"{k} {v}" for k, v in (c.get("versions") or {}).items() if v is not None
        )
        status = c.get("status", "ok")
        lines.append(
            f"| {_peer_label(key, c)} | {c.get('how', '')} | {versions or 'n/a'} | "
            f"{'ok' if status == 'ok' else f'**{status}**'} |"
        )
    lines.append("")

    lines += [
        "### What each isolates",
        "",
        "From what each one does (its documentation, checked here by behaviour), not from "
        "its name; ours by level (the spawn mode changes nothing here), with the memory "
        "and time limits this host can enforce.",
        "",
        "| | " + " | ".join(h for _, h in ISOLATES) + " |",
        "|---|" + "---|" * len(ISOLATES),
    ]
    seen_levels: set[str] = set()
    for key, c in cells.items():
        if c.get("kind") == "ours":
            level = key.partition("/")[0]
            if level in seen_levels:
                continue
            seen_levels.add(level)
            label = f"ours, `{level}`"
        else:
            label = _peer_label(key, c)
        iso = c.get("isolates") or {}
        lines.append(f"| {label} | " + " | ".join(iso.get(k, "") for k, _ in ISOLATES) + " |")
    lines.append("")

    probed = {k: c for k, c in cells.items() if c.get("probes")}
    if probed:
        lines += [
            "Observed in this run (untimed probes: a program reads a file the study wrote "
            "in the host's temporary directory; a program connects to a socket the study "
            "listens on at the host's `127.0.0.1`):",
            "",
            "| cell | " + " | ".join(h for _, h in PROBES) + " |",
            "|---|" + "---|" * len(PROBES),
        ]
        for key, c in probed.items():
            outcomes = [str(c["probes"].get(k, "n/a")).replace("|", "/") for k, _ in PROBES]
            lines.append(f"| {_peer_label(key, c)} | " + " | ".join(outcomes) + " |")
        lines.append("")
    for key, c in cells.items():
        worker = (c.get("observed") or {}).get("worker")
        if worker:
            shared = ", ".join(worker.get("namespaces_shared_with_host") or []) or "none"
            lines += [
                f"{_peer_label(key, c)}: its worker process, seen in `/proc`: uid "
                f"{worker.get('uid')}, seccomp {worker.get('seccomp')}, no_new_privs "
                f"{worker.get('no_new_privs')}, effective capabilities {worker.get('cap_eff')}, "
                f"address-space limit {worker.get('address_space_limit')}; namespaces shared "
                f"with the host: {shared}.",
                "",
            ]

    notes: list[str] = []

    def cell_text(key: str, c: dict[str, Any], w: str) -> str:
        entry = c.get("workloads", {}).get(w) or {}
        if c.get("status", "ok") != "ok":
            return "-"
        if entry.get("unsupported"):
            notes.append(
                f"{_peer_label(key, c)}, {workloads[w]['label']}: n/a, {entry['unsupported']}"
            )
            return "n/a"
        stats = entry.get("stats")
        if not stats:
            return "no sample"
        mark = ""
        if (c.get("equivalents") or {}).get(w):
            notes.append(f"{_peer_label(key, c)}, {workloads[w]['label']}: {c['equivalents'][w]}")
            mark = " *"
        return f"{_n(stats['p50'])} [{_n(stats['p90'])}]{mark}"

    lines += [
        "### Time per run",
        "",
        "ms per run, p50 [p90] over every sample of the cell. `*`: the peer's closest "
        "equivalent, said below; `-`: the peer is not there (see Who is who).",
        "",
        "| cell | " + " | ".join(w["label"] for w in workloads.values()) + " |",
        "|---|" + "---|" * len(workloads),
    ]
    for key, c in cells.items():
        lines.append(
            f"| {_peer_label(key, c)} | "
            + " | ".join(cell_text(key, c, w) for w in workloads)
            + " |"
        )
    lines.append("")
    if notes:
        lines += [f"- {note}" for note in notes]
        lines.append("")

    for ref, what in (
        ("confined/pool", "our `confined` pool"),
        ("exec", "plain `exec()` (the floor: no wall at all)"),
        ("bare_spawn", "a bare `python -I -S` spawn"),
    ):
        ref_cell = cells.get(ref)
        if ref_cell is None or ref_cell.get("status", "ok") != "ok":
            lines += [f"No ratios to {what}: {(ref_cell or {}).get('status', 'not measured')}.", ""]
            continue
        lines += [
            f"### Ratio to {what}",
            "",
            f"Per round, the cell's p50 over the same round's p50 of {what}, on the same "
            "workload: median [min-max] over rounds (below 1: faster).",
            "",
            "| cell | " + " | ".join(w["label"] for w in workloads.values()) + " |",
            "|---|" + "---|" * len(workloads),
        ]
        for key, c in cells.items():
            if key == ref or c.get("status", "ok") != "ok":
                continue
            row = []
            for w in workloads:
                r = ((c.get("workloads", {}).get(w) or {}).get("ratios") or {}).get(ref) or {}
                summary = r.get("summary")
                if summary:
                    row.append(
                        f"{_n(summary['median'])}x [{_n(summary['min'])}-{_n(summary['max'])}]"
                    )
                else:
                    row.append(f"{_n(r['p50'])}x" if r.get("p50") is not None else "n/a")
            lines.append(f"| {_peer_label(key, c)} | " + " | ".join(row) + " |")
        lines.append("")
    if "peers" in plot_of:
        lines += [f"![peers]({plot_of['peers']})", ""]
    return lines


def render(json_path: Path, md_path: Path, plot_dir: Path) -> tuple[Path, list[Path]]:
    """RESULTS.md and the plots from an existing JSON document, without measuring.

    Returns:
        The Markdown file's path and the plots' paths.

    Raises:
        OSError: the JSON cannot be read or the outputs written.
        ValueError: the file is not a study document.
    """
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("study") != "isolation-overhead":
        raise ValueError(f"{json_path} is not an isolation-overhead study document")
    if predates_floors(doc):
        print(
            f"note: {json_path.name} predates issue 15's targets (floors and goals, the "
            "awaiting program, the 1 MiB value, the CPU per run): its page shows the targets "
            "it was measured against, one threshold each, and none of the new figures",
            file=sys.stderr,
        )
    plots = write_plots(doc, plot_dir, json_path.stem)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    md_path.write_text(render_markdown(doc, md_path, json_path, plots), encoding="utf-8")
    return md_path, plots


def print_summary(doc: dict[str, Any]) -> None:
    """The targets and the headline numbers, on the console."""
    print()
    print("targets (verdict against the floor; goal met or not):")
    for t in doc["targets"]:
        if "floor" not in t:  # an earlier study's target: one threshold
            print(
                f"  {t['verdict']:4}  {t['id']:40} measured {_n(t['measured'])} "
                f"{_threshold(t, t['threshold'])}   ({t['detail']})"
            )
            continue
        print(
            f"  {t['verdict']:4}  {t['id']:40} measured {_measured(t)}; "
            f"floor {_threshold(t, t['floor'])}, goal {_threshold(t, t['goal'])}: "
            f"goal {'met' if t['goal_met'] else 'not met'}   ({t['baseline']}; {t['detail']})"
        )
    if doc.get("latency"):
        lat = doc["latency"]["cells"]
        print(
            "latency p50 ms: "
            + ", ".join(f"{k} {_n((c['stats'] or {}).get('p50'))}" for k, c in lat.items())
        )
    if doc.get("sustained"):
        print(
            "sustained runs/s: "
            + ", ".join(f"{k} {_n(c['runs_per_s'])}" for k, c in doc["sustained"]["cells"].items())
        )
    if doc.get("peers"):
        cells = doc["peers"]["cells"]
        print(
            "peers, trivial p50 ms: "
            + ", ".join(
                f"{k} {_n(((c['workloads']['trivial'].get('stats')) or {}).get('p50'))}"
                for k, c in cells.items()
            )
        )
    print(
        f"failed samples: {len(doc['failures'])}; processes left behind: "
        f"{len(doc['processes_left_behind'])}"
    )


# -- command line -------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.study",
        description="The isolation-overhead study: latency, sustained throughput, call cost "
        "and memory of sandboxed runs at each level and spawn mode, beside baselines "
        "measured in the same run; writes JSON, PNG plots and RESULTS.md.",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="small sizes (about a minute on 2 quiet vCPUs)"
    )
    size.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes (under 30 s), for tests; writes nowhere in the repository unless "
        "--out is given",
    )
    size.add_argument(
        "--render",
        type=Path,
        metavar="PATH.json",
        help="only re-render RESULTS.md and the plots from an existing JSON",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the JSON, the plots and RESULTS.md into this directory (default: "
        "JSON and plots in benchmarks/results/, RESULTS.md in benchmarks/; --quick writes "
        "its Markdown next to its JSON)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="concurrent tasks in the sustained measurement (default 2 x CPUs)",
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds of sustained load per cell"
    )
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    peers = parser.add_mutually_exclusive_group()
    peers.add_argument(
        "--peers",
        action="store_true",
        help="also measure the peers (pydantic-monty, smolagents, RestrictedPython, exec(), "
        "a bare python spawn) on the same workloads as ours, interleaved; needs "
        "pip install 'sandbox-runtime[peers]' (a peer that is missing gets a row saying so)",
    )
    peers.add_argument(
        "--peers-only",
        action="store_true",
        help="measure only the peers section; writes peers-<date>.json and .md",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds any one run may take (60)"
    )
    opts = parser.parse_args(argv)
    if opts.render is not None and (opts.peers or opts.peers_only):
        parser.error("--render takes what the JSON holds: no --peers or --peers-only")
    if opts.concurrency is not None and opts.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    if opts.duration is not None and opts.duration <= 0:
        parser.error("--duration must be positive")
    return opts


def main(argv: list[str] | None = None) -> None:
    """Measure (or only render), write the JSON, the plots and RESULTS.md."""
    args = sys.argv[1:] if argv is None else list(argv)
    opts = parse_args(args)
    if opts.render is not None:
        out_dir: Path | None = opts.out
        md_path = out_dir / "RESULTS.md" if out_dir else _default_page(opts.render)
        md, plots = render(opts.render, md_path, out_dir or opts.render.parent)
        print(f"rendered {md} and {', '.join(p.name for p in plots)}")
        return

    mode = "quick" if opts.quick else "smoke" if opts.smoke else "full"
    peers = "only" if opts.peers_only else "also" if opts.peers else "no"
    prefix = "peers" if peers == "only" else "study"
    sizes = PRESETS[mode]
    if opts.duration is not None:
        sizes = dataclasses.replace(sizes, sustained_seconds=opts.duration)
    if opts.timeout is not None:
        sizes = dataclasses.replace(sizes, timeout=opts.timeout)
    concurrency = opts.concurrency or 2 * (os.cpu_count() or 1)

    if opts.out is not None:
        out_dir, md_path = opts.out, opts.out / "RESULTS.md"
    elif mode == "smoke":  # never over the repository's results
        out_dir = Path(tempfile.mkdtemp(prefix=f"{prefix}-smoke-"))
        md_path = out_dir / "RESULTS.md"
    else:
        out_dir = RESULTS_DIR
        md_path = RESULTS_MD if mode == "full" else RESULTS_DIR / f"{_stem(mode)}.md"
    if peers == "only":  # its page goes beside its JSON, never over a study's page
        md_path = out_dir / f"{_stem(mode, prefix)}.md"
    print(
        f"isolation-overhead study ({mode}{', peers' if peers == 'also' else ''}"
        f"{', peers only' if peers == 'only' else ''}): levels {', '.join(LEVELS)}, spawn "
        f"modes {', '.join(SPAWN_MODES)}; sustained concurrency {concurrency}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    doc = run_study(mode, sizes, concurrency, opts.backend, args, peers)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{_stem(mode, prefix)}.json"
    json_path.write_bytes(msgspec.json.format(msgspec.json.encode(doc), indent=2) + b"\n")
    md, plots = render(json_path, md_path, out_dir)
    print_summary(doc)
    print(f"results written to {json_path}, {md} and {len(plots)} plots in {out_dir}")
    changed = doc["environment"]["sources_changed_during_run"]
    if changed:
        print(f"WARNING: sources changed while measuring: {', '.join(changed)}")
    if doc["processes_left_behind"]:
        raise SystemExit(1)


def _stem(mode: str, prefix: str = "study") -> str:
    date = dt.datetime.now(dt.UTC).date().isoformat()
    return f"{prefix}-{date}" + ("" if mode == "full" else f"-{mode}")


def _default_page(json_path: Path) -> Path:
    """Where ``--render`` writes a JSON's page: RESULTS.md for the study, and beside the
    JSON for a document of the peers section alone (never over RESULTS.md).

    Raises:
        OSError: the JSON cannot be read.
    """
    try:
        doc = json.loads(json_path.read_text(encoding="utf-8"))
    except ValueError:
        return RESULTS_MD  # render() says what is wrong with it
    if isinstance(doc, dict) and _peers_only(doc):
        return json_path.with_suffix(".md")
    return RESULTS_MD


if __name__ == "__main__":
    # One module, however it was started: benchmarks.peers imports benchmarks.study, which
    # would otherwise be loaded a second time beside this __main__.
    sys.modules.setdefault("benchmarks.study", sys.modules[__name__])
    main()
