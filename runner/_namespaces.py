"""Linux namespaces for the ``confined`` level: the runner walls itself in before its Start.

Theory of operation
-------------------
:func:`enter` runs in the runner's own process, at start-up, before it reads its Start, so
no untrusted code ever runs outside the walls (DESIGN, the ``confined`` bullet). It uses the
standard library only (:mod:`ctypes` for the few system calls :mod:`os` lacks), because the
runner starts with the standard library and msgspec alone. In order:

1. **Check, change nothing.** The spec is checked against the host (paths absolute, present,
   with no symbolic link among their parents; a root caller names its program's host ids),
   and the process must hold no descriptor of a directory: ``openat(fd, "..")`` from one
   would walk out of any view. A refusal raises :class:`ValueError` and leaves the process
   exactly as it was.
2. **One unshare.** ``unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS |
   CLONE_NEWPID | CLONE_NEWCGROUP)``, and ``CLONE_NEWUSER`` with them for an unprivileged
   caller: the kernel creates the user namespace first and makes it the owner of the
   others, so no host privilege is needed: only a single-threaded caller and a host that
   allows user namespaces (``user.max_user_namespaces`` above 0, and no distribution switch
   against them: Debian's ``kernel.unprivileged_userns_clone``, Ubuntu's AppArmor
   restriction). A root caller makes no user namespace (see *Identity*): its namespaces
   belong to the initial one, and nothing inside can ever hold a capability over them.
3. **Identity, unprivileged caller.** ``/proc/self/setgroups`` gets ``deny`` (required
   before an unprivileged ``gid_map``), then ``uid_map`` and ``gid_map`` get one line each:
   the spec's uid/gid inside is the caller's effective uid/gid outside.
4. **UTS and network.** ``sethostname`` to the spec's name; the new network namespace has only
   ``lo``, down, which is brought up (``SIOCSIFFLAGS``), so the program has a loopback of its
   own and nothing else: no route out, and the host's 127.0.0.1 is another interface.
5. **PID 1.** ``unshare(CLONE_NEWPID)`` moves only the children, so the process forks once
   (unless it was born PID 1: see *The shared view* below). The
   child is PID 1 of the new PID namespace, and it is the one :func:`enter` returns in. The
   original process (the *middle*) stays outside, closes every descriptor above 2 (so the
   channels see EOF as soon as the child is gone), waits for the child and exits with its
   status, dies by the same signal if the child was killed (see *Signals*). The child
   re-arms ``PR_SET_PDEATHSIG`` (a fork clears it) against the middle, then checks the
   middle is still alive through a pidfd opened before the fork (``getppid()`` is 0 in the
   new namespace, so it cannot tell): the host kills the middle, the kernel kills PID 1, and
   the death of PID 1 kills every process of the namespace before the middle can reap it.
   A root caller's PID 1 then sets ``vm.memfd_noexec`` to 2 for its PID namespace (Linux
   6.3): every memfd made below it is sealed not executable (an unprivileged caller may not
   set it; the seccomp filter has to refuse those memfds there).
6. **The view**, built by the child (or copied from a shared one: see *The shared view*
   below): ``/`` made recursively private; a small tmpfs mounted
   over a staging directory (one of :data:`_STAGES` that no path of the spec lives in); in
   it ``/proc`` (a fresh proc for the new PID namespace, ``subset=pid``); ``/dev``, with
   ``null``, ``zero``, ``full``, ``random`` and ``urandom`` and the ``fd``, ``stdin``,
   ``stdout``, ``stderr`` links (a root caller makes the devices on a 4 KiB tmpfs of its
   own, read-only once made; an unprivileged one, which may not make device nodes, binds
   the host's); the **run's file system**, one tmpfs of ``disk_bytes`` and ``disk_files``
   mounted nosuid, nodev and noexec, whose ``tmp`` directory (mode 1777) is bound on
   ``/tmp`` and whose ``work`` directory (the program's, mode 0700) on ``workdir``: all the
   program can write, none of it on a host file system; then every ``read_only`` path
   (bound recursively, then read-only, nosuid, nodev, recursively:
   ``mount_setattr(AT_RECURSIVE)``), at the same path as on the host (every ``placed`` one
   at its own path inside: the runner's packages, under ``/sandbox/lib``). The tmpfs root is made
   read-only, then ``pivot_root(".", ".")`` and a lazy unmount of the old root leave nothing
   of the host but what was bound. The working directory becomes ``workdir`` (``/`` if there
   is none). Mount points are only ever created on the tmpfs mounts made here, never on a
   host filesystem: :func:`enter` leaves no trace on the host.
7. **No privilege left.** Every capability goes: the bounding set; a root caller's process
   then becomes the program's host ids (``setgroups([])``, ``setresgid``, ``setresuid``,
   and dumpable again: see *Identity*); the ambient set and the effective, permitted and
   inheritable sets; then ``PR_SET_NO_NEW_PRIVS``, and the death signal is armed again (a
   change of ids clears it). Without this step every wall above could be taken down from
   inside (the creator of a user namespace holds all capabilities in it, and root holds
   them everywhere: either could remount the view read-write or unmount it).

:func:`enter` costs about 5 ms (median of 20 runs, measured in the child from before the
call to its return in PID 1, on a 2-CPU VM with Linux 6.18): the fork about 1.7 ms, the
view (some twenty mounts and the pivot) 1.6 ms, the unshare 0.7 ms, the rest 1 ms. A root
caller's path (no user namespace, a /dev and a file system of the run's own, the switch of
ids) costs the same: against the path before it, alternated in one run on the same VM,
loaded, 40 children each, 13.9 against 13.3 ms of CPU per child (the call and the
namespaces' teardown), the fastest call 5.3 against 7.9 ms.

The shared view (a root caller's template)
------------------------------------------
Most of that is the same for every run: the view of the host. A template process (the
zygote) that forks many runners of one spec saves them two steps (:func:`enter`'s
``view`` and ``pid_one``):

* **The view, built once.** :func:`build_shared_view`, in a disposable process, makes a
  mount namespace holding step 6's view but for what is each run's own: ``/proc`` and
  ``/tmp`` are empty mount points; the root, ``/dev`` and every bound path are read-only.
  The template keeps a descriptor of it (``/proc/<pid>/ns/mnt``) and passes it to each
  runner, which joins it and copies it at once (``setns``, then ``unshare(CLONE_NEWNS)``)
  instead of unsharing the host's mount table, and mounts in its copy only what is its
  own: a proc of its PID namespace, and its file system, here mounted on ``/tmp`` itself
  (the root of that tmpfs, mode 1777) with the working directory made in it, which is
  why a run shares a view only if its working directory is below ``/tmp``
  (:func:`shares_view`). No run writes to the shared view (it is read-only, its mounts are
  private, and a copy's mounts do not propagate to it); what runs share through it is
  what they already shared through the bound host paths: read-only files. No pivot and
  no lazy unmount either: each of those waits for an RCU grace period, milliseconds on a
  loaded machine.
* **PID 1 at birth.** :func:`fork_pid_one`: the template unshares ``CLONE_NEWPID`` (which
  only sets where its next child is born) and forks; the child is PID 1 of its namespace
  from the start, with no second fork and no process left between it and the template.
* **A network namespace made ahead.** :func:`make_network_namespace`: the template makes a
  new network namespace, brings its loopback up and keeps a descriptor of it, then goes
  back to its own, while it has nothing else to do; it gives each one to a single runner,
  which joins it (``setns``) rather than making its own (step 2 without
  ``CLONE_NEWNET``, and step 4's loopback already up). Nothing is shared: a namespace
  made ahead is one run's, as one made in step 2 would be, and no process is in it before
  that run's. It saves the run the kernel's making of a network namespace, about 0.6 ms
  of its path here (the unshare of step 2 took 0.75 ms with it, 0.16 ms without).

Measured on the same VM (Linux 6.18, loaded by other users; medians of 40 children,
alternated with the path above in one run): the child's walls (from the start of
:func:`runner._confine.confine` to the seccomp filter) 2.5 ms of wall time instead of
9.4 to 16 (the second fork 2.4 to 6.7 ms, the run's file system and its lazy unmount
0.3 to 3.2 ms, the pivot and its lazy unmount 0.2 to 2.5 ms; the mounts, 1.7 ms of CPU
in all, are gone); the copy of the view and the two mounts of its own cost 0.14 ms.

Identity
--------
The program is never host root, and on a root host never a uid that anything else on the
host has, another run included.

* **A root caller** (the host runs as root) makes no user namespace. It builds the view as
  real root (every bind source is within its reach, a Python under ``/root``, mode 0700,
  included), then becomes ``host_uid``/``host_gid`` for good: an unprivileged host uid and
  gid that the host leases for this run alone from a range no account has
  (:mod:`sandbox._uid`). The program sees that uid (there is no ``/etc/passwd`` in the
  view: ``pwd`` lookups fail). It owns nothing on the host: all it can write is the run's
  file system, gone with the run. The kernel counts its per-user quotas (inotify instances,
  queued signals, ``RLIMIT_NPROC``'s processes) against that uid alone, so a run that
  exhausts them leaves the host's root and every other run theirs. A user namespace would
  not give that: the kernel charges what a user namespace's members use to the
  namespace's creator as well, and root would be the creator. Once its ids change, the
  process is made dumpable again (the kernel made it undumpable, which would give its own
  ``/proc`` files to root): what it holds is its own to read anyway, and nothing else on
  the host is its uid.
* **An unprivileged caller** maps ``uid``/``gid`` (1000/1000 by default) to its own
  effective uid/gid, in a user namespace; no other id can be mapped (an unprivileged process
  may map only its own). The default is not root: a program that sees uid 0 behaves as root
  (pip, package managers); ``uid=0`` is allowed and gains nothing. Its programs are the
  caller's uid on the host, and share its per-user quotas with it and with each other.

Either way: files of other host users show as they are (root's as 0, or 65534 in a user
namespace that does not map them) and are checked against the program's host ids, so a
root-only file in the view cannot be read; ``chown`` fails; a set-user-id bit has no
effect (every mount is nosuid, and ``no_new_privs``), and nothing the program writes can
be reached by another host user at all: the run's file system is in the run's mount
namespace only, and reaching it from outside (``/proc/<pid>/root``) takes the right to
trace the run's processes. ``/proc`` is mounted with ``subset=pid``: a full proc would show
global sysctls, some of which host uid 0 may write even without capabilities.

The minimum view for a Python runner (:func:`python_read_only`)
---------------------------------------------------------------
The runner started with ``python -I -S`` and its start-up imports are done before
:func:`enter`; what it still needs afterwards is what it may import or load later:

* the standard library directory (``lib/pythonX.Y``, with ``lib-dynload``); not the rest of
  ``sys.base_prefix`` (its ``bin``, headers, ``libpython``: already mapped);
* the import directories the host gives (the repository's ``protocol`` and ``runner``, the
  ``msgspec`` package: the narrower the better, the whole ``site-packages`` if programs may
  import anything installed);
* the directory of the C library, where the shared libraries that extension modules load
  on first import live (``libssl``, ``libz``, ``libffi``, ``libsqlite3``...), the ``/lib``
  and ``/lib64`` symbolic links when the system has merged ``/usr``, and
  ``/etc/ld.so.cache`` (the loader finds them through it);
* ``/etc/localtime`` (and its target) for local time.

Left out on purpose: ``/usr/bin`` and ``/bin`` (a program cannot run other programs unless
the host adds them), ``/etc/passwd`` (``pwd.getpwuid`` fails; ``HOME`` is set by the host),
``/usr/share`` (:mod:`zoneinfo` knows no zone but the local one, no terminfo), the
interpreter's executable (a program cannot start another Python), ``/dev/shm`` (no
:mod:`multiprocessing` semaphores), ``/sys`` (``os.cpu_count()`` still answers).

Signals
-------
The host sees the middle: its pid, its exit status, its resource usage (the child's is
added when it is reaped). The middle forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and
SIGUSR2 to PID 1. The kernel delivers a signal to the init of a PID namespace only if it has
a handler for it (SIGKILL excepted), so a forwarded signal that PID 1 neither catches nor
ignores is sent as SIGKILL instead, and the middle then dies by the original signal: the
host sees what it would see in the ``process`` level. A program that installs a handler gets
its signal. SIGKILL to the middle kills PID 1 through the death signal. SIGSTOP stops the
middle only (freeze a run with the cgroup freezer).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import select
import signal
import socket
import stat
import struct
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NoReturn

__all__ = ["ConfineSpec", "check", "enter", "probe", "python_read_only"]

# <sched.h>
_CLONE_NEWNS: Final = 0x00020000
_CLONE_NEWCGROUP: Final = 0x02000000
_CLONE_NEWUTS: Final = 0x04000000
_CLONE_NEWIPC: Final = 0x08000000
_CLONE_NEWUSER: Final = 0x10000000
_CLONE_NEWPID: Final = 0x20000000
_CLONE_NEWNET: Final = 0x40000000
#: Every namespace :func:`enter` creates, in the order :func:`probe` reports them.
_NAMESPACES: Final = (
    ("user", _CLONE_NEWUSER),
    ("mount", _CLONE_NEWNS),
    ("net", _CLONE_NEWNET),
    ("ipc", _CLONE_NEWIPC),
    ("uts", _CLONE_NEWUTS),
    ("pid", _CLONE_NEWPID),
    ("cgroup", _CLONE_NEWCGROUP),
)
# <sys/mount.h>
_MS_RDONLY: Final = 0x1
_MS_NOSUID: Final = 0x2
_MS_NODEV: Final = 0x4
_MS_NOEXEC: Final = 0x8
_MS_REMOUNT: Final = 0x20
_MS_NOATIME: Final = 0x400
_MS_NODIRATIME: Final = 0x800
_MS_BIND: Final = 0x1000
_MS_REC: Final = 0x4000
_MS_PRIVATE: Final = 0x40000
_MS_RELATIME: Final = 0x200000
_MNT_DETACH: Final = 2
# <linux/mount.h>; the MOUNT_ATTR_ values of these four equal their MS_ twins.
_MOUNT_ATTR_RDONLY: Final = 0x1
_MOUNT_ATTR_NOSUID: Final = 0x2
_MOUNT_ATTR_NODEV: Final = 0x4
_MOUNT_ATTR_NOEXEC: Final = 0x8
_AT_FDCWD: Final = -100
_AT_RECURSIVE: Final = 0x8000
# <sys/statvfs.h> ST_ flags that a remount must repeat (a mount copied into a user
# namespace has them locked), and the one whose MS_ value differs.
_ST_KEPT: Final = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_NOATIME | _MS_NODIRATIME
_ST_RELATIME: Final = 0x1000
# <linux/prctl.h>, <linux/capability.h>
_PR_SET_PDEATHSIG: Final = 1
_PR_SET_DUMPABLE: Final = 4
_PR_CAPBSET_DROP: Final = 24
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_CAP_AMBIENT: Final = 47
_PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
_CAPABILITY_VERSION_3: Final = 0x20080522
# <linux/sockios.h>, <net/if.h>: struct ifreq is a 16-byte name and a 24-byte union.
_SIOCGIFFLAGS: Final = 0x8913
_SIOCSIFFLAGS: Final = 0x8914
_IFF_UP: Final = 0x1
_IFREQ: Final = "16sh22x"
#: System call numbers glibc has no wrapper for. mount_setattr is 442 on every architecture
#: listed (the numbers above 423 are shared); pivot_root differs.
_SYS_PIVOT_ROOT: Final = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41}
_SYS_MOUNT_SETATTR: Final = 442

#: Candidate directories to mount the new root's tmpfs on, in this private mount namespace
#: only. Any existing directory works if no path of the view lives in it.
_STAGES: Final = ("/mnt", "/srv", "/media", "/opt", "/var", "/run", "/home", "/boot", "/tmp")
#: The new root only holds mount points, empty files and links; it is read-only once built.
_ROOT_TMPFS: Final = "mode=0755,size=1m,nr_inodes=4096"
#: The devices of /dev: what programs open without asking. A root caller makes them on a
#: small tmpfs of the view's own; an unprivileged one (which may not make device nodes)
#: binds the host's.
_DEVICES: Final = ("null", "zero", "full", "random", "urandom")
_DEV_TMPFS: Final = "mode=0755,size=4k,nr_inodes=16"
_DEV_LINKS: Final = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
#: Writable parts of a full /proc, made read-only when ``subset=pid`` is unknown (< 5.8).
_PROC_READ_ONLY: Final = ("sys", "sysrq-trigger", "irq", "bus", "fs")
#: Signals the middle process passes on to PID 1 (the ones a host sends to end a run).
_FORWARDED: Final = frozenset(
    {
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
    }
)
#: The middle's status when it fails itself (os.EX_SOFTWARE, spelled out).
_EXIT_MIDDLE_FAILED: Final = 70
#: The middle's exit status when it leaves PID 1 to its supervisor (``enter(detach=True)``).
EXIT_DETACHED: Final = 81
#: Default size of the run's file system (its working directory and /tmp together): room
#: for scratch files and a small data set, small next to a memory budget (tmpfs pages are
#: charged to the memory cgroup of the process that writes them).
DEFAULT_DISK_BYTES: Final = 64 << 20
#: Bytes of the run's file system per file (or directory) it may hold, when the number of
#: files is not given: 4096 files in the default 64 MiB.
DISK_BYTES_PER_FILE: Final = 16 << 10
#: The fewest files a run's file system holds whatever its size: its own directories and
#: a few files.
_MIN_DISK_FILES: Final = 64
#: Paths that cannot be bound: the view's own /proc, /dev and /tmp, and the whole host.
_REFUSED: Final = ("/", "/dev", "/tmp")


def default_disk_files(disk_bytes: int) -> int:
    """The files (and directories) a run's file system of ``disk_bytes`` holds by default."""
    return max(_MIN_DISK_FILES, disk_bytes // DISK_BYTES_PER_FILE)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfineSpec:
    """What :func:`enter` builds: a view of the host and an identity inside it.

    A plain dataclass (importable without msgspec; msgspec decodes it from JSON as is).

    Attributes:
        read_only: host paths visible read-only inside, at the same path. A path that is a
            symbolic link is recreated as the same link (its target must be in the view
            too); a path with a symbolic link among its parents is refused.
        placed: host paths visible read-only inside at another path: ``(host path, path
            inside)`` pairs (the runner's own packages, under ``/sandbox/lib``: see
            :mod:`runner._relocate`). The host path may not be a symbolic link; the path
            inside may not be within a ``read_only`` one.
        workdir: where the run's working directory is, inside (the host path of the same
            name is neither used nor needed): a directory of the run's own file system,
            owned by the program, mode 0700; the working directory once inside. ``None``:
            no working directory, ``/`` once inside.
        hostname: the UTS namespace's host name.
        uid: an unprivileged caller: the program's uid inside the user namespace, mapped
            to the caller's effective uid (a root caller makes no user namespace: see
            ``host_uid``).
        gid: the same, for the group id.
        host_uid: a root caller (required): the unprivileged host uid the program runs as,
            inside as on the host, one that is the run's alone (see *Identity*). An
            unprivileged caller cannot give one: its program is its own uid on the host.
        host_gid: the same, for the group id.
        disk_bytes: the size of the run's file system: the working directory and ``/tmp``
            together, a tmpfs of the run's own (nosuid, nodev, noexec). ``None``: no bound
            but memory (its pages are charged to the memory cgroup of whoever writes them).
        disk_files: how many files and directories that file system holds (default:
            :func:`default_disk_files` of ``disk_bytes``; no bound if that is ``None``).
    """

    read_only: tuple[str, ...]
    workdir: str | None = None
    placed: tuple[tuple[str, str], ...] = ()
    hostname: str = "sandbox"
    uid: int = 1000
    gid: int = 1000
    host_uid: int | None = None
    host_gid: int | None = None
    disk_bytes: int | None = DEFAULT_DISK_BYTES
    disk_files: int | None = None


@dataclass(frozen=True, slots=True)
class _Mount:
    """One read-only path of the view, checked against the host."""

    path: str  # inside the view
    is_dir: bool
    link: str | None  # the link's text, when the path is a symbolic link
    source: str  # on the host (``path``, but for a placed one)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Plan:
    """A checked spec: the mounts, parents first; where to stage the root; the cwd; who."""

    mounts: tuple[_Mount, ...]
    #: Where the view is built; None for a run that copies a shared view (it builds none).
    stage: str | None
    workdir: str | None
    hostname: str
    privileged: bool  # the caller is root: no user namespace, the program's own host ids
    uid: int  # the program's ids as it sees them
    gid: int
    host_uid: int  # and on the host (the caller's own, when not privileged)
    host_gid: int
    disk_bytes: int  # 0: no bound (as tmpfs takes it)
    disk_files: int  # 0: no bound


#: What :func:`check` gives and :func:`enter` takes.
Plan = _Plan


# --- system calls ---------------------------------------------------------------------

_libc_handle: ctypes.CDLL | None = None
#: False once mount_setattr(2) turned out to be missing (ENOSYS, Linux < 5.12): read-only
#: then applies to the top mount of each path only (see :func:`_set_attrs`).
_mount_setattr_works = True


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        libc = ctypes.CDLL(None, use_errno=True)
        c_str, c_ulong, c_int = ctypes.c_char_p, ctypes.c_ulong, ctypes.c_int
        libc.unshare.argtypes = [c_int]
        libc.setns.argtypes = [c_int, c_int]
        libc.mount.argtypes = [c_str, c_str, c_str, c_ulong, c_str]
        libc.umount2.argtypes = [c_str, c_int]
        libc.prctl.argtypes = [c_int, c_ulong, c_ulong, c_ulong, c_ulong]
        libc.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        libc.syscall.restype = ctypes.c_long
        _libc_handle = libc
    return _libc_handle


def _error(what: str) -> OSError:
    """The OSError for the failed call ``what``, from errno."""
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def _unshare(flags: int, what: str) -> None:
    if _libc().unshare(flags) != 0:
        raise _error(f"unshare({what})")


def _setns(fd: int, nstype: int, what: str) -> None:
    if _libc().setns(fd, nstype) != 0:
        raise _error(f"setns({what})")


def _encode(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    result = _libc().mount(_encode(source), _encode(target), _encode(fstype), flags, _encode(data))
    if result != 0:
        raise _error(f"mount({source!r}, {target!r}, {fstype!r}, {flags:#x}, {data!r})")


def _umount(target: str, flags: int) -> None:
    if _libc().umount2(os.fsencode(target), flags) != 0:
        raise _error(f"umount2({target!r})")


def _prctl(option: int, arg: int = 0) -> None:
    if _libc().prctl(option, arg, 0, 0, 0) != 0:
        raise _error(f"prctl({option}, {arg})")


def _pivot_root(new_root: str, put_old: str) -> None:
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown system call number on {os.uname()}")
    result = _libc().syscall(
        ctypes.c_long(number),
        ctypes.c_char_p(os.fsencode(new_root)),
        ctypes.c_char_p(os.fsencode(put_old)),
    )
    if result != 0:
        raise _error("pivot_root")


def _set_attrs(target: str, attrs: int, *, recursive: bool) -> None:
    """Add the MOUNT_ATTR_ flags ``attrs`` to the mount at ``target`` (and the ones below).

    Uses mount_setattr(2), which only adds what it is given (a remount must repeat the
    locked atime and other flags, or fails). Without it (ENOSYS), a bind remount of the top
    mount: the mounts below it keep the host's flags.
    """
    global _mount_setattr_works
    if _mount_setattr_works:
        attr = struct.pack("=QQQQ", attrs, 0, 0, 0)  # attr_set, attr_clr, propagation, userns
        buffer = ctypes.create_string_buffer(attr, len(attr))
        result = _libc().syscall(
            ctypes.c_long(_SYS_MOUNT_SETATTR),
            ctypes.c_int(_AT_FDCWD),
            ctypes.c_char_p(os.fsencode(target)),
            ctypes.c_uint(_AT_RECURSIVE if recursive else 0),
            buffer,
            ctypes.c_size_t(len(attr)),
        )
        if result == 0:
            return
        if ctypes.get_errno() != errno.ENOSYS:
            raise _error(f"mount_setattr({target!r}, {attrs:#x})")
        _mount_setattr_works = False
    kept = os.statvfs(target).f_flag
    flags = (kept & _ST_KEPT) | (_MS_RELATIME if kept & _ST_RELATIME else 0)
    _mount(None, target, None, _MS_REMOUNT | _MS_BIND | flags | attrs)


# --- checking the spec ----------------------------------------------------------------


def _is_within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _check_path(path: object, field: str) -> str:
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"{field}: {path!r} is not an absolute path")
    normal = "/" + os.path.normpath(path).lstrip("/")
    if normal in _REFUSED or _is_within(normal, "/proc"):
        raise ValueError(f"{field}: {normal!r} cannot be bound (the view has its own)")
    parent = os.path.dirname(normal)
    if os.path.realpath(parent) != parent:
        raise ValueError(
            f"{field}: {normal!r} has a symbolic link among its parents; "
            f"give the real path, {os.path.realpath(normal)!r}"
        )
    return normal


def _ids(spec: ConfineSpec, *, privileged: bool) -> tuple[int, int, int, int]:
    """The program's uid and gid as it sees them, and on the host (see *Identity*).

    Raises:
        ValueError: an id that is not one; a root caller that names no unprivileged host
            id, or an unprivileged caller that names one.
    """
    for name in ("uid", "gid", "host_uid", "host_gid"):
        _check_id(name, getattr(spec, name))
    if privileged:
        return _root_callers_ids(spec)
    if spec.host_uid is not None or spec.host_gid is not None:
        raise ValueError(
            "host_uid, host_gid: only a root caller can run the program as another host id"
        )
    return spec.uid, spec.gid, os.geteuid(), os.getegid()


def _check_id(name: str, value: object) -> None:
    """Raise if ``value``, the spec's field ``name``, is not an id (a host id may be None)."""
    if value is None and name.startswith("host_"):
        return
    if type(value) is not int or not 0 <= value < 2**32 - 1:
        raise ValueError(f"{name}: {value!r} is not an id")


def _root_callers_ids(spec: ConfineSpec) -> tuple[int, int, int, int]:
    """A root caller's program ids: the unprivileged host ids it names, inside as outside.

    Raises:
        ValueError: it names none, or names root.
    """
    if spec.host_uid is None or spec.host_gid is None:
        raise ValueError(
            "host_uid, host_gid: a root caller must name the unprivileged host ids the "
            "program runs as (it would be host root otherwise)"
        )
    if spec.host_uid == 0 or spec.host_gid == 0:
        raise ValueError("host_uid, host_gid: a root caller's program cannot be host root")
    return spec.host_uid, spec.host_gid, spec.host_uid, spec.host_gid


def _check_workdir(workdir: object, mounts: dict[str, _Mount]) -> str:
    if not isinstance(workdir, str) or not workdir.startswith("/"):
        raise ValueError(f"workdir: {workdir!r} is not an absolute path")
    normal = "/" + os.path.normpath(workdir).lstrip("/")
    if normal in _REFUSED or any(_is_within(normal, top) for top in ("/proc", "/dev")):
        raise ValueError(f"workdir: {normal!r} cannot be the working directory")
    for path in mounts:
        if _is_within(normal, path) or _is_within(path, normal):
            raise ValueError(f"workdir: {normal!r} overlaps the read-only path {path!r}")
    return normal


def _plan(spec: ConfineSpec, shared: dict[str, _Mount] | None = None) -> _Plan:
    """Check ``spec`` against the host; nothing is changed. ``shared``: the mounts of the
    shared view the run copies (its read-only paths, found once for every run that copies
    it: :func:`_shared_mounts`); such a run builds no view, so its plan has no stage.

    Raises:
        ValueError: the spec cannot be built here (what and why in the message).
    """
    _check_hostname(spec.hostname)
    privileged = os.geteuid() == 0
    uid, gid, host_uid, host_gid = _ids(spec, privileged=privileged)
    disk_bytes, disk_files = _disk(spec.disk_bytes, spec.disk_files)
    mounts = _mounts(spec.read_only, spec.placed) if shared is None else shared
    workdir = None if spec.workdir is None else _check_workdir(spec.workdir, mounts)
    ordered = sorted(mounts.values(), key=lambda mount: mount.path.split("/"))
    return _Plan(
        mounts=tuple(ordered),
        stage=_stage(_taken(mounts, workdir)) if shared is None else None,
        workdir=workdir,
        hostname=spec.hostname,
        privileged=privileged,
        uid=uid,
        gid=gid,
        host_uid=host_uid,
        host_gid=host_gid,
        disk_bytes=disk_bytes or 0,
        disk_files=disk_files or 0,
    )


def check(spec: ConfineSpec, *, shared: bool = False) -> Plan:
    """Check ``spec`` against the host, for a run that copies the shared view (``shared``)
    or builds its own; nothing is changed. A template process (the zygote) checks it for
    the child it forks, which is then given the plan (:func:`enter`'s ``plan``): checked
    in a freshly forked child, it took 0.4 ms of its CPU here, most of it first writes to
    pages the child shares with the template.

    Raises:
        ValueError: the spec cannot be built here, or cannot take its view from a shared
            one (``shared``).
    """
    if not shared:
        return _plan(spec)
    if not shares_view(spec):
        raise ValueError("this spec cannot take its view from a shared one")
    return _plan(spec, _shared_mounts(tuple(spec.read_only), _pairs(spec.placed)))


def _check_hostname(hostname: object) -> None:
    """Raise if ``hostname`` is not what ``sethostname`` takes: 1 to 64 bytes, no NUL."""
    if not isinstance(hostname, str) or not 0 < len(hostname.encode()) <= 64:
        raise ValueError(f"hostname: {hostname!r} is not 1 to 64 bytes")
    if "\0" in hostname:
        raise ValueError("hostname: contains a NUL")


def _disk(disk_bytes: int | None, disk_files: int | None) -> tuple[int | None, int | None]:
    """The run's file system's size and files, checked (files by default from the size).

    Raises:
        ValueError: a size or a count that is not positive.
    """
    if disk_bytes is not None and (type(disk_bytes) is not int or disk_bytes < 1):
        raise ValueError(f"disk_bytes: {disk_bytes!r} is not a positive size")
    if disk_files is None and disk_bytes is not None:
        disk_files = default_disk_files(disk_bytes)
    if disk_files is not None and (type(disk_files) is not int or disk_files < 1):
        raise ValueError(f"disk_files: {disk_files!r} is not a positive count")
    return disk_bytes, disk_files


def _mounts(read_only: Iterable[object], placed: Iterable[object] = ()) -> dict[str, _Mount]:
    """The read-only paths, checked and looked up on the host, each once, by their path
    in the view.

    Raises:
        ValueError: a path that cannot be bound or does not exist.
    """
    mounts: dict[str, _Mount] = {}
    for raw in read_only:
        path = _check_path(raw, "read_only")
        try:
            info = os.lstat(path)
        except OSError as exc:
            raise ValueError(f"read_only: {path!r}: {exc.strerror}") from None
        if path not in mounts:
            link = os.readlink(path) if stat.S_ISLNK(info.st_mode) else None
            mounts[path] = _Mount(path, stat.S_ISDIR(info.st_mode), link, path)
    bound = list(mounts)
    for pair in placed:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"placed: {pair!r} is not a (host path, path inside) pair")
        source = _check_path(pair[0], "placed")
        path = _check_path(pair[1], "placed")
        try:
            info = os.lstat(source)
        except OSError as exc:
            raise ValueError(f"placed: {source!r}: {exc.strerror}") from None
        if stat.S_ISLNK(info.st_mode):
            raise ValueError(f"placed: {source!r} is a symbolic link; give its target")
        if path in mounts or any(_is_within(path, other) for other in bound):
            raise ValueError(f"placed: {path!r} is within the view's read-only paths already")
        mounts[path] = _Mount(path, stat.S_ISDIR(info.st_mode), None, source)
    return mounts


def _pairs(placed: Iterable[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """``placed`` as a tuple of pairs (a cache key), whatever sequences it came as."""
    return tuple((pair[0], pair[1]) for pair in placed)


def _taken(mounts: Mapping[str, _Mount], workdir: str | None) -> list[str]:
    """The paths the view's stage must stay apart from: where the mounts go and come
    from, and the working directory."""
    taken = [*mounts, *(mount.source for mount in mounts.values())]
    return taken if workdir is None else [*taken, workdir]


def _stage(taken: list[str]) -> str:
    """The first of :data:`_STAGES` that is a real directory and holds none of ``taken``
    (nor lies within one).

    Raises:
        ValueError: there is none.
    """
    for candidate in _STAGES:
        if _free_stage(candidate, taken):
            return candidate
    raise ValueError(f"no directory to build the view on: every one of {_STAGES} is in use")


def _free_stage(candidate: str, taken: list[str]) -> bool:
    """Whether the view can be staged on ``candidate``: a real directory, apart from ``taken``."""
    return (
        os.path.isdir(candidate)
        and not os.path.islink(candidate)
        and not any(_is_within(path, candidate) or _is_within(candidate, path) for path in taken)
    )


def _refuse_directory_descriptors() -> None:
    """Raise if the process holds a descriptor of a directory: it would lead out of the view."""
    for name in os.listdir("/proc/self/fd"):
        try:
            mode = os.fstat(int(name)).st_mode
        except OSError:
            continue  # the descriptor listdir itself used, closed by now
        if stat.S_ISDIR(mode):
            raise ValueError(
                f"descriptor {name} is a directory ({os.readlink(f'/proc/self/fd/{name}')}): "
                "a process holding it can walk out of any view; close it first"
            )


# --- the steps --------------------------------------------------------------------------


def _write_file(path: str, text: str) -> None:
    """Write ``text`` in one write(2), as the /proc files here require."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    except OSError as exc:
        raise OSError(exc.errno, f"writing {text!r} to {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def _map_ids(uid: int, gid: int, outer_uid: int, outer_gid: int) -> None:
    _write_file("/proc/self/setgroups", "deny")
    _write_file("/proc/self/uid_map", f"{uid} {outer_uid} 1\n")
    _write_file("/proc/self/gid_map", f"{gid} {outer_gid} 1\n")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _default_action(proc_fd: int, pid: int, signum: int) -> bool:
    """Whether ``pid`` neither catches nor ignores ``signum`` (from its /proc status)."""
    fd = os.open(f"{pid}/status", os.O_RDONLY | os.O_CLOEXEC, dir_fd=proc_fd)
    try:
        text = os.read(fd, 1 << 16).decode("ascii", "replace")
    finally:
        os.close(fd)
    bit = 1 << (signum - 1)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigIgn", "SigCgt") and int(value.strip(), 16) & bit:
            return False
    return True


def _die_like(sig: int) -> NoReturn:
    """End the middle the way its child ended: by signal ``sig``."""
    try:
        import resource  # only here: the middle's own core would be noise

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, OSError, ValueError):
        pass
    if sig != signal.SIGKILL:
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        except (OSError, ValueError):
            pass
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)  # a signal whose default action is not to end the process


def _middle(child: int, proc_fd: int, mask: Iterable[int]) -> NoReturn:
    """The original process, outside: forward signals, wait, exit as the child did."""
    try:
        os.closerange(3, proc_fd)
        os.closerange(proc_fd + 1, os.sysconf("SC_OPEN_MAX"))
        killed_for: list[int] = []

        def forward(signum: int, _frame: object) -> None:
            sig = signum
            try:
                if _default_action(proc_fd, child, signum):
                    # PID 1 ignores a signal it has no handler for: its default action,
                    # ending the process, is what SIGKILL does.
                    sig = signal.SIGKILL
                    killed_for.append(signum)
            except (OSError, ValueError):
                pass
            try:
                os.kill(child, sig)
            except ProcessLookupError:
                pass

        for signum in _FORWARDED:
            signal.signal(signum, forward)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _, status = os.waitpid(child, 0)  # retried after each forwarded signal (PEP 475)
        code = os.waitstatus_to_exitcode(status)
        if code >= 0:
            os._exit(code)
        sig = -code
        _die_like(killed_for[0] if sig == signal.SIGKILL and killed_for else sig)
    finally:
        os._exit(_EXIT_MIDDLE_FAILED)


def _become_pid_one(*, detach: bool = False) -> int | None:
    """Fork; return in the child (PID 1 of the new PID namespace); the parent never returns.

    With ``detach``, the parent exits at once with :data:`EXIT_DETACHED` instead of staying
    as the middle: PID 1 is re-parented to the nearest subreaper, which must be a
    supervisor that expects it (the zygote).

    Returns:
        A pidfd of the middle, for :func:`_tie_to_middle` (the caller closes it), or None
        with ``detach``.

    Raises:
        OSError: the fork failed, or the middle was gone before the death signal was armed.
    """
    if detach:
        pid = os.fork()
        if pid:
            os._exit(EXIT_DETACHED)
        return None
    self_fd = os.pidfd_open(os.getpid())
    proc_fd = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(self_fd)
        os.close(proc_fd)
        raise
    if pid:
        _middle(pid, proc_fd, mask)
    os.close(proc_fd)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        _tie_to_middle(self_fd)
    except BaseException:
        os.close(self_fd)
        raise
    return self_fd


def _tie_to_middle(middle_fd: int) -> None:
    """Arm ``PR_SET_PDEATHSIG`` against the middle, then check it is still alive.

    Done after the fork (a fork clears the death signal) and again after the switch to the
    program's ids (so does any change of the effective ids).

    Raises:
        OSError: the middle died before the death signal was armed.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    # getppid() is 0 here, so the pidfd says whether the middle died before the arming.
    if select.select([middle_fd], [], [], 0)[0]:
        raise OSError(errno.ESRCH, "the process outside the namespace died during enter()")


def _mount_point(root_fd: int, own: set[int], path: str, *, is_dir: bool) -> str:
    """Make sure ``path`` exists under the root at ``root_fd``; create only on tmpfs we own.

    Walks with ``O_NOFOLLOW`` from the root: a symbolic link on the way is refused, and
    nothing is created on a host filesystem (a bound directory), only on the mounts in
    ``own`` (their device numbers).

    Returns:
        ``path``, relative to the root.
    """
    parts = path.strip("/").split("/")
    fd = os.dup(root_fd)
    try:
        for index, name in enumerate(parts):
            last = index == len(parts) - 1
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if os.fstat(fd).st_dev not in own:
                    raise OSError(
                        errno.EROFS, f"{path}: cannot create {name!r} on a host filesystem"
                    ) from None
                if last and not is_dir:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    os.close(os.open(name, flags, 0o644, dir_fd=fd))
                else:
                    os.mkdir(name, 0o755, dir_fd=fd)
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                raise OSError(errno.ELOOP, f"{path}: {name!r} is a symbolic link in the view")
            if not last:
                flags = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                next_fd = os.open(name, flags, dir_fd=fd)
                os.close(fd)
                fd = next_fd
    finally:
        os.close(fd)
    return "/".join(parts)


def _link(root_fd: int, own: set[int], path: str, target: str) -> None:
    parent, name = os.path.split(path)
    parent_fd = root_fd
    if parent != "/":
        relative = _mount_point(root_fd, own, parent, is_dir=True)
        parent_fd = os.open(relative, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root_fd)
    try:
        if os.fstat(parent_fd).st_dev not in own:
            raise OSError(errno.EROFS, f"{path}: cannot create a link on a host filesystem")
        os.symlink(target, name, dir_fd=parent_fd)
    finally:
        if parent_fd != root_fd:
            os.close(parent_fd)


def _refuse_executable_memfds() -> None:
    """Step 5b (a root caller, in PID 1): ``vm.memfd_noexec`` = 2 in the new PID namespace.

    The sysctl is the PID namespace's (Linux 6.3), inherited by namespaces made below it
    and never lowered there: every memfd the program makes is sealed not executable, and
    asking for an executable one (``MFD_EXEC``) is refused. Writing it takes the host's
    root, so an unprivileged caller leaves it as the host has it (see the module docstring).
    The host's /proc is still there: the view is not built yet.
    """
    try:
        _write_file("/proc/sys/vm/memfd_noexec", "2")
    except FileNotFoundError:
        pass  # a kernel before 6.3: no such switch


def _make_devices(dev: str, own: set[int]) -> None:
    """/dev as a small tmpfs of the view's own, with the devices made in it (root only).

    Binding the host's nodes instead would put the host's devtmpfs (its size, about the
    host's memory) in the view's mount table.
    """
    _mount("tmpfs", dev, "tmpfs", _MS_NOSUID | _MS_NOEXEC, _DEV_TMPFS)
    own.add(os.stat(dev).st_dev)
    for name in _DEVICES:
        node = f"{dev}/{name}"
        os.mknod(node, stat.S_IFCHR | 0o666, os.stat(f"/dev/{name}").st_rdev)
        os.chmod(node, 0o666)  # not the umask's


def _bind_devices(point: Callable[..., str]) -> None:
    """/dev's devices bound from the host's (an unprivileged caller may not make them)."""
    for name in _DEVICES:
        device = point(f"/dev/{name}", is_dir=False)
        _mount(f"/dev/{name}", device, None, _MS_BIND)
        _set_attrs(device, _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NOEXEC, recursive=False)


def _run_file_system(plan: _Plan, point: Callable[..., str], own: set[int]) -> None:
    """The run's file system: one tmpfs, nosuid, nodev and noexec, of ``disk_bytes`` and
    ``disk_files``; its ``tmp`` directory (mode 1777) on /tmp, its ``work`` directory (the
    program's, mode 0700) on the working directory.

    It is mounted on a scratch directory of the new root first, which is removed once
    both are bound: its own root is nowhere in the view. Nothing of it is on the host.
    """
    scratch = point("/.run")
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    size = f"mode=0755,size={plan.disk_bytes},nr_inodes={plan.disk_files}"
    _mount("tmpfs", scratch, "tmpfs", flags, size)
    os.mkdir(f"{scratch}/tmp")
    os.chmod(f"{scratch}/tmp", 0o1777)
    tmp = point("/tmp")
    _mount(f"{scratch}/tmp", tmp, None, _MS_BIND)
    own.add(os.stat(tmp).st_dev)
    if plan.workdir is not None:
        work = f"{scratch}/work"
        os.mkdir(work, 0o700)
        if plan.privileged:  # else the process is already the program's uid (and gid)
            os.chown(work, plan.host_uid, plan.host_gid)
        _mount(work, point(plan.workdir), None, _MS_BIND)
    _umount(scratch, _MNT_DETACH)
    os.rmdir(scratch)


def _build_view(plan: _Plan, *, shared: bool = False) -> None:
    """Step 6: the new root, its mounts, pivot_root. See the module docstring.

    ``shared``: the view a template holds for every run (:func:`build_shared_view`): only
    the mount points of ``/proc`` and ``/tmp``, which each run's copy mounts for itself.
    """
    stage = plan.stage
    if stage is None:
        raise ValueError("the plan of a run that copies a shared view has no stage to build on")
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("tmpfs", stage, "tmpfs", _MS_NOSUID | _MS_NODEV, _ROOT_TMPFS)
    root_fd = os.open(stage, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        own = {os.fstat(root_fd).st_dev}

        def point(path: str, *, is_dir: bool = True) -> str:
            return f"{stage}/{_mount_point(root_fd, own, path, is_dir=is_dir)}"

        if shared:
            point("/proc")
            point("/tmp")
        else:
            _mount_proc(point("/proc"))
        _build_dev(plan, root_fd, own, point)
        if not shared:
            _run_file_system(plan, point, own)
        _bind_read_only(plan, root_fd, own, point)
    finally:
        os.close(root_fd)
    _mount(None, stage, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    os.chdir(stage)
    _pivot_root(".", ".")  # the old root ends up stacked on the new one, at "/"
    _umount(".", _MNT_DETACH)
    os.chdir("/")
    os.chdir(plan.workdir or "/")


# --- the shared view: built once by a template, copied by each run ------------------------


def shares_view(spec: ConfineSpec) -> bool:
    """Whether a run of ``spec`` can take its view from a shared one (:func:`enter`'s
    ``view``): a root caller, no read-only path in ``/tmp``, and a working directory (if
    any) in ``/tmp``, where the run's own file system is mounted.
    """
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    paths = [p for p in spec.read_only if isinstance(p, str)]
    inside = [p[1] for p in spec.placed if isinstance(p, (tuple, list)) and len(p) == 2]
    if len(paths) != len(spec.read_only) or len(inside) != len(spec.placed):
        return False
    if any(not isinstance(p, str) or _is_within(p, "/tmp") for p in [*paths, *inside]):
        return False
    workdir = spec.workdir
    if workdir is None:
        return True
    if not isinstance(workdir, str) or not workdir.startswith("/"):
        return False  # enter() refuses it, with the reason
    normal = "/" + os.path.normpath(workdir).lstrip("/")
    return _is_within(normal, "/tmp") and normal != "/tmp"


def build_shared_view(read_only: Sequence[str], placed: Sequence[tuple[str, str]] = ()) -> None:
    """In a disposable process of a root caller: a mount namespace of its own holding the
    view every run of ``read_only`` shares; the process is left inside it (its caller keeps
    ``/proc/<pid>/ns/mnt`` open, and it can exit).

    The view is :func:`enter`'s but for what is each run's own: ``/proc`` and ``/tmp`` are
    empty mount points, and the root, ``/dev`` and every bound path are read-only. Each run
    joins it and copies it at once (:func:`_copy_shared_view`), so that what it mounts is in
    its copy only; nothing is ever written to it.

    Raises:
        ValueError: ``read_only`` cannot be bound here.
        OSError: a step failed.
    """
    if os.geteuid() != 0:
        raise OSError(errno.EPERM, "only a root caller builds a shared view")
    plan = _shared_plan(tuple(read_only), tuple(placed))
    _libc()
    _unshare(_CLONE_NEWNS, "CLONE_NEWNS")
    _build_view(plan, shared=True)


@functools.cache
def _shared_mounts(
    read_only: tuple[str, ...], placed: tuple[tuple[str, str], ...] = ()
) -> dict[str, _Mount]:
    """The checked read-only paths of a shared view of ``read_only`` and ``placed``
    (cached: a template process computes them once for every run it forks)."""
    return _mounts(read_only, placed)


def _shared_plan(read_only: tuple[str, ...], placed: tuple[tuple[str, str], ...] = ()) -> _Plan:
    """The plan of a shared view: its mounts; no run's own parts or ids."""
    mounts = _shared_mounts(read_only, placed)
    ordered = sorted(mounts.values(), key=lambda mount: mount.path.split("/"))
    return _Plan(
        mounts=tuple(ordered),
        stage=_stage(_taken(mounts, None)),
        workdir=None,
        hostname="sandbox",
        privileged=True,
        uid=0,
        gid=0,
        host_uid=0,
        host_gid=0,
        disk_bytes=0,
        disk_files=0,
    )


def forget_shared_views() -> None:
    """Forget the shared views' paths worked out so far (a runner, once in its view, has
    no more use for them, and its program no business with them)."""
    _shared_mounts.cache_clear()


def warm_shared_view(read_only: Sequence[str], placed: Sequence[tuple[str, str]] = ()) -> None:
    """In a template process: check ``read_only`` and ``placed`` once for every run it
    forks."""
    _shared_mounts(tuple(read_only), tuple(placed))


def _copy_shared_view(plan: _Plan, view: int) -> None:
    """Step 6, from the shared view (the mount namespace ``view``, which is closed): join it
    and copy it at once (the copy is the run's alone), then mount what is the run's own:
    a proc of its PID namespace on ``/proc``, its file system on ``/tmp`` (the root of a
    tmpfs of ``disk_bytes`` and ``disk_files``, nosuid, nodev, noexec, mode 1777) and the
    working directory in it (mode 0700, the program's).
    """
    try:
        _setns(view, _CLONE_NEWNS, "CLONE_NEWNS")
    finally:
        os.close(view)
    _unshare(_CLONE_NEWNS, "CLONE_NEWNS")
    _mount_proc("/proc")
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    size = f"mode=1777,size={plan.disk_bytes},nr_inodes={plan.disk_files}"
    _mount("tmpfs", "/tmp", "tmpfs", flags, size)
    if plan.workdir is not None:
        parts = plan.workdir.split("/")[2:]  # below /tmp (shares_view checked it)
        parent = "/tmp"
        for name in parts[:-1]:
            parent = f"{parent}/{name}"
            os.mkdir(parent, 0o755)
        os.mkdir(plan.workdir, 0o700)
        os.chown(plan.workdir, plan.host_uid, plan.host_gid)
    os.chdir(plan.workdir or "/")


def _mount_proc(proc: str) -> None:
    """The view's /proc: a proc of the new PID namespace's processes only (before Linux 5.8,
    a full one with its writable parts made read-only)."""
    proc_flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    try:
        # Only the processes: no /proc/sys, whose global sysctls host uid 0 may write.
        _mount("proc", proc, "proc", proc_flags, "subset=pid")
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # EINVAL: a kernel without subset= (< 5.8)
            raise
        _mount("proc", proc, "proc", proc_flags)
        for name in _PROC_READ_ONLY:
            if os.path.lexists(f"{proc}/{name}"):
                _mount(f"{proc}/{name}", f"{proc}/{name}", None, _MS_BIND | _MS_REC)
                _set_attrs(f"{proc}/{name}", _MOUNT_ATTR_RDONLY, recursive=True)


def _build_dev(plan: _Plan, root_fd: int, own: set[int], point: Callable[..., str]) -> None:
    """The view's /dev: its devices (made by a root caller, bound otherwise) and links; a
    root caller's /dev is then read-only."""
    if plan.privileged:
        _make_devices(point("/dev"), own)
    else:
        _bind_devices(point)
    for name, target in _DEV_LINKS:
        _link(root_fd, own, f"/dev/{name}", target)
    if plan.privileged:
        dev = f"{plan.stage}/dev"
        _mount(None, dev, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC)


def _bind_read_only(plan: _Plan, root_fd: int, own: set[int], point: Callable[..., str]) -> None:
    """The host's read-only paths, at the same paths: bound recursively, then read-only,
    nosuid and nodev all the way down; a symbolic link is made again as the same link."""
    for mount in plan.mounts:
        if mount.link is not None:
            _link(root_fd, own, mount.path, mount.link)
            continue
        target = point(mount.path, is_dir=mount.is_dir)
        _mount(mount.source, target, None, _MS_BIND | _MS_REC)
        attrs = _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV
        _set_attrs(target, attrs, recursive=True)


def _drop_privileges(plan: _Plan) -> None:
    """Step 7: no capability in any set, and none to be gained by execve; a root caller
    becomes the program's unprivileged host ids (see *Identity*)."""
    libc = _libc()
    cap = 0
    while libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    if ctypes.get_errno() != errno.EINVAL or cap == 0:  # EINVAL: past the last capability
        raise _error(f"prctl(PR_CAPBSET_DROP, {cap})")
    if plan.privileged:
        # The program's own host ids. No supplementary group (root's would follow the
        # program); groups first, as setresuid takes CAP_SETGID away with the rest of the
        # permitted and effective sets.
        os.setgroups([])
        os.setresgid(plan.host_gid, plan.host_gid, plan.host_gid)
        os.setresuid(plan.host_uid, plan.host_uid, plan.host_uid)
        # The kernel made the process undumpable when its ids changed (it may hold what
        # root could read): its /proc files went to root, out of its own reach. What it
        # holds is its own to read anyway, and no one else is its uid.
        _prctl(_PR_SET_DUMPABLE, 1)
    cleared = libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0
    if not cleared and ctypes.get_errno() != errno.EINVAL:  # EINVAL: none to clear (< 4.3)
        raise _error("prctl(PR_CAP_AMBIENT_CLEAR_ALL)")
    header = ctypes.create_string_buffer(struct.pack("=Ii", _CAPABILITY_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(24)  # two all-zero __user_cap_data_struct
    if libc.capset(header, data) != 0:
        raise _error("capset")
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def enter(
    spec: ConfineSpec,
    *,
    detach: bool = False,
    view: int | None = None,
    pid_one: bool = False,
    net: int | None = None,
    plan: Plan | None = None,
) -> None:
    """Confine the calling process: namespaces, the view, the identity; return as PID 1.

    The process that calls this stays outside as the middle (see the module docstring) and
    never returns from it; the call returns in its only child, PID 1 of the new PID
    namespace, inside the view, without capabilities, as the program's ids. With
    ``detach``, there is no middle: the calling process exits with :data:`EXIT_DETACHED`
    right after the fork, and PID 1 goes to the caller's parent, which must be a subreaper
    that knows what to do with it (the zygote reports PID 1 to the host as the run's
    runner). Call it once, from the main thread of a single-threaded process, before any
    untrusted code runs.

    A template process (the zygote) can do some of that for the run, ahead (the first three
    for a root caller only):

    * ``view``: a descriptor of the mount namespace of a shared view of ``spec.read_only``
      (:func:`build_shared_view`; :func:`shares_view` says whether ``spec`` can use one),
      which this closes: the run copies it rather than building its own view;
    * ``pid_one``: the calling process was forked PID 1 of a PID namespace of its own
      (:func:`fork_pid_one`): it makes no PID namespace and does not fork, and the call
      returns in it (no middle, as with ``detach``);
    * ``net``: a descriptor of a network namespace made for this run alone, ahead of it,
      its loopback up (:func:`make_network_namespace`), which this closes: the run joins
      it rather than making its own;
    * ``plan``: ``spec`` checked already (:func:`check`, for a run that copies the shared
      view when ``view`` is given, else for one that builds its own).

    Raises:
        ValueError: the spec cannot be built here, or the process holds a directory
            descriptor; nothing was changed, but the process must not run untrusted code.
        OSError: a step failed (the message names it): the process may be half inside and
            must exit without running the program.
    """
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "namespaces are Linux's")
    if pid_one and (os.getpid() != 1 or os.geteuid() != 0):
        raise ValueError("pid_one: the process is not a root caller's PID 1")
    if net is not None and os.geteuid() != 0:
        raise ValueError("net: only a root caller joins a network namespace made ahead")
    if plan is None:
        plan = check(spec, shared=view is not None)
    elif (plan.stage is None) != (view is not None) or plan.privileged != (os.geteuid() == 0):
        raise ValueError("plan: checked for another kind of run than this one")
    _refuse_directory_descriptors()
    _libc()  # load it while the host's libraries are still there
    _unshare_all(privileged=plan.privileged, mount=view is None, pid=not pid_one, net=net is None)
    if not plan.privileged:
        _map_ids(plan.uid, plan.gid, plan.host_uid, plan.host_gid)
    socket.sethostname(plan.hostname)
    if net is None:
        _loopback_up()
    else:
        _join_network_namespace(net)
    middle = None if pid_one else _become_pid_one(detach=detach)
    try:
        _wall_in(plan, middle, view)
    finally:
        if middle is not None:
            os.close(middle)


def fork_pid_one(own_pid_namespace: int) -> int:
    """:func:`os.fork`, with the child PID 1 of a new PID namespace (a root caller): one
    fork where :func:`enter` would need two.

    The caller's own namespaces do not change: ``unshare(CLONE_NEWPID)`` only sets where
    its next child is born, and ``setns`` to ``own_pid_namespace`` (a descriptor of its
    own ``/proc/self/ns/pid``) sets it back right after the fork.

    Returns:
        As :func:`os.fork`: 0 in the child, its pid (as the caller sees it) in the caller.

    Raises:
        OSError: the namespace or the fork could not be made (the caller is as it was).
        PidNamespaceStuck: the caller's next children would be born in the namespace just
            made (``setns`` back failed; the child was killed): it must fork no more.
    """
    _unshare(_CLONE_NEWPID, "CLONE_NEWPID")
    try:
        pid = os.fork()
    except BaseException:
        _set_back(own_pid_namespace, None)
        raise
    if pid:
        _set_back(own_pid_namespace, pid)
    return pid


class PidNamespaceStuck(OSError):
    """:func:`fork_pid_one` could not set back where its caller's children are born."""


def make_network_namespace(own_network_namespace: int) -> int:
    """A new network namespace, its loopback up and nothing else in it, for one run to join
    later (:func:`enter`'s ``net``): a root caller makes it ahead, off the run's path.

    The caller enters the new namespace for the time it takes to bring the loopback up and
    take a descriptor of it, then goes back to ``own_network_namespace`` (a descriptor of
    its own ``/proc/self/ns/net``): it must be single-threaded, and open no socket meanwhile
    (there is no chance to: this is one call).

    Returns:
        A close-on-exec descriptor of the new namespace; it lives as long as a descriptor
        of it or a process in it does.

    Raises:
        OSError: the namespace could not be made (the caller is as it was).
        NetworkNamespaceStuck: the caller could not go back to ``own_network_namespace``:
            it is in the new namespace, and must make no network namespace, socket or
            child any more.
    """
    _unshare(_CLONE_NEWNET, "CLONE_NEWNET")
    made: int | None = None
    try:
        _loopback_up()
        made = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        try:
            _setns(own_network_namespace, _CLONE_NEWNET, "CLONE_NEWNET")
        except OSError as exc:
            if made is not None:
                os.close(made)
            raise NetworkNamespaceStuck(exc.errno, str(exc)) from None
    return made


class NetworkNamespaceStuck(OSError):
    """:func:`make_network_namespace` could not take its caller back to its own network
    namespace."""


def _join_network_namespace(net: int) -> None:
    """Join the network namespace ``net`` (made ahead for this run: its loopback is up), and
    close it.

    Raises:
        OSError: ``net`` is not a network namespace, or the kernel refused.
    """
    try:
        _setns(net, _CLONE_NEWNET, "CLONE_NEWNET")
    finally:
        os.close(net)


def _set_back(own_pid_namespace: int, child: int | None) -> None:
    """Children of the caller are born in ``own_pid_namespace`` again; else ``child`` (if
    any) is killed and :class:`PidNamespaceStuck` raised."""
    try:
        _setns(own_pid_namespace, _CLONE_NEWPID, "CLONE_NEWPID")
    except OSError as exc:
        if child is not None:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
                os.waitpid(child, 0)
        raise PidNamespaceStuck(exc.errno, str(exc)) from None


def _unshare_all(
    *, privileged: bool, mount: bool = True, pid: bool = True, net: bool = True
) -> None:
    """Step 2: every namespace in one unshare (the user namespace but for a root caller;
    the mount namespace unless the view is copied from a shared one; the PID namespace
    unless the process was born PID 1 of one; the network namespace unless one was made
    ahead for the run).

    Raises:
        OSError: the kernel refused (``EINVAL`` says the process may be multithreaded).
    """
    # A root caller needs no user namespace: it holds every capability already, and its
    # program becomes an unprivileged host uid of its own (see *Identity*).
    namespaces: tuple[tuple[str, int], ...] = _NAMESPACES[1:] if privileged else _NAMESPACES
    namespaces = tuple(
        (name, flag)
        for name, flag in namespaces
        if (mount or flag != _CLONE_NEWNS)
        and (pid or flag != _CLONE_NEWPID)
        and (net or flag != _CLONE_NEWNET)
    )
    flags = 0
    for _, flag in namespaces:
        flags |= flag
    try:
        _unshare(flags, ", ".join(name for name, _ in namespaces))
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise OSError(exc.errno, f"{exc.strerror} (is the process multithreaded?)") from None
        raise


def _wall_in(plan: _Plan, middle: int | None, view: int | None = None) -> None:
    """Steps 5b to 7, in PID 1: executable memfds refused (a root caller), the view (built,
    or copied from the shared ``view``), no privilege left, and the death signal armed
    again against the ``middle`` (if any)."""
    if plan.privileged:
        _refuse_executable_memfds()
    if view is None:
        _build_view(plan)
    else:
        _copy_shared_view(plan, view)
    _drop_privileges(plan)
    if middle is not None:
        _tie_to_middle(middle)  # a switch of ids clears the death signal


# --- probing ----------------------------------------------------------------------------


def _probe_here() -> dict[str, str | None]:
    """Try every namespace in this (forked, disposable) process, as :func:`enter` would."""
    results: dict[str, str | None] = {}
    outer_uid, outer_gid = os.geteuid(), os.getegid()  # 65534 once unshared and unmapped
    if outer_uid == 0:
        # Root makes every other namespace without a user namespace; the user namespace
        # is tried last, as it would take the initial namespace's capabilities away.
        for name, flag in _NAMESPACES[1:]:
            try:
                _unshare(flag, f"CLONE_NEW{name.upper()}")
                results[name] = None
            except OSError as exc:
                results[name] = str(exc)
        try:
            _unshare(_CLONE_NEWUSER, "CLONE_NEWUSER")
            results["user"] = None
        except OSError as exc:
            results["user"] = str(exc)
        return {name: results[name] for name, _ in _NAMESPACES}
    try:
        _unshare(_CLONE_NEWUSER, "CLONE_NEWUSER")
        _map_ids(0, 0, outer_uid, outer_gid)
        results["user"] = None
        alone = ""
    except OSError as exc:
        results["user"] = str(exc)
        alone = " (without a user namespace)"
    for name, flag in _NAMESPACES[1:]:
        try:
            _unshare(flag, f"CLONE_NEW{name.upper()}")
            results[name] = None
        except OSError as exc:
            results[name] = f"{exc}{alone}"
    return results


def probe(timeout: float = 5.0) -> dict[str, str | None]:
    """Whether each namespace :func:`enter` uses can be created here, tried in a child.

    The caller is untouched: the attempts are made in a forked child that exits.

    Returns:
        For each of ``user``, ``mount``, ``net``, ``ipc``, ``uts``, ``pid`` and ``cgroup``:
        ``None`` if it can be created, else why not. The others are tried inside the new
        user namespace when it could be created, on their own otherwise.
    """
    names = [name for name, _ in _NAMESPACES]
    if not sys.platform.startswith("linux"):
        return dict.fromkeys(names, "namespaces are Linux's")
    try:
        _libc()  # before the fork: a child of a threaded parent should not dlopen
    except OSError as exc:
        return dict.fromkeys(names, f"no C library: {exc}")
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        return dict.fromkeys(names, f"fork: {exc}")
    if pid == 0:  # pragma: no cover (the child's lines run in another process)
        _answer_probe(read_fd, write_fd)
    os.close(write_fd)
    answer = _read_probe_answer(pid, read_fd, timeout)
    results: dict[str, str | None] = dict.fromkeys(names, "the probe gave no answer")
    for line in answer.decode("utf-8", "replace").splitlines():
        name, _, reason = line.partition("\t")
        if name in results:
            results[name] = reason or None
    return results


def _answer_probe(read_fd: int, write_fd: int) -> NoReturn:  # pragma: no cover (a child)
    """In the probe's child: try the namespaces, write one ``name\treason`` line for each
    (an empty reason when it could be made), exit."""
    status = 1
    try:
        os.close(read_fd)
        lines = "".join(f"{name}\t{reason or ''}\n" for name, reason in _probe_here().items())
        os.write(write_fd, lines.encode("utf-8", "replace"))
        status = 0
    finally:
        os._exit(status)


def _read_probe_answer(pid: int, read_fd: int, timeout: float) -> bytes:
    """What the probe's child ``pid`` writes to ``read_fd`` before it closes it, reaped.

    A child that is silent for ``timeout`` seconds is killed, its answer cut short.
    """
    chunks: list[bytes] = []
    try:
        while select.select([read_fd], [], [], timeout)[0]:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        else:
            os.kill(pid, signal.SIGKILL)
    finally:
        os.close(read_fd)
        os.waitpid(pid, 0)
    return b"".join(chunks)


# --- the view a Python runner needs -------------------------------------------------------


def _libc_directory() -> str | None:
    """The directory of the C library this process has mapped (its real path)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if path and os.path.basename(path).startswith("libc.so"):
                    return os.path.dirname(os.path.realpath("/" + path))
    except OSError:
        pass
    return None


def python_read_only(import_paths: Sequence[str] = (), *extra: str) -> tuple[str, ...]:
    """The minimum read-only view for this Python interpreter (see the module docstring).

    Args:
        import_paths: the directories the runner imports from after :func:`enter` (narrower
            is better: single package directories are fine, as the view keeps their path).
        extra: more host paths, such as ``/usr/bin`` for programs that run others.

    Returns:
        Existing paths, each once, none inside another one (links kept as links, with their
        targets).
    """
    wanted = [*_interpreter_needs(), *import_paths, *extra]
    return _outermost(_existing_once(wanted))


def _interpreter_needs() -> list[str]:
    """What the interpreter loads after :func:`enter`: the standard library (lib-dynload in
    it), the C library's directory, the merged-``/usr`` links, the loader's cache and the
    local time zone (a link with its target)."""
    wanted: list[str] = [os.path.dirname(os.__file__)]
    libc_dir = _libc_directory()
    if libc_dir is not None:
        wanted.append(libc_dir)
    wanted += [path for path in ("/lib", "/lib64") if os.path.islink(path)]
    for path in ("/etc/ld.so.cache", "/etc/localtime"):
        wanted += _with_target(path)
    # The program loader the executable names, by the path execve resolves (through
    # /lib64 -> usr/lib64 and its link into the C library's directory, on most systems):
    # without it, running the interpreter inside fails with ENOENT.
    loader = _elf_interpreter(os.path.realpath(sys.executable))
    if loader is not None:
        wanted += _resolvable(loader)
    return wanted


def _elf_interpreter(path: str) -> str | None:
    """The program loader an ELF executable names (its ``PT_INTERP``), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
                return None
            end = "<" if head[5] == 1 else ">"
            wide = head[4] == 2
            phoff, phentsize, phnum = struct.unpack_from(
                f"{end}Q14xHH" if wide else f"{end}I10xHH", head, 32 if wide else 28
            )
            for index in range(min(phnum, 64)):
                f.seek(phoff + index * phentsize)
                entry = f.read(phentsize)
                if len(entry) < (56 if wide else 32):
                    return None
                (kind,) = struct.unpack_from(f"{end}I", entry, 0)
                if kind != 3:  # PT_INTERP
                    continue
                fields = f"{end}8xQ16xQ" if wide else f"{end}4xI8xI"
                offset, size = struct.unpack_from(fields, entry, 0)
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode("utf-8", "surrogateescape") or None
    except (OSError, struct.error):
        return None
    return None


def _resolvable(path: str, depth: int = 0) -> list[str]:
    """``path`` and every symbolic link on the way to it, each link's target followed, so
    that a view holding them resolves ``path`` as the host does (links are kept as links)."""
    if depth > 16 or not path.startswith("/"):
        return []
    parts = path.strip("/").split("/")
    here = ""
    for index, name in enumerate(parts):
        here = f"{here}/{name}"
        if os.path.islink(here):
            target = os.path.join(os.path.dirname(here), os.readlink(here))
            rest = "/".join(parts[index + 1 :])
            onward = os.path.normpath(os.path.join(target, rest) if rest else target)
            return [here, *_resolvable(onward, depth + 1)]
    return [here] if os.path.lexists(here) else []


def _with_target(path: str) -> list[str]:
    """``path`` and, if it is a symbolic link, its target; nothing if either is missing."""
    if os.path.islink(path) and os.path.exists(path):
        return [path, os.path.realpath(path)]
    if os.path.exists(path):
        return [path]
    return []


def _existing_once(paths: Iterable[str]) -> list[str]:
    """``paths`` that exist (a link counts, whatever its target), each once, in order."""
    chosen: list[str] = []
    for path in paths:
        if os.path.lexists(path) and path not in chosen:
            chosen.append(path)
    return chosen


def _outermost(paths: list[str]) -> tuple[str, ...]:
    """``paths`` but those inside a directory (not a link to one) among them."""
    dirs = [path for path in paths if os.path.isdir(path) and not os.path.islink(path)]
    return tuple(
        path
        for path in paths
        if not any(_is_within(path, parent) and path != parent for parent in dirs)
    )
