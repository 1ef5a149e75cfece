"""The zygote's own share of "no survivors", with no host and no cgroup around it.

A keeper and zygote of the test's own are started as the host starts them and spoken to
over their control channel (:mod:`protocol`'s fork messages); a run's child is asked for
without cgroups, so that nothing but the zygote and the runner can end what its program
leaves behind. Each test checks one layer of the clean-up on its own (the host's layers,
the run's cgroup and the runner's process tree, are ``tests/sandbox/test_kill_layers.py``'s):

* the runner is a child subreaper: what its program orphans is re-parented to it;
* the zygote kills on sight what a dead runner left to it;
* the zygote, told to stop (its control channel closed), kills every run and everything
  under them, and the keeper exits.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec
import psutil
import pytest

from protocol import (
    FD_NAMES,
    MAX_FORK_MESSAGE,
    REPORT_DECODER,
    VERSION,
    Exited,
    Failed,
    Forked,
    ForkRequest,
    FrameDecoder,
    Result,
    Start,
    StartBudget,
    decode_fork,
    frame_message,
)
from protocol._messages import RESULT_DECODER, decode

from .helpers import MSGSPEC_DIR, ROOT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's")

#: The longest any one wait of these tests may take.
WAIT = 10.0
BOOT = (
    f"import sys; sys.path[:0] = [{str(ROOT)!r}, {MSGSPEC_DIR!r}]; "
    "from runner import zygote_main; zygote_main()"
)


def readable(fd: int | socket.socket, what: str) -> None:
    """Wait (at most :data:`WAIT`) until ``fd`` can be read; fail naming ``what``."""
    if not select.select([fd], [], [], WAIT)[0]:
        raise TimeoutError(f"no {what} within {WAIT} s")


def gone(pid: int) -> bool:
    """Whether ``pid`` is dead (a zombie not yet reaped counts as dead)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until_gone(pids: list[int]) -> list[int]:
    """Wait (at most :data:`WAIT`) until every one of ``pids`` is dead; those that are not."""
    deadline = time.monotonic() + WAIT
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.01)
        alive = [pid for pid in alive if not gone(pid)]
    return alive


@dataclass
class Run:
    """One run's child, as the host holds it: the parent's ends of its pipes."""

    pid: int
    start_w: int
    start_r: int
    out_r: int
    report: socket.socket
    others: list[int]

    def start(self, program: str) -> None:
        """Send the Start of ``program`` (no bindings, no budget)."""
        start = Start(v=VERSION, program=program, bindings=(), budget=StartBudget(), result_id="r")
        os.write(self.start_w, frame_message(start))

    def result(self) -> Result:
        decoder = FrameDecoder()
        while True:
            frame = decoder.next_frame()
            if isinstance(frame, bytes):
                return decode(RESULT_DECODER, frame)
            readable(self.start_r, "Result")
            decoder.receive_data(os.read(self.start_r, 1 << 16))

    def output_line(self) -> str:
        """The first line the program printed."""
        data = b""
        while not data.endswith(b"\n"):
            readable(self.out_r, "output")
            chunk = os.read(self.out_r, 4096)
            assert chunk, f"the program's stdout closed after {data!r}"
            data += chunk
        return data.decode()

    def exited(self) -> Exited:
        """The zygote's report that it reaped the runner."""
        readable(self.report, "report of the runner's exit")
        report = decode_fork(REPORT_DECODER, self.report.recv(MAX_FORK_MESSAGE))
        assert isinstance(report, Exited), report
        return report

    def close(self) -> None:
        for fd in (self.start_w, self.start_r, self.out_r, *self.others):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.report.close()


@dataclass
class Zygote:
    """A keeper and zygote of this test's own."""

    keeper: subprocess.Popen[bytes]
    control: socket.socket
    pid: int
    workdir: Path

    def send(self, request: ForkRequest, child_fds: list[int]) -> socket.socket:
        """Send ``request`` with the child's ends of its pipes (closed here, sent or not)
        and a report socket's; the host's end of the report socket."""
        assert len(child_fds) + 1 == len(FD_NAMES)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            socket.send_fds(
                self.control, [msgspec.json.encode(request)], [*child_fds, theirs.fileno()]
            )
        finally:
            for fd in child_fds:
                os.close(fd)
            theirs.close()
        return ours

    def ask(self, env: dict[str, str]) -> Failed:
        """Ask for a warm runner with ``env`` that cannot be had; the zygote's answer."""
        pipes = [os.pipe() for _ in range(7)]
        child_fds = [pipes[0][0], pipes[1][1], pipes[2][0], pipes[3][1], *(p[1] for p in pipes[4:])]
        request = ForkRequest(mode="warm", workdir=str(self.workdir), env=env)
        with self.send(request, child_fds) as ours:
            readable(ours, "the zygote's answer")
            data, fds, _, _ = socket.recv_fds(ours, MAX_FORK_MESSAGE, 1)
        for fd in fds:
            os.close(fd)
        for r, w in pipes:
            for fd in (r, w):
                with contextlib.suppress(OSError):
                    os.close(fd)
        report = decode_fork(REPORT_DECODER, data)
        assert isinstance(report, Failed), report
        return report

    def fork(self) -> Run:
        """Ask for a warm runner, without cgroups, that exits right after its Result; wait
        until it is ready for its Start."""
        start, result, call, answer, out, err, ready = (os.pipe() for _ in range(7))
        child_fds = [start[0], result[1], call[0], answer[1], out[1], err[1], ready[1]]
        workdir = self.workdir / uuid.uuid4().hex
        workdir.mkdir()
        request = ForkRequest(
            mode="warm",
            workdir=str(workdir),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)},
            start_timeout=WAIT,
            linger=False,
        )
        ours = self.send(request, child_fds)
        run = Run(0, start[1], result[0], out[0], ours, [call[1], answer[0], err[0], ready[0]])
        try:
            readable(ours, "report of the fork")
            data, fds, _, _ = socket.recv_fds(ours, MAX_FORK_MESSAGE, 1)
            for fd in fds:  # the child's pidfd
                os.close(fd)
            forked = decode_fork(REPORT_DECODER, data)
            assert isinstance(forked, Forked), forked
            run.pid = forked.pid
            readable(ready[0], "ready")
            assert os.read(ready[0], 1) == b"R"
        except BaseException:
            run.close()
            raise
        return run

    def stop(self) -> None:
        """Close the control channel, as a host that is done does; wait for the keeper."""
        self.control.close()
        self.keeper.wait(WAIT)


@contextmanager
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    """A keeper and zygote, started as the host starts them; stopped (killed if need be,
    with everything under them) however the test ends."""
    control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        keeper = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", BOOT, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
        )
    finally:
        theirs.close()
    try:
        readable(control, "hello from the zygote")
        hello = decode_fork(REPORT_DECODER, control.recv(MAX_FORK_MESSAGE))
        assert isinstance(hello, Forked), hello
        yield Zygote(keeper, control, hello.pid, tmp_path)
    finally:
        control.close()
        try:
            keeper.wait(WAIT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(keeper.pid, signal.SIGKILL)  # (the runs have sessions of their own)
            for proc in psutil.Process(keeper.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            keeper.kill()
            keeper.wait()


#: Forks a child that starts a session of its own, forks a grandchild and exits; the
#: grandchild (asleep for ten minutes) writes its parent's pid once it has been orphaned.
#: The program's value: its own pid, the grandchild's, and the grandchild's new parent.
ORPHAN = """
import os, time
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    os.setsid()
    middle = os.getpid()  # (fork() gave 0 here: the grandchild waits on this pid)
    if os.fork() == 0:
        deadline = time.monotonic() + 10
        while os.getppid() == middle and time.monotonic() < deadline:
            time.sleep(0.001)
        os.write(w, f"{os.getpid()} {os.getppid()}\\n".encode())
        time.sleep(600)
    os._exit(0)
os.close(w)
os.waitpid(middle, 0)
grandchild, parent = map(int, os.fdopen(r).readline().split())
[os.getpid(), grandchild, parent]
"""


def test_what_a_program_orphans_is_the_runners(tmp_path: Path) -> None:
    """The runner is a child subreaper: a grandchild whose parent exits is re-parented to
    the runner, not to the zygote or to init, so that the runner's process tree holds
    everything of the run while the runner lives."""
    with zygote(tmp_path) as z:
        run = z.fork()
        try:
            run.start(ORPHAN)
            result = run.result()
            assert result.ok, result.error
            runner, grandchild, parent = msgspec.json.decode(result.value)
            assert runner == run.pid
            assert parent == runner
            run.exited()
            assert wait_until_gone([grandchild]) == []  # (the zygote's sweep, below)
        finally:
            run.close()


def test_the_zygote_kills_what_a_dead_runner_left(tmp_path: Path) -> None:
    """When a runner exits, the zygote (the next subreaper up) gets the processes its
    program left, and kills them: nothing else is there to (no host kill, no cgroup)."""
    with zygote(tmp_path) as z:
        run = z.fork()
        try:
            run.start(ORPHAN)
            result = run.result()
            assert result.ok, result.error
            _, grandchild, _ = msgspec.json.decode(result.value)
            run.exited()  # the runner exited by itself after its Result (no linger)
            assert wait_until_gone([grandchild]) == []
            assert not gone(z.pid)  # (it killed only what the run left)
        finally:
            run.close()


#: Forks a grandchild in a session of its own, prints its own pid and the grandchild's,
#: and sleeps.
STAYS = """
import os, time
r, w = os.pipe()
middle = os.fork()
if middle == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
    os.write(w, f"{pid}\\n".encode())
    os._exit(0)
os.close(w)
os.waitpid(middle, 0)
grandchild = int(os.fdopen(r).readline())
print(os.getpid(), grandchild, flush=True)
time.sleep(600)
"""


def test_a_zygote_told_to_stop_ends_every_run(tmp_path: Path) -> None:
    """Closing the control channel (the host is done or gone) makes the zygote kill each
    run's runner and everything under it; the keeper then exits."""
    with zygote(tmp_path) as z:
        run = z.fork()
        try:
            run.start(STAYS)
            pids = [int(pid) for pid in run.output_line().split()]
            assert len(pids) == 2
            assert not any(gone(pid) for pid in pids)
            z.stop()  # fails if the keeper does not exit: something is left under it
            assert wait_until_gone(pids) == []
        finally:
            run.close()


def test_the_zygote_reads_proc_files_whole(tmp_path: Path) -> None:
    """What the zygote reads of ``/proc`` with the system calls alone is the whole file,
    however many reads it takes, and a missing one raises as ``open`` would."""
    from runner._zygote import _read_proc, _session_of

    data = os.urandom(3 * 4096 + 17)
    (tmp_path / "file").write_bytes(data)
    assert _read_proc(str(tmp_path / "file")) == data
    assert _session_of(os.getpid()) == os.getsid(0)
    with pytest.raises(FileNotFoundError):
        _read_proc("/proc/self/no-such-file")


@pytest.mark.parametrize(
    "env",
    [{"A=B": "1"}, {"": "1"}, {"PATH": "/usr/bin\x00/bin"}, {"HOME\x00": "/"}],
    ids=["equals-in-name", "empty-name", "nul-in-value", "nul-in-name"],
)
def test_an_environment_no_process_can_hold_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    """The zygote sets a warm child's environment before the fork: one that cannot be set
    is refused, and said why, with no child made; the zygote serves the next request."""
    with zygote(tmp_path) as z:
        failed = z.ask(env)
        assert failed.error.startswith("the run's environment cannot be set:"), failed
        run = z.fork()
        try:
            run.start("sorted(__import__('os').environ)")
            result = run.result()
            assert result.ok, result.error
            assert msgspec.json.decode(result.value) == ["HOME", "PATH"]
        finally:
            run.close()
        z.stop()
