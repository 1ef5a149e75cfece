"""The seccomp allow list: its tables, its BPF program (emulated here), and real calls.

The reviewed lists below are written out again, by hand, so that any change to what the
filter allows or refuses is a visible change to this file. The program is checked by a
classic-BPF interpreter over every syscall number, on both architectures, from any host.

Every real call runs in a fresh ``python -I -S`` child that installs the filter itself;
nothing is ever installed in the test process. Each attack also runs once *without* the
filter, to show that the filter, and not the environment, is what makes it fail. The same
filter, from a confined program with every other wall up, is probed call by call in
tests/sandbox/test_seccomp_confined.py. Nothing here measures speed.
"""

from __future__ import annotations

import ast
import errno
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from runner import _seccomp
from tests.host import skipif_host_cannot

from .helpers import MSGSPEC_DIR, ROOT

_UNSUPPORTED = _seccomp.supported()
needs_seccomp = skipif_host_cannot(
    _UNSUPPORTED is not None, f"filter system calls with seccomp: {_UNSUPPORTED}"
)
HOST_ARCH = os.uname().machine
TIMEOUT = 60

# The kernel's values, written out independently of the module (<linux/seccomp.h>).
ALLOW = 0x7FFF0000
KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_EPERM = RET_ERRNO | errno.EPERM
RET_ENOSYS = RET_ERRNO | errno.ENOSYS
RET_EINVAL = RET_ERRNO | errno.EINVAL
RET_EAFNOSUPPORT = RET_ERRNO | errno.EAFNOSUPPORT
RET_EPROTONOSUPPORT = RET_ERRNO | errno.EPROTONOSUPPORT
RET_EOPNOTSUPP = RET_ERRNO | errno.EOPNOTSUPP
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028

# ---------------------------------------------------------------------------------------
# The reviewed lists. A change to the module's lists must be made here too, on purpose.

#: What a confined program may call, by group (both architectures; the x86-only and legacy
#: names simply do not exist on aarch64).
REVIEWED_ALLOWED: Mapping[str, str] = {
    "memory": """
        brk mmap munmap mremap mprotect madvise msync mlock munlock mlock2 mlockall
        munlockall mbind set_mempolicy get_mempolicy membarrier pkey_mprotect pkey_alloc
        pkey_free memfd_create map_shadow_stack mseal
    """,
    "files": """
        open openat creat close close_range stat fstat lstat newfstatat statx access
        faccessat faccessat2 getdents getdents64 getcwd chdir fchdir mkdir mkdirat rmdir
        unlink unlinkat rename renameat renameat2 link linkat symlink symlinkat readlink
        readlinkat chmod fchmod fchmodat fchmodat2 chown fchown lchown fchownat mknod mknodat
        umask truncate ftruncate fallocate utime utimes futimesat utimensat statfs fstatfs
        getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr setxattr lsetxattr
        fsetxattr removexattr lremovexattr fremovexattr flock fsync fdatasync sync_file_range
        readahead fadvise64
    """,
    "descriptors": """
        read write readv writev pread64 pwrite64 preadv pwritev preadv2 pwritev2 lseek dup
        dup2 dup3 fcntl ioctl pipe pipe2 sendfile splice copy_file_range poll ppoll select
        pselect6 epoll_create epoll_create1 epoll_ctl epoll_wait epoll_pwait epoll_pwait2
        eventfd eventfd2
    """,
    "sockets": """
        socket socketpair bind listen accept accept4 connect getsockname getpeername sendto
        recvfrom sendmsg recvmsg sendmmsg recvmmsg shutdown setsockopt getsockopt
    """,
    "processes and threads": """
        clone fork vfork execve exit exit_group wait4 waitid set_tid_address set_robust_list
        rseq futex arch_prctl getpid getppid gettid getpgid setpgid getpgrp getsid setsid
        pidfd_open pidfd_send_signal prctl personality restart_syscall sched_yield
        sched_getaffinity sched_setaffinity sched_getparam sched_setparam sched_getscheduler
        sched_setscheduler sched_get_priority_max sched_get_priority_min
        sched_rr_get_interval sched_getattr sched_setattr getpriority setpriority ioprio_get
        ioprio_set getcpu
    """,
    "signals": """
        rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait
        rt_sigqueueinfo rt_tgsigqueueinfo rt_sigsuspend sigaltstack kill tkill tgkill pause
        signalfd signalfd4
    """,
    "time": """
        clock_gettime clock_getres clock_nanosleep gettimeofday time nanosleep times alarm
        getitimer setitimer timer_create timer_settime timer_gettime timer_getoverrun
        timer_delete timerfd_create timerfd_settime timerfd_gettime
    """,
    "identity and limits": """
        getuid geteuid getgid getegid getresuid getresgid getgroups setuid setgid setreuid
        setregid setresuid setresgid setfsuid setfsgid setgroups capget capset getrlimit
        setrlimit prlimit64 getrusage uname sysinfo getrandom
    """,
    "self-restriction": "seccomp landlock_create_ruleset landlock_add_rule landlock_restrict_self",
}
#: The allowed calls whose arguments the filter reads.
REVIEWED_CHECKED = """
    clone socket socketpair ioctl personality prctl madvise memfd_create preadv2 chmod fchmod
    fchmodat fchmodat2 open openat creat mknod mknodat
"""
#: Refused with EPERM.
REVIEWED_REFUSED = """
    ptrace process_vm_readv process_vm_writev kcmp pidfd_getfd process_madvise migrate_pages
    move_pages unshare setns mount umount2 pivot_root chroot open_tree open_tree_attr
    move_mount fsopen fsconfig fsmount fspick mount_setattr open_by_handle_at
    name_to_handle_at bpf perf_event_open userfaultfd io_uring_setup io_uring_enter
    io_uring_register keyctl add_key request_key lookup_dcookie io_setup io_destroy io_submit
    io_cancel io_getevents io_pgetevents memfd_secret sync syncfs inotify_init inotify_init1
    inotify_add_watch inotify_rm_watch fanotify_init fanotify_mark mincore cachestat
    kexec_load kexec_file_load init_module finit_module delete_module reboot swapon swapoff
    acct quotactl quotactl_fd syslog vhangup iopl ioperm modify_ldt clock_settime
    settimeofday adjtimex clock_adjtime sethostname setdomainname
"""
#: Refused with ENOSYS by name (everything named nowhere gets ENOSYS too).
REVIEWED_FALLBACK = "clone3 openat2 execveat"

#: Names the kernel runs whatever every seccomp filter says (x86_64, Linux 6.11 and later):
#: they only work when called from a trampoline the kernel placed (SIGILL or ENXIO else).
KERNEL_PASSTHROUGH = {"x86_64": {"uretprobe", "uprobe"}, "aarch64": set()}


def reviewed_allowed() -> set[str]:
    return {name for names in REVIEWED_ALLOWED.values() for name in names.split()}


# ---------------------------------------------------------------------------------------
# A classic-BPF interpreter for the opcodes a seccomp filter needs.


def emulate(
    program: bytes,
    *,
    arch: int,
    nr: int,
    args: Sequence[int] = (),
    loads: list[int] | None = None,
    steps: list[int] | None = None,
) -> int:
    """Run ``program`` over a ``struct seccomp_data`` and return the action it picks.

    ``loads`` collects the offsets read; ``steps`` gets the number of instructions run.
    """
    padded = [*args, *[0] * (6 - len(args))]
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, *[a & (2**64 - 1) for a in padded])
    insns = list(struct.iter_unpack("<HBBI", program))
    pc = acc = 0
    for count in range(1, len(insns) + 1):  # jumps only go forward: at most one pass
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            assert k % 4 == 0
            assert k + 4 <= len(data)
            if loads is not None:
                loads.append(k)
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == 0x05:  # ja +k
            pc += 1 + k
        elif code == 0x15:  # jeq #k
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x35:  # jge #k
            pc += 1 + (jt if acc >= k else jf)
        elif code == 0x45:  # jset #k
            pc += 1 + (jt if acc & k else jf)
        elif code == 0x06:  # ret #k
            if steps is not None:
                steps.append(count)
            return int(k)
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")
    raise AssertionError("the program ran off its end")


def number(arch: str, name: str) -> int:
    nr = _seccomp.syscall_number(arch, name)
    assert nr is not None, (arch, name)
    return nr


def numbers(arch: str, names: Sequence[str] | set[str]) -> set[int]:
    found = [_seccomp.syscall_number(arch, name) for name in names]
    return {nr for nr in found if nr is not None}


ARG_PATTERNS: tuple[list[int], ...] = (
    [],
    [7] * 6,
    [2**64 - 1] * 6,
    [0x5555_5555_5555_5555] * 6,
    list(range(1, 7)),
)


# ---------------------------------------------------------------------------------------
# The lists


def test_the_allowed_set_is_the_reviewed_list() -> None:
    """ALLOWED holds exactly the reviewed names, in the reviewed groups, once each, and each
    with a reason."""
    module = {group: [name for name, _ in entries] for group, entries in _seccomp.ALLOWED.items()}
    assert set(module) == set(REVIEWED_ALLOWED)
    for group, names in module.items():
        assert sorted(names) == sorted(REVIEWED_ALLOWED[group].split()), group
    every = [name for names in module.values() for name in names]
    assert len(every) == len(set(every))
    assert _seccomp.allowed_names() == reviewed_allowed()
    for entries in _seccomp.ALLOWED.values():
        for name, reason in entries:
            assert reason.strip(), name


def test_the_checked_refused_and_fallback_lists_are_the_reviewed_ones() -> None:
    """CHECKED, REFUSED and FALLBACK hold the reviewed names; the checked calls are allowed
    ones; nothing is both allowed and denied; every entry has a reason."""
    assert set(_seccomp.CHECKED) == set(REVIEWED_CHECKED.split())
    assert set(_seccomp.CHECKED) <= reviewed_allowed()
    refused = [name for name, _ in _seccomp.REFUSED]
    fallback = [name for name, _ in _seccomp.FALLBACK]
    assert sorted(refused) == sorted(REVIEWED_REFUSED.split())
    assert sorted(fallback) == sorted(REVIEWED_FALLBACK.split())
    assert len(refused) == len(set(refused))
    assert not reviewed_allowed() & set(refused)
    assert not reviewed_allowed() & set(fallback)
    assert not set(refused) & set(fallback)
    for name, reason in (*_seccomp.REFUSED, *_seccomp.FALLBACK):
        assert reason.strip(), name
    for name, check in _seccomp.CHECKED.items():
        assert check.rule.strip(), name
        assert check.compares, name
        for compare in check.compares:
            assert 0 <= compare.arg <= 5
            assert compare.op in ("eq", "ne", "any")


def test_every_listed_name_exists_on_some_architecture() -> None:
    """Each listed name has a number on x86_64 or aarch64; ABSENT is what aarch64's generic
    table left out (legacy calls and x86's own) and nothing on x86_64."""
    listed = reviewed_allowed() | set(REVIEWED_REFUSED.split()) | set(REVIEWED_FALLBACK.split())
    for name in listed:
        nrs = [_seccomp.syscall_number(arch, name) for arch in _seccomp.ARCHITECTURES]
        assert any(nr is not None for nr in nrs), name
    assert _seccomp.ABSENT["x86_64"] == frozenset()
    assert {"open", "fork", "stat", "arch_prctl", "iopl", "modify_ldt"} <= _seccomp.ABSENT[
        "aarch64"
    ]
    for name in _seccomp.ABSENT["aarch64"]:
        assert _seccomp.syscall_number("aarch64", name) is None


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_names_and_numbers_are_distinct(arch: str) -> None:
    """No two names share a number on one architecture; the numbers are the kernel's range."""
    names = _seccomp.syscall_names(arch)
    assert len(set(names.values())) == len(names)
    assert all(0 <= nr < 1024 for nr in names)
    assert _seccomp.max_number(arch) == max(names) == 470  # listns, Linux 6.18


HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"),
    "aarch64": ("/usr/include/asm-generic/unistd.h",),
}
#: In the generic header but not on a 64-bit architecture: 32-bit time calls, placeholders.
GENERIC_NOT_ON_AARCH64 = {"arch_specific_syscall", "syscalls", "sync_file_range2"}


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_numbers_match_the_installed_kernel_headers(arch: str) -> None:
    """Where the kernel's uapi headers are installed, every number they define agrees with
    the module's table, and the table has every call they define (and newer ones)."""
    path = next((Path(h) for h in HEADERS[arch] if Path(h).exists()), None)
    if path is None:
        pytest.skip(f"none of {', '.join(HEADERS[arch])} is installed here")
    defined = {
        name: int(value)
        for name, value in re.findall(
            r"^#define __NR_(\w+)\s+(\d+)\s*$", path.read_text(), re.MULTILINE
        )
    }
    if arch == "aarch64":
        # The calls whose numbers the header gives as __NR3264_*, named as on 64-bit.
        for name, value in re.findall(
            r"^#define __NR3264_(\w+)\s+(\d+)\s*$", path.read_text(), re.MULTILINE
        ):
            defined[{"fstatat": "newfstatat"}.get(name, name)] = int(value)
        defined = {
            name: nr
            for name, nr in defined.items()
            if name not in GENERIC_NOT_ON_AARCH64 and not 403 <= nr <= 423  # the time64 set
        }
    table = _seccomp.syscall_names(arch)
    by_name = {name: nr for nr, name in table.items()}
    assert {name: by_name.get(name) for name in defined} == defined
    # What the table has beyond the header is newer than it, at numbers the header leaves free.
    newer = {nr: name for nr, name in table.items() if name not in defined}
    assert not set(newer) & set(defined.values()), newer


def test_unknown_names_and_architectures_are_refused() -> None:
    """syscall_number and build_filter raise ValueError for what the tables do not hold."""
    with pytest.raises(ValueError, match="riscv64"):
        _seccomp.build_filter("riscv64")
    with pytest.raises(ValueError, match="i686"):
        _seccomp.syscall_number("i686", "ptrace")
    with pytest.raises(ValueError, match="frobnicate"):
        _seccomp.syscall_number("x86_64", "frobnicate")
    assert _seccomp.syscall_number("x86_64", "getpid") == 39
    assert _seccomp.syscall_number("aarch64", "open") is None


# ---------------------------------------------------------------------------------------
# The program


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_build_filter_is_deterministic_and_well_formed(arch: str) -> None:
    """The same architecture always assembles to the same bytes: whole sock_filter entries,
    within BPF_MAXINSNS, the two architectures' programs differing."""
    program = _seccomp.build_filter(arch)
    assert program == _seccomp.build_filter(arch)
    assert len(program) % 8 == 0
    assert 0 < len(program) // 8 <= 4096
    other = next(a for a in _seccomp.ARCHITECTURES if a != arch)
    assert program != _seccomp.build_filter(other)
    alias = {"x86_64": "amd64", "aarch64": "arm64"}[arch]
    assert _seccomp.build_filter(alias) == program


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_foreign_calling_conventions_kill_the_process(arch: str) -> None:
    """A syscall made through another ABI (i386, arm, the other 64-bit table) kills; on x86_64
    so does any x32 call (nr with bit 30 set)."""
    program = _seccomp.build_filter(arch)
    for foreign in (AUDIT_ARCH_I386, AUDIT_ARCH_ARM, *AUDIT_ARCH.values()):
        if foreign != AUDIT_ARCH[arch]:
            assert emulate(program, arch=foreign, nr=0) == KILL_PROCESS
            assert emulate(program, arch=foreign, nr=39) == KILL_PROCESS
    if arch == "x86_64":
        for nr in (0x40000000, 0x40000000 | 39, 0xFFFFFFFF):
            assert emulate(program, arch=AUDIT_ARCH[arch], nr=nr) == KILL_PROCESS


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_every_number_gets_its_listed_verdict(arch: str) -> None:
    """Over every number from 0 to 1023 (and far above on aarch64), whatever the
    arguments: an allowed call without a check is allowed, a refused one answers EPERM,
    and every other number ENOSYS, the unlisted and unknown ones included."""
    program = _seccomp.build_filter(arch)
    allowed = numbers(arch, reviewed_allowed() - set(REVIEWED_CHECKED.split()))
    checked = numbers(arch, set(REVIEWED_CHECKED.split()))
    refused = numbers(arch, set(REVIEWED_REFUSED.split()))
    far = [0x3FFFFFFF] if arch == "x86_64" else [0x40000000, 0x7FFFFFFF, 0xFFFFFFFF]
    for nr in [*range(1024), *far]:
        if nr in checked:
            continue
        expected = ALLOW if nr in allowed else RET_EPERM if nr in refused else RET_ENOSYS
        for args in ARG_PATTERNS:
            assert emulate(program, arch=AUDIT_ARCH[arch], nr=nr, args=args) == expected, nr


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_the_calls_every_python_process_makes_are_allowed(arch: str) -> None:
    """The calls a Python start-up, a thread, a fork and asyncio make pass untouched, and
    the fallbacks glibc relies on answer ENOSYS."""
    program = _seccomp.build_filter(arch)
    ordinary = """read write close mmap munmap mprotect brk execve wait4 futex exit_group
        newfstatat getdents64 rt_sigaction rt_sigprocmask set_robust_list rseq
        epoll_create1 epoll_ctl epoll_pwait getrandom prlimit64 pipe2 fcntl lseek"""
    for name in ordinary.split():
        assert emulate(program, arch=AUDIT_ARCH[arch], nr=number(arch, name)) == ALLOW, name
    for name in REVIEWED_FALLBACK.split():
        assert emulate(program, arch=AUDIT_ARCH[arch], nr=number(arch, name)) == RET_ENOSYS


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_arguments_are_read_only_for_the_checked_calls(arch: str) -> None:
    """The program reads an argument only for a CHECKED call, so the kernel's cache lets
    every other allowed call skip the filter after its first use; and no call takes more
    than a short search (plus its check) to reach its verdict."""
    program = _seccomp.build_filter(arch)
    checked = numbers(arch, set(REVIEWED_CHECKED.split()))
    readers: set[int] = set()
    longest = 0
    for nr in range(_seccomp.max_number(arch) + 8):
        for args in ARG_PATTERNS:
            loads: list[int] = []
            steps: list[int] = []
            emulate(program, arch=AUDIT_ARCH[arch], nr=nr, args=args, loads=loads, steps=steps)
            if any(offset >= 16 for offset in loads):
                readers.add(nr)
            if nr not in checked:
                longest = max(longest, steps[0])
    assert readers == checked
    assert longest <= 20, longest


def test_a_search_too_wide_for_short_jumps_still_finds_every_verdict() -> None:
    """With more intervals than a conditional jump can skip (255 instructions), the search
    goes through unconditional jumps and still gives every number its verdict."""
    verdicts = [ALLOW, RET_ENOSYS, RET_EPERM]
    runs: list[tuple[int, int | str]] = [(3 * i, verdicts[i % 3]) for i in range(600)]
    asm = _seccomp._Assembler()
    asm.load(0)  # nr
    _seccomp._search(asm, runs)
    program = asm.assemble()
    assert len(program) // 8 > 2 * 255
    for nr in range(3 * 600 + 10):
        expected = verdicts[min(nr // 3, 599) % 3]
        assert emulate(program, arch=0, nr=nr) == expected, nr


CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
# What glibc passes for fork() and pthread_create(), and what vfork-style spawns use.
CLONE_FORK = 0x01200000 | signal.SIGCHLD  # CHILD_SETTID | CHILD_CLEARTID
CLONE_THREAD = 0x003D0F00  # VM | FS | FILES | SIGHAND | THREAD | SYSVSEM | SETTLS | *_TID
CLONE_VFORK = 0x00004000 | 0x00000100 | signal.SIGCHLD  # VFORK | VM
HIGH = 1 << 32  # a bit the kernel ignores in every checked argument (an int or a low word)

#: name -> [(args, expected verdict)], the argument in question at its position.
CHECK_CASES: Mapping[str, list[tuple[list[int], int]]] = {
    "clone": [
        *[
            ([base | flag], RET_EPERM)
            for flag in CLONE_NAMESPACE_FLAGS.values()
            for base in (0, CLONE_FORK, CLONE_THREAD)
        ],
        *[([flags], ALLOW) for flags in (CLONE_FORK, CLONE_THREAD, CLONE_VFORK, signal.SIGCHLD)],
        ([HIGH | CLONE_FORK], ALLOW),
        ([HIGH | CLONE_NAMESPACE_FLAGS["CLONE_NEWUSER"]], RET_EPERM),
    ],
    "socket": [
        ([1, 1, 0], ALLOW),  # AF_UNIX
        ([2, 1, 6], ALLOW),  # AF_INET, TCP
        ([10, 2, 17], ALLOW),  # AF_INET6, UDP
        ([HIGH | 2, 1, 0], ALLOW),
        ([16, 3, 0], ALLOW),  # AF_NETLINK, NETLINK_ROUTE
        ([16, 3, 9], RET_EPROTONOSUPPORT),  # NETLINK_AUDIT
        ([16, 3, 15], RET_EPROTONOSUPPORT),  # NETLINK_KOBJECT_UEVENT
        ([16, 3, HIGH], ALLOW),
        *[
            ([family, 1, 0], RET_EAFNOSUPPORT)
            # UNSPEC, VSOCK, PACKET, BLUETOOTH, ALG, KEY, CAN, RDS, TIPC, XDP, and far ones
            for family in (0, 40, 17, 31, 38, 15, 29, 21, 30, 44, 0x10001, 0xFFFFFFFF)
        ],
    ],
    "socketpair": [
        ([1, 1, 0], ALLOW),
        ([2, 1, 0], RET_EAFNOSUPPORT),
        ([16, 3, 0], RET_EAFNOSUPPORT),
        ([40, 1, 0], RET_EAFNOSUPPORT),
    ],
    "ioctl": [
        ([0, 0x5412], RET_EPERM),  # TIOCSTI
        ([0, 0x541C], RET_EPERM),  # TIOCLINUX
        ([0, HIGH | 0x5412], RET_EPERM),
        *[([0, request], ALLOW) for request in (0x5401, 0x5413, 0x541B, 0x5421, 0xC0502100)],
    ],
    "personality": [
        *[([persona], ALLOW) for persona in (0xFFFFFFFF, 0x0000, 0x0008, 0x0020000)],
        *[
            ([flag], RET_EPERM)
            for flag in (0x0040000, 0x0100000, 0x0200000, 0x0400000, 0x0800000, 0x8000000)
        ],
        ([0x0040008], RET_EPERM),
    ],
    "prctl": [
        ([67, 1], RET_EINVAL),  # PR_SET_MEMORY_MERGE
        ([HIGH | 67, 1], RET_EINVAL),
        *[([option, 1], ALLOW) for option in (1, 15, 16, 36, 38, 68)],
    ],
    "madvise": [
        ([0, 4096, 12], RET_EINVAL),  # MADV_MERGEABLE
        *[([0, 4096, advice], ALLOW) for advice in (0, 4, 8, 13, 14, 100)],
    ],
    "memfd_create": [
        ([0, 0], RET_EPERM),
        ([0, 1], RET_EPERM),  # MFD_CLOEXEC: os.memfd_create's default
        ([0, 0x10], RET_EPERM),  # MFD_EXEC
        ([0, 0x8], ALLOW),  # MFD_NOEXEC_SEAL
        ([0, 0x8 | 0x1 | 0x2], ALLOW),  # with CLOEXEC and ALLOW_SEALING
    ],
    "preadv2": [
        ([0, 0, 0, 0, 0, 0x8], RET_EOPNOTSUPP),  # RWF_NOWAIT
        ([0, 0, 0, 0, 0, 0x1F], RET_EOPNOTSUPP),
        *[([0, 0, 0, 0, 0, flags], ALLOW) for flags in (0, 1, 2, 4, 0x10)],
    ],
}
SETID_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2,
             "openat": 3, "creat": 1, "mknod": 1, "mknodat": 2}  # fmt: skip


def setid_cases(arg: int) -> list[tuple[list[int], int]]:
    def at(mode: int) -> list[int]:
        return [*[0] * arg, mode]

    refused = [0o4755, 0o2755, 0o6777, 0o104755, 0o4000, HIGH | 0o2000]
    passed = [0, 0o755, 0o644, 0o1777, 0o777, 0o100644, 0o10644, HIGH | 0o644]
    return [*[(at(mode), RET_EPERM) for mode in refused], *[(at(mode), ALLOW) for mode in passed]]


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
@pytest.mark.parametrize("name", sorted(REVIEWED_CHECKED.split()))
def test_checked_calls_get_the_verdicts_their_arguments_deserve(arch: str, name: str) -> None:
    """Each checked call passes or answers its errno exactly for the reviewed cases: namespace
    flags, socket families, terminal injection, persona flags, KSM, executable memfds,
    RWF_NOWAIT and set-id modes; only the low 32 bits of an argument count."""
    nr = _seccomp.syscall_number(arch, name)
    if nr is None:
        pytest.skip(f"{name} does not exist on {arch}")
    program = _seccomp.build_filter(arch)
    cases = setid_cases(SETID_ARG[name]) if name in SETID_ARG else CHECK_CASES[name]
    for args, expected in cases:
        verdict = emulate(program, arch=AUDIT_ARCH[arch], nr=nr, args=args)
        assert verdict == expected, (args, hex(verdict))


def test_supported_explains_an_unsupported_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    """supported() names the architecture it cannot handle instead of failing (it only asks
    the kernel questions, so it runs in the test process)."""
    fake = os.uname_result(("Linux", "host", "6.18", "#1", "riscv64"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    reason = _seccomp.supported()
    assert reason is not None
    assert "riscv64" in reason


# ---------------------------------------------------------------------------------------
# Real calls, each in a fresh child

_PRELUDE = """\
import ctypes, errno, os, signal, sys
sys.path[:0] = {path!r}
from runner import _seccomp

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
ARCH = os.uname().machine
MISSING = b"/nonexistent-sandbox-seccomp-test"


def call(name, *args):
    nr = name if isinstance(name, int) else _seccomp.syscall_number(ARCH, name)
    argv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    rc = _libc.syscall(ctypes.c_long(nr), *argv)
    return "ok" if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def clone(flags):
    nr = _seccomp.syscall_number(ARCH, "clone")
    rc = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in (flags, 0, 0, 0, 0)])
    if rc == 0:
        os._exit(0)  # the clone went through and this is the child: leave at once
    if rc > 0:
        os.waitpid(rc, 0)
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), "?")


if {install!r}:
    _seccomp.install()
"""


def run_child(body: str, *, install: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``body`` in a fresh ``python -I -S`` after the prelude (which installs the filter
    unless told not to), with stdin on /dev/null."""
    code = _PRELUDE.format(path=[str(ROOT), MSGSPEC_DIR], install=install)
    code += textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def output(body: str, *, install: bool = True) -> str:
    """The child's stdout, stripped, after checking that it exited cleanly."""
    proc = run_child(body, install=install)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


NS = CLONE_NAMESPACE_FLAGS
#: name -> (body printing the outcome, outcome under the filter). Each is harmless when it
#: succeeds: no mount is ever made (the target does not exist), nothing outlives the child,
#: and what the child reserves (an AIO context, a watch) is released when it exits.
ATTACKS: Mapping[str, tuple[str, str]] = {
    "ptrace(PTRACE_TRACEME)": ("print(call('ptrace', 0, 0, 0, 0))", "EPERM"),
    "process_vm_readv(parent)": (
        "print(call('process_vm_readv', os.getppid(), None, 0, None, 0, 0))",
        "EPERM",
    ),
    "mount(tmpfs)": ("print(call('mount', b'none', MISSING, b'tmpfs', 0, None))", "EPERM"),
    "umount2": ("print(call('umount2', MISSING, 0))", "EPERM"),
    "fsopen(tmpfs)": ("print(call('fsopen', b'tmpfs', 0))", "EPERM"),
    "unshare(CLONE_NEWUSER)": (f"print(call('unshare', {NS['CLONE_NEWUSER']}))", "EPERM"),
    "unshare(CLONE_NEWNS)": (f"print(call('unshare', {NS['CLONE_NEWNS']}))", "EPERM"),
    "setns": (f"print(call('setns', -1, {NS['CLONE_NEWNET']}))", "EPERM"),
    "bpf(BPF_MAP_CREATE)": ("print(call('bpf', 0, None, 0))", "EPERM"),
    # -2 is KEY_SPEC_PROCESS_KEYRING: a key added there dies with the child.
    "keyctl(GET_KEYRING_ID)": ("print(call('keyctl', 0, -2, 0))", "EPERM"),
    "add_key": ("print(call('add_key', b'user', b'k', b'v', 1, -2))", "EPERM"),
    "perf_event_open": ("print(call('perf_event_open', None, 0, -1, -1, 0))", "EPERM"),
    "io_uring_setup": ("print(call('io_uring_setup', 1, None))", "EPERM"),
    "userfaultfd": ("print(call('userfaultfd', os.O_CLOEXEC))", "EPERM"),
    "clone(CLONE_NEWNET)": (f"print(clone({NS['CLONE_NEWNET']} | signal.SIGCHLD))", "EPERM"),
    "clone(CLONE_NEWUSER)": (f"print(clone({NS['CLONE_NEWUSER']} | signal.SIGCHLD))", "EPERM"),
    "clone(CLONE_NEWPID)": (f"print(clone({NS['CLONE_NEWPID']} | signal.SIGCHLD))", "EPERM"),
    "clone3": ("print(call('clone3', None, 0))", "ENOSYS"),
    "personality(ADDR_NO_RANDOMIZE)": ("print(call('personality', 0x0040000))", "EPERM"),
    "ioctl(TIOCSTI)": ("print(call('ioctl', 0, 0x5412, ctypes.c_char_p(b'x')))", "EPERM"),
    "io_setup": ("ctx = ctypes.c_ulong(0)\nprint(call('io_setup', 1, ctypes.byref(ctx)))", "EPERM"),
    "inotify_init1": ("print(call('inotify_init1', os.O_CLOEXEC))", "EPERM"),
    "memfd_secret": ("print(call('memfd_secret', 0))", "EPERM"),
    "memfd_create(MFD_CLOEXEC)": ("print(call('memfd_create', b'x', 1))", "EPERM"),
    "socket(AF_VSOCK)": ("print(call('socket', 40, 1, 0))", "EAFNOSUPPORT"),
    "socket(AF_PACKET)": ("print(call('socket', 17, 3, 0))", "EAFNOSUPPORT"),
    "socket(AF_NETLINK, NETLINK_AUDIT)": ("print(call('socket', 16, 3, 9))", "EPROTONOSUPPORT"),
    "madvise(MADV_MERGEABLE)": (
        "import mmap\nm = mmap.mmap(-1, 4096)\n"
        "a = ctypes.addressof(ctypes.c_char.from_buffer(m))\n"
        "print(call('madvise', ctypes.c_void_p(a), 4096, 12))",
        "EINVAL",
    ),
    "prctl(PR_SET_MEMORY_MERGE)": ("print(call('prctl', 67, 1, 0, 0, 0))", "EINVAL"),
    "an unknown number": ("print(call(1000))", "ENOSYS"),
}


@needs_seccomp
@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_refused_under_the_filter(attack: str) -> None:
    """After install(), each denied call fails with the filter's errno, the child process
    carrying on normally."""
    body, expected = ATTACKS[attack]
    assert output(body) == expected


@needs_seccomp
@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.slow
def test_attack_fails_differently_or_succeeds_without_the_filter(attack: str) -> None:
    """Without the filter the same call succeeds or fails with another errno, so the filter is
    what refuses it (skipped where the host refuses it the same way on its own)."""
    body, expected = ATTACKS[attack]
    outcome = output(body, install=False)
    if outcome == expected:
        pytest.skip(f"{attack} already fails with {outcome} on this host without the filter")
    assert outcome != expected


@needs_seccomp
@pytest.mark.skipif(HOST_ARCH != "x86_64", reason="the x32 ABI exists only on x86_64")
def test_an_x32_syscall_kills_the_process() -> None:
    """A syscall number with the x32 bit set kills the process with SIGSYS, before any output
    after it."""
    proc = run_child("print('before', flush=True)\ncall(0x40000000 | 39)\nprint('after')")
    assert proc.returncode == -signal.SIGSYS, proc.stderr
    assert proc.stdout.split() == ["before"]


@needs_seccomp
def test_filter_and_no_new_privs_are_in_place() -> None:
    """After install(), the kernel reports filter mode and no_new_privs for the process."""
    body = """
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
    print(status["Seccomp"].strip(), status["NoNewPrivs"].strip())
    """
    assert output(body) == "2 1"


@needs_seccomp
def test_the_filter_covers_threads_started_before_install() -> None:
    """A thread already running when install() is called is filtered too (TSYNC)."""
    body = """
    import threading
    go, results = threading.Event(), []
    def worker():
        go.wait()
        results.append(call("unshare", 0x10000000))
    thread = threading.Thread(target=worker)
    thread.start()
    _seccomp.install()
    go.set()
    thread.join()
    print(results[0])
    """
    assert output(body, install=False) == "EPERM"


@needs_seccomp
def test_the_filter_survives_fork_and_exec() -> None:
    """A forked child and an executed Python are filtered as their parent is."""
    body = """
    import subprocess
    pid = os.fork()
    if pid == 0:
        os._exit(13 if call("ptrace", 0, 0, 0, 0) == "EPERM" else 1)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    code = "import ctypes; l = ctypes.CDLL(None, use_errno=True); "
    code += f"print(l.syscall({_seccomp.syscall_number(ARCH, 'unshare')}, 0x10000000), "
    code += "ctypes.get_errno())"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True,
                          text=True, timeout=30)
    print(proc.stdout.strip())
    """
    assert output(body).splitlines() == ["13", f"-1 {errno.EPERM}"]


@needs_seccomp
def test_fork_and_waitpid_still_work() -> None:
    """os.fork, os.waitpid and the child's exit status work under the filter."""
    body = """
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
    assert output(body) == "7"


@needs_seccomp
def test_threads_still_work() -> None:
    """threading.Thread and a thread pool start, run and join under the filter (glibc falls
    back from clone3 to clone)."""
    body = """
    import threading
    from concurrent.futures import ThreadPoolExecutor
    results = []
    threads = [threading.Thread(target=results.append, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with ThreadPoolExecutor(4) as pool:
        squares = list(pool.map(lambda x: x * x, range(8)))
    print(sorted(results), sum(squares))
    """
    assert output(body) == "[0, 1, 2, 3] 140"


@needs_seccomp
def test_subprocesses_still_work() -> None:
    """subprocess runs /bin/true and a Python child under the filter."""
    body = """
    import subprocess
    print(subprocess.run(["/bin/true"], timeout=30).returncode)
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", "print(6 * 7)"],
                          capture_output=True, text=True, timeout=30)
    print(proc.stdout.strip())
    """
    assert output(body).splitlines() == ["0", "42"]


@needs_seccomp
def test_file_io_still_works(tmp_path: Path) -> None:
    """Files can be created, written, read, renamed, copied with their metadata, listed and
    removed under the filter."""
    body = f"""
    import shutil
    base = {str(tmp_path)!r}
    os.mkdir(os.path.join(base, "d"))
    path = os.path.join(base, "d", "f.txt")
    with open(path, "w") as f:
        f.write("hello")
    os.rename(path, path + ".2")
    shutil.copy2(path + ".2", path + ".3")
    with open(path + ".3") as f:
        text = f.read()
    listing = sorted(os.listdir(os.path.join(base, "d")))
    shutil.rmtree(os.path.join(base, "d"))
    print(text, listing)
    """
    assert output(body) == "hello ['f.txt.2', 'f.txt.3']"


@needs_seccomp
def test_set_id_bits_are_refused(tmp_path: Path) -> None:
    """chmod, os.open and os.mkfifo with a set-id bit fail with EPERM; without one they work."""
    body = f"""
    base = {str(tmp_path)!r}
    path = os.path.join(base, "f")
    def outcome(action):
        try:
            action()
            return "ok"
        except OSError as exc:
            return errno.errorcode[exc.errno]
    print(outcome(lambda: os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o4755))))
    print(outcome(lambda: os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o755))))
    print(outcome(lambda: os.chmod(path, 0o4755)), outcome(lambda: os.chmod(path, 0o2755)))
    print(outcome(lambda: os.mkfifo(path + ".fifo", 0o2644)))
    print(outcome(lambda: os.chmod(path, 0o700)), oct(os.stat(path).st_mode & 0o7777))
    """
    assert output(body).splitlines() == ["EPERM", "ok", "EPERM EPERM", "EPERM", "ok 0o700"]


@needs_seccomp
def test_sockets_pipes_and_asyncio_still_work() -> None:
    """socket.socketpair, os.pipe, an asyncio loop (with a worker thread), the interface list
    (a netlink route socket) and an in-memory file with MFD_NOEXEC_SEAL work under the
    filter."""
    body = """
    import asyncio, socket
    a, b = socket.socketpair()
    a.sendall(b"ping")
    got = b.recv(4)
    r, w = os.pipe()
    os.write(w, b"pong")
    got += os.read(r, 4)
    async def main():
        return await asyncio.gather(asyncio.sleep(0, "a"), asyncio.to_thread(lambda: "b"))
    names = [name for _, name in socket.if_nameindex()]
    fd = os.memfd_create("x", os.MFD_CLOEXEC | 8)  # MFD_NOEXEC_SEAL
    print(got.decode(), asyncio.run(main()), "lo" in names, os.write(fd, b"abc"))
    """
    assert output(body) == "pingpong ['a', 'b'] True 3"


@needs_seccomp
def test_personality_query_still_works() -> None:
    """personality(0xffffffff), the read-only query, passes the filter."""
    assert output("print(call('personality', 0xFFFFFFFF))") == "ok"


@needs_seccomp
def test_install_refuses_another_architecture() -> None:
    """install(arch=<not this host's>) raises ValueError and installs nothing."""
    other = next(a for a in _seccomp.ARCHITECTURES if a != HOST_ARCH)
    body = f"""
    try:
        _seccomp.install({other!r})
    except ValueError as exc:
        print("ValueError" if {other!r} in str(exc) else exc)
    status = open("/proc/self/status").read()
    print("Seccomp:\\t0" in status)
    """
    assert output(body, install=False).splitlines() == ["ValueError", "True"]


def test_install_refuses_an_unsupported_host() -> None:
    """On a host whose architecture has no tables, install() raises OSError(ENOTSUP) and
    installs nothing."""
    body = """
    os.uname = lambda: os.uname_result(("Linux", "host", "6.18", "#1", "riscv64"))
    try:
        _seccomp.install()
    except OSError as exc:
        print(errno.errorcode[exc.errno], "riscv64" in str(exc))
    print("Seccomp:\\t0" in open("/proc/self/status").read())
    """
    assert output(body, install=False).splitlines() == ["ENOTSUP True", "True"]


# ---------------------------------------------------------------------------------------
# The process level's filter

#: The process level's checked calls, reviewed: each is allowed on the caller only.
REVIEWED_OTHERS = """
    ioprio_set prlimit64 sched_setaffinity sched_setattr sched_setparam sched_setscheduler
    setpriority
"""
PRIO_PROCESS, PRIO_PGRP, PRIO_USER = 0, 1, 2
IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER = 1, 2, 3


#: The calls the process level refuses outright, reviewed: they act on the whole machine.
REVIEWED_MACHINE = """
    reboot kexec_load kexec_file_load init_module finit_module delete_module swapon swapoff
    acct quotactl quotactl_fd syslog iopl ioperm clock_settime settimeofday adjtimex
    clock_adjtime sethostname setdomainname mount umount2 pivot_root open_tree open_tree_attr
    move_mount fsopen fsconfig fsmount fspick mount_setattr
"""


def test_the_process_filters_checked_calls_are_the_reviewed_ones() -> None:
    assert set(_seccomp.OTHERS) == set(REVIEWED_OTHERS.split())
    assert set(_seccomp.MACHINE) == set(REVIEWED_MACHINE.split())
    assert set(_seccomp.MACHINE) <= {name for name, _ in _seccomp.REFUSED}


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_the_process_filter_allows_every_call_but_on_another_process(arch: str) -> None:
    """Every call is allowed, whatever its arguments, but the :data:`MACHINE` calls, always
    refused with EPERM, and the :data:`OTHERS` calls, which are allowed on the caller (pid
    0, or for setpriority and ioprio_set the caller or its process group) and refused with
    EPERM on any other process, group or user; a foreign calling convention kills, as in
    the confined filter."""
    program = _seccomp.build_process_filter(arch)
    assert program == _seccomp.build_process_filter(arch)
    audit = AUDIT_ARCH[arch]
    checked = numbers(arch, set(_seccomp.OTHERS))
    machine = numbers(arch, set(_seccomp.MACHINE))
    for nr in range(_seccomp.max_number(arch) + 2):
        if nr not in checked:
            verdict = RET_EPERM if nr in machine else ALLOW
            for args in ARG_PATTERNS:
                assert emulate(program, arch=audit, nr=nr, args=args) == verdict, (nr, args)
    for name in ("prlimit64", "sched_setaffinity", "sched_setscheduler", "sched_setparam"):
        nr = number(arch, name)
        assert emulate(program, arch=audit, nr=nr, args=[0, 7, 7]) == ALLOW, name
        assert emulate(program, arch=audit, nr=nr, args=[HIGH, 7, 7]) == ALLOW, name
        for pid in (1, 4242, 2**32 - 1):  # any other process (and -1)
            assert emulate(program, arch=audit, nr=nr, args=[pid, 7, 7]) == RET_EPERM, name
    nr = number(arch, "sched_setattr")
    assert emulate(program, arch=audit, nr=nr, args=[0, 7, 0]) == ALLOW
    assert emulate(program, arch=audit, nr=nr, args=[4242, 7, 0]) == RET_EPERM
    for name, (own, group, user) in {
        "setpriority": (PRIO_PROCESS, PRIO_PGRP, PRIO_USER),
        "ioprio_set": (IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER),
    }.items():
        nr = number(arch, name)
        for which in (own, group):
            assert emulate(program, arch=audit, nr=nr, args=[which, 0, 5]) == ALLOW, name
            assert emulate(program, arch=audit, nr=nr, args=[which, 4242, 5]) == RET_EPERM
        for who in (0, 4242):  # a user: every process of it, whoever it is
            assert emulate(program, arch=audit, nr=nr, args=[user, who, 5]) == RET_EPERM
    assert emulate(program, arch=AUDIT_ARCH_ARM, nr=0) == KILL_PROCESS
    if arch == "x86_64":
        assert emulate(program, arch=audit, nr=0x40000000 | 2) == KILL_PROCESS


@needs_seccomp
def test_the_process_filter_keeps_another_process_as_it_was() -> None:
    """Installed in a child: the test process's limits, affinity, scheduling and priority
    cannot be changed (EPERM, even to what they are), nor every process of the user
    reniced; the child's own can, and the rest of what it does (files, sockets, a fork)
    works as before. Without the filter the same calls go through."""
    host = os.getpid()
    body = f"""
    import resource, socket
    os.setsid()  # as a runner is: its process group is its own, not the test's
    host = {host}
    def attempt(call):
        try:
            call()
        except OSError as exc:
            return errno.errorcode[exc.errno]
        return "ok"
    nofile = resource.prlimit(0, resource.RLIMIT_NOFILE)
    if {{install}}:
        _seccomp.install_process_filter()
    out = {{}}
    out["prlimit"] = attempt(lambda: resource.prlimit(host, resource.RLIMIT_NOFILE))
    out["affinity"] = attempt(lambda: os.sched_setaffinity(host, os.sched_getaffinity(host)))
    param = os.sched_param(0)
    out["scheduler"] = attempt(lambda: os.sched_setscheduler(host, os.SCHED_OTHER, param))
    out["param"] = attempt(lambda: os.sched_setparam(host, param))
    nice = os.getpriority(os.PRIO_PROCESS, host)
    out["setpriority"] = attempt(lambda: os.setpriority(os.PRIO_PROCESS, host, nice))
    out["own_prlimit"] = attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile))
    out["own_affinity"] = attempt(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
    out["own_nice"] = attempt(lambda: os.nice(1))
    out["own_group"] = attempt(lambda: os.setpriority(os.PRIO_PGRP, 0, 2))
    out["file"] = attempt(lambda: open("/dev/null", "w").close())
    out["socket"] = attempt(lambda: socket.socketpair()[0].close())
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(out)
    """
    others = ("prlimit", "affinity", "scheduler", "param", "setpriority")
    own = ("own_prlimit", "own_affinity", "own_nice", "own_group", "file", "socket")
    filtered = ast.literal_eval(output(body.replace("{install}", "True"), install=False))
    assert {name: filtered[name] for name in others} == dict.fromkeys(others, "EPERM")
    assert {name: filtered[name] for name in own} == dict.fromkeys(own, "ok")
    assert filtered["fork"] == 7
    # The control: the same child without the filter changes the test process (to what
    # it was), so EPERM above is the filter's.
    bare = ast.literal_eval(output(body.replace("{install}", "False"), install=False))
    assert {name: bare[name] for name in others} == dict.fromkeys(others, "ok")


@needs_seccomp
def test_the_process_filter_keeps_the_machine_as_it_was() -> None:
    """Installed in a child: the calls that act on the whole machine answer EPERM, however
    they are made, whoever makes them. Without the filter, a root child gets past the
    capability check to an answer that changes nothing (reboot with a wrong magic number,
    a mount on a path that does not exist, the hostname set to itself, a module from no
    memory, the clock set to nothing); an ordinary user's child gets EPERM from the kernel
    there too, so only as root does the control show the filter's work."""
    body = """
    import socket
    name = socket.gethostname().encode()
    out = {
        "reboot": call("reboot", 0, 0, 0, None),
        "mount": call("mount", b"none", MISSING, b"tmpfs", 0, None),
        "sethostname": call("sethostname", name, len(name)),
        "init_module": call("init_module", None, 0, b""),
        "settimeofday": call("settimeofday", None, None),
    }
    print(out)
    """
    filtered = ast.literal_eval(
        output("_seccomp.install_process_filter()\n" + textwrap.dedent(body), install=False)
    )
    assert filtered == dict.fromkeys(filtered, "EPERM")
    if os.geteuid() == 0:
        bare = ast.literal_eval(output(body, install=False))
        assert bare["reboot"] == "EINVAL"
        assert bare["mount"] == "ENOENT"
        assert bare["sethostname"] == "ok"
        # (ENOSYS: a kernel built without modules, as this VM's is.)
        assert bare["init_module"] in ("EFAULT", "EINVAL", "ENOEXEC", "ENOSYS")
        assert bare["settimeofday"] == "ok"
