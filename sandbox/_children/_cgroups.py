"""A run's cgroups, on either cgroup hierarchy: v1 (one per controller) or v2 (unified).

Theory of operation
-------------------
Every process of a run is in the run's cgroups, whatever it does with sessions and
parents; the host lists them, kills them, bounds their memory and process count, and
reads their CPU time there (:mod:`._reaper` says how a run ends). Linux offers two
hierarchies with the same ideas and different files:

* **v1** (:class:`CgroupV1`): one hierarchy per controller, each mounted on its own
  (``/sys/fs/cgroup/<controller>``). A run has one cgroup in each of ``pids``,
  ``freezer`` and ``memory`` (all three required), and in ``cpuacct`` and ``cpu`` where
  they are mounted. ``freezer.state`` freezes; killing is by pid.
* **v2** (:class:`CgroupV2`): one unified hierarchy, one cgroup per run, under
  ``sandbox-runtime`` in the cgroup delegated to the host, or else in the host's own
  cgroup (see Delegation, below). The core interface is always there:
  ``cgroup.procs``, ``cgroup.kill`` (the kernel kills every member, forks under way
  included, in one write), ``cgroup.freeze``, ``cgroup.events`` (``populated``,
  ``frozen``) and ``cpu.stat``. The ``memory`` (``memory.max``, ``memory.peak``,
  ``memory.events``) and ``pids`` (``pids.max``, ``pids.events``) controllers are there
  only where the parent's ``cgroup.controllers`` lists them and they can be enabled in
  its ``cgroup.subtree_control`` (the kernel enables none below a cgroup that holds
  processes, the root excepted); where not, the items they enforce are refused with
  that reason (:func:`cgroup_support`).

Which one a host uses is probed once (:func:`hierarchy`), from ``/proc/self/mountinfo``
and ``/proc/self/cgroup``: v1 where its ``pids``, ``freezer`` and ``memory`` hierarchies
are all mounted (legacy and hybrid hosts), else v2 where a cgroup2 file system is
mounted, else none. The rest of the code holds a :class:`CgroupSet` (a run's cgroups),
whose every operation is the hierarchy's: nothing else asks which version it is on.

Delegation (v2)
---------------
The kernel's "no internal processes" rule enables no controller below a cgroup that
holds processes (the root excepted), and a host's own cgroup holds the host. A host given
a cgroup of its own (a *delegated* one: systemd's ``Delegate=yes``, a container's cgroup
namespace) does what container runtimes do and what systemd's delegation contract asks:
it moves every process of that cgroup into a leaf below it, :data:`HOST_DIR`
(``sandbox-host``: the host, and whatever else was there, such as the shell that started
it), enables ``memory`` and ``pids`` in the delegated cgroup's
``cgroup.subtree_control``, and makes the runs' cgroups in the sibling :data:`RUNS_DIR`
(``sandbox-runtime``). Which cgroup is delegated, and how that is decided
(:func:`delegation`), in this order:

1. ``SANDBOX_CGROUP`` (:data:`CGROUP_ENV`): a cgroup v2 directory the user says is
   delegated to the host. It is validated (an absolute path, a directory of a cgroup2
   file system, not the machine's root cgroup, writable by the host, and, for a host
   that is not root, one the host's own cgroup is inside, since a process moves into a
   cgroup only where it may write the ``cgroup.procs`` of both cgroups' common
   ancestor); a bad value raises :class:`CgroupSettingError`, never falls back.
2. systemd's marker: ``trusted.delegate`` (systemd 251 and later, on every unit's
   cgroup; readable by root only) or else ``user.delegate`` (the same, readable by
   anyone) on the host's own cgroup: ``1`` is delegated, ``0`` is a unit without
   ``Delegate=``, whose cgroup is systemd's.
3. The root of the host's cgroup namespace that is not the machine's root cgroup (the
   own path in ``/proc/self/cgroup`` is ``/``, and the directory has ``cgroup.type``,
   which the machine's root cgroup has not): a container's cgroup, handed to it whole.
4. For a host that is not root: its own cgroup, with its ``cgroup.procs`` and
   ``cgroup.subtree_control``, owned by the host's uid while its parent is not (a
   delegation boundary, where root handed it over). Below that boundary, every cgroup of
   a user's service manager is the user's too, delegated or not: there the marker
   decides. For root, ownership says nothing.

Nothing else is delegated: a cgroup root merely can write (a systemd unit without
``Delegate=``) keeps its processes, the runs' cgroups are made in it as before, and the
memory and pids controllers are refused with the reason. A host already in the leaf of a
delegated cgroup (one started from a moved host) uses that cgroup as it is. The
machine's root cgroup is never delegated and never moved: the kernel lets it hold
processes and still give controllers to its children.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import functools
import os
import posixpath
import select
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from .._errors import CgroupSettingError

__all__ = [
    "CGROUP_ENV",
    "HOST_DIR",
    "CgroupSet",
    "CgroupSettingError",
    "CgroupV1",
    "CgroupV2",
    "Delegation",
    "Hierarchy",
    "NoCgroups",
    "cgroup_support",
    "cgroups_available",
    "delegation",
    "hierarchy",
]

#: The directory, in the host's own cgroup (v1) or in the cgroup delegated to it (v2),
#: that holds the runs' cgroups.
RUNS_DIR: Final = "sandbox-runtime"
#: The leaf, in a cgroup delegated to the host (v2), that every process of that cgroup is
#: moved into, so that the cgroup holds none and can give its children controllers.
HOST_DIR: Final = "sandbox-host"
#: The environment variable that names a cgroup v2 directory delegated to the host.
CGROUP_ENV: Final = "SANDBOX_CGROUP"
#: How long moving a delegated cgroup's processes into :data:`HOST_DIR` keeps finding new
#: ones (forks under way land in the old cgroup and are moved by the next pass) before it
#: gives up: a process tree that forks that long is not the host's.
_MOVE_WAIT: Final = 5.0
#: The v1 hierarchies a run needs (the keys of :func:`cgroup_support`, on either version:
#: on v2 ``freezer`` stands for the core interface, kill and freeze).
CONTROLLERS: Final = ("pids", "freezer", "memory")
#: v1 hierarchies used where mounted, not required: ``cpuacct`` for the CPU time of the
#: whole run, ``cpu`` for the runs' share of the CPU (below).
OPTIONAL: Final = ("cpuacct", "cpu")
#: The runs' share of the CPU against the host's own tasks when both want it (v1): every
#: run's processes together weigh as much as one of the host's (``cpu.shares`` of the
#: parent of the runs' ``cpu`` cgroups, where 1024 is a task's weight). CFS gives an idle
#: CPU to whoever wants it, so runs lose nothing while the host is idle; but a run that
#: keeps every CPU busy (a fork bomb) cannot starve the host, whose timers (the wall
#: clock, the CPU watcher) then still fire on time.
_RUNS_CPU_SHARES: Final = 1024
#: How long removing a run's cgroups waits for its killed processes to finish exiting: a
#: fork bomb of a few hundred processes on a loaded machine takes more than a second. (It
#: is the remains' thread that waits, not a run.)
_REMOVE_WAIT: Final = 10.0
#: The v2 controllers the runs' cgroups get where the parent offers them.
_V2_CONTROLLERS: Final = ("memory", "pids")
#: The files of each of those read at the end of every run (CgroupV2.counters).
_V2_COUNTERS: Final = {"memory": ("peak", "events"), "pids": ("current", "events")}


@dataclass(frozen=True)
class Delegation:
    """Whether a v2 host's cgroup is delegated to it, and how that was decided (see the
    module docstring).

    Attributes:
        cgroup: the cgroup judged: the delegated one when ``delegated`` (its processes go
            into :data:`HOST_DIR`, the runs' cgroups into :data:`RUNS_DIR` below it),
            else the host's own.
        delegated: whether the host may treat ``cgroup`` as its own.
        how: how that was decided, or why it is not delegated (for ``doctor``).
    """

    cgroup: Path
    delegated: bool
    how: str


# -- what is mounted where ------------------------------------------------------------


@dataclass(frozen=True)
class _Mount:
    """One cgroup file system mount: which hierarchy (``cgroup2``, or the v1 controllers
    it holds), where, and which directory of the hierarchy is its root."""

    point: Path
    root: str
    controllers: frozenset[str]  # empty for cgroup2

    def find(self, path: str) -> Path | None:
        """Where the hierarchy's ``path`` is seen through this mount (None: not below its
        root)."""
        root = self.root.rstrip("/")
        if path != root and not path.startswith(root + "/"):
            return None
        return self.point / path[len(root) :].lstrip("/")


def _unescape(field: str) -> str:
    """A mountinfo path field, its octal escapes (``\\040`` for a space) undone."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> tuple[dict[str, _Mount], list[_Mount]]:
    """The v1 mounts by controller, and the cgroup2 mounts, of a ``mountinfo`` text (the
    first mount of each hierarchy wins; a later one over the same point hides it, which
    the caller finds out when the directory is not what it expects)."""
    v1: dict[str, _Mount] = {}
    v2: list[_Mount] = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(rest) < 3:
            continue
        fstype, options = rest[0], rest[2].split(",")
        point, root = Path(_unescape(fields[4])), _unescape(fields[3])
        if fstype == "cgroup2":
            v2.append(_Mount(point, root, frozenset()))
        elif fstype == "cgroup":
            mount = _Mount(point, root, frozenset(options))
            for controller in (*CONTROLLERS, *OPTIONAL):
                if controller in options:
                    v1.setdefault(controller, mount)
    return v1, v2


def parse_proc_cgroup(text: str) -> tuple[dict[str, str], str | None]:
    """The process's v1 cgroup path by controller, and its v2 path, from
    ``/proc/self/cgroup``."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, names, path = parts
        if hid == "0" and not names:
            v2 = path
        for name in names.split(","):
            v1[name] = path
    return v1, v2


def mount_at(mountinfo: str, path: Path) -> tuple[str, _Mount] | None:
    """The file system type and mount that ``path`` (resolved) is on: the mount with the
    longest mount point above it, the later one where two share a point (it hides the
    earlier)."""
    best: tuple[str, _Mount] | None = None
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if not sep or len(fields) < 5 or not rest:
            continue
        point = Path(_unescape(fields[4]))
        if point != path and point not in path.parents:
            continue
        if best is None or len(point.parts) >= len(best[1].point.parts):
            best = (rest[0], _Mount(point, _unescape(fields[3]), frozenset()))
    return best


#: The cgroup files every run reads at its end (counters and events) and writes before
#: its Start (its limits), held open by path from when the run's cgroups are made (off
#: the run's path) until they are removed: a read is then one ``pread`` (about 1 µs) and a
#: write one ``pwrite``, instead of an open, a read or write and a close (22-42 µs each on
#: this machine's cgroup v1, on the run's path). Guarded by :data:`_held_lock`, under which
#: a held descriptor is used and closed, so that none is used once closed.
_held: dict[str, int] = {}
_held_lock = threading.Lock()
#: Enough for any of the held files (a few counters).
_HELD_READ: Final = 1 << 12
#: Bytes per read of a ``cgroup.procs`` listing.
_PROCS_READ: Final = 1 << 16


def _read(path: Path) -> str | None:
    key = str(path)
    if key in _held:
        with _held_lock:
            fd = _held.get(key)
            try:
                data = b"" if fd is None else os.pread(fd, _HELD_READ, 0)
            except OSError:
                data = b""
        if data:  # (never empty when read whole: else read it the usual way)
            return data.decode()
    try:
        return path.read_text()
    except OSError:
        return None


def _write(path: Path, text: str) -> None:
    """Write ``text`` to the cgroup file ``path`` (one write: a cgroup file takes each
    write whole).

    Raises:
        OSError: the kernel refused it.
    """
    key = str(path)
    if key in _held:
        with _held_lock:
            fd = _held.get(key)
            if fd is not None:
                os.pwrite(fd, text.encode(), 0)
                return
    path.write_text(text)


def _exists(path: Path) -> bool:
    return str(path) in _held or path.exists()


def _hold(paths: list[Path], flags: int = os.O_RDONLY) -> list[str]:
    """Hold ``paths`` open (``flags``) for :func:`_read` or :func:`_write` (those that can
    be opened; a file that does not exist is not held); their keys."""
    keys = []
    for path in paths:
        try:
            fd = os.open(path, flags | os.O_CLOEXEC)
        except OSError:
            continue
        with _held_lock:
            _held[str(path)] = fd
        keys.append(str(path))
    return keys


def _let_go(keys: list[str]) -> None:
    """Close what :func:`_hold` held (before the cgroups go)."""
    with _held_lock:
        for key in keys:
            fd = _held.pop(key, None)
            if fd is not None:
                os.close(fd)


def _keyed(path: Path) -> dict[str, int]:
    """A flat-keyed cgroup file (``key value`` lines: ``cgroup.events``, ``memory.events``,
    ``cpu.stat``) as a dict (empty if it cannot be read)."""
    found: dict[str, int] = {}
    for line in (_read(path) or "").splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            found[key] = int(value)
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _members(path: Path) -> set[int]:
    """The pids ``path``'s ``cgroup.procs`` lists (none if it cannot be read).

    Read with the raw calls: a text file's ``open`` makes five more system calls (a
    ``stat``, an ``ioctl``, two ``lseek``, another ``stat``), on the path of every run's end.
    """
    try:
        fd = os.open(posixpath.join(path, "cgroup.procs"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return set()
    chunks = []
    try:
        while chunk := os.read(fd, _PROCS_READ):
            chunks.append(chunk)
        return {int(x) for x in b"".join(chunks).split()}
    except (OSError, ValueError):
        return set()
    finally:
        os.close(fd)


# -- the hierarchies ----------------------------------------------------------------


class Hierarchy(abc.ABC):
    """One cgroup hierarchy version: how a run's cgroups are made, limited, listed, killed,
    measured and removed there. A run's :class:`CgroupSet` holds its directories and
    calls these; ``dirs`` maps a name (a v1 controller, or ``unified``) to a directory."""

    #: 1 or 2 (0: none).
    version: ClassVar[int]

    @abc.abstractmethod
    def describe(self) -> str:
        """Which hierarchy, and where the runs' cgroups are made (for ``doctor``)."""

    @abc.abstractmethod
    def support(self) -> dict[str, str | None]:
        """For each of :data:`CONTROLLERS`: None if runs get it here, else why not."""

    def details(self) -> dict[str, str | bool | None]:
        """Where the runs' cgroups are, and why there (for ``doctor --json``)."""
        return {}

    def available(self) -> bool:
        """Whether per-run cgroups can be made here (to list and kill every process)."""
        return all(reason is None for reason in self.support().values())

    def cpu_share_gap(self) -> str | None:
        """None where the runs together get a bounded share of the CPU against the host's
        own tasks (see :data:`_RUNS_CPU_SHARES`), so that the host's timers fire on time
        while runs keep every CPU busy; else why they do not."""
        if not self.available():
            return "the runs get no cgroups here"
        return f"cgroup v{self.version}: the host gives the runs no cpu controller"

    def holds_cpu_share(self) -> bool:
        """Whether :meth:`cpu_share_gap` finds none."""
        return self.cpu_share_gap() is None

    @abc.abstractmethod
    def bases(self) -> list[Path]:
        """The directories that hold the runs' cgroups."""

    @abc.abstractmethod
    def make(self, name: str) -> dict[str, Path]:
        """Make one run's cgroups (no limits).

        Raises:
            OSError: they could not be made (whatever was made is removed).
        """

    @abc.abstractmethod
    def set_limits(self, dirs: Mapping[str, Path], *, memory: int | None, pids: int | None) -> None:
        """Limit memory and process count to these (None: that one unlimited), whatever
        the limits were before.

        Raises:
            OSError: a limit could not be set.
        """

    def members(self, dirs: Mapping[str, Path]) -> set[int]:
        """Every process in the run's cgroups (each process of a run is in all of them, so
        one is read)."""
        path = dirs.get("pids") or next(iter(dirs.values()), None)
        return set() if path is None else _members(path)

    def run_controllers(self, dirs: Mapping[str, Path]) -> frozenset[str]:
        """Which of ``memory`` and ``pids`` the run's cgroups have (v1: a cgroup in that
        hierarchy; v2: the controller enabled for the runs)."""
        return frozenset(c for c in ("memory", "pids") if c in dirs)

    @abc.abstractmethod
    def freeze(self, dirs: Mapping[str, Path], deadline: float) -> None:
        """Freeze the run's processes, waiting until they are or ``deadline`` (best
        effort)."""

    @abc.abstractmethod
    def thaw(self, dirs: Mapping[str, Path]) -> None:
        """Undo :meth:`freeze` (best effort)."""

    def kill_all(
        self,
        dirs: Mapping[str, Path],
        spare: frozenset[int],
        timeout: float,
        runner: Callable[[], int | None] | None = None,
    ) -> set[int]:
        """See :meth:`CgroupSet.kill_all`."""
        if runner is not None and not spare:
            count = self._pids_current(dirs)
            if count == 0:
                return set()
            if count == 1:
                # One task is charged to the run, and it is the runner's if the runner is
                # not reaped yet: killed now (a kill succeeds until its process is
                # reaped), it was not reaped when the count was read either.
                pid = runner()
                if pid is not None:
                    return {pid}
        members = self.members(dirs) - spare
        if not members:
            return set()
        if spare:
            return self._kill_frozen(dirs, spare, timeout)
        return self._kill_unfrozen(dirs, members, timeout)

    def _kill_frozen(
        self, dirs: Mapping[str, Path], spare: frozenset[int], timeout: float
    ) -> set[int]:
        """Passes of freeze, list, SIGKILL, thaw, until a pass lists nothing but ``spare``."""
        found: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            self.freeze(dirs, deadline)
            members = self.members(dirs) - spare
            found |= members
            _kill(members)
            self.thaw(dirs)
            if not members or time.monotonic() > deadline:
                return found
            time.sleep(0.001)

    def _kill_unfrozen(
        self, dirs: Mapping[str, Path], members: set[int], timeout: float
    ) -> set[int]:
        """Passes of SIGKILL until a pass finds no member not signalled already."""
        signalled: set[int] = set()
        deadline = time.monotonic() + timeout
        new = members
        while new and time.monotonic() < deadline:
            _kill(new)
            signalled |= new
            if self._none_but(dirs, signalled):
                break
            time.sleep(0.001)  # time for a fork under way to list its child
            new = self.members(dirs) - signalled
        return signalled

    def _pids_current(self, dirs: Mapping[str, Path]) -> int | None:
        """``pids.current`` of the run, where it has a pids controller."""
        return None

    def _none_but(self, dirs: Mapping[str, Path], signalled: set[int]) -> bool:
        """Whether the set holds no task but one thread of each of ``signalled`` (then no
        process of it can fork again, and no child of a fork under way can appear).

        The pids controller charges a task from the moment its fork starts until it is
        reaped, listed or not. ``pids.current`` is read first; if every signalled process
        still exists after it (not reaped, so each was charged one task at least), a count
        equal to their number leaves no room for a second thread, a fork under way or a
        process the listing missed. Any other count (or no pids controller) says nothing:
        the caller goes on with its passes.
        """
        if self._pids_current(dirs) != len(signalled):
            return False
        for pid in signalled:
            try:
                os.kill(pid, 0)  # a zombie too: still charged until it is reaped
            except ProcessLookupError:
                return False
            except PermissionError:
                continue  # another uid's process exists all the same
        return True

    def limit_files(self, dirs: Mapping[str, Path]) -> list[Path]:
        """The files :meth:`set_limits` writes (those that exist are held open)."""
        return []

    def counters(self, dirs: Mapping[str, Path]) -> list[Path]:
        """The files read at the end of every run (:meth:`cpu_time`, :meth:`memory_peak`,
        :meth:`memory_exceeded`, :meth:`pids_exceeded`, the count of :meth:`kill_all`):
        never empty, so each can be read again from its start (``pread``). Not
        ``cgroup.procs``, whose listing a read from the start of a held descriptor does
        not always renew."""
        return []

    @abc.abstractmethod
    def cpu_time(self, dirs: Mapping[str, Path]) -> float | None:
        """CPU seconds used by the run's processes, gone ones included (None: unknown)."""

    @abc.abstractmethod
    def memory_peak(self, dirs: Mapping[str, Path]) -> int | None:
        """The most memory the run used at once, in bytes (None: unknown)."""

    @abc.abstractmethod
    def memory_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        """Whether the run hit its memory limit (allocations failed or the OOM killer
        ran)."""

    @abc.abstractmethod
    def pids_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        """Whether a fork was refused at the run's process limit."""

    def remove(self, dirs: Mapping[str, Path]) -> None:
        """Remove the run's cgroups (empty ones: members still exiting are waited for,
        :data:`_REMOVE_WAIT` at most; a cgroup that stays busy longer stays)."""
        deadline = time.monotonic() + _REMOVE_WAIT
        for path in dirs.values():
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)  # members still exiting


class NoCgroups(Hierarchy):
    """A host where no per-run cgroup can be made, and why."""

    version = 0

    def __init__(self, why: str) -> None:
        self.why = why

    def describe(self) -> str:
        return f"none ({self.why})"

    def support(self) -> dict[str, str | None]:
        return dict.fromkeys(CONTROLLERS, self.why)

    def bases(self) -> list[Path]:
        return []

    def make(self, name: str) -> dict[str, Path]:
        raise OSError(errno.ENOENT, f"no per-run cgroups here: {self.why}")

    def set_limits(self, dirs: Mapping[str, Path], *, memory: int | None, pids: int | None) -> None:
        pass

    def freeze(self, dirs: Mapping[str, Path], deadline: float) -> None:
        pass

    def thaw(self, dirs: Mapping[str, Path]) -> None:
        pass

    def cpu_time(self, dirs: Mapping[str, Path]) -> float | None:
        return None

    def memory_peak(self, dirs: Mapping[str, Path]) -> int | None:
        return None

    def memory_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        return False

    def pids_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        return False


class CgroupV1(Hierarchy):
    """The v1 hierarchies: one cgroup per controller per run, under ``sandbox-runtime``
    in the host's own cgroup of each hierarchy (``bases``: controller to that directory,
    None where the hierarchy is not mounted)."""

    version = 1

    def __init__(self, bases: Mapping[str, Path | None]) -> None:
        self._bases = dict(bases)
        #: The controllers whose base this host has made (and whose CPU share it set):
        #: each run's cgroup is then one mkdir per controller, not three system calls.
        self._ready: set[str] = set()

    def cpu_share_gap(self) -> str | None:
        """Held where the ``cpu`` hierarchy is mounted (its base's ``cpu.shares`` is set
        before a run's cgroup is made there)."""
        if not self.available():
            return "the runs get no cgroups here"
        if self._bases.get("cpu") is None:
            return "no cgroup v1 cpu hierarchy mounted"
        return None

    def _prepare_base(self, controller: str, base: Path) -> None:
        base.mkdir(exist_ok=True)
        if controller == "cpu":
            (base / "cpu.shares").write_text(str(_RUNS_CPU_SHARES))
        self._ready.add(controller)

    def describe(self) -> str:
        mounted = [c for c, b in self._bases.items() if b is not None]
        return (
            f"cgroup v1 ({', '.join(mounted) or 'no hierarchy'}): runs under {RUNS_DIR} "
            "in the host's own cgroup of each"
        )

    @functools.cached_property
    def _support(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for controller in CONTROLLERS:
            base = self._bases.get(controller)
            if base is None:
                out[controller] = f"no cgroup v1 {controller} hierarchy mounted"
                continue
            try:
                base.mkdir(exist_ok=True)
                probe = base / f"probe-{os.getpid()}"
                probe.mkdir(exist_ok=True)
                probe.rmdir()
            except OSError as exc:
                out[controller] = f"cgroup v1: cannot create cgroups under {base}: {exc.strerror}"
            else:
                out[controller] = None
        return out

    def support(self) -> dict[str, str | None]:
        return dict(self._support)

    def bases(self) -> list[Path]:
        return [base for base in self._bases.values() if base is not None]

    def make(self, name: str) -> dict[str, Path]:
        dirs: dict[str, Path] = {}
        try:
            for controller in (*CONTROLLERS, *OPTIONAL):
                base = self._bases.get(controller)
                if base is None:
                    if controller in OPTIONAL:
                        continue
                    raise OSError(errno.ENOENT, f"no {controller} cgroup hierarchy")
                path = base / name
                if controller not in self._ready:
                    self._prepare_base(controller, base)
                try:
                    path.mkdir()
                except FileNotFoundError:  # the base went since: make it again
                    self._prepare_base(controller, base)
                    path.mkdir()
                dirs[controller] = path
        except BaseException:
            self.remove(dirs)
            raise
        return dirs

    def set_limits(self, dirs: Mapping[str, Path], *, memory: int | None, pids: int | None) -> None:
        if "pids" in dirs:
            _write(dirs["pids"] / "pids.max", "max" if pids is None else str(pids))
        if "memory" in dirs:
            mem = dirs["memory"]
            value = "-1" if memory is None else str(memory)
            limit = mem / "memory.limit_in_bytes"
            swap = mem / "memory.memsw.limit_in_bytes"
            if not _exists(swap):
                _write(limit, value)
                return
            # No escape into swap: memory and swap together get the same limit. The memory
            # limit may never be above the swap one: lowered first, raised second (the
            # kernel refuses the other order with EINVAL).
            try:
                _write(limit, value)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                _write(swap, value)
                _write(limit, value)
            else:
                _write(swap, value)

    def limit_files(self, dirs: Mapping[str, Path]) -> list[Path]:
        found = [dirs["pids"] / "pids.max"] if "pids" in dirs else []
        if "memory" in dirs:
            found += [
                dirs["memory"] / f"memory.{f}" for f in ("limit_in_bytes", "memsw.limit_in_bytes")
            ]
        return found

    def freeze(self, dirs: Mapping[str, Path], deadline: float) -> None:
        freezer = dirs.get("freezer")
        if freezer is None:
            return
        state = freezer / "freezer.state"
        with contextlib.suppress(OSError):
            state.write_text("FROZEN")
            while state.read_text().strip() == "FREEZING" and time.monotonic() < deadline:
                time.sleep(0.001)

    def thaw(self, dirs: Mapping[str, Path]) -> None:
        freezer = dirs.get("freezer")
        if freezer is not None:
            with contextlib.suppress(OSError):
                (freezer / "freezer.state").write_text("THAWED")

    def _int(self, dirs: Mapping[str, Path], controller: str, name: str) -> int | None:
        path = dirs.get(controller)
        text = None if path is None else _read(path / name)
        try:
            return None if text is None else int(text)
        except ValueError:
            return None

    def _pids_current(self, dirs: Mapping[str, Path]) -> int | None:
        return self._int(dirs, "pids", "pids.current")

    _COUNTERS: ClassVar = (
        ("pids", "pids.current"),
        ("pids", "pids.events"),
        ("cpuacct", "cpuacct.usage"),
        ("memory", "memory.max_usage_in_bytes"),
        ("memory", "memory.oom_control"),
        ("memory", "memory.failcnt"),
    )

    def counters(self, dirs: Mapping[str, Path]) -> list[Path]:
        return [dirs[c] / name for c, name in self._COUNTERS if c in dirs]

    def cpu_time(self, dirs: Mapping[str, Path]) -> float | None:
        usage = self._int(dirs, "cpuacct", "cpuacct.usage")
        return None if usage is None else usage / 1e9

    def memory_peak(self, dirs: Mapping[str, Path]) -> int | None:
        return self._int(dirs, "memory", "memory.max_usage_in_bytes")

    def memory_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        mem = dirs.get("memory")
        if mem is None:
            return False
        if _keyed(mem / "memory.oom_control").get("oom_kill", 0) > 0:
            return True
        return bool(self._int(dirs, "memory", "memory.failcnt"))

    def pids_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        pids = dirs.get("pids")
        return pids is not None and _keyed(pids / "pids.events").get("max", 0) > 0


class CgroupV2(Hierarchy):
    """The unified hierarchy: one cgroup per run, made in ``parent``.

    ``parent`` is the directory that holds the runs' cgroups (made if missing; its own
    parent must be writable to enable controllers there): :data:`RUNS_DIR` in the cgroup
    delegated to the host, or else in the host's own cgroup (:func:`probe`). Given a
    ``delegation`` that says the cgroup is delegated, the first :meth:`support` moves its
    processes into :data:`HOST_DIR` first. The run's cgroups get the ``memory`` and
    ``pids`` controllers where they can be enabled (see the module docstring).
    """

    version = 2
    _NAME: Final = "unified"

    def __init__(self, parent: Path, delegation: Delegation | None = None) -> None:
        self.parent = parent
        self.delegation = delegation
        #: What moving the delegated cgroup's processes into its leaf did, once done (None:
        #: not tried, or it failed: :meth:`support` says why).
        self.moved: str | None = None
        #: Why each of :data:`_V2_CONTROLLERS` is not the runs' (None: it is), once probed.
        self._missing: dict[str, str | None] = {}
        self._probed: dict[str, str | None] | None = None
        self._lock = threading.Lock()

    def describe(self) -> str:
        out = f"cgroup v2 (unified): runs under {self.parent}"
        given = self.delegation
        if given is not None:
            out += (
                f"; {given.cgroup} is delegated to the host ({given.how})"
                if given.delegated
                else f"; the host's cgroup is not delegated to it ({given.how})"
            )
        if self.moved is not None:
            out += f"; {self.moved}"
        return out

    def details(self) -> dict[str, str | bool | None]:
        given = self.delegation
        return {
            "runs_under": str(self.parent),
            "cgroup": None if given is None else str(given.cgroup),
            "delegated": given is not None and given.delegated,
            "decided_by": None if given is None else given.how,
            "host_leaf": (
                str(given.cgroup / HOST_DIR) if given is not None and given.delegated else None
            ),
            "host_moved": self.moved,
        }

    @property
    def _support(self) -> dict[str, str | None]:
        with self._lock:
            if self._probed is None:
                self._probed = self._probe()
            return self._probed

    def _probe(self) -> dict[str, str | None]:
        core = self._prepare()
        if core is not None:
            return dict.fromkeys(CONTROLLERS, core)
        enabled = set((_read(self.parent / "cgroup.subtree_control") or "").split())
        out: dict[str, str | None] = {"freezer": None}
        for controller in _V2_CONTROLLERS:
            why = self._missing.get(controller)
            if controller not in enabled and why is None:
                why = (
                    f"cgroup v2: {controller} is not enabled in "
                    f"{self.parent}/cgroup.subtree_control"
                )
            out[controller] = None if controller in enabled else why
        return out

    def _prepare(self) -> str | None:
        """Make the parent, probe the core interface in a throwaway cgroup, move the
        delegated cgroup's processes into its leaf, and enable the controllers runs get;
        None when runs can have cgroups here, else why not."""
        try:
            self.parent.mkdir(exist_ok=True)
            probe = self.parent / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            try:
                lacking = [
                    name
                    for name in ("cgroup.kill", "cgroup.freeze", "cgroup.events", "cpu.stat")
                    if not (probe / name).exists()
                ]
            finally:
                probe.rmdir()
        except OSError as exc:
            return f"cgroup v2: cannot create cgroups under {self.parent}: {exc.strerror}"
        if lacking:
            return f"cgroup v2: this kernel's cgroups have no {', '.join(lacking)} (Linux < 5.14)"
        if self.delegation is not None and self.delegation.delegated:
            unmoved = self._move(self.delegation.cgroup)
            if unmoved is not None:
                for controller in _V2_CONTROLLERS:
                    self._missing[controller] = (
                        f"cgroup v2: {unmoved}; the kernel enables no controller below a "
                        "cgroup that holds processes"
                    )
                return None
        for controller in _V2_CONTROLLERS:
            self._missing[controller] = self._enable(controller)
        return None

    def _move(self, top: Path) -> str | None:
        """Move every process of ``top`` (a cgroup delegated to the host) into its leaf
        :data:`HOST_DIR`, pass after pass until a pass finds none (a fork under way when
        its parent moved lands in ``top``; a process that exits meanwhile is passed
        over); None when done (:attr:`moved` says what was moved), else why not."""
        leaf = top / HOST_DIR
        try:
            leaf.mkdir(exist_ok=True)
        except OSError as exc:
            return f"cannot make {leaf} to move the host's processes into: {exc.strerror}"
        moved: set[int] = set()
        deadline = time.monotonic() + _MOVE_WAIT
        while True:
            try:
                left = {int(x) for x in (top / "cgroup.procs").read_text().split()}
            except (OSError, ValueError) as exc:
                return f"cannot list the processes of {top}: {exc}"
            if not left:
                break
            if time.monotonic() > deadline:
                return (
                    f"processes kept appearing in {top} for {_MOVE_WAIT:g} s "
                    f"({len(left)} still there), which the host moves into {leaf}"
                )
            for pid in sorted(left):
                try:
                    (leaf / "cgroup.procs").write_text(str(pid))
                except OSError as exc:
                    if exc.errno == errno.ESRCH:
                        continue  # it exited meanwhile
                    return (
                        f"cannot move process {pid} from {top} into {leaf}: {exc.strerror or exc}"
                    )
                moved.add(pid)
            time.sleep(0.001)  # an exiting process stays listed for a moment
        if not moved:
            self.moved = f"the host's processes were in {leaf} already"
        else:
            host = " (the host among them)" if os.getpid() in moved else ""
            self.moved = f"moved {len(moved)} process(es) of {top} into {leaf}{host}"
        return None

    def _enable(self, controller: str) -> str | None:
        """Enable ``controller`` for the runs (in the parent's own parent, then in the
        parent); None if it is, else why not."""
        offered = (_read(self.parent / "cgroup.controllers") or "").split()
        if controller not in offered:
            above = self.parent.parent
            try:
                (above / "cgroup.subtree_control").write_text(f"+{controller}")
            except OSError as exc:
                if controller not in (_read(above / "cgroup.controllers") or "").split():
                    listed = above / "cgroup.controllers"
                    return f"cgroup v2: the {controller} controller is not listed in {listed}"
                why = (
                    "it holds processes, and the kernel enables controllers only below cgroups "
                    "without processes of their own; the host moves its processes out only "
                    f"of a cgroup delegated to it (set {CGROUP_ENV}, or see sandbox doctor)"
                    if exc.errno == errno.EBUSY
                    else exc.strerror
                )
                return (
                    f"cgroup v2: cannot enable {controller} in "
                    f"{above}/cgroup.subtree_control ({why})"
                )
        try:
            (self.parent / "cgroup.subtree_control").write_text(f"+{controller}")
        except OSError as exc:
            return (
                f"cgroup v2: cannot enable {controller} in "
                f"{self.parent}/cgroup.subtree_control ({exc.strerror})"
            )
        return None

    def support(self) -> dict[str, str | None]:
        return dict(self._support)

    def available(self) -> bool:
        """The core interface is enough: every process of a run is listed and killed, and
        its CPU time read, with or without the memory and pids controllers (the items
        they enforce are refused where they are missing)."""
        return self._support["freezer"] is None

    def controllers(self) -> frozenset[str]:
        """The controllers the runs' cgroups get (of ``memory`` and ``pids``)."""
        return frozenset(c for c in _V2_CONTROLLERS if self._support.get(c) is None)

    def bases(self) -> list[Path]:
        return [self.parent]

    def run_controllers(self, dirs: Mapping[str, Path]) -> frozenset[str]:
        return self.controllers()

    def make(self, name: str) -> dict[str, Path]:
        if not self.available():
            raise OSError(errno.ENOENT, self._support["freezer"] or "no cgroups")
        path = self.parent / name
        path.mkdir()
        return {self._NAME: path}

    def _dir(self, dirs: Mapping[str, Path]) -> Path | None:
        return dirs.get(self._NAME)

    def set_limits(self, dirs: Mapping[str, Path], *, memory: int | None, pids: int | None) -> None:
        path = dirs[self._NAME]
        # (No limit where the controller is not enabled: there is no file to lift it in.)
        if pids is not None or _exists(path / "pids.max"):
            _write(path / "pids.max", "max" if pids is None else str(pids))
        if memory is not None or _exists(path / "memory.max"):
            _write(path / "memory.max", "max" if memory is None else str(memory))
            swap = path / "memory.swap.max"
            if _exists(swap):  # no escape into swap while memory is limited
                _write(swap, "max" if memory is None else "0")

    def limit_files(self, dirs: Mapping[str, Path]) -> list[Path]:
        path = self._dir(dirs)
        names = ("pids.max", "memory.max", "memory.swap.max")
        return [] if path is None else [path / name for name in names]

    def freeze(self, dirs: Mapping[str, Path], deadline: float) -> None:
        path = self._dir(dirs)
        if path is None:
            return
        with contextlib.suppress(OSError):
            (path / "cgroup.freeze").write_text("1")
            _wait_event(path, "frozen", 1, deadline)

    def thaw(self, dirs: Mapping[str, Path]) -> None:
        path = self._dir(dirs)
        if path is not None:
            with contextlib.suppress(OSError):
                (path / "cgroup.freeze").write_text("0")

    def _kill_unfrozen(
        self, dirs: Mapping[str, Path], members: set[int], timeout: float
    ) -> set[int]:
        """``cgroup.kill``: the kernel sends SIGKILL to every member and to every process
        a fork under way makes, in one write; the members listed are what is returned."""
        path = dirs[self._NAME]
        try:
            (path / "cgroup.kill").write_text("1")
        except OSError:
            return super()._kill_unfrozen(dirs, members, timeout)
        return members | self.members(dirs)

    def _pids_current(self, dirs: Mapping[str, Path]) -> int | None:
        path = self._dir(dirs)
        text = None if path is None else _read(path / "pids.current")
        try:
            return None if text is None else int(text)
        except ValueError:
            return None

    def counters(self, dirs: Mapping[str, Path]) -> list[Path]:
        path = self._dir(dirs)
        names = ("cpu.stat", *(f"{c}.{f}" for c in self.controllers() for f in _V2_COUNTERS[c]))
        return [] if path is None else [path / name for name in names]

    def wait_empty(self, dirs: Mapping[str, Path], timeout: float) -> bool:
        """Wait until ``cgroup.events`` says no process is left (True), or ``timeout``."""
        path = self._dir(dirs)
        return path is None or _wait_event(path, "populated", 0, time.monotonic() + timeout)

    def cpu_time(self, dirs: Mapping[str, Path]) -> float | None:
        path = self._dir(dirs)
        usage = None if path is None else _keyed(path / "cpu.stat").get("usage_usec")
        return None if usage is None else usage / 1e6

    def memory_peak(self, dirs: Mapping[str, Path]) -> int | None:
        path = self._dir(dirs)
        text = None if path is None else _read(path / "memory.peak")
        try:
            return None if text is None else int(text)
        except ValueError:
            return None

    def memory_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        path = self._dir(dirs)
        if path is None:
            return False
        events = _keyed(path / "memory.events")
        return events.get("oom_kill", 0) > 0 or events.get("max", 0) > 0

    def pids_exceeded(self, dirs: Mapping[str, Path]) -> bool:
        path = self._dir(dirs)
        return path is not None and _keyed(path / "pids.events").get("max", 0) > 0

    def remove(self, dirs: Mapping[str, Path]) -> None:
        """Remove the run's cgroup and any the program made below it, deepest first,
        once they are empty (waited for through ``cgroup.events``)."""
        path = self._dir(dirs)
        if path is None:
            return
        self.wait_empty(dirs, _REMOVE_WAIT)
        for below in sorted(_subtree(path), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                below.rmdir()
        super().remove({self._NAME: path})


def _subtree(path: Path) -> Iterator[Path]:
    """The cgroups below ``path`` (not ``path``)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if entry.is_dir(follow_symlinks=False):
                yield Path(entry.path)
                yield from _subtree(Path(entry.path))


def _wait_event(path: Path, key: str, value: int, deadline: float) -> bool:
    """Wait until ``cgroup.events`` of ``path`` says ``key value`` (the kernel wakes a
    poller of the file when it changes), or ``deadline``; whether it did."""
    try:
        fd = os.open(path / "cgroup.events", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLPRI | select.POLLERR)
        while True:
            os.lseek(fd, 0, os.SEEK_SET)
            for line in os.read(fd, 4096).decode().splitlines():
                k, _, v = line.partition(" ")
                if k == key and v.strip() == str(value):
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            # At most 10 ms at a time: a notification is not guaranteed on every kernel.
            poller.poll(min(left, 0.01) * 1000)
    finally:
        os.close(fd)


# -- which hierarchy this host uses ----------------------------------------------------


def _marker(path: Path) -> tuple[str, str] | None:
    """systemd's delegation marker on ``path`` (its name and value), None where it has
    none: ``trusted.delegate`` first (only root can read it; systemd prefers it), then
    ``user.delegate``."""
    for name in ("trusted.delegate", "user.delegate"):
        try:
            value = os.getxattr(path, name)
        except OSError:  # ENODATA: not set (or trusted.* unreadable); ENOTSUP: no xattrs
            continue
        return name, value.decode(errors="replace").strip("\0\n ")
    return None


def _owner(path: Path) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def delegation(own: Path, own_path: str, *, euid: int | None = None) -> Delegation:
    """Whether the host's own cgroup (the directory ``own``, ``own_path`` in the
    hierarchy as ``/proc/self/cgroup`` names it) is delegated to it, or the one whose
    leaf (:data:`HOST_DIR`) it is in; decided as the module docstring says.

    Args:
        own: the host's own cgroup directory.
        own_path: its path in the hierarchy (``/`` for the root of the host's cgroup
            namespace).
        euid: the host's effective uid (by default this process's).
    """
    euid = os.geteuid() if euid is None else euid
    if own.name == HOST_DIR:
        above = _judge(own.parent, posixpath.dirname(own_path.rstrip("/")) or "/", euid)
        if above.delegated:
            return Delegation(above.cgroup, True, f"{above.how}; the host is in its leaf already")
    return _judge(own, own_path, euid)


def _judge(path: Path, cgroup_path: str, euid: int) -> Delegation:
    marker = _marker(path)
    if marker is not None:
        name, value = marker
        if value == "1":
            return Delegation(path, True, f"systemd marks it delegated ({name}=1)")
        return Delegation(
            path,
            False,
            f"systemd marks it not delegated ({name}={value}): the cgroup of a unit without "
            "Delegate=, which is systemd's to manage",
        )
    if cgroup_path == "/":
        if (path / "cgroup.type").exists():
            return Delegation(
                path,
                True,
                "the root of the host's cgroup namespace, not the machine's root cgroup: a "
                "container's cgroup, handed to it whole",
            )
        return Delegation(
            path,
            False,
            "the machine's root cgroup, never delegated (and never in need of it: it may "
            "hold processes and still give its children controllers)",
        )
    if euid != 0:
        files = (path, path / "cgroup.procs", path / "cgroup.subtree_control")
        owners = {_owner(f) for f in files}
        if owners != {euid}:
            return Delegation(
                path,
                False,
                f"not owned by uid {euid} (it and its cgroup.procs and "
                "cgroup.subtree_control): not delegated to this user",
            )
        if _owner(path.parent) == euid:
            return Delegation(
                path,
                False,
                f"owned by uid {euid} as its parent is, with no systemd marker: a cgroup of "
                "this user's service manager, which owns every cgroup it makes, delegated "
                "or not (systemd older than 251 marks none)",
            )
        return Delegation(
            path,
            True,
            f"owned by uid {euid} (with its cgroup.procs and cgroup.subtree_control) while "
            "its parent is not: a subtree handed to this user",
        )
    return Delegation(
        path,
        False,
        "no sign of delegation: no systemd marker (trusted.delegate, user.delegate), not "
        "the root of a cgroup namespace (and for root, owning it says nothing)",
    )


def _explicit(setting: str, mountinfo: str, own_path: str | None, euid: int) -> CgroupV2:
    """The v2 hierarchy with the runs under the cgroup ``SANDBOX_CGROUP`` names.

    Raises:
        CgroupSettingError: it names no cgroup this host can use.
    """

    def bad(why: str) -> CgroupSettingError:
        return CgroupSettingError(
            f"{CGROUP_ENV}={setting!r}: {why}. It names a cgroup v2 directory delegated to "
            "the host, under which the runs' cgroups are made (unset it to let the host "
            "find its own)"
        )

    if not setting.startswith("/"):
        raise bad("not an absolute path")
    path = Path(os.path.realpath(setting))
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise bad(exc.strerror or str(exc)) from exc
    if not stat.S_ISDIR(mode):
        raise bad("not a directory")
    found = mount_at(mountinfo, path)
    if found is None or found[0] != "cgroup2":
        on = "no file system" if found is None else f"{found[0]} mounted at {found[1].point}"
        raise bad(f"not a directory of a cgroup2 file system (it is on {on})")
    mount = found[1]
    lacking = [n for n in ("cgroup.procs", "cgroup.subtree_control") if not (path / n).exists()]
    if lacking:
        raise bad(f"not a cgroup (no {', '.join(lacking)})")
    if not (path / "cgroup.type").exists():
        raise bad("the machine's root cgroup, which is never delegated: make a cgroup below it")
    for target in (path, path / "cgroup.procs", path / "cgroup.subtree_control"):
        if not os.access(target, os.W_OK, effective_ids=True):
            raise bad(
                f"{target} is not writable by uid {euid}: delegate it to this user (as "
                f"root, chown {euid} {path} {path}/cgroup.procs {path}/cgroup.subtree_control)"
            )
    if euid != 0:
        own = None if own_path is None else mount.find(own_path)
        if own is None:
            raise bad("the host's own cgroup is not on that cgroup2 file system")
        common = path
        while common != own and common not in own.parents and common != mount.point:
            common = common.parent
        if not os.access(common / "cgroup.procs", os.W_OK, effective_ids=True):
            raise bad(
                f"the host's own cgroup ({own}) is not inside it, and a process that is not "
                "root joins a cgroup only where it may write the cgroup.procs of both "
                f"cgroups' common ancestor ({common}): start the host inside it (echo $$ > "
                f"{path}/cgroup.procs, then start the host from that shell)"
            )
    return CgroupV2(path / RUNS_DIR, Delegation(path, True, f"{CGROUP_ENV} names it"))


def probe(
    mountinfo: str, proc_cgroup: str, *, setting: str | None = None, euid: int | None = None
) -> Hierarchy:
    """The hierarchy a host with this ``mountinfo`` and ``/proc/self/cgroup`` uses: v1
    where its pids, freezer and memory hierarchies are mounted, else v2, else none.

    On v2, the runs' cgroups go under :data:`RUNS_DIR` in the cgroup delegated to the host
    (:func:`delegation`), else in the host's own cgroup.

    Args:
        mountinfo: the text of ``/proc/self/mountinfo``.
        proc_cgroup: the text of ``/proc/self/cgroup``.
        setting: the value of ``SANDBOX_CGROUP`` (None or empty: unset), which names the
            delegated cgroup and makes the host use v2, on any host.
        euid: the host's effective uid (by default this process's).

    Raises:
        CgroupSettingError: ``setting`` names no cgroup this host can use.
    """
    euid = os.geteuid() if euid is None else euid
    v1_mounts, v2_mounts = parse_mountinfo(mountinfo)
    v1_paths, v2_path = parse_proc_cgroup(proc_cgroup)
    if setting:
        return _explicit(setting, mountinfo, v2_path, euid)
    if all(c in v1_mounts for c in CONTROLLERS):
        bases: dict[str, Path | None] = {}
        for controller in (*CONTROLLERS, *OPTIONAL):
            mount, own = v1_mounts.get(controller), v1_paths.get(controller)
            where = None if mount is None or own is None else mount.find(own)
            bases[controller] = where / RUNS_DIR if where is not None and where.is_dir() else None
        return CgroupV1(bases)
    if v2_path is not None:
        for mount in v2_mounts:
            mine = mount.find(v2_path)
            if mine is not None:  # (a directory that is not there says so in support())
                given = delegation(mine, v2_path, euid=euid)
                where = given.cgroup if given.delegated else mine
                return CgroupV2(where / RUNS_DIR, given)
    if v2_mounts:
        return NoCgroups("cgroup v2 is mounted, but this process's own cgroup is not under it")
    missing = [c for c in CONTROLLERS if c not in v1_mounts]
    return NoCgroups(f"no cgroup v2 mounted, and no cgroup v1 {', '.join(missing)} hierarchy")


#: One probe at a time: a delegated host's first probe moves its processes.
_PROBING = threading.Lock()


def hierarchy() -> Hierarchy:
    """This host's hierarchy, probed once (see :func:`probe`), ``SANDBOX_CGROUP`` read then.

    Raises:
        CgroupSettingError: ``SANDBOX_CGROUP`` names no cgroup this host can use (each
            call probes again until it does).
    """
    with _PROBING:
        return _hierarchy()


@functools.cache
def _hierarchy() -> Hierarchy:
    mountinfo = _read(Path("/proc/self/mountinfo")) or ""
    proc_cgroup = _read(Path("/proc/self/cgroup")) or ""
    return probe(mountinfo, proc_cgroup, setting=os.environ.get(CGROUP_ENV) or None)


def cgroup_support() -> dict[str, str | None]:
    """For each of ``pids``, ``freezer`` (v2: kill and freeze) and ``memory``: None if
    per-run cgroups have it here, else why not (the reason names the hierarchy).

    Raises:
        CgroupSettingError: ``SANDBOX_CGROUP`` names no cgroup this host can use.
    """
    return hierarchy().support()


def runs_cpu_share_held() -> bool:
    """Whether the runs' cgroups hold their share of the CPU to that of one of the host's
    tasks (v1 with the ``cpu`` hierarchy; on v2 the runs get no ``cpu`` controller).

    Raises:
        CgroupSettingError: ``SANDBOX_CGROUP`` names no cgroup this host can use.
    """
    return hierarchy().holds_cpu_share()


def cgroups_available() -> bool:
    """Whether per-run cgroups can be made here: every process of a run can be listed
    and killed there, and its CPU time read.

    Raises:
        CgroupSettingError: ``SANDBOX_CGROUP`` names no cgroup this host can use.
    """
    return hierarchy().available()


# -- one run's cgroups ----------------------------------------------------------------


class CgroupSet:
    """One run's cgroups (one per v1 controller, or one v2 cgroup). Use :meth:`create`;
    always :meth:`remove`. Every operation is its :attr:`hierarchy`'s."""

    def __init__(self, hierarchy: Hierarchy, dirs: dict[str, Path]) -> None:
        self.hierarchy = hierarchy
        self.dirs = dirs
        self._held: list[str] = []
        #: The limits the set has (memory, pids), as :meth:`set_limits` wrote them (a new
        #: set has none); None while unknown (a write failed).
        self._limits: tuple[int | None, int | None] | None = (None, None)

    @classmethod
    def create(
        cls,
        name: str,
        *,
        memory: int | None,
        pids: int | None,
        within: Hierarchy | None = None,
    ) -> CgroupSet:
        """Make the run's cgroups (in ``within``, by default this host's hierarchy) and set
        their limits.

        Raises:
            OSError: a cgroup could not be made or limited (whatever was made is removed).
        """
        where = hierarchy() if within is None else within
        made = cls(where, where.make(name))
        try:
            made._held = [
                *_hold(where.counters(made.dirs)),
                *_hold(where.limit_files(made.dirs), os.O_WRONLY),
            ]
            made.set_limits(memory=memory, pids=pids)
        except BaseException:
            made.remove()
            raise
        return made

    def set_limits(self, *, memory: int | None, pids: int | None) -> None:
        """Limit the set's memory and process count to these (None: that one unlimited);
        nothing is written if they are the set's limits already.

        A limit whose controller the run's cgroups lack (:meth:`controllers`) is not set
        here (the caller sets its substitute). A set made ahead of its run has the default
        budget's limits from the start (see :class:`sandbox._children._workspace.Workspace`),
        so that a run of the default budget sets none on its path: writing them took 0.11
        ms of each run from a pool here (a cgroup v1 memory limit is a slow write).

        Raises:
            OSError: a limit could not be set (for memory: the run already uses more).
        """
        held = self.controllers()
        wanted = (memory if "memory" in held else None, pids if "pids" in held else None)
        if wanted == self._limits:
            return
        self._limits = None
        self.hierarchy.set_limits(self.dirs, memory=wanted[0], pids=wanted[1])
        self._limits = wanted

    def controllers(self) -> frozenset[str]:
        """Which of ``memory`` and ``pids`` limit the run here."""
        return self.hierarchy.run_controllers(self.dirs)

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
        the hierarchy counts it (v1: with a ``cpuacct`` cgroup; v2: always)."""
        return self.hierarchy.cpu_time(self.dirs)

    def pids(self) -> set[int]:
        """Every process in the run's cgroups now.

        A process that could move itself out of them (only root, at the ``process`` level,
        and never at ``confined``) could leave every other wall just as well.
        """
        return self.hierarchy.members(self.dirs)

    def freeze(self, timeout: float = 5.0) -> None:
        """Freeze every process of the run (none runs or forks until :meth:`thaw`),
        waiting until they are, ``timeout`` at most (best effort)."""
        self.hierarchy.freeze(self.dirs, time.monotonic() + timeout)

    def thaw(self) -> None:
        """Undo :meth:`freeze`."""
        self.hierarchy.thaw(self.dirs)

    def kill_all(
        self,
        *,
        spare: frozenset[int] = frozenset(),
        timeout: float = 5.0,
        runner: Callable[[], int | None] | None = None,
    ) -> set[int]:
        """Kill every member (but ``spare``) until none is left; return the pids killed.

        With nothing spared: on v2, one write of ``cgroup.kill`` (the kernel kills every
        member, and the child of any fork under way); on v1, passes of SIGKILL until a
        pass finds no member it has not signalled already (a process with SIGKILL pending
        cannot fork, so only a child whose fork was under way when its parent was
        signalled can appear after a pass, and the next pass gets it, a millisecond
        later, unless the pids controller's count shows there can be none: the end of
        most runs, one single-threaded runner, needs one pass). No freezing:
        freezing a cgroup of a few hundred busy processes on a loaded machine takes
        hundreds of milliseconds; this takes a few.

        With ``spare`` (a runner that must outlive the others for now), each pass freezes
        the cgroups (nothing in them can fork, exit or run, the spared ones included),
        lists the members, sends SIGKILL to them, and thaws so that the kills land. A set
        that holds nothing but ``spare`` is left alone.

        The zygote and the runner (subreapers) reap them.

        ``runner``, where the run's processes cannot leave its cgroups (a confined run:
        no cgroup file system in its view, and ``mount`` refused by its filter), sends
        SIGKILL to the run's runner and returns its pid, or None if it was reaped
        already. The end of most runs is then two system calls instead of a listing:
        where the pids controller counts no task, or one while the runner is not reaped
        (that one is the runner, single-threaded, and no fork of it is under way, which
        would count a second), nothing else is there to kill.
        """
        return self.hierarchy.kill_all(self.dirs, spare, timeout, runner)

    def _none_but(self, signalled: set[int]) -> bool:
        """Whether nothing but one thread of each of ``signalled`` is in the set (see
        :meth:`Hierarchy._none_but`)."""
        return self.hierarchy._none_but(self.dirs, signalled)

    def memory_peak(self) -> int | None:
        """The most memory the run's processes used at once, in bytes."""
        return self.hierarchy.memory_peak(self.dirs)

    def memory_exceeded(self) -> bool:
        """Whether the run hit its memory limit (allocations failed or the OOM killer ran)."""
        return self.hierarchy.memory_exceeded(self.dirs)

    def pids_exceeded(self) -> bool:
        """Whether a fork was refused because the run hit its process limit."""
        return self.hierarchy.pids_exceeded(self.dirs)

    def remove(self) -> None:
        """Remove the run's cgroups (they must be empty: call :meth:`kill_all` first)."""
        _let_go(self._held)
        self._held = []
        self.hierarchy.remove(self.dirs)
        self.dirs = {}
