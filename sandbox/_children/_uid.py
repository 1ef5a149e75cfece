"""Host ids for confined runs: on a root host, each run's program is a uid and gid of its own.

Theory of operation
-------------------
A host that runs as root switches every confined program to an unprivileged host uid and
gid (:mod:`runner._namespaces`, *Identity*): the program is not host root, and owns nothing
on the host (everything it can write is a tmpfs of its run's own, gone with the run). The
ids come from one fixed range, :data:`FIRST` to ``FIRST + COUNT - 1`` (2097152000 to
2097217535, ``0x7D000000`` and the 65536 ids above it), which nothing else is expected to
use: above the range systemd gives containers (up to 1879048191) and below its "foreign"
range (from 2147352576) and 2**31 (some tools read ids as signed 32-bit numbers). An id
with an ``/etc/passwd`` or ``/etc/group`` entry is never handed out. The uid and the gid of
a run are the same number.

Two runs at once never have the same id, whichever host process (on this machine) started
them: the kernel counts some quotas per user (inotify instances and watches, queued
signals, the processes ``RLIMIT_NPROC`` counts, keys), and a run that exhausts its own
must leave the host's root and every other run theirs. An id is *leased*: the host binds
the abstract unix socket ``sandbox-runtime/uid/<id>`` in its network namespace and holds
it; a second bind of the name fails (``EADDRINUSE``), and the name is free again as soon as
the socket is closed, also when its holder dies, so no lease outlives its host. The lease
is taken when the host makes a confined run's child (a pool's idle child holds one) and
released once every process of the run is gone. (Hosts in different network namespaces
do not see each other's names: run them on the same machine only if they share one.)

The host sets a run's resource limits (``prlimit``) on a process that is the run's uid.
The kernel allows that to a process with ``CAP_SYS_RESOURCE``, which a root host may not
have (as on the machine this was written on: a virtual machine whose root lacks it), or to
one whose *real* ids are the target's: :meth:`Lease.real_ids` gives the calling thread the
run's real uid and gid for that moment (its effective ids, its capabilities and every other
thread stay as they were), with the raw system calls, as the C library's wrappers would
change every thread of the process.

An unprivileged host cannot switch ids: its programs are its own uid on the host, mapped
to 1000 in a user namespace, and share that uid's quotas (:func:`usable` says which).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import random
import socket
from collections.abc import Iterator
from typing import Final

__all__ = ["COUNT", "FIRST", "Lease", "lease", "usable"]

#: The first id of the range (0x7D000000): see the module docstring for why there.
FIRST: Final = 2_097_152_000
#: How many ids the range holds: runs at once on one machine, more than enough.
COUNT: Final = 1 << 16
_NAME: Final = "sandbox-runtime/uid/{}"
#: setresuid(2) and setresgid(2) by number (x86_64's own; the generic table's elsewhere).
_SETRESUID: Final = {"x86_64": 117, "aarch64": 147, "riscv64": 147, "loongarch64": 147}
_SETRESGID: Final = {"x86_64": 119, "aarch64": 149, "riscv64": 149, "loongarch64": 149}


class Lease:
    """One id, held until :meth:`release` (or until the holder exits)."""

    __slots__ = ("_sock", "id")

    def __init__(self, id_: int, sock: socket.socket) -> None:
        self.id = id_
        self._sock: socket.socket | None = sock

    @contextlib.contextmanager
    def real_ids(self) -> Iterator[None]:
        """Within: the calling thread's real uid and gid are the lease's (see the module
        docstring); the thread's own come back on the way out, whatever happens.

        Raises:
            OSError: the ids could not be changed (or changed back).
        """
        machine = os.uname().machine
        if machine not in _SETRESUID:  # no verified numbers: the limits need the capability
            yield
            return
        libc = _libc()
        own_uid, own_gid = os.getresuid()[0], os.getresgid()[0]
        keep = ctypes.c_long(-1)

        def call(number: int, real: int, what: str) -> None:
            if libc.syscall(ctypes.c_long(number), ctypes.c_long(real), keep, keep) != 0:
                code = ctypes.get_errno()
                raise OSError(code, f"{what}: {os.strerror(code)}")

        call(_SETRESGID[machine], self.id, "setresgid")
        try:
            call(_SETRESUID[machine], self.id, "setresuid")
            try:
                yield
            finally:
                call(_SETRESUID[machine], own_uid, "setresuid (back)")
        finally:
            call(_SETRESGID[machine], own_gid, "setresgid (back)")

    def release(self) -> None:
        """Give the id back (idempotent). Only once no process runs as it."""
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __repr__(self) -> str:
        state = "held" if self._sock is not None else "released"
        return f"<uid lease {self.id} {state}>"


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _ids_in(path: str) -> set[int]:
    """The ids of ``path`` (``/etc/passwd`` or ``/etc/group``) that fall in the range."""
    found: set[int] = set()
    try:
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split(":")
                if len(fields) > 2 and fields[2].isdigit():
                    number = int(fields[2])
                    if FIRST <= number < FIRST + COUNT:
                        found.add(number)
    except OSError:
        pass
    return found


@functools.cache
def _taken() -> frozenset[int]:
    return frozenset(_ids_in("/etc/passwd") | _ids_in("/etc/group"))


def _mapped(path: str) -> bool:
    """Whether the whole range is mapped in this process's user namespace (``uid_map``)."""
    try:
        with open(path, encoding="ascii") as lines:
            for line in lines:
                inside, _, length = (int(field) for field in line.split())
                if inside <= FIRST and inside + length >= FIRST + COUNT:
                    return True
    except (OSError, ValueError):
        pass
    return False


@functools.cache
def usable() -> str | None:
    """None when this host switches its confined programs to ids of the range; else why not."""
    if os.geteuid() != 0:
        return (
            "the host is not root: a confined program is the host's own uid (mapped to 1000 "
            "in a user namespace), sharing its per-user kernel quotas with the host and "
            "with every other run"
        )
    if not (_mapped("/proc/self/uid_map") and _mapped("/proc/self/gid_map")):
        return f"ids {FIRST} to {FIRST + COUNT - 1} are not mapped in the host's user namespace"
    return None


def lease() -> Lease | None:
    """An id of the range that no other run holds now; None where ids are not switched.

    Raises:
        OSError: every id of the range is held (``EAGAIN``), or the socket failed.
    """
    if usable() is not None:
        return None
    taken = _taken()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # bound, never listening
    try:
        start = random.randrange(COUNT)  # hosts starting at once rarely try the same ids
        for offset in range(COUNT):
            number = FIRST + (start + offset) % COUNT
            if number in taken:
                continue
            try:
                sock.bind("\0" + _NAME.format(number))
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                continue
            return Lease(number, sock)
    except BaseException:
        sock.close()
        raise
    sock.close()
    raise OSError(errno.EAGAIN, f"every id from {FIRST} to {FIRST + COUNT - 1} is in use")
