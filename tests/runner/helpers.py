"""A hand-written parent for the runner: spawns it as a real process over four OS pipes.

The runner is launched the way the host launches it, ``python -I -S -c <bootstrap>`` with
the four channel descriptors as arguments; the bootstrap puts the repository and msgspec's
directory on ``sys.path`` and calls ``runner._main.main()``. The parent side uses
protocol's anyio roles (:class:`~protocol.Starter` and :class:`~protocol.Server`).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec
import pytest

from protocol import (
    VERSION,
    CallLimits,
    CallStats,
    FdChannel,
    Request,
    Result,
    Server,
    Start,
    StartBinding,
    StartBudget,
    Starter,
)
from sandbox._children import _uid

ROOT = Path(__file__).resolve().parents[2]
#: Host ids for specs checked in this process: a root caller must name some (nothing is
#: changed, so none is leased); an unprivileged one names none.
HOST_ID = _uid.FIRST if os.geteuid() == 0 else None
#: The directory msgspec is installed in (with -S, site-packages is not on the path).
MSGSPEC_DIR = str(Path(msgspec.__file__).resolve().parents[1])
BOOTSTRAP = (
    f"import sys; sys.path[:0] = [{str(ROOT)!r}, {MSGSPEC_DIR!r}]; "
    "from runner._main import main; main()"
)

Handler = Callable[[Request], "str | Awaitable[str]"]


def echo(request: Request) -> str:
    """Answer every call with its own arguments."""
    return request.args


@dataclass
class RunnerProcess:
    """A runner child, with the parent's ends of its two channels."""

    process: subprocess.Popen[bytes]
    start: FdChannel
    call: FdChannel

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """Wait for the child to exit; its status, stdout and stderr."""
        out, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, out.decode(), err.decode()


def bootstrap_command(*python_flags: str) -> list[str]:
    """The command the host uses: ``python -I -S -c <bootstrap>`` (descriptors follow)."""
    return [sys.executable, "-I", "-S", *python_flags, "-c", BOOTSTRAP]


@contextmanager
def spawn_runner(
    *options: str,
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[RunnerProcess]:
    """Start a runner over four OS pipes; kill and reap it on exit, whatever happens.

    Args:
        options: command-line options after the four descriptors.
        command: what to run before the descriptors (default :func:`bootstrap_command`).
        env: the child's environment (default: inherited).
    """
    start_down, start_up, call_down, call_up = os.pipe(), os.pipe(), os.pipe(), os.pipe()
    child_fds = (start_down[0], start_up[1], call_down[0], call_up[1])
    parent_fds = (start_up[0], start_down[1], call_up[0], call_down[1])
    try:
        process = subprocess.Popen(
            [
                *(bootstrap_command() if command is None else command),
                *(str(fd) for fd in child_fds),
                *options,
            ],
            pass_fds=child_fds,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except BaseException:
        for fd in (*child_fds, *parent_fds):
            os.close(fd)
        raise
    for fd in child_fds:
        os.close(fd)
    start = FdChannel(start_up[0], start_down[1])
    call = FdChannel(call_up[0], call_down[1])
    try:
        yield RunnerProcess(process, start, call)
    finally:
        start.close()
        call.close()
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)  # reaps it and closes our ends of its stdio


@dataclass
class Run:
    """Everything one run produced, as the parent saw it."""

    result: Result
    stats: CallStats
    status: int
    stdout: str
    stderr: str

    @property
    def value(self) -> object:
        """The program's value, decoded (the run must have succeeded)."""
        assert self.result.ok, (self.result.kind, self.result.error)
        return msgspec.json.decode(self.result.value)


def make_start(program: str, bindings: Sequence[StartBinding | str] = ()) -> Start:
    """A Start for ``program``; a binding given as a plain string has no signature."""
    return Start(
        v=VERSION,
        program=program,
        bindings=tuple(
            b if isinstance(b, StartBinding) else StartBinding(name=b) for b in bindings
        ),
        budget=StartBudget(),
        result_id="run-1",
    )


async def run_program(
    program: str,
    bindings: Sequence[StartBinding | str] = ("echo",),
    handler: Handler = echo,
    *,
    max_calls: int | None = None,
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Run ``program`` in a real runner process and collect everything it produced."""
    with spawn_runner(command=command, env=env) as child:
        server = Server(child.call, handler, CallLimits(max_calls=max_calls))
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(server.serve)
                result = await Starter(child.start).start(make_start(program, bindings))
                child.start.close()  # done with the run: the runner may exit now
        status, stdout, stderr = child.finish()
    return Run(result, server.statistics(), status, stdout, stderr)


def one_pipe_then_emfile(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make ``os.pipe`` give one pipe, then fail with ``EMFILE``; returns the descriptors
    of the pipe it gave (filled when it gives it), for the test to check they were
    closed (:func:`assert_closed`)."""
    real_pipe = os.pipe
    made: list[int] = []

    def one_pipe_only() -> tuple[int, int]:
        if made:
            raise OSError(errno.EMFILE, "Too many open files")
        read, write = real_pipe()
        made.extend((read, write))
        return read, write

    monkeypatch.setattr(os, "pipe", one_pipe_only)
    return made


def assert_closed(fds: Sequence[int]) -> None:
    """Every descriptor of ``fds`` is closed."""
    for fd in fds:
        try:
            os.fstat(fd)
        except OSError:
            continue
        raise AssertionError(f"descriptor {fd} is still open")
