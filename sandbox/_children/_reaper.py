"""No survivors, no zombies: finding and ending every process a run started.

Theory of operation
-------------------
A program may fork, call ``setsid``, double-fork so that its grandchildren lose their
parent, or fork as fast as it can. Two mechanisms keep track of all of it:

* **A per-run cgroup** (v1 ``pids``, ``freezer`` and ``memory`` hierarchies, when the host
  lets us create them): every process the runner starts is in it, whatever it does with
  sessions and parents. Ending the run freezes the cgroup (nothing in it can fork or
  run), sends SIGKILL to every member, thaws it so the kills land, and waits until it is
  empty. ``pids.max`` bounds a fork bomb; ``memory.limit_in_bytes`` is an honest memory
  limit across all the run's processes, page cache and tmpfs included.
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
import errno
import functools
import os
import signal
import time
from pathlib import Path
from typing import Final

import psutil

__all__ = [
    "CgroupSet",
    "cgroup_support",
    "kill_tree",
]

_CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
_CONTROLLERS: Final = ("pids", "freezer", "memory")
#: Per-run cgroups made where the hierarchy exists, not required: ``cpuacct`` for the CPU
#: time of the whole run (``max_cpu`` then holds across every process of the run, fractions
#: included), ``cpu`` for the runs' share of the CPU (below).
_OPTIONAL: Final = ("cpuacct", "cpu")
#: The runs' share of the CPU against the host's own tasks when both want it: every run's
#: processes together weigh as much as one of the host's (``cpu.shares`` of the parent of
#: the runs' ``cpu`` cgroups, where 1024 is a task's weight). CFS gives an idle CPU to
#: whoever wants it, so runs lose nothing while the host is idle; but a run that keeps
#: every CPU busy (a fork bomb) cannot starve the host, whose timers (the wall clock) then
#: still fire on time.
_RUNS_CPU_SHARES: Final = 1024


def _own_cgroup(controller: str) -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(","):
            return _CGROUP_ROOT / controller / path.lstrip("/")
    return None


def _base(controller: str) -> Path | None:
    own = _own_cgroup(controller)
    if own is None or not own.is_dir():
        return None
    return own / "sandbox-runtime"


@functools.cache
def cgroup_support() -> dict[str, str | None]:
    """For each controller, None if per-run cgroups can be made, else why not."""
    out: dict[str, str | None] = {}
    for controller in _CONTROLLERS:
        base = _base(controller)
        if base is None:
            out[controller] = f"no cgroup v1 {controller} hierarchy mounted"
            continue
        try:
            base.mkdir(exist_ok=True)
            probe = base / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            probe.rmdir()
        except OSError as exc:
            out[controller] = f"cannot create cgroups under {base}: {exc.strerror}"
        else:
            out[controller] = None
    return out


def _prepare_base(controller: str, base: Path) -> None:
    """Make the parent of the runs' cgroups in one hierarchy (weighted, for ``cpu``)."""
    base.mkdir(exist_ok=True)
    if controller == "cpu":
        (base / "cpu.shares").write_text(str(_RUNS_CPU_SHARES))


class CgroupSet:
    """One run's cgroups, one per controller. Use :meth:`create`; always :meth:`remove`."""

    def __init__(self, dirs: dict[str, Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, name: str, *, memory: int | None, pids: int | None) -> CgroupSet:
        """Make the run's cgroups and set their limits.

        Raises:
            OSError: a cgroup could not be made or limited (whatever was made is removed).
        """
        dirs: dict[str, Path] = {}
        made = cls(dirs)
        try:
            for controller in (*_CONTROLLERS, *_OPTIONAL):
                base = _base(controller)
                if base is None:
                    if controller in _OPTIONAL:
                        continue
                    raise OSError(errno.ENOENT, f"no {controller} cgroup hierarchy")
                _prepare_base(controller, base)
                path = base / name
                path.mkdir()
                dirs[controller] = path
            made.set_limits(memory=memory, pids=pids)
        except BaseException:
            made.remove()
            raise
        return made

    def set_limits(self, *, memory: int | None, pids: int | None) -> None:
        """Limit the set's memory and process count (None leaves that one unlimited).

        Raises:
            OSError: a limit could not be set (for memory: the run already uses more).
        """
        if pids is not None:
            (self.dirs["pids"] / "pids.max").write_text(str(pids))
        if memory is not None:
            mem = self.dirs["memory"]
            (mem / "memory.limit_in_bytes").write_text(str(memory))
            swap = mem / "memory.memsw.limit_in_bytes"
            if swap.exists():  # no escape into swap
                swap.write_text(str(memory))

    def procs_files(self) -> tuple[str, ...]:
        """The ``cgroup.procs`` file of each cgroup: a process that writes its pid to each
        of them joins the set."""
        return tuple(str(path / "cgroup.procs") for path in self.dirs.values())

    def add(self, pid: int) -> None:
        """Put ``pid`` in every cgroup of the set (before it runs untrusted code)."""
        for path in self.dirs.values():
            (path / "cgroup.procs").write_text(str(pid))

    def cpu_time(self) -> float | None:
        """CPU seconds used by every process of the run so far (and by those gone), where
        the set has a ``cpuacct`` cgroup."""
        usage = self._read_int("cpuacct", "cpuacct.usage")
        return None if usage is None else usage / 1e9

    def pids(self) -> set[int]:
        """Every process in the run's cgroups now.

        Every process of the run is in each of the set's cgroups (a process joins all of
        them, and its children are born in its cgroups), so one of them is read (the pids
        cgroup). A process that could move itself out of it (only root, at the ``process``
        level, and never at ``confined``) could leave the others just as well.
        """
        path = self.dirs.get("pids") or next(iter(self.dirs.values()), None)
        if path is None:
            return set()
        try:
            return {int(x) for x in (path / "cgroup.procs").read_text().split()}
        except OSError:
            return set()

    def kill_all(self, *, spare: frozenset[int] = frozenset(), timeout: float = 5.0) -> set[int]:
        """Kill every member (but ``spare``) until none is left; return the pids killed.

        With nothing spared, passes of SIGKILL until a pass finds no member it has not
        signalled already: a process with SIGKILL pending cannot fork, so only a child
        whose fork was under way when its parent was signalled can appear after a pass,
        and the next pass gets it (a second pass follows, after a millisecond, to find
        such children, unless the pids controller's count shows there can be none: the
        end of most runs, one single-threaded runner, needs one pass). No freezing:
        freezing a cgroup of a few hundred busy processes on a loaded machine takes
        hundreds of milliseconds; this takes a few.

        With ``spare`` (a runner that must outlive the others for now), each pass freezes
        the cgroups (nothing in them can fork, exit or run, the spared ones included),
        lists the members, sends SIGKILL to them, and thaws so that the kills land. A set
        that holds nothing but ``spare`` is left alone: nothing in it could fork, so there
        is nothing to freeze.

        The zygote and the runner (subreapers) reap them.
        """
        members = self.pids() - spare
        if not members:
            # Nothing to kill, and nothing that could fork but ``spare`` itself: no need
            # to freeze (which costs milliseconds).
            return set()
        if not spare:
            return self._kill_unfrozen(members, timeout)
        return self._kill_frozen(spare, timeout)

    def _kill_frozen(self, spare: frozenset[int], timeout: float) -> set[int]:
        """Passes of freeze, list, SIGKILL, thaw, until a pass lists nothing but ``spare``
        (see :meth:`kill_all`). Without a freezer cgroup, the same passes unfrozen."""
        freezer = self.dirs.get("freezer")
        state = None if freezer is None else freezer / "freezer.state"
        found: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            _freeze(state, deadline)
            members = self.pids() - spare
            found |= members
            _kill(members)
            _thaw(state)
            if not members or time.monotonic() > deadline:
                return found
            time.sleep(0.001)

    def _kill_unfrozen(self, members: set[int], timeout: float) -> set[int]:
        signalled: set[int] = set()
        deadline = time.monotonic() + timeout
        new = members
        while new and time.monotonic() < deadline:
            _kill(new)
            signalled |= new
            if self._none_but(signalled):
                break
            time.sleep(0.001)  # time for a fork under way to list its child
            new = self.pids() - signalled
        return signalled

    def _none_but(self, signalled: set[int]) -> bool:
        """Whether the set holds no task but one thread of each of ``signalled`` (then no
        process of it can fork again, and no child of a fork under way can appear).

        The pids controller charges a task from the moment its fork starts until it is
        reaped, listed or not. ``pids.current`` is read first; if every signalled process
        still exists after it (not reaped, so each was charged one task at least), a count
        equal to their number leaves no room for a second thread, a fork under way or a
        process the listing missed. Any other count (or no pids controller) says nothing:
        the caller goes on with its passes.
        """
        current = self._read_int("pids", "pids.current")
        if current != len(signalled):
            return False
        for pid in signalled:
            try:
                os.kill(pid, 0)  # a zombie too: still charged until it is reaped
            except ProcessLookupError:
                return False
            except PermissionError:
                continue  # another uid's process exists all the same
        return True

    def memory_peak(self) -> int | None:
        """The most memory the run's processes used at once, in bytes."""
        return self._read_int("memory", "memory.max_usage_in_bytes")

    def memory_exceeded(self) -> bool:
        """Whether the run hit its memory limit (allocations failed or the OOM killer ran)."""
        mem = self.dirs.get("memory")
        if mem is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (mem / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        return bool(self._read_int("memory", "memory.failcnt"))

    def pids_exceeded(self) -> bool:
        """Whether a fork was refused because the run hit its process limit."""
        pids = self.dirs.get("pids")
        if pids is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            events = (pids / "pids.events").read_text().split()
            return len(events) >= 2 and int(events[1]) > 0
        return False

    def _read_int(self, controller: str, name: str) -> int | None:
        path = self.dirs.get(controller)
        if path is None:
            return None
        try:
            return int((path / name).read_text())
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        """Remove the run's cgroups (they must be empty: call :meth:`kill_all` first)."""
        for path in self.dirs.values():
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # members still exiting
        self.dirs = {}


def _freeze(state: Path | None, deadline: float) -> None:
    """Freeze a cgroup through its ``freezer.state`` (if it has one), waiting until it is
    frozen or ``deadline``; best effort."""
    if state is not None:
        with contextlib.suppress(OSError):
            state.write_text("FROZEN")
            while state.read_text().strip() == "FREEZING" and time.monotonic() < deadline:
                time.sleep(0.001)


def _thaw(state: Path | None) -> None:
    """Thaw a cgroup frozen by :func:`_freeze` (best effort)."""
    if state is not None:
        with contextlib.suppress(OSError):
            state.write_text("THAWED")


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


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
