"""Runs leave nothing behind: not after hundreds of runs, not when the host cancels one."""

from __future__ import annotations

import contextlib
import os

import anyio
import psutil
import pytest

import sandbox
from sandbox import Budget, Spawn, Tool
from sandbox._children import REMAINS

from .conftest import (
    cannot_run_program_code,
    gone_within,
    run_cgroups,
    run_dirs,
    run_processes,
    runs_pool,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

#: Runs in a row, per spawn mode (a cold run starts Python: fewer of those).
RUNS = {Spawn.COLD: 100, Spawn.ZYGOTE: 300, Spawn.POOL: 300}
WARM_UP = 5
#: How long the host lets a program run before it cancels it: far past start-up.
CANCEL_AFTER = 1.0


def echo(n: int) -> int:
    return n


def settle() -> None:
    """Let the host clear every run's remains, and a pool finish its refills (each run
    asks for one in the background)."""
    assert REMAINS.wait_empty(30.0), f"{REMAINS.pending()} remains not cleared in 30 s"
    # The zygote reaps what its runners left in its own time: two seconds, as after any test.
    gone_within(2.0, lambda: not run_processes())
    pool = runs_pool()
    if pool is not None:
        assert pool.wait_full(30)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.timeout(300)
@pytest.mark.slow
async def test_many_runs_leave_nothing_behind(spawn: Spawn) -> None:
    """Hundreds of runs in a row leave no descriptor, process, zombie, directory or cgroup."""
    dirs = run_dirs()
    cgroups = run_cgroups()
    for _ in range(WARM_UP):  # thread pools, caches, the event loop's own descriptors
        result = await sandbox.run("host.echo(1)", tools=[echo])
        assert result.ok, result.error
    settle()
    fds = open_fds()
    for i in range(RUNS[spawn]):
        result = await sandbox.run(f"host.echo({i})", tools=[echo])
        assert (result.ok, result.value, result.calls) == (True, i, 1), result.error
    settle()
    assert open_fds() <= fds, os.listdir("/proc/self/fd")
    assert run_processes() == []
    assert run_dirs() - dirs == set()
    assert run_cgroups() - cgroups == set()


async def test_the_leak_check_sees_a_process_that_executed_another_program() -> None:
    """The check after every test here (``run_processes``) knows a run's process by where
    it is, not by what it runs: a ``sleep`` the program started is listed while the run
    lives."""
    seen: list[bool] = []

    def look(pid: int) -> None:
        seen.append(pid in {proc.pid for proc in run_processes()})

    program = (
        "import subprocess\nsleeper = subprocess.Popen(['sleep', '600'])\nhost.look(sleeper.pid)\n"
    )
    result = await sandbox.run(program, tools=[look], budget=Budget(wall_clock=30.0))
    assert result.ok, result.error
    assert seen == [True]


async def cancel_mid_run(program: str) -> list[int]:
    """Run ``program`` and cancel it once it has called ``host.started(pids)``; the pids."""
    pids: list[int] = []

    async def started(reported: list[int]) -> None:
        pids.extend(reported)

    tools = [Tool(started)]
    with anyio.move_on_after(CANCEL_AFTER) as scope:
        await sandbox.run(program, tools=tools, budget=Budget(wall_clock=60.0))
    assert scope.cancelled_caught
    assert pids, "the program did not get as far as host.started() before the cancel"
    return pids


SLEEPS = "import os, time\nhost.started([os.getpid()])\ntime.sleep(600)\n"
IGNORES_SIGTERM = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "host.started([os.getpid()])\n"
    "time.sleep(600)\n"
)
FORKS = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    time.sleep(600)\n"
    "    os._exit(0)\n"
    "host.started([os.getpid(), child])\n"
    "time.sleep(600)\n"
)


@pytest.mark.parametrize(
    "program",
    [SLEEPS, IGNORES_SIGTERM, FORKS],
    ids=["sleeps", "ignores_sigterm", "forks_and_ignores_sigterm"],
)
async def test_cancel_returns_once_no_process_can_run_program_code(program: str) -> None:
    """Cancelling the host's task mid-run returns only once no process of the run can
    execute program code again; the remains are cleared soon after."""
    dirs = run_dirs()
    cgroups = run_cgroups()
    pids = await cancel_mid_run(program)
    # Right after the cancel scope: no sleep, no retry.
    assert [pid for pid in pids if not cannot_run_program_code(pid)] == []
    assert REMAINS.wait_empty(30.0)
    gone_within(2.0, lambda: not any(psutil.pid_exists(pid) for pid in pids))
    assert [pid for pid in pids if psutil.pid_exists(pid)] == []
    settle()  # (a pool's replacement for the child may be on its way: not a leftover)
    assert run_processes() == []
    assert run_dirs() - dirs == set()
    assert run_cgroups() - cgroups == set()


async def test_a_run_leaves_no_orphan_of_another_subprocess_a_zombie() -> None:
    """After a run, an orphan of an unrelated subprocess is not the host's to reap.

    The host is no subreaper (the zygote is): the orphan goes to init, or to whatever
    subreaper runs the host, never to the host, where it would stay a zombie.
    """
    result = await sandbox.run("1")
    assert result.ok, result.error
    shell = await anyio.run_process(["sh", "-c", "sleep 0.1 & echo $!"])
    orphan = int(shell.stdout)
    try:
        status, parent = "", 0
        with anyio.move_on_after(10):
            while status != psutil.STATUS_ZOMBIE:
                try:
                    process = psutil.Process(orphan)
                    status, parent = process.status(), process.ppid()
                except psutil.NoSuchProcess:
                    break
                await anyio.sleep(0.01)
        assert (status, parent) != (psutil.STATUS_ZOMBIE, os.getpid())
    finally:
        with contextlib.suppress(ChildProcessError):  # ours after all: reap it
            os.waitpid(orphan, os.WNOHANG)  # noqa: ASYNC222 (WNOHANG never blocks)


ORPHANS = (
    "import os, time\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        time.sleep(600)\n"
    "    os._exit(0)\n"
    "os.waitpid(pid, 0)\n"
    "'done'\n"
)


async def test_without_cgroups_the_process_tree_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host without cgroups the runner lingers as the subreaper of what the program
    left, and the host kills that tree: a grandchild in a session of its own is gone too."""
    monkeypatch.setattr(sandbox._engine._api, "cgroups_usable", lambda: False)
    result = await sandbox.run(ORPHANS, budget=Budget(wall_clock=30.0))
    assert (result.ok, result.value) == (True, "done"), result.error
    settle()  # (a pool's replacement for the child may be on its way: not a leftover)
    assert run_processes() == []
