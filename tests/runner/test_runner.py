"""The runner as a process: start-up, the start channel, the Result, exit, ties to the parent.

Every test drives a real runner process over OS pipes with a hand-written parent made of
protocol's anyio roles, the way the host does it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import anyio
import pytest

from protocol import Kind, Result, RunnerExit, Starter
from runner._landlock import signal_scope_gap

from .helpers import (
    MSGSPEC_DIR,
    ROOT,
    bootstrap_command,
    make_start,
    run_program,
    spawn_runner,
)

pytestmark = pytest.mark.anyio

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="prctl and /proc are Linux's"
)


@pytest.mark.parametrize(
    ("program", "value"),
    [
        ("{'a': [1, 2], 'b': None}", {"a": [1, 2], "b": None}),
        ("x = 3\n[x, x * 2, 'three']", [3, 6, "three"]),
        ("x = 3\nif x:\n    y = x", None),
        ("", None),
        ("def f():\n    return 1\n", None),
        ("(1, 2), {3}", [[1, 2], [3]]),
        ("range(3)", [0, 1, 2]),
    ],
    ids=["dict", "list", "statement-last", "empty", "def-last", "tuple-set", "range"],
)
async def test_value_is_the_last_expression(program: str, value: object) -> None:
    """The value is the module's last expression statement, JSON-encoded; else null."""
    run = await run_program(program)
    assert run.value == value
    assert run.status == 0


async def test_print_goes_to_stdout_and_not_into_the_protocol() -> None:
    """What the program prints reaches the child's stdout and stderr, flushed, and only there."""
    program = (
        "import sys\n"
        "print('hello from the program')\n"
        "sys.stdout.write('no newline')\n"
        "print('to stderr', file=sys.stderr)\n"
        "42"
    )
    run = await run_program(program)
    assert run.value == 42
    assert run.stdout == "hello from the program\nno newline"
    assert run.stderr == "to stderr\n"


async def test_result_reports_the_calls_and_bytes_of_the_call_channel() -> None:
    """Result.calls and Result.bytes are the child's counts, and they match the parent's."""
    run = await run_program("[host.echo('ab') for _ in range(3)]")
    assert run.value == ["ab", "ab", "ab"]
    assert (run.result.calls, run.result.bytes) == (3, 3 * len('"ab"'))
    assert (run.stats.calls, run.stats.bytes) == (3, 3 * len('"ab"'))


async def test_start_up_loads_the_standard_library_and_msgspec_only() -> None:
    """A program without await finds no async framework and no third-party module but msgspec.

    (typing_extensions is allowed: msgspec imports it when it can.) Nor are argparse and
    traceback loaded: the runner parses its command line by hand and formats tracebacks
    only when a program fails.
    """
    run = await run_program("import sys\nsorted(sys.modules)")
    modules = run.value
    assert isinstance(modules, list)
    top = {str(name).split(".")[0] for name in modules}
    assert not top & {"asyncio", "anyio", "trio", "sniffio", "uvloop"}
    assert not top & {"argparse", "traceback"}
    ours = {"runner", "protocol", "__main__"}
    third_party = top - set(sys.stdlib_module_names) - ours
    assert third_party <= {"msgspec", "typing_extensions"}
    assert "msgspec" in third_party


async def test_asyncio_is_imported_only_for_a_program_that_awaits() -> None:
    """A program with top-level await runs under asyncio, imported for it."""
    run = await run_program("import sys\nawait host.echo(1)\n'asyncio' in sys.modules")
    assert run.value is True


async def test_python_dash_m_runner_runs_a_program() -> None:
    """``python -m runner`` is the same runner."""
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), MSGSPEC_DIR])}
    command = [sys.executable, "-S", "-m", "runner"]
    run = await run_program("host.echo({'via': 'dash m'})", command=command, env=env)
    assert run.value == {"via": "dash m"}
    assert run.status == 0


async def test_a_value_too_large_for_one_frame_fails_as_limit() -> None:
    """A value over the frame cap is replaced by a small Result with kind ``limit``."""
    run = await run_program("'x' * (17 << 20)")
    assert not run.result.ok
    assert run.result.kind is Kind.LIMIT
    assert "too large" in run.result.error
    assert run.status == 0


@pytest.mark.parametrize(
    ("program", "value"),
    [
        ("'x' * (3 << 20)", "x" * (3 << 20)),  # written from the value's JSON where it lies
        ("{'k\"\\\\': 'v' * (1 << 20)}", {'k"\\': "v" * (1 << 20)}),  # a few escapes
        ("['ab'] * 300_000", ["ab"] * 300_000),  # too many quotes: framed whole
    ],
    ids=["spliced", "spliced-escapes", "whole"],
)
async def test_a_large_value_arrives_whole(program: str, value: object) -> None:
    run = await run_program(program)
    assert run.result.ok, run.result.error
    assert run.value == value
    assert run.status == 0


async def test_the_runner_exits_after_its_result_whatever_the_program_left_running() -> None:
    """A non-daemon thread the program left running does not keep the runner alive."""
    program = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\n1"
    t0 = time.monotonic()
    run = await run_program(program)
    assert run.value == 1
    assert run.status == 0
    assert time.monotonic() - t0 < 20


def test_no_start_within_the_timeout_exits_nonzero() -> None:
    """A parent that never sends Start: the runner exits 2 within its --start-timeout."""
    with spawn_runner("--start-timeout", "0.5") as child:
        t0 = time.monotonic()
        status, stdout, stderr = child.finish(timeout=20)
        elapsed = time.monotonic() - t0
    assert status == 2
    assert elapsed < 10
    assert stdout == ""
    assert stderr.startswith("runner: no Start within 0.5 s")
    assert "Traceback" not in stderr


def test_parent_closing_the_start_channel_makes_the_runner_exit_nonzero() -> None:
    """EOF on the start channel before a Start: the runner says so in one line and exits 2."""
    with spawn_runner() as child:
        child.start.close()
        status, _, stderr = child.finish(timeout=20)
    assert status == 2
    assert stderr == "runner: the start channel closed before a Start arrived\n"


def test_garbage_on_the_start_channel_makes_the_runner_exit_nonzero() -> None:
    """A frame that is not a Start: one line on stderr, no traceback, exit 2."""
    with spawn_runner() as child:
        child.start.try_write(b"\x00\x00\x00\x05hello")
        child.start.close()
        status, _, stderr = child.finish(timeout=20)
    assert status == 2
    assert stderr.startswith("runner: no usable Start")
    assert len(stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "arguments",
    [
        [],
        ["5", "6", "7"],
        ["5", "6", "7", "x"],
        ["1", "5", "6", "7"],
        ["--start-timeout", "-1"],
        ["--start-timeout", "soon"],
        ["--frobnicate"],
        ["--backend"],
    ],
    ids=["none", "three", "not-int", "stdout", "negative", "nan", "unknown", "no-value"],
)
def test_a_bad_command_line_exits_64_with_usage(arguments: list[str]) -> None:
    """Bad arguments: exit 64 with a one-line reason and the usage line, no traceback."""
    out = subprocess.run(
        [*bootstrap_command(), *arguments], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 64
    assert out.stderr.startswith("runner: ")
    assert "usage: python -m runner" in out.stderr
    assert "Traceback" not in out.stderr


def test_an_unknown_backend_exits_64_naming_the_known_ones() -> None:
    """``--backend`` must name a registered backend."""
    with spawn_runner("--backend", "cobol") as child:
        status, _, stderr = child.finish(timeout=20)
    assert status == 64
    assert "no backend named 'cobol'" in stderr
    assert "python" in stderr


async def test_explicit_backend_and_start_timeout_are_accepted() -> None:
    """``--backend=python --start-timeout 5`` runs a program as the defaults do."""
    with spawn_runner("--backend=python", "--start-timeout", "5") as child:
        with anyio.fail_after(30):
            result = await Starter(child.start).start(make_start("6 * 7"))
        child.start.close()
        status, _, _ = child.finish()
    assert isinstance(result, Result)
    assert (result.ok, result.value, status) == (True, "42", 0)


# Run as a separate process: it makes itself a subreaper, spawns a middle process that
# spawns a runner and exits at once, then waits for the orphaned runner (now its child) and
# prints how it ended. It holds the runner's channels open all along, so nothing but the
# death signal can end the runner before its start timeout.
_GRANDPARENT = """
import ctypes, json, os, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
pipes = [os.pipe() for _ in range(4)]
fds = (pipes[0][0], pipes[1][1], pipes[2][0], pipes[3][1])
command = json.loads(sys.argv[1]) + [str(fd) for fd in fds]
middle = (
    "import subprocess, sys\\n"
    f"p = subprocess.Popen({command!r}, pass_fds={fds!r},\\n"
    "                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\\n"
    "print(p.pid, flush=True)\\n"
    "import time; time.sleep(1.0)\\n"  # the runner arms its death signal meanwhile
)
out = subprocess.run([sys.executable, "-I", "-S", "-c", middle], pass_fds=fds,
                     capture_output=True, text=True, check=True)
pid = int(out.stdout)
deadline = time.monotonic() + 5
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        if os.WIFSIGNALED(status):
            print(json.dumps({"signal": os.WTERMSIG(status)}))
        else:
            print(json.dumps({"status": os.WEXITSTATUS(status)}))
        break
    time.sleep(0.02)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print(json.dumps({"signal": "still alive"}))
"""


@linux_only
def test_the_runner_dies_with_its_parent() -> None:
    """PR_SET_PDEATHSIG: when the process that spawned the runner dies, SIGKILL ends it.

    (On a machine so loaded that the runner is still starting when its parent dies, it
    finds itself orphaned and exits 3 instead: it does not outlive its parent either way.)
    """
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _GRANDPARENT, json.dumps(bootstrap_command())],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(out.stdout) in ({"signal": signal.SIGKILL}, {"status": 3})


@linux_only
async def test_orphaned_descendants_of_the_program_are_reparented_to_the_runner() -> None:
    """PR_SET_CHILD_SUBREAPER: a grandchild whose parent exits becomes the runner's child."""
    program = (
        "import os, signal, time\n"
        "r, w = os.pipe()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    grandchild = os.fork()\n"
        "    if grandchild == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    os.write(w, str(grandchild).encode())\n"
        "    os._exit(0)\n"
        "os.close(w)\n"
        "os.waitpid(child, 0)\n"
        "grandchild = int(os.read(r, 64))\n"
        "with open(f'/proc/{grandchild}/stat') as f:\n"
        "    ppid = int(f.read().rpartition(')')[2].split()[1])\n"
        "os.kill(grandchild, signal.SIGKILL)\n"
        "_, status = os.waitpid(grandchild, 0)\n"  # only a parent may wait for it
        "[ppid == os.getpid(), os.WIFSIGNALED(status)]"
    )
    run = await run_program(program)
    assert run.value == [True, True]


async def test_the_channels_are_not_passed_on_to_programs_the_program_executes() -> None:
    """The four channel descriptors are close-on-exec: an exec'd process cannot hold them."""
    program = (
        "import os, sys\n"
        "frame = sys._getframe()\n"
        "while type(frame.f_locals.get('args')).__name__ != 'Arguments':\n"
        "    frame = frame.f_back\n"
        "args = frame.f_locals['args']\n"
        "fds = (*args.start_fds, *args.call_fds)\n"
        "[len(set(fds)), [os.get_inheritable(fd) for fd in fds]]"
    )
    run = await run_program(program)
    assert run.value == [4, [False, False, False, False]]


async def test_the_runner_lingers_after_its_result_until_the_start_channel_closes() -> None:
    """After its Result the runner stays alive (holding what the program left running)
    until the parent closes the start channel, then exits 0 at once."""
    with spawn_runner() as child:
        with anyio.fail_after(30):
            result = await Starter(child.start).start(make_start("1"))
        assert result.ok
        await anyio.sleep(0.3)
        assert child.process.poll() is None
        child.start.close()
        status, _, _ = child.finish(timeout=20)
    assert status == 0


def _with_scope(raised: str) -> list[str]:
    """The runner's command, with :func:`runner._landlock.scope_signals` made to raise
    ``raised`` (a Python expression) instead of putting up the process level's wall."""
    patch = (
        f"import sys; sys.path[:0] = [{str(ROOT)!r}, {MSGSPEC_DIR!r}]; "
        "import errno, runner._landlock as landlock\n"
        f"def refuse():\n    raise {raised}\n"
        "landlock.scope_signals = refuse\n"
        "from runner._main import main; main()"
    )
    return [sys.executable, "-I", "-S", "-c", patch]


async def test_a_runner_without_confine_scopes_its_signals() -> None:
    """A runner without ``--confine`` (the process level) cannot signal its parent, where
    the kernel scopes signals; where it cannot, nothing changed."""
    program = f"""
import os
try:
    os.kill({os.getpid()}, 0)
    outcome = "ok"
except OSError as exc:
    outcome = type(exc).__name__
outcome
"""
    run = await run_program(program)
    assert run.value == ("ok" if signal_scope_gap() else "PermissionError")


async def test_a_kernel_without_the_scope_runs_the_program_as_before() -> None:
    """Where scoping signals is not supported (EOPNOTSUPP), the program runs unscoped: the
    host's probe, not the run, says that the wall is missing."""
    command = _with_scope("OSError(errno.EOPNOTSUPP, 'no scope here (test)')")
    run = await run_program(f"import os\nos.kill({os.getpid()}, 0)\n'signalled'", command=command)
    assert run.value == "signalled"
    assert run.status == 0


@pytest.mark.parametrize(
    "raised", ["OSError(errno.EPERM, 'refused (test)')", "RuntimeError('threads (test)')"]
)
async def test_a_wall_that_fails_to_go_up_fails_the_run_before_the_program(raised: str) -> None:
    """Where the kernel has the scope but putting it up fails, the program does not run: the
    Result says why (kind ``denied``), and the runner exits with NOT_CONFINED."""
    command = _with_scope(raised)
    run = await run_program("print('the program ran')\n1", command=command)
    assert not run.result.ok
    assert run.result.kind is Kind.DENIED
    assert "walls could not be put up" in run.result.error
    assert "(test)" in run.result.error
    assert "the program ran" not in run.stdout
    assert run.status == RunnerExit.NOT_CONFINED
