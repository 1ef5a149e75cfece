"""A seccomp-BPF denylist for the ``confined`` level: what an untrusted Python program never needs.

Theory of operation
===================

The kernel runs a classic-BPF program over every system call the process makes. The program
sees a ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, the instruction pointer at
8, then the six 64-bit arguments from offset 16) and returns an action. Ours, as laid out by
:func:`build_filter`::

    ld  arch
    jeq AUDIT_ARCH_<ours>           else -> kill      a foreign calling convention
    ld  nr
    jge 0x40000000 -> kill                            (x86_64 only: the x32 ABI)
    jeq clone       -> clone check                    namespace bits in the flags
    jeq clone3      -> ENOSYS                         so that glibc falls back to clone
    jeq personality -> personality check              dangerous persona flags
    jeq ioctl       -> ioctl check                    terminal input injection
    jeq <denied 1>  -> EPERM
    ...
    jeq <denied N>  -> EPERM
    ret ALLOW
    <the three argument checks, each ending in a jump to ALLOW or EPERM>
    ret ALLOW / ret ERRNO|EPERM / ret ERRNO|ENOSYS / ret KILL_PROCESS

Why a denylist and not an allowlist: the program is arbitrary Python, with arbitrary
extension modules, so the set of system calls it may legitimately make is open. What is
denied is what no such program needs and what widens the kernel's attack surface or reaches
outside the sandbox (:data:`DENYLIST` gives the reason for each). The other walls of the
``confined`` level (namespaces, Landlock, rlimits) do the rest; the filter is installed last,
after them, because it denies ``unshare`` and friends that setting them up needs.

Why ``EPERM`` and not a kill: a denied call fails the way an unprivileged call would, so a
program that probes (``os.unshare`` in a library's feature check) sees an ordinary
:class:`PermissionError`. Only a foreign architecture or the x32 ABI kills the process: the
syscall numbers in this filter do not mean the same there, so no answer would be correct.

``clone`` and ``clone3``: ``clone``'s flags are its first argument, a register the filter can
read, so it is allowed unless one of the ``CLONE_NEW*`` bits is set. ``clone3`` takes its
flags in a structure in memory, which a seccomp filter cannot read; it answers ``ENOSYS``,
and glibc (2.34 and later, for ``pthread_create``, ``posix_spawn`` and ``fork``) falls back
to ``clone``, whose flags the filter does see.

Cost: the kernel (5.11 and later) emulates a filter once at install time and caches, per
syscall number, whether it always allows regardless of the arguments. Every syscall on this
filter's fall-through path (all but the four whose arguments it reads) therefore skips the
BPF program entirely after the first call; the chain's length does not matter for them.
PERF-NOTES section 3 measured about 48 ns per syscall for a 44-entry filter.

Invariants upheld (DESIGN.md, "sandbox: the host", ``confined``): a seccomp filter and
no_new_privs. The filter applies to every thread of the process (``SECCOMP_FILTER_FLAG_TSYNC``)
and is inherited across ``fork`` and ``execve``; it can never be removed, only added to.

Only the standard library is imported (:mod:`ctypes` for ``prctl`` and ``syscall``), so the
runner can install the filter before the program's first line runs.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import struct
import sys
from collections.abc import Mapping
from typing import Final

from ._libc import libc as _libc

__all__ = [
    "ABSENT",
    "ARCHITECTURES",
    "DENYLIST",
    "FILTERED",
    "build_filter",
    "install",
    "supported",
    "syscall_number",
]

#: The architectures this module has syscall tables for (names as ``uname -m`` prints them).
ARCHITECTURES: Final = ("x86_64", "aarch64")

#: System calls that fail with ``EPERM``, each with the reason an untrusted Python program
#: never needs it. Order does not matter to the filter; it is grouped by subject here.
DENYLIST: Final[tuple[tuple[str, str], ...]] = (
    # Reaching into other processes.
    ("ptrace", "debugs or controls another process, or lets a parent control this one"),
    ("process_vm_readv", "reads another process's memory"),
    ("process_vm_writev", "writes another process's memory"),
    ("kcmp", "compares kernel objects of other processes (an information leak)"),
    ("pidfd_getfd", "steals a file descriptor from another process"),
    ("process_madvise", "changes another process's memory advice"),
    ("migrate_pages", "moves another process's pages between NUMA nodes"),
    ("move_pages", "moves another process's pages between NUMA nodes"),
    # Namespaces and the filesystem view: set up by the host before the filter, never after.
    ("unshare", "creates namespaces: a user namespace reopens most of the kernel's surface"),
    ("setns", "joins another namespace"),
    ("mount", "changes the filesystem view"),
    ("umount2", "changes the filesystem view"),
    ("pivot_root", "changes the root filesystem"),
    ("chroot", "changes the root directory"),
    ("open_tree", "new mount API: the same power as mount"),
    ("move_mount", "new mount API: the same power as mount"),
    ("fsopen", "new mount API: the same power as mount"),
    ("fsconfig", "new mount API: the same power as mount"),
    ("fsmount", "new mount API: the same power as mount"),
    ("fspick", "new mount API: the same power as mount"),
    ("mount_setattr", "new mount API: changes mount properties"),
    ("open_by_handle_at", "opens a file by handle, bypassing path checks (the shocker escape)"),
    ("name_to_handle_at", "the other half of open_by_handle_at"),
    # Kernel attack surface with a long record of exploitable bugs.
    ("bpf", "loads eBPF programs and maps: a frequent source of kernel exploits"),
    ("perf_event_open", "performance counters: a frequent source of kernel exploits and leaks"),
    ("userfaultfd", "stalls page faults at will: the classic way to win kernel races"),
    ("io_uring_setup", "io_uring: a large, frequently exploited interface that bypasses seccomp"),
    ("io_uring_enter", "io_uring: a large, frequently exploited interface that bypasses seccomp"),
    ("io_uring_register", "io_uring: a large, frequently exploited interface"),
    ("keyctl", "kernel keyrings: not namespaced, frequently exploited"),
    ("add_key", "kernel keyrings: not namespaced, frequently exploited"),
    ("request_key", "kernel keyrings: not namespaced, frequently exploited"),
    ("lookup_dcookie", "profiling interface (removed in Linux 6.9): leaks kernel state"),
    ("fanotify_init", "watches filesystem events system-wide"),
    # Administering the machine.
    ("kexec_load", "replaces the running kernel"),
    ("kexec_file_load", "replaces the running kernel"),
    ("init_module", "loads a kernel module"),
    ("finit_module", "loads a kernel module"),
    ("delete_module", "unloads a kernel module"),
    ("reboot", "reboots or halts the machine"),
    ("swapon", "changes swap devices"),
    ("swapoff", "changes swap devices"),
    ("acct", "switches process accounting"),
    ("quotactl", "manages disk quotas"),
    ("quotactl_fd", "manages disk quotas"),
    ("syslog", "reads or clears the kernel log (leaks kernel addresses)"),
    ("vhangup", "hangs up the controlling terminal"),
    ("iopl", "raises the I/O privilege level (x86 only)"),
    ("ioperm", "grants access to I/O ports (x86 only)"),
    ("modify_ldt", "installs segment descriptors: old attack surface (x86 only)"),
    # Global clocks and names.
    ("clock_settime", "sets the system clock"),
    ("settimeofday", "sets the system clock"),
    ("adjtimex", "tunes the system clock"),
    ("clock_adjtime", "tunes the system clock"),
    ("sethostname", "renames the host"),
    ("setdomainname", "renames the host's NIS domain"),
)

#: System calls the filter looks at more closely than by number, and what it does with them.
FILTERED: Final[tuple[tuple[str, str], ...]] = (
    ("clone", "EPERM if a CLONE_NEW* namespace bit is set; fork, vfork and threads pass"),
    ("clone3", "ENOSYS: its flags are in memory, out of the filter's reach; glibc then uses clone"),
    (
        "personality",
        "EPERM for ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, "
        "ADDR_LIMIT_32BIT and ADDR_LIMIT_3GB (they weaken memory protections of exec'd "
        "programs); the query 0xffffffff and the other personas pass",
    ),
    ("ioctl", "EPERM for TIOCSTI and TIOCLINUX (typing into a terminal the sandbox shares)"),
)

# Syscall numbers, from the kernel's uapi headers: arch/x86/entry/syscalls/syscall_64.tbl
# (<asm/unistd_64.h>) for x86_64 and include/uapi/asm-generic/unistd.h for aarch64, which uses
# the generic table. Numbers from 424 up are the same on every architecture. Checked against
# the headers of Linux 6.1 (tests/runner/test_seccomp.py repeats the check when they are
# installed). A name missing from a table does not exist on that architecture.
#: System calls added since Linux 5.1 have one number on every architecture.
_UNIFIED: Final[Mapping[str, int]] = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "clone3": 435,
    "pidfd_getfd": 438,
    "process_madvise": 440,
    "mount_setattr": 442,
    "quotactl_fd": 443,
}
_X86_64: Final[Mapping[str, int]] = {
    "ioctl": 16,
    "clone": 56,
    "ptrace": 101,
    "syslog": 103,
    "personality": 135,
    "vhangup": 153,
    "modify_ldt": 154,
    "pivot_root": 155,
    "adjtimex": 159,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "sethostname": 170,
    "setdomainname": 171,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "lookup_dcookie": 212,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "migrate_pages": 256,
    "unshare": 272,
    "move_pages": 279,
    "perf_event_open": 298,
    "fanotify_init": 300,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "finit_module": 313,
    "seccomp": 317,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    **_UNIFIED,
}
_AARCH64: Final[Mapping[str, int]] = {
    "lookup_dcookie": 18,
    "ioctl": 29,
    "umount2": 39,
    "mount": 40,
    "pivot_root": 41,
    "chroot": 51,
    "vhangup": 58,
    "quotactl": 60,
    "acct": 89,
    "personality": 92,
    "unshare": 97,
    "kexec_load": 104,
    "init_module": 105,
    "delete_module": 106,
    "clock_settime": 112,
    "syslog": 116,
    "ptrace": 117,
    "reboot": 142,
    "sethostname": 161,
    "setdomainname": 162,
    "settimeofday": 170,
    "adjtimex": 171,
    "add_key": 217,
    "request_key": 218,
    "keyctl": 219,
    "clone": 220,
    "swapon": 224,
    "swapoff": 225,
    "migrate_pages": 238,
    "move_pages": 239,
    "perf_event_open": 241,
    "fanotify_init": 262,
    "name_to_handle_at": 264,
    "open_by_handle_at": 265,
    "clock_adjtime": 266,
    "setns": 268,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "kcmp": 272,
    "finit_module": 273,
    "seccomp": 277,
    "bpf": 280,
    "userfaultfd": 282,
    "kexec_file_load": 294,
    **_UNIFIED,
}
_TABLES: Final[Mapping[str, Mapping[str, int]]] = {"x86_64": _X86_64, "aarch64": _AARCH64}

#: Denylisted names that do not exist on an architecture (x86 port I/O and segment tables).
ABSENT: Final[Mapping[str, frozenset[str]]] = {
    "x86_64": frozenset(),
    "aarch64": frozenset({"iopl", "ioperm", "modify_ldt"}),
}

# <linux/audit.h>: EM_X86_64 (62) and EM_AARCH64 (183), each | __AUDIT_ARCH_64BIT | _LE.
_AUDIT_ARCH: Final[Mapping[str, int]] = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# <asm/unistd_x32.h>: x32 syscalls enter the x86_64 table with this bit set in nr.
_X32_SYSCALL_BIT: Final = 0x40000000
# `uname -m` spellings of the same architectures on other systems.
_ALIASES: Final[Mapping[str, str]] = {"amd64": "x86_64", "arm64": "aarch64"}

# <linux/filter.h>, <linux/bpf_common.h>: the classic BPF opcodes the filter uses.
_BPF_LD_W_ABS: Final = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_BPF_JEQ_K: Final = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_BPF_JGE_K: Final = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_BPF_JSET_K: Final = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
_BPF_RET_K: Final = 0x06 | 0x00  # BPF_RET | BPF_K
_BPF_MAXINSNS: Final = 4096
#: struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }; both architectures are
#: little-endian (big-endian aarch64 has another AUDIT_ARCH and is refused).
_SOCK_FILTER: Final = struct.Struct("<HBBI")

# <linux/seccomp.h>
_SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
_SECCOMP_RET_ERRNO: Final = 0x00050000
_SECCOMP_RET_ALLOW: Final = 0x7FFF0000
_SECCOMP_SET_MODE_FILTER: Final = 1
_SECCOMP_GET_ACTION_AVAIL: Final = 2
_SECCOMP_FILTER_FLAG_TSYNC: Final = 1
# struct seccomp_data offsets; an argument's low 32 bits come first on little-endian.
_DATA_NR: Final = 0
_DATA_ARCH: Final = 4
_DATA_ARG0_LOW: Final = 16
_DATA_ARG1_LOW: Final = 24

# <linux/prctl.h>
_PR_GET_SECCOMP: Final = 21
_PR_SET_NO_NEW_PRIVS: Final = 38

# <linux/sched.h>: NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET. (NEWTIME,
# 0x80, is not among them: in clone's flags that bit belongs to the exit signal, and clone
# refuses NEWTIME anyway; unshare, which takes it, is denied outright.)
_CLONE_NAMESPACES: Final = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
# <linux/personality.h>: ADDR_NO_RANDOMIZE | MMAP_PAGE_ZERO | ADDR_COMPAT_LAYOUT |
# READ_IMPLIES_EXEC | ADDR_LIMIT_32BIT | ADDR_LIMIT_3GB.
_PERSONA_DANGEROUS: Final = 0x0040000 | 0x0100000 | 0x0200000 | 0x0400000 | 0x0800000 | 0x8000000
_PERSONA_QUERY: Final = 0xFFFFFFFF
# <asm-generic/ioctls.h> (x86_64 and aarch64 alike).
_TIOCSTI: Final = 0x5412
_TIOCLINUX: Final = 0x541C


def syscall_number(arch: str, name: str) -> int | None:
    """The number of system call ``name`` on ``arch``, or None where it does not exist.

    Only the calls this module filters (and ``seccomp`` itself) are in its tables.

    Raises:
        ValueError: ``arch`` is not one of :data:`ARCHITECTURES`, or ``name`` is not in its
            tables.
    """
    table = _TABLES[_canonical(arch)]
    if name in table:
        return table[name]
    if name in ABSENT[_canonical(arch)]:
        return None
    raise ValueError(f"seccomp: no syscall number for {name!r} in this module's tables")


@functools.cache
def build_filter(arch: str) -> bytes:
    """The filter for ``arch``, as the array of ``struct sock_filter`` the kernel takes.

    Pure: the same architecture always gives the same bytes, on any host (and so it is
    cached: a zygote builds it once for every child it forks).

    Args:
        arch: one of :data:`ARCHITECTURES` (``amd64`` and ``arm64`` are accepted as aliases).

    Raises:
        ValueError: ``arch`` is not supported.
    """
    arch = _canonical(arch)
    table = _TABLES[arch]
    asm = _Assembler()
    asm.load(_DATA_ARCH)
    asm.jump(_BPF_JEQ_K, _AUDIT_ARCH[arch], jf="kill")
    asm.load(_DATA_NR)
    if arch == "x86_64":
        asm.jump(_BPF_JGE_K, _X32_SYSCALL_BIT, jt="kill")
    asm.jump(_BPF_JEQ_K, table["clone"], jt="clone")
    asm.jump(_BPF_JEQ_K, table["clone3"], jt="enosys")
    asm.jump(_BPF_JEQ_K, table["personality"], jt="personality")
    asm.jump(_BPF_JEQ_K, table["ioctl"], jt="ioctl")
    for name, _reason in DENYLIST:
        if name in table:
            asm.jump(_BPF_JEQ_K, table[name], jt="eperm")
    asm.ret(_SECCOMP_RET_ALLOW)

    asm.label("clone")
    asm.load(_DATA_ARG0_LOW)  # clone's flags, on both architectures
    asm.jump(_BPF_JSET_K, _CLONE_NAMESPACES, jt="eperm", jf="allow")

    asm.label("personality")
    asm.load(_DATA_ARG0_LOW)  # the kernel takes an unsigned int: the low word is all of it
    asm.jump(_BPF_JEQ_K, _PERSONA_QUERY, jt="allow")
    asm.jump(_BPF_JSET_K, _PERSONA_DANGEROUS, jt="eperm", jf="allow")

    asm.label("ioctl")
    asm.load(_DATA_ARG1_LOW)  # the request, an unsigned int
    asm.jump(_BPF_JEQ_K, _TIOCSTI, jt="eperm")
    asm.jump(_BPF_JEQ_K, _TIOCLINUX, jt="eperm", jf="allow")

    asm.label("allow")
    asm.ret(_SECCOMP_RET_ALLOW)
    asm.label("eperm")
    asm.ret(_SECCOMP_RET_ERRNO | errno.EPERM)
    asm.label("enosys")
    asm.ret(_SECCOMP_RET_ERRNO | errno.ENOSYS)
    asm.label("kill")
    asm.ret(_SECCOMP_RET_KILL_PROCESS)
    return asm.assemble()


def supported() -> str | None:
    """Why this host cannot install the filter, or None if it can.

    Checks the operating system, the architecture (and that this Python is a native 64-bit
    one), that the kernel has seccomp filters, and that it knows every action the filter
    returns. Installs nothing.
    """
    if not sys.platform.startswith("linux"):
        return f"seccomp filters are Linux-only (this is {sys.platform})"
    try:
        arch = _host_arch()
        libc = _libc()
    except OSError as exc:
        return str(exc)
    if libc.prctl(_PR_GET_SECCOMP, 0, 0, 0, 0) < 0:
        err = ctypes.get_errno()
        return f"the kernel has no seccomp (prctl(PR_GET_SECCOMP): {os.strerror(err)})"
    for name, action in (
        ("KILL_PROCESS", _SECCOMP_RET_KILL_PROCESS),
        ("ERRNO", _SECCOMP_RET_ERRNO),
        ("ALLOW", _SECCOMP_RET_ALLOW),
    ):
        value = ctypes.c_uint32(action)
        rc = libc.syscall(
            ctypes.c_long(_TABLES[arch]["seccomp"]),
            ctypes.c_long(_SECCOMP_GET_ACTION_AVAIL),
            ctypes.c_long(0),
            ctypes.byref(value),
        )
        if rc != 0:
            err = ctypes.get_errno()
            return f"the kernel lacks seccomp action {name} (Linux >= 4.14 needed): " + (
                os.strerror(err)
            )
    return None


def install(arch: str | None = None) -> None:
    """Set no_new_privs and install the filter on every thread of this process.

    Irreversible: the filter stays for the life of the process and of everything it forks or
    executes. Call it last, after whatever setup needs the calls it denies.

    Args:
        arch: the architecture to build the filter for; None (the default) means this host's.
            Anything else must name this host's architecture: a filter for another one would
            kill the process at its next system call.

    Raises:
        ValueError: ``arch`` is unknown or is not this host's architecture.
        OSError: this host is not supported (``ENOTSUP``, see :func:`supported`), or
            ``prctl`` or ``seccomp`` failed (the kernel's errno; ``EAGAIN`` if a thread could
            not be synchronized).
    """
    host = _host_arch()
    if arch is not None and _canonical(arch) != host:
        raise ValueError(f"seccomp: cannot install a filter for {arch!r} on a {host} host")
    program = build_filter(host)
    libc = _libc()
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _os_error("prctl(PR_SET_NO_NEW_PRIVS)")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // _SOCK_FILTER.size, ctypes.addressof(buffer))
    rc = libc.syscall(
        ctypes.c_long(_TABLES[host]["seccomp"]),
        ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC),
        ctypes.byref(fprog),
    )
    if rc < 0:
        raise _os_error("seccomp(SECCOMP_SET_MODE_FILTER)")
    if rc > 0:
        # With TSYNC, a positive result is the id of a thread that could not be synchronized
        # (it had diverged with a filter of its own); nothing was installed.
        raise OSError(
            errno.EAGAIN,
            f"seccomp(SECCOMP_SET_MODE_FILTER): thread {rc} could not be synchronized; "
            "no filter was installed",
        )


class _SockFprog(ctypes.Structure):
    """struct sock_fprog { unsigned short len; struct sock_filter *filter; }."""

    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class _Assembler:
    """Classic BPF with symbolic forward jumps, resolved (and range-checked) by assemble()."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self._code.append((_BPF_LD_W_ABS, None, None, offset))

    def ret(self, action: int) -> None:
        self._code.append((_BPF_RET_K, None, None, action))

    def jump(self, code: int, k: int, *, jt: str | None = None, jf: str | None = None) -> None:
        """A conditional jump; a target of None falls through to the next instruction."""
        self._code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def assemble(self) -> bytes:
        if len(self._code) > _BPF_MAXINSNS:
            raise ValueError(f"seccomp: {len(self._code)} instructions, over BPF_MAXINSNS")
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self._code):
            out += _SOCK_FILTER.pack(code, self._offset(index, jt), self._offset(index, jf), k)
        return bytes(out)

    def _offset(self, index: int, target: str | None) -> int:
        if target is None:
            return 0
        offset = self._labels[target] - index - 1
        # Classic BPF jumps only forward, by at most 255 instructions.
        if not 0 <= offset <= 0xFF:
            raise ValueError(f"seccomp: jump to {target!r} out of range ({offset})")
        return offset


def _canonical(arch: str) -> str:
    name = _ALIASES.get(arch, arch)
    if name not in _TABLES:
        raise ValueError(
            f"seccomp: architecture {arch!r} is not supported (only {', '.join(ARCHITECTURES)})"
        )
    return name


def _host_arch() -> str:
    """This host's architecture, refusing what the filter cannot describe.

    Raises:
        OSError: ``ENOTSUP``, with the reason.
    """
    machine = os.uname().machine
    arch = _ALIASES.get(machine, machine)
    if arch not in _TABLES:
        raise OSError(
            errno.ENOTSUP,
            f"seccomp: architecture {machine!r} is not supported (only {', '.join(ARCHITECTURES)})",
        )
    # A 32-bit Python on a 64-bit kernel (i386 on x86_64, arm on aarch64, or x32) makes its
    # system calls through another ABI, which this filter would kill at once.
    if struct.calcsize("P") != 8 or sys.byteorder != "little":
        raise OSError(
            errno.ENOTSUP,
            f"seccomp: this Python is not a native little-endian 64-bit {arch} process",
        )
    return arch


def _os_error(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")
