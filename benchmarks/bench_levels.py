"""Levels benchmark: what a run costs at each level (``in_process``, ``process``, ``confined``)
against bare spawns.

Usage::

    .venv/bin/python -m benchmarks.bench_levels [--quick] [--rounds N] [--json PATH]

Theory of operation
-------------------
Everything is measured in one run, in *cells*. A cell is one batch of runs of one thing,
after a short warm-up that is not counted:

* spawn baselines (no event loop): ``subprocess.Popen`` of ``python -I -S -c pass`` and
  ``wait``; the same with ``import msgspec`` (msgspec's directory on ``sys.path``: the floor
  of the runner's start-up); the same importing the runner's own modules
  (``runner._main`` and the Python backend: everything the runner imports before it reads
  its Start). Each sample is Popen to reaped exit.
* ``trivial``: ``await sandbox.run("1 + 1", level=...)``, end to end, timed around the
  call, at ``in_process`` and at ``process`` (a fresh child per run: cold spawn, cgroups,
  Start, Result, kill, reap, clean-up).
* ``calls``: 1000 tool calls to an inline ``echo`` (``sandbox.Tool(fn, inline=True)``): one
  program makes them one after the other, blocking (``seq``); another under
  ``asyncio.gather`` in batches of 64 (``gather``); a third is the ``gather`` program with
  no calls (``async0``: it imports asyncio and runs a loop in the child, so
  ``gather - async0`` is the calls alone). Per-call cost = (median run time - median
  ``trivial`` run time of the same round, level and backend) / 1000, as asked; for
  ``gather`` also against ``async0``.

Every ``sandbox`` cell runs inside its own ``anyio.run`` on one backend (asyncio, trio).

Noise: each round runs every cell once, in an order that moves by one cell every round;
each placement (``--pin``) is a separate pass of the round. Numbers are per-round stats
(p50/p90/p99/mean of the cell's runs) summarised as median [min-max] over rounds; every
ratio is computed per round from that round's cells.

CPU placement: ``none`` (the scheduler places everything) and ``same`` (this process is
pinned to one CPU with ``os.sched_setaffinity``; children and worker threads inherit it).
On a 2-vCPU VM a cross-CPU wake-up costs ~30 µs, which matters for 1000 round trips, and
pinned, a child's start-up cannot overlap the parent's own work.

Where the time goes (``--breakdown-runs``): after the rounds, a few runs with timestamps,
for each of :data:`BREAKDOWN_CELLS`. Functions of :mod:`sandbox._engine._process` and
:mod:`sandbox._children._supervisor` are wrapped, for that pass only (never in the timed rounds), to
stamp the child's arrival and readiness, the Start sent, the Result received (the runner
writes nothing before its Result, so that is also its first byte) and the clean-up;
the program itself returns the child's ``perf_counter_ns`` (CLOCK_MONOTONIC, the same
clock as the parent's) and ``process_time_ns`` when it starts. A ``-X importtime`` run of
the runner's imports splits the child's start-up further.

No process is left behind: spawns are waited (killed on timeout), the sandbox reaps its
own, and after every cell this process checks that it has no children.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import re
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import msgspec
import psutil

import sandbox
import sandbox._children._runner as sandbox_runner
import sandbox._children._supervisor as sandbox_supervisor
import sandbox._engine._levels
import sandbox._engine._process as sandbox_process
from protocol import Starter
from sandbox._children._reaper import CgroupSet

from ._machine import changed_sources, environment, git_head
from .bench_wire import summarize

ROOT: Final = Path(__file__).resolve().parent.parent
RESULTS_DIR: Final = ROOT / "benchmarks" / "results"
MSGSPEC_DIR: Final = Path(msgspec.__file__).resolve().parent.parent

CALLS: Final = 1000
BATCH: Final = 64
BACKENDS: Final = ("asyncio", "trio")
LEVELS: Final = ("in_process", "process", "confined")
PINS: Final = ("none", "same")

TRIVIAL: Final = "1 + 1"
SEQ_PROGRAM: Final = f"n = 0\nfor i in range({CALLS}):\n    n += host.echo(i) == i\nn\n"


def gather_program(calls: int) -> str:
    """``calls`` calls under ``asyncio.gather``, ``BATCH`` at a time; its value is ``calls``."""
    return (
        "import asyncio\n"
        "async def go(total):\n"
        "    n = 0\n"
        f"    for first in range(0, total, {BATCH}):\n"
        f"        ids = range(first, min(first + {BATCH}, total))\n"
        "        values = await asyncio.gather(*[host.echo(i) for i in ids])\n"
        "        n += sum(v == i for v, i in zip(values, ids))\n"
        "    return n\n"
        f"await go({calls})\n"
    )


#: The call-heavy programs: (source, expected value, expected calls).
CALL_PROGRAMS: Final = {
    "seq": (SEQ_PROGRAM, CALLS, CALLS),
    "gather": (gather_program(CALLS), CALLS, CALLS),
    "async0": (gather_program(0), 0, 0),
}

#: The breakdown's program: trivial, but it tells when it started and how much CPU the
#: child had used by then.
STAMP_PROGRAM: Final = (
    "import sys, time\n[time.perf_counter_ns(), time.process_time_ns(), len(sys.modules)]\n"
)

_ENV: Final = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _boot(imports: str, paths: Sequence[Path]) -> str:
    return f"import sys; sys.path[:0] = {[str(p) for p in paths]!r}; {imports}"


RUNNER_IMPORTS: Final = "from runner import _main; from runner._backends import python"
SPAWNS: Final = {
    "bare": (
        "python -I -S -c pass",
        (sys.executable, "-I", "-S", "-c", "pass"),
    ),
    "msgspec": (
        "python -I -S -c 'import msgspec' (msgspec's dir on sys.path)",
        (sys.executable, "-I", "-S", "-c", _boot("import msgspec", [MSGSPEC_DIR])),
    ),
    "runner": (
        "python -I -S -c 'from runner import _main; from runner._backends import python'",
        (sys.executable, "-I", "-S", "-c", _boot(RUNNER_IMPORTS, [ROOT, MSGSPEC_DIR])),
    ),
}

CellKind = Literal["spawn", "trivial", "calls"]


@dataclass(frozen=True)
class Cell:
    """One batch of runs of one thing, in one round."""

    key: str
    kind: CellKind
    backend: str = ""
    level: str = ""
    spawn: str = ""

    def series(self) -> list[str]:
        """The keys of the series this cell adds samples to."""
        if self.kind == "spawn":
            return [f"spawn/{self.spawn}"]
        if self.kind == "trivial":
            return [f"{self.backend}/{self.level}/trivial"]
        return [f"{self.backend}/{self.level}/{w}" for w in CALL_PROGRAMS]


def make_cells(backends: Sequence[str]) -> list[Cell]:
    """The cells of one round, in their first-round order."""
    cells = [Cell(f"spawn/{name}", "spawn", spawn=name) for name in SPAWNS]
    for backend in backends:
        cells.extend(Cell(f"{backend}/{lv}/trivial", "trivial", backend, lv) for lv in LEVELS)
        cells.extend(Cell(f"{backend}/{lv}/calls", "calls", backend, lv) for lv in LEVELS)
    return cells


@dataclass(frozen=True)
class Sizes:
    """How many runs each cell makes per round."""

    runs: int  # trivial and spawn runs per cell
    call_runs: int  # runs of each call-heavy program per cell
    warmup: int  # uncounted trivial and spawn runs per cell
    call_warmup: int  # uncounted runs of each call-heavy program per cell
    breakdown_runs: int


# -- stopping cleanly -------------------------------------------------------------------


@dataclass
class _Stop:
    signum: int = 0


_STOP: Final = _Stop()


def _on_stop_signal(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: stop after the run in progress (which then cleans up after itself).

    Raising from the handler would land inside an event loop or inside the sandbox's
    shielded clean-up; a flag checked between runs lets every run end (and reap) normally.
    """
    _STOP.signum = signum


def _check_stop() -> None:
    if _STOP.signum == signal.SIGINT:
        raise KeyboardInterrupt
    if _STOP.signum:
        name = signal.Signals(_STOP.signum).name
        print(
            f"stopped by {name}: the run in progress finished and was cleaned up", file=sys.stderr
        )
        raise SystemExit(128 + _STOP.signum)


@contextlib.contextmanager
def pinned(pin: str) -> Iterator[None]:
    """``same``: this process (and what it starts) on one CPU for the block."""
    own = os.sched_getaffinity(0)
    if pin == "same":
        os.sched_setaffinity(0, {min(own)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, own)


def children_left() -> list[str]:
    """This process's descendants but the sandbox's zygote and keeper, which stay for the
    next run (there must be none between cells)."""
    out = []
    keep = sandbox_supervisor.host_processes()
    for proc in psutil.Process().children(recursive=True):
        if proc.pid in keep:
            continue
        try:
            out.append(f"{proc.pid} {proc.status()} {' '.join(proc.cmdline())[:120]}")
        except psutil.Error:
            continue
    return out


# -- the cells --------------------------------------------------------------------------


#: A run or spawn killed with SIGKILL that nobody here asked for (no budget is set, nothing
#: is killed on purpose) was killed from outside: on a shared machine, a test suite of this
#: project sweeps every ``runner._main`` process. Such a sample is dropped and run again, at
#: most this many times in a row, and listed in the JSON (``externally_killed``).
MAX_RETRIES: Final = 3
_KILLED: Final[list[str]] = []


def _note_killed(what: str, attempt: int) -> None:
    _KILLED.append(f"{dt.datetime.now().isoformat(timespec='seconds')} {what}")
    print(f"  note: {what} was SIGKILLed from outside; run again", flush=True)
    if attempt >= MAX_RETRIES:
        raise RuntimeError(f"{what}: killed from outside {attempt + 1} times in a row")


def _spawn_once(argv: Sequence[str], timeout: float) -> tuple[int, int]:
    """Popen ``argv`` and reap it: (exit status, nanoseconds from Popen to reaped exit)."""
    t0 = time.perf_counter_ns()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_ENV,
    )
    try:
        # Not proc.wait(timeout): with a timeout it polls, sleeping up to 50 ms between
        # looks. The pidfd is readable the moment the child exits.
        pidfd = os.pidfd_open(proc.pid)
        try:
            exited, _, _ = select.select([pidfd], [], [], timeout)
        finally:
            os.close(pidfd)
        if not exited:
            raise TimeoutError(f"{argv[-1]!r} overran {timeout} s")
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, time.perf_counter_ns() - t0


def spawn_batch(argv: Sequence[str], runs: int, warmup: int, timeout: float) -> list[float]:
    """Seconds from Popen to reaped exit of ``argv``, ``runs`` times after ``warmup``."""
    times: list[float] = []
    for i in range(warmup + runs):
        for attempt in range(MAX_RETRIES + 1):
            _check_stop()
            code, elapsed = _spawn_once(argv, timeout)
            if code != -signal.SIGKILL:
                break
            _note_killed(f"spawn {argv[-1]!r}", attempt)
        if code != 0:
            raise RuntimeError(f"{argv[-1]!r} exited {code}")
        if i >= warmup:
            times.append(elapsed / 1e9)
    return times


def echo(x: Any) -> Any:
    """The call-heavy programs' tool: its argument, back."""
    return x


ECHO: Final = sandbox.Tool(echo, inline=True)


def _check(what: str, result: sandbox.RunResult, value: Any, calls: int) -> None:
    if not result.ok or result.value != value or result.calls != calls:
        raise RuntimeError(
            f"{what}: ok={result.ok} value={result.value!r} calls={result.calls} "
            f"(expected {value!r}, {calls} calls): {result.error}"
        )


def _killed_from_outside(result: sandbox.RunResult) -> bool:
    return (
        result.level in ("process", "confined")
        and result.signal == signal.SIGKILL
        and not result.ok
    )


async def _timed_run(program: str, level: str, limit: float) -> tuple[float, sandbox.RunResult]:
    """One ``sandbox.run``, timed; run again if it was killed from outside."""
    for attempt in range(MAX_RETRIES + 1):
        _check_stop()
        t0 = time.perf_counter_ns()
        with anyio.fail_after(limit):
            result = await sandbox.run(program, tools=[ECHO], level=level)
        elapsed = time.perf_counter_ns() - t0
        if not _killed_from_outside(result):
            break
        _note_killed(f"{level} run of {program[:30]!r}", attempt)
    return elapsed / 1e9, result


async def trivial_batch(level: str, runs: int, warmup: int, limit: float) -> list[float]:
    """End-to-end seconds of ``sandbox.run("1 + 1")``."""
    times = []
    for i in range(warmup + runs):
        seconds, result = await _timed_run(TRIVIAL, level, limit)
        _check(f"trivial/{level}", result, 2, 0)
        if i >= warmup:
            times.append(seconds)
    return times


async def calls_batch(level: str, runs: int, warmup: int, limit: float) -> dict[str, list[float]]:
    """Run time of each call-heavy program, the programs taking turns run by run."""
    times: dict[str, list[float]] = {w: [] for w in CALL_PROGRAMS}
    order = list(CALL_PROGRAMS)
    for i in range(warmup + runs):
        shift = i % len(order)
        for workload in order[shift:] + order[:shift]:
            program, value, calls = CALL_PROGRAMS[workload]
            seconds, result = await _timed_run(program, level, limit)
            _check(f"{workload}/{level}", result, value, calls)
            if i >= warmup:
                times[workload].append(seconds)
    return times


def run_cell(cell: Cell, sizes: Sizes, timeout: float) -> dict[str, list[float]]:
    """One cell: its series' samples, in seconds."""
    if cell.kind == "spawn":
        argv = SPAWNS[cell.spawn][1]
        return {cell.series()[0]: spawn_batch(argv, sizes.runs, sizes.warmup, timeout)}
    if cell.kind == "trivial":
        times = anyio.run(
            trivial_batch, cell.level, sizes.runs, sizes.warmup, timeout, backend=cell.backend
        )
        return {cell.series()[0]: times}
    by_workload = anyio.run(
        calls_batch, cell.level, sizes.call_runs, sizes.call_warmup, timeout, backend=cell.backend
    )
    return {f"{cell.backend}/{cell.level}/{w}": t for w, t in by_workload.items()}


Samples = dict[str, dict[str, list[list[float]]]]  # pin -> series -> rounds -> seconds


def run_rounds(
    cells: list[Cell], pins: list[str], rounds: int, sizes: Sizes, timeout: float
) -> tuple[Samples, list[str]]:
    """Every cell, every placement, ``rounds`` times; the first cell moves every round."""
    samples: Samples = {pin: {s: [] for c in cells for s in c.series()} for pin in pins}
    leftovers: list[str] = []
    for r in range(rounds):
        shift = r % len(cells)
        order = cells[shift:] + cells[:shift]
        for pin in pins:
            t0 = time.perf_counter()
            line = []
            for cell in order:
                with pinned(pin):
                    got = run_cell(cell, sizes, timeout)
                left = children_left()
                if left:
                    leftovers.extend(f"after {cell.key} pin={pin}: {p}" for p in left)
                    print(f"  WARNING: processes left after {cell.key}: {left}", flush=True)
                for series, times in got.items():
                    samples[pin][series].append(times)
                    if cell.kind != "calls":
                        line.append(f"{cell.key} {statistics.median(times) * 1e3:.2f}")
            print(
                f"  round {r + 1}/{rounds} pin={pin:4} ({time.perf_counter() - t0:.1f} s) "
                "p50 ms: " + ", ".join(line),
                flush=True,
            )
    return samples, leftovers


# -- the breakdown: timestamps inside the process level ---------------------------------


class _Timeline:
    """Marks (first time a point is reached) and spans (summed durations) of one run."""

    def __init__(self) -> None:
        self.marks: dict[str, int] = {}
        self.spans: dict[str, int] = {}

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.perf_counter_ns())

    def add(self, name: str, ns: int) -> None:
        self.spans[name] = self.spans.get(name, 0) + ns


_TL = _Timeline()


def _reset_timeline() -> _Timeline:
    global _TL
    _TL = _Timeline()
    return _TL


class _Patches:
    """Attribute replacements, undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[tuple[object, str, object]] = []

    def set(self, owner: object, name: str, value: object) -> None:
        old = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
        self._undo.append((owner, name, old))
        setattr(owner, name, value)

    def undo(self) -> None:
        while self._undo:
            owner, name, old = self._undo.pop()
            setattr(owner, name, old)


def _spanned(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            _TL.add(name, time.perf_counter_ns() - t0)

    return wrapper


class _ModuleProxy:
    """A module, with some of its functions wrapped (for one importer's globals only)."""

    def __init__(self, real: Any, overrides: dict[str, Callable[..., Any]]) -> None:
        self._real = real
        self._overrides = overrides

    def __getattr__(self, name: str) -> Any:
        if name in self._overrides:
            return self._overrides[name]
        return getattr(self._real, name)


@contextlib.contextmanager
def instrumented() -> Iterator[None]:
    """Stamp the steps of :func:`sandbox._engine._process.run_process` (breakdown pass only)."""
    patches = _Patches()
    real_starter = Starter
    run_cls: Any = sandbox_process._Run
    child_cls: Any = sandbox_supervisor.Child
    process_cls: Any = sandbox_runner.RunnerProcess
    cgroup_cls: Any = CgroupSet
    orig_acquire = sandbox_supervisor.acquire
    orig_ready = vars(child_cls)["wait_ready"]
    orig_end = vars(run_cls)["stop"]
    orig_wait = vars(process_cls)["wait_exit"]

    async def acquire(*args: Any, **kwargs: Any) -> Any:
        child = await orig_acquire(*args, **kwargs)
        _TL.mark("acquired")
        return child

    async def wait_ready(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await orig_ready(self, *args, **kwargs)
        finally:
            _TL.mark("ready")

    class TimedStarter:
        def __init__(self, channel: Any) -> None:
            self._inner = real_starter(channel)

        async def start(self, start: Any, **options: Any) -> Any:
            _TL.mark("start_sent")
            try:
                return await self._inner.start(start, **options)
            finally:
                _TL.mark("result_received")

    async def end(self: Any, *, answered: bool = False) -> None:
        first = not self.stopped
        if first:
            _TL.mark("end_enter")
        try:
            await orig_end(self, answered=answered)
        finally:
            if first:
                _TL.mark("end_exit")

    async def wait_exit(self: Any, seconds: float) -> bool:
        done: bool = await orig_wait(self, seconds)
        if done:
            _TL.mark("runner_exited")
        return done

    try:
        patches.set(sandbox_process, "acquire", acquire)
        patches.set(child_cls, "wait_ready", wait_ready)
        patches.set(sandbox_process, "Starter", TimedStarter)
        patches.set(run_cls, "stop", end)
        patches.set(process_cls, "wait_exit", wait_exit)
        patches.set(
            sandbox_process, "_set_rlimits", _spanned(sandbox_process._set_rlimits, "rlimits")
        )
        patches.set(child_cls, "release", _spanned(vars(child_cls)["release"], "release"))
        for name, span in (
            ("set_limits", "cgroups_set_limits"),
            ("kill_all", "cgroups_kill_all"),
            ("remove", "cgroups_remove"),
        ):
            patches.set(cgroup_cls, name, _spanned(vars(cgroup_cls)[name], span))
        yield
    finally:
        patches.undo()


async def breakdown_batch(level: str, spawn: str, runs: int, limit: float) -> list[dict[str, Any]]:
    """Timestamped runs of the stamp program at ``level``, children made by ``spawn`` (a
    pool is refilled, untimed, before each run: its fork is not on the run's path)."""
    out = []
    pool = sandbox.Pool(size=2) if spawn == "pool" else None
    try:
        for i in range(runs + 1):
            for attempt in range(MAX_RETRIES + 1):
                _check_stop()
                if pool is not None:
                    pool.wait_full(limit)
                tl = _reset_timeline()
                t_call = time.perf_counter_ns()
                with anyio.fail_after(limit):
                    result = await sandbox.run(STAMP_PROGRAM, level=level, spawn=pool or spawn)
                t_return = time.perf_counter_ns()
                if not _killed_from_outside(result):
                    break
                _note_killed("breakdown run", attempt)
            if not result.ok or not isinstance(result.value, list):
                raise RuntimeError(f"breakdown run failed: {result.error}")
            if i == 0:
                continue  # warm-up
            child_t0, child_cpu, child_modules = result.value
            m = {k: v - t_call for k, v in tl.marks.items()}
            m["child_program_start"] = child_t0 - t_call
            m["return"] = t_return - t_call
            out.append(
                {
                    "marks_ns": m,
                    "spans_ns": dict(tl.spans),
                    "child_cpu_ns_at_program_start": child_cpu,
                    "child_modules_at_program_start": child_modules,
                    "child_cpu_ns_total": None
                    if result.cpu_time is None
                    else int(result.cpu_time * 1e9),
                }
            )
    finally:
        if pool is not None:
            pool.close()
    return out


#: The (level, spawn mode) cells the breakdown times.
BREAKDOWN_CELLS: Final = (("process", "zygote"), ("process", "pool"), ("confined", "pool"))
#: The critical path of one run, as (label, from mark, to mark); they add up to the total.
PHASES: Final = (
    ("get a child: pool take, or request to the zygote", "", "acquired"),
    ("child ready: fork, cgroups joined, walls up", "acquired", "ready"),
    ("limits set, Start sent", "ready", "start_sent"),
    ("Start -> the program starts (child)", "start_sent", "child_program_start"),
    ("program, Result back to the parent", "child_program_start", "result_received"),
    ("Result -> clean-up starts", "result_received", "end_enter"),
    (
        "clean-up: stop() (kill every process; the remains are cleared later)",
        "end_enter",
        "end_exit",
    ),
    ("after clean-up: drains, RunResult", "end_exit", "return"),
)
#: Parent work inside those phases (marks), for the report.
INSIDE: Final = (("stop(): until the runner's exit is seen", "end_enter", "runner_exited"),)


def analyse_breakdown(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median ms of each phase and span over the breakdown runs, with shares of the total."""

    def med(xs: list[float]) -> float:
        return statistics.median(xs)

    total = med([r["marks_ns"]["return"] / 1e6 for r in runs])
    phases = {}
    for label, a, b in (*PHASES, *INSIDE):
        vals = [
            (r["marks_ns"][b] - (r["marks_ns"][a] if a else 0)) / 1e6
            for r in runs
            if b in r["marks_ns"] and (not a or a in r["marks_ns"])
        ]
        if vals:
            phases[label] = {"ms": summarize(vals), "share_of_total": med(vals) / total}
    span_names = sorted({k for r in runs for k in r["spans_ns"]})
    spans = {
        name: {"ms": summarize([r["spans_ns"].get(name, 0) / 1e6 for r in runs])}
        for name in span_names
    }
    return {
        "runs": len(runs),
        "total_ms": summarize([r["marks_ns"]["return"] / 1e6 for r in runs]),
        "phases": phases,
        "spans": spans,
        "child_cpu_ms_at_program_start": summarize(
            [r["child_cpu_ns_at_program_start"] / 1e6 for r in runs]
        ),
        "child_cpu_ms_total": summarize(
            [r["child_cpu_ns_total"] / 1e6 for r in runs if r["child_cpu_ns_total"] is not None]
            or [float("nan")]
        ),
        "child_modules_at_program_start": runs[0]["child_modules_at_program_start"],
        "samples": runs,
    }


_IMPORTTIME: Final = re.compile(r"import time:\s*(\d+)\s*\|\s*(\d+)\s*\|(\s*)(\S+)")


def import_times(repeats: int, timeout: float) -> dict[str, Any]:
    """``-X importtime`` of the runner's imports: median cumulative ms of the main modules."""
    argv = [
        sys.executable,
        "-I",
        "-S",
        "-X",
        "importtime",
        "-c",
        _boot(RUNNER_IMPORTS, [ROOT, MSGSPEC_DIR]),
    ]
    per_module: dict[str, list[float]] = {}
    totals: list[float] = []
    for _ in range(repeats):
        _check_stop()
        done = subprocess.run(
            argv, capture_output=True, text=True, env=_ENV, timeout=timeout, check=True
        )
        total = 0.0
        this_run: dict[str, float] = {}
        for m in _IMPORTTIME.finditer(done.stderr):
            cumulative_ms = int(m.group(2)) / 1e3
            # A name can show twice (imported a second time, it costs nothing): keep the
            # import that did the work.
            name = m.group(4)
            this_run[name] = max(this_run.get(name, 0.0), cumulative_ms)
            if len(m.group(3)) == 1:  # a top-level import of the command
                total += cumulative_ms
        for name, ms in this_run.items():
            per_module.setdefault(name, []).append(ms)
        totals.append(total)
    key_modules = (
        "typing",
        "msgspec",
        "typing_extensions",
        "protocol",
        "runner._backends",
        "runner",
        "runner._backends.python",
    )
    return {
        "command": argv,
        "repeats": repeats,
        "top_level_total_ms": statistics.median(totals),
        "cumulative_ms": {
            name: statistics.median(per_module[name]) for name in key_modules if name in per_module
        },
        "note": "cumulative ms of each module where it was imported (a module first "
        "imported by another is in that one's time); importtime adds overhead of its own. "
        "typing is imported before msgspec (by runner._backends) and is not in msgspec's "
        "time; typing_extensions (with inspect, ast, tokenize) is",
    }


# -- numbers ----------------------------------------------------------------------------


def pstats(xs: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99 (linear interpolation, ``statistics.quantiles`` inclusive), mean, in ms."""
    ms = [x * 1e3 for x in xs]
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return {
        "p50": q[49],
        "p90": q[89],
        "p99": q[98],
        "mean": statistics.fmean(ms),
        "min": min(ms),
        "max": max(ms),
        "n": len(ms),
    }


STATS: Final = ("p50", "p90", "p99", "mean")


def analyse(samples: dict[str, list[list[float]]], backends: Sequence[str]) -> dict[str, Any]:
    """Per-round stats and ratios, summarised over rounds (median [min-max])."""
    series: dict[str, Any] = {}
    per_round: dict[str, list[dict[str, float]]] = {}
    for key, rounds in samples.items():
        stats = [pstats(r) for r in rounds]
        per_round[key] = stats
        series[key] = {
            "per_round": stats,
            "summary": {s: summarize([st[s] for st in stats]) for s in STATS},
            "pooled": pstats([x for r in rounds for x in r]),
            "samples_ms": [[x * 1e3 for x in r] for r in rounds],
        }

    def p50s(key: str) -> list[float]:
        return [st["p50"] for st in per_round[key]]

    per_call: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for backend in backends:
        us: dict[str, list[float]] = {}
        for level in LEVELS:
            base = p50s(f"{backend}/{level}/trivial")
            async0 = p50s(f"{backend}/{level}/async0")
            for workload, ref_name, ref in (
                ("seq", "trivial", base),
                ("gather", "trivial", base),
                ("gather", "async0", async0),
            ):
                runs = p50s(f"{backend}/{level}/{workload}")
                vals = [(x - b) * 1e3 / CALLS for x, b in zip(runs, ref, strict=True)]
                name = f"{backend}/{level}/{workload}-vs-{ref_name}"
                us[f"{level}/{workload}-vs-{ref_name}"] = vals
                per_call[name] = {"us_per_call": summarize(vals), "per_round": vals}
        proc = p50s(f"{backend}/process/trivial")
        inproc = p50s(f"{backend}/in_process/trivial")
        defs: dict[str, tuple[list[float], list[float], str]] = {
            "process_trivial/bare_spawn": (
                proc,
                p50s("spawn/bare"),
                "p50 process trivial run / p50 python -I -S -c pass",
            ),
            "process_trivial/msgspec_spawn": (
                proc,
                p50s("spawn/msgspec"),
                "p50 process trivial run / p50 python -I -S importing msgspec",
            ),
            "process_trivial/runner_imports_spawn": (
                proc,
                p50s("spawn/runner"),
                "p50 process trivial run / p50 python -I -S importing the runner's modules",
            ),
            "in_process_trivial/process_trivial": (
                inproc,
                proc,
                "p50 in_process trivial / p50 process trivial",
            ),
            "confined_trivial/process_trivial": (
                p50s(f"{backend}/confined/trivial"),
                proc,
                "p50 confined trivial / p50 process trivial",
            ),
        }
        for workload in ("seq-vs-trivial", "gather-vs-trivial", "gather-vs-async0"):
            defs[f"per_call_{workload}/process/in_process"] = (
                us[f"process/{workload}"],
                us[f"in_process/{workload}"],
                f"process us/call / in_process us/call ({workload})",
            )
            defs[f"per_call_{workload}/confined/process"] = (
                us[f"confined/{workload}"],
                us[f"process/{workload}"],
                f"confined us/call / process us/call ({workload})",
            )
        for name, (num, den, definition) in defs.items():
            vals = [a / b if b else float("nan") for a, b in zip(num, den, strict=True)]
            ratios[f"{backend}/{name}"] = {
                "ratio": summarize(vals),
                "per_round": vals,
                "definition": definition,
            }
        over = [a - b for a, b in zip(proc, p50s("spawn/runner"), strict=True)]
        ratios[f"{backend}/process_trivial-runner_imports_spawn_ms"] = {
            "ratio": summarize(over),
            "per_round": over,
            "definition": "p50 process trivial - p50 runner-imports spawn, in ms (a difference)",
        }
    return {"series": series, "per_call": per_call, "ratios": ratios}


def _mm(s: dict[str, float], digits: int = 2) -> str:
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"


def _rr(s: dict[str, float]) -> str:
    return f"{s['median']:.3g} [{s['min']:.3g}-{s['max']:.3g}]"


PIN_TITLES: Final = {
    "none": "not pinned (the scheduler places parent, children and threads)",
    "same": "pinned to one CPU (parent, children, worker threads)",
}


def print_tables(pin: str, res: dict[str, Any], backends: Sequence[str]) -> None:
    """Latency, per-call cost and ratios for one placement."""
    print()
    print(f"=== pin={pin}: {PIN_TITLES[pin]} ===")
    print()
    print(
        '(1)+(3) trivial "1 + 1" end to end, and the spawn baselines: ms per run, '
        "median over rounds [min-max] of each round's stat"
    )
    print(f"  {'what':34} " + " ".join(f"{s:22}" for s in STATS))
    rows = [(f"spawn: {name}", f"spawn/{name}") for name in SPAWNS]
    rows += [(f"{b} {lv}", f"{b}/{lv}/trivial") for b in backends for lv in LEVELS]
    for label, key in rows:
        summ = res["series"][key]["summary"]
        digits = 3 if summ["p50"]["median"] < 1 else 1
        print(f"  {label:34} " + " ".join(f"{_mm(summ[s], digits):22}" for s in STATS))
    print()
    print(
        f"(2) call-heavy: {CALLS} calls to an inline echo; run p50 ms and us per call "
        "(run - reference run) / calls"
    )
    print(
        f"  {'backend level':22} {'seq run ms':20} {'seq us/call':20} {'gather run ms':20} "
        f"{'gather us/call':20} {'async0 run ms':20} {'gather-async0 us/call':20}"
    )
    for b in backends:
        for lv in LEVELS:
            s = res["series"]
            pc = res["per_call"]
            print(
                f"  {b + ' ' + lv:22} {_mm(s[f'{b}/{lv}/seq']['summary']['p50'], 1):20} "
                f"{_mm(pc[f'{b}/{lv}/seq-vs-trivial']['us_per_call'], 1):20} "
                f"{_mm(s[f'{b}/{lv}/gather']['summary']['p50'], 1):20} "
                f"{_mm(pc[f'{b}/{lv}/gather-vs-trivial']['us_per_call'], 1):20} "
                f"{_mm(s[f'{b}/{lv}/async0']['summary']['p50'], 1):20} "
                f"{_mm(pc[f'{b}/{lv}/gather-vs-async0']['us_per_call'], 1):20}"
            )
    print()
    print("ratios, per round, median [min-max]")
    for name, entry in res["ratios"].items():
        print(f"  {name:58} {_rr(entry['ratio']):28} {entry['definition']}")


def print_breakdown(key: str, bd: dict[str, Any]) -> None:
    """Where a run's time goes."""
    print()
    print(
        f"where the time goes, {key} ({bd['runs']} timestamped runs, "
        f"total p50 {bd['total_ms']['median']:.1f} ms)"
    )
    for label, entry in bd["phases"].items():
        print(f"  {label:58} {_mm(entry['ms']):24} {entry['share_of_total'] * 100:5.1f} %")
    print("  parent spans (summed per run, ms):")
    for name, entry in bd["spans"].items():
        print(f"    {name:56} {_mm(entry['ms'])}")
    print(
        f"  child CPU at program start: {_mm(bd['child_cpu_ms_at_program_start'])} ms, "
        f"{bd['child_modules_at_program_start']} modules loaded; child CPU in all: "
        f"{_mm(bd['child_cpu_ms_total'])} ms"
    )


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_levels",
        description="End-to-end cost of sandbox.run at the in_process and process levels, "
        "against bare interpreter spawns, measured in the same run (asyncio and trio).",
    )
    parser.add_argument("--quick", action="store_true", help="fewer runs (under a minute)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument(
        "--runs", type=int, default=None, help="trivial and spawn runs per cell (100; quick 12)"
    )
    parser.add_argument(
        "--call-runs",
        type=int,
        default=None,
        help="runs of each call-heavy program per cell (8; quick 2)",
    )
    parser.add_argument(
        "--breakdown-runs",
        type=int,
        default=None,
        help="timestamped process runs per backend and pin (20; quick 6; 0: none)",
    )
    parser.add_argument(
        "--backend", action="append", choices=BACKENDS, help="repeatable (default both)"
    )
    parser.add_argument(
        "--pin", action="append", choices=PINS, help="repeatable (default: none and same)"
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per run")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="results file (default benchmarks/results/levels-<date>[-quick].json)",
    )
    opts = parser.parse_args(argv)
    for name in ("rounds", "runs", "call_runs"):
        value = getattr(opts, name)
        if value is not None and value < 2:
            parser.error(f"--{name.replace('_', '-')} must be at least 2")
    return opts


def main(argv: list[str] | None = None) -> None:
    """Run the cells, print the tables, write the JSON."""
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    args = sys.argv[1:] if argv is None else argv
    opts = parse_args(args)
    q = opts.quick
    rounds: int = opts.rounds or 3
    sizes = Sizes(
        runs=opts.runs or (12 if q else 100),
        call_runs=opts.call_runs or (2 if q else 8),
        warmup=1 if q else 2,
        call_warmup=0 if q else 1,
        breakdown_runs=(6 if q else 20) if opts.breakdown_runs is None else opts.breakdown_runs,
    )
    backends: list[str] = list(dict.fromkeys(opts.backend or BACKENDS))
    pins: list[str] = list(dict.fromkeys(opts.pin or PINS))
    cells = make_cells(backends)
    meta = environment(args)
    meta["git"] = git_head(ROOT)
    meta["cgroups_usable"] = sandbox._engine._levels.cgroups_usable()
    print(
        f"levels benchmark: {rounds} rounds x pins {'/'.join(pins)} x {len(cells)} cells "
        f"({sizes.runs} trivial/spawn runs, {sizes.call_runs} runs of each call program per "
        f"cell), backends {', '.join(backends)}; load {os.getloadavg()[0]:.2f}"
    )
    t0 = time.perf_counter()
    breakdown: dict[str, Any] = {}
    try:
        samples, leftovers = run_rounds(cells, pins, rounds, sizes, opts.timeout)
        if sizes.breakdown_runs:
            for pin in pins:
                for backend in backends:
                    for level, spawn in BREAKDOWN_CELLS:
                        with pinned(pin), instrumented():
                            runs = anyio.run(
                                breakdown_batch,
                                level,
                                spawn,
                                sizes.breakdown_runs,
                                opts.timeout,
                                backend=backend,
                            )
                        key = f"{level}/{spawn} {backend}/pin={pin}"
                        breakdown[key] = analyse_breakdown(runs)
            breakdown["import_times"] = import_times(5, opts.timeout)
    except KeyboardInterrupt:
        print("interrupted: the run in progress finished and was cleaned up", file=sys.stderr)
        raise SystemExit(130) from None
    leftovers.extend(children_left())
    wall = time.perf_counter() - t0
    results = {pin: analyse(samples[pin], backends) for pin in pins}
    for pin in pins:
        print_tables(pin, results[pin], backends)
    for key, bd in breakdown.items():
        if key != "import_times":
            print_breakdown(key, bd)
    if "import_times" in breakdown:
        it = breakdown["import_times"]
        print()
        print(
            f"runner imports (-X importtime, median of {it['repeats']}): "
            f"{it['top_level_total_ms']:.1f} ms in all; cumulative: "
            + ", ".join(f"{k} {v:.1f}" for k, v in it["cumulative_ms"].items())
        )
    print()
    if _KILLED:
        print(f"runs killed from outside and run again: {len(_KILLED)}")
    print(
        f"processes left behind: {'; '.join(leftovers) if leftovers else 'none'}   "
        f"(wall {wall:.1f} s)"
    )

    meta["loadavg_at_end"] = list(os.getloadavg())
    changed = changed_sources(meta["git"].get("measured_sources", {}), ROOT)
    meta["sources_changed_during_run"] = changed
    if changed:
        print(f"WARNING: sources changed while measuring: {', '.join(changed)}")
    meta["wall_seconds"] = round(wall, 2)
    document = {
        "benchmark": "bench_levels",
        "environment": meta,
        "parameters": {
            "rounds": rounds,
            "quick": q,
            "runs_per_cell": sizes.runs,
            "call_runs_per_cell": sizes.call_runs,
            "warmup_runs_per_cell": {
                "trivial_and_spawn": sizes.warmup,
                "calls": sizes.call_warmup,
            },
            "breakdown_runs": sizes.breakdown_runs,
            "backends": backends,
            "pins": {pin: PIN_TITLES[pin] for pin in pins},
            "cell_order_round_1": [c.key for c in cells],
            "rotation": "round r starts at cell r (mod the number of cells)",
            "calls": CALLS,
            "gather_batch": BATCH,
            "programs": {
                "trivial": TRIVIAL,
                **{k: v[0] for k, v in CALL_PROGRAMS.items()},
                "breakdown": STAMP_PROGRAM,
            },
            "spawns": {k: {"label": v[0], "argv": list(v[1])} for k, v in SPAWNS.items()},
            "units": "ms per run; us per call; percentiles by linear interpolation",
        },
        "results": results,
        "breakdown": breakdown,
        "processes_left_behind": leftovers,
        "externally_killed": list(_KILLED),
    }
    path: Path = opts.json or RESULTS_DIR / (
        f"levels-{dt.date.today().isoformat()}{'-quick' if q else ''}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n")
    print(f"results written to {path}")
    if leftovers:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
