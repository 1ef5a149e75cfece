"""The CPU time of a whole run, all its processes and threads together, as it runs.

Theory of operation
-------------------
``max_cpu`` is CPU time for the whole run: a program that splits its work over threads or
processes reaches the limit when their sum does. No kernel limit says that (``RLIMIT_CPU``
is per process and in whole seconds; ``cpu.max`` throttles rather than ends), so the host
reads the run's counter and ends the run itself (:mod:`sandbox._engine._process` sleeps
until the soonest moment the limit could be reached, so a run is read a handful of times
however long it is, and not at all without ``max_cpu``). Two counters:

* the run's cgroups (:meth:`~sandbox._children.CgroupSet.cpu_time`: v1 ``cpuacct.usage``,
  v2 ``cpu.stat``), exact, processes gone included;
* without them, the runner's process tree, read from ``/proc`` in one pass: each live
  process's own CPU time (every thread of it), plus what it reaped of its children
  (``cutime``, ``cstime``). A process is counted once, alive in its own line, dead in its
  reaper's; a process whose parent ignores ``SIGCHLD`` (so that nobody reaps it) is not
  counted once gone, and ``RLIMIT_CPU`` still bounds each process (whole seconds).
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

from ._cgroups import CgroupSet

__all__ = ["RunCpu", "tree_cpu_time"]

_TICK: Final = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """The parent and the CPU seconds (own and reaped children's) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    # After the command name (which may hold spaces and parentheses): state, ppid, ...;
    # utime, stime, cutime and cstime are fields 14 to 17 of the line.
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        return int(fields[1]), ticks * _TICK
    except (IndexError, ValueError):
        return None


def tree_cpu_time(root: int) -> float | None:
    """CPU seconds used by ``root`` and its descendants, those they reaped included (None:
    ``root`` is gone)."""
    found = _tree(root)
    return None if found is None else found[0]


def _tree(root: int) -> tuple[float, list[int]] | None:
    """:func:`tree_cpu_time`, and the processes of the tree (``root`` first)."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            found = _stat(name)
            if found is not None:
                pid = int(name)
                children.setdefault(found[0], []).append(pid)
                cpu[pid] = found[1]
    if root not in cpu:
        return None
    total, todo, seen = 0.0, [root], []
    while todo:
        pid = todo.pop()
        seen.append(pid)
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total, seen


class RunCpu:
    """The CPU time of one run so far: from its cgroups where it has them, else from its
    runner's process tree (see the module docstring)."""

    def __init__(self, cgroups: CgroupSet | None, runner: int | None) -> None:
        self._cgroups = cgroups
        self._runner = runner
        #: The most CPU time read so far (a run's CPU time only grows; a tree whose runner
        #: is gone reads less than it used).
        self.most: float | None = None
        #: The processes of the runner's tree at the last read of it (runner first).
        self.tree: list[int] = []

    def read(self) -> float | None:
        """CPU seconds the run has used (None: it cannot be read)."""
        used = None
        if self._cgroups is not None:
            used = self._cgroups.cpu_time()
        if used is None and self._runner is not None:
            found = _tree(self._runner)
            if found is not None:
                used, self.tree = found
        if used is not None and (self.most is None or used > self.most):
            self.most = used
        return used
