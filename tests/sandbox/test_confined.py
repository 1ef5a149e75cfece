"""The confined level's walls, each attacked by a program that gets through at `process`.

Every attack runs at both levels: at ``process`` it must succeed (so the test can fail),
at ``confined`` it must be stopped.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil
import pytest

import sandbox
from runner._landlock import signal_scope_gap
from sandbox import Budget, Kind, Level, RunResult
from sandbox._children import WORKDIR_PREFIX, _supervisor, _uid, workdir_bases
from tests.executables import EXIT_CODE, euid_probe, exit_probe, needs_x86_64
from tests.host import ORDINARY_USER, needs_confinement, needs_run_cgroups, skip_as_ordinary_user

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("spawn"),
    needs_confinement(),
]

BOTH = pytest.mark.parametrize("level", [Level.PROCESS, Level.CONFINED])


async def attack(
    program: str, level: Level, tools: list[Callable[..., Any]] | None = None, **budget: object
) -> RunResult:
    budget.setdefault("wall_clock", 30.0)
    result = await sandbox.run(
        program,
        tools=tools or [],
        budget=Budget(**budget),  # type: ignore[arg-type]
        level=level,
    )
    assert result.ok, result.error
    return result


def outcome(code: str) -> str:
    """A program that runs ``code`` and reports ``"ok"`` or the exception's name."""
    body = "\n".join("    " + line for line in code.strip().splitlines())
    return (
        f"try:\n{body}\n    outcome = 'ok'\n"
        "except BaseException as exc:\n    outcome = type(exc).__name__\noutcome\n"
    )


@pytest.fixture
def canary() -> Iterator[Path]:
    """A file on the host, outside anything a run is given."""
    path = Path("/var/tmp") / f"sandbox-canary-{os.getpid()}"
    path.write_text("host secret")
    yield path
    path.unlink()


@BOTH
async def test_reading_a_host_file(level: Level, canary: Path) -> None:
    """A host file outside the view cannot be read (nor /etc/passwd)."""
    result = (
        await attack(f"open({str(canary)!r}).read()", level) if level is Level.PROCESS else None
    )
    if level is Level.PROCESS:
        assert result is not None
        assert result.value == "host secret"
        return
    result = await attack(outcome(f"open({str(canary)!r}).read()"), level)
    assert result.value in ("FileNotFoundError", "PermissionError")
    result = await attack(outcome("open('/etc/passwd').read()"), level)
    assert result.value in ("FileNotFoundError", "PermissionError")


@BOTH
async def test_writing_outside_the_working_directory(level: Level) -> None:
    """Files outside the run's working directory cannot be written; inside they can."""
    # The runner's own package: in the confined view, read-only, wherever the checkout is.
    import runner

    target = Path(runner.__file__).parent / f"written-by-a-run-{os.getpid()}"
    if level is Level.PROCESS and not os.access(target.parent, os.W_OK):
        skip_as_ordinary_user(
            f"the host's own user cannot write to {target.parent} either: nothing for "
            "confined to stop that process does not"
        )
    try:
        result = await attack(outcome(f"open({str(target)!r}, 'w').write('x')"), level)
        # At confined the view holds the package at /sandbox/lib/runner, not at its host path.
        expected = "ok" if level is Level.PROCESS else "FileNotFoundError"
        assert result.value == expected
        assert target.exists() == (level is Level.PROCESS)
        if level is Level.CONFINED:
            inside = f"/sandbox/lib/runner/{target.name}"
            result = await attack(outcome(f"open({inside!r}, 'w').write('x')"), level)
            assert result.value in ("OSError", "PermissionError")  # read-only
            assert not target.exists()
    finally:
        target.unlink(missing_ok=True)
    result = await attack(outcome("open('mine.txt', 'w').write('x')"), level)
    assert result.value == "ok"


def own_cmdline() -> bytes:
    with open("/proc/self/cmdline", "rb") as f:
        return f.read()


@BOTH
async def test_seeing_host_processes_and_environment(
    level: Level, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's processes are not visible (confined), nor its environment (both levels)."""
    monkeypatch.setenv("SANDBOX_HOST_SECRET", "s3cret")
    host_pid = os.getpid()
    # A pid number alone proves nothing (the run's namespace has small pids of its own, and
    # the test may itself run in a namespace): what is seen must be the host's process.
    program = f"""
import os
try:
    host_cmdline = open('/proc/{host_pid}/cmdline', 'rb').read()
except OSError:
    host_cmdline = b''
[os.getpid(), sorted(os.environ), host_cmdline.hex()]
"""
    result = await attack(program, level)
    pid, env, seen = result.value
    read_host = bytes.fromhex(seen) == own_cmdline()
    assert "SANDBOX_HOST_SECRET" not in env  # the environment is scrubbed at every level
    assert set(env) <= {"HOME", "LANG", "PATH", "PYTHONIOENCODING", "TMPDIR"}
    if level is Level.PROCESS:
        assert read_host is True  # the wall confined adds
    else:
        assert (pid, read_host) == (1, False)


@BOTH
async def test_signalling_and_ptracing_the_host(level: Level) -> None:
    """The host cannot be signalled or traced: at ``confined`` it is not even there (the run's
    PID namespace); at ``process`` it is, and Landlock's scope refuses both, where the kernel
    has it (the process level's wall: tests/sandbox/test_process_walls.py)."""
    host_pid = os.getpid()
    ptrace = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, {host_pid}, 0, 0) != 0:  # PTRACE_ATTACH
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
libc.ptrace(17, {host_pid}, 0, 0)  # PTRACE_DETACH
"""
    signalled = await attack(outcome(f"import os\nos.kill({host_pid}, 0)"), level)
    if level is Level.PROCESS and signal_scope_gap() is not None:
        assert signalled.value == "ok"  # (tracing it is as the host's ptrace_scope says)
        return
    refused = "PermissionError" if level is Level.PROCESS else "ProcessLookupError"
    assert signalled.value == refused  # before the trace: attaching would stop this process
    traced = await attack(outcome(ptrace), level)
    assert traced.value in ("OSError", "PermissionError", "ProcessLookupError")


@BOTH
async def test_network_connections(level: Level) -> None:
    """No connection reaches the host, not even a socket listening on its loopback."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        program = outcome(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), 5).close()"
        )
        result = await attack(program, level)
    if level is Level.PROCESS:
        assert result.value == "ok"
    else:
        assert result.value in ("ConnectionRefusedError", "PermissionError", "OSError")
    if level is Level.CONFINED:
        result = await attack("import socket\n[name for _, name in socket.if_nameindex()]", level)
        assert result.value == ["lo"]


SYSCALLS = {
    "mount": "libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)",
    "unshare": "libc.unshare(0x10000000)",  # CLONE_NEWUSER
    "bpf": "libc.syscall(321, 0, 0, 0)",  # bpf(BPF_MAP_CREATE) on x86_64
    "ptrace-self": "libc.ptrace(0, 0, 0, 0)",  # PTRACE_TRACEME
}


@pytest.mark.parametrize("call", sorted(SYSCALLS))
async def test_privileged_system_calls_are_refused(call: str) -> None:
    """mount, unshare, bpf and ptrace fail with EPERM inside (seccomp and no capabilities)."""
    program = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
rc = {SYSCALLS[call]}
[rc, ctypes.get_errno()]
"""
    result = await attack(program, Level.CONFINED)
    import errno

    assert result.value[0] == -1
    assert result.value[1] in (errno.EPERM, errno.EACCES, errno.ENOSYS)


@needs_run_cgroups(
    "memfd and tmpfs pages are charged to the run's memory cgroup, and an rlimit per "
    "process does not count them (sandbox.substitutes says so)"
)
async def test_memory_cannot_escape_through_memfd_or_tmp() -> None:
    """memfd and /tmp pages count against max_memory; the run is ended at the limit."""
    memfd = """
import os
fd = os.memfd_create("x", os.MFD_CLOEXEC | 0x8)  # MFD_NOEXEC_SEAL (Linux 6.3)
chunk = b"x" * (1 << 20)
for _ in range(512):
    os.write(fd, chunk)
"""
    result = await sandbox.run(
        memfd, budget=Budget(wall_clock=30, max_memory=128 << 20), level=Level.CONFINED
    )
    assert (result.kind, result.cause) == (Kind.LIMIT, "memory"), result.error
    tmp = outcome(
        "chunk = b'x' * (1 << 20)\nwith open('/tmp/fill', 'wb') as f:\n"
        "    for _ in range(512):\n        f.write(chunk)"
    )
    result = await sandbox.run(
        tmp, budget=Budget(wall_clock=30, max_memory=128 << 20), level=Level.CONFINED
    )
    # The private /tmp is small (64 MiB): it fills before memory does.
    assert result.ok, result.error
    assert result.value == "OSError"
    # /dev/shm is not in the view at all.
    result = await attack(outcome("open('/dev/shm/x', 'w')"), Level.CONFINED)
    assert result.value in ("FileNotFoundError", "PermissionError", "OSError")


async def test_nothing_survives_the_run() -> None:
    """A process left running inside is gone when the run ends (checked by the fixture too)."""
    program = """
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(600)
    os._exit(0)
"left one behind"
"""
    result = await attack(program, Level.CONFINED)
    assert result.value == "left one behind"


def test_doctor_reports_what_this_host_provides() -> None:
    """`sandbox doctor --json` reports the probes; confined is available iff no wall is missing."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "sandbox", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(out.stdout)
    assert set(report["namespaces"]) >= {"user", "mount", "net", "ipc", "uts", "pid"}
    assert report["landlock_abi"] >= 1
    assert report["levels"]["confined"]["missing_walls"] == {}
    # A root host gives every run a host uid of its own; an unprivileged one says why not.
    assert (report["own_uid_per_run"] is True) == (os.geteuid() == 0)
    assert set(report["levels"]["in_process"]["unenforceable"]) >= {"wall_clock", "max_memory"}


async def test_confined_refuses_to_run_without_every_wall(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host missing a wall, confined refuses (naming it) instead of running with fewer."""
    import sandbox._engine._api as api

    monkeypatch.setattr(api, "confinement_gaps", lambda: {"landlock": "no Landlock here"})
    with pytest.raises(sandbox.ConfinementUnavailable, match="landlock") as info:
        await sandbox.run("1", level=Level.CONFINED)
    assert info.value.gaps == {"landlock": "no Landlock here"}


# --- the host's users and the host's kernel quotas ----------------------------------------

NOBODY = 65534


def runner_holding(cwd: str, marker: str) -> psutil.Process:
    """The runner of the run whose working directory (``cwd``, as the run names it) holds
    the file ``marker``: a child of the zygote (a confined run's working directory has
    the same name in every run, each in its own view)."""
    zygote = _supervisor.zygote_pid()
    assert zygote is not None
    found = []
    for proc in psutil.Process(zygote).children():
        with contextlib.suppress(psutil.Error):
            if proc.cwd() == cwd and os.path.lexists(f"/proc/{proc.pid}/root{cwd}/{marker}"):
                found.append(proc)
    (runner,) = found
    return runner


def host_workdirs() -> list[str]:
    """The working directories this host made for its runs (the idle children's of a
    pool included) and has not removed yet."""
    prefixes = [os.path.join(base, f"{WORKDIR_PREFIX}{os.getpid()}-") for base in workdir_bases()]
    return [path for prefix in prefixes for path in glob.glob(f"{glob.escape(prefix)}*")]


def as_nobody(path: str) -> int | str:
    """Run ``path`` as the host's ``nobody``: its exit status, or why it could not run."""
    try:
        done = subprocess.run(
            [path], user=NOBODY, group=NOBODY, extra_groups=[], timeout=30, check=False
        )
    except OSError as exc:
        return errno.errorcode[exc.errno or 0]
    return done.returncode


@needs_x86_64
@BOTH
async def test_a_host_user_cannot_become_root_through_what_the_program_writes(
    level: Level,
) -> None:
    """A program writes an executable, opens its working directory to all and sets the
    file's set-user-id bit; while the run lasts, an ordinary host user tries to run it,
    where the host keeps the working directory and through the run's own root. At
    ``process`` it runs as root; at ``confined`` it is nowhere on the host, what the program
    writes belongs to the run's own unprivileged uid, and no host user reaches it."""
    if ORDINARY_USER:
        skip_as_ordinary_user(
            "the program is the host's own user, with no root to give away, and only root "
            "can try what it wrote as another host user"
        )

    def look(cwd: str) -> dict[str, Any]:
        runner = runner_holding(cwd, "rootme")
        through_root = f"/proc/{runner.pid}/root{cwd}/rootme"
        seen: dict[str, Any] = {"uids": list(runner.uids())}
        # At process the working directory is the host's; at confined, the host's stay
        # empty (the program's is in its view, named /tmp/work).
        on_host = [f"{d}/rootme" for d in (cwd, *host_workdirs()) if os.path.lexists(f"{d}/rootme")]
        seen["on_host"] = bool(on_host)
        for name, path in (("host", f"{cwd}/rootme"), ("through_root", through_root)):
            seen[name] = as_nobody(path)
        seen["owner"] = os.stat(through_root).st_uid
        seen["nosuid"] = bool(os.statvfs(through_root).f_flag & os.ST_NOSUID)
        return seen

    async def try_it(cwd: str) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(look, cwd)

    program = f"""
import os
with open("rootme", "wb") as f:
    f.write(bytes.fromhex({euid_probe().hex()!r}))
done = {{}}
for name, path, mode in [("dir", ".", 0o755), ("suid", "rootme", 0o4755), ("x", "rootme", 0o755)]:
    try:
        os.chmod(path, mode)
        done[name] = "ok"
    except OSError as exc:
        done[name] = exc.errno
    if name == "suid" and done[name] == "ok":
        break
[done, await host.try_it(cwd=os.getcwd())]
"""
    result = await attack(program, level, [try_it])
    done, seen = result.value
    assert done["dir"] == "ok"
    if level is Level.PROCESS:
        assert seen["on_host"]
        assert seen["host"] == 0  # the ordinary user ran it as root
        assert seen["owner"] == 0
        return
    assert not seen["on_host"]  # not on the host at all (the host's directory stays empty)
    assert seen["host"] in ("ENOENT", "EACCES")
    assert seen["through_root"] == "EACCES"  # nobody cannot reach the run's root
    uids = set(seen["uids"])
    assert len(uids) == 1
    (uid,) = uids
    assert seen["owner"] == uid
    if os.geteuid() == 0:
        assert _uid.FIRST <= uid < _uid.FIRST + _uid.COUNT  # the run's own, not root
    assert seen["nosuid"]


#: A program that holds every queued signal its uid may have (``RLIMIT_SIGPENDING``) and
#: every inotify instance (where seccomp allows them), then asks the host to look.
EXHAUST = """
import ctypes, errno, os, signal
libc = ctypes.CDLL(None, use_errno=True)
class sigval(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, sigval]
sig = signal.SIGRTMIN + 3
signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
instances = []
while len(instances) < 100_000:
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        inotify = errno.errorcode[ctypes.get_errno()]
        break
    instances.append(fd)
queued = 0
while queued < 10_000_000:
    if libc.sigqueue(os.getpid(), sig, sigval(0)) != 0:
        sigqueue = errno.errorcode[ctypes.get_errno()]
        break
    queued += 1
held = {"inotify": [len(instances), inotify], "sigqueue": [queued, sigqueue]}
[held, await host.look()]
"""

#: What a process may still do while a run holds all of its own quotas: queue one signal
#: to itself and take one inotify instance (each answers ok, or why not).
MAY_I = """
import ctypes, errno, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
class sigval(ctypes.Union):
    _fields_ = [("sival_int", ctypes.c_int), ("sival_ptr", ctypes.c_void_p)]
libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, sigval]
sig = signal.SIGRTMIN + 3
signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
outcome = {}
if libc.sigqueue(os.getpid(), sig, sigval(0)) == 0:
    outcome["sigqueue"] = "ok" if signal.sigtimedwait({sig}, 5) is not None else "lost"
else:
    outcome["sigqueue"] = errno.errorcode[ctypes.get_errno()]
fd = libc.inotify_init1(os.O_CLOEXEC)
outcome["inotify"] = "ok" if fd >= 0 else errno.errorcode[ctypes.get_errno()]
"""


async def test_a_run_that_takes_its_per_user_quotas_leaves_the_host_and_other_runs_theirs() -> None:
    """A confined run holds every queued signal and inotify instance the kernel allows its
    uid; while it does, host root (a process of the host's) and a concurrent confined run
    still get theirs: the run's quotas are its own uid's."""
    if ORDINARY_USER:
        skip_as_ordinary_user(
            "every run is the host's own uid, sharing its per-user quotas (the README's "
            "'What confined does not do'): only a root host gives each run a uid of its own"
        )

    async def look() -> dict[str, Any]:
        code = MAY_I + "print(json.dumps(outcome))\n"
        done = await anyio.run_process([sys.executable, "-I", "-S", "-c", code], check=True)
        other = await sandbox.run(
            MAY_I + "outcome\n", budget=Budget(wall_clock=30), level=Level.CONFINED
        )
        assert other.ok, other.error
        return {"host": json.loads(done.stdout), "other_run": other.value}

    result = await attack(EXHAUST, Level.CONFINED, [look], wall_clock=60.0)
    held, seen = result.value
    queued, why = held["sigqueue"]
    assert why == "EAGAIN"
    assert queued > 0  # it did hold them: RLIMIT_SIGPENDING's worth
    instances, why = held["inotify"]
    inotify_allowed = why != "EPERM"  # seccomp may refuse inotify altogether
    if inotify_allowed:
        assert (instances, why) != (0, why)
        assert why == "EMFILE"
    assert seen["host"]["sigqueue"] == "ok"
    assert seen["other_run"]["sigqueue"] == "ok"
    assert seen["host"]["inotify"] == "ok"
    assert seen["other_run"]["inotify"] == ("ok" if inotify_allowed else "EPERM")


# --- executables the program writes ------------------------------------------------------

#: A program that writes an executable and tries every way to run it: from its working
#: directory, from /tmp, through the dynamic loader (which maps it rather than executing
#: it), and as a memfd (plain, or asking for an executable one), by its /proc path and by
#: execveat. Each outcome is ``["ran", status]`` or the errno that stopped it.
RUN_WHAT_IT_WROTE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ELF = bytes.fromhex(%r)

def run(argv, fd=None):
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            if fd is None:
                os.execv(argv[0], argv)
            args = (ctypes.c_char_p * 2)(b"probe", None)
            env = (ctypes.c_char_p * 1)(None)
            libc.syscall(322, fd, b"", args, env, 0x1000)  # execveat(fd, "", AT_EMPTY_PATH)
            code = ctypes.get_errno()
        except OSError as exc:
            code = exc.errno
        os.write(w, errno.errorcode.get(code, str(code)).encode())
        os._exit(1)
    os.close(w)
    why = os.read(r, 64).decode()
    os.close(r)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return why or ["ran", status]

def written(path):
    with open(path, "wb") as f:
        f.write(ELF)
    os.chmod(path, 0o755)
    return path

outcome = {}
outcome["workdir"] = run([written(os.path.abspath("probe"))])
outcome["tmp"] = run([written(f"/tmp/probe-{os.getpid()}")])
os.unlink(f"/tmp/probe-{os.getpid()}")
loaders = [
    path
    for path in (
        "/lib64/ld-linux-x86-64.so.2",
        "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
        "/usr/lib64/ld-linux-x86-64.so.2",
    )
    if os.path.exists(path)
]
outcome["loader"] = run([loaders[0], os.path.abspath("probe")]) if loaders else "no loader"
for name, flags in [("memfd", 0), ("memfd_exec", 0x10)]:  # MFD_EXEC
    try:
        fd = os.memfd_create("probe", flags)
    except OSError as exc:
        outcome[name] = outcome[name + "_at"] = errno.errorcode[exc.errno]
        continue
    os.write(fd, ELF)
    try:
        os.fchmod(fd, 0o755)
    except OSError:
        pass  # sealed: its mode cannot be made executable
    outcome[name] = run([f"/proc/self/fd/{fd}"])
    outcome[name + "_at"] = run(None, fd=fd)
    os.close(fd)
outcome
"""


def memfd_noexec() -> str | None:
    """The host's own ``vm.memfd_noexec`` (None before Linux 6.3)."""
    try:
        return Path("/proc/sys/vm/memfd_noexec").read_text()
    except FileNotFoundError:
        return None


@needs_x86_64
@BOTH
async def test_nothing_the_program_writes_can_be_executed(level: Level) -> None:
    """An executable the program writes runs at ``process`` from its working directory,
    /tmp, through the loader and as a memfd; at ``confined``, in none of these ways (the
    writable mounts are noexec and Landlock grants no execution there; memfds cannot be
    made executable), while the host's own setting of memfds is left as it was."""
    before = memfd_noexec()
    result = await attack(RUN_WHAT_IT_WROTE % exit_probe().hex(), level)
    outcome = result.value
    ways = ["workdir", "tmp", "loader", "memfd", "memfd_at", "memfd_exec", "memfd_exec_at"]
    assert sorted(outcome) == sorted(ways)
    if level is Level.PROCESS:
        assert outcome == {way: ["ran", EXIT_CODE] for way in ways}
        return
    ran = {way: how for way, how in outcome.items() if how == ["ran", EXIT_CODE]}
    assert ran == {}
    assert (outcome["workdir"], outcome["tmp"]) == ("EACCES", "EACCES")
    assert outcome["loader"][0] == "ran"  # the loader runs, and cannot map the file
    assert memfd_noexec() == before


# --- what /proc tells of the host --------------------------------------------------------

#: A program that reads every per-process mount table it can name (its own, PID 1's, a
#: thread's, a child's) and lists /proc and its own descriptors.
READ_MOUNT_TABLES = """
import os, time
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return exc.errno
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
tables = {
    path: read(path)
    for path in (
        "/proc/self/mountinfo", "/proc/self/mounts", "/proc/self/mountstats",
        "/proc/1/mountinfo", "/proc/thread-self/mountinfo", f"/proc/{child}/mountinfo",
    )
}
os.kill(child, 9)
os.waitpid(child, 0)
[tables, sorted(os.listdir("/proc/self/fd")) != [], "self" in os.listdir("/proc")]
"""


def host_details() -> set[str]:
    """What the host's mount table says that a program must not learn: its block devices
    (the sources of its mounts from /dev, and /sys/block's names), its device file
    system, and where the repository lives."""
    found = {"devtmpfs", str(Path(__file__).resolve().parents[2])}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        source = line.split(" - ", 1)[1].split()[1]
        if source.startswith("/dev/"):
            found.add(source)
    found.update(f"/dev/{name}" for name in os.listdir("/sys/block"))
    return found


@BOTH
async def test_the_mount_tables_show_nothing_of_the_host(level: Level) -> None:
    """The per-process mount tables (``mountinfo``, ``mounts``, ``mountstats``, of any of
    the run's processes) name the host's block devices, its devtmpfs (its size tells the
    host's memory) and the host paths behind the view's mounts: at ``confined`` none can be
    read, while /proc still lists the run's processes and descriptors."""
    details = await anyio.to_thread.run_sync(host_details)
    result = await attack(READ_MOUNT_TABLES, level)
    tables, has_fds, has_self = result.value
    assert has_fds
    assert has_self
    text = "\n".join(table for table in tables.values() if isinstance(table, str))
    seen = {detail for detail in details if detail in text}
    if level is Level.PROCESS:
        assert seen  # the host's own table, read as is
        return
    assert seen == set()
    assert set(tables.values()) == {errno.EACCES}


# --- the run's file system ---------------------------------------------------------------

#: What a program writes, in the working directory and in /tmp, until its file system is
#: full; then the host looks (while the run lasts), and the program fails with the error.
FILL = """
import os
written = {"bytes": 0, "files": 0}
chunk = b"x" * (1 << 16)
try:
    if MODE == "bytes":
        for n in range(1 << 14):
            with open(("/tmp/" if n % 2 else "") + f"fill-{n}", "wb") as f:
                for _ in range(16):
                    f.write(chunk)
                    f.flush()
                    written["bytes"] += len(chunk)
    else:
        while written["files"] < 1 << 20:
            open(f"f{written['files']}", "w").close()
            written["files"] += 1
except OSError as exc:
    full = exc
print(written["bytes"], written["files"], os.statvfs(".").f_blocks * os.statvfs(".").f_frsize)
host.look(cwd=os.getcwd())
raise full
"""


async def fill(mode: str, budget: Budget) -> tuple[RunResult, list[int], dict[str, Any]]:
    """Run :data:`FILL` at ``confined``; the result, what the program printed, what the
    host saw while the run lasted (its own working directory for the run, and the run's
    file system through the runner's root)."""
    seen: dict[str, Any] = {}

    def what_the_host_sees(cwd: str) -> None:
        made = host_workdirs()
        assert made  # this run's, at least
        seen["on_host"] = [name for d in made for name in os.listdir(d)]
        runner = runner_holding(cwd, "fill-0" if mode == "bytes" else "f0")
        info = os.statvfs(f"/proc/{runner.pid}/root{cwd}")
        seen["free"] = info.f_bavail * info.f_frsize
        seen["free_files"] = info.f_favail

    async def look(cwd: str) -> None:
        await anyio.to_thread.run_sync(what_the_host_sees, cwd)

    program = f"MODE = {mode!r}\n" + FILL
    result = await sandbox.run(program, tools=[look], budget=budget, level=Level.CONFINED)
    return result, [int(n) for n in result.stdout.split()], seen


async def test_a_run_that_fills_its_file_system_ends_at_its_limit_and_the_host_keeps_its_disk() -> (
    None
):
    """A program that writes until it can write no more, in its working directory and in
    /tmp alike, is stopped at ``max_disk`` bytes for both together; while the run lasts the
    host sees nothing of it on its disk; and the run ends with kind ``limit``, cause
    ``disk``, decided by the host from the run's file system."""
    max_disk = 4 << 20
    result, (written, _, size), seen = await fill("bytes", Budget(wall_clock=60, max_disk=max_disk))
    assert (result.kind, result.cause) == (Kind.LIMIT, "disk"), result.error
    assert "No space left on device" in result.error
    assert size == max_disk
    assert max_disk - (1 << 20) <= written <= max_disk
    assert seen["on_host"] == []
    assert seen["free"] < 1 << 16


async def test_a_run_that_makes_files_until_none_is_left_ends_at_its_limit() -> None:
    """Empty files cost no bytes but a file each: the run's file system holds one per 16 KiB
    of ``max_disk``; a program that makes them until none is left ends with kind ``limit``,
    cause ``disk``, and none of them is on the host."""
    max_disk = 1 << 20  # 64 files, the fewest a run's file system holds
    result, (_, files, _), seen = await fill("files", Budget(wall_clock=60, max_disk=max_disk))
    assert (result.kind, result.cause) == (Kind.LIMIT, "disk"), result.error
    assert 32 <= files <= 64  # the working directory and its parents take a few
    assert seen["on_host"] == []
    assert seen["free_files"] == 0


STATVFS = """
import os
info = os.statvfs(".")
[info.f_blocks * info.f_frsize, info.f_files, os.statvfs("/tmp").f_fsid == info.f_fsid]
"""


@pytest.mark.parametrize(
    ("max_disk", "expected"),
    [
        (msgspec.UNSET, [64 << 20, 4096]),
        (8 << 20, [8 << 20, 512]),
        (None, [0, 0]),  # no bound but memory (tmpfs says 0)
    ],
    ids=["default", "8M", "lifted"],
)
async def test_the_run_file_system_has_the_budgets_size(max_disk: Any, expected: list[int]) -> None:
    """The working directory and /tmp are one file system of ``max_disk`` bytes and one file
    per 16 KiB of them: 64 MiB and 4096 files by default; ``None`` lifts both."""
    result = await attack(STATVFS, Level.CONFINED, max_disk=max_disk)
    assert result.value == [*expected, True]


async def test_a_program_that_handles_a_full_disk_is_not_ended_by_it() -> None:
    """A full file system ends nothing by itself: a program that catches the error and goes
    on returns its value; one that fails while its file system has room fails as itself."""
    catch = FILL.replace("raise full", "'handled'").replace("host.look(cwd=os.getcwd())\n", "")
    result = await attack("MODE = 'bytes'\n" + catch, Level.CONFINED, max_disk=1 << 20)
    assert result.value == "handled"
    result = await sandbox.run(
        "open('x', 'w').write('x')\nraise ValueError('mine')",
        budget=Budget(wall_clock=30, max_disk=1 << 20),
        level=Level.CONFINED,
    )
    assert (result.kind, result.cause) == (Kind.RAISED, "program"), result.error


async def test_process_cannot_bound_the_disk_and_does_not_pretend_to() -> None:
    """At ``process`` the working directory is the host's: ``max_disk`` asked for is
    refused, and left unset it is not applied (``sandbox.unenforceable`` says why)."""
    with pytest.raises(sandbox.BudgetUnsupported, match="max_disk"):
        await sandbox.run("1", budget=Budget(max_disk=1 << 20), level=Level.PROCESS)
    with pytest.raises(sandbox.BudgetError, match="max_disk"):
        Budget(max_disk=0)
    assert "max_disk" in sandbox.unenforceable(Level.PROCESS)
    assert "max_disk" not in sandbox.unenforceable(Level.CONFINED)
    result = await sandbox.run("1", budget=Budget(wall_clock=30), level=Level.PROCESS)
    assert result.ok, result.error
