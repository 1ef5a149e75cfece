"""The seccomp denylist: its tables, its BPF program (emulated here), and real attacks.

Every attack runs in a fresh ``python -I -S`` child that installs the filter itself; nothing
is ever installed in the test process. Each attack also runs once *without* the filter, to
show that the filter, and not the environment, is what makes it fail. Nothing here measures
speed (benchmarks/ does).
"""

from __future__ import annotations

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

from .helpers import MSGSPEC_DIR, ROOT

_UNSUPPORTED = _seccomp.supported()
needs_seccomp = pytest.mark.skipif(
    _UNSUPPORTED is not None, reason=f"seccomp filters unavailable on this host: {_UNSUPPORTED}"
)
HOST_ARCH = os.uname().machine
TIMEOUT = 60

# The kernel's values, written out independently of the module (<linux/seccomp.h>).
ALLOW = 0x7FFF0000
KILL_PROCESS = 0x80000000
RET_EPERM = 0x00050000 | errno.EPERM
RET_ENOSYS = 0x00050000 | errno.ENOSYS
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028

# Common calls every Python process makes, which the filter must let through.
ORDINARY = {
    "x86_64": {"read": 0, "write": 1, "close": 3, "mmap": 9, "execve": 59, "wait4": 61,
               "futex": 202, "exit_group": 231, "openat": 257, "getpid": 39, "vfork": 58},
    "aarch64": {"read": 63, "write": 64, "close": 57, "mmap": 222, "execve": 221,
                "wait4": 260, "futex": 98, "exit_group": 94, "openat": 56, "getpid": 172},
}  # fmt: skip

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


# ---------------------------------------------------------------------------------------
# A classic-BPF interpreter for the few opcodes a seccomp filter needs, to check verdicts on
# both architectures from any host.


def emulate(program: bytes, *, arch: int, nr: int, args: Sequence[int] = ()) -> int:
    """Run ``program`` over a ``struct seccomp_data`` and return the action it picks."""
    padded = [*args, *[0] * (6 - len(args))]
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0, *padded)
    insns = list(struct.iter_unpack("<HBBI", program))
    pc = acc = 0
    for _ in range(len(insns)):  # jumps only go forward: at most one pass
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            assert k % 4 == 0
            assert k + 4 <= len(data)
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == 0x15:  # jeq #k
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x35:  # jge #k
            pc += 1 + (jt if acc >= k else jf)
        elif code == 0x45:  # jset #k
            pc += 1 + (jt if acc & k else jf)
        elif code == 0x06:  # ret #k
            return int(k)
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")
    raise AssertionError("the program ran off its end")


def numbers(arch: str, names: Sequence[str]) -> list[int]:
    found = [_seccomp.syscall_number(arch, name) for name in names]
    return [nr for nr in found if nr is not None]


DENIED = [name for name, _reason in _seccomp.DENYLIST]


# ---------------------------------------------------------------------------------------
# The tables


def test_every_denylisted_name_has_a_number_on_both_architectures() -> None:
    """Each DENYLIST and FILTERED name has a number on x86_64 and aarch64, or is declared absent
    there (only x86's port I/O and segment-table calls are)."""
    for arch in _seccomp.ARCHITECTURES:
        for name, reason in (*_seccomp.DENYLIST, *_seccomp.FILTERED):
            assert reason.strip(), name
            nr = _seccomp.syscall_number(arch, name)
            if nr is None:
                assert name in _seccomp.ABSENT[arch], (arch, name)
            else:
                assert 0 <= nr < 1024, (arch, name, nr)
    assert _seccomp.ABSENT["x86_64"] == frozenset()
    assert _seccomp.ABSENT["aarch64"] == {"iopl", "ioperm", "modify_ldt"}


def test_names_and_numbers_are_distinct() -> None:
    """No name is listed twice, and no two names share a number on one architecture."""
    names = [name for name, _reason in (*_seccomp.DENYLIST, *_seccomp.FILTERED)]
    assert len(names) == len(set(names))
    for arch in _seccomp.ARCHITECTURES:
        nrs = numbers(arch, [*names, "seccomp"])
        assert len(nrs) == len(set(nrs)), arch


@pytest.mark.parametrize(
    ("arch", "headers"),
    [
        (
            "x86_64",
            ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"),
        ),
        ("aarch64", ("/usr/include/asm-generic/unistd.h",)),
    ],
)
def test_numbers_match_the_installed_kernel_headers(arch: str, headers: Sequence[str]) -> None:
    """Where the kernel's uapi headers are installed, every number agrees with them."""
    path = next((Path(h) for h in headers if Path(h).exists()), None)
    if path is None:
        pytest.skip(f"none of {', '.join(headers)} is installed here")
    defined = {
        name: int(value)
        for name, value in re.findall(
            r"^#define __NR_(\w+)\s+(\d+)\s*$", path.read_text(), re.MULTILINE
        )
    }
    names = [name for name, _reason in (*_seccomp.DENYLIST, *_seccomp.FILTERED)]
    checked = 0
    for name in [*names, "seccomp"]:
        if name in defined:  # older headers lack the newest calls
            assert _seccomp.syscall_number(arch, name) == defined[name], name
            checked += 1
        elif name not in _seccomp.ABSENT[arch]:
            assert int(_seccomp.syscall_number(arch, name) or 0) >= 424, name
    assert checked > len(names) // 2


def test_unknown_names_and_architectures_are_refused() -> None:
    """syscall_number and build_filter raise ValueError for what the tables do not hold."""
    with pytest.raises(ValueError, match="riscv64"):
        _seccomp.build_filter("riscv64")
    with pytest.raises(ValueError, match="i686"):
        _seccomp.syscall_number("i686", "ptrace")
    with pytest.raises(ValueError, match="getpid"):
        _seccomp.syscall_number("x86_64", "getpid")


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
    if arch == "x86_64":
        for nr in (0x40000000, 0x40000000 | 39, 0xFFFFFFFF):
            assert emulate(program, arch=AUDIT_ARCH[arch], nr=nr) == KILL_PROCESS


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_denylisted_calls_fail_with_eperm(arch: str) -> None:
    """Every denylisted number answers ERRNO|EPERM, whatever its arguments."""
    program = _seccomp.build_filter(arch)
    for nr in numbers(arch, DENIED):
        assert emulate(program, arch=AUDIT_ARCH[arch], nr=nr) == RET_EPERM, nr
        assert emulate(program, arch=AUDIT_ARCH[arch], nr=nr, args=[2**64 - 1] * 6) == RET_EPERM


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_every_other_call_is_allowed(arch: str) -> None:
    """Every syscall number the filter does not name (0 to 1023) is allowed, including the
    ones every Python process makes."""
    program = _seccomp.build_filter(arch)
    named = set(numbers(arch, [name for name, _ in (*_seccomp.DENYLIST, *_seccomp.FILTERED)]))
    assert set(ORDINARY[arch].values()).isdisjoint(named)
    for nr in range(1024):
        if nr not in named:
            assert emulate(program, arch=AUDIT_ARCH[arch], nr=nr, args=[7] * 6) == ALLOW, nr


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_clone_is_refused_only_with_namespace_flags(arch: str) -> None:
    """clone with any CLONE_NEW* bit answers EPERM; fork, thread and vfork flags pass; clone3
    answers ENOSYS whatever it is given."""
    program = _seccomp.build_filter(arch)
    clone = _seccomp.syscall_number(arch, "clone")
    clone3 = _seccomp.syscall_number(arch, "clone3")
    assert clone is not None
    assert clone3 is not None
    audit = AUDIT_ARCH[arch]
    for flag in CLONE_NAMESPACE_FLAGS.values():
        for base in (0, CLONE_FORK, CLONE_THREAD):
            assert emulate(program, arch=audit, nr=clone, args=[base | flag]) == RET_EPERM
    for flags in (CLONE_FORK, CLONE_THREAD, CLONE_VFORK, signal.SIGCHLD):
        assert emulate(program, arch=audit, nr=clone, args=[flags]) == ALLOW
    for flags in (0, CLONE_FORK, CLONE_NAMESPACE_FLAGS["CLONE_NEWUSER"]):
        assert emulate(program, arch=audit, nr=clone3, args=[flags, 88]) == RET_ENOSYS


@pytest.mark.parametrize("arch", _seccomp.ARCHITECTURES)
def test_personality_and_ioctl_are_refused_only_for_dangerous_arguments(arch: str) -> None:
    """personality answers EPERM for flags that weaken memory protections and passes queries
    and plain personas; ioctl answers EPERM for TIOCSTI and TIOCLINUX only."""
    program = _seccomp.build_filter(arch)
    personality = _seccomp.syscall_number(arch, "personality")
    ioctl = _seccomp.syscall_number(arch, "ioctl")
    assert personality is not None
    assert ioctl is not None
    audit = AUDIT_ARCH[arch]
    for persona in (0xFFFFFFFF, 0x0000, 0x0008, 0x0020000):  # query, LINUX, LINUX32, UNAME26
        assert emulate(program, arch=audit, nr=personality, args=[persona]) == ALLOW
    for flag in (0x0040000, 0x0100000, 0x0200000, 0x0400000, 0x0800000, 0x8000000):
        assert emulate(program, arch=audit, nr=personality, args=[flag]) == RET_EPERM
        assert emulate(program, arch=audit, nr=personality, args=[flag | 8]) == RET_EPERM
    for request in (0x5412, 0x541C):  # TIOCSTI, TIOCLINUX
        assert emulate(program, arch=audit, nr=ioctl, args=[0, request]) == RET_EPERM
    for request in (0x5401, 0x5413, 0x541B, 0x5421):  # TCGETS, TIOCGWINSZ, FIONREAD, FIONBIO
        assert emulate(program, arch=audit, nr=ioctl, args=[0, request]) == ALLOW


def test_supported_explains_an_unsupported_architecture(monkeypatch: pytest.MonkeyPatch) -> None:
    """supported() names the architecture it cannot handle instead of failing (it only asks
    the kernel questions, so it runs in the test process)."""
    fake = os.uname_result(("Linux", "host", "6.18", "#1", "riscv64"))
    monkeypatch.setattr(os, "uname", lambda: fake)
    reason = _seccomp.supported()
    assert reason is not None
    assert "riscv64" in reason


# ---------------------------------------------------------------------------------------
# Real attacks, each in a fresh child

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
#: succeeds: no mount is ever made (the target does not exist) and nothing outlives the child.
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
}


@needs_seccomp
@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_refused_under_the_filter(attack: str) -> None:
    """After install(), each denied call fails with the filter's errno (EPERM; ENOSYS for
    clone3), the child process carrying on normally."""
    body, expected = ATTACKS[attack]
    assert output(body) == expected


@needs_seccomp
@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_fails_differently_or_succeeds_without_the_filter(attack: str) -> None:
    """Without the filter the same call succeeds or fails with another errno, so the filter is
    what refuses it (skipped where the host refuses it with EPERM on its own)."""
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
    """Files can be created, written, read, renamed, listed and removed under the filter."""
    body = f"""
    base = {str(tmp_path)!r}
    os.mkdir(os.path.join(base, "d"))
    path = os.path.join(base, "d", "f.txt")
    with open(path, "w") as f:
        f.write("hello")
    os.rename(path, path + ".2")
    with open(path + ".2") as f:
        text = f.read()
    listing = os.listdir(os.path.join(base, "d"))
    os.unlink(path + ".2")
    os.rmdir(os.path.join(base, "d"))
    print(text, listing)
    """
    assert output(body) == "hello ['f.txt.2']"


@needs_seccomp
def test_sockets_pipes_and_asyncio_still_work() -> None:
    """socket.socketpair, os.pipe and an asyncio loop (with a worker thread) work under the
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
    print(got.decode(), asyncio.run(main()))
    """
    assert output(body) == "pingpong ['a', 'b']"


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
