"""``max_cpu``: CPU time for the whole run, all its processes and threads together, met
within 0.1 s of CPU, fractions of a second included, at ``process`` and ``confined``,
whether the run's CPU is read from its cgroups or (without them) from its process tree.

The 0.1 s is the watcher's schedule, tested here over simulated runs of every shape: a
host scheduled on time kills the run within it. A real run adds how late the host itself
is scheduled, which a shared, loaded machine (this suite's four workers on two CPUs)
makes what it will: real runs are held to the limit and at most a second more, which a
limit counted per process (three forked workers: three times the limit) or a watcher that
misses its time still fails. The overshoot a host meets is measured, against its own
timers' lateness in the same run, by ``benchmarks/bench_cpu_limit.py``.

The CPU a run used is measured, not only the cause of its end: from the result, and,
independently of the host's own counters, from the zygote, which reaps every process of a
run (the runner, which reaps what it can, and every orphan), so that the CPU time of all of
them ends up in its ``cutime`` and ``cstime``. Not for a confined run of several
processes: when PID 1 of a namespace dies, the kernel reaps its children itself, without
adding their CPU time to anyone's (``zap_pid_ns_processes`` ignores ``SIGCHLD``); there
the result's figure stands alone. (The cgroup v2 counter is tested in
:mod:`tests.sandbox.test_cgroup2`.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sandbox
from benchmarks.bench_cpu_limit import PROGRAMS
from sandbox import Budget, Kind, Level
from sandbox._children import REMAINS, _supervisor
from sandbox._children._cputime import tree_cpu_time
from sandbox._engine import _api, _levels, _process
from tests.host import child_levels, skip_because_host_cannot

pytestmark = pytest.mark.anyio

#: The runs to a CPU limit the benchmark measures too: one process spinning; three forked
#: workers spinning, and the program waiting for them; four threads hashing (which
#: releases the GIL: they run on every CPU at once).
SPIN, FORKED_WORKERS, THREADS = (
    PROGRAMS[name] for name in ("one-process", "three-forked-workers", "four-threads")
)
#: How late the kill may come, in CPU seconds, on a host scheduled on time (the issue's
#: bound).
SLACK = 0.1
#: How late it may come in a real run on this shared machine (see the module docstring).
LATE = 1.0
#: The resolution of ``cutime``: one clock tick.
TICK = 1 / os.sysconf("SC_CLK_TCK")


def _reaped_ticks(pid: int) -> int:
    """CPU clock ticks of the children ``pid`` has reaped (``cutime`` + ``cstime``): counted
    in whole ticks, so that a difference of them is exact (in seconds, two sums of ticks
    differ by 0.6899999999999995 where 69 ticks were used)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[13]) + int(fields[14])


def _settled(zygote: int, before: set[int]) -> None:
    """Wait until the run's remains are cleared and the zygote has reaped every process
    the run left to it (its children are those it had before)."""
    assert REMAINS.wait_empty(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            now = {p.pid for p in psutil.Process(zygote).children()}
        except psutil.Error:
            return
        if now <= before:
            return
        time.sleep(0.01)
    pytest.fail("the zygote did not reap the run's processes")


@pytest.fixture(params=["cgroups", "process tree"])
def counter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Where the host reads the run's CPU: its cgroups, or (runs made without cgroups)
    its process tree."""
    if request.param == "process tree":
        monkeypatch.setattr(_api, "cgroups_usable", lambda: False)
    elif not _levels.cgroups_usable():
        skip_because_host_cannot("make per-run cgroups")
    return str(request.param)


@pytest.mark.parametrize("level", child_levels())
@pytest.mark.parametrize(
    ("program", "limit"),
    [(SPIN, 0.5), (FORKED_WORKERS, 1.0), (THREADS, 0.7)],
    ids=["one-process-half-a-second", "three-forked-workers", "four-threads"],
)
async def test_cpu_limit_is_met(level: Level, counter: str, program: str, limit: float) -> None:
    """The run is ended, kind limit, cause cpu, once its processes and threads together
    have used ``limit``: the CPU it used, as the result says and as the zygote that
    reaped its processes counts it (see the module docstring), is at least the limit and
    at most :data:`LATE` more."""
    await sandbox.run("1", level=level, spawn="zygote")  # the zygote, started
    zygote = _supervisor.zygote_pid()
    assert zygote is not None
    _settled(zygote, set())
    before = {p.pid for p in psutil.Process(zygote).children()}
    reaped = _reaped_ticks(zygote)
    result = await sandbox.run(
        program, budget=Budget(wall_clock=60.0, max_cpu=limit), level=level, spawn="zygote"
    )
    _settled(zygote, before)
    used = (_reaped_ticks(zygote) - reaped) * TICK
    assert (result.kind, result.cause) == (Kind.LIMIT, "cpu"), result.error
    assert result.cpu_time is not None
    assert limit <= result.cpu_time <= limit + LATE, (counter, result.cpu_time)
    if level is Level.PROCESS or program != FORKED_WORKERS:
        assert limit - TICK <= used <= limit + LATE, (counter, used)


class _SimulatedRun:
    """A run whose processes use CPU at ``phases`` (rate, seconds) in turn, then at
    ``last`` forever (rates in CPU seconds per second), on a clock that only the
    watcher's sleeps move: the watcher met on a host that is always scheduled on time."""

    def __init__(self, phases: list[tuple[float, float]], last: float) -> None:
        self.phases = phases
        self.last = last
        self.now = 0.0
        self.reads = 0

    def used(self) -> float:
        self.reads += 1
        used, began = 0.0, 0.0
        for rate, seconds in self.phases:
            if self.now <= began + seconds:
                return used + rate * (self.now - began)
            used += rate * seconds
            began += seconds
        return used + self.last * (self.now - began)

    async def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds


def _watch(run: _SimulatedRun, limit: float, cpus: int) -> list[float]:
    """Drive :func:`watch_cpu` over ``run`` to its end (its sleeps never suspend it);
    what the run had used each time the watcher said the limit was reached."""
    reached: list[float] = []
    watcher = _process.watch_cpu(
        run.used, limit, lambda: reached.append(run.used()), cpus=cpus, sleep=run.sleep
    )
    with pytest.raises(StopIteration):
        watcher.send(None)
    return reached


@settings(max_examples=200, deadline=None)
@given(
    cpus=st.integers(1, 8),
    limit=st.floats(0.01, 50.0),
    phases=st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 2.0)), max_size=5),
    last=st.floats(0.05, 1.0),
)
def test_the_watcher_ends_a_run_within_its_slack(
    cpus: int, limit: float, phases: list[tuple[float, float]], last: float
) -> None:
    """Whatever a run's processes do (each rate at most every CPU of the host), the
    watcher, scheduled on time, says the limit is reached once, when the run has used it
    and at most ``_CPU_SLACK`` more: the issue's 0.1 s, as the watcher's schedule alone
    makes it (the runs below add how late a real host is scheduled)."""
    run = _SimulatedRun([(rate * cpus, s) for rate, s in phases], last * cpus)
    reached = _watch(run, limit, cpus)
    assert len(reached) == 1
    assert limit <= reached[0] <= limit + _process._CPU_SLACK + 1e-9, (reached, limit)
    assert _process._CPU_SLACK < SLACK


def test_a_run_using_every_cpu_is_read_a_handful_of_times() -> None:
    """The watcher sleeps until the soonest moment the limit could be reached: a run
    using every CPU from its start is read twice, however high the limit."""
    for limit in (0.5, 60.0, 3600.0):
        run = _SimulatedRun([], 4.0)
        assert _watch(run, limit, 4) == [limit]
        assert run.reads == 3  # (the third is the test's own, in `reached`)


def test_a_counter_that_cannot_be_read_ends_the_watcher() -> None:
    """No counter (its cgroup gone, the process tree unreadable): the watcher ends
    without saying the limit was reached."""
    reached: list[bool] = []
    watcher = _process.watch_cpu(lambda: None, 1.0, lambda: reached.append(True))
    with pytest.raises(StopIteration):
        watcher.send(None)
    assert reached == []


async def test_no_cpu_watcher_without_max_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without ``max_cpu`` reads no CPU counter at all: the watcher costs nothing
    where it is not asked for."""

    def refuse(*args: Any) -> None:
        raise AssertionError("a CPU counter was made for a run without max_cpu")

    monkeypatch.setattr(_process, "RunCpu", refuse)
    result = await sandbox.run("sum(range(10**6))", budget=Budget(max_cpu=None))
    assert result.ok, result.error
    assert result.value == sum(range(10**6))


async def test_a_run_that_ends_at_once_does_not_wait_for_its_cpu_watcher() -> None:
    """The watcher sleeps until the soonest moment the limit could be reached (here, tens
    of seconds away); a run that answers before then ends it and returns at once."""
    t0 = time.monotonic()
    result = await sandbox.run("1", budget=Budget(max_cpu=120.0), level=Level.PROCESS)
    assert (result.ok, result.value) == (True, 1), result.error
    assert time.monotonic() - t0 < 20


#: A parent that forks a child burning ``sys.argv[1]`` CPU seconds, reaps it, then forks
#: another that spins until killed, and waits.
TREE = """
import os, sys, time
def burn(seconds):
    while time.process_time() < seconds:
        pass
pid = os.fork()
if pid == 0:
    burn(float(sys.argv[1]))
    os._exit(0)
os.waitpid(pid, 0)
if os.fork() == 0:
    burn(float("inf"))
print("reaped", flush=True)
time.sleep(600)
"""


def test_tree_cpu_time_counts_live_and_reaped_processes() -> None:
    """Without cgroups the run's CPU is its process tree's: what a process's reaped
    children used (in its ``cutime``) and what its live children use, each once."""
    parent = subprocess.Popen(
        [sys.executable, "-c", TREE, "0.3"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == "reaped\n"
        # The reaped child's 0.3 s, as /proc counts it: in clock ticks, cut down to 10 ms.
        assert (tree_cpu_time(parent.pid) or 0.0) >= 0.3 - 0.01
        (spinner,) = psutil.Process(parent.pid).children()
        deadline = time.monotonic() + 30
        while sum(spinner.cpu_times()[:2]) < 0.2 and time.monotonic() < deadline:
            time.sleep(0.01)
        own = sum(psutil.Process(parent.pid).cpu_times()[:2])
        spun = sum(spinner.cpu_times()[:2])
        total = tree_cpu_time(parent.pid)
        assert total is not None
        assert total >= 0.3 + spun + own - 0.02  # (ticks: 10 ms each counter)
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    assert tree_cpu_time(parent.pid) is None  # gone
