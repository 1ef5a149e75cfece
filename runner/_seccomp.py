"""A seccomp-BPF allow list for the ``confined`` level: the system calls a Python program makes;
and, for the ``process`` level, a filter that keeps a program's hands off other processes.

Theory of operation
===================

The kernel runs a classic-BPF program over every system call the process makes. The program
sees a ``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, the instruction pointer at
8, then the six 64-bit arguments from offset 16) and returns an action. Ours is an allow
list: a call reaches the kernel only if :data:`ALLOWED` names it, and, for the calls
:data:`CHECKED` names, only with arguments the check accepts. Everything else fails with an
errno, so that a system call added to the kernel next year is denied, not allowed.

The list is data, reviewed call by call: each entry of :data:`ALLOWED` says why a Python
program (the interpreter, its standard library, the C library, the usual extension modules)
needs the call, and the list is grouped by subject. A call is allowed when such a program
uses it and its effect stays inside the run's walls: its own memory, files, processes and
namespaces. tests/runner/test_seccomp.py repeats the list, so that a change to it is a
visible change to a test.

What a denied call answers
--------------------------
Each refusal answers what a kernel *without the feature* answers, so that the caller takes
the fallback path it already has rather than failing as if something broke:

=====================  ================================================================
``ENOSYS``             every call not named here (the default, and what a kernel
                       without the call answers), and the :data:`FALLBACK` calls, whose
                       callers are known to fall back to an allowed call on ``ENOSYS``
``EPERM``              the :data:`REFUSED` calls: known to be dangerous (each has its
                       reason), mostly privileged operations that an unprivileged caller
                       sees fail with ``EPERM`` anyway; and argument checks that refuse
                       a privilege (namespace flags, set-id bits, terminal injection)
``EAFNOSUPPORT``       ``socket`` of a family the run does not get, as from a kernel
                       built without it; ``EPROTONOSUPPORT`` for a netlink protocol
``EINVAL``             memory merging (KSM) requests, as from a kernel without KSM
``EOPNOTSUPP``         ``preadv2`` with ``RWF_NOWAIT``, as for a file without it
=====================  ================================================================

Only a foreign architecture or the x32 ABI kills the process: the syscall numbers in this
filter do not mean the same there, so no answer would be correct.

What no filter decides: recent kernels run x86_64's ``uretprobe`` and ``uprobe`` whatever
every seccomp filter says (checked on Linux 6.18), for the probes the host places; called
from anywhere but the trampoline the kernel maps, they only kill the caller (``SIGILL``) or
fail (``ENXIO``). They are not on the list and their verdict here is moot.

The program
-----------
Laid out by :func:`build_filter`::

    ld  arch;  jeq AUDIT_ARCH_<ours> else ret KILL_PROCESS     a foreign calling convention
    ld  nr;    jge 0x40000000 -> ret KILL_PROCESS             (x86_64 only: the x32 ABI)
    a binary search over nr, by intervals of numbers with the same verdict:
        jge <first number of the right half> -> right half, else left half
        ...
        leaf: ret ALLOW | ret ERRNO|ENOSYS | ret ERRNO|EPERM | ja <check of that call>
    one check per CHECKED call: ld <argument>; jeq/jset k; ret <verdict>; ...; ret <otherwise>

Arguments are read only for the :data:`CHECKED` calls, and only their low 32 bits: every
argument checked is an ``int``, ``unsigned int`` or ``mode_t`` in the kernel, or, for
``clone``'s flags, a word of which the kernel reads only the low half.

Cost: the kernel (5.11 and later) emulates a filter once, at install time, and caches per
syscall number whether it always allows the call whatever its arguments. Every allowed call
without an argument check therefore skips the BPF program entirely after its first use: the
list's length costs nothing there. The checked calls and the denied ones run the program (the
kernel caches only "always allowed"): the search reaches any verdict in about
``log2(intervals)`` comparisons, at most 20 instructions in all for ours (a test checks it),
then a check takes a few more. Measured on a 2-CPU VM with Linux 6.18, the least time per call
over many short batches: ``getppid`` 121 ns without a filter, 159 ns under the deny list
this filter replaced and 153 ns under this one; ``open`` and ``close`` of ``/dev/null``
2.09, 2.30 and 2.28 us (``openat`` is a checked call here, not there); a denied call 97,
126 and 125 ns.

Argument checks
---------------
``clone``'s flags are a register the filter can read: a ``CLONE_NEW*`` bit is refused, so
``fork``, ``vfork`` and threads pass. ``clone3`` takes its flags in a structure in memory,
which a filter cannot read, so it answers ``ENOSYS`` and glibc (2.34 and later, for
``pthread_create``, ``posix_spawn`` and ``fork``) falls back to ``clone``. ``openat2`` is
denied for the same reason (its mode is in memory); glibc's ``open`` uses ``openat``.

Set-id files: nothing the program writes may carry a set-user-id or set-group-id bit. The
calls that set a file's mode from an argument are checked: ``chmod``, ``fchmod``,
``fchmodat`` and ``fchmodat2``, and the calls that create a file with a mode, ``open``,
``openat``, ``creat``, ``mknod`` and ``mknodat`` (``openat2``, above, is denied); each
answers ``EPERM`` for a mode with either bit. ``mkdir`` needs no check: the kernel keeps
only the permission and sticky bits of its mode, and a new directory inherits set-group-id
only from a parent that has it, which no directory the program can write has (the sandbox
makes the working directory and ``/tmp`` without it) and none can be given (``chmod`` is
checked). ``chown`` by a process without capabilities clears both bits. Extended
attributes carry no set-id bits, and the one that grants capabilities
(``security.capability``) needs a capability to write.

Executables the program writes: ``memfd_create`` is allowed only with
``MFD_NOEXEC_SEAL``, so an in-memory file can never be executed (a memfd without it is
executable, and neither the mount options nor Landlock cover it: checked on Linux 6.18);
on a kernel before 6.3, which does not know the flag, no memfd can be made at all.
``execveat``, which runs a descriptor, answers ``ENOSYS`` (glibc's ``fexecve`` then tries
``/proc/self/fd/N``, which the seal refuses). Files in the writable directories are the
mount namespace's business (``noexec``).

Side channels on the read-only view, which the host shares: ``inotify``, ``fanotify``,
``mincore`` and ``cachestat`` are refused, ``preadv2`` with ``RWF_NOWAIT`` too (it tells
a cached page from one that is not), and so is memory merging (KSM: ``madvise`` with
``MADV_MERGEABLE``, ``prctl`` with ``PR_SET_MEMORY_MERGE``), which would let the program
learn whether the host's memory holds a page it guesses. Timing its own reads remains.

Sockets: only ``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` (walled by the empty network
namespace and Landlock), and ``AF_NETLINK`` with protocol ``NETLINK_ROUTE`` only: the C
library reads the interfaces and addresses through it (``if_nameindex``, ``getaddrinfo``'s
address selection), and in the empty network namespace it shows only ``lo`` and changes
nothing without ``CAP_NET_ADMIN``. Every other family (``AF_VSOCK``, which no namespace
covers and which reaches the hypervisor; ``AF_PACKET``, ``AF_ALG``, ``AF_BLUETOOTH``...)
and every other netlink protocol is refused.

The ``process`` level's filter
------------------------------
At ``process`` the program runs as the host's own user, in the host's namespaces, and every
call is allowed (:func:`build_process_filter`) but the ones that change another process's
resource limits, scheduling or priority, which the kernel lets a process do to any other of
its user (root: to any): :data:`OTHERS`. Each is allowed on the caller itself (pid 0; for
``setpriority`` and ``ioprio_set``, the caller or its process group, which is the run's)
and answers ``EPERM`` otherwise: a program cannot set the host's ``RLIMIT_NOFILE`` to 0, nor
make it ``SCHED_IDLE`` and starve it. The calls that act on the whole machine
(:data:`MACHINE`: reboot, modules, the clock, the host's name, mounts) answer ``EPERM``
whoever calls them: a program that runs as root at ``process`` keeps root's capabilities
otherwise. Signals and tracing are Landlock's business there
(:func:`runner._landlock.scope_signals`). A foreign architecture or the x32 ABI kills the
process, as in the ``confined`` filter: the numbers checked would not be these calls.

Invariants upheld (DESIGN.md, "sandbox: the host", ``confined``): a seccomp filter and
no_new_privs. The filter applies to every thread of the process (``SECCOMP_FILTER_FLAG_TSYNC``)
and is inherited across ``fork`` and ``execve``; it can never be removed, only added to. The
other walls (namespaces, Landlock, rlimits, cgroups) are put up first: the filter denies the
calls that setting them up needs.

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
from typing import Final, NamedTuple

from ._libc import libc as _libc

__all__ = [
    "ABSENT",
    "ALLOWED",
    "ARCHITECTURES",
    "CHECKED",
    "FALLBACK",
    "MACHINE",
    "OTHERS",
    "REFUSED",
    "Check",
    "Compare",
    "allowed_names",
    "build_filter",
    "build_process_filter",
    "install",
    "install_process_filter",
    "max_number",
    "supported",
    "syscall_names",
    "syscall_number",
]

#: The architectures this module has syscall tables for (names as ``uname -m`` prints them).
ARCHITECTURES: Final = ("x86_64", "aarch64")

#: The system calls a confined program may make, by group, each with the reason it needs it.
#: Those also in :data:`CHECKED` are allowed only with some arguments. A name that does not
#: exist on an architecture (``open`` on aarch64) is skipped there (:data:`ABSENT`).
ALLOWED: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    "memory": (
        ("brk", "the C library's heap"),
        ("mmap", "memory and file mappings: the interpreter, extension modules, large blocks"),
        ("munmap", "releases a mapping"),
        ("mremap", "grows a large block in place (realloc)"),
        ("mprotect", "the loader's read-only relocations, thread stack guards, ctypes"),
        ("madvise", "malloc gives freed pages back (argument checked: no KSM merging)"),
        ("msync", "writes a shared file mapping back (mmap.flush)"),
        ("mlock", "keeps a secret out of swap (crypto libraries); RLIMIT_MEMLOCK bounds it"),
        ("munlock", "the other half of mlock"),
        ("mlock2", "mlock with flags (newer C libraries)"),
        ("mlockall", "locks the whole process; RLIMIT_MEMLOCK bounds it"),
        ("munlockall", "the other half of mlockall"),
        ("mbind", "NUMA placement of the process's own memory (numeric libraries, hwloc)"),
        ("set_mempolicy", "NUMA placement of the process's own memory"),
        ("get_mempolicy", "reads the NUMA placement (libnuma, hwloc probe it)"),
        ("membarrier", "memory barriers across the process's own threads (runtimes, RCU)"),
        ("pkey_mprotect", "memory protection keys over the process's own pages"),
        ("pkey_alloc", "memory protection keys (glibc exposes them)"),
        ("pkey_free", "memory protection keys"),
        ("memfd_create", "an anonymous in-memory file, charged to the run (argument checked)"),
        ("map_shadow_stack", "a CET shadow stack for a new thread, where glibc uses them"),
        ("mseal", "seals the process's own mappings (hardening in newer C libraries)"),
    ),
    "files": (
        ("open", "opens or creates a file (argument checked: no set-id mode)"),
        ("openat", "opens or creates a file: glibc's open (argument checked: no set-id mode)"),
        ("creat", "creates a file (argument checked: no set-id mode)"),
        ("close", "closes a descriptor"),
        ("close_range", "closes many descriptors (subprocess, os.closerange)"),
        ("stat", "file metadata"),
        ("fstat", "file metadata"),
        ("lstat", "file metadata"),
        ("newfstatat", "file metadata: glibc's stat"),
        ("statx", "file metadata (newer C libraries, os.statx)"),
        ("access", "permission check (os.access, shutil.which)"),
        ("faccessat", "permission check"),
        ("faccessat2", "permission check with flags: glibc's faccessat"),
        ("getdents", "lists a directory"),
        ("getdents64", "lists a directory: glibc's readdir"),
        ("getcwd", "the working directory"),
        ("chdir", "changes the working directory"),
        ("fchdir", "changes the working directory"),
        ("mkdir", "creates a directory (the kernel keeps only permission and sticky bits)"),
        ("mkdirat", "creates a directory (the kernel keeps only permission and sticky bits)"),
        ("rmdir", "removes a directory"),
        ("unlink", "removes a file"),
        ("unlinkat", "removes a file or directory"),
        ("rename", "renames"),
        ("renameat", "renames"),
        ("renameat2", "renames, atomically exchanging or without replacing"),
        ("link", "hard link (within one mount: the view's files are on others)"),
        ("linkat", "hard link (within one mount)"),
        ("symlink", "symbolic link"),
        ("symlinkat", "symbolic link"),
        ("readlink", "reads a symbolic link"),
        ("readlinkat", "reads a symbolic link"),
        ("chmod", "changes permission bits (argument checked: no set-id bits)"),
        ("fchmod", "changes permission bits (argument checked: no set-id bits)"),
        ("fchmodat", "changes permission bits (argument checked: no set-id bits)"),
        ("fchmodat2", "changes permission bits: newer glibc (argument checked: no set-id bits)"),
        ("chown", "changes owner: without a capability, only the group, to one of its own"),
        ("fchown", "changes owner (sqlite3 calls it); clears set-id bits"),
        ("lchown", "changes owner"),
        ("fchownat", "changes owner"),
        ("mknod", "creates a FIFO (os.mkfifo) or plain file (argument checked: no set-id)"),
        ("mknodat", "creates a FIFO or plain file (argument checked: no set-id)"),
        ("umask", "the file creation mask"),
        ("truncate", "sets a file's size"),
        ("ftruncate", "sets a file's size"),
        ("fallocate", "reserves a file's blocks"),
        ("utime", "file times"),
        ("utimes", "file times"),
        ("futimesat", "file times"),
        ("utimensat", "file times: os.utime, shutil.copystat"),
        ("statfs", "filesystem sizes (shutil.disk_usage)"),
        ("fstatfs", "filesystem sizes"),
        ("getxattr", "extended attributes: shutil.copy2 copies them"),
        ("lgetxattr", "extended attributes"),
        ("fgetxattr", "extended attributes"),
        ("listxattr", "extended attributes: shutil.copy2 lists them, and fails on ENOSYS"),
        ("llistxattr", "extended attributes"),
        ("flistxattr", "extended attributes"),
        ("setxattr", "extended attributes (security and trusted need capabilities)"),
        ("lsetxattr", "extended attributes"),
        ("fsetxattr", "extended attributes"),
        ("removexattr", "extended attributes"),
        ("lremovexattr", "extended attributes"),
        ("fremovexattr", "extended attributes"),
        ("flock", "advisory locks (fcntl.flock)"),
        ("fsync", "writes a file back (sqlite3)"),
        ("fdatasync", "writes a file's data back (sqlite3)"),
        ("sync_file_range", "writes part of a file back (embedded databases)"),
        ("readahead", "a page-cache hint for a file being read"),
        ("fadvise64", "a page-cache hint for a file being read (posix_fadvise)"),
    ),
    "descriptors": (
        ("read", "reads"),
        ("write", "writes"),
        ("readv", "reads into several buffers"),
        ("writev", "writes from several buffers"),
        ("pread64", "reads at an offset"),
        ("pwrite64", "writes at an offset"),
        ("preadv", "reads at an offset into several buffers"),
        ("pwritev", "writes at an offset from several buffers"),
        ("preadv2", "preadv with flags: os.preadv (argument checked: no RWF_NOWAIT)"),
        ("pwritev2", "pwritev with flags: os.pwritev"),
        ("lseek", "moves a file offset"),
        ("dup", "duplicates a descriptor"),
        ("dup2", "duplicates a descriptor"),
        ("dup3", "duplicates a descriptor"),
        ("fcntl", "descriptor flags and record locks (sqlite3)"),
        ("ioctl", "terminal and device requests: isatty (argument checked: no TIOCSTI)"),
        ("pipe", "a pipe"),
        ("pipe2", "a pipe: glibc's pipe, subprocess, multiprocessing"),
        ("sendfile", "copies between descriptors in the kernel (shutil.copyfile)"),
        ("splice", "moves data through a pipe in the kernel (os.splice)"),
        ("copy_file_range", "copies between files in the kernel (os.copy_file_range)"),
        ("poll", "waits for descriptors (selectors)"),
        ("ppoll", "waits for descriptors"),
        ("select", "waits for descriptors"),
        ("pselect6", "waits for descriptors"),
        ("epoll_create", "an epoll instance"),
        ("epoll_create1", "an epoll instance: asyncio's event loop"),
        ("epoll_ctl", "registers a descriptor with epoll"),
        ("epoll_wait", "waits on epoll"),
        ("epoll_pwait", "waits on epoll: glibc's epoll_wait"),
        ("epoll_pwait2", "waits on epoll with a nanosecond timeout"),
        ("eventfd", "an event counter"),
        ("eventfd2", "an event counter (os.eventfd, event loops)"),
    ),
    "sockets": (
        ("socket", "a socket (argument checked: unix, IPv4, IPv6, netlink route only)"),
        ("socketpair", "a connected unix pair: asyncio, multiprocessing (argument checked)"),
        ("bind", "binds a socket (TCP refused by Landlock; nothing else outside the netns)"),
        ("listen", "listens on a socket"),
        ("accept", "accepts a connection"),
        ("accept4", "accepts a connection"),
        ("connect", "connects a socket (TCP refused by Landlock, and the netns is empty)"),
        ("getsockname", "a socket's address"),
        ("getpeername", "a socket's peer"),
        ("sendto", "sends"),
        ("recvfrom", "receives"),
        ("sendmsg", "sends, with descriptors (multiprocessing)"),
        ("recvmsg", "receives, with descriptors"),
        ("sendmmsg", "sends several messages (the C library's DNS resolver)"),
        ("recvmmsg", "receives several messages"),
        ("shutdown", "shuts a socket down"),
        ("setsockopt", "socket options"),
        ("getsockopt", "socket options"),
    ),
    "processes and threads": (
        ("clone", "fork, vfork and threads (argument checked: no new namespaces)"),
        ("fork", "a child process"),
        ("vfork", "a child process (posix_spawn)"),
        ("execve", "runs a program: only what the read-only view holds (the interpreter)"),
        ("exit", "ends a thread"),
        ("exit_group", "ends the process"),
        ("wait4", "reaps a child (os.waitpid)"),
        ("waitid", "reaps a child (os.waitid)"),
        ("set_tid_address", "thread start-up in the C library"),
        ("set_robust_list", "thread start-up in the C library (robust mutexes)"),
        ("rseq", "thread start-up in the C library (restartable sequences)"),
        ("futex", "locks and condition variables: the GIL, threading"),
        ("arch_prctl", "thread-local storage set-up (x86_64)"),
        ("getpid", "the process id"),
        ("getppid", "the parent's id"),
        ("gettid", "the thread id"),
        ("getpgid", "a process group"),
        ("setpgid", "moves a process between groups, within the run's PID namespace"),
        ("getpgrp", "the process group"),
        ("getsid", "a session"),
        ("setsid", "a new session"),
        ("pidfd_open", "a descriptor for a child (os.pidfd_open, asyncio's child watcher)"),
        ("pidfd_send_signal", "signals a child through its descriptor"),
        ("prctl", "process attributes: names, death signal, subreaper (argument checked)"),
        ("personality", "queries the execution domain (argument checked)"),
        ("restart_syscall", "the kernel restarts an interrupted sleep through it"),
        ("sched_yield", "yields the CPU"),
        ("sched_getaffinity", "the CPUs the run may use (os.sched_getaffinity, thread pools)"),
        ("sched_setaffinity", "pins the process's own threads, within the run's cpuset"),
        ("sched_getparam", "scheduling parameters"),
        ("sched_setparam", "scheduling parameters (real time needs a capability)"),
        ("sched_getscheduler", "scheduling policy"),
        ("sched_setscheduler", "scheduling policy (real time needs a capability)"),
        ("sched_get_priority_max", "scheduling priority range"),
        ("sched_get_priority_min", "scheduling priority range"),
        ("sched_rr_get_interval", "round-robin time slice"),
        ("sched_getattr", "scheduling attributes"),
        ("sched_setattr", "scheduling attributes (deadline and real time need a capability)"),
        ("getpriority", "nice value"),
        ("setpriority", "nice value: only lower without a capability, only within the run"),
        ("ioprio_get", "I/O priority"),
        ("ioprio_set", "I/O priority: only lower without a capability, only within the run"),
        ("getcpu", "the CPU the thread runs on"),
    ),
    "signals": (
        ("rt_sigaction", "installs a signal handler"),
        ("rt_sigprocmask", "blocks signals"),
        ("rt_sigreturn", "returns from a signal handler"),
        ("rt_sigpending", "pending signals"),
        ("rt_sigtimedwait", "waits for a signal (signal.sigtimedwait)"),
        ("rt_sigqueueinfo", "queues a signal with data"),
        ("rt_tgsigqueueinfo", "queues a signal with data to a thread"),
        ("rt_sigsuspend", "waits for a signal"),
        ("sigaltstack", "an alternate signal stack (faulthandler)"),
        ("kill", "signals a process: only those of the run's PID namespace are visible"),
        ("tkill", "signals a thread"),
        ("tgkill", "signals a thread: raise, pthread_kill"),
        ("pause", "waits for a signal"),
        ("signalfd", "signals as a descriptor"),
        ("signalfd4", "signals as a descriptor"),
    ),
    "time": (
        ("clock_gettime", "reads a clock (time.time, time.monotonic)"),
        ("clock_getres", "a clock's resolution"),
        ("clock_nanosleep", "sleeps (time.sleep)"),
        ("gettimeofday", "reads the clock"),
        ("time", "reads the clock"),
        ("nanosleep", "sleeps"),
        ("times", "process times (os.times)"),
        ("alarm", "a timer signal (signal.alarm)"),
        ("getitimer", "interval timers (signal.getitimer)"),
        ("setitimer", "interval timers (signal.setitimer)"),
        ("timer_create", "POSIX timers"),
        ("timer_settime", "POSIX timers"),
        ("timer_gettime", "POSIX timers"),
        ("timer_getoverrun", "POSIX timers"),
        ("timer_delete", "POSIX timers"),
        ("timerfd_create", "timers as descriptors (event loops)"),
        ("timerfd_settime", "timers as descriptors"),
        ("timerfd_gettime", "timers as descriptors"),
    ),
    "identity and limits": (
        ("getuid", "the user id"),
        ("geteuid", "the effective user id"),
        ("getgid", "the group id"),
        ("getegid", "the effective group id"),
        ("getresuid", "the user ids"),
        ("getresgid", "the group ids"),
        ("getgroups", "the supplementary groups"),
        ("setuid", "without a capability, only among the ids the process already has"),
        ("setgid", "without a capability, only among the ids the process already has"),
        ("setreuid", "without a capability, only among the ids the process already has"),
        ("setregid", "without a capability, only among the ids the process already has"),
        ("setresuid", "without a capability, only among the ids the process already has"),
        ("setresgid", "without a capability, only among the ids the process already has"),
        ("setfsuid", "without a capability, only among the ids the process already has"),
        ("setfsgid", "without a capability, only among the ids the process already has"),
        ("setgroups", "needs a capability the program does not have (libraries try it)"),
        ("capget", "reads capabilities (there are none)"),
        ("capset", "can only drop capabilities (there are none)"),
        ("getrlimit", "resource limits"),
        ("setrlimit", "resource limits: only lower without a capability"),
        ("prlimit64", "resource limits: glibc's getrlimit and setrlimit"),
        ("getrusage", "resource usage (resource.getrusage)"),
        ("uname", "the system name, from the run's own UTS namespace"),
        ("sysinfo", "memory size and uptime: glibc's sysconf(_SC_PHYS_PAGES)"),
        ("getrandom", "randomness: os.urandom, hash seeds, ssl"),
    ),
    "self-restriction": (
        ("seccomp", "a program may add filters of its own; ours cannot be removed"),
        ("landlock_create_ruleset", "a program may restrict itself further with Landlock"),
        ("landlock_add_rule", "a program may restrict itself further with Landlock"),
        ("landlock_restrict_self", "a program may restrict itself further with Landlock"),
    ),
}


class Compare(NamedTuple):
    """One comparison of an argument check: if it holds, the call gets ``verdict``.

    Attributes:
        arg: the argument's index (0 to 5); its low 32 bits are compared.
        op: ``"eq"`` (equals ``k``), ``"ne"`` (differs from ``k``) or ``"any"`` (has any bit
            of ``k`` set).
        k: the value or mask.
        verdict: the seccomp action the call gets.
    """

    arg: int
    op: str
    k: int
    verdict: int


class Check(NamedTuple):
    """The argument check of a :data:`CHECKED` call: its comparisons in order, then ``otherwise``.

    Attributes:
        rule: what it refuses, for people.
        compares: the comparisons, tried in order; the first that holds decides.
        otherwise: the seccomp action when none holds.
    """

    rule: str
    compares: tuple[Compare, ...]
    otherwise: int


# <linux/seccomp.h>
_SECCOMP_RET_KILL_PROCESS: Final = 0x80000000
_SECCOMP_RET_ERRNO: Final = 0x00050000
_SECCOMP_RET_ALLOW: Final = 0x7FFF0000
_SECCOMP_SET_MODE_FILTER: Final = 1
_SECCOMP_GET_ACTION_AVAIL: Final = 2
_SECCOMP_FILTER_FLAG_TSYNC: Final = 1

_ALLOW: Final = _SECCOMP_RET_ALLOW
_ENOSYS: Final = _SECCOMP_RET_ERRNO | errno.ENOSYS
_EPERM: Final = _SECCOMP_RET_ERRNO | errno.EPERM
_EINVAL: Final = _SECCOMP_RET_ERRNO | errno.EINVAL

# <linux/sched.h>: NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET. (NEWTIME,
# 0x80, is not among them: in clone's flags that bit belongs to the exit signal, and clone
# refuses NEWTIME anyway; unshare, which takes it, is refused outright.)
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
# <sys/stat.h>: S_ISUID | S_ISGID.
_SETID: Final = 0o6000
# <linux/socket.h>, <linux/netlink.h>
_AF_UNIX: Final = 1
_AF_INET: Final = 2
_AF_INET6: Final = 10
_AF_NETLINK: Final = 16
_NETLINK_ROUTE: Final = 0
# <linux/memfd.h> (Linux 6.3)
_MFD_NOEXEC_SEAL: Final = 0x0008
# <linux/prctl.h>, <asm-generic/mman-common.h>: KSM merging (Linux 6.4; 2.6.32).
_PR_SET_MEMORY_MERGE: Final = 67
_MADV_MERGEABLE: Final = 12
# <linux/fs.h>
_RWF_NOWAIT: Final = 0x00000008


def _no_setid(arg: int) -> Check:
    return Check(
        "EPERM if the mode has S_ISUID or S_ISGID: nothing the program writes is set-id",
        (Compare(arg, "any", _SETID, _EPERM),),
        _ALLOW,
    )


#: The allowed calls that are allowed only with some arguments, and their checks. Argument
#: positions are the same on both architectures.
CHECKED: Final[Mapping[str, Check]] = {
    "clone": Check(
        "EPERM if a CLONE_NEW* namespace bit is set; fork, vfork and threads pass",
        (Compare(0, "any", _CLONE_NAMESPACES, _EPERM),),
        _ALLOW,
    ),
    "socket": Check(
        "AF_UNIX, AF_INET and AF_INET6 pass, and AF_NETLINK with NETLINK_ROUTE; any other "
        "family is EAFNOSUPPORT (AF_VSOCK reaches the hypervisor), any other netlink "
        "protocol EPROTONOSUPPORT",
        (
            Compare(0, "eq", _AF_UNIX, _ALLOW),
            Compare(0, "eq", _AF_INET, _ALLOW),
            Compare(0, "eq", _AF_INET6, _ALLOW),
            Compare(0, "ne", _AF_NETLINK, _SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT),
            Compare(2, "eq", _NETLINK_ROUTE, _ALLOW),
        ),
        _SECCOMP_RET_ERRNO | errno.EPROTONOSUPPORT,
    ),
    "socketpair": Check(
        "AF_UNIX passes (the only family with pairs); any other is EAFNOSUPPORT",
        (Compare(0, "eq", _AF_UNIX, _ALLOW),),
        _SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT,
    ),
    "ioctl": Check(
        "EPERM for TIOCSTI and TIOCLINUX (typing into a terminal the sandbox shares)",
        (Compare(1, "eq", _TIOCSTI, _EPERM), Compare(1, "eq", _TIOCLINUX, _EPERM)),
        _ALLOW,
    ),
    "personality": Check(
        "EPERM for ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, "
        "ADDR_LIMIT_32BIT and ADDR_LIMIT_3GB (they weaken the memory protections of programs "
        "it executes); the query 0xffffffff and the plain personas pass",
        (Compare(0, "eq", _PERSONA_QUERY, _ALLOW), Compare(0, "any", _PERSONA_DANGEROUS, _EPERM)),
        _ALLOW,
    ),
    "prctl": Check(
        "EINVAL for PR_SET_MEMORY_MERGE (KSM: merging pages with the host's is a side "
        "channel into its memory); every other option concerns only the caller or needs a "
        "capability",
        (Compare(0, "eq", _PR_SET_MEMORY_MERGE, _EINVAL),),
        _ALLOW,
    ),
    "madvise": Check(
        "EINVAL for MADV_MERGEABLE (KSM, as for prctl)",
        (Compare(2, "eq", _MADV_MERGEABLE, _EINVAL),),
        _ALLOW,
    ),
    "memfd_create": Check(
        "EPERM without MFD_NOEXEC_SEAL: an in-memory file must never be executable",
        (Compare(1, "any", _MFD_NOEXEC_SEAL, _ALLOW),),
        _EPERM,
    ),
    "preadv2": Check(
        "EOPNOTSUPP with RWF_NOWAIT (it tells whether a page of a shared file is cached)",
        (Compare(5, "any", _RWF_NOWAIT, _SECCOMP_RET_ERRNO | errno.EOPNOTSUPP),),
        _ALLOW,
    ),
    "chmod": _no_setid(1),
    "fchmod": _no_setid(1),
    "fchmodat": _no_setid(2),
    "fchmodat2": _no_setid(2),
    "open": _no_setid(2),
    "openat": _no_setid(3),
    "creat": _no_setid(1),
    "mknod": _no_setid(1),
    "mknodat": _no_setid(2),
}

#: System calls refused with ``EPERM``, each with the reason, grouped by subject.
REFUSED: Final[tuple[tuple[str, str], ...]] = (
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
    ("open_tree_attr", "new mount API: the same power as mount"),
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
    # Pools the whole machine shares.
    ("io_setup", "reserves AIO contexts from fs.aio-max-nr, one count for the whole machine"),
    ("io_destroy", "Linux AIO (io_setup is refused)"),
    ("io_submit", "Linux AIO (io_setup is refused)"),
    ("io_cancel", "Linux AIO (io_setup is refused)"),
    ("io_getevents", "Linux AIO (io_setup is refused)"),
    ("io_pgetevents", "Linux AIO (io_setup is refused)"),
    ("memfd_secret", "unswappable memory taken out of the kernel's direct map"),
    ("sync", "writes back every filesystem of the machine, not only the run's files"),
    ("syncfs", "writes back a whole host filesystem (the working directory's)"),
    # Side channels on the read-only view, which the host shares.
    ("inotify_init", "watches files: sees the host use the files of the shared view"),
    ("inotify_init1", "watches files: sees the host use the files of the shared view"),
    ("inotify_add_watch", "watches files (inotify_init is refused)"),
    ("inotify_rm_watch", "watches files (inotify_init is refused)"),
    ("fanotify_init", "watches filesystem events, on marks as wide as a whole filesystem"),
    ("fanotify_mark", "watches filesystem events (fanotify_init is refused)"),
    ("mincore", "tells which pages of a mapped host file are cached: the host's file use"),
    ("cachestat", "tells which pages of a host file are cached: the host's file use"),
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
    ("clock_settime", "sets the system clock"),
    ("settimeofday", "sets the system clock"),
    ("adjtimex", "tunes the system clock"),
    ("clock_adjtime", "tunes the system clock"),
    ("sethostname", "renames the host"),
    ("setdomainname", "renames the host's NIS domain"),
)

#: System calls refused with ``ENOSYS`` on purpose, because their callers fall back to an
#: allowed call when the kernel does not have them. (Every call named nowhere here gets
#: ``ENOSYS`` too; these are named for the reason.)
FALLBACK: Final[tuple[tuple[str, str], ...]] = (
    ("clone3", "its flags are in memory, out of the filter's reach: glibc falls back to clone"),
    ("openat2", "its mode is in memory, out of the filter's reach: glibc's open uses openat"),
    ("execveat", "runs a descriptor (a memfd): glibc's fexecve falls back to /proc/self/fd"),
)

# Syscall numbers, from the kernel's tables: arch/x86/entry/syscalls/syscall_64.tbl
# (<asm/unistd_64.h>) for x86_64 and include/uapi/asm-generic/unistd.h for aarch64, which uses
# the generic table; numbers from 424 up are the same on every architecture. Each line is a
# number followed by the names of the calls from that number on. Up to Linux 6.19 (listns,
# 470); tests/runner/test_seccomp.py checks them against the headers when they are installed.
_X86_64_TABLE: Final = """
0 read write open close stat fstat lstat poll lseek mmap
10 mprotect munmap brk rt_sigaction rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv
20 writev access pipe select sched_yield mremap msync mincore madvise shmget
30 shmat shmctl dup dup2 pause nanosleep getitimer alarm setitimer getpid
40 sendfile socket connect accept sendto recvfrom sendmsg recvmsg shutdown bind
50 listen getsockname getpeername socketpair setsockopt getsockopt clone fork vfork execve
60 exit wait4 kill uname semget semop semctl shmdt msgget msgsnd
70 msgrcv msgctl fcntl flock fsync fdatasync truncate ftruncate getdents getcwd
80 chdir fchdir rename mkdir rmdir creat link unlink symlink readlink
90 chmod fchmod chown fchown lchown umask gettimeofday getrlimit getrusage sysinfo
100 times ptrace getuid syslog getgid setuid setgid geteuid getegid setpgid
110 getppid getpgrp setsid setreuid setregid getgroups setgroups setresuid getresuid setresgid
120 getresgid getpgid setfsuid setfsgid getsid capget capset rt_sigpending rt_sigtimedwait
129 rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod uselib personality ustat statfs
138 fstatfs sysfs getpriority setpriority sched_setparam sched_getparam sched_setscheduler
145 sched_getscheduler sched_get_priority_max sched_get_priority_min sched_rr_get_interval
149 mlock munlock mlockall munlockall vhangup modify_ldt pivot_root _sysctl prctl arch_prctl
159 adjtimex setrlimit chroot sync acct settimeofday mount umount2 swapon swapoff reboot
170 sethostname setdomainname iopl ioperm create_module init_module delete_module
177 get_kernel_syms query_module quotactl nfsservctl getpmsg putpmsg afs_syscall tuxcall
185 security gettid readahead setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr
194 listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr tkill time futex
203 sched_setaffinity sched_getaffinity set_thread_area io_setup io_destroy io_getevents
209 io_submit io_cancel get_thread_area lookup_dcookie epoll_create epoll_ctl_old
215 epoll_wait_old remap_file_pages getdents64 set_tid_address restart_syscall semtimedop
221 fadvise64 timer_create timer_settime timer_gettime timer_getoverrun timer_delete
227 clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl
234 tgkill utimes vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend
243 mq_timedreceive mq_notify mq_getsetattr kexec_load waitid add_key request_key keyctl
251 ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages
257 openat mkdirat mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat
267 readlinkat fchmodat faccessat pselect6 ppoll unshare set_robust_list get_robust_list
275 splice tee sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd
283 timerfd_create eventfd fallocate timerfd_settime timerfd_gettime accept4 signalfd4
290 eventfd2 epoll_create1 dup3 pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo
298 perf_event_open recvmmsg fanotify_init fanotify_mark prlimit64 name_to_handle_at
304 open_by_handle_at clock_adjtime syncfs sendmmsg setns getcpu process_vm_readv
311 process_vm_writev kcmp finit_module sched_setattr sched_getattr renameat2 seccomp
318 getrandom memfd_create kexec_file_load bpf execveat userfaultfd membarrier mlock2
326 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc pkey_free statx io_pgetevents
334 rseq uretprobe uprobe
"""
_AARCH64_TABLE: Final = """
0 io_setup io_destroy io_submit io_cancel io_getevents setxattr lsetxattr fsetxattr getxattr
9 lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr fremovexattr
17 getcwd lookup_dcookie eventfd2 epoll_create1 epoll_ctl epoll_pwait dup dup3 fcntl
26 inotify_init1 inotify_add_watch inotify_rm_watch ioctl ioprio_set ioprio_get flock
33 mknodat mkdirat unlinkat symlinkat linkat renameat umount2 mount pivot_root nfsservctl
43 statfs fstatfs truncate ftruncate fallocate faccessat chdir fchdir chroot fchmod fchmodat
54 fchownat fchown openat close vhangup pipe2 quotactl getdents64 lseek read write readv
66 writev pread64 pwrite64 preadv pwritev sendfile pselect6 ppoll signalfd4 vmsplice splice
77 tee readlinkat newfstatat fstat sync fsync fdatasync sync_file_range timerfd_create
86 timerfd_settime timerfd_gettime utimensat acct capget capset personality exit exit_group
95 waitid set_tid_address unshare futex set_robust_list get_robust_list nanosleep getitimer
103 setitimer kexec_load init_module delete_module timer_create timer_gettime
109 timer_getoverrun timer_settime timer_delete clock_settime clock_gettime clock_getres
115 clock_nanosleep syslog ptrace sched_setparam sched_setscheduler sched_getscheduler
121 sched_getparam sched_setaffinity sched_getaffinity sched_yield sched_get_priority_max
126 sched_get_priority_min sched_rr_get_interval restart_syscall kill tkill tgkill sigaltstack
133 rt_sigsuspend rt_sigaction rt_sigprocmask rt_sigpending rt_sigtimedwait rt_sigqueueinfo
139 rt_sigreturn setpriority getpriority reboot setregid setgid setreuid setuid setresuid
148 getresuid setresgid getresgid setfsuid setfsgid times setpgid getpgid getsid setsid
158 getgroups setgroups uname sethostname setdomainname getrlimit setrlimit getrusage umask
167 prctl getcpu gettimeofday settimeofday adjtimex getpid getppid getuid geteuid getgid
177 getegid gettid sysinfo mq_open mq_unlink mq_timedsend mq_timedreceive mq_notify
185 mq_getsetattr msgget msgctl msgrcv msgsnd semget semctl semtimedop semop shmget shmctl
196 shmat shmdt socket socketpair bind listen accept connect getsockname getpeername sendto
207 recvfrom setsockopt getsockopt shutdown sendmsg recvmsg readahead brk munmap mremap
217 add_key request_key keyctl clone execve mmap fadvise64 swapon swapoff mprotect msync
228 mlock munlock mlockall munlockall mincore madvise remap_file_pages mbind get_mempolicy
237 set_mempolicy migrate_pages move_pages rt_tgsigqueueinfo perf_event_open accept4 recvmmsg
260 wait4 prlimit64 fanotify_init fanotify_mark name_to_handle_at open_by_handle_at
266 clock_adjtime syncfs setns sendmmsg process_vm_readv process_vm_writev kcmp finit_module
274 sched_setattr sched_getattr renameat2 seccomp getrandom memfd_create bpf execveat
282 userfaultfd membarrier mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc
290 pkey_free statx io_pgetevents rseq kexec_file_load
"""
#: The ``process`` level's filter refuses these with ``EPERM`` whatever the caller's
#: capabilities: they act on the whole machine, and a program that runs as root at
#: ``process`` has root's (it could reboot the machine, replace its kernel, load a module,
#: set its clock, rename it, or mount over the host's files). Each is in :data:`REFUSED`
#: too, for the reason given there; to a caller without the capability, the kernel answers
#: ``EPERM`` anyway.
MACHINE: Final = (
    "reboot",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "syslog",
    "iopl",
    "ioperm",
    "clock_settime",
    "settimeofday",
    "adjtimex",
    "clock_adjtime",
    "sethostname",
    "setdomainname",
    "mount",
    "umount2",
    "pivot_root",
    "open_tree",
    "open_tree_attr",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
)

_PRIO_USER: Final = 2  # setpriority's ``which``: every process of a user
_IOPRIO_WHO_USER: Final = 3  # ioprio_set's ``which``: the same


def _self_only(rule: str) -> Check:
    """A check that allows the call on the caller itself (its first argument, a pid, is 0)."""
    return Check(rule, (Compare(0, "eq", 0, _ALLOW),), _EPERM)


def _self_or_group(rule: str, user: int) -> Check:
    """A check of ``(which, who)``: the caller or its process group (``who`` 0), not a user."""
    return Check(rule, (Compare(0, "eq", user, _EPERM), Compare(1, "eq", 0, _ALLOW)), _EPERM)


#: The ``process`` level's filter (:func:`build_process_filter`): the calls that act on
#: another process's limits, scheduling or priority, each allowed on the caller only.
OTHERS: Final[Mapping[str, Check]] = {
    "prlimit64": _self_only("resource limits: the caller's own (another's can end it)"),
    "sched_setaffinity": _self_only("CPU affinity: the caller's own"),
    "sched_setscheduler": _self_only("scheduling policy: the caller's own (SCHED_IDLE starves)"),
    "sched_setparam": _self_only("scheduling priority: the caller's own"),
    "sched_setattr": _self_only("scheduling attributes: the caller's own"),
    "setpriority": _self_or_group("nice value: the caller or its process group", _PRIO_USER),
    "ioprio_set": _self_or_group("I/O priority: the caller or its process group", _IOPRIO_WHO_USER),
}

_UNIFIED_TABLE: Final = """
424 pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount
430 fsopen fsconfig fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd
439 faccessat2 process_madvise epoll_pwait2 mount_setattr quotactl_fd landlock_create_ruleset
445 landlock_add_rule landlock_restrict_self memfd_secret process_mrelease futex_waitv
450 set_mempolicy_home_node cachestat fchmodat2 map_shadow_stack futex_wake futex_wait
456 futex_requeue statmount listmount lsm_get_self_attr lsm_set_self_attr lsm_list_modules
462 mseal setxattrat getxattrat listxattrat removexattrat open_tree_attr file_getattr
469 file_setattr listns
"""


def _parse(*tables: str) -> Mapping[str, int]:
    numbers: dict[str, int] = {}
    for table in tables:
        for line in table.strip().splitlines():
            first, *names = line.split()
            for offset, name in enumerate(names):
                numbers[name] = int(first) + offset
    return numbers


_TABLES: Final[Mapping[str, Mapping[str, int]]] = {
    "x86_64": _parse(_X86_64_TABLE, _UNIFIED_TABLE),
    "aarch64": _parse(_AARCH64_TABLE, _UNIFIED_TABLE),
}

_NAMED: Final = frozenset(
    [name for group in ALLOWED.values() for name, _ in group]
    + [name for name, _ in (*REFUSED, *FALLBACK)]
)

#: Names this module lists that do not exist on an architecture (the x86-only calls, and the
#: legacy ones the generic table of aarch64 left out: ``open``, ``fork``, ``stat``...).
ABSENT: Final[Mapping[str, frozenset[str]]] = {
    arch: _NAMED - table.keys() for arch, table in _TABLES.items()
}

# <linux/audit.h>: EM_X86_64 (62) and EM_AARCH64 (183), each | __AUDIT_ARCH_64BIT | _LE.
_AUDIT_ARCH: Final[Mapping[str, int]] = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# <asm/unistd_x32.h>: x32 syscalls enter the x86_64 table with this bit set in nr.
_X32_SYSCALL_BIT: Final = 0x40000000
# `uname -m` spellings of the same architectures on other systems.
_ALIASES: Final[Mapping[str, str]] = {"amd64": "x86_64", "arm64": "aarch64"}

# <linux/filter.h>, <linux/bpf_common.h>: the classic BPF opcodes the filter uses.
_BPF_LD_W_ABS: Final = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_BPF_JA: Final = 0x05 | 0x00  # BPF_JMP | BPF_JA
_BPF_JEQ_K: Final = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
_BPF_JGE_K: Final = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
_BPF_JSET_K: Final = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
_BPF_RET_K: Final = 0x06 | 0x00  # BPF_RET | BPF_K
_BPF_MAXINSNS: Final = 4096
_BPF_MAX_JUMP: Final = 0xFF  # a conditional jump's offsets are 8 bits, forward only
#: struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }; both architectures are
#: little-endian (big-endian aarch64 has another AUDIT_ARCH and is refused).
_SOCK_FILTER: Final = struct.Struct("<HBBI")

# struct seccomp_data offsets; an argument's low 32 bits come first on little-endian.
_DATA_NR: Final = 0
_DATA_ARCH: Final = 4
_DATA_ARGS: Final = 16

# <linux/prctl.h>
_PR_GET_SECCOMP: Final = 21
_PR_SET_NO_NEW_PRIVS: Final = 38


def syscall_number(arch: str, name: str) -> int | None:
    """The number of system call ``name`` on ``arch``, or None where it does not exist.

    Raises:
        ValueError: ``arch`` is not one of :data:`ARCHITECTURES`, or ``name`` is in none of
            this module's tables.
    """
    table = _TABLES[_canonical(arch)]
    if name in table:
        return table[name]
    if any(name in other for other in _TABLES.values()):
        return None
    raise ValueError(f"seccomp: no syscall number for {name!r} in this module's tables")


def syscall_names(arch: str) -> Mapping[int, str]:
    """Every system call this module knows on ``arch``, by number.

    Raises:
        ValueError: ``arch`` is not supported.
    """
    return {nr: name for name, nr in _TABLES[_canonical(arch)].items()}


def max_number(arch: str) -> int:
    """The highest system call number this module knows on ``arch`` (every higher one is
    denied with ``ENOSYS``).

    Raises:
        ValueError: ``arch`` is not supported.
    """
    return max(_TABLES[_canonical(arch)].values())


def allowed_names() -> frozenset[str]:
    """Every name :data:`ALLOWED` lists, on any architecture (checked calls included)."""
    return frozenset(name for group in ALLOWED.values() for name, _ in group)


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
    asm = _Assembler()
    _native_only(asm, arch)
    _search(asm, _intervals(arch))
    _checks(asm, arch, CHECKED)
    return asm.assemble()


@functools.cache
def build_process_filter(arch: str) -> bytes:
    """The ``process`` level's filter for ``arch``: every call allowed but :data:`OTHERS`,
    which are checked, and :data:`MACHINE`, refused (see the module docstring). Pure, and
    cached, as :func:`build_filter`.

    Raises:
        ValueError: ``arch`` is not supported.
    """
    arch = _canonical(arch)
    asm = _Assembler()
    _native_only(asm, arch)
    for name in sorted(OTHERS):
        if name in _TABLES[arch]:
            asm.jump(_BPF_JEQ_K, _TABLES[arch][name], jt=f"check {name}")
    for name in MACHINE:
        if name in _TABLES[arch]:
            asm.jump(_BPF_JEQ_K, _TABLES[arch][name], jt="machine")
    asm.ret(_ALLOW)
    asm.label("machine")
    asm.ret(_EPERM)
    _checks(asm, arch, OTHERS)
    return asm.assemble()


def _native_only(asm: _Assembler, arch: str) -> None:
    """Kill a call made with another calling convention than ``arch``'s; leave ``nr`` loaded."""
    asm.load(_DATA_ARCH)
    asm.jump(_BPF_JEQ_K, _AUDIT_ARCH[arch], jt="arch ok")
    asm.ret(_SECCOMP_RET_KILL_PROCESS)
    asm.label("arch ok")
    asm.load(_DATA_NR)
    if arch == "x86_64":
        asm.jump(_BPF_JGE_K, _X32_SYSCALL_BIT, jf="native")
        asm.ret(_SECCOMP_RET_KILL_PROCESS)
        asm.label("native")


def _checks(asm: _Assembler, arch: str, checks: Mapping[str, Check]) -> None:
    """The argument check of each call of ``checks`` that ``arch`` has, at its label."""
    for name, check in sorted(checks.items()):
        if name not in _TABLES[arch]:
            continue
        asm.label(f"check {name}")
        loaded = None
        for compare in check.compares:
            if compare.arg != loaded:
                asm.load(_DATA_ARGS + 8 * compare.arg)
                loaded = compare.arg
            # The jump falls through to the ret when the comparison holds, and skips it if not.
            if compare.op == "ne":
                asm.jump(_BPF_JEQ_K, compare.k, jt=1, jf=0)
            else:
                code = _BPF_JEQ_K if compare.op == "eq" else _BPF_JSET_K
                asm.jump(code, compare.k, jt=0, jf=1)
            asm.ret(compare.verdict)
        asm.ret(check.otherwise)


def _verdicts(arch: str) -> dict[int, int | str]:
    """Each known number's verdict: a seccomp action, or the label of its check."""
    table = _TABLES[arch]
    verdicts: dict[int, int | str] = dict.fromkeys(table.values(), _ENOSYS)
    for name in allowed_names() & table.keys():
        verdicts[table[name]] = f"check {name}" if name in CHECKED else _ALLOW
    for name, _reason in REFUSED:
        if name in table:
            verdicts[table[name]] = _EPERM
    return verdicts


def _intervals(arch: str) -> list[tuple[int, int | str]]:
    """``(first number, verdict)`` for runs of numbers with the same verdict, from 0 on;
    the last run reaches every number above the table (``ENOSYS``)."""
    verdicts = _verdicts(arch)
    runs: list[tuple[int, int | str]] = []
    for nr in range(max(verdicts) + 2):
        verdict = verdicts.get(nr, _ENOSYS)
        if not runs or runs[-1][1] != verdict:
            runs.append((nr, verdict))
    return runs


def _search(asm: _Assembler, runs: list[tuple[int, int | str]]) -> None:
    """Emit a binary search over ``runs``, whose leaves return or jump to their check."""
    if len(runs) == 1:
        verdict = runs[0][1]
        if isinstance(verdict, str):
            asm.goto(verdict)
        else:
            asm.ret(verdict)
        return
    middle = len(runs) // 2
    left, right = runs[:middle], runs[middle:]
    label = asm.fresh()
    if _search_size(left) <= _BPF_MAX_JUMP:
        asm.jump(_BPF_JGE_K, right[0][0], jt=label)
    else:  # too far for a conditional jump: go through an unconditional one
        asm.jump(_BPF_JGE_K, right[0][0], jt=0, jf=1)
        asm.goto(label)
    _search(asm, left)
    asm.label(label)
    _search(asm, right)


def _search_size(runs: list[tuple[int, int | str]]) -> int:
    """How many instructions :func:`_search` emits for ``runs``."""
    if len(runs) == 1:
        return 1
    middle = len(runs) // 2
    left = _search_size(runs[:middle])
    return (1 if left <= _BPF_MAX_JUMP else 2) + left + _search_size(runs[middle:])


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
    _install(host, build_filter(host))


def install_process_filter() -> None:
    """Set no_new_privs and install the ``process`` level's filter
    (:func:`build_process_filter`) on every thread of this process. Irreversible.

    Raises:
        OSError: as :func:`install` (``ENOTSUP`` where this host has no seccomp filters).
    """
    reason = supported()
    if reason is not None:
        raise OSError(errno.ENOTSUP, f"seccomp: {reason}")
    host = _host_arch()
    _install(host, build_process_filter(host))


def _install(host: str, program: bytes) -> None:
    """Set no_new_privs and install ``program`` on every thread (see :func:`install`)."""
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
    """Classic BPF with symbolic forward jumps, resolved (and range-checked) by assemble().

    A conditional jump's target is a label, a number of instructions to skip (0 falls
    through to the next one), or None (the same as 0). ``ja`` takes a label only.
    """

    def __init__(self) -> None:
        self._code: list[tuple[int, str | int | None, str | int | None, int | str]] = []
        self._labels: dict[str, int] = {}
        self._fresh = 0

    def load(self, offset: int) -> None:
        self._code.append((_BPF_LD_W_ABS, None, None, offset))

    def ret(self, action: int) -> None:
        self._code.append((_BPF_RET_K, None, None, action))

    def jump(
        self, code: int, k: int, *, jt: str | int | None = None, jf: str | int | None = None
    ) -> None:
        """A conditional jump."""
        self._code.append((code, jt, jf, k))

    def goto(self, label: str) -> None:
        """An unconditional jump (a 32-bit offset: any distance forward)."""
        self._code.append((_BPF_JA, None, None, label))

    def fresh(self) -> str:
        """A label no other place uses."""
        self._fresh += 1
        return f"#{self._fresh}"

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def assemble(self) -> bytes:
        if len(self._code) > _BPF_MAXINSNS:
            raise ValueError(f"seccomp: {len(self._code)} instructions, over BPF_MAXINSNS")
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self._code):
            if isinstance(k, str):  # ja: the label's distance is the operand
                out += _SOCK_FILTER.pack(code, 0, 0, self._labels[k] - index - 1)
            else:
                out += _SOCK_FILTER.pack(code, self._offset(index, jt), self._offset(index, jf), k)
        return bytes(out)

    def _offset(self, index: int, target: str | int | None) -> int:
        if target is None:
            return 0
        offset = target if isinstance(target, int) else self._labels[target] - index - 1
        # Classic BPF jumps only forward, by at most 255 instructions.
        if not 0 <= offset <= _BPF_MAX_JUMP:
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
