"""Landlock for the ``confined`` level (a filesystem view, no TCP, a scoped process), and for
the ``process`` level (a scoped process alone: :func:`scope_signals`).

Theory of operation
===================

Landlock is an unprivileged Linux security module: a process builds a *ruleset* that names
the kinds of access it wants denied (the *handled* rights) and the file hierarchies where some
of them stay allowed, then enforces it on itself. The restriction is inherited by every
process it forks or executes and can never be lifted, only narrowed by further rulesets.
Three system calls do it (``landlock_create_ruleset``, ``landlock_add_rule`` and
``landlock_restrict_self``, numbers 444 to 446 on x86_64 and aarch64 alike: they come after
the point, 424, from which every architecture shares one numbering).

:func:`restrict` handles *every* right the running kernel's ABI knows, so whatever is not
granted by a rule is denied:

===  ======  ==========================================================================
ABI  Linux   what restrict() adds at that version
===  ======  ==========================================================================
1    5.13    the 13 base filesystem rights (read, write, execute, list, create, remove)
2    5.19    ``REFER``: rename or link across directories
3    6.2     ``TRUNCATE``
4    6.7     TCP ``bind`` and ``connect``, handled with no rule: all TCP is denied
5    6.10    ``IOCTL_DEV``: ioctl on device files
6    6.12    scopes: no connecting to abstract unix sockets, and no signals, outside the
             sandbox's own domain
7    6.15    nothing new to handle (audit logging flags; the kernel defaults are kept)
8    7.0     ``LANDLOCK_RESTRICT_SELF_TSYNC``: every thread is restricted, not only this one
===  ======  ==========================================================================

Read-only paths get ``EXECUTE | READ_FILE | READ_DIR``; read-write paths get every handled
filesystem right but ``EXECUTE``: what a program can write, it cannot run (nor can a process
it starts). List-only paths get ``READ_DIR``: their directories can be listed and walked, no
file under them can be opened (``/proc``: the run's processes and their descriptors can be
listed, and a ``/proc/self/fd/N`` link reopens what it names, checked as that file; but no
``/proc/<pid>`` file can be read, ``mountinfo`` among them, which names the host's devices
and the host paths behind the view's mounts). A rule on a file rather than a directory may
only carry the rights that make sense for a file (execute, read, write, truncate, device
ioctl), so the others are dropped for it. A path that does not exist is skipped: a sandbox's
list of read-only paths is usually written for many hosts (``/lib64`` exists on some), and a
missing path grants nothing.

What Landlock does not restrict (the other walls of the ``confined`` level cover these):
``stat``, ``chdir``, ``chmod``, ``chown``, ``utime`` and most ``ioctl``\\ s on files that can
be opened; file descriptors opened before :func:`restrict` (close what the program must not
have); UDP and other non-TCP sockets (the network namespace covers them); connecting to a
*pathname* unix socket anywhere it can be reached, such as ``/run/docker.sock`` (checked on
this host's ABI 7; the mount namespace must hide such sockets); and, before ABI 8, threads
other than the calling one, which is why :func:`restrict` refuses to run in a process that
has several.

A process in a Landlock domain can signal only processes of its own domain (or of domains
nested in it) once the domain scopes signals (ABI 6), and, whatever the domain handles, can
trace (``ptrace``, ``/proc/<pid>/mem``, ``process_vm_readv``) only those (what else of
``/proc/<pid>`` it can read is as before: root still reads another root process's
``environ`` and ``maps`` here). :func:`scope_signals` enforces a domain that handles nothing
else: for the ``process`` level, whose program runs as the host's own user and sees its
files, but must not be able to take the host (or any other process of that user) down, nor
read its memory.

Invariants upheld (DESIGN.md, "sandbox: the host"): at ``confined``, a filesystem view where
the host is read-only or invisible, and no_new_privs; at ``process``, where the kernel has
ABI 6, no signal or trace reaches a process outside the run, and no_new_privs.

Only the standard library is imported (:mod:`ctypes` for the system calls).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import sys
from collections.abc import Sequence
from typing import Final

from ._libc import libc as _libc
from ._libc import machine as _machine

__all__ = [
    "KNOWN_ABI",
    "SCOPE_ABI",
    "abi_version",
    "restrict",
    "scope_signals",
    "signal_scope_gap",
]

#: The newest Landlock ABI this module knows; a newer kernel is used at this version.
KNOWN_ABI: Final = 8

# Syscall numbers: 444-446 in arch/x86/entry/syscalls/syscall_64.tbl and in
# include/uapi/asm-generic/unistd.h (aarch64) alike.
_SYSCALLS: Final = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}

# <linux/landlock.h>
_CREATE_RULESET_VERSION: Final = 1 << 0
_RULE_PATH_BENEATH: Final = 1
_RESTRICT_SELF_TSYNC: Final = 1 << 3  # ABI 8

_FS_EXECUTE: Final = 1 << 0
_FS_WRITE_FILE: Final = 1 << 1
_FS_READ_FILE: Final = 1 << 2
_FS_READ_DIR: Final = 1 << 3
# REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK and
# MAKE_SYM are bits 4 to 12: with the four above, the base set of ABI 1.
_FS_ABI1: Final = (1 << 13) - 1
_FS_REFER: Final = 1 << 13  # ABI 2
_FS_TRUNCATE: Final = 1 << 14  # ABI 3
_FS_IOCTL_DEV: Final = 1 << 15  # ABI 5
#: The rights a rule on a non-directory may carry.
_FS_FILE: Final = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_FS_READ_ONLY: Final = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR

_NET_BIND_TCP: Final = 1 << 0  # ABI 4
_NET_CONNECT_TCP: Final = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
_SCOPE_SIGNAL: Final = 1 << 1  # ABI 6
#: What each ABI adds to the rights handled (the module docstring's table): the ABI, then
#: its filesystem rights, network rights and scopes.
_HANDLED_SINCE: Final = (
    (1, _FS_ABI1, 0, 0),
    (2, _FS_REFER, 0, 0),
    (3, _FS_TRUNCATE, 0, 0),
    (4, 0, _NET_BIND_TCP | _NET_CONNECT_TCP, 0),
    (5, _FS_IOCTL_DEV, 0, 0),
    (6, 0, 0, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL),
)

#: The first ABI that scopes signals (:func:`scope_signals`).
SCOPE_ABI: Final = 6

#: struct landlock_ruleset_attr: handled_access_fs, handled_access_net (ABI 4), scoped (ABI 6).
#: It is passed truncated to the fields the ABI knows.
_RULESET_ATTR: Final = struct.Struct("=QQQ")
#: struct landlock_path_beneath_attr { __u64 allowed_access; __s32 parent_fd; } (packed).
_PATH_BENEATH_ATTR: Final = struct.Struct("=Qi")

_PR_SET_NO_NEW_PRIVS: Final = 38


def abi_version() -> int:
    """The Landlock ABI version of the running kernel, or 0 if Landlock is unavailable.

    Unavailable means: not Linux, an architecture without verified syscall numbers, a kernel
    without Landlock (before 5.13, or built without it), or Landlock disabled at boot (not in
    the ``lsm=`` list). Never raises.
    """
    return _probe()[0]


def restrict(
    read_only: Sequence[str | os.PathLike[str]],
    read_write: Sequence[str | os.PathLike[str]],
    list_only: Sequence[str | os.PathLike[str]] = (),
) -> int:
    """Confine this process, and all it later starts, to the given paths; no TCP, if possible.

    Sets no_new_privs, then enforces a ruleset handling every access right the kernel's ABI
    knows (see the module docstring): files under ``read_only`` can be read and executed,
    files under ``read_write`` can be read, written, created, renamed and removed but not
    executed, and nothing else on the filesystem can be opened. On ABI 4 and later all TCP
    ``bind`` and ``connect`` fail with ``EACCES``; on ABI 6 and later so do connections to
    abstract unix sockets and signals to processes outside this sandbox (``EPERM``).
    Irreversible.

    Args:
        read_only: files and directories to allow reading and executing beneath. Paths that do
            not exist are skipped.
        read_write: files and directories to allow everything beneath but executing. Paths
            that do not exist are skipped.
        list_only: directories whose directories may be listed beneath, and nothing else.
            Paths that do not exist are skipped.

    Returns:
        The ABI version whose rights were handled: the kernel's, capped at :data:`KNOWN_ABI`.

    Raises:
        TypeError: a path list is a single string rather than a sequence of them.
        RuntimeError: the process has other threads and the kernel (ABI < 8) can only
            restrict the calling one; nothing was changed.
        OSError: Landlock is unavailable (``EOPNOTSUPP``, with the reason), a path exists but
            cannot be opened, or a Landlock call failed (the kernel's errno, with the call and
            path in the message).
    """
    _refuse_strings(read_only, read_write, list_only)
    abi = _usable_abi()
    create_ruleset, add_rule, restrict_self = _SYSCALLS[_machine()]
    libc = _libc()
    handled_fs, handled_net, scoped = _handled(abi)
    ruleset = _create_ruleset(libc, create_ruleset, abi, handled_fs, handled_net, scoped)
    try:
        for paths, rights in (
            (read_only, _FS_READ_ONLY),
            (read_write, handled_fs & ~_FS_EXECUTE),
            (list_only, _FS_READ_DIR),
        ):
            for path in paths:
                _add_path_rule(libc, add_rule, ruleset, os.fspath(path), rights & handled_fs)
        _enforce(libc, restrict_self, ruleset, abi)
    finally:
        os.close(ruleset)
    return abi


def signal_scope_gap() -> str | None:
    """Why :func:`scope_signals` cannot be enforced here; None if it can. Never raises."""
    kernel_abi, reason = _probe()
    if kernel_abi < 1:
        return reason
    if kernel_abi < SCOPE_ABI:
        return (
            f"the kernel's Landlock is ABI {kernel_abi}; scoping signals needs ABI "
            f"{SCOPE_ABI} (Linux 6.12)"
        )
    return None


def scope_signals() -> int:
    """Keep this process, and all it later starts, from signalling or tracing any process
    outside them.

    Sets no_new_privs, then enforces a ruleset that handles no filesystem or network right
    and scopes signals: ``kill``, ``tgkill``, ``pidfd_send_signal``, ``rt_sigqueueinfo`` and
    ``F_SETOWN`` signals to a process outside fail with ``EPERM`` (``kill(-1, ...)`` reaches
    this process's own descendants only), and so does tracing one, as in any Landlock domain.
    Files, sockets and everything else are as they were. Irreversible.

    Returns:
        The kernel's ABI version, capped at :data:`KNOWN_ABI`.

    Raises:
        OSError: ``EOPNOTSUPP`` where the kernel cannot (:func:`signal_scope_gap` says why),
            or the kernel's errno if a Landlock call failed.
        RuntimeError: the process has other threads and the kernel (ABI < 8) can only
            restrict the calling one; nothing was changed.
    """
    gap = signal_scope_gap()
    if gap is not None:
        raise OSError(errno.EOPNOTSUPP, f"landlock: cannot scope signals: {gap}")
    abi = _usable_abi()
    create_ruleset, _, restrict_self = _SYSCALLS[_machine()]
    libc = _libc()
    ruleset = _create_ruleset(libc, create_ruleset, abi, 0, 0, _SCOPE_SIGNAL)
    try:
        _enforce(libc, restrict_self, ruleset, abi)
    finally:
        os.close(ruleset)
    return abi


def _refuse_strings(*path_lists: Sequence[str | os.PathLike[str]]) -> None:
    """Raise if a path list is one string: its characters would be taken for paths.

    Raises:
        TypeError: one of ``path_lists`` is a ``str`` or ``bytes``.
    """
    for paths in path_lists:
        if isinstance(paths, str | bytes):
            raise TypeError(f"landlock: expected a sequence of paths, got the string {paths!r}")


def _usable_abi() -> int:
    """The ABI whose rights :func:`restrict` handles: the kernel's, capped at :data:`KNOWN_ABI`.

    Raises:
        OSError: Landlock is unavailable (``EOPNOTSUPP``, with the reason).
        RuntimeError: the ABI restricts the calling thread only, and there are others.
    """
    kernel_abi, reason = _probe()
    if kernel_abi < 1:
        raise OSError(errno.EOPNOTSUPP, f"landlock: unavailable: {reason}")
    abi = min(kernel_abi, KNOWN_ABI)
    if abi < 8:
        _refuse_other_threads()
    return abi


def _handled(abi: int) -> tuple[int, int, int]:
    """Every right ABI ``abi`` knows: (filesystem rights, network rights, scopes)."""
    fs = net = scoped = 0
    for since, more_fs, more_net, more_scoped in _HANDLED_SINCE:
        if abi >= since:
            fs |= more_fs
            net |= more_net
            scoped |= more_scoped
    return fs, net, scoped


def _create_ruleset(
    libc: ctypes.CDLL, create_ruleset: int, abi: int, handled_fs: int, handled_net: int, scoped: int
) -> int:
    """A new ruleset handling the given rights; its descriptor (the caller closes it).

    Raises:
        OSError: the kernel refused it.
    """
    # The attribute is passed truncated to the fields ABI ``abi`` knows.
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    attr = ctypes.create_string_buffer(_RULESET_ATTR.pack(handled_fs, handled_net, scoped)[:size])
    ruleset = libc.syscall(
        ctypes.c_long(create_ruleset), attr, ctypes.c_size_t(size), ctypes.c_uint32(0)
    )
    if ruleset < 0:
        raise _os_error("landlock_create_ruleset")
    return int(ruleset)


def _enforce(libc: ctypes.CDLL, restrict_self: int, ruleset: int, abi: int) -> None:
    """Set no_new_privs (the kernel requires it), then enforce ``ruleset`` on this process
    (every thread of it from ABI 8).

    Raises:
        OSError: either call failed.
    """
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _os_error("prctl(PR_SET_NO_NEW_PRIVS)")
    flags = _RESTRICT_SELF_TSYNC if abi >= 8 else 0
    if libc.syscall(ctypes.c_long(restrict_self), ctypes.c_long(ruleset), ctypes.c_long(flags)):
        raise _os_error("landlock_restrict_self")


def _add_path_rule(libc: ctypes.CDLL, add_rule: int, ruleset: int, path: str, rights: int) -> None:
    """Allow ``rights`` beneath ``path`` (only the file rights if it is not a directory).

    Raises:
        OSError: ``path`` exists but cannot be opened, or the kernel refused the rule.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return  # documented: a missing path grants nothing
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FS_FILE
        attr = ctypes.create_string_buffer(_PATH_BENEATH_ATTR.pack(rights, fd))
        rc = libc.syscall(
            ctypes.c_long(add_rule),
            ctypes.c_long(ruleset),
            ctypes.c_long(_RULE_PATH_BENEATH),
            attr,
            ctypes.c_long(0),
        )
        if rc != 0:
            raise _os_error(f"landlock_add_rule({path!r})", path)
    finally:
        os.close(fd)


def _refuse_other_threads() -> None:
    """Raise if this process has threads that landlock_restrict_self would leave unconfined.

    Raises:
        RuntimeError: more than one thread (counted by the kernel, so threads started by
            extension modules count too).
    """
    try:
        count = len(os.listdir("/proc/self/task"))
    except OSError:
        import threading  # no /proc: fall back to the threads Python knows about

        count = threading.active_count()
    if count > 1:
        raise RuntimeError(
            f"landlock: this process has {count} threads and the kernel (Landlock ABI < 8) "
            "restricts only the calling one; restrict() must run while single-threaded"
        )


def _probe() -> tuple[int, str]:
    """The kernel's ABI version (0 if none) and, when 0, why."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock is Linux-only (this is {sys.platform})"
    try:
        create_ruleset = _SYSCALLS[_machine()][0]
        libc = _libc()
    except (KeyError, OSError) as exc:
        return 0, f"no verified Landlock syscall numbers or no C library here ({exc})"
    version = libc.syscall(
        ctypes.c_long(create_ruleset),
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_CREATE_RULESET_VERSION),
    )
    if version > 0:
        return int(version), ""
    err = ctypes.get_errno()
    if err == errno.EOPNOTSUPP:
        return 0, "Landlock is built into the kernel but disabled at boot (see the lsm= option)"
    if err == errno.ENOSYS:
        return 0, "the kernel has no Landlock (Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK)"
    return 0, f"landlock_create_ruleset(VERSION) failed: {os.strerror(err)}"


def _os_error(what: str, path: str | None = None) -> OSError:
    err = ctypes.get_errno()
    if path is None:
        return OSError(err, f"{what}: {os.strerror(err)}")
    return OSError(err, f"{what}: {os.strerror(err)}", path)
