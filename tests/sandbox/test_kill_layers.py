"""The host's layers of "no survivors", each on its own, on real processes.

A run ends (``sandbox/_engine/_process.py``, ``_Run.end``) by killing what the program
started while the runner still holds it together, then the runner, then whatever is left,
and the zygote kills what a dead runner left to it. Each layer must hold without the
others, or a broken one hides behind the next; the end-to-end tests (``test_leaks``,
``test_hostile``) cannot tell. Here, with no run and no zygote:

* :meth:`CgroupSet.kill_all`, sparing the runner (a run that answered) and sparing nothing
  (a run that did not, or whose members fork as fast as they can);
* :func:`kill_tree`, the fallback without cgroups, on the runner's process tree.

The zygote's and the runner's own layers are ``tests/runner/test_zygote.py``'s.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psutil
import pytest

from protocol import CGROUP_PREFIX
from sandbox import Level
from sandbox._children import CgroupSet, kill_tree
from tests.host import needs_enforcing

#: The longest any one wait of these tests may take.
WAIT = 10.0

#: Run as ``python -c TREE MODE [CGROUP_PROCS ...]``. A reaper (a subreaper, outside the
#: cgroups, reaping everything that comes up to it) forks the "runner" R, which joins the
#: cgroups, becomes a subreaper, and starts: A (asleep), A's own child A1 (asleep), and an
#: orphan O (its parent started a session and exited). R prints "R A A1 O" and reaps. In
#: MODE ``churn``, R then also starts eight forkers, each forking children that sleep as
#: fast as it can while killing all but its last four: about 50 processes at any time, and
#: some always just forked, so that a single pass of SIGKILL misses some. A child killed
#: but not yet reaped still counts against the cgroup's limit of 64: a fork refused for it
#: is tried again, not the forker's end.
TREE = """
import contextlib, ctypes, os, sys, time

def subreaper():
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)

def reap_forever():
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(0.01)

def sleep():
    time.sleep(600)
    os._exit(0)

mode, procs = sys.argv[1], sys.argv[2:]
subreaper()
if os.fork() != 0:
    reap_forever()
subreaper()
for path in procs:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
r, w = os.pipe()
a = os.fork()
if a == 0:
    a1 = os.fork()
    if a1 == 0:
        sleep()
    os.write(w, f"{a1}\\n".encode())
    sleep()
middle = os.fork()
if middle == 0:
    os.setsid()
    o = os.fork()
    if o == 0:
        sleep()
    os.write(w, f"{o}\\n".encode())
    os._exit(0)
os.waitpid(middle, 0)
lines = os.fdopen(r)
a1, o = int(lines.readline()), int(lines.readline())
print(os.getpid(), a, a1, o, flush=True)
for _ in range(8 if mode == "churn" else 0):
    if os.fork() == 0:
        kids = []
        while True:
            try:
                kid = os.fork()
            except BlockingIOError:  # at the cgroup's process limit: until the kills land
                time.sleep(0.001)
                continue
            if kid == 0:
                sleep()
            kids.append(kid)
            if len(kids) > 4:
                os.kill(kids.pop(0), 9)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
reap_forever()
"""


def dead(pid: int) -> bool:
    """Whether ``pid`` is dead (a zombie not yet reaped counts as dead)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(condition: object, what: str) -> None:
    """Wait (at most :data:`WAIT`) until ``condition()`` holds; fail naming ``what``."""
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        time.sleep(0.01)


@dataclass
class Tree:
    """The processes of :data:`TREE`: the reaper, and R, A, A1, O."""

    reaper: subprocess.Popen[str]
    runner: int
    program: list[int]  # A, A1, O


@contextmanager
def tree(mode: str = "", cgroups: CgroupSet | None = None) -> Iterator[Tree]:
    """Start :data:`TREE` (in ``cgroups``, if given); kill everything of it however the
    test ends."""
    procs = cgroups.procs_files() if cgroups is not None else ()
    reaper = subprocess.Popen(
        [sys.executable, "-c", TREE, mode or "-", *procs],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert reaper.stdout is not None
        assert select.select([reaper.stdout], [], [], WAIT)[0], "the tree did not start"
        runner, *program = map(int, reaper.stdout.readline().split())
        assert len(program) == 3, program
        yield Tree(reaper, runner, program)
    finally:
        if cgroups is not None:
            cgroups.kill_all()
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(reaper.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        reaper.kill()
        reaper.wait(WAIT)
        if reaper.stdout is not None:
            reaper.stdout.close()


@pytest.fixture
def cgroups() -> Iterator[CgroupSet]:
    """A run's set of cgroups of this test's own (a process limit of 64); removed after."""
    made = CgroupSet.create(
        f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}", memory=None, pids=64
    )
    try:
        yield made
    finally:
        made.kill_all()
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not made.pids(), "the test's cgroups emptied")
        made.remove()


needs_cgroups = needs_enforcing("max_processes", Level.PROCESS)


@needs_cgroups
def test_kill_all_kills_every_member_but_the_runner(cgroups: CgroupSet) -> None:
    """Sparing the runner (a run that answered): every other member of the cgroups dies,
    whatever its parent or session, and the runner lives on."""
    with tree(cgroups=cgroups) as t:
        assert cgroups.pids() == {t.runner, *t.program}
        killed = cgroups.kill_all(spare=frozenset({t.runner}))
        assert killed == set(t.program)
        wait_until(lambda: all(dead(pid) for pid in t.program), "the program's processes dead")
        wait_until(lambda: cgroups.pids() == {t.runner}, "only the runner left")
        assert not dead(t.runner)


@needs_cgroups
def test_kill_all_sparing_nothing_kills_every_member(cgroups: CgroupSet) -> None:
    """Sparing nothing (a run that did not answer): every member dies, the runner too;
    the cgroups are empty once the reaper outside them has reaped."""
    with tree(cgroups=cgroups) as t:
        killed = cgroups.kill_all()
        assert killed == {t.runner, *t.program}
        wait_until(lambda: not cgroups.pids(), "the cgroups emptied")
        assert t.reaper.poll() is None  # (outside the cgroups: untouched)


@needs_cgroups
@pytest.mark.slow
def test_kill_all_kills_members_that_fork_as_it_kills(cgroups: CgroupSet) -> None:
    """Members forking as fast as they can: when :meth:`kill_all` returns, every member
    left has been sent SIGKILL (a child forked during a pass is found by the next), and
    the cgroups empty."""
    with tree("churn", cgroups=cgroups) as t:
        wait_until(lambda: len(cgroups.pids()) >= 40, "the forkers under way")
        killed = cgroups.kill_all()
        assert cgroups.pids() <= killed
        wait_until(lambda: not cgroups.pids(), "the cgroups emptied")
        assert t.reaper.poll() is None


def test_kill_tree_kills_every_descendant_of_the_runner() -> None:
    """Without cgroups: every descendant of the runner dies (its children, their children,
    and what was orphaned to it), and the runner lives on."""
    with tree() as t:
        descendants = {p.pid for p in psutil.Process(t.runner).children(recursive=True)}
        assert descendants == set(t.program)
        found = kill_tree(t.runner)
        assert found >= set(t.program)
        assert all(dead(pid) for pid in t.program)
        assert not dead(t.runner)
        os.kill(t.runner, signal.SIGKILL)


#: Run as ``python -c JOINER THREADS CHILDREN CGROUP_PROCS ...``: joins the cgroups, starts
#: THREADS - 1 more threads and CHILDREN children (all asleep), prints its pid and the
#: children's, and sleeps.
JOINER = """
import os, sys, threading, time
threads, children, procs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
for path in procs:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
for _ in range(threads - 1):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
kids = []
for _ in range(children):
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    kids.append(pid)
print(os.getpid(), *kids, flush=True)
time.sleep(600)
"""


@contextmanager
def joiner(cgroups: CgroupSet, threads: int = 1, children: int = 0) -> Iterator[list[int]]:
    """A process of :data:`JOINER` in ``cgroups``, not reaped until the test ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", JOINER, str(threads), str(children), *cgroups.procs_files()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], WAIT)[0], "the joiner did not start"
        yield [int(pid) for pid in proc.stdout.readline().split()]
    finally:
        cgroups.kill_all()
        proc.kill()
        proc.wait(WAIT)
        if proc.stdout is not None:
            proc.stdout.close()


def pids_controller(cgroups: CgroupSet) -> None:
    if "pids" not in cgroups.dirs:
        pytest.skip("no pids cgroup on this host: kill_all always makes a second pass")


@needs_cgroups
def test_one_signalled_single_threaded_process_needs_no_second_pass(cgroups: CgroupSet) -> None:
    """The common end of a run: the runner alone, one thread. Once it has SIGKILL
    pending (a zombie, not reaped), nothing of the set can fork again."""
    pids_controller(cgroups)
    with joiner(cgroups) as (pid,):
        os.kill(pid, signal.SIGKILL)
        assert cgroups._none_but({pid})


@needs_cgroups
def test_a_second_thread_or_a_child_means_another_pass(cgroups: CgroupSet) -> None:
    """A count above one task per signalled process (a thread, a child not signalled, or
    a fork under way) is never taken for an empty set."""
    pids_controller(cgroups)
    with joiner(cgroups, threads=2) as (pid,):
        # (Not signalled first: a thread that is not the leader is released, and no
        # longer charged, as soon as it exits, which a SIGKILL makes it do at once.)
        assert not cgroups._none_but({pid})
    with joiner(cgroups, children=1) as (pid, child):
        assert cgroups.pids() == {pid, child}
        assert not cgroups._none_but({pid})
        assert cgroups._none_but({pid, child})


@needs_cgroups
def test_a_reaped_process_is_not_counted_as_present(cgroups: CgroupSet) -> None:
    """A signalled process already reaped charges nothing: the count cannot tell what
    else is there, so it decides nothing."""
    pids_controller(cgroups)
    with joiner(cgroups, children=1) as (pid, child):
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: cgroups.pids() == {pid}, "the child gone from the listing")
        # The child is the joiner's zombie, unreaped: the set still charges two tasks.
        assert not cgroups._none_but({pid})
        assert cgroups._none_but({pid, child})
        # Two tasks charged, two pids signalled, but one of them is no process (reaped,
        # say): the count may hide a process the listing missed.
        gone = 2**22 + 1  # above any pid_max: no process has it
        assert not cgroups._none_but({pid, gone})
