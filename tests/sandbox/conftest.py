"""Fixtures for runs: every test checks that its runs left nothing behind, and the tests
that ask for ``spawn`` run once per way of making a child (cold, zygote, pool)."""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import sandbox
from protocol import CGROUP_PREFIX
from sandbox import Pool, Spawn
from sandbox._children import REMAINS, _supervisor, hierarchy, workdir_bases
from sandbox._children._workspace import SPARES, Workspace

SPAWN_MODES = [Spawn.COLD, Spawn.ZYGOTE, Spawn.POOL]
_RUN = sandbox.run
_RUN_SYNC = sandbox.run_sync


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "spawn" in metafunc.fixturenames:
        metafunc.parametrize("spawn", SPAWN_MODES, indirect=True, ids=str)


#: The pool the running test's runs take their children from, if it asked for ``pool``.
_pool: Pool | None = None


@pytest.fixture
def spawn(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Spawn]:
    """Make ``sandbox.run`` (and ``run_sync``) pass ``spawn=`` ``request.param`` for one
    test, unless the test passes its own; for the pool, a pool of this test's own, closed
    (and checked empty) at the end."""
    global _pool
    mode: Spawn = request.param

    def runs_from(source: Spawn | Pool) -> None:
        monkeypatch.setattr(sandbox, "run", functools.partial(_RUN, spawn=source))
        monkeypatch.setattr(sandbox, "run_sync", functools.partial(_RUN_SYNC, spawn=source))

    if mode is not Spawn.POOL:
        runs_from(mode)
        yield mode
        return
    with Pool(size=2) as pool:
        runs_from(pool)
        _pool = pool
        try:
            yield mode
        finally:
            _pool = None


def runs_pool() -> Pool | None:
    """The pool the running test's runs take their children from, if any."""
    return _pool


def run_processes() -> list[psutil.Process]:
    """Live (or unreaped) processes of this host's runs: every descendant of its zygotes'
    keepers but the zygotes and keepers themselves and a pool's idle children; and any
    descendant of this process that runs the runner (another host's zygote, say).

    Everything a run starts stays under the keeper (the runner and the zygote are both
    subreapers, and the keeper takes what a dead zygote leaves), whatever it executes, so
    nothing of this host's runs can hide outside that tree, and nothing of another host's
    runs (another test process, a benchmark) is counted.
    """
    keep = _supervisor.host_processes()
    # An idle pool child, or one being made (its pid not reported yet), is known by its
    # working directory.
    idle_dirs = {child.workspace.workdir for child in _idle_children()}
    found: dict[int, psutil.Process] = {}
    for pid in keep:
        with contextlib.suppress(psutil.Error):
            found.update((p.pid, p) for p in psutil.Process(pid).children(recursive=True))
    for proc in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(proc.cmdline())
        except psutil.ZombieProcess:
            cmdline = ""  # a dead process nobody has reaped: it counts
        except psutil.Error:
            continue  # gone
        if "from runner import" in cmdline or not cmdline:
            found.setdefault(proc.pid, proc)
    left = []
    for pid, proc in sorted(found.items()):
        if pid in keep:
            continue
        try:
            if proc.cwd() in idle_dirs:
                continue
        except psutil.ZombieProcess:
            pass
        except psutil.Error:
            if not proc.is_running():
                continue  # gone
        left.append(proc)
    return left


def _idle_children() -> list[_supervisor.Child]:
    return [child for pool in list(_supervisor._pools) for child in pool.idle()]


def _held_workspaces() -> list[Workspace]:
    """The workspaces held for runs to come: a pool's idle children's, and those made
    ahead for runs forked on demand."""
    return [child.workspace for child in _idle_children()] + SPARES.held()


def run_dirs() -> set[str]:
    """This host's runs' working directories that still exist (not one held for a run to
    come)."""
    prefix = f"{_supervisor.WORKDIR_PREFIX}{os.getpid()}-"
    held = {workspace.workdir for workspace in _held_workspaces()}
    found = {str(p) for base in workdir_bases() for p in Path(base).glob(f"{prefix}*")}
    return found - held


def run_cgroups() -> set[Path]:
    """This host's per-run cgroup directories that exist now, under every controller (not
    one held for a run to come)."""
    found: set[Path] = set()
    for base in hierarchy().bases():
        if base.is_dir():
            found.update(base.glob(f"{CGROUP_PREFIX}{os.getpid()}-*"))
    held = {
        path
        for workspace in _held_workspaces()
        if workspace.cgroups is not None
        for path in workspace.cgroups.dirs.values()
    }
    return found - held


def gone_within(seconds: float, done: Callable[[], bool]) -> None:
    """Wait up to ``seconds`` for ``done()`` (the caller asserts what is left)."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """After each test: no run's process, zombie, working directory or cgroup remains.

    A run returns once every process of it has been sent SIGKILL; the teardown, the
    reaping and the removal of what it made (its remains) follow in the background. This
    waits until the host has cleared every remains (as closing the host would), then up
    to two seconds more for the zygote's reaping, and fails the test if anything is
    still there.
    """
    dirs_before = run_dirs()
    cgroups_before = run_cgroups()
    procs_before = {p.pid for p in run_processes()}
    yield
    assert REMAINS.wait_empty(30.0), f"{REMAINS.pending()} remains not cleared in 30 s"

    def new_processes() -> list[psutil.Process]:
        return [p for p in run_processes() if p.pid not in procs_before]

    gone_within(2.0, lambda: not new_processes())
    left = new_processes()
    for proc in left:  # clean up for the next test, then fail this one
        try:
            proc.kill()
        except psutil.Error:
            pass
    assert left == [], f"processes left: {left}"
    zombies = [c for c in psutil.Process().children() if _is_zombie(c)]
    assert zombies == [], f"zombies left: {zombies}"
    assert run_dirs() - dirs_before == set()
    assert run_cgroups() - cgroups_before == set()


def _is_zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False  # reaped while this looked


#: ``PF_EXITING`` in /proc/<pid>/stat's flags: the process is in the kernel's exit path.
_PF_EXITING = 0x4
_PF_SIGNALED = 0x400  # set on the way from a fatal signal to the exit
_SIGKILL_BIT = 1 << (9 - 1)


def cannot_run_program_code(pid: int) -> bool:
    """Whether ``pid`` can never again execute an instruction of a program: it is gone, a
    zombie, in the kernel's exit path, or has SIGKILL pending (a process never returns to
    user space with SIGKILL pending). What a run guarantees of every process of it once
    ``run`` has returned; their teardown and reaping may still be under way."""
    # The pending signals first, the flags after: a process dequeues its SIGKILL and only
    # then marks itself signalled and exiting, so read the other way round the two reads
    # could fall either side of that and see neither.
    try:
        with open(f"/proc/{pid}/status") as f:
            status = f.read()
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # gone
    fields = stat[stat.rindex(b")") + 2 :].split()
    state, flags = fields[0], int(fields[6])
    if state in (b"Z", b"X", b"x") or flags & (_PF_EXITING | _PF_SIGNALED):
        return True
    pending = 0
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):
            pending |= int(value.strip(), 16)
    return bool(pending & _SIGKILL_BIT)
