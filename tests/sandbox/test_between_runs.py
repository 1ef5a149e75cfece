"""Two runs at once cannot reach each other, through anything the machine lets them share.

Run A sets up every kind of meeting point a process can offer on Linux and reports each one
to the host: a UDP and a TCP socket on the loopback, a stream and a datagram unix socket
under an abstract name, a unix socket, a file and a directory in ``/tmp``, a file in its
working directory, a SysV shared memory segment, message queue and semaphore set under a
fixed key, a POSIX message queue and a POSIX shared memory file under fixed names, and a
handler for ``SIGUSR1``. Run B, started at the same time, waits (through a host tool) until
A is ready, then tries each of them with what A reported: it sends to the ports and names,
reads and writes the paths, attaches and writes the IPC objects, signals A's pid (as A sees
it, and as the host sees it) and looks for it in ``/proc``. A then looks at what arrived.

At ``process`` each attack gets through but the signal: that is the control, the proof that
each one is observable (the two runs share the host's network, file system, IPC and PID
namespaces). The signal is the exception where the kernel scopes signals with Landlock: the
``process`` level's own wall keeps each run's signals in (``test_process_walls.py``).
At ``confined`` nothing of A is seen by B, and nothing of B arrives at A. Every attack is
one a shared part would let through: a network namespace with a loopback shared by both
runs lets the UDP datagram through (Landlock stops TCP, not UDP); a shared ``/tmp`` or
working directory, the files; a shared PID namespace, the listing of A's pid in ``/proc``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import secrets
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

import sandbox
from runner._landlock import signal_scope_gap
from sandbox import Budget, Level, RunResult, Spawn
from sandbox._children import _supervisor
from tests.helpers import LOOPBACK_PROBE
from tests.host import child_levels, needs_confinement

from .conftest import run_processes

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

#: What every attack is called, in the reports of both runs.
ATTACKS = (
    "udp",
    "tcp",
    "abstract_stream",
    "abstract_dgram",
    "tmp_socket",
    "tmp_file",
    "tmp_dir",
    "workdir_file",
    "sysv_shm",
    "sysv_msg",
    "sysv_sem",
    "posix_mq",
    "posix_shm",
    "signal",
    "proc",
)

#: Run A: sets up each meeting point, reports it, waits for B, then looks at what arrived.
LISTENER = r"""
import ctypes, os, signal, socket, time

TOKEN = {token!r}
KEY = {key}
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.mq_open.restype = ctypes.c_int
setup, received, seen_by_us = {{}}, [], {{}}
signals = []
signal.signal(signal.SIGUSR1, lambda *_: signals.append(1))

def check(rc):
    if rc == -1 or rc is None:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc

def attempt(name, make):
    try:
        seen_by_us[name] = make()
        setup[name] = "ok"
    except BaseException as exc:
        setup[name] = type(exc).__name__

def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    return s

def tcp():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    return s

def unix(kind, address, listen):
    s = socket.socket(socket.AF_UNIX, kind)
    s.bind(address)
    if not address.startswith("\0"):
        os.chmod(address, 0o777)  # another uid may send to it (each confined run has its own)
    if listen:
        s.listen(8)
    return s

def tmp_file():
    with open(f"/tmp/{{TOKEN}}-a", "w") as f:
        f.write(TOKEN)
    return f"/tmp/{{TOKEN}}-a"

def tmp_dir():
    os.mkdir(f"/tmp/{{TOKEN}}-dir", 0o777)
    os.chmod(f"/tmp/{{TOKEN}}-dir", 0o777)
    return f"/tmp/{{TOKEN}}-dir"

def workdir_file():
    with open("a.txt", "w") as f:
        f.write(TOKEN)
    os.chmod(os.getcwd(), 0o777)
    return os.path.join(os.getcwd(), "a.txt")

def sysv_shm():
    shm = check(libc.shmget(KEY, 4096, 0o1000 | 0o666))  # IPC_CREAT
    address = check(libc.shmat(shm, None, 0))
    ctypes.memmove(address, TOKEN.encode(), len(TOKEN))
    return (shm, address)

def sysv_msg():
    return check(libc.msgget(KEY, 0o1000 | 0o666))

def sysv_sem():
    return check(libc.semget(KEY, 1, 0o1000 | 0o666))

def posix_mq():
    flags = os.O_CREAT | os.O_RDWR | os.O_NONBLOCK
    return check(libc.mq_open(f"/{{TOKEN}}".encode(), flags, 0o666, None))

def posix_shm():
    fd = os.open(f"/dev/shm/{{TOKEN}}", os.O_CREAT | os.O_RDWR, 0o666)
    os.fchmod(fd, 0o666)
    os.write(fd, TOKEN.encode())
    return fd

attempt("udp", udp)
attempt("tcp", tcp)
attempt("abstract_stream", lambda: unix(socket.SOCK_STREAM, f"\0{{TOKEN}}-stream", True))
attempt("abstract_dgram", lambda: unix(socket.SOCK_DGRAM, f"\0{{TOKEN}}-dgram", False))
attempt("tmp_socket", lambda: unix(socket.SOCK_DGRAM, f"/tmp/{{TOKEN}}.sock", False))
attempt("tmp_file", tmp_file)
attempt("tmp_dir", tmp_dir)
attempt("workdir_file", workdir_file)
attempt("sysv_shm", sysv_shm)
attempt("sysv_msg", sysv_msg)
attempt("sysv_sem", sysv_sem)
attempt("posix_mq", posix_mq)
attempt("posix_shm", posix_shm)
for name in ("udp", "tcp", "abstract_stream", "abstract_dgram", "tmp_socket"):
    if name in seen_by_us:
        seen_by_us[name].setblocking(False)

host.a_ready({{
    "pid": os.getpid(),
    "cwd": os.getcwd(),
    "udp": seen_by_us["udp"].getsockname()[1] if "udp" in seen_by_us else None,
    "tcp": seen_by_us["tcp"].getsockname()[1] if "tcp" in seen_by_us else None,
    "setup": setup,
}})
host.a_wait()  # until B has tried everything
time.sleep(0.05)  # a signal or a datagram B sent last is there by now

def arrived(name, look):
    if name not in seen_by_us:
        return
    try:
        if look(seen_by_us[name]):
            received.append(name)
    except (BlockingIOError, OSError):
        pass

def datagram(s):
    return s.recv(4096) == b"from B"

def connection(s):
    peer, _ = s.accept()
    peer.settimeout(1)
    return peer.recv(4096) == b"from B"

def sysv_shm_written(shm):
    return ctypes.string_at(shm[1], 6) == b"from B"

def sysv_msg_sent(queue):
    buffer = ctypes.create_string_buffer(8 + 64)
    return check(libc.msgrcv(queue, buffer, 64, 0, 0o4000)) > 0  # IPC_NOWAIT

def sysv_sem_raised(sems):
    return check(libc.semctl(sems, 0, 12)) > 0  # GETVAL

def posix_mq_sent(mq):
    buffer = ctypes.create_string_buffer(8192)
    return check(libc.mq_receive(mq, buffer, 8192, None)) > 0

arrived("udp", datagram)
arrived("tcp", connection)
arrived("abstract_stream", connection)
arrived("abstract_dgram", datagram)
arrived("tmp_socket", datagram)
arrived("tmp_file", lambda _: os.path.exists(f"/tmp/{{TOKEN}}-b"))
arrived("tmp_dir", lambda path: os.path.exists(f"{{path}}/b"))
arrived("workdir_file", lambda _: os.path.exists("b.txt"))
arrived("sysv_shm", sysv_shm_written)
arrived("sysv_msg", sysv_msg_sent)
arrived("sysv_sem", sysv_sem_raised)
arrived("posix_mq", posix_mq_sent)
arrived("posix_shm", lambda fd: os.pread(fd, 6, 0) == b"from B")
if signals:
    received.append("signal")

# What a run at `process` leaves in the host's IPC namespace and /dev/shm: gone with it.
if "sysv_shm" in seen_by_us:
    libc.shmdt(ctypes.c_void_p(seen_by_us["sysv_shm"][1]))
    libc.shmctl(seen_by_us["sysv_shm"][0], 0, None)  # IPC_RMID
if "sysv_msg" in seen_by_us:
    libc.msgctl(seen_by_us["sysv_msg"], 0, None)
if "sysv_sem" in seen_by_us:
    libc.semctl(seen_by_us["sysv_sem"], 0, 0)
if "posix_mq" in seen_by_us:
    libc.mq_unlink(f"/{{TOKEN}}".encode())
if "posix_shm" in seen_by_us:
    os.unlink(f"/dev/shm/{{TOKEN}}")
{{"setup": setup, "received": received}}
"""

#: Run B: tries each of A's meeting points with what A reported; says what it reached.
ATTACKER = r"""
import ctypes, os, signal, socket

TOKEN = {token!r}
KEY = {key}
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.mq_open.restype = ctypes.c_int
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # B signals pids that may be its own
a = host.b_wait()
outcomes, reached = {{}}, []

def check(rc):
    if rc == -1 or rc is None:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return rc

def attack(name, go):
    try:
        if go():
            reached.append(name)
        outcomes[name] = "ok"
    except BaseException as exc:
        outcomes[name] = type(exc).__name__

def send(kind, address):
    with socket.socket(kind, socket.SOCK_DGRAM) as s:
        s.sendto(b"from B", address)
    return False  # whether it arrived, A says

def connect(kind, address):
    with socket.socket(kind, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        s.connect(address)
        s.sendall(b"from B")
    return True

def read_and_write(path, ours):
    with open(path) as f:
        seen = f.read() == TOKEN
    with open(ours, "w") as f:
        f.write("from B")
    return seen

def into_dir(path):
    with open(f"{{path}}/b", "w") as f:
        f.write("from B")
    return True

def sysv_shm():
    shm = check(libc.shmget(KEY, 0, 0))
    address = check(libc.shmat(shm, None, 0))
    seen = ctypes.string_at(address, len(TOKEN)) == TOKEN.encode()
    ctypes.memmove(address, b"from B", 6)
    libc.shmdt(ctypes.c_void_p(address))
    return seen

def sysv_msg():
    queue = check(libc.msgget(KEY, 0))
    message = ctypes.create_string_buffer(b"\1\0\0\0\0\0\0\0from B", 8 + 6)
    check(libc.msgsnd(queue, message, 6, 0o4000))
    return True

def sysv_sem():
    sems = check(libc.semget(KEY, 0, 0))
    check(libc.semctl(sems, 0, 16, 1))  # SETVAL
    return True

def posix_mq():
    mq = check(libc.mq_open(f"/{{TOKEN}}".encode(), os.O_WRONLY | os.O_NONBLOCK))
    check(libc.mq_send(mq, b"from B", 6, 0))
    return True

def posix_shm():
    fd = os.open(f"/dev/shm/{{TOKEN}}", os.O_RDWR)
    seen = os.pread(fd, len(TOKEN), 0) == TOKEN.encode()
    os.pwrite(fd, b"from B", 0)
    os.close(fd)
    return seen

def signal_a():
    for pid in {{a["pid"], a["host_pid"]}}:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGUSR1)
            except OSError:
                pass
    return False  # whether it arrived, A says

def proc():
    others = {{int(p) for p in os.listdir("/proc") if p.isdigit()}} - {{os.getpid()}}
    return bool(others & {{a["pid"], a["host_pid"]}})

attack("udp", lambda: send(socket.AF_INET, ("127.0.0.1", a["udp"] or 9)))
attack("tcp", lambda: connect(socket.AF_INET, ("127.0.0.1", a["tcp"] or 9)))
attack("abstract_stream", lambda: connect(socket.AF_UNIX, f"\0{{TOKEN}}-stream"))
attack("abstract_dgram", lambda: send(socket.AF_UNIX, f"\0{{TOKEN}}-dgram"))
attack("tmp_socket", lambda: send(socket.AF_UNIX, f"/tmp/{{TOKEN}}.sock"))
attack("tmp_file", lambda: read_and_write(f"/tmp/{{TOKEN}}-a", f"/tmp/{{TOKEN}}-b"))
attack("tmp_dir", lambda: into_dir(f"/tmp/{{TOKEN}}-dir"))
attack("workdir_file", lambda: read_and_write(f"{{a['cwd']}}/a.txt", f"{{a['cwd']}}/b.txt"))
attack("sysv_shm", sysv_shm)
attack("sysv_msg", sysv_msg)
attack("sysv_sem", sysv_sem)
attack("posix_mq", posix_mq)
attack("posix_shm", posix_shm)
attack("signal", signal_a)
attack("proc", proc)
{{"outcomes": outcomes, "reached": reached}}
"""

#: What each attack needs to get through at ``process``, where every one must (on a root
#: host the runs are the same uid; elsewhere the same unprivileged one), but the signal
#: where the level's Landlock scope keeps it in.
AT_PROCESS_A_RECEIVES = set(ATTACKS) - {"proc"} - (set() if signal_scope_gap() else {"signal"})
AT_PROCESS_B_SEES = {
    "tcp",
    "abstract_stream",
    "tmp_file",
    "tmp_dir",
    "workdir_file",
    "sysv_shm",
    "sysv_msg",
    "sysv_sem",
    "posix_mq",
    "posix_shm",
    "proc",
}


def host_pid_of(cwd: str) -> int | None:
    """The host pid of the run whose runner's working directory is ``cwd`` (as it sees it)."""
    for proc in run_processes():
        with contextlib.suppress(psutil.Error):
            if proc.cwd() == cwd:
                return proc.pid
    return None


def remove_ipc(key: int, token: str) -> None:
    """Remove, from the host, what a run at ``process`` may have left under ``key``/``token``
    (a run killed before its own clean-up)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for get, ctl in ((libc.shmget, libc.shmctl), (libc.msgget, libc.msgctl)):
        ident = get(key, 0, 0)
        if ident >= 0:
            ctl(ident, 0, None)  # IPC_RMID
    ident = libc.semget(key, 0, 0)
    if ident >= 0:
        libc.semctl(ident, 0, 0)
    libc.mq_unlink(f"/{token}".encode())
    for path in (f"/dev/shm/{token}", f"/tmp/{token}-a", f"/tmp/{token}-b", f"/tmp/{token}.sock"):
        with contextlib.suppress(OSError):
            os.unlink(path)
    for path in (f"/tmp/{token}-dir/b", f"/tmp/{token}-dir"):
        with contextlib.suppress(OSError):
            (os.rmdir if path.endswith("-dir") else os.unlink)(path)


async def two_runs_at_once(level: Level) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run A and B at the same time at ``level``; their values (see the module docstring)."""
    token = f"sandbox-between-{secrets.token_hex(6)}"
    key = random.randrange(0x10000000, 0x7FFFFFFF)
    a_ready, b_done = anyio.Event(), anyio.Event()
    a_info: dict[str, Any] = {}

    async def a_ready_(info: dict[str, Any]) -> None:
        a_info.update(info, host_pid=host_pid_of(info["cwd"]) or -1)
        a_ready.set()

    async def a_wait() -> None:
        await b_done.wait()

    async def b_wait() -> dict[str, Any]:
        await a_ready.wait()
        return a_info

    tools_a = [sandbox.Tool(a_ready_, name="a_ready"), sandbox.Tool(a_wait)]
    tools_b = [sandbox.Tool(b_wait)]
    budget = Budget(wall_clock=30.0)
    results: dict[str, RunResult] = {}

    async def run(name: str, program: str, tools: list[sandbox.Tool]) -> None:
        try:
            source = program.format(token=token, key=key)
            results[name] = await sandbox.run(source, tools=tools, budget=budget, level=level)
        finally:
            # Whichever way a run ends, the other one does not wait for it in vain.
            (a_ready if name == "a" else b_done).set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", LISTENER, tools_a)
            tg.start_soon(run, "b", ATTACKER, tools_b)
    finally:
        remove_ipc(key, token)
    for name, result in results.items():
        assert result.ok, f"run {name}: {result.error}\n{result.stderr}"
    return results["a"].value, results["b"].value


# Confined first: the fast tier keeps only the first level, and the walls are the point.
@pytest.mark.parametrize("level", child_levels()[::-1])
async def test_two_runs_cannot_reach_each_other(level: Level) -> None:
    """At ``confined``, B reaches none of A's meeting points and nothing of B arrives at A;
    at ``process``, the control, every attack gets through (each one is observable)."""
    a, b = await two_runs_at_once(level)
    assert set(a["setup"]) | set(b["outcomes"]) == set(ATTACKS)
    if level is Level.PROCESS:
        assert set(a["received"]) == AT_PROCESS_A_RECEIVES, (a, b)
        assert set(b["reached"]) == AT_PROCESS_B_SEES, (a, b)
        return
    assert (a["received"], b["reached"]) == ([], []), (a, b)
    # The meeting points a run can still make for itself inside its walls are made: B's
    # failure to reach them is the walls', not a failed set-up. (TCP is refused outright by
    # Landlock, SysV and POSIX message queues by seccomp; /dev/shm is not in the view.)
    made = {name for name, outcome in a["setup"].items() if outcome == "ok"}
    assert made >= {
        "udp",
        "abstract_stream",
        "abstract_dgram",
        "tmp_socket",
        "tmp_file",
        "tmp_dir",
        "workdir_file",
    }, a["setup"]


# --- what the runs share: the view a template built -------------------------------------

#: Run in a process of its own (one thread: ``setns`` into a mount namespace needs that):
#: join the mount namespace at ``sys.argv[1]`` and say what is there.
INSPECT_VIEW = """
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
if libc.setns(fd, 0x00020000) != 0:  # CLONE_NEWNS
    raise OSError(ctypes.get_errno(), "setns")
print(json.dumps([sorted(os.listdir("/tmp")), sorted(os.listdir("/proc")),
                  bool(os.statvfs("/").f_flag & os.ST_RDONLY), sorted(os.listdir("/"))]))
"""


def descriptors(pid: int) -> dict[str, str]:
    """What each open descriptor of ``pid`` is (one closed while this reads is left out)."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{fd}"
        with contextlib.suppress(FileNotFoundError):
            found[path] = os.readlink(path)
    return found


def mount_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/mnt")


@needs_confinement()
async def test_runs_copy_a_shared_view_and_leave_it_as_built(spawn: Spawn) -> None:
    """A root host's zygote builds the view once and forks each warm confined runner PID 1
    of its namespace (no second fork): the runner's parent is the zygote, and its mount
    namespace a copy of the shared one. What a run mounts and writes is in its copy only:
    the shared view keeps ``/tmp`` and ``/proc`` empty and its root read-only."""
    if os.geteuid() != 0:
        pytest.skip("only a root host shares a view (an unprivileged one builds each)")

    def runner() -> list[Any]:
        (proc,) = run_processes()
        status = Path(f"/proc/{proc.pid}/status").read_text()
        nspid = status.split("NSpid:")[1].split("\n")[0].split()
        return [proc.ppid(), nspid[-1], mount_namespace(proc.pid)]

    program = (
        "import os\nopen('/tmp/x', 'w').write('x')\nopen('y', 'w').write('y')\n"
        "[os.getpid(), sorted(os.listdir('/tmp')), host.runner()]"
    )
    result = await sandbox.run(program, tools=[runner], level=Level.CONFINED)
    assert result.ok, result.error
    pid, tmp, (parent, pid_inside, namespace) = result.value
    assert (pid, pid_inside) == (1, "1")
    assert "x" in tmp
    zygote = _supervisor.zygote_pid()
    assert zygote is not None
    views = {path: name for path, name in descriptors(zygote).items() if name.startswith("mnt:")}
    assert parent == zygote  # (a cold runner's PID 1 comes up to it too)
    if spawn is Spawn.COLD:  # the reference point: a fresh runner builds all its walls
        return
    assert len(views) == 1
    ((path, shared),) = views.items()
    assert namespace not in (shared, mount_namespace(zygote))
    inspected = await anyio.run_process([sys.executable, "-I", "-c", INSPECT_VIEW, path])
    tmp, proc, read_only, root = json.loads(inspected.stdout)
    assert (tmp, proc, read_only) == ([], [], True)
    assert {"dev", "proc", "tmp"} <= set(root)


#: A run's network namespace and what is in it: the loopback up, a datagram to itself.
NETWORK = f"""
import fcntl, os, socket, struct
namespace = os.readlink("/proc/self/ns/net")
{LOOPBACK_PROBE}
[namespace, socket.if_nameindex(), bool(flags & 1), echoed, await host.held()]
"""


def network_namespaces(pid: int) -> set[str]:
    """The network namespaces ``pid`` holds descriptors of."""
    return {name for name in descriptors(pid).values() if name.startswith("net:")}


@needs_confinement()
async def test_each_run_has_a_network_namespace_of_its_own_made_ahead(spawn: Spawn) -> None:
    """A root zygote makes network namespaces ahead, while it has nothing to serve, and gives
    each to one warm confined child: the run's namespace is one the zygote held before the
    child was forked, and no longer holds while the run has it. Whoever made it, each run's
    is its own (two runs at once have two, neither the host's) with only its loopback, up.
    """
    if os.geteuid() != 0:
        pytest.skip("only a root zygote makes network namespaces ahead")
    from runner._zygote import _SPARE_NETWORKS

    host_namespace = os.readlink("/proc/self/ns/net")
    both_in = anyio.Event()
    arrived = 0

    def zygote() -> int:
        pid = _supervisor.zygote_pid()
        assert pid is not None
        return pid

    async def held() -> list[str]:
        """The zygote's network namespaces, once both runs of a pair are this far."""
        nonlocal arrived
        arrived += 1
        if arrived % 2 == 0:
            both_in.set()
        with anyio.fail_after(10):
            await both_in.wait()
        return sorted(network_namespaces(zygote()) - {host_namespace})

    async def spares() -> set[str]:
        """The zygote's spare namespaces, once it has made all it keeps."""
        with anyio.fail_after(10):
            # Another process's descriptors: no event to wait for.
            while len(found := network_namespaces(zygote()) - {host_namespace}) < _SPARE_NETWORKS:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        return found

    async def run(into: list[Any]) -> None:
        result = await sandbox.run(NETWORK, tools=[held], level=Level.CONFINED)
        assert result.ok, result.error
        into.append(result.value)

    for pair in range(3):
        both_in = anyio.Event()
        ahead = await spares() if pair and spawn is Spawn.ZYGOTE else None
        values: list[Any] = []
        async with anyio.create_task_group() as group:
            group.start_soon(run, values)
            group.start_soon(run, values)
        namespaces = set()
        for namespace, interfaces, up, echoed, held_meanwhile in values:
            assert (interfaces, up, echoed) == ([[1, "lo"]], True, "ping")
            assert namespace != host_namespace
            assert namespace not in held_meanwhile
            if ahead is not None:  # forked on demand once the zygote had made its spares
                assert namespace in ahead
            namespaces.add(namespace)
        assert len(namespaces) == 2
    if spawn is not Spawn.COLD:  # the first warm confined child set the zygote making them
        assert len(await spares()) == _SPARE_NETWORKS
