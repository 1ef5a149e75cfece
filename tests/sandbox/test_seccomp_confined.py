"""The seccomp allow list from inside: probed call by call from a confined program, a
realistic program under it, and the attacks of issue 13 it stops.

Every attack runs at both levels where it can: at ``process`` it gets through (so the test
can fail), at ``confined`` it is stopped with the filter's errno. Each test runs with every
spawn mode (cold, zygote, pool) and on both anyio backends.

The probe never lets a probed call run: the probing thread adds a filter of its own (for
itself only) that hands every call carrying a marker in its sixth argument to a supervisor
thread, through ``SECCOMP_RET_USER_NOTIF``. Of two filters' verdicts the kernel keeps the
stronger, and an errno is stronger than a notification, so a call the run's filter denies
fails with that filter's errno, and only a call it allows reaches the supervisor, which
answers it with an errno of its own (``ENOTRECOVERABLE``) without running it. So every
number can be probed with any arguments, ``exit`` and ``reboot`` included, harmlessly.
"""

from __future__ import annotations

import errno
import os
import struct
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import sandbox
from runner import _seccomp
from sandbox import Budget, Level, RunResult
from tests.host import needs_confinement
from tests.runner.test_seccomp import (
    AUDIT_ARCH,
    CHECK_CASES,
    KERNEL_PASSTHROUGH,
    SETID_ARG,
    emulate,
    reviewed_allowed,
    setid_cases,
)

HOST_ARCH = _seccomp._ALIASES.get(os.uname().machine, os.uname().machine)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("spawn"),
    needs_confinement(),
    pytest.mark.skipif(
        HOST_ARCH not in _seccomp.ARCHITECTURES, reason=f"no syscall tables for {HOST_ARCH}"
    ),
]

BOTH = pytest.mark.parametrize("level", [Level.PROCESS, Level.CONFINED])


def nr(name: str) -> int:
    number = _seccomp.syscall_number(HOST_ARCH, name)
    assert number is not None, name
    return number


async def run(program: str, level: Level, tools: Sequence[Any] = ()) -> Any:
    """The program's value, after checking that it ran to the end."""
    result: RunResult = await sandbox.run(
        program, tools=tools, budget=Budget(wall_clock=60), level=level
    )
    assert result.ok, (result.kind, result.error, result.stderr)
    return result.value


#: A prelude for programs that make raw system calls: ``call`` returns 0 or the errno.
CALLS = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


def call(nr, *args):
    argv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    return 0 if libc.syscall(ctypes.c_long(nr), *argv) >= 0 else ctypes.get_errno()


def outcome(action):
    try:
        action()
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
"""

# ---------------------------------------------------------------------------------------
# The probe

SEEN = errno.ENOTRECOVERABLE  # the supervisor's answer: "this call got past the filter"
MAGIC_HIGH = 0x5EC011FE  # the high word of the sixth argument that marks a probe

PROBE = """
import ctypes, select, struct, threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
PROBES = {probes!r}


def insn(code, jt, jf, k):
    return struct.pack("<HBBI", code, jt, jf, k)


# ld [arg5 high]; jeq MAGIC_HIGH ? USER_NOTIF : ALLOW
program = b"".join([
    insn(0x20, 0, 0, 60), insn(0x15, 0, 1, {magic}),
    insn(0x06, 0, 0, 0x7FC00000), insn(0x06, 0, 0, 0x7FFF0000),
])
buffer = ctypes.create_string_buffer(program, len(program))


class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


fprog = Fprog(len(program) // 8, ctypes.addressof(buffer))
listener, results, notified = [], [], []
ready = threading.Event()


def prober():
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER): no TSYNC, so it
    # filters this thread only.
    fd = libc.syscall(ctypes.c_long({seccomp}), ctypes.c_long(1), ctypes.c_long(8),
                      ctypes.byref(fprog))
    listener.append(fd if fd >= 0 else -ctypes.get_errno())
    ready.set()
    if fd >= 0:
        for nr, *args in PROBES:
            rc = libc.syscall(*[ctypes.c_long(v) for v in (nr, *args)])
            results.append(ctypes.get_errno() if rc == -1 else -1)


thread = threading.Thread(target=prober)
thread.start()
ready.wait(30)
if listener[0] >= 0:
    notif = ctypes.create_string_buffer(80)  # struct seccomp_notif
    resp = ctypes.create_string_buffer(24)  # struct seccomp_notif_resp
    while thread.is_alive():
        if not select.select([listener[0]], [], [], 0.1)[0]:
            continue
        ctypes.memset(notif, 0, 80)
        if libc.ioctl(listener[0], 0xC0502100, notif) != 0:  # SECCOMP_IOCTL_NOTIF_RECV
            continue
        nid, _pid, _flags, nr = struct.unpack_from("<QIIi", notif)
        notified.append(nr)
        struct.pack_into("<QqiI", resp, 0, nid, 0, -{seen}, 0)
        libc.ioctl(listener[0], 0xC0182101, resp)  # SECCOMP_IOCTL_NOTIF_SEND
thread.join(30)
[listener[0], results, sorted(set(notified))]
"""


def probes() -> list[list[int]]:
    """Every number this architecture knows (and a few past it) with zero arguments, then
    each checked call with the reviewed arguments; the marker in the sixth argument's high
    word (the filter reads only low words)."""
    names = _seccomp.syscall_names(HOST_ARCH)
    skip = {nr(name) for name in KERNEL_PASSTHROUGH[HOST_ARCH]}
    cases: list[list[int]] = [
        [number] for number in range(_seccomp.max_number(HOST_ARCH) + 16) if number not in skip
    ]
    cases += [[1000], [0x3FFFFFFF]]
    for name in sorted(_seccomp.CHECKED):
        if name not in names.values():
            continue
        checks = setid_cases(SETID_ARG[name]) if name in SETID_ARG else CHECK_CASES[name]
        cases += [[nr(name), *args] for args, _ in checks]
    marked = []
    for number, *args in cases:
        padded = [int(a) for a in [*args, *[0] * (6 - len(args))]]
        padded[5] = MAGIC_HIGH << 32 | padded[5] & 0xFFFFFFFF
        marked.append([number, *padded])
    return marked


async def test_the_calls_that_pass_the_filter_are_the_reviewed_allow_list() -> None:
    """From a confined program, every syscall number (with zero arguments) and every checked
    call (with the reviewed arguments) gets exactly the verdict the filter's emulation
    gives: the filter's errno, or through to the kernel; and the numbers that get through
    are exactly the reviewed allow list's."""
    cases = probes()
    program = PROBE.format(probes=cases, magic=MAGIC_HIGH, seccomp=nr("seccomp"), seen=SEEN)
    listener, results, notified = await run(program, Level.CONFINED)
    assert listener >= 0, os.strerror(-listener)
    assert len(results) == len(cases)
    filter_program = _seccomp.build_filter(HOST_ARCH)
    names = _seccomp.syscall_names(HOST_ARCH)
    wrong = []
    for (number, *args), got in zip(cases, results, strict=True):
        verdict = emulate(filter_program, arch=AUDIT_ARCH[HOST_ARCH], nr=number, args=args)
        expected = SEEN if verdict == 0x7FFF0000 else verdict & 0xFFFF
        if got != expected:
            wrong.append((names.get(number, number), args[:5], got, expected))
    assert wrong == []
    passed = {number for (number, *_), got in zip(cases, results, strict=True) if got == SEEN}
    assert passed == set(notified)
    assert {names[number] for number in passed} == reviewed_allowed() - _seccomp.ABSENT[HOST_ARCH]


# ---------------------------------------------------------------------------------------
# A realistic program


async def double(x: int) -> int:
    return 2 * x


REALISTIC = """
import asyncio, decimal, json, math, multiprocessing, os, re, sqlite3, tempfile, threading

def work():
    with decimal.localcontext() as ctx:
        ctx.prec = 30
        third = str(decimal.Decimal(1) / decimal.Decimal(3))
    return json.dumps({"sqrt2": round(math.sqrt(2), 6), "third": third,
                       "digits": re.findall(r"\\d+", "a1b22c333")})

results = []
threads = [threading.Thread(target=lambda: results.append(work())) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()

doubled, threaded = await asyncio.gather(host.double(21), asyncio.to_thread(work))

db = sqlite3.connect(":memory:")
db.execute("create table t (x integer)")
db.executemany("insert into t values (?)", [(i,) for i in range(10)])
total = db.execute("select sum(x) from t").fetchone()[0]

with tempfile.TemporaryDirectory(dir=".") as d:
    with tempfile.NamedTemporaryFile("w", dir=d, delete=False) as f:
        f.write("kept")
    kept = open(f.name).read()
    with tempfile.TemporaryFile(dir=d) as f:
        f.write(b"anonymous")
        f.seek(0)
        anonymous = f.read().decode()

def child(conn):
    conn.send(sum(range(10)))
    conn.close()

ctx = multiprocessing.get_context("fork")
parent_end, child_end = ctx.Pipe()
process = ctx.Process(target=child, args=(child_end,))
process.start()
from_child = parent_end.recv()
process.join(30)

[len(set(results)), json.loads(threaded), doubled, total, kept, anonymous, from_child,
 process.exitcode]
"""


@BOTH
async def test_a_realistic_program_runs(level: Level) -> None:
    """Threads, asyncio with a host call awaited beside a worker thread, json, re, math,
    decimal, sqlite3 in memory, tempfile in the working directory and a multiprocessing
    Process (fork start method) with a Pipe give the same answers confined as at process."""
    value = await run(REALISTIC, level, tools=[double])
    assert value == [
        1,
        {"sqrt2": 1.414214, "third": "0." + "3" * 30, "digits": ["1", "22", "333"]},
        42,
        45,
        "kept",
        "anonymous",
        45,
        0,
    ]


# ---------------------------------------------------------------------------------------
# The attacks of issue 13

AIO_NR = Path("/proc/sys/fs/aio-nr")
AIO_EVENTS = 256
KSM = Path("/sys/kernel/mm/ksm")


async def aio_nr() -> int:
    return int(AIO_NR.read_text())  # noqa: ASYNC240 (a host tool: a tiny /proc read)


@BOTH
async def test_aio_cannot_take_the_machines_contexts(level: Level) -> None:
    """io_setup (Linux AIO, whose fs.aio-max-nr is one count for the whole machine) fails
    with EPERM confined, and the machine's count does not grow while the program runs; at
    process it reserves the contexts (a few hundred here, not the whole pool)."""
    if not AIO_NR.exists():  # noqa: ASYNC240 (a stat of /proc)
        pytest.skip("this kernel has no Linux AIO")
    before = await aio_nr()
    program = CALLS + textwrap.dedent(f"""
        context = ctypes.c_ulong(0)
        failed = call({nr("io_setup")}, {AIO_EVENTS}, ctypes.byref(context))
        [failed, await host.aio_nr()]
    """)
    failed, during = await run(program, level, tools=[aio_nr])
    if level is Level.PROCESS:
        assert (failed, during - before >= AIO_EVENTS) == (0, True)
    else:
        assert failed == errno.EPERM
        assert during - before < AIO_EVENTS


FAMILIES = {
    "AF_UNIX": (1, 1, 0),
    "AF_INET": (2, 1, 0),
    "AF_INET6": (10, 2, 0),
    "AF_NETLINK/ROUTE": (16, 3, 0),
    "AF_NETLINK/AUDIT": (16, 3, 9),
    "AF_NETLINK/KOBJECT_UEVENT": (16, 3, 15),
    "AF_VSOCK": (40, 1, 0),
    "AF_PACKET": (17, 3, 0),
    "AF_BLUETOOTH": (31, 3, 0),
    "AF_ALG": (38, 5, 0),
    "AF_KEY": (15, 3, 2),
}


@BOTH
async def test_only_unix_inet_and_netlink_route_sockets(level: Level) -> None:
    """Confined, a socket can be opened only for AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK's
    route protocol; AF_VSOCK (which no namespace walls), AF_PACKET, AF_BLUETOOTH, AF_ALG and
    AF_KEY fail with EAFNOSUPPORT, other netlink protocols with EPROTONOSUPPORT. At process
    the netlink audit and uevent sockets open."""
    program = CALLS + textwrap.dedent(f"""
        import socket

        def try_socket(family, kind, protocol):
            socket.socket(family, kind, protocol).close()

        families = {FAMILIES!r}
        {{name: outcome(lambda a=args: try_socket(*a)) for name, args in families.items()}}
    """)
    value = await run(program, level)
    for allowed in ("AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK/ROUTE"):
        assert value[allowed] == "ok"
    if level is Level.PROCESS:
        assert value["AF_NETLINK/AUDIT"] == value["AF_NETLINK/KOBJECT_UEVENT"] == "ok"
        return
    assert value["AF_NETLINK/AUDIT"] == value["AF_NETLINK/KOBJECT_UEVENT"] == "EPROTONOSUPPORT"
    for family in ("AF_VSOCK", "AF_PACKET", "AF_BLUETOOTH", "AF_ALG", "AF_KEY"):
        assert value[family] == "EAFNOSUPPORT", family


@BOTH
async def test_the_shared_view_cannot_be_watched(level: Level) -> None:
    """inotify and fanotify (which would show the host loading modules from the shared
    standard library), mincore and cachestat (which pages of a shared file the host has
    cached) and preadv2 with RWF_NOWAIT (the same, one read at a time) fail confined with
    the filter's errno; at process inotify watches the standard library and mincore
    answers."""
    program = CALLS + textwrap.dedent(f"""
        stdlib = os.path.dirname(os.__file__).encode()
        fd = libc.inotify_init1(os.O_CLOEXEC)
        watch = libc.inotify_add_watch(fd, stdlib, 0x20) if fd >= 0 else -1  # IN_OPEN
        inotify = 0 if watch >= 0 else ctypes.get_errno()
        fanotify = call({nr("fanotify_init")}, 0, 0)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long]
        with open(os.__file__, "rb") as f:
            start = libc.mmap(None, 4096, 1, 1, f.fileno(), 0)  # PROT_READ, MAP_SHARED
            pages = ctypes.create_string_buffer(1)
            mincore = call({nr("mincore")}, ctypes.c_void_p(start), 4096, pages)
            cached = ctypes.create_string_buffer(32)  # struct cachestat
            whole = ctypes.create_string_buffer(16)  # struct cachestat_range: the whole file
            cachestat = call({nr("cachestat")}, f.fileno(), whole, cached, 0)
            nowait = outcome(lambda: os.preadv(f.fileno(), [bytearray(16)], 0, 8))  # RWF_NOWAIT
        [inotify, fanotify, mincore, cachestat, nowait]
    """)
    inotify, fanotify, mincore, cachestat, nowait = await run(program, level)
    if level is Level.PROCESS:
        assert (inotify, mincore) == (0, 0)
        return
    assert (inotify, fanotify, mincore, cachestat) == (errno.EPERM,) * 4
    assert nowait == errno.errorcode[errno.EOPNOTSUPP]  # ENOTSUP: the same number


@BOTH
async def test_the_deny_lists_holes_are_closed(level: Level) -> None:
    """What the old deny list let through fails confined: memfd_secret and io_uring with
    EPERM, KSM merging (madvise MADV_MERGEABLE, prctl PR_SET_MEMORY_MERGE) with EINVAL, and
    a number no kernel has yet with ENOSYS; at process KSM requests are accepted."""
    program = CALLS + textwrap.dedent(f"""
        import mmap
        m = mmap.mmap(-1, 4096)
        address = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m)))
        secret = call({nr("memfd_secret")}, 0)
        uring = call({nr("io_uring_setup")}, 1, ctypes.create_string_buffer(120))
        merge = call({nr("madvise")}, address, 4096, 12)  # MADV_MERGEABLE
        merge_all = call({nr("prctl")}, 67, 0, 0, 0, 0)  # PR_SET_MEMORY_MERGE, off
        [secret, uring, merge, merge_all, call(1000)]
    """)
    secret, uring, merge, merge_all, unknown = await run(program, level)
    assert unknown == errno.ENOSYS
    if level is Level.PROCESS:
        if KSM.exists():  # noqa: ASYNC240 (a stat of /sys)
            assert (merge, merge_all) == (0, 0)
        assert secret != errno.EPERM or uring != errno.EPERM
        return
    assert (secret, uring, merge, merge_all) == (errno.EPERM, errno.EPERM) + (errno.EINVAL,) * 2


SETID = CALLS + textwrap.dedent("""
    import stat
    open("plain", "w").close()
    fd = os.open("plain", os.O_RDONLY)
    created = lambda: os.close(os.open("created", os.O_CREAT | os.O_WRONLY, 0o6755))
    results = {
        "chmod": outcome(lambda: os.chmod("plain", 0o4755)),
        "fchmod": outcome(lambda: os.fchmod(fd, 0o2755)),
        "open": outcome(created),
        "mkfifo": outcome(lambda: os.mkfifo("fifo", 0o2644)),
        "mkdir": outcome(lambda: os.mkdir("dir", 0o2755)),
    }
    setid = sorted(
        name for name in os.listdir(".") if os.lstat(name).st_mode & (stat.S_ISUID | stat.S_ISGID)
    )
    [results, setid]
""")


@BOTH
async def test_nothing_written_carries_set_id_bits(level: Level) -> None:
    """Confined, chmod and fchmod to a set-id mode, a file created with one (os.open) and a
    FIFO with one fail with EPERM, and no set-id bit ends up on disk; mkdir's set-group-id
    is dropped by the kernel at both levels. At process the bits are set."""
    results, setid = await run(SETID, level)
    assert results["mkdir"] == "ok"
    if level is Level.PROCESS:
        assert results == dict.fromkeys(results, "ok")
        assert setid == ["created", "fifo", "plain"]
    else:
        assert results == {**dict.fromkeys(results, "EPERM"), "mkdir": "ok"}
        assert setid == []


def tiny_elf(status: int) -> bytes:
    """A static x86_64 executable of 132 bytes that exits with ``status``: a program's own."""
    code = bytes.fromhex(f"bf{status:02x}000000b83c0000000f05")  # exit(status)
    base, header, entry = 0x400000, 64, 56
    size = header + entry + len(code)
    elf = struct.pack(
        "<4s5B7sHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7, 2, 0x3E, 1,
        base + header + entry, header, 0, 0, header, entry, 1, 0, 0, 0,
    )  # fmt: skip
    return elf + struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000) + code


MEMFD_EXEC = textwrap.dedent("""
    def run_child(how, fd):
        pid = os.fork()
        if pid == 0:
            try:
                if how == "execve":
                    os.execv(f"/proc/self/fd/{fd}", ["x"])
                argv = (ctypes.c_char_p * 2)(b"x", None)
                os._exit(100 + call(EXECVEAT, fd, b"", argv, None, 0x1000))  # AT_EMPTY_PATH
            except OSError as exc:
                os._exit(100 + exc.errno)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    results = {"plain": outcome(lambda: os.close(os.memfd_create("x")))}
    fd = os.memfd_create("x", 0 if results["plain"] == "ok" else 8)  # MFD_NOEXEC_SEAL
    os.write(fd, ELF)
    results["fchmod"] = outcome(lambda: os.fchmod(fd, 0o755))
    results["execve"] = run_child("execve", fd)
    results["execveat"] = run_child("execveat", fd)
    results
""")


@BOTH
async def test_a_memfd_cannot_be_executed(level: Level) -> None:
    """A program that writes an executable into a memfd runs it at process (execve of
    /proc/self/fd/N, and execveat of the descriptor); confined, memfd_create without
    MFD_NOEXEC_SEAL fails with EPERM, a sealed memfd can neither be made executable (EPERM)
    nor executed (EACCES), and execveat answers ENOSYS."""
    if HOST_ARCH != "x86_64":
        pytest.skip("the test executable is x86_64 code")
    program = CALLS + f"ELF = {tiny_elf(42)!r}\nEXECVEAT = {nr('execveat')}\n" + MEMFD_EXEC
    results = await run(program, level)
    if level is Level.PROCESS:
        assert results == {"plain": "ok", "fchmod": "ok", "execve": 42, "execveat": 42}
    else:
        assert results == {
            "plain": "EPERM",
            "fchmod": "EPERM",
            "execve": 100 + errno.EACCES,
            "execveat": 100 + errno.ENOSYS,
        }
