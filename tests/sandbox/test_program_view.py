"""What a program reads of itself (issue 16, items 4 and 12): its own command line, its
name in its tracebacks, ``CallError`` the same way at every level, and, at ``confined``,
nothing of the host's paths but where the README says they remain."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest

import protocol
import sandbox
from sandbox import Budget, CallError, Kind, Level, plane
from sandbox._children import WORKDIR_PREFIX, workdir_bases
from tests.host import child_levels, needs_confinement
from tests.sandbox.test_cli import cli, program_file

pytestmark = pytest.mark.anyio

#: The program's own command line, as ``sandbox run prog.py -- 3 --ready 7`` gives it.
ARGV: Final = ["prog.py", "3", "--ready", "7"]

#: A program that parses its arguments with argparse, as ordinary scripts do.
PARSES_ITS_ARGUMENTS: Final = """\
import argparse, sys
parser = argparse.ArgumentParser()
parser.add_argument("n", type=int)
parser.add_argument("--ready")
args = parser.parse_args()
[sys.argv, sys.orig_argv[1:], parser.prog, args.n, args.ready]
"""

#: The interpreter's real file (a virtual environment's python is a link to it).
REAL_EXECUTABLE: Final = os.path.realpath(sys.executable)

#: A program whose failure goes through a function of its own.
FAILS: Final = 'def fail():\n    raise ValueError("no")\n\nfail()\n'


def deny(x: object) -> object:
    """A tool that refuses every call, as a policy would."""
    raise CallError(Kind.DENIED, "not for this program")


# -- the command line ------------------------------------------------------------------


@pytest.mark.usefixtures("spawn")
@pytest.mark.parametrize("level", child_levels())
async def test_a_program_parses_its_own_arguments(level: Level) -> None:
    """``sys.argv`` is the program's name and arguments (``argv=``), so argparse reads
    them; ``sys.orig_argv`` ends with the same, as ``python prog.py ARGS`` makes it."""
    result = await sandbox.run(PARSES_ITS_ARGUMENTS, level=level, argv=ARGV)
    assert result.value == [ARGV, ARGV, "prog.py", 3, "7"], result.error


@pytest.mark.usefixtures("spawn")
@pytest.mark.parametrize("level", child_levels())
async def test_without_argv_the_program_is_named_by_a_placeholder(level: Level) -> None:
    """No ``argv``: ``sys.argv`` is ``["<program>"]``, and ``sys.executable`` an
    interpreter the program can run (inside the confined view, the real file behind a
    virtual environment's link, at ``/sandbox/bin``)."""
    program = (
        "import os, sys\n"
        "[sys.argv, sys.orig_argv, sys.executable, os.access(sys.executable, os.X_OK)]"
    )
    result = await sandbox.run(program, level=level)
    executable = sys.executable
    if level is Level.CONFINED:
        executable = f"/sandbox/bin/{os.path.basename(REAL_EXECUTABLE)}"
    assert result.value == [["<program>"], [executable, "<program>"], executable, True]


def test_sandbox_run_passes_what_follows_the_double_dash(tmp_path: Path) -> None:
    """``sandbox run prog.py -- ARGS``: the program's ``sys.argv`` is the file's base
    name (not the path it was given by) and ARGS, options included, whatever options of
    ``sandbox run`` came before ``--``."""
    path = program_file(tmp_path, PARSES_ITS_ARGUMENTS, name="prog.py")
    proc = cli("run", path, "--level", "process", "--", *ARGV[1:])
    assert proc.returncode == 0, proc.stderr
    assert msgspec.json.decode(proc.stdout) == [ARGV, ARGV, "prog.py", 3, "7"]


def test_sandbox_run_passes_everything_after_the_first_double_dash_as_it_is(
    tmp_path: Path,
) -> None:
    """Past the first ``--`` nothing is the command's: a later ``--`` is the program's."""
    path = program_file(tmp_path, "import sys\nsys.argv", name="prog.py")
    proc = cli("run", path, "--json", "--", "a", "--", "--json")
    assert proc.returncode == 0, proc.stderr
    assert msgspec.json.decode(proc.stdout)["value"] == ["prog.py", "a", "--", "--json"]


def test_sandbox_run_refuses_arguments_at_in_process(tmp_path: Path) -> None:
    """At ``in_process`` the program shares the command's own ``sys.argv``: arguments
    for it are bad usage (exit 2), not silently dropped."""
    path = program_file(tmp_path, "1", name="prog.py")
    proc = cli("run", path, "--level", "in_process", "--", "a")
    assert proc.returncode == 2
    assert "need a child level" in proc.stderr


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        ("prog.py", TypeError),  # a lone string is a sequence of strings, and a mistake
        ([b"prog.py"], TypeError),
        (["prog.py", 3], TypeError),
        ([], ValueError),
    ],
    ids=["str", "bytes-item", "int-item", "empty"],
)
async def test_a_bad_argv_is_refused_before_anything_runs(argv: Any, error: type) -> None:
    """An ``argv`` that is not a non-empty sequence of strings raises, naming argv."""
    with pytest.raises(error, match="argv"):
        await sandbox.run("1", argv=argv)


async def test_in_process_the_program_shares_the_hosts_sys_argv() -> None:
    """At ``in_process`` the program runs in this interpreter: ``sys.argv`` is the host's,
    and the run leaves it as it was; ``argv`` gives the program its name (for its
    tracebacks) and arguments are refused."""
    before = list(sys.argv)
    result = await sandbox.run("import sys\nsys.argv", level=Level.IN_PROCESS, argv=["prog.py"])
    assert result.value == before
    assert sys.argv == before
    with pytest.raises(ValueError, match="child level"):
        await sandbox.run("1", level=Level.IN_PROCESS, argv=["prog.py", "a"])


# -- tracebacks ------------------------------------------------------------------------


@pytest.mark.parametrize("level", [Level.IN_PROCESS, *child_levels()])
async def test_tracebacks_carry_the_programs_name(level: Level) -> None:
    """A failing program's traceback names its frames by the program's name, with their
    source lines, at every level."""
    result = await sandbox.run(FAILS, level=level, argv=["prog.py"])
    assert result.kind is Kind.RAISED
    assert 'File "prog.py", line 4, in <module>' in result.error
    assert 'File "prog.py", line 2, in fail\n    raise ValueError("no")' in result.error
    assert "<program>" not in result.error


# -- CallError, one way at every level ---------------------------------------------------

CATCHES_A_DENIED_CALL: Final = """\
from protocol import CallError as imported
try:
    host.deny(1)
except CallError as exc:
    kind = exc.kind
[kind, imported is CallError]
"""


@pytest.mark.parametrize("level", [Level.IN_PROCESS, *child_levels()])
async def test_a_program_catches_callerror_the_same_way_at_every_level(level: Level) -> None:
    """``CallError`` is a global of the program, as ``host`` is, and the same class as
    ``from protocol import CallError``: a program catches a denied call and reads its kind
    the same way at every level."""
    result = await sandbox.run(CATCHES_A_DENIED_CALL, tools=[deny], level=level)
    assert result.value == ["denied", True], result.error


# -- no host path, at confined -----------------------------------------------------------

#: Collects everything the program can read of itself, each as text.
COLLECTS_ITSELF: Final = """\
import gc, os, sys, traceback, types
import msgspec, protocol, runner
import msgspec.inspect  # not imported before: found in the view now

ours = ("protocol", "runner", "msgspec")
seen = {
    "sys.argv": sys.argv,
    "sys.orig_argv": sys.orig_argv,
    "sys.executable": sys.executable,
    "sys.path": sys.path,
    "sys.prefix": [sys.prefix, sys.exec_prefix],
    "importer cache": list(sys.path_importer_cache),
    "modules": {
        name: [vars(m).get(a) for a in ("__file__", "__cached__", "__path__", "__spec__")]
        for name, m in sys.modules.items()
        if name.partition(".")[0] in ours
    },
    "code": gc.unfreeze() or sorted({
        f.__code__.co_filename for f in gc.get_objects() if isinstance(f, types.FunctionType)
    }),
    "msgspec.inspect.__file__": msgspec.inspect.__file__,
    "frames": [
        [f.f_code.co_filename, f.f_code.co_consts, f.f_locals, f.f_globals.get("__name__")]
        for f, _ in traceback.walk_stack(None)
        if f.f_globals is not globals()
    ],
    "sys": {k: v for k, v in vars(sys).items() if isinstance(v, (str, list, tuple, dict))},
    "globals": {
        name: vars(m) for name, m in sys.modules.items() if name.partition(".")[0] in ours
    },
    "__file__": globals().get("__file__"),
    "__spec__": sys.modules["__main__"].__spec__,
    "protocol.__file__": protocol.__file__,
    "runner.__file__": runner.__file__,
    "msgspec.__file__": msgspec.__file__,
    "os.environ": dict(os.environ),
    "cwd": os.getcwd(),
    "stack": traceback.format_stack(),
}

def fail():
    raise ValueError("no")

try:
    fail()
except ValueError:
    seen["traceback"] = traceback.format_exc()
try:
    host.deny(1)
except CallError:
    seen["call traceback"] = traceback.format_exc()
for name in ("cmdline", "environ"):
    try:
        with open(f"/proc/self/{name}", "rb") as f:
            seen[f"/proc/self/{name}"] = f.read().decode("utf-8", "replace")
    except OSError as exc:
        seen[f"/proc/self/{name}"] = repr(exc)
{key: repr(value) for key, value in seen.items()}
"""

#: What a confined program reads of itself that names the interpreter's installation
#: (which its view holds at its host path: the README says so); nothing else does.
NAMES_THE_INSTALLATION: Final = {
    "sys",
    "frames",
    "globals",
    "sys.path",
    "sys.prefix",
    "importer cache",
    "code",
}


def host_paths() -> list[str]:
    """The host paths a confined program must not learn: the checkout the runner comes
    from, the virtual environment (or the directory msgspec is installed in), and the
    prefix of the runs' host working directories."""
    paths = [
        str(Path(protocol.__file__).resolve().parents[1]),
        str(Path(msgspec.__file__).resolve().parents[1]),
        *(os.path.join(base, WORKDIR_PREFIX) for base in workdir_bases()),
    ]
    if sys.prefix != sys.base_prefix:
        paths.append(sys.prefix)
    return paths


@needs_confinement()
@pytest.mark.usefixtures("spawn")
async def test_a_confined_program_sees_no_host_path_but_the_installations() -> None:
    """Of everything a confined program reads of itself (its command line, interpreter,
    file, spec, modules, the file of every function it holds, tracebacks, working
    directory, environment, ``/proc/self``...), nothing names the host's checkout,
    virtual environment or working directories; only what ``NAMES_THE_INSTALLATION``
    lists names the interpreter's installation (as the README says)."""
    result = await sandbox.run(
        COLLECTS_ITSELF, tools=[deny], level=Level.CONFINED, argv=["prog.py", "a"]
    )
    assert result.ok, result.error
    seen: dict[str, str] = result.value
    assert len(seen) == 24
    paths = host_paths()
    showing = {key for key, text in seen.items() if any(path in text for path in paths)}
    assert showing == set(), {key: seen[key] for key in showing}
    installation = {key for key, text in seen.items() if sys.base_prefix in text}
    assert installation <= NAMES_THE_INSTALLATION, installation - NAMES_THE_INSTALLATION
    assert seen["sys.argv"] == repr(["prog.py", "a"])
    line = COLLECTS_ITSELF.splitlines().index('    raise ValueError("no")') + 1
    assert f'File "prog.py", line {line}, in fail' in seen["traceback"]
    assert seen["__file__"] == seen["__spec__"] == "None"
    # The runner's code is named by its place in the view, where its source is found.
    assert seen["runner.__file__"] == repr("/sandbox/lib/runner/__init__.py")
    assert seen["msgspec.inspect.__file__"] == repr("/sandbox/lib/msgspec/inspect.py")
    assert 'File "/sandbox/lib/runner/_host.py"' in seen["call traceback"]
    assert "self._client.call(self.name, text)" in seen["call traceback"]
    assert seen["cwd"] == repr("/tmp/work")


@pytest.mark.usefixtures("spawn")
async def test_at_process_the_runners_frames_keep_their_source() -> None:
    """At ``process`` the runner's frames are named as at ``confined`` (the zygote names
    its code once for every child), and a traceback the program formats still shows
    their source lines, read through each module's loader from the host's files."""
    program = (
        "import traceback\n"
        "try:\n"
        "    host.deny(1)\n"
        "except CallError:\n"
        "    text = traceback.format_exc()\n"
        "text"
    )
    result = await sandbox.run(program, tools=[deny], level=Level.PROCESS)
    assert result.ok, result.error
    assert '/runner/_host.py", line' in result.value
    assert "self._client.call(self.name, text)" in result.value


# -- the plane's program tool ------------------------------------------------------------


@pytest.mark.parametrize("level", child_levels())
async def test_the_program_tool_passes_args_to_the_program(level: Level) -> None:
    """``run_program`` takes the program's arguments as ``args``: its ``sys.argv[1:]``,
    after the placeholder name."""
    ex = plane.InProcess([plane.ProgramTool(level=level, budget=Budget(wall_clock=20))])
    r = await ex.call(
        plane.Call(tool="run_program", arguments={"code": PARSES_ITS_ARGUMENTS, "args": ARGV[1:]})
    )
    assert not r.is_error, r.text
    argv = ["<program>", *ARGV[1:]]
    assert r.data["value"] == [argv, argv, "<program>", 3, "7"]


@pytest.mark.parametrize(
    ("level", "arguments"),
    [
        (Level.PROCESS, {"code": "1", "args": "a"}),
        (Level.PROCESS, {"code": "1", "args": [1]}),
        (Level.IN_PROCESS, {"code": "1", "args": ["a"]}),
    ],
    ids=["args-a-string", "args-not-strings", "args-at-in-process"],
)
async def test_the_program_tool_refuses_args_it_cannot_pass(
    level: Level, arguments: dict[str, Any]
) -> None:
    """Misshapen ``args``, or any at ``in_process``, make an invalid call: nothing runs."""
    ex = plane.InProcess([plane.ProgramTool(level=level)])
    r = await ex.call(plane.Call(tool="run_program", arguments=arguments))
    assert (r.is_error, r.kind) == (True, Kind.INVALID)
    assert "args" in r.text


@needs_confinement()
@pytest.mark.usefixtures("spawn")
async def test_a_confined_program_runs_its_interpreter() -> None:
    """``sys.executable`` at ``confined`` is an interpreter the program can run (the view
    holds the program loader the executable names, by the path execve resolves): the
    same Python, under the same walls, naming itself the same way."""
    program = (
        "import subprocess, sys\n"
        "child = 'import sys; print(sys.executable, 6 * 7)'\n"
        "done = subprocess.run([sys.executable, '-I', '-c', child], capture_output=True)\n"
        "[done.returncode, done.stdout.decode(), done.stderr.decode()]"
    )
    result = await sandbox.run(program, level=Level.CONFINED)
    inside = f"/sandbox/bin/{os.path.basename(REAL_EXECUTABLE)}"
    assert result.value == [0, f"{inside} 42\n", ""], result.error
