"""The ``confined`` level's namespaces: every test is an attack that only a wall stops.

Each attack runs in a real child, ``python -I -S -c CODE``, that puts the repository on
``sys.path``, calls :func:`runner._namespaces.enter` (the runner's own start-up step) and then
tries something that succeeds in an unconfined process: read a host file, write outside its
working directory, see or signal a host process, reach the host's loopback, keep a process
alive after the run. The child reports what happened as JSON lines on stdout; the test also
checks from the host that nothing got through. Every child has a timeout and is killed and
reaped, with whatever it started, however the test ends.

The tests are skipped, with :func:`~runner._namespaces.probe`'s reason, where the host cannot
create the namespaces. The checks of the spec itself run in this process (they change
nothing).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest

from runner._namespaces import (
    ConfineSpec,
    _build_view,
    _plan,
    _shared_mounts,
    check,
    enter,
    probe,
    python_read_only,
    shares_view,
)
from sandbox._children import _uid
from tests.helpers import LOOPBACK_PROBE
from tests.host import skip_because_host_cannot

from .helpers import HOST_ID

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="namespaces are Linux's"
)

ROOT = Path(__file__).resolve().parents[2]
MSGSPEC_PACKAGE = Path(msgspec.__file__).resolve().parent
#: What the child imports from: the repository and msgspec's directory (with -S there is
#: no site-packages on the path).
SYS_PATH = [str(ROOT), str(MSGSPEC_PACKAGE.parent)]
#: What of those the view shows, read-only: only the packages the runner imports.
IMPORTS = [str(ROOT / "protocol"), str(ROOT / "runner"), str(MSGSPEC_PACKAGE)]
STDLIB = os.path.dirname(os.__file__)
TIMEOUT = 30.0

_PRELUDE = """\
import json, os, sys
sys.path[:0] = {sys_path!r}
from runner._namespaces import ConfineSpec, enter, python_read_only

def report(**values):
    sys.stdout.write(json.dumps(values) + "\\n")
    sys.stdout.flush()

{before}
spec = ConfineSpec(
    read_only=python_read_only({imports!r}),
    workdir={workdir!r},
    hostname={hostname!r},
    uid={uid!r},
    gid={gid!r},
    host_uid={host_id!r},
    host_gid={host_id!r},
    disk_bytes={disk_bytes!r},
    disk_files={disk_files!r},
)
try:
    enter(spec)
except Exception as exc:
    if not {catch!r}:
        raise
    report(refused=type(exc).__name__, message=str(exc), pid=os.getpid())
    raise SystemExit(0)
"""


@pytest.fixture(scope="module")
def namespaces() -> None:
    """Skip, with the probe's reasons, where the host cannot create the namespaces."""
    reasons = {name: why for name, why in probe().items() if why is not None}
    if reasons:
        why = "; ".join(f"{name} namespace: {why}" for name, why in reasons.items())
        skip_because_host_cannot(f"make namespaces: {why}")


@dataclass
class Box:
    """Runs attack code in a confined child; the view's working directory is ``work``.

    On a root host the program runs as ``host_id`` (uid and gid), leased as the host
    leases a run's (:mod:`sandbox._children._uid`); an unprivileged host's is its own.
    """

    tmp_path: Path
    work: Path
    host_id: int | None = None
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    host_pids: list[int] = field(default_factory=list)

    def command(
        self,
        body: str,
        *,
        before: str = "",
        catch: bool = False,
        hostname: str = "confined-test",
        uid: int = 1000,
        gid: int = 1000,
        disk_bytes: int = 1 << 20,
        disk_files: int | None = None,
    ) -> list[str]:
        code = _PRELUDE.format(
            sys_path=SYS_PATH,
            imports=IMPORTS,
            before=textwrap.dedent(before),
            workdir=str(self.work),
            hostname=hostname,
            uid=uid,
            gid=gid,
            host_id=self.host_id,
            disk_bytes=disk_bytes,
            disk_files=disk_files,
            catch=catch,
        )
        return [sys.executable, "-I", "-S", "-c", code + textwrap.dedent(body)]

    def run(
        self, body: str, *, env: dict[str, str] | None = None, **options: Any
    ) -> dict[str, Any]:
        """Run to the end; what the child reported (all its JSON lines, merged)."""
        done = subprocess.run(
            self.command(body, **options),
            capture_output=True,
            timeout=TIMEOUT,
            env={"LANG": "C.UTF-8"} if env is None else env,
            stdin=subprocess.DEVNULL,
            cwd=self.tmp_path,
            check=False,
        )
        stderr = done.stderr.decode(errors="replace")
        assert done.returncode == 0, stderr
        return _merge(done.stdout)

    @contextlib.contextmanager
    def spawn(self, body: str, **options: Any) -> Iterator[subprocess.Popen[bytes]]:
        """Start without waiting; killed and reaped (with its tree) on exit, whatever happens."""
        proc = subprocess.Popen(
            self.command(body, **options),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"LANG": "C.UTF-8"},
            cwd=self.tmp_path,
        )
        self.started.append(proc)
        yield proc

    def descendants(self, proc: subprocess.Popen[bytes]) -> list[int]:
        """Host pids of everything under ``proc``, remembered for the final clean-up."""
        pids = [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
        self.host_pids += pids
        return pids

    def clean_up(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=TIMEOUT)
        for pid in self.host_pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def host_id() -> Iterator[int | None]:
    """A host uid (and gid) of the sandbox's range, leased for the test; None unless root."""
    lease = _uid.lease()
    try:
        yield None if lease is None else lease.id
    finally:
        if lease is not None:
            lease.release()


@pytest.fixture
def box(namespaces: None, tmp_path: Path, host_id: int | None) -> Iterator[Box]:
    work = tmp_path / "work"
    work.mkdir()
    helper = Box(tmp_path, work, host_id)
    try:
        yield helper
    finally:
        helper.clean_up()


def _merge(output: bytes) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for line in output.decode().splitlines():
        merged.update(json.loads(line))
    return merged


def _read_report(proc: subprocess.Popen[bytes], timeout: float = TIMEOUT) -> dict[str, Any]:
    """The next JSON line the child prints, within ``timeout``."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            pytest.fail(f"no report from the child within {timeout} s")
        chunk = os.read(fd, 1)
        if not chunk:
            assert proc.stderr is not None
            pytest.fail(f"the child ended early: {proc.stderr.read().decode(errors='replace')}")
        line += chunk
    result: dict[str, Any] = json.loads(line)
    return result


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_gone(pids: list[int], timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [pid for pid in pids if not _gone(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.01)
        alive = [pid for pid in alive if not _gone(pid)]
    return alive


# --- probe ----------------------------------------------------------------------------


def test_probe_answers_for_every_namespace_and_leaves_the_caller_alone() -> None:
    """probe() names each namespace, and tries them in a child: this process is unchanged."""
    before = {name: os.readlink(f"/proc/self/ns/{name}") for name in os.listdir("/proc/self/ns")}
    hostname = socket.gethostname()
    result = probe()
    assert set(result) == {"user", "mount", "net", "ipc", "uts", "pid", "cgroup"}
    assert all(why is None or isinstance(why, str) for why in result.values())
    after = {name: os.readlink(f"/proc/self/ns/{name}") for name in os.listdir("/proc/self/ns")}
    assert after == before
    assert socket.gethostname() == hostname


# --- the filesystem -------------------------------------------------------------------


def test_a_host_file_outside_the_view_cannot_be_read(box: Box) -> None:
    """A canary the host writes next to the working directory is not there inside."""
    canary = box.tmp_path / "canary.txt"
    canary.write_text("host secret")
    report = box.run(
        f"""
        found = {{}}
        for path in [{str(canary)!r}, "/etc/passwd", "/etc/hostname", {str(ROOT / "sandbox")!r},
                     {str(ROOT / ".git")!r}, "/root/.bash_history", "/sys/kernel",
                     "/proc/sys/kernel/hostname", "/proc/kcore"]:
            try:
                with open(path) as f:
                    found[path] = f.read(100)
            except FileNotFoundError:
                found[path] = None
            except OSError as exc:
                found[path] = repr(exc)
        import stat
        held = []
        for name in os.listdir("/proc/self/fd"):
            try:
                if stat.S_ISDIR(os.fstat(int(name)).st_mode):
                    held.append(os.readlink("/proc/self/fd/" + name))
            except OSError:
                pass
        report(found=found, next_to_work=os.listdir({str(box.tmp_path)!r}),
               root=sorted(os.listdir("/")), directory_fds=held)
        """
    )
    assert set(report["found"].values()) == {None}, report["found"]
    assert report["next_to_work"] == ["work"]
    assert report["directory_fds"] == []  # nothing to openat(fd, "..") from
    assert set(report["root"]) <= {"dev", "etc", "lib", "lib64", "proc", "tmp", "usr"} | {
        Path(path).parts[1] for path in [STDLIB, *IMPORTS, str(box.work)]
    }


def test_nothing_outside_the_working_directory_reaches_the_host(box: Box) -> None:
    """Writes to the view's host paths fail read-only; the host is left as it was."""
    targets = [
        f"{STDLIB}/evil.py",  # owned by root on the host
        str(ROOT / "runner" / "evil.py"),
        str(MSGSPEC_PACKAGE / "evil.py"),
        "/etc/evil",
        "/evil",
        "/usr/lib/evil",
        "/dev/evil",
        "/proc/evil",
    ]
    beside = f"/tmp/beside-{os.getpid()}-{box.tmp_path.name}.txt"
    report = box.run(
        f"""
        outcome = {{}}
        for path in {targets!r}:
            try:
                with open(path, "w") as f:
                    f.write("owned")
                outcome[path] = "written"
            except OSError as exc:
                outcome[path] = exc.errno
        try:
            os.mkdir("/newdir")
            outcome["mkdir"] = "made"
        except OSError as exc:
            outcome["mkdir"] = exc.errno
        # /tmp (and the parents of the working directory in it) is the run's: not the host's.
        with open({beside!r}, "w") as f:
            f.write("private")
        report(outcome=outcome)
        """
    )
    outcome = report["outcome"]
    assert outcome.pop("/proc/evil") in (errno.EROFS, errno.EACCES, errno.ENOENT)
    assert outcome == dict.fromkeys([*targets[:-1], "mkdir"], errno.EROFS)
    assert not any(os.path.lexists(path) for path in targets)
    assert not os.path.lexists(beside)


def test_the_working_directory_is_the_runs_own_and_nothing_of_it_reaches_the_host(
    box: Box,
) -> None:
    """The working directory is the program's (mode 0700) on the run's own file system
    (nosuid, nodev, noexec), not the host's: what the program writes there, a set-user-id
    file on a directory it opened to all included, is nowhere on the host, and from the
    host (through the run's root) it belongs to the run's unprivileged uid, not root."""
    body = """
    import stat
    mode = os.stat(".").st_mode
    with open("made-inside.txt", "w") as f:
        f.write("hello")
    os.mkdir("sub")
    os.chmod(".", 0o755)
    os.chmod("made-inside.txt", 0o4755)
    flags = os.statvfs(".").f_flag
    report(cwd=os.getcwd(), owner=os.stat("made-inside.txt").st_uid, mode=oct(mode),
           suid=bool(os.stat("made-inside.txt").st_mode & stat.S_ISUID),
           mount=[name for name in ("ST_NOSUID", "ST_NODEV", "ST_NOEXEC")
                  if flags & getattr(os, name)], ready=True)
    sys.stdin.readline()
    """
    with box.spawn(body) as proc:
        report = _read_report(proc)
        (pid_one,) = box.descendants(proc)
        inside = Path(f"/proc/{pid_one}/root{box.work}/made-inside.txt")
        seen_from_host = inside.stat()
        host_uid = psutil.Process(pid_one).uids()
        on_host = sorted(os.listdir(box.work))  # while the run lasts
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=TIMEOUT) == 0
    assert report == {
        "cwd": str(box.work),
        "owner": 1000 if box.host_id is None else box.host_id,
        "mode": "0o40700",
        "suid": True,  # the bit is there, on a nosuid mount no host user can reach
        "mount": ["ST_NOSUID", "ST_NODEV", "ST_NOEXEC"],
        "ready": True,
    }
    assert on_host == []
    expected = os.geteuid() if box.host_id is None else box.host_id
    assert seen_from_host.st_uid == expected
    assert host_uid.effective == host_uid.real == host_uid.saved == expected
    assert expected != 0
    assert sorted(os.listdir(box.work)) == []


def test_tmp_is_private_and_bounded(box: Box) -> None:
    """/tmp is on the run's file system of disk_bytes: the host's /tmp is not there, and it
    fills up."""
    fd, host_file = tempfile.mkstemp(prefix="host-tmp-canary-", dir="/tmp")
    os.close(fd)
    try:
        report = box.run(
            """
        entries = os.listdir("/tmp")
        written = 0
        try:
            with open("/tmp/big", "wb") as f:
                while written < 8 << 20:
                    f.write(b"x" * 65536)
                    written += 65536
                    f.flush()
            error = None
        except OSError as exc:
            error = exc.errno
        report(entries=entries, written=written, error=error)
        """,
            disk_bytes=1 << 20,
        )
    finally:
        os.unlink(host_file)
    # Only the first directory on the way to a path of the view that lives under /tmp (the
    # working directory; the checkout itself when it was cloned under /tmp).
    allowed = {p.parts[2] for p in (box.work, ROOT) if len(p.parts) > 2 and p.parts[1] == "tmp"}
    assert os.path.basename(host_file) not in report["entries"]
    assert set(report["entries"]) <= allowed
    assert report["error"] == errno.ENOSPC
    assert report["written"] <= 1 << 20


def test_a_directory_descriptor_is_refused_before_anything_changes(box: Box) -> None:
    """A process holding a directory descriptor could leave any view: enter() refuses it."""
    report = box.run(
        "",
        before="held = os.open('/', os.O_RDONLY | os.O_DIRECTORY)",
        catch=True,
    )
    assert report["refused"] == "ValueError"
    assert "directory" in report["message"]
    assert report["pid"] != 1


def test_the_view_is_read_only_without_mount_setattr(box: Box) -> None:
    """On a kernel without mount_setattr(2), a bind remount still makes the paths read-only."""
    report = box.run(
        f"""
        import runner._namespaces as namespaces
        try:
            open({STDLIB + "/evil.py"!r}, "w")
            error = None
        except OSError as exc:
            error = exc.errno
        report(error=error, used_setattr=namespaces._mount_setattr_works)
        """,
        before="import runner._namespaces; runner._namespaces._mount_setattr_works = False",
    )
    assert report == {"error": errno.EROFS, "used_setattr": False}


_NO_SUBSET = """
import errno, runner._namespaces as namespaces
mount = namespaces._mount
def without_subset(source, target, fstype, flags, data=None):
    if data == "subset=pid":
        raise OSError(errno.EINVAL, "subset= unknown to this pretend kernel")
    mount(source, target, fstype, flags, data)
namespaces._mount = without_subset
"""


def test_a_full_proc_keeps_its_writable_parts_read_only(box: Box) -> None:
    """On a kernel without proc's subset=pid, /proc/sys is there but read-only.

    Writing a global sysctl back with its own value: harmless if the wall did not hold.
    """
    report = box.run(
        """
        path = "/proc/sys/vm/swappiness"
        with open(path) as f:
            value = f.read()
        try:
            with open(path, "w") as f:
                f.write(value)
            error = None
        except OSError as exc:
            error = exc.errno
        report(error=error, entries="sys" in os.listdir("/proc"))
        """,
        before=_NO_SUBSET,
    )
    assert report == {"error": errno.EROFS, "entries": True}


def test_the_python_runner_has_what_it_needs_inside(box: Box) -> None:
    """The minimum view is enough: extension modules and their libraries load after enter()."""
    report = box.run(
        """
        import bz2, ctypes, decimal, hashlib, lzma, select, sqlite3, ssl, time, uuid, zlib
        con = sqlite3.connect(":memory:")
        report(
            sha=hashlib.sha256(b"x").hexdigest()[:8],
            zlib=len(zlib.compress(b"a" * 1000)) < 100,
            sqlite=con.execute("select 6 * 7").fetchone()[0],
            ssl=ssl.OPENSSL_VERSION.startswith("OpenSSL"),
            zone=time.localtime().tm_zone,
            cpus=os.cpu_count(),
            urandom=len(os.urandom(8)),
        )
        """
    )
    assert report["sqlite"] == 42
    assert report["sha"] == "2d711642"
    assert report["zlib"]
    assert report["ssl"]
    assert report["zone"] == time.localtime().tm_zone
    assert report["cpus"]
    assert report["cpus"] >= 1
    assert report["urandom"] == 8


# --- processes ------------------------------------------------------------------------


def test_host_processes_are_invisible(box: Box) -> None:
    """The runner is PID 1 and /proc shows the namespace's processes only."""
    report = box.run(
        f"""
        alone = sorted(name for name in os.listdir("/proc") if name.isdigit())
        child = os.fork()
        if child == 0:
            import time
            time.sleep(30)
            os._exit(0)
        two = sorted(name for name in os.listdir("/proc") if name.isdigit())
        os.kill(child, 9)
        os.waitpid(child, 0)
        report(pid=os.getpid(), ppid=os.getppid(), alone=alone, two=two, child=child,
               host_test=os.path.exists("/proc/{os.getpid()}"))
        """
    )
    assert report["pid"] == 1
    assert report["ppid"] == 0
    assert report["alone"] == ["1"]
    assert report["two"] == ["1", str(report["child"])]
    assert report["host_test"] is False


def test_host_processes_cannot_be_signalled(box: Box) -> None:
    """Signalling a host process by its pid finds no such process; the host one lives on."""
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        try:
            report = box.run(
                f"""
                outcome = {{}}
                for name, pid in [("test", {os.getpid()}), ("sleeper", {sleeper.pid})]:
                    try:
                        os.kill(pid, 9 if name == "sleeper" else 0)
                        outcome[name] = "signalled"
                    except ProcessLookupError:
                        outcome[name] = "no such process"
                report(outcome=outcome)
                """
            )
            assert report["outcome"] == dict.fromkeys(["test", "sleeper"], "no such process")
            assert sleeper.poll() is None
        finally:
            sleeper.kill()


def test_the_hosts_environment_is_invisible(box: Box, monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/1/environ is the runner's own; the host's processes' environments are not there."""
    monkeypatch.setenv("HOST_CANARY", "host-environment-secret")
    report = box.run(
        f"""
        with open("/proc/1/environ", "rb") as f:
            one = f.read().decode()
        with open("/proc/1/cmdline", "rb") as f:
            cmdline = f.read().split(b"\\0")[:2]
        try:
            with open("/proc/{os.getpid()}/environ", "rb") as f:
                test = f.read().decode()
        except FileNotFoundError:
            test = None
        report(one=one, cmdline=[part.decode() for part in cmdline], test=test)
        """,
        env={"LANG": "C.UTF-8", "INSIDE": "runner"},
    )
    assert "INSIDE=runner" in report["one"]
    assert "host-environment-secret" not in report["one"]
    assert report["cmdline"] == [sys.executable, "-I"]
    assert report["test"] is None


def test_a_process_left_running_dies_with_pid_one(box: Box) -> None:
    """When PID 1 exits, the kernel kills what it left: gone before the host reaps the runner."""
    body = """
        child = os.fork()
        if child == 0:
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.setsid()
            while True:
                time.sleep(1)
        report(ready=True, child=child)
        sys.stdin.readline()
        os._exit(0)
        """
    with box.spawn(body) as proc:
        assert _read_report(proc) == {"ready": True, "child": 2}
        pids = box.descendants(proc)
        assert len(pids) == 2  # PID 1 and its child, under the middle
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=TIMEOUT) == 0
        assert [pid for pid in pids if not _gone(pid)] == []


def test_sigkill_of_the_middle_kills_the_whole_namespace(box: Box) -> None:
    """The host kills the process it started; PID 1 and its children die with it."""
    body = """
        child = os.fork()
        if child == 0:
            import time
            while True:
                time.sleep(1)
        report(ready=True)
        import time
        time.sleep(60)
        """
    with box.spawn(body) as proc:
        assert _read_report(proc) == {"ready": True}
        pids = box.descendants(proc)
        assert len(pids) == 2
        proc.kill()
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGKILL
        assert _wait_gone(pids) == []


def test_sigterm_ends_a_runner_without_a_handler_as_sigterm(box: Box) -> None:
    """PID 1 would ignore SIGTERM; the middle turns it into a kill and dies by SIGTERM."""
    with box.spawn("report(ready=True)\nimport time\ntime.sleep(60)\n") as proc:
        assert _read_report(proc) == {"ready": True}
        pids = box.descendants(proc)
        proc.terminate()
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGTERM
        assert _wait_gone(pids) == []


def test_sigterm_reaches_a_handler_the_program_installed(box: Box) -> None:
    """A runner that catches SIGTERM gets it, as it would outside a PID namespace.

    The program waits in short sleeps: Python runs a handler between bytecodes, so a signal
    that lands after the last check and before a long ``time.sleep`` starts is handled
    only once that sleep is over (a race of the program's, not of the namespace's: the
    likely cause of this test's one failure, under load in CI, when it slept 60 s).
    """
    body = """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
        report(ready=True)
        for _ in range(1200):
            time.sleep(0.05)
        """
    with box.spawn(body) as proc:
        assert _read_report(proc) == {"ready": True}
        proc.terminate()
        assert proc.wait(timeout=TIMEOUT) == 7


def test_the_middle_keeps_no_descriptor_open(box: Box) -> None:
    """Once PID 1 closes an inherited pipe end, the host sees EOF: the middle holds none."""
    read_end, write_end = os.pipe()
    try:
        proc = subprocess.Popen(
            box.command(
                f"""
                os.close({write_end})
                report(ready=True)
                sys.stdin.readline()
                """
            ),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=[write_end],
            env={"LANG": "C.UTF-8"},
        )
        box.started.append(proc)
        os.close(write_end)
        write_end = -1
        assert _read_report(proc) == {"ready": True}
        assert select.select([read_end], [], [], 5)[0]
        assert os.read(read_end, 1) == b""
        assert proc.poll() is None  # EOF while the runner still runs
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


# --- network --------------------------------------------------------------------------


def test_the_network_is_a_loopback_of_its_own(box: Box) -> None:
    """Only lo: the host's 127.0.0.1 listener refuses, nothing routes out, lo works inside."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        report = box.run(
            f"""
            import socket
            outcome = {{}}
            for name, address in [("host", ("127.0.0.1", {port})), ("out", ("1.1.1.1", 53))]:
                try:
                    socket.create_connection(address, timeout=5).close()
                    outcome[name] = "connected"
                except OSError as exc:
                    outcome[name] = exc.errno
            with socket.create_server(("127.0.0.1", 0)) as server:
                with socket.create_connection(server.getsockname(), timeout=5) as client:
                    peer, _ = server.accept()
                    client.sendall(b"ping")
                    echoed = peer.recv(4).decode()
                    peer.close()
            report(interfaces=socket.if_nameindex(), outcome=outcome, echoed=echoed)
            """
        )
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert report["interfaces"] == [[1, "lo"]]
    assert report["outcome"] == {"host": errno.ECONNREFUSED, "out": errno.ENETUNREACH}
    assert report["echoed"] == "ping"


# --- identity ---------------------------------------------------------------------------

_PRIVILEGE_ATTACKS = f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]

def attempt(result):
    return "done" if result == 0 else ctypes.get_errno()

status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines()
              if line.startswith(("Cap", "NoNewPrivs")))
deathsig = ctypes.c_int()
libc.prctl(2, ctypes.byref(deathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
attacks = dict(
    remount_rw=attempt(libc.mount(None, {STDLIB.encode()!r}, None, 0x20 | 0x1000, None)),
    umount_tmp=attempt(libc.umount2(b"/tmp", 2)),
    new_proc=attempt(libc.mount(b"proc", b"/tmp", b"proc", 0, None)),
    sethostname=attempt(libc.sethostname(b"x", 1)),
)
try:
    open({STDLIB + "/os.py"!r}, "a")
    attacks["append_root_owned"] = "done"
except OSError as exc:
    attacks["append_root_owned"] = exc.errno
"""


@pytest.mark.parametrize("uid", [1000, 0], ids=["uid-1000", "uid-0"])
def test_the_identity_inside_is_its_own_and_powerless(box: Box, uid: int) -> None:
    """A root caller's program is the run's own unprivileged host uid, with no user
    namespace and none of root's groups; an unprivileged caller's is the spec's uid, mapped
    to the caller's. No capability is left either way, and the death signal survives the
    switch of ids."""
    if box.host_id is not None and uid != 1000:
        pytest.skip("a root caller makes no user namespace: there is no uid inside to choose")
    body = (
        _PRIVILEGE_ATTACKS
        + """
report(uid=os.getuid(), gid=os.getgid(), groups=os.getgroups(),
       uid_map=open("/proc/self/uid_map").read().split(),
       gid_map=open("/proc/self/gid_map").read().split(),
       status={key: value.strip() for key, value in status.items()},
       deathsig=deathsig.value, attacks=attacks, ready=True)
sys.stdin.readline()
"""
    )
    with box.spawn(body, uid=uid, gid=uid) as proc:
        report = _read_report(proc)
        (pid_one,) = box.descendants(proc)
        host_status = psutil.Process(pid_one)
        host_uids, host_caps = host_status.uids(), Path(f"/proc/{pid_one}/status").read_text()
        assert proc.stdin is not None
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=TIMEOUT) == 0
    if box.host_id is None:
        host_uid, host_gid = os.geteuid(), os.getegid()
        assert (report["uid"], report["gid"]) == (uid, uid)
        assert report["uid_map"] == [str(uid), str(host_uid), "1"]
        assert report["gid_map"] == [str(uid), str(host_gid), "1"]
        assert set(report["groups"]) <= {uid, 65534}
    else:
        host_uid = host_gid = box.host_id
        assert (report["uid"], report["gid"]) == (host_uid, host_gid)
        assert report["uid_map"] == report["gid_map"] == ["0", "0", "4294967295"]
        assert report["groups"] == []
    caps = {key: value for key, value in report["status"].items() if key.startswith("Cap")}
    assert caps == dict.fromkeys(["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"], "0" * 16)
    assert report["status"]["NoNewPrivs"] == "1"
    assert report["deathsig"] == signal.SIGKILL
    assert report["attacks"] == {
        "remount_rw": errno.EPERM,
        "umount_tmp": errno.EPERM,
        "new_proc": errno.EPERM,
        "sethostname": errno.EPERM,
        # Host root's file, and the program is never host root: refused before the
        # read-only mount is even looked at.
        "append_root_owned": errno.EACCES,
    }
    # Seen from the host: the run's ids (the caller's, if it is not root), no capability.
    assert host_uids.effective == host_uids.real == host_uids.saved == host_uid
    assert "CapEff:\t0000000000000000" in host_caps
    assert "CapBnd:\t0000000000000000" in host_caps


NOBODY = 65534
_AS_NOBODY = """\
import importlib.util, json, os, sys
loader = importlib.util.spec_from_file_location("_namespaces", {module!r})
namespaces = importlib.util.module_from_spec(loader)
sys.modules["_namespaces"] = namespaces  # dataclasses look their module up
loader.loader.exec_module(namespaces)
namespaces.enter(namespaces.ConfineSpec(
    read_only=namespaces.python_read_only((), {secrets!r}), workdir={work!r}))
try:
    with open({secret!r}) as f:
        secret = f.read()
except OSError as exc:
    secret = exc.errno
with open("mine.txt", "w") as f:
    f.write("x")
print(json.dumps(dict(uid_map=open("/proc/self/uid_map").read().split(), secret=secret,
                      owner=os.stat("mine.txt").st_uid)))
"""


def _python_usable_by(uid: int) -> str | None:
    """An interpreter that ``uid`` can run (this one may live in root's home)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [candidate, "-I", "-S", "-c", "pass"],
                user=uid,
                group=uid,
                extra_groups=[],
                capture_output=True,
                timeout=TIMEOUT,
                check=False,
            )
            if done.returncode == 0:
                return candidate
    return None


def _world_readable(path: Path) -> bool:
    """Whether any user can read ``path``: every parent searchable, the file readable."""
    if not path.stat().st_mode & 0o004:
        return False
    return all(parent.stat().st_mode & 0o001 for parent in path.parents)


def test_a_runner_started_as_an_ordinary_user_is_that_user_on_the_host(namespaces: None) -> None:
    """The deployment the module is built for: an unprivileged host user stays one inside.

    Its uid 1000 is the host's 65534: a root-only host file in the view cannot be read, and
    what it writes is its own (1000 inside), on the run's file system, not the host's. The
    module is loaded on its own, from its file, by whatever interpreter that user can run:
    it needs nothing but the standard library.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to start a child as another user")
    python = _python_usable_by(NOBODY)
    if python is None:
        pytest.skip(f"no Python interpreter that uid {NOBODY} can run")
    module = ROOT / "runner" / "_namespaces.py"
    if not _world_readable(module):
        pytest.skip(f"uid {NOBODY} cannot read {module} (a parent directory is not o+x)")
    # pytest's own temporary directories are root's only: this user could not reach them.
    base = Path(tempfile.mkdtemp(prefix="namespaces-nobody-"))
    try:
        base.chmod(0o755)
        work = base / "work"
        work.mkdir()
        os.chown(work, NOBODY, NOBODY)
        secrets = base / "secrets"
        secrets.mkdir(mode=0o755)
        (secrets / "key").write_text("root only")
        (secrets / "key").chmod(0o600)
        code = _AS_NOBODY.format(
            module=str(ROOT / "runner" / "_namespaces.py"),
            secrets=str(secrets),
            secret=str(secrets / "key"),
            work=str(work),
        )
        done = subprocess.run(
            [python, "-I", "-S", "-c", code],
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            capture_output=True,
            timeout=TIMEOUT,
            cwd="/",
            env={"LANG": "C.UTF-8"},
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        report = json.loads(done.stdout)
        assert report == {
            "uid_map": ["1000", str(NOBODY), "1"],
            "secret": errno.EACCES,
            "owner": 1000,
        }
        assert list(work.iterdir()) == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_nested_user_namespace_cannot_unlock_the_view(box: Box) -> None:
    """A new user namespace gives capabilities, but the view's mounts stay locked read-only."""
    report = box.run(
        f"""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
        def attempt(result):
            return "done" if result == 0 else ctypes.get_errno()
        nested = attempt(libc.unshare(0x10000000 | 0x00020000))  # CLONE_NEWUSER | CLONE_NEWNS
        status = open("/proc/self/status").read()
        stdlib = {STDLIB.encode()!r}
        report(
            nested=nested,
            capeff=[line for line in status.splitlines() if line.startswith("CapEff")][0],
            remount_rw=attempt(libc.mount(None, stdlib, None, 0x20 | 0x1000, None)),
            umount=attempt(libc.umount2(stdlib, 0)),
            umount_root=attempt(libc.umount2(b"/", 2)),
        )
        try:
            open({STDLIB + "/os.py"!r}, "a")
            report(append="done")
        except OSError as exc:
            report(append=exc.errno)
        """
    )
    assert report["nested"] == "done"
    assert report["capeff"] != "CapEff:\t0000000000000000"  # it really holds capabilities
    assert report["remount_rw"] == errno.EPERM
    assert report["umount"] in (errno.EINVAL, errno.EPERM)
    assert report["umount_root"] in (errno.EINVAL, errno.EPERM)
    assert report["append"] == errno.EACCES  # host root's file: the nested root is not it


def test_the_hostname_is_the_specs_and_the_hosts_is_unchanged(box: Box) -> None:
    """sethostname inside changes the namespace's name only."""
    host = socket.gethostname()
    report = box.run(
        "import socket\nreport(name=socket.gethostname(), node=os.uname().nodename)\n",
        hostname="inside-box",
    )
    assert report == {"name": "inside-box", "node": "inside-box"}
    assert socket.gethostname() == host


# --- the spec, checked in this process ------------------------------------------------


HOST: dict[str, Any] = {"host_uid": HOST_ID, "host_gid": HOST_ID}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"read_only": ("relative/path",)}, "not an absolute path"),
        ({"read_only": ("/no/such/path/here",)}, "No such file"),
        ({"read_only": ("/",)}, "cannot be bound"),
        ({"read_only": ("/proc/self",)}, "cannot be bound"),
        ({"read_only": ("/tmp",)}, "cannot be bound"),
        ({"hostname": ""}, "hostname"),
        ({"hostname": "x" * 65}, "hostname"),
        ({"uid": -1}, "uid"),
        ({"gid": 2**32}, "gid"),
        ({"disk_bytes": 0}, "disk_bytes"),
        ({"disk_files": 0}, "disk_files"),
        ({"workdir": "relative"}, "workdir"),
        ({"workdir": "/"}, "workdir"),
        ({"workdir": "/tmp"}, "workdir"),
        ({"workdir": "/proc/x"}, "workdir"),
        ({"workdir": "/dev/x"}, "workdir"),
        ({"read_only": ("/usr",), "workdir": "/usr/w"}, "overlaps"),
        ({"read_only": ("/usr/lib",), "workdir": "/usr"}, "overlaps"),
    ],
)
def test_a_spec_that_cannot_be_built_is_refused(fields: dict[str, Any], message: str) -> None:
    """The checks run before anything changes, and say what is wrong."""
    with pytest.raises(ValueError, match=message):
        _plan(ConfineSpec(**{"read_only": (), **HOST, **fields}))


@pytest.mark.skipif(os.geteuid() != 0, reason="the checks of a root caller's host ids")
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "must name the unprivileged host ids"),
        ({"host_uid": _uid.FIRST}, "must name the unprivileged host ids"),
        ({"host_uid": 0, "host_gid": _uid.FIRST}, "cannot be host root"),
        ({"host_uid": _uid.FIRST, "host_gid": 0}, "cannot be host root"),
        ({"host_uid": -5, "host_gid": _uid.FIRST}, "host_uid"),
    ],
)
def test_a_root_caller_must_run_the_program_as_an_unprivileged_host_id(
    fields: dict[str, Any], message: str
) -> None:
    """A root caller's program would be host root unless it names an unprivileged id."""
    with pytest.raises(ValueError, match=message):
        _plan(ConfineSpec(read_only=(), **fields))


def test_a_path_below_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    """A path whose parent is a link would not be at the same path inside: refused."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="symbolic link among its parents"):
        _plan(
            ConfineSpec(
                read_only=(str(tmp_path / "link" / "file"),), host_uid=HOST_ID, host_gid=HOST_ID
            )
        )


def test_the_plan_orders_parents_first_and_keeps_links(tmp_path: Path) -> None:
    """Mounts are made outermost first; a path that is a link stays a link."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "to-a").symlink_to("a")
    plan = _plan(
        ConfineSpec(
            read_only=(str(tmp_path / "a" / "b"), str(tmp_path / "to-a"), str(tmp_path / "a")),
            workdir=str(tmp_path / "work"),
            host_uid=HOST_ID,
            host_gid=HOST_ID,
        )
    )
    assert [(m.path, m.link) for m in plan.mounts] == [
        (str(tmp_path / "a"), None),
        (str(tmp_path / "a" / "b"), None),
        (str(tmp_path / "to-a"), "a"),
    ]
    assert plan.workdir == str(tmp_path / "work")
    assert (plan.disk_bytes, plan.disk_files) == (64 << 20, 4096)
    stage = plan.stage
    assert stage is not None
    assert not any(
        stage == path or path.startswith(stage + "/")
        for path in [*(m.path for m in plan.mounts), plan.workdir]
    )


def _one_path_spec(tmp_path: Path) -> ConfineSpec:
    """A spec of one read-only directory (made in ``tmp_path``), working in ``/tmp``."""
    (tmp_path / "ro").mkdir()
    return ConfineSpec(read_only=(str(tmp_path / "ro"),), workdir="/tmp/w/run", **HOST)


def test_a_run_that_copies_a_shared_view_has_no_stage(tmp_path: Path) -> None:
    """A run copying a shared view builds none: its plan looks for no stage (a directory of
    the host's to build on), takes the shared view's mounts as found, and cannot build."""
    spec = _one_path_spec(tmp_path)
    shared = _shared_mounts(spec.read_only)
    plan = _plan(spec, shared)
    assert plan.stage is None
    assert plan.mounts == tuple(shared.values())
    assert plan.workdir == "/tmp/w/run"
    assert _plan(spec).stage is not None  # its own view: staged
    with pytest.raises(ValueError, match="no stage"):
        _build_view(plan)  # refused before anything is mounted


def test_a_template_checks_a_spec_as_its_child_would(tmp_path: Path) -> None:
    """What a template checks for its child (``check``) is the plan the child would make:
    for a run that builds its own view, staged; for one that copies the shared view (a
    root caller's), not, and only for a spec that can share one."""
    spec = _one_path_spec(tmp_path)
    assert check(spec) == _plan(spec)
    if shares_view(spec):
        shared = check(spec, shared=True)
        assert shared == _plan(spec, _shared_mounts(spec.read_only))
        assert shared.stage is None
    unshared = replace(spec, workdir="/var/tmp/w")
    with pytest.raises(ValueError, match="shared"):
        check(unshared, shared=True)


def test_enter_refuses_a_plan_checked_for_another_kind_of_run(tmp_path: Path) -> None:
    """A plan for a run that builds its own view is no plan for one given the shared
    view, nor the reverse, nor one checked with other privileges: refused before anything
    changes."""
    spec = _one_path_spec(tmp_path)
    own = check(spec)
    copies = replace(own, stage=None)
    for plan, view in ((own, 0), (copies, None)):
        with pytest.raises(ValueError, match="another kind of run"):
            enter(spec, view=view, plan=plan)
    with pytest.raises(ValueError, match="another kind of run"):
        enter(spec, plan=replace(own, privileged=not own.privileged))


def test_the_spec_decodes_from_json() -> None:
    """The host can send the spec as JSON; msgspec builds the dataclass as is."""
    spec = msgspec.json.decode(
        b'{"read_only": ["/usr"], "workdir": "/tmp/w", "uid": 0, "host_uid": 5}', type=ConfineSpec
    )
    assert spec == ConfineSpec(read_only=("/usr",), workdir="/tmp/w", uid=0, host_uid=5)
    assert (spec.hostname, spec.gid, spec.host_gid) == ("sandbox", 1000, None)
    assert (spec.disk_bytes, spec.disk_files) == (64 << 20, None)


def test_python_read_only_is_small_and_flat() -> None:
    """The minimum view: the stdlib, the C library's directory, the given paths; no nesting."""
    paths = python_read_only(IMPORTS)
    assert STDLIB in paths
    assert all(path in paths for path in IMPORTS)
    assert all(os.path.lexists(path) for path in paths)
    assert len(set(paths)) == len(paths)
    for path in paths:
        assert not any(
            path.startswith(other + "/") for other in paths if not os.path.islink(other)
        ), path
    assert "/usr" not in paths
    assert "/bin" not in paths


@pytest.mark.parametrize(
    ("fields", "shares"),
    [
        ({"workdir": "/tmp/sandbox-run-1-x"}, True),
        ({"workdir": "/tmp/a/b"}, True),
        ({}, True),
        ({"workdir": "/var/tmp/w"}, False),  # the run's file system is mounted on /tmp
        ({"workdir": "/tmp"}, False),
        ({"read_only": ("/usr", "/tmp/lib"), "workdir": "/tmp/w"}, False),  # /tmp hides it
    ],
)
def test_which_specs_can_copy_a_shared_view(fields: dict[str, Any], shares: bool) -> None:
    """Only a root caller shares a view; only with its working directory (if any) below
    /tmp, where each run mounts its own file system, and nothing read-only there."""
    spec = ConfineSpec(**{"read_only": ("/usr",), **HOST, **fields})
    assert shares_view(spec) is (shares and os.geteuid() == 0)


def test_enter_refuses_what_a_template_did_not_prepare() -> None:
    """``pid_one`` in a process that is not PID 1, or a view for a spec that cannot share
    one, is refused before anything changes."""
    spec = ConfineSpec(read_only=("/usr",), workdir="/var/tmp/w", **HOST)
    with pytest.raises(ValueError, match="shared"):
        enter(spec, view=0)
    with pytest.raises(ValueError, match="PID 1"):
        enter(ConfineSpec(read_only=("/usr",), **HOST), pid_one=True)
    if os.geteuid() != 0:  # the non-root pass (make test-nonroot) checks this one
        with pytest.raises(ValueError, match="net: only a root caller"):
            enter(ConfineSpec(read_only=("/usr",), **HOST), net=0)


#: In a child: make a network namespace ahead as the zygote does, join it, report what is in
#: it; with ``own`` a descriptor that is not the caller's network namespace, the way back
#: fails and the child reports where it was left.
_MAKE_NETWORK = """
import fcntl, json, os, socket, struct, sys
sys.path[:0] = {sys_path!r}
from runner import _namespaces

before = os.readlink("/proc/self/ns/net")
own = os.open({own!r}, os.O_RDONLY | os.O_CLOEXEC)
try:
    made = _namespaces.make_network_namespace(own)
except _namespaces.NetworkNamespaceStuck as exc:
    print(json.dumps({{"stuck": str(exc), "before": before,
                      "after": os.readlink("/proc/self/ns/net")}}))
    sys.exit(0)
after = os.readlink("/proc/self/ns/net")
name = os.readlink(f"/proc/self/fd/{{made}}")
cloexec = bool(fcntl.fcntl(made, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
_namespaces._join_network_namespace(made)
try:
    os.fstat(made)
    closed = False
except OSError:
    closed = True
{loopback}
print(json.dumps({{"before": before, "after": after, "made": name, "cloexec": cloexec,
                  "joined": os.readlink("/proc/self/ns/net"), "closed": closed,
                  "interfaces": socket.if_nameindex(), "lo_up": bool(flags & 1),
                  "echoed": echoed}}))
"""


def _make_network_code(own: str) -> str:
    return _MAKE_NETWORK.format(sys_path=SYS_PATH, own=own, loopback=LOOPBACK_PROBE)


def _make_network(own: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _make_network_code(own)],
        capture_output=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_a_network_namespace_made_ahead_holds_only_a_loopback_that_is_up(
    namespaces: None,
) -> None:
    """What a root zygote makes ahead for a run: a new network namespace with ``lo`` up and
    nothing else, held by a close-on-exec descriptor; its maker is back in its own
    namespace; the run that joins it closes the descriptor."""
    if os.geteuid() != 0:
        pytest.skip("only a root caller makes network namespaces ahead")
    report = _make_network("/proc/self/ns/net")
    assert report["after"] == report["before"] == os.readlink("/proc/self/ns/net")
    assert report["made"].startswith("net:[")
    assert report["made"] != report["before"]
    assert report["cloexec"]
    assert report["joined"] == report["made"]
    assert report["closed"]
    assert report["interfaces"] == [[1, "lo"]]
    assert report["lo_up"]
    assert report["echoed"] == "ping"


def test_a_maker_that_cannot_go_back_to_its_network_namespace_says_so(
    namespaces: None,
) -> None:
    """If the way back fails (here: the descriptor given is a UTS namespace's), the maker is
    told it is stuck in the namespace it made (the zygote then stops: its next child at
    the ``process`` level would have no network of the host's)."""
    if os.geteuid() != 0:
        pytest.skip("only a root caller makes network namespaces ahead")
    report = _make_network("/proc/self/ns/uts")
    assert "setns(CLONE_NEWNET)" in report["stuck"]
    assert report["after"] != report["before"]
