"""The confined level's walls, each attacked by a program that gets through at `process`.

Every attack runs at both levels: at ``process`` it must succeed (so the test can fail),
at ``confined`` it must be stopped.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

import sandbox
from sandbox import Budget, Kind, Level, RunResult

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("spawn"),
    pytest.mark.skipif(
        bool(sandbox.confinement_gaps()),
        reason=f"confined level unavailable here: {sandbox.confinement_gaps()}",
    ),
]

BOTH = pytest.mark.parametrize("level", [Level.PROCESS, Level.CONFINED])


async def attack(program: str, level: Level, **budget: object) -> RunResult:
    budget.setdefault("wall_clock", 30.0)
    result = await sandbox.run(program, budget=Budget(**budget), level=level)  # type: ignore[arg-type]
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
    try:
        result = await attack(outcome(f"open({str(target)!r}, 'w').write('x')"), level)
        expected = "ok" if level is Level.PROCESS else ("OSError", "PermissionError")
        assert result.value in expected
        assert target.exists() == (level is Level.PROCESS)
    finally:
        target.unlink(missing_ok=True)
    result = await attack(outcome("open('mine.txt', 'w').write('x')"), level)
    assert result.value == "ok"


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
[os.getpid(), sorted(os.environ), b'pytest' in host_cmdline]
"""
    result = await attack(program, level)
    pid, env, read_host = result.value
    assert "SANDBOX_HOST_SECRET" not in env  # the environment is scrubbed at every level
    assert set(env) <= {"HOME", "LANG", "PATH", "PYTHONIOENCODING", "TMPDIR"}
    if level is Level.PROCESS:
        assert read_host is True  # the wall confined adds
    else:
        assert (pid, read_host) == (1, False)


@BOTH
async def test_signalling_and_ptracing_the_host(level: Level) -> None:
    """The host cannot be signalled or traced."""
    host_pid = os.getpid()
    program = outcome(f"import os, signal\nos.kill({host_pid}, 0)")
    result = await attack(program, level)
    assert result.value == ("ok" if level is Level.PROCESS else "ProcessLookupError")
    ptrace = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, {host_pid}, 0, 0) != 0:  # PTRACE_ATTACH
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
libc.ptrace(17, {host_pid}, 0, 0)  # PTRACE_DETACH
"""
    if level is Level.CONFINED:
        result = await attack(outcome(ptrace), level)
        assert result.value in ("OSError", "PermissionError", "ProcessLookupError")


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


async def test_memory_cannot_escape_through_memfd_or_tmp() -> None:
    """memfd and /tmp pages count against max_memory; the run is ended at the limit."""
    memfd = """
import os
fd = os.memfd_create("x")
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
    assert set(report["levels"]["in_process"]["unenforceable"]) >= {"wall_clock", "max_memory"}


async def test_confined_refuses_to_run_without_every_wall(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host missing a wall, confined refuses (naming it) instead of running with fewer."""
    import sandbox._api as api

    monkeypatch.setattr(api, "confinement_gaps", lambda: {"landlock": "no Landlock here"})
    with pytest.raises(sandbox.ConfinementUnavailable, match="landlock") as info:
        await sandbox.run("1", level=Level.CONFINED)
    assert info.value.gaps == {"landlock": "no Landlock here"}
