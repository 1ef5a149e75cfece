"""What a program wrote before it died is in its result, whatever killed it.

The runner's ``sys.stdout`` and ``sys.stderr`` write through to their pipes, so SIGKILL
(which no process can catch: the wall clock, the CPU and memory limits, a program that
kills itself) finds nothing of the program's output in a buffer of the process. Each
program below writes to both streams without a newline and without flushing, then dies.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import sandbox
from sandbox import Budget, Kind, Level, RunResult
from tests.host import child_levels, needs_enforcing

pytestmark = pytest.mark.anyio
#: The tests that make a child run once per way of making it (cold, zygote, pool).
each_spawn = pytest.mark.usefixtures("spawn")

ROOT = Path(__file__).resolve().parent.parent.parent

#: Written first by every program below: no newline, no flush.
BEFORE = """
import os, sys, time
print("out before", end="")
sys.stderr.write("err before")
sys.stdout.buffer.write(b" and bytes")
"""


async def run_dying(level: Level, death: str, **budget: object) -> RunResult:
    """Run :data:`BEFORE` then ``death``; check that what it wrote first was kept."""
    budget.setdefault("wall_clock", 30.0)
    result = await sandbox.run(BEFORE + death, level=level, budget=Budget(**budget))  # type: ignore[arg-type]
    assert result.stdout.startswith("out before and bytes"), (result.stdout, result.error)
    assert result.stderr.startswith("err before"), (result.stderr, result.error)
    return result


@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_the_wall_clock(level: Level) -> None:
    """Killed at its wall clock (SIGKILL), asleep."""
    result = await run_dying(level, "time.sleep(60)", wall_clock=1.0)
    assert (result.kind, result.cause) == (Kind.LIMIT, "wall_clock")


@needs_enforcing("max_cpu")
@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_the_cpu_limit(level: Level) -> None:
    """Killed at its CPU limit, spinning."""
    result = await run_dying(level, "while True:\n    pass", max_cpu=0.5)
    assert (result.kind, result.cause) == (Kind.LIMIT, "cpu"), result.error


@needs_enforcing("max_memory")
@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_the_memory_limit(level: Level) -> None:
    """Killed by the kernel (SIGKILL, from the run's memory cgroup), allocating."""
    death = "chunks = []\nwhile True:\n    chunks.append(bytearray(8 << 20))"
    result = await run_dying(level, death, max_memory=64 << 20)
    assert (result.kind, result.cause) == (Kind.LIMIT, "memory"), result.error


@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_a_memory_error(level: Level) -> None:
    """A MemoryError (an allocation the system refuses) the program does not catch."""
    result = await run_dying(level, "bytearray(1 << 60)")
    assert (result.kind, result.cause) == (Kind.RAISED, "program"), result.error
    assert "MemoryError" in result.error


@needs_enforcing("max_processes")
@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_the_process_limit(level: Level) -> None:
    """A program whose forks the process limit refuses, and that dies of it."""
    death = "while True:\n    if os.fork() == 0:\n        time.sleep(60)"
    result = await run_dying(level, death, max_processes=8)
    assert (result.kind, result.cause) == (Kind.LIMIT, "processes"), result.error


@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_sigkill_to_itself(level: Level) -> None:
    """A program that sends itself SIGKILL. At ``confined`` the runner is PID 1 of its
    own PID namespace, which no signal from inside the namespace kills: the program goes
    on, and what it writes next is kept too."""
    result = await run_dying(level, "os.kill(os.getpid(), 9)\nprint(' and after')")
    if level is Level.CONFINED:
        assert result.ok, result.error
        assert result.stdout == "out before and bytes and after\n"
    else:
        assert (result.kind, result.cause) == (Kind.UNKNOWN, "crash")
        assert result.signal == signal.SIGKILL
        assert result.stdout == "out before and bytes"


@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_a_fatal_signal(level: Level) -> None:
    """A segmentation fault (a read of address 0, through ctypes)."""
    result = await run_dying(level, "import ctypes\nctypes.string_at(0)")
    assert (result.kind, result.cause) == (Kind.UNKNOWN, "crash")
    assert result.signal == signal.SIGSEGV


@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_os_exit(level: Level) -> None:
    """``os._exit``, which skips every flush the interpreter would do at its exit."""
    result = await run_dying(level, "os._exit(3)")
    assert (result.kind, result.cause) == (Kind.UNKNOWN, "crash")
    assert result.exit_code == 3


@each_spawn
@pytest.mark.parametrize("level", child_levels())
async def test_the_streams_keep_the_interpreters_encoding_and_error_handlers(
    level: Level,
) -> None:
    """The write-through streams encode as the interpreter's own did: UTF-8, stdout with
    the locale's error handler, stderr backslash-escaping what it cannot encode."""
    program = """
import sys
print("\\u00e9")
print("\\udc80", file=sys.stderr)
(sys.stdout.encoding, sys.stdout.errors, sys.stderr.errors, sys.stdout is sys.__stdout__)
"""
    result = await sandbox.run(program, level=level)
    assert result.ok, result.error
    encoding, out_errors, err_errors, same = result.value
    assert (encoding, err_errors, same) == ("utf-8", "backslashreplace", True)
    assert out_errors in ("strict", "surrogateescape")
    assert result.stdout == "\u00e9\n"
    assert result.stderr == "\\udc80\n"


async def test_in_process_the_output_is_the_hosts_own(capfd: pytest.CaptureFixture[str]) -> None:
    """At ``in_process`` the program writes to the host's own streams (nothing is
    captured), and none of the limits that kill is available there (``test_budget``):
    what a program that fails wrote is where the host's output goes."""
    result = await sandbox.run(
        BEFORE + "sys.stdout.flush()\nbytearray(1 << 60)", level=Level.IN_PROCESS
    )
    assert (result.kind, result.cause) == (Kind.RAISED, "program")
    assert (result.stdout, result.stderr) == ("", "")
    out, err = capfd.readouterr()
    assert "out before and bytes" in out
    assert "err before" in err


@pytest.mark.parametrize(
    "death", ["os._exit(7)", "os.kill(os.getpid(), 9)"], ids=["os_exit", "sigkill"]
)
def test_in_process_a_program_that_ends_its_process_ends_the_host(death: str) -> None:
    """At ``in_process`` the program's process is the host's: ``os._exit`` or SIGKILL
    ends the host itself (with whatever its own streams had not flushed yet)."""
    program = f"import os\nprint('before', end='')\n{death}"
    host = f"import sandbox\nsandbox.run_sync({program!r}, level='in_process')\nprint('after')"
    proc = subprocess.run(
        [sys.executable, "-c", host],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == (7 if "_exit" in death else -signal.SIGKILL), proc.stderr
    assert "after" not in proc.stdout


#: Exercises ``print``'s every argument and failure, to the runner's streams and elsewhere.
PRINTS = """
import io, pickle, sys, traceback
class Bad:
    def __str__(self):
        raise ValueError("no str")
print("a", "b", sep="-", end="!\\n")
print()
print(1, None, sep=None, end=None)
try:
    print("x", Bad(), "y")
except ValueError:
    print("<caught>")
for bad in ({"sep": 3}, {"end": b""}):
    try:
        print("x", **bad)
    except TypeError as exc:
        print(exc)
buffer = io.StringIO()
print("to a buffer", 2, file=buffer, flush=True)
print(repr(buffer.getvalue()))
print("to stderr", file=sys.stderr, end="")
saved, sys.stdout = sys.stdout, None
print("to nowhere")
sys.stdout = saved
try:
    print(Bad())
except ValueError:
    shown = traceback.format_exc()
(print.__name__, print.__module__, pickle.loads(pickle.dumps(print)) is print,
 "runner" in shown)
"""


@pytest.mark.parametrize("level", [Level.IN_PROCESS, Level.PROCESS])
async def test_print_does_what_the_built_in_does(level: Level) -> None:
    """The runner's ``print`` (one write of its whole text to the program's streams) does
    what the built-in does (``in_process`` runs the built-in), refusals and partial output
    included, and shows no path of the runner in a traceback."""
    result = await sandbox.run(PRINTS, level=level)
    assert result.ok, result.error
    assert result.value == ["print", "builtins", True, False]
    if level is Level.IN_PROCESS:
        return  # (what it printed went to this process's streams)
    assert result.stdout == (
        "a-b!\n\n1 None\nx <caught>\nsep must be None or a string, not int\n"
        "end must be None or a string, not bytes\n'to a buffer 2\\n'\n"
    )
    assert result.stderr == "to stderr"


@each_spawn
async def test_print_is_one_write() -> None:
    """A ``print`` of several arguments reaches the pipe in one write: a host that reads
    between two of its pieces never sees a line without its end."""
    told: list[str] = []
    program = "for i in range(2000):\n    print('line', i, sep=' ', end='\\n')"
    result = await sandbox.run(program, on_output=lambda name, text: told.append(text))
    assert result.ok, result.error
    assert all(text.endswith("\n") for text in told), [t for t in told if not t.endswith("\n")]
