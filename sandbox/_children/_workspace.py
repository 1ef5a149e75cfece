"""A run's workspace: what the host makes for one run, and removes once its processes are gone.

Theory of operation
-------------------
Before a child is asked for, the host makes the run's place on the host
(:class:`Workspace`): a private working directory, the run's cgroups (with no limits
yet: the host sets them once the child is ready, before the Start), and, for a confined
run on a root host, a leased uid (:mod:`._uid`). Once a confined child is ready, the
workspace also holds the run's own file system (a descriptor through the runner's root),
which is how the host tells that the run filled its disk.

None of it is a process, and none of it may go while a process of the run could still use
it: :meth:`Workspace.remove` is called only once the run's processes have been sent
SIGKILL (the caller says whether the runner is known to be gone). Removing is idempotent
and never raises; what cannot go yet stays on purpose:

* cgroups that still list a process are killed again, and stay if they cannot be removed;
* a uid lease whose runner was not seen to exit is held until this host exits
  (:data:`_held_leases`), so that no other run is given an id a process of this one may
  still have.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Final

from protocol import CGROUP_PREFIX, WORKDIR_PREFIX
from runner import default_disk_files

from .._budget import DEFAULTS
from .._errors import SandboxError, SpawnFailed
from . import _uid
from ._cgroups import CgroupSet, mount_at

__all__ = [
    "CONFINED_WORKDIR",
    "SPARES",
    "Kind",
    "Spares",
    "Workspace",
    "confined_base",
    "disk_files",
    "kind_of",
    "memory_base",
    "workdir_bases",
]

#: A confined program's working directory, inside its view (also its ``HOME`` and
#: ``TMPDIR``): a directory of the run's own file system, the same for every run (each run
#: has its own view), which names nothing of the host.
CONFINED_WORKDIR: Final = "/tmp/work"

#: The uid leases of runners that would not die: held until this host exits, so that no
#: other run is given an id a process of an earlier run may still have.
_held_leases: list[_uid.Lease] = []
#: A run's file system with less room than this left is full: a write of the size Python's
#: buffered files make (64 KiB) no longer fits.
_DISK_SLACK: Final = 64 << 10


def disk_files(disk_bytes: int | None) -> int | None:
    """The files a run's file system of ``disk_bytes`` holds (None: no bound)."""
    return None if disk_bytes is None else default_disk_files(disk_bytes)


#: A memory file system every user may make directories in, on most Linux hosts.
_MEMORY_BASE: Final = "/dev/shm"


def memory_base(candidate: str, mountinfo: str) -> str | None:
    """``candidate`` (resolved) if it is a directory on tmpfs in which this process may
    make directories that no other user can remove (a world-writable one only with its
    sticky bit), per ``mountinfo``; else None."""
    try:
        real = os.path.realpath(candidate)
        info = os.stat(real)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or not os.access(real, os.W_OK | os.X_OK):
        return None
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        return None
    found = mount_at(mountinfo, Path(real))
    return real if found is not None and found[0] == "tmpfs" else None


@functools.cache
def _host_memory_base() -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            mountinfo = f.read()
    except OSError:
        return None
    return memory_base(_MEMORY_BASE, mountinfo)


def confined_base() -> str:
    """Where a confined run's working directory on the host is made: a memory file
    system where the host has one (see :func:`memory_base`), else the temporary
    directory.

    That directory stays empty (the runner starts there, then goes into its view, where
    its working directory is its own file system), so on tmpfs it costs no memory; on
    this machine's ext4 ``/tmp`` (journaled, mounted with ``discard``), making and
    removing it took 0.18-0.27 ms of the host's CPU per run and a millisecond of its
    background threads' time, on tmpfs 10 µs. A ``process`` run's directory is the
    program's own, which it may fill: that one stays in the temporary directory.
    """
    return _host_memory_base() or tempfile.gettempdir()


def workdir_bases() -> list[str]:
    """Every directory this host makes its runs' working directories in."""
    return sorted({tempfile.gettempdir(), confined_base()})


class Workspace:
    """One run's working directory, cgroups, uid lease and file system (see the module
    docstring)."""

    def __init__(self, *, confined: bool, use_cgroups: bool, disk_bytes: int | None) -> None:
        """Make the run's working directory and cgroups (with the default budget's memory
        and process limits: most runs keep them, and a workspace is most often made ahead
        of its run, off its path); for a confined run on a root host, lease its uid.

        ``disk_bytes``: a confined run's file system (its working directory and ``/tmp``;
        None: no bound but memory); the host's working directory stays empty.

        Raises:
            SpawnFailed: the lease or the cgroups could not be made (nothing is left
                behind).
            OSError: the working directory could not be made.
        """
        self.disk_bytes = disk_bytes
        #: The run's working directory on the host (a confined runner starts there, then
        #: goes into its view, where the host's stays empty: see :func:`confined_base`).
        self.workdir = tempfile.mkdtemp(
            prefix=f"{WORKDIR_PREFIX}{os.getpid()}-", dir=confined_base() if confined else None
        )
        #: The program's working directory, as the program names it.
        self.program_dir = CONFINED_WORKDIR if confined else self.workdir
        self.lease: _uid.Lease | None = None
        self.cgroups: CgroupSet | None = None
        #: The run's file system, seen from the host (a confined run's, once ready).
        self.run_fs: int | None = None
        try:
            if confined:
                self.lease = _uid.lease()
            if use_cgroups:
                self.cgroups = CgroupSet.create(
                    f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:16]}",
                    memory=int(DEFAULTS["max_memory"]),
                    pids=int(DEFAULTS["max_processes"]),
                )
        except OSError as exc:
            self.remove(runner_gone=True)
            raise SpawnFailed(f"cannot prepare the run: {exc}") from exc

    def hold_fs(self, pid: int) -> str | None:
        """Hold the run's file system (through the root of ``pid``, the run's runner) while
        nothing of the run has run yet: what :meth:`disk_full` reads. None when held, else
        why not."""
        if self.run_fs is not None:
            return None
        try:
            fd = os.open(
                f"/proc/{pid}/root{self.program_dir}",
                os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
            )
        except OSError as exc:
            return f"the run's file system cannot be found: {exc}"
        info = os.fstatvfs(fd)
        # The run's own: a file system of exactly the asked size, not the host's (tmpfs
        # rounds its size up to pages, and says 0 for no bound).
        pages = -(-(self.disk_bytes or 0) // info.f_frsize)
        if (info.f_blocks, info.f_files) != (pages, disk_files(self.disk_bytes) or 0):
            os.close(fd)
            return "the run's working directory is not the run's own file system"
        self.run_fs = fd
        return None

    def limits_access(self) -> contextlib.AbstractContextManager[None]:
        """Within: this thread may set the limits of the run's processes (a leased uid's:
        see :meth:`sandbox._uid.Lease.real_ids`)."""
        return contextlib.nullcontext() if self.lease is None else self.lease.real_ids()

    def disk_full(self) -> bool:
        """Whether the run's file system is full: less than :data:`_DISK_SLACK` bytes, or no
        file, left (decided by the host, from what it sees of the file system)."""
        if self.run_fs is None or self.disk_bytes is None:
            return False
        info = os.fstatvfs(self.run_fs)
        return info.f_bavail * info.f_frsize < _DISK_SLACK or info.f_favail == 0

    def remove(self, *, runner_gone: bool) -> None:
        """Remove what the run made, once its processes have been sent SIGKILL (idempotent).

        ``runner_gone``: the runner is known to have exited; if not, the uid lease is held
        until this host exits rather than released.
        """
        if self.run_fs is not None:
            os.close(self.run_fs)  # the last hold on the run's file system: it is freed
            self.run_fs = None
        if self.cgroups is not None:
            self.cgroups.kill_all()
            self.cgroups.remove()
            self.cgroups = None
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.lease is not None and runner_gone:
            # No process runs as the id any more (the runner, and everything in the
            # cgroups, killed just now): another run may have it. (A runner that would
            # not die keeps its id held until this host exits.)
            self.lease.release()
        elif self.lease is not None:
            _held_leases.append(self.lease)  # on purpose, for as long as this host lives
        self.lease = None


#: What a workspace is made for: (confined, use_cgroups, disk_bytes); see :func:`kind_of`.
Kind = tuple[bool, bool, int | None]


def kind_of(confined: bool, use_cgroups: bool, disk_bytes: int | None) -> Kind:
    """The kind of workspace a child of these needs (and of child a pool keeps): only a
    confined run has a file system of its own, so the size matters only there."""
    return (confined, use_cgroups, disk_bytes if confined else None)


#: The most kinds of workspace kept ahead at once (beyond, the oldest kind's goes).
_SPARE_KINDS: Final = 4


class Spares:
    """One workspace made ahead for the next child of each kind forked on demand.

    Making a run's workspace (its directory, its cgroups, its uid) took 0.9 ms of a run
    forked on demand here, before the zygote was asked. A run takes the one made ahead
    for its kind (:meth:`take`) and the next one is made in the background
    (:meth:`make`), while the zygote forks. Like a pool's idle child, a workspace kept
    here holds an empty directory, a set of empty cgroups and, confined on a root host, a
    uid; :meth:`close` removes them (the host does at exit).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[Kind, Workspace] = {}
        self._making = 0
        self._made = threading.Condition(self._lock)
        self._closed = False
        self._pid = os.getpid()

    def take(self, kind: Kind) -> Workspace | None:
        """The workspace made ahead for ``kind`` (None if there is none); the host is in
        use again, if it was closed."""
        with self._lock:
            if self._pid != os.getpid():  # a forked host: those are its parent's
                self._kept = {}
                self._pid = os.getpid()
            self._closed = False
            return self._kept.pop(kind, None)

    def make(self, kind: Kind) -> None:
        """Make a workspace for ``kind`` unless one is kept (quietly: a failure shows, with
        its reason, when a run makes its own)."""
        with self._lock:
            if self._closed or kind in self._kept:
                return
            self._making += 1
        try:
            confined, use_cgroups, disk_bytes = kind
            try:
                made = Workspace(confined=confined, use_cgroups=use_cgroups, disk_bytes=disk_bytes)
            except (SandboxError, OSError):  # (SpawnFailed; a bad SANDBOX_CGROUP)
                return
            with self._lock:
                if self._closed or kind in self._kept:
                    unwanted = [made]
                else:
                    unwanted = []
                    if len(self._kept) >= _SPARE_KINDS:  # the oldest kind's goes
                        unwanted.append(self._kept.pop(next(iter(self._kept))))
                    self._kept[kind] = made
            for workspace in unwanted:  # (before close() may return: it waits for this)
                workspace.remove(runner_gone=True)
        finally:
            with self._lock:
                self._making -= 1
                self._made.notify_all()

    def held(self) -> list[Workspace]:
        """The workspaces kept (for measurements and tests)."""
        with self._lock:
            return list(self._kept.values())

    def close(self, timeout: float = 10.0) -> None:
        """Remove every workspace kept, once any being made is (made ahead no more until
        the next :meth:`take`)."""
        with self._lock:
            self._closed = True
            self._made.wait_for(lambda: self._making == 0, timeout)
            kept, self._kept = list(self._kept.values()), {}
        for workspace in kept:
            workspace.remove(runner_gone=True)


#: The host's workspaces made ahead.
SPARES = Spares()
