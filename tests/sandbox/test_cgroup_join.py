"""A child joins every one of its run's cgroups, whole, however it joins them.

The zygote's child joins its run's cgroups first thing (``runner._zygote._join_cgroups``):
a process with one thread moves itself through a cgroup v1 ``tasks`` file (which skips a
lock whose taking can wait for an RCU grace period), any other through ``cgroup.procs``.
Either way every thread of the process must end up in every cgroup of the run: a thread
left outside would be a part of the run its cgroups neither count nor kill.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol import CGROUP_PREFIX
from runner._zygote import _join_cgroups
from sandbox._children import CgroupSet
from tests.host import needs_run_cgroups

pytestmark = needs_run_cgroups("how a child joins its run's cgroups")

#: The longest the child waits to be killed.
WAIT = 10.0


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    made = CgroupSet.create(f"{CGROUP_PREFIX}test-{uuid.uuid4().hex[:12]}", memory=None, pids=None)
    try:
        yield made
    finally:
        made.kill_all()
        made.remove()


def _members(cgroups: CgroupSet, name: str) -> dict[Path, set[int]]:
    """What each cgroup of the set lists in ``name`` (``cgroup.procs`` or ``tasks``)."""
    found = {}
    for path in cgroups.dirs.values():
        listing = path / name
        if listing.exists():
            found[path] = {int(x) for x in listing.read_text().split()}
    return found


@pytest.mark.parametrize("threads", [1, 3], ids=["one-thread", "three-threads"])
def test_every_thread_joins_every_cgroup(cgroups: CgroupSet, threads: int) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: join with ``threads`` threads, report them, wait to be killed
        try:
            import threading

            stop = threading.Event()
            for _ in range(threads - 1):
                threading.Thread(target=stop.wait, daemon=True).start()
            _join_cgroups(cgroups.procs_files())
            os.write(w, " ".join(os.listdir("/proc/self/task")).encode() + b"\n")
            stop.wait(WAIT)
        finally:
            os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as reader:
            tids = {int(x) for x in reader.readline().split()}  # (alive until killed)
        assert len(tids) == threads
        assert pid in tids
        for path, procs in _members(cgroups, "cgroup.procs").items():
            assert procs == {pid}, path
        for path, tasks in _members(cgroups, "tasks").items():  # cgroup v1
            assert tasks == tids, path
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
