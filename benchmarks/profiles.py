"""Why a figure of the study misses its floor: profiles measured in the study's own run.

A MISS in the targets table says that a figure is too high; the profiles here say where
its time goes, measured on the same machine, in the same run, on the same code. Four of
them:

1. **The run's path, phase by phase** (:func:`measure_phases`): the cells the latency
   targets name, timed on the host with stamps at the steps of a run and one taken by the
   program itself. The program's first line reads ``time.perf_counter()``: the host and
   the child read the same clock (``CLOCK_MONOTONIC``), so the host's stamp when it sends
   the Start and the program's stamp say how long the child took to reach the program.
   The host's stamps come from wrapping the engine's own functions for the section's
   length (``acquire``, ``StarterCore.send_start``, ``_Run._await_result``), restored
   after; nothing is added to the engine for it. Each run starts on a quiet host: every
   pool full and every earlier run's remains cleared (untimed); an ``in_process`` run right
   after an uncounted one, back to back as the study's latency rounds time that level.
   Beside ``in_process``: the bare cost of what that level is made of, a worker thread
   woken through a queue and the event loop woken through a pipe (timed the same way).
2. **What a fresh process costs here, before any wall** (:func:`measure_processes`):
   a second interpreter that holds what the zygote holds (``runner._zygote._prepare``)
   forks children that exit at once, then children that make a network namespace, and
   measures the first write to fresh pages and to pages shared copy-on-write with its
   parent; a bare ``python -I -S`` forks the same way, the baseline. CPU time from
   ``getrusage`` (this interpreter and its reaped children) and, because the kernel tears a
   namespace down in its own threads, from ``/proc/stat`` for the whole machine.
3. **Where an idle confined child's memory is** (:func:`measure_memory`): its private
   pages by mapping (``/proc/PID/smaps``), for the USS target.
4. **Where the machine's CPU goes under the sustained confined load**
   (:mod:`benchmarks.cpu_profile`): every CPU sampled with its call chains while runs
   follow one another, each sample given a part of the machine and a kind of work.

:data:`EXPLAINED_BY` says which profile explains which target; the study's page shows, for
each MISS, the profile that explains it (``study.render_markdown``). The profiles alone,
printed as that section of the page (about a minute; ``--quick`` a third of it)::

    .venv/bin/python -m benchmarks.profiles [--quick]
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import msgspec
import psutil

import sandbox
import sandbox._children._supervisor
from protocol import StarterCore
from sandbox._engine import _process

from . import cpu_profile
from ._machine import ROOT
from .bench_levels import ECHO

if TYPE_CHECKING:
    from .study import Recorder


@dataclass(frozen=True)
class ProfileSizes:
    """How much the profiles measure."""

    rounds: int  # each round visits every phase cell once per sample, in turn
    per_round: int  # samples per cell per round
    forks: int  # forks per kind in the process profile
    pages: int  # pages written per page-cost figure
    cpu_seconds: float  # the machine sampled under the sustained load (profile 4)


PRESETS: Final = {
    "full": ProfileSizes(rounds=5, per_round=40, forks=300, pages=4096, cpu_seconds=6.0),
    "quick": ProfileSizes(rounds=3, per_round=15, forks=100, pages=2048, cpu_seconds=3.0),
    "smoke": ProfileSizes(rounds=1, per_round=2, forks=5, pages=64, cpu_seconds=1.0),
}

#: The program each phase cell runs: its first line is the child's stamp; its value
#: carries that stamp (and the workload's own value, checked).
STAMP: Final = "__stamp = __import__('time').perf_counter()\n"
LAST: Final = "__last = __import__('time').perf_counter()\n"
PROGRAMS: Final = {
    "trivial": STAMP + LAST + "[__stamp, __last]",
    "await": STAMP + "await host.echo(1)\n" + LAST + "[__stamp, __last]",
    "value": STAMP + "__value = 'x' * (1 << 20)\n" + LAST + "[__stamp, __last, __value]",
}
#: The cells the phases are measured at: (workload, level, spawn), in the targets' order.
PHASE_CELLS: Final = {
    "confined/pool": ("trivial", "confined", "pool"),
    "await@confined/pool": ("await", "confined", "pool"),
    "confined/zygote": ("trivial", "confined", "zygote"),
    "process/pool": ("trivial", "process", "pool"),
    "in_process": ("trivial", "in_process", None),
    "value@confined/pool": ("value", "confined", "pool"),
}
#: The phases of a run at a child level, in order, each from one stamp to the next.
PHASES: Final = (
    ("api", "the call to taking a child: the API, the budget, the program's size"),
    ("acquire", "taking a child (from the pool; on demand: asking the zygote to fork)"),
    ("ready", "the child ready (on demand: its walls), the run's limits, its objects"),
    ("to_program", "the Start sent, to the program's first line (in the child)"),
    ("program", "the program, its first line to its last"),
    (
        "to_host",
        "the program's last line to the Result's first bytes read by the host: the value "
        "encoded, the frame written, the host woken",
    ),
    ("read", "the rest of the Result read, and decoded"),
    ("after", "after the Result: the child stopped, its remains handed over, the result"),
)
#: ``in_process``'s phases: it has no child to take and no Start to send.
INPROCESS_PHASES: Final = (
    ("to_program", "the call to the program's first line (in a worker thread)"),
    ("program", "the program, its first line to its last"),
    ("after", "the program's last line to the return (its end, the pipe, the loop woken)"),
)
#: The steps profile 2 times in a fresh child (the ``zygote`` interpreter's only).
FRESH_STEPS: Final = (
    ("start_and_result", "a Start decoded and a Result framed (`RunnerCore`): every run"),
    ("event_loop", "`asyncio.run` of `await asyncio.sleep(0)`: a program that awaits"),
)
HANDOFF: Final = "thread_handoff"
HANDOFF_LABEL: Final = (
    "a worker thread woken through a queue, then the event loop through a pipe, and "
    "nothing else (what `in_process` is made of)"
)

#: Which profile explains each target's figure (``study.TARGETS`` and the peer targets);
#: the failed runs are explained by the study's own list of them.
EXPLAINED_BY: Final = {
    "confined_pool_trivial_p50_ms": ("phases", "confined/pool"),
    "confined_pool_await_p50_ms": ("phases", "await@confined/pool"),
    "confined_zygote_trivial_p50_ms": ("phases", "confined/zygote"),
    "process_pool_trivial_p50_ms": ("phases", "process/pool"),
    "in_process_trivial_p50_ms": ("phases", "in_process"),
    "confined_runs_per_s": ("cpu", None),
    "confined_cpu_per_run_ms": ("cpu", None),
    "idle_confined_child_uss_mb": ("memory", None),
    "confined_1mib_value_vs_raw_pipe": ("phases", "value@confined/pool"),
    "failed_runs": ("failures", None),
    "peers_confined_pool_vs_monty_reused": ("phases", "confined/pool"),
    "peers_confined_zygote_vs_monty_new_worker": ("phases", "confined/zygote"),
}
ANCHORS: Final = {
    "phases": "profile-1-the-runs-path-phase-by-phase",
    "processes": "profile-2-what-a-fresh-process-costs-here-before-any-wall",
    "memory": "profile-3-where-an-idle-confined-childs-memory-is",
    "cpu": cpu_profile.ANCHOR,
    "failures": "failed-samples",
}


def plan(rec: Recorder, sizes: ProfileSizes) -> None:
    """One progress task per profile."""
    rec.add("profile/phases", "profile   phases", sizes.rounds * sizes.per_round)
    rec.add("profile/processes", "profile   processes", 2)
    rec.add("profile/memory", "profile   memory", 1)
    rec.add("profile/cpu", "profile   cpu", 1)


async def measure(rec: Recorder, sizes: ProfileSizes, limit: float) -> dict[str, Any]:
    """Every profile; a profile that fails is recorded with its reason, not dropped."""
    out: dict[str, Any] = {"sizes": dataclasses.asdict(sizes)}
    out["phases"] = await measure_phases(rec, sizes, limit)
    rec.done("profile/phases", "")
    out["processes"] = await anyio.to_thread.run_sync(measure_processes, rec, sizes, limit)
    rec.done("profile/processes", "")
    out["memory"] = await measure_memory(rec, limit)
    rec.done("profile/memory", "")
    out["cpu"] = await cpu_profile.measure(rec, sizes.cpu_seconds, limit)
    rec.done("profile/cpu", cpu_profile.first(out["cpu"]) or out["cpu"].get("error", ""))
    return out


# -- 1. the run's path, phase by phase ------------------------------------------------------


@contextlib.contextmanager
def stamped() -> Iterator[dict[str, float]]:
    """The engine's steps stamped into the dict yielded (cleared by the caller per run);
    the engine as it was on exit."""
    stamps: dict[str, float] = {}
    clock = time.perf_counter
    acquire = vars(_process)["acquire"]  # what run_process calls, by its global name
    send_start = StarterCore.send_start
    receive_data = StarterCore.receive_data
    await_result = _process._Run._await_result

    async def stamped_acquire(*args: Any, **kwargs: Any) -> Any:
        stamps["acquire"] = clock()
        try:
            return await acquire(*args, **kwargs)
        finally:
            stamps["ready"] = clock()

    def stamped_send_start(self: Any, start: Any) -> Any:
        stamps["to_program"] = clock()
        return send_start(self, start)

    def stamped_receive_data(self: Any, data: Any) -> Any:
        stamps.setdefault("read", clock())
        return receive_data(self, data)

    async def stamped_await_result(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await await_result(self, *args, **kwargs)
        stamps["after"] = clock()
        return result

    patches = (
        (_process, "acquire", stamped_acquire),
        (StarterCore, "send_start", stamped_send_start),
        (StarterCore, "receive_data", stamped_receive_data),
        (_process._Run, "_await_result", stamped_await_result),
    )
    originals = [(where, name, getattr(where, name)) for where, name, _ in patches]
    try:
        for where, name, new in patches:
            setattr(where, name, new)
        yield stamps
    finally:
        for where, name, old in originals:
            setattr(where, name, old)


def _check(workload: str, result: sandbox.RunResult) -> tuple[float, float]:
    """The program's stamps (its first line, its last) from its value, once the value is
    checked.

    Raises:
        ValueError: the run failed or its value is not the workload's.
    """
    value = result.value
    expected_calls = 1 if workload == "await" else 0
    size = 3 if workload == "value" else 2
    if not (
        result.ok
        and result.calls == expected_calls
        and isinstance(value, list)
        and len(value) == size
        and all(isinstance(v, float) for v in value[:2])
        and (workload != "value" or value[2] == "x" * (1 << 20))
    ):
        raise ValueError(f"ok={result.ok} calls={result.calls} error={result.error!r}")
    return value[0], value[1]


async def _phase_sample(
    cell: str, pools: dict[str, sandbox.Pool], stamps: dict[str, float], limit: float
) -> dict[str, float]:
    """One stamped run of ``cell``: each phase's milliseconds, and the total.

    Raises:
        Exception: the run failed (its reason).
    """
    workload, level, spawn = PHASE_CELLS[cell]
    target: str | sandbox.Pool | None = pools[level] if spawn == "pool" else spawn
    await _quiet(pools, limit)
    if level == "in_process":
        # As the study's latency rounds time it: runs back to back (after a wait, the
        # first run's thread hand-offs pay for waking an idle CPU: 2-3x here).
        _check(workload, await sandbox.run(PROGRAMS[workload], level=level))
    tools = (ECHO,) if workload == "await" else ()
    stamps.clear()
    with anyio.fail_after(limit):
        t0 = time.perf_counter()
        if target is None:
            result = await sandbox.run(PROGRAMS[workload], tools=tools, level=level)
        else:
            result = await sandbox.run(PROGRAMS[workload], tools=tools, level=level, spawn=target)
        t1 = time.perf_counter()
    stamps["program"], stamps["to_host"] = _check(workload, result)
    if level == "in_process":
        marks = [("to_program", t0), ("program", stamps["program"]), ("after", stamps["to_host"])]
    else:
        marks = [("api", t0), *((name, stamps[name]) for name, _ in PHASES[1:])]
    out = {
        name: (end - start) * 1e3
        for (name, start), (_, end) in zip(marks, [*marks[1:], ("", t1)], strict=True)
    }
    out["total"] = (t1 - t0) * 1e3
    return out


async def _quiet(pools: dict[str, sandbox.Pool], limit: float) -> None:
    """Untimed, before each sample: every pool full and every earlier run's remains
    cleared, so that no sample shares the host with the refills and the clearing that an
    earlier sample (of another cell) left behind.

    Raises:
        TimeoutError: not within ``limit``.
    """
    from .study import _settle

    if not await _settle(pools, limit):
        raise TimeoutError(f"the pools were not full and the remains cleared within {limit} s")


class _Handoff:
    """What ``in_process`` is made of, and nothing else: a worker thread waiting on a
    queue is given a job; it writes a byte into a pipe, and the event loop, waiting for
    that pipe, wakes."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        self.thread = threading.Thread(target=self._work, name="profile handoff", daemon=True)
        self.thread.start()

    def _work(self) -> None:
        while self.jobs.get() is not None:
            os.write(self.w, b"x")

    async def sample(self) -> float:
        t0 = time.perf_counter()
        self.jobs.put(1)
        await anyio.wait_readable(self.r)
        t1 = time.perf_counter()
        os.read(self.r, 16)
        return (t1 - t0) * 1e3

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(5)
        os.close(self.r)
        os.close(self.w)


async def measure_phases(rec: Recorder, sizes: ProfileSizes, limit: float) -> dict[str, Any]:
    """Every phase cell and the hand-off, interleaved: each round visits them in turn,
    starting one later each round."""
    from .study import _pools, _rotated, describe

    samples: dict[str, list[dict[str, float]]] = {cell: [] for cell in PHASE_CELLS}
    handoff: list[float] = []
    order = [*PHASE_CELLS, HANDOFF]
    hand = _Handoff()
    try:
        async with _pools(("process", "confined"), 2, limit) as pools:
            with stamped() as stamps:
                for cell in PHASE_CELLS:  # one uncounted run each, checked
                    with contextlib.suppress(Exception):
                        await _phase_sample(cell, pools, stamps, limit)
                for r in range(sizes.rounds):
                    for i in range(sizes.per_round):
                        for cell in _rotated(order, r + i):
                            if cell == HANDOFF:
                                with contextlib.suppress(TimeoutError):
                                    await _quiet(pools, limit)
                                await hand.sample()  # back to back, as in_process's runs
                                handoff.append(await hand.sample())
                                continue
                            try:
                                samples[cell].append(
                                    await _phase_sample(cell, pools, stamps, limit)
                                )
                            except Exception as exc:  # counted, with its reason
                                rec.fail("profile", cell, r * sizes.per_round + i, describe(exc))
                        rec.advance("profile/phases")
    finally:
        hand.close()
    return {
        "cells": {cell: summarize_phases(cell, runs) for cell, runs in samples.items()},
        HANDOFF: {"n": len(handoff), "p50_ms": _p50(handoff), "samples_ms": handoff},
    }


def _p50(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize_phases(cell: str, runs: list[dict[str, float]]) -> dict[str, Any]:
    """Each phase's p50 over the runs, the total's p50, and the raw samples."""
    names = [name for name, _ in (INPROCESS_PHASES if cell == "in_process" else PHASES)]
    return {
        "n": len(runs),
        "phases_p50_ms": {name: _p50([run[name] for run in runs]) for name in names},
        "total_p50_ms": _p50([run["total"] for run in runs]),
        "samples_ms": runs,
    }


# -- 2. what a fresh process costs here ---------------------------------------------------

#: Run by a second interpreter (``python -I -S -c``): argv is ``PATHS prepare forks pages``
#: (PATHS: what the zygote puts first on its ``sys.path``, as JSON).
#: It prints one JSON line. ``prepare`` "zygote": import and warm up what the zygote does.
PROCESS_CODE: Final = r"""
import ctypes, json, mmap, os, resource, sys, time
paths, prepare, forks, pages = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if prepare == "zygote":
    sys.path[:0] = json.loads(paths)
    from runner import _zygote
    _zygote._prepare()
    import gc
    gc.collect()
    gc.freeze()  # as the zygote does before it forks
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
PAGE = mmap.PAGESIZE

def busy():
    with open("/proc/stat") as f:
        f = f.readline().split()[1:]
    return (sum(map(int, f[:8])) - int(f[3]) - int(f[4])) / os.sysconf("SC_CLK_TCK")

def cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

def forking(n, child, refused=""):
    c0, b0, w0 = cpu(), busy(), time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                code = child()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == 3 and refused:
            return {"error": refused}
        if code != 0:
            return {"error": f"a child exited {code}"}
    time.sleep(0.2)  # the kernel's deferred teardown, counted in the machine's busy time
    c1, b1, w1 = cpu(), busy(), time.perf_counter() - 0.2
    return {"cpu_ms": (c1 - c0) / n * 1e3, "machine_cpu_ms": (b1 - b0) / n * 1e3,
            "wall_ms": (w1 - w0) / n * 1e3}

def netns():
    return 0 if libc.unshare(CLONE_NEWNET) == 0 else 3

def written(buf, n):
    t0 = time.perf_counter()
    for i in range(0, n * PAGE, PAGE):
        buf[i] = 1
    return (time.perf_counter() - t0) / n * 1e6

out = {"rss_mb": int(open("/proc/self/statm").read().split()[1]) * PAGE / 1e6}
out["fork_exit"] = forking(forks, lambda: 0)
out["fork_netns_exit"] = forking(forks, netns, "unshare(CLONE_NEWNET) refused here")
fresh = mmap.mmap(-1, pages * PAGE)
out["fresh_page_us"] = written(fresh, pages)
out["warm_page_us"] = written(fresh, pages)
shared = bytearray(pages * PAGE)
written(shared, pages)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, json.dumps(written(shared, pages)).encode())
    os._exit(0)
os.waitpid(pid, 0)
out["cow_page_us"] = json.loads(os.read(r, 100))

def private_kb():
    with open("/proc/self/smaps_rollup") as f:
        return sum(int(l.split()[1]) for l in f if l.startswith(("Private_Clean", "Private_Dirty")))

def in_fresh_child(step, n):
    runs = []
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            k0 = private_kb(); t0 = time.perf_counter(); step(); t1 = time.perf_counter()
            k1 = private_kb(); step(); t2 = time.perf_counter(); step(); t3 = time.perf_counter()
            os.write(w, json.dumps([(t1 - t0) * 1e3, (t3 - t2) * 1e3, k1 - k0]).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        runs.append(json.loads(os.read(r, 200)))
        os.close(r)
        os.close(w)
    return [sorted(run[i] for run in runs)[len(runs) // 2] for i in range(3)]

if prepare == "zygote":
    import asyncio
    from protocol import VERSION, Result, RunnerCore, Start, StartBudget, frame_message
    start = Start(v=VERSION, program="1", bindings=(), budget=StartBudget(), result_id="r" * 32)
    start = bytes(frame_message(start))
    result = Result(v=VERSION, result_id="r" * 32, ok=True, value="1", calls=0, bytes=0)

    def start_and_result():
        core = RunnerCore()
        core.receive_data(start)
        core.next_start()
        core.send_result(result)

    async def nothing_awaited():
        await asyncio.sleep(0)

    steps = {"nothing": lambda: None, "start_and_result": start_and_result,
             "event_loop": lambda: asyncio.run(nothing_awaited())}
    n = max(3, min(forks // 10, 30))
    keys = ("fresh_ms", "warm_ms", "private_kb")
    out["fresh_child"] = {k: dict(zip(keys, in_fresh_child(f, n))) for k, f in steps.items()}
print(json.dumps(out))
"""


def _process_costs(prepare: str, sizes: ProfileSizes, limit: float) -> dict[str, Any]:
    """:data:`PROCESS_CODE` in a fresh ``python -I -S``: its JSON.

    Raises:
        RuntimeError: it failed (its stderr).
        subprocess.TimeoutExpired: it took longer than ``limit``.
    """
    paths = json.dumps([str(ROOT), str(Path(msgspec.__file__).resolve().parent.parent)])
    argv = [sys.executable, "-I", "-S", "-c", PROCESS_CODE, paths, prepare]
    argv += [str(sizes.forks), str(sizes.pages)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"exit {done.returncode}: {last[:300]}")
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def measure_processes(rec: Recorder, sizes: ProfileSizes, limit: float) -> dict[str, Any]:
    """:data:`PROCESS_CODE` with what the zygote holds, and bare (the baseline)."""
    from .study import describe

    out: dict[str, Any] = {}
    for prepare in ("zygote", "bare"):
        try:
            out[prepare] = _process_costs(prepare, sizes, limit)
        except Exception as exc:  # counted, with its reason
            rec.fail("profile", f"processes/{prepare}", 0, describe(exc))
            out[prepare] = {"error": describe(exc)}
        rec.advance("profile/processes")
    return out


# -- 3. where an idle confined child's memory is ------------------------------------------


def private_by_mapping(pid: int) -> dict[str, int]:
    """Private bytes (clean and dirty) of ``pid`` by what is mapped: a file's path, or
    ``[heap]``, ``[stack]``, ``[anonymous]``.

    Raises:
        OSError: the process is gone or cannot be read.
    """
    out: dict[str, int] = {}
    name = "[anonymous]"
    with open(f"/proc/{pid}/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            head, _, rest = line.partition(" ")
            if not head.endswith(":"):  # a mapping's first line: range perms offset dev inode path
                fields = line.split(maxsplit=5)
                name = fields[5].strip() if len(fields) > 5 else "[anonymous]"
            elif head in ("Private_Clean:", "Private_Dirty:"):
                out[name] = out.get(name, 0) + int(rest.split()[0]) * 1024
    return out


async def measure_memory(rec: Recorder, limit: float) -> dict[str, Any]:
    """The private bytes by mapping of one idle confined child and its processes."""
    from .study import _pools, describe

    try:
        async with _pools(("confined",), 1, limit) as pools:
            (child,) = pools["confined"].idle()
            if child.process.pid is None:
                raise RuntimeError("an idle child without a pid")
            procs = psutil.Process(child.process.pid)
            total: dict[str, int] = {}
            members = [procs, *procs.children(recursive=True)]
            for proc in members:
                for name, size in private_by_mapping(proc.pid).items():
                    total[name] = total.get(name, 0) + size
    except Exception as exc:  # counted, with its reason
        rec.fail("profile", "memory", 0, describe(exc))
        return {"error": describe(exc)}
    return {
        "processes": len(members),
        "private_bytes": sum(total.values()),
        "by_mapping": dict(sorted(total.items(), key=lambda kv: -kv[1])),
    }


# -- the page -------------------------------------------------------------------------------


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.3g}" if x < 100 else f"{x:.0f}"


def render(doc: dict[str, Any]) -> list[str]:
    """The page's section: which profile explains each MISS, then the profiles."""
    profiles: dict[str, Any] = doc["profiles"]
    missed = [t for t in doc.get("targets", []) if t.get("verdict") == "MISS"]
    lines = [
        "## Why each MISS: profiles measured in this run",
        "",
        "Each figure that misses its floor, with the profile below that says where its "
        "time (or CPU, or memory) goes, measured in this run, on the same code "
        "(`benchmarks/profiles.py` says how).",
        "",
    ]
    if missed:
        lines += ["| figure (MISS) | explained by | what it shows first |", "|---|---|---|"]
        for t in missed:
            kind, cell = EXPLAINED_BY.get(t["id"], ("", None))
            where = f"[{kind}](#{ANCHORS[kind]})" if kind in ANCHORS else "no profile"
            if cell is not None:
                where += f", cell `{cell}`"
            lines.append(f"| {t['description']} | {where} | {_first(kind, cell, profiles)} |")
        lines.append("")
    else:
        lines += ["No figure missed its floor.", ""]
    lines += _phase_lines(profiles.get("phases") or {})
    lines += _process_lines(profiles.get("processes") or {})
    lines += _memory_lines(profiles.get("memory") or {})
    lines += cpu_profile.render_lines(profiles.get("cpu"))
    return lines


def _first(kind: str, cell: str | None, profiles: dict[str, Any]) -> str:
    """The figure of a profile a reader looks at first, for one MISS: the largest phase of
    its cell, what a fork costs, where most of the memory is."""
    if kind == "phases" and cell is not None:
        c = (profiles.get("phases") or {}).get("cells", {}).get(cell)
        if not c or not c.get("n"):
            return "not measured"
        labels = dict(INPROCESS_PHASES if cell == "in_process" else PHASES)
        name, ms = max(c["phases_p50_ms"].items(), key=lambda kv: kv[1] or 0.0)
        return f"the largest phase: {labels[name]}, {_ms(ms)} of {_ms(c['total_p50_ms'])} ms"
    if kind == "cpu":
        cpu = profiles.get("cpu") or {}
        shown = cpu_profile.first(cpu)
        if shown is not None:
            return shown
        why = cpu.get("error", "not measured in this run")
        return f"not measured ({why}); profile 2: {_first('processes', None, profiles)}"
    if kind == "processes":
        zygote = (profiles.get("processes") or {}).get("zygote", {})
        plain, netns = zygote.get("fork_exit", {}), zygote.get("fork_netns_exit", {})
        if "cpu_ms" not in plain:
            return "not measured"
        text = f"a fork and exit of the zygote-like interpreter: {_ms(plain['cpu_ms'])} ms of CPU"
        if "cpu_ms" in netns:
            text += f", {_ms(netns['cpu_ms'])} with a network namespace"
        return text
    if kind == "memory":
        by = (profiles.get("memory") or {}).get("by_mapping") or {}
        if not by:
            return "not measured"
        name, size = next(iter(by.items()))
        total = sum(by.values())
        return f"the most: `{name}`, {size / 1e6:.3g} of {total / 1e6:.3g} MB"
    return "the failed samples, listed with their reasons"


def _phase_lines(phases: dict[str, Any]) -> list[str]:
    cells: dict[str, Any] = phases.get("cells", {})
    lines = [
        "### Profile 1: the run's path, phase by phase",
        "",
        "p50 ms of each phase over the stamped runs of each cell (the phases' p50s need not "
        "add up to the total's). A stamp on the host at each step, and the program's own at "
        "its first and last lines (`__import__('time').perf_counter()`, carried back in its "
        "value; the host and the child read the same clock). Before each run, untimed: "
        "every pool full and every earlier run's remains cleared; an `in_process` run right "
        "after an uncounted one, back to back as the latency rounds time it. The cells "
        "interleaved.",
        "",
        "| phase | " + " | ".join(f"`{c}`" for c in cells) + " |",
        "|---|" + "---|" * len(cells),
    ]
    for name, label in PHASES:
        row = [cells[c]["phases_p50_ms"].get(name) if c != "in_process" else None for c in cells]
        lines.append(
            f"| {label} | " + " | ".join(_ms(x) if x is not None else "" for x in row) + " |"
        )
    for name, label in INPROCESS_PHASES:
        row = [cells[c]["phases_p50_ms"].get(name) if c == "in_process" else None for c in cells]
        lines.append(
            f"| `in_process`: {label} | "
            + " | ".join(_ms(x) if x is not None else "" for x in row)
            + " |"
        )
    lines.append(
        "| **total, p50** | " + " | ".join(_ms(cells[c]["total_p50_ms"]) for c in cells) + " |"
    )
    lines.append("| runs | " + " | ".join(str(cells[c]["n"]) for c in cells) + " |")
    hand = phases.get(HANDOFF, {})
    lines += [
        "",
        f"Beside `in_process`: {HANDOFF_LABEL}, p50 {_ms(hand.get('p50_ms'))} ms over "
        f"{hand.get('n', 0)} samples.",
        "",
    ]
    return lines


def _process_lines(processes: dict[str, Any]) -> list[str]:
    lines = [
        "### Profile 2: what a fresh process costs here, before any wall",
        "",
        "A second interpreter forks children that exit at once (and children that make a "
        "network namespace first, where the kernel lets them), each reaped before the next; "
        "per fork: the CPU of "
        "that interpreter and its children (`getrusage`), the CPU of the whole machine "
        "(`/proc/stat`: the kernel's deferred teardown included, and anything else running), "
        "the wall time. Then the first write to a fresh page, a second write to it, and a "
        "child's first write to a page it shares copy-on-write with its parent. "
        "`zygote`: the interpreter holds what the zygote holds (`runner._zygote._prepare`, "
        "then `gc.freeze()`); "
        "`bare`: a bare `python -I -S`, the baseline.",
        "",
        "| interpreter | RSS MB | fork+exit CPU ms | machine CPU ms | wall ms | "
        "fork+netns+exit CPU ms | machine CPU ms | wall ms | fresh page µs | "
        "written again µs | copy-on-write µs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for prepare in ("zygote", "bare"):
        p = processes.get(prepare, {})
        if "error" in p:
            lines.append(f"| `{prepare}` | not measured: {p['error']} |" + " |" * 9)
            continue
        cells = [_ms(p.get("rss_mb"))]
        for kind in ("fork_exit", "fork_netns_exit"):
            k = p.get(kind, {})
            if "error" in k:
                cells += [f"not measured: {k['error']}", "", ""]
            else:
                cells += [_ms(k.get("cpu_ms")), _ms(k.get("machine_cpu_ms")), _ms(k.get("wall_ms"))]
        cells += [
            _ms(p.get("fresh_page_us")),
            _ms(p.get("warm_page_us")),
            _ms(p.get("cow_page_us")),
        ]
        lines.append(f"| `{prepare}` | " + " | ".join(cells) + " |")
    lines.append("")
    fresh = processes.get("zygote", {}).get("fresh_child")
    if fresh:
        nothing = fresh.get("nothing", {}).get("private_kb", 0)
        lines += [
            "The same steps in a fresh child of the `zygote` interpreter and again once it has "
            "done them (p50 over children): what every run pays first, because each page it "
            "writes is still shared with its parent. Private kB: what the first time added "
            "to the child's own pages, less reading the figure itself.",
            "",
            "| step | fresh child ms | done before ms | private kB |",
            "|---|---|---|---|",
        ]
        for name, label in FRESH_STEPS:
            f = fresh.get(name, {})
            kb = f.get("private_kb")
            lines.append(
                f"| {label} | {_ms(f.get('fresh_ms'))} | {_ms(f.get('warm_ms'))} | "
                f"{'n/a' if kb is None else max(kb - nothing, 0)} |"
            )
        lines.append("")
    return lines


def _memory_lines(memory: dict[str, Any]) -> list[str]:
    lines = ["### Profile 3: where an idle confined child's memory is", ""]
    if "error" in memory:
        return [*lines, f"Not measured: {memory['error']}", ""]
    by = memory.get("by_mapping", {})
    total = memory.get("private_bytes", 0)
    lines += [
        f"Private bytes (what only this child holds: its USS) of one idle confined child "
        f"({memory.get('processes', 0)} processes), {total / 1e6:.3g} MB, by mapping; "
        "the largest eight, and the rest.",
        "",
        "| mapping | private MB | share |",
        "|---|---|---|",
    ]
    items = list(by.items())
    for name, size in items[:8]:
        lines.append(f"| `{name}` | {size / 1e6:.3g} | {size / total:.0%} |")
    rest = sum(size for _, size in items[8:])
    if rest:
        lines.append(f"| the other {len(items) - 8} | {rest / 1e6:.3g} | {rest / total:.0%} |")
    lines.append("")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Measure the profiles alone and print their section of the page."""
    import argparse

    from rich.progress import Progress

    from .study import Recorder

    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiles", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--timeout", type=float, default=60.0, help="per run, seconds")
    args = parser.parse_args(argv)
    sizes = PRESETS["quick" if args.quick else "full"]
    with Progress(transient=True) as progress:
        rec = Recorder(progress)
        plan(rec, sizes)
        try:
            measured = anyio.run(measure, rec, sizes, args.timeout)
        finally:
            sandbox._children._supervisor.shutdown()
    lines = render({"targets": [], "profiles": measured})
    print("\n".join(lines[lines.index("### Profile 1: the run's path, phase by phase") :]))
    for failure in rec.failures:
        print(f"FAILED {failure['cell']} #{failure['sample']}: {failure['error'][:200]}")
    return 1 if rec.failures else 0


if __name__ == "__main__":
    sys.exit(main())
