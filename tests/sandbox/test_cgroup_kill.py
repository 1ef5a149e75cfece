"""The end of a run without a listing: ``kill_all`` given the runner.

Where the run's processes cannot leave its cgroups (a confined run), ``_Run.stop`` gives
:meth:`CgroupSet.kill_all` its runner's kill. Where the pids controller counts no task, or
one while the runner is not reaped, the runner is the only task and its kill is the end of
the run; any other count, or a runner reaped already, and the set is listed and killed in
passes as before. These tests put real processes in a real set and check both ways,
including the one that must not be taken: one task counted, but not the runner's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest

from protocol import CGROUP_PREFIX
from sandbox._children import CgroupSet
from tests.host import needs_run_cgroups

pytestmark = needs_run_cgroups("a run's cgroups, killed")

#: The longest any one wait of these tests may take.
WAIT = 10.0


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    made = CgroupSet.create(f"{CGROUP_PREFIX}test-{uuid.uuid4().hex[:12]}", memory=None, pids=50)
    if made.hierarchy._pids_current(made.dirs) is None:
        made.remove()
        pytest.skip("the runs' cgroups have no pids controller here: kill_all always lists")
    try:
        yield made
    finally:
        made.kill_all()
        made.remove()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def _sleeper(procs: list[subprocess.Popen[bytes]], cgroups: CgroupSet, then: str = "") -> int:
    """A shell of the set that waits forever, once it is in it; ``then`` is what it runs
    first (after it joined: what it forks is in the set too)."""
    proc = subprocess.Popen(["sh", "-c", f"read go; {then} exec sleep 1000"], stdin=subprocess.PIPE)
    procs.append(proc)
    cgroups.add(proc.pid)
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    proc.stdin.close()
    return proc.pid


def _wait_count(cgroups: CgroupSet, count: int) -> None:
    deadline = time.monotonic() + WAIT
    while cgroups.hierarchy._pids_current(cgroups.dirs) != count:
        assert time.monotonic() < deadline, f"the set never counted {count} tasks"
        time.sleep(0.01)


def _no_listing(cgroups: CgroupSet, monkeypatch: pytest.MonkeyPatch) -> None:
    def listed(dirs: object) -> set[int]:
        raise AssertionError("the set was listed")

    monkeypatch.setattr(cgroups.hierarchy, "members", listed)


def _killed(proc: subprocess.Popen[bytes]) -> None:
    assert proc.wait(WAIT) == -signal.SIGKILL


def test_a_set_that_counts_no_task_is_left_alone(
    cgroups: CgroupSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[bool] = []

    def runner() -> int | None:
        asked.append(True)
        return None

    _no_listing(cgroups, monkeypatch)
    assert cgroups.kill_all(runner=runner) == set()
    assert not asked  # nothing counted: the runner is not even asked


def test_a_lone_runner_is_killed_without_a_listing(
    cgroups: CgroupSet,
    procs: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pid = _sleeper(procs, cgroups)
    _wait_count(cgroups, 1)

    def runner() -> int:
        os.kill(pid, signal.SIGKILL)
        return pid

    _no_listing(cgroups, monkeypatch)
    assert cgroups.kill_all(runner=runner) == {pid}
    _killed(procs[0])


def test_a_runner_with_company_is_listed_and_all_are_killed(
    cgroups: CgroupSet, procs: list[subprocess.Popen[bytes]]
) -> None:
    """Two tasks counted (the runner and a process it started): the runner's kill does
    not end the run, the listing finds the other one."""
    pid = _sleeper(procs, cgroups, "sleep 1000 &")
    _wait_count(cgroups, 2)  # the shell and the sleep it started
    other = cgroups.pids() - {pid}
    assert len(other) == 1

    def runner() -> int:
        os.kill(pid, signal.SIGKILL)
        return pid

    assert cgroups.kill_all(runner=runner) == {pid, *other}
    _killed(procs[0])
    _wait_count(cgroups, 0)  # the sleep too (reaped by whoever inherited it)


def test_one_task_that_is_not_the_runner_is_listed_and_killed(
    cgroups: CgroupSet,
    procs: list[subprocess.Popen[bytes]],
) -> None:
    """The runner reaped already, one other process left: the count of one must not be
    taken for the runner's."""
    pid = _sleeper(procs, cgroups)
    _wait_count(cgroups, 1)
    assert cgroups.kill_all(runner=lambda: None) == {pid}
    _killed(procs[0])
