"""The ``process`` level's wall, attacked: no signal or trace from a run reaches a process
outside it (the host, its zygote and keeper, any other process of the user), by any of the
calls that send one, while the run still signals and traces its own processes.

The program of a ``process`` run is the host's own user: without the wall, ``os.kill(-1,
9)`` would end every process that user has (as root, every process of the machine but
init). The wall is a Landlock domain that scopes signals (ABI 6, Linux 6.12); where the
kernel has none, the level does not claim it (``sandbox doctor`` says so) and these tests
check that the host's probe says why, instead of attacking.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import psutil
import pytest

import sandbox
from runner._landlock import signal_scope_gap
from runner._seccomp import syscall_number
from sandbox import Budget, Level, RunResult
from sandbox._children import _supervisor
from tests.attacks import ATTEMPT, tracing
from tests.host import skipif_host_cannot

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("spawn"),
    skipif_host_cannot(
        signal_scope_gap() is not None,
        f"scope a run's signals with Landlock: {signal_scope_gap()}",
    ),
]


async def run(program: str) -> RunResult:
    result = await sandbox.run(
        program, level=Level.PROCESS, budget=Budget(wall_clock=30.0), tools=[]
    )
    assert result.ok, result.error
    return result


def attempts(targets: dict[str, int]) -> str:
    """A program that sends signal 0 to each target pid by every call that sends one, and
    returns what each call did: ``"ok"``, or the exception's name."""
    return f"""
import os, signal
{ATTEMPT}
def by_proc_dir(pid):
    fd = os.open(f"/proc/{{pid}}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        signal.pidfd_send_signal(fd, 0)
    finally:
        os.close(fd)
def by_pidfd(pid):
    fd = os.pidfd_open(pid)
    try:
        signal.pidfd_send_signal(fd, 0)
    finally:
        os.close(fd)
outcome = {{}}
for name, pid in {targets!r}.items():
    outcome[name] = [
        attempt(os.kill, pid, 0),
        attempt(os.killpg, os.getpgid(pid), 0),
        attempt(by_pidfd, pid),
        attempt(by_proc_dir, pid),
    ]
outcome
"""


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """Another process of the host's user, outside every run."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", "import time; time.sleep(120)"],
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def test_no_process_outside_the_run_can_be_signalled(
    bystander: subprocess.Popen[bytes],
) -> None:
    """The host, its zygote and keeper, and another process of the user: every call that
    sends a signal fails with PermissionError, though each of them is there to be seen."""
    await run("1")  # the zygote (where the run comes from one) is up
    targets = {"host": os.getpid(), "bystander": bystander.pid}
    zygote = _supervisor.zygote_pid()
    assert zygote is not None
    targets["zygote"], targets["keeper"] = zygote, psutil.Process(zygote).ppid()
    result = await run(attempts(targets))
    refused = ["PermissionError"] * 4
    assert result.value == dict.fromkeys(targets, refused)
    assert bystander.poll() is None


async def test_kill_minus_one_reaches_the_run_alone(bystander: subprocess.Popen[bytes]) -> None:
    """``os.kill(-1, SIGTERM)`` ends the run's own process and nothing else. (The program
    sends it only once it has seen the host refuse a signal: were the wall down, it would
    end every process of the user.)"""
    program = f"""
import os, signal, subprocess, sys
try:
    os.kill({os.getpid()}, 0)
    walled = False
except PermissionError:
    walled = True
status = None
if walled:
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)"])
    os.kill(-1, signal.SIGTERM)
    status = child.wait(timeout=20)
[walled, status]
"""
    result = await run(program)
    assert result.value == [True, -signal.SIGTERM]
    assert bystander.poll() is None


async def test_the_run_still_signals_and_traces_its_own() -> None:
    """Within the run nothing changed: the program signals itself and its children, ends a
    child it started, and traces a child it forked."""
    program = """
import ctypes, os, signal, subprocess, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append("usr1"))
os.kill(os.getpid(), signal.SIGUSR1)
child = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(60)"])
child.terminate()
ended = child.wait(timeout=20)
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    time.sleep(60)
    os._exit(0)
traced = libc.ptrace(16, pid, 0, 0) == 0  # PTRACE_ATTACH
os.waitpid(pid, 0)  # stopped by the attach
os.kill(pid, signal.SIGKILL)
libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
os.waitpid(pid, 0)
[got, ended, traced]
"""
    result = await run(program)
    assert result.value == [["usr1"], -signal.SIGTERM, True]


async def test_the_host_cannot_be_traced() -> None:
    """``ptrace``, ``/proc/<host>/mem`` and ``process_vm_readv`` on the host all fail. (The
    program tries them only once it has seen the host refuse a signal: were the wall down,
    attaching would stop the test's own process.)"""
    host = os.getpid()
    program = f"""
import os
try:
    os.kill({host}, 0)
    raise SystemExit("the wall is down: the host took a signal")
except PermissionError:
    pass
{tracing(host)}
{ATTEMPT}
[attempt(ptrace_attach), attempt(read_mem), attempt(process_vm_readv)]
"""
    result = await run(program)
    assert result.value == ["PermissionError"] * 3


async def test_the_program_cannot_gain_privileges() -> None:
    """no_new_privs is set (the wall needs it): an executable's set-user-id bit or file
    capabilities give the program nothing."""
    result = await run("int(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])")
    assert result.value == 1


async def test_no_process_outside_the_run_has_its_limits_or_scheduling_changed(
    bystander: subprocess.Popen[bytes],
) -> None:
    """The host and another process of the user: their resource limits cannot even be read
    (``prlimit`` needs the right to change them), and their affinity, scheduling policy and
    nice value cannot be set, not even to what they are; nor can every process of the user
    be reniced. The run's own can. (Each change to one process would set what is already
    there, and the program renices the user's processes only once it has seen the host
    refused: were the wall down, nothing would have changed.)"""
    await run("1")
    zygote = _supervisor.zygote_pid()
    assert zygote is not None
    targets = {"host": os.getpid(), "bystander": bystander.pid, "zygote": zygote}
    program = f"""
import os, resource
{ATTEMPT}
outcome = {{}}
for name, pid in {targets!r}.items():
    nice = os.getpriority(os.PRIO_PROCESS, pid)
    outcome[name] = [
        attempt(lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE)),
        attempt(lambda: os.sched_setaffinity(pid, os.sched_getaffinity(pid))),
        attempt(lambda: os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))),
        attempt(lambda: os.setpriority(os.PRIO_PROCESS, pid, nice)),
    ]
# Every process of the user, reniced: tried only where the host refused all the above.
walled = outcome["host"] == ["PermissionError"] * 4
renice_all = lambda: os.setpriority(os.PRIO_USER, os.getuid(), 0)
outcome["user"] = attempt(renice_all) if walled else "down"
nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
outcome["own"] = [
    attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile)),
    attempt(lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
    attempt(lambda: os.nice(1)),
]
outcome
"""
    result = await run(program)
    refused = ["PermissionError"] * 4
    assert result.value == {
        **dict.fromkeys(targets, refused),
        "user": "PermissionError",
        "own": ["ok"] * 3,
    }
    assert bystander.poll() is None


async def test_the_machine_is_out_of_reach() -> None:
    """Whoever the program is (root too, on a root host), the calls that act on the whole
    machine answer EPERM: reboot, a mount, the hostname, the clock. (Each probe would
    change nothing were it let through: a wrong magic number, a path that does not exist,
    the name and the clock set to nothing new.)"""
    arch = os.uname().machine
    nr = {name: syscall_number(arch, name) for name in ("reboot", "mount", "settimeofday")}
    program = f"""
import ctypes, os, socket
{ATTEMPT}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def syscall(nr, *args):
    if libc.syscall(ctypes.c_long(nr), *args) != 0:
        raise OSError(ctypes.get_errno(), "refused")
name = socket.gethostname()
[
    attempt(syscall, {nr["reboot"]}, ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), None),
    attempt(syscall, {nr["mount"]}, b"none", b"/nonexistent-sandbox-walls", b"tmpfs",
            ctypes.c_long(0), None),
    attempt(socket.sethostname, name),
    attempt(syscall, {nr["settimeofday"]}, None, None),
]
"""
    result = await run(program)
    assert result.value == ["PermissionError"] * 4
