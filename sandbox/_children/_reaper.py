"""No survivors, no zombies: finding and ending every process a run started.

Theory of operation
-------------------
A program may fork, call ``setsid``, double-fork so that its grandchildren lose their
parent, or fork as fast as it can. Two mechanisms keep track of all of it:

* **Per-run cgroups** (:mod:`._cgroups`: v1 ``pids``, ``freezer`` and ``memory``
  hierarchies, or one v2 cgroup, where the host lets us create them): every process the
  runner starts is in them, whatever it does with sessions and parents. Ending the run
  sends SIGKILL to every member (v2: ``cgroup.kill``); sparing the runner, it freezes the
  cgroups first, so that nothing in them can fork while they are listed. The process
  limit bounds a fork bomb; the memory limit is an honest one across all the run's
  processes, page cache and tmpfs included.
* **Subreapers**: the zygote (:mod:`runner._zygote`) and each runner are child
  subreapers (``PR_SET_CHILD_SUBREAPER``): a process whose parent dies is re-parented to
  the runner while it lives, then to the zygote, never to PID 1 (which, in containers,
  often reaps nobody), so every process of a run is found and reaped. The host process
  itself is not a subreaper: orphans of its other subprocesses are not its to reap.

While the runner lives, every descendant of the program stays in its process tree; the
fallback (no cgroup) kills that tree repeatedly until it is empty, and the zygote kills
whatever a dead runner left to it.
"""

from __future__ import annotations

import contextlib
import time

import psutil

from ._cgroups import CgroupSet, cgroup_support

__all__ = [
    "CgroupSet",
    "cgroup_support",
    "kill_tree",
]


def kill_tree(root: int, timeout: float = 5.0) -> set[int]:
    """SIGKILL every descendant of ``root`` (not ``root``) until none is left.

    The fallback without cgroups: it relies on ``root`` being a live subreaper, so that no
    descendant can leave its tree. Returns every pid to reap, zombies included.
    """
    found: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            kids = psutil.Process(root).children(recursive=True)
        except psutil.Error:
            return found
        found.update(kid.pid for kid in kids)
        alive = [kid for kid in kids if _alive(kid)]
        if not alive:
            return found
        for kid in alive:
            with contextlib.suppress(psutil.Error):
                kid.kill()
    return found


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
