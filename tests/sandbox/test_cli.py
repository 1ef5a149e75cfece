"""The ``sandbox`` command line, end to end: a real ``python -m sandbox`` in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

import sandbox
from examples import tools as example_tools
from runner._landlock import signal_scope_gap
from sandbox import Budget, RunResult
from sandbox._commands._main import _parser, main
from sandbox._commands._options import BUDGET_OPTIONS, budget_from
from sandbox._engine import _levels
from tests.commands import exit_code
from tests.host import late_allowed

ROOT = Path(__file__).resolve().parent.parent.parent
TOOLS_PY = ROOT / "examples" / "tools.py"
PROGRAMS = ROOT / "examples" / "programs"
#: Every option of ``sandbox run``: each must be documented in ``sandbox run --help``.
RUN_OPTIONS = (
    "--level",
    "--wall-clock",
    "--max-calls",
    "--max-bytes",
    "--max-inflight",
    "--max-call-deadline",
    "--max-memory",
    "--max-cpu",
    "--max-processes",
    "--max-output",
    "--max-file-size",
    "--max-open-files-per-process",
    "--max-disk",
    "--tools",
    "--spawn",
    "--stack-on-timeout",
    "--json",
)
#: Seconds any one command may take; longer means it hangs.
TIMEOUT = 60.0
FIVE_CALLS = "for _ in range(5):\n    host.search('a')\n"


def cli(
    *args: str | Path, stdin: str | None = None, cwd: Path = ROOT, command: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sandbox ARGS`` (or the ``command`` executable) and capture it all."""
    argv = [sys.executable, "-m", "sandbox"] if command is None else [command]
    return subprocess.run(
        [*argv, *map(str, args)],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=TIMEOUT,
        check=False,
    )


def program_file(tmp_path: Path, source: str, name: str = "program.py") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


def sandbox_lines(stderr: str) -> list[str]:
    """The command's own lines on stderr (the program's stderr is passed through as is)."""
    return [line for line in stderr.splitlines() if line.startswith("sandbox")]


def test_help_exits_zero() -> None:
    """``--help`` exits 0 and names each command."""
    proc = cli("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("run", "doctor"):
        assert command in proc.stdout
    assert proc.stderr == ""


@pytest.mark.slow
def test_run_help_mentions_every_option() -> None:
    """``run --help`` exits 0, lists every option, every level and the exit codes."""
    proc = cli("run", "--help")
    assert proc.returncode == 0, proc.stderr
    missing = [option for option in RUN_OPTIONS if option not in proc.stdout]
    assert missing == []
    for level in sandbox.Level:
        assert level.value in proc.stdout
    assert "Exit codes" in proc.stdout


def test_every_budget_item_has_one_option_the_same_in_every_command() -> None:
    """The budget's options come from one table, one option per Budget item, and make the
    same Budget in ``run``, ``serve`` and ``agent``: the items given, and no other."""
    assert sorted(o.item for o in BUDGET_OPTIONS) == sorted(Budget.__struct_fields__)
    given = ["--timeout", "none", "--max-calls", "0", "--max-output", "64k", "--max-cpu", "2.5"]
    expected = Budget(wall_clock=None, max_calls=0, max_output=64 << 10, max_cpu=2.5)
    for command in (["run", "p.py"], ["serve"], ["agent", "--model", "m", "task"]):
        assert budget_from(_parser().parse_args(command)) == Budget(), command
        assert budget_from(_parser().parse_args([*command, *given])) == expected, command


def test_run_help_shows_each_default_and_how_to_lift_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``run --help`` says that ``none`` lifts an item, and shows the defaults of
    sandbox.DEFAULTS."""
    with pytest.raises(SystemExit) as info:
        main(["run", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "'none' for no limit (all but --max-inflight). 0 means zero" in text
    wall_clock = sandbox.DEFAULTS["wall_clock"]
    assert f"seconds the whole run may take (default: {wall_clock:g} s)" in text
    assert "in flight at once, always capped (default: 64)" in text
    assert "bytes of stdout, and of stderr, kept (default: 1M)" in text
    assert "tool calls the program may make (default: no limit)" in text


def test_max_calls_none_lifts_and_zero_allows_none(tmp_path: Path) -> None:
    """``--max-calls none`` is no limit; ``--max-calls 0`` allows no call at all (exit 3)."""
    program = program_file(tmp_path, FIVE_CALLS + "'done'\n")
    lifted = cli("run", program, "--tools", TOOLS_PY, "--max-calls", "none")
    assert lifted.returncode == 0, lifted.stderr
    assert sandbox_lines(lifted.stderr)[-1].startswith("sandbox: 5 calls")
    zero = cli("run", program, "--tools", TOOLS_PY, "--max-calls", "0")
    assert zero.returncode == 3, zero.stderr
    assert sandbox_lines(zero.stderr)[-1].startswith("sandbox: 0 calls")


def test_success_prints_the_value_as_json(tmp_path: Path) -> None:
    """A program that succeeds exits 0 with its value as one line of JSON on stdout."""
    proc = cli("run", program_file(tmp_path, "{'a': [1, 2.5], 'b': None, 'c': 'é'}"))
    assert proc.returncode == 0, proc.stderr
    assert msgspec.json.decode(proc.stdout) == {"a": [1, 2.5], "b": None, "c": "é"}
    assert proc.stdout.count("\n") == 1


def test_program_output_is_passed_through(tmp_path: Path) -> None:
    """What the program prints reaches stdout and stderr, before the value."""
    source = "import sys\nprint('hello from the program')\nprint('oops', file=sys.stderr)\n6 * 7\n"
    proc = cli("run", program_file(tmp_path, source))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "hello from the program\n42\n"
    assert proc.stderr.startswith("oops\n")


def test_json_prints_a_run_result(tmp_path: Path) -> None:
    """``--json`` prints the whole RunResult as one JSON document, program output inside it."""
    source = "print('inside')\nhost.word_count('one two three')\n"
    proc = cli("run", program_file(tmp_path, source), "--tools", TOOLS_PY, "--json")
    assert proc.returncode == 0, proc.stderr
    document = msgspec.json.decode(proc.stdout)
    assert isinstance(document, dict)
    assert document["ok"] is True
    assert document["value"] == 3
    assert document["calls"] == 1
    assert document["level"] == "process"
    assert document["stdout"] == "inside\n"
    result = msgspec.json.decode(proc.stdout, type=RunResult)  # the schema, not just a dict
    assert (result.ok, result.value, result.calls, result.kind) == (True, 3, 1, None)


def test_failing_program_exits_one(tmp_path: Path) -> None:
    """A program that raises exits 1, with its kind and its exception on stderr."""
    proc = cli("run", program_file(tmp_path, "raise ValueError('boom')"))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert sandbox_lines(proc.stderr)[0].startswith("sandbox: raised")
    assert "ValueError: boom" in proc.stderr


#: What a hostile program writes to forge lines or drive a terminal: ESC (a control
#: sequence), CR, NUL, BEL, a C1 control, and the right-to-left override.
HOSTILE_TEXT = "\x1b]0;owned\x07\x1b[2J\rsandbox: ok\x00\x9b\u202etxt.exe"
RAW_CONTROLS = ("\x1b", "\r", "\x00", "\x07", "\x9b", "\u202e")


@pytest.mark.parametrize("fails", [False, True], ids=["value", "error"])
@pytest.mark.slow
def test_program_text_is_escaped_on_the_terminal(tmp_path: Path, fails: bool) -> None:
    """Control and bidirectional characters from the program reach neither stream raw."""
    source = f"import sys\ntext = {HOSTILE_TEXT!r}\nprint(text)\nprint(text, file=sys.stderr)\n" + (
        "raise ValueError(text)\n" if fails else "text\n"
    )
    proc = cli("run", program_file(tmp_path, source))
    assert proc.returncode == (1 if fails else 0), proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert [c for c in RAW_CONTROLS if c in stream] == []
        assert "\\x1b]0;owned\\x07" in stream
        assert "\\u202etxt.exe" in stream
    if fails:
        assert "ValueError: \\x1b]0;owned" in proc.stderr
    else:
        assert proc.stdout.splitlines()[-1].startswith('"\\u001b]0;owned')


@pytest.mark.slow
def test_json_keeps_program_text_exact(tmp_path: Path) -> None:
    """``--json`` is JSON's own escaping: the document decodes to the program's exact text."""
    source = f"print({HOSTILE_TEXT!r}, end='')\n{HOSTILE_TEXT!r}\n"
    proc = cli("run", program_file(tmp_path, source), "--json")
    assert proc.returncode == 0, proc.stderr
    assert [c for c in RAW_CONTROLS if c in proc.stdout] == []
    result = msgspec.json.decode(proc.stdout, type=RunResult)
    assert (result.stdout, result.value) == (HOSTILE_TEXT, HOSTILE_TEXT)


@pytest.mark.slow
def test_json_failure_exits_one(tmp_path: Path) -> None:
    """With ``--json`` a failed run is still one RunResult document, and the exit code is 1."""
    proc = cli("run", program_file(tmp_path, "raise ValueError('boom')"), "--json")
    assert proc.returncode == 1
    result = msgspec.json.decode(proc.stdout, type=RunResult)
    assert not result.ok
    assert result.kind == sandbox.Kind.RAISED
    assert "ValueError: boom" in result.error


@pytest.mark.slow
def test_timeout_exits_three_at_the_limit(tmp_path: Path) -> None:
    """``--timeout 1`` ends a program asleep for 60 s with exit code 3, less than 1.5 s
    after the limit: the command takes at most that much longer than the same command
    running a program that ends at once (its start-up and the zygote's, measured here).
    Where no cpu cgroup keeps the host's share of the CPU, 10 s
    (:func:`tests.host.late_allowed`)."""
    t0 = time.monotonic()
    quick = cli("run", program_file(tmp_path, "1", "quick.py"), "--timeout", "1")
    baseline = time.monotonic() - t0
    assert quick.returncode == 0, quick.stderr
    t0 = time.monotonic()
    proc = cli("run", program_file(tmp_path, "import time; time.sleep(60)"), "--timeout", "1")
    elapsed = time.monotonic() - t0
    assert proc.returncode == 3, proc.stderr
    assert sandbox_lines(proc.stderr)[0].startswith("sandbox: limit (wall_clock)")
    assert 1.0 <= elapsed < baseline + 1.0 + late_allowed()


@pytest.mark.slow
def test_max_calls_caught_by_the_program(tmp_path: Path) -> None:
    """Past ``--max-calls 2`` a call raises CallError(limit); a program that catches it goes on."""
    source = (
        "from protocol import CallError\n"
        "done = []\n"
        "for _ in range(5):\n"
        "    try:\n"
        "        host.search('a')\n"
        "        done.append('ok')\n"
        "    except CallError as exc:\n"
        "        done.append(str(exc.kind))\n"
        "done\n"
    )
    program = program_file(tmp_path, source)
    proc = cli("run", program, "--tools", TOOLS_PY, "--max-calls", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    result = msgspec.json.decode(proc.stdout, type=RunResult)
    assert result.value == ["ok", "ok", "limit", "limit", "limit"]
    assert result.calls == 2


def test_max_calls_uncaught_exits_three(tmp_path: Path) -> None:
    """A program that does not catch the quota's CallError fails with kind limit: exit 3."""
    proc = cli("run", program_file(tmp_path, FIVE_CALLS), "--tools", TOOLS_PY, "--max-calls", "2")
    assert proc.returncode == 3, proc.stderr
    lines = sandbox_lines(proc.stderr)
    assert lines[0].startswith("sandbox: limit")
    assert "quota" in proc.stderr
    assert lines[-1].startswith("sandbox: 2 calls")


def test_tools_from_a_path_in_another_directory(tmp_path: Path) -> None:
    """``--tools path/to/tools.py`` loads that file, whatever the working directory."""
    proc = cli(
        "run",
        program_file(tmp_path, "host.word_count('a b c d')"),
        "--tools",
        TOOLS_PY,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "4\n"


@pytest.mark.slow
def test_tools_from_a_module_name(tmp_path: Path) -> None:
    """``--tools examples.tools`` imports the module from the working directory."""
    proc = cli(
        "run", program_file(tmp_path, "host.word_count('a b c')"), "--tools", "examples.tools"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "3\n"


@pytest.mark.slow
def test_tools_repeated(tmp_path: Path) -> None:
    """``--tools`` is repeatable; a module without TOOLS exposes its public functions."""
    program_file(tmp_path, "def shout(text: str) -> str:\n    return text.upper()\n", "extra.py")
    source = "[host.shout('hi'), host.word_count('a b')]"
    proc = cli(
        "run",
        program_file(tmp_path, source),
        "--tools",
        TOOLS_PY,
        "--tools",
        tmp_path / "extra.py",
    )
    assert proc.returncode == 0, proc.stderr
    assert msgspec.json.decode(proc.stdout) == ["HI", 2]


@pytest.mark.slow
def test_tools_file_named_like_a_loaded_module(tmp_path: Path) -> None:
    """``--tools dir/signal.py`` loads that file, not the standard library's ``signal``."""
    program_file(tmp_path, "def shout(text: str) -> str:\n    return text.upper()\n", "signal.py")
    proc = cli("run", "-", "--tools", tmp_path / "signal.py", stdin="host.shout('hi')")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == '"HI"\n'


def test_missing_program_is_bad_usage(tmp_path: Path) -> None:
    """A program file that does not exist is bad usage (exit 2), naming the file and the
    reason."""
    missing = tmp_path / "no_such_program.py"
    proc = cli("run", missing)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr == f"sandbox run: error: cannot read {missing}: No such file or directory\n"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (
            "no_such_tools_module",
            "'no_such_tools_module': ModuleNotFoundError: No module named 'no_such_tools_module'",
        ),
        ("no/such/tools.py", "'no/such/tools.py': no such file: "),
    ],
    ids=["module", "path"],
)
def test_unknown_tools_module_is_bad_usage(
    tmp_path: Path, name: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tools module or file that does not exist is bad usage (exit 2), naming it."""
    assert main(["run", str(program_file(tmp_path, "1")), "--tools", name]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"sandbox run: error: cannot load tools module {says}")
    assert len(err.splitlines()) == 1


@pytest.mark.slow
def test_tools_module_with_a_missing_dependency_exits_four(tmp_path: Path) -> None:
    """A tools file whose own import fails exits 4, with the import error."""
    tools = program_file(tmp_path, "import no_such_dependency_zz\n", "broken_tools.py")
    proc = cli("run", program_file(tmp_path, "1"), "--tools", tools)
    assert proc.returncode == 4
    assert "no_such_dependency_zz" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "source", ["raise RuntimeError('no config')\n", "def broken(:\n"], ids=["raises", "syntax"]
)
@pytest.mark.slow
def test_tools_module_that_fails_to_load_exits_four(tmp_path: Path, source: str) -> None:
    """A tools file that raises or does not parse exits 4 with one clear line, no traceback."""
    tools = program_file(tmp_path, source, "bad_tools.py")
    proc = cli("run", program_file(tmp_path, "1"), "--tools", tools)
    assert proc.returncode == 4
    assert "Traceback" not in proc.stderr
    assert "bad_tools" in proc.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--timeout", "-1"], "argument --timeout: wall_clock must be a positive"),
        (["--wall-clock", "0"], "argument --wall-clock: wall_clock must be a positive"),
        (["--max-calls", "-1"], "argument --max-calls: max_calls must be at least 0, got -1"),
        (["--max-inflight", "none"], "max_inflight cannot be None"),
        (["--call-timeout", "nan"], "argument --call-timeout: max_call_deadline must be"),
        (["--max-open-files", "3"], "max_open_files_per_process must be at least 16"),
        (["--max-memory", "1000"], "argument --max-memory: max_memory must be at least 16 MiB"),
        (["--level", "in_process", "--spawn", "pool"], "--spawn pool needs a child level"),
        (["--level", "in_process", "--spawn", "cold"], "--spawn cold needs a child level"),
    ],
)
def test_bad_option_values_are_bad_usage(
    tmp_path: Path, args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value out of range, or options that do not go together, is bad usage: exit 2 (the
    documented code), one message naming the option, nothing run."""
    program = program_file(tmp_path, "print('ran')")
    assert exit_code(["run", str(program), *args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert says in err
    assert "Traceback" not in err


def test_too_little_memory_is_refused_on_the_command_line(tmp_path: Path) -> None:
    """``--max-memory 1000`` names the item and its minimum (exit 2), instead of the
    kernel's EBUSY from the cgroup."""
    proc = cli("run", program_file(tmp_path, "1"), "--max-memory", "1000")
    assert proc.returncode == 2
    assert "max_memory must be at least 16 MiB" in proc.stderr
    assert "Errno" not in proc.stderr


def test_the_least_memory_allowed_runs_a_program(tmp_path: Path) -> None:
    """At the least ``--max-memory`` the command allows, a program runs: a cold child too."""
    proc = cli("run", "--spawn", "cold", "--max-memory", "16M", program_file(tmp_path, "6 * 7"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42\n"


def test_json_says_when_the_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--json`` a refused run still prints one JSON object: ok false, refused, the
    error (and it decodes as a RunResult)."""
    program = str(program_file(tmp_path, "1"))
    for args, code in (
        (["--level", "in_process", "--timeout", "5"], 4),  # the level cannot enforce it
        (["--level", "in_process", "--spawn", "pool"], 2),  # bad usage
        (["--tools", "no_such_tools_module"], 2),
    ):
        assert main(["run", program, "--json", *args]) == code, args
        out, err = capsys.readouterr()
        document = msgspec.json.decode(out)
        assert document["ok"] is False
        assert document["refused"] is True
        assert document["error"] in err
        assert msgspec.json.decode(out, type=RunResult).ok is False


def test_the_value_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """Output that does not end with a newline is ended by one before the value."""
    proc = cli("run", program_file(tmp_path, "print('no newline', end='')\n42\n"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "no newline\n42\n"


def test_truncated_output_is_marked(tmp_path: Path) -> None:
    """Output cut at ``--max-output`` carries a mark where it was cut, saying how much was
    kept of how much, on each stream."""
    source = "import sys\nprint('x' * 100)\nprint('y' * 50, file=sys.stderr)\n1\n"
    proc = cli("run", program_file(tmp_path, source), "--max-output", "10")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (
        "xxxxxxxxxx\nsandbox: stdout truncated here: 10 of 101 bytes kept (--max-output)\n1\n"
    )
    assert proc.stderr.startswith(
        "yyyyyyyyyy\nsandbox: stderr truncated here: 10 of 51 bytes kept (--max-output)\n"
    )


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """``sandbox run ... | head -1``: the command stops writing quietly, with the run's
    exit code, and prints no BrokenPipeError."""
    program = program_file(tmp_path, "for i in range(200_000):\n    print(i)\n")
    proc = subprocess.run(
        f"{sys.executable} -m sandbox run {program} | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.stdout == "0\n"
    assert "Traceback" not in proc.stderr
    assert "BrokenPipeError" not in proc.stderr
    assert proc.returncode == 0, proc.stderr


def test_reaching_max_processes_is_a_limit(tmp_path: Path) -> None:
    """A program that fails because ``--max-processes`` stopped its fork is reported as a
    limit (exit 3, cause processes), not as the program's BlockingIOError (exit 1)."""
    source = (
        "import os, time\n"
        "for _ in range(20):\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(2)\n"
        "        os._exit(0)\n"
    )
    proc = cli("run", program_file(tmp_path, source), "--max-processes", "5")
    assert proc.returncode == 3, proc.stderr
    assert sandbox_lines(proc.stderr)[0].startswith("sandbox: limit (processes)")


def test_version_prints_the_package_version() -> None:
    """``sandbox --version`` prints the distribution's version."""
    from importlib.metadata import version

    proc = cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"sandbox {version('sandbox-runtime')}\n"


def test_doctor_json_says_true_for_available() -> None:
    """``doctor --json`` says ``true`` for what is available, and the reason (a string)
    for what is not."""
    proc = cli("doctor", "--json")
    assert proc.returncode == 0, proc.stderr
    report = msgspec.json.decode(proc.stdout)
    probes = [*report["namespaces"].values(), *report["cgroups"].values()]
    probes += [report["seccomp"], report["own_uid_per_run"]]
    assert probes
    assert all(p is True or (isinstance(p, str) and p) for p in probes), probes
    assert report["levels"]["process"]["available"] is True
    # The process level's wall: true where this kernel scopes signals, else the reason.
    gap = signal_scope_gap()
    outside = report["levels"]["process"]["no_signal_or_trace_outside"]
    assert outside == (True if gap is None else gap)
    assert "no_signal_or_trace_outside" not in report["levels"]["confined"]
    others = report["levels"]["process"]["no_change_to_other_processes"]
    assert others == report["seccomp"]  # the same probe: true, or why not
    text = cli("doctor")
    assert text.returncode == 0, text.stderr
    line = "no signal or trace to a process outside the run: "
    assert line + ("yes" if gap is None else f"no ({gap})") in text.stdout
    line = "no change to another process's limits, scheduling or priority, nor to the machine: "
    assert line + ("yes" if others is True else f"no ({others})") in text.stdout
    confined = report["levels"]["confined"]
    assert confined["available"] is (confined["missing_walls"] == {})
    # The CPU share: held where the tests time a run's end tightly, else why not.
    share = report["cgroup_hierarchy"]["host_cpu_share"]
    assert (share is True) == _levels.host_cpu_share_held(), share
    assert share is True or (isinstance(share, str) and "as an equal" in share), share
    line = "the host's share of the CPU, held against the runs: "
    assert line + ("yes" if share is True else f"no ({share})") in text.stdout


@pytest.mark.parametrize("command", ["run", "serve", "agent"])
def test_help_shows_every_default_and_short_metavars(command: str) -> None:
    """Every option with a default says it in its help, and no option's usage spells out
    its choices (``--level LEVEL``, not ``--level {in_process,process,confined}``)."""
    import argparse

    parser = _parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        if action.help in (None, argparse.SUPPRESS) or not action.option_strings:
            continue
        if action.default in (None, False, [], "", argparse.SUPPRESS):
            continue
        assert "default" in action.help, action.option_strings
    proc = cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "{" not in proc.stdout
    assert "(default: None)" not in proc.stdout


@pytest.mark.slow
def test_memory_that_is_not_a_size_is_bad_usage(tmp_path: Path) -> None:
    """``--max-memory lots`` is bad usage (exit 2), naming the option and the value."""
    proc = cli("run", program_file(tmp_path, "1"), "--max-memory", "lots")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "--max-memory" in proc.stderr
    assert "'lots'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_infinite_size_is_bad_usage(tmp_path: Path) -> None:
    """``--max-memory infk`` is bad usage (exit 2), not a traceback."""
    proc = cli("run", program_file(tmp_path, "1"), "--max-memory", "infk")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_stdin_program(tmp_path: Path) -> None:
    """``-`` reads the program from standard input."""
    proc = cli("run", "-", stdin="print('from stdin')\n6 * 7\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "from stdin\n42\n"


def test_in_process_level_refuses_a_timeout(tmp_path: Path) -> None:
    """``--level in_process`` cannot enforce ``--timeout``: exit 4, naming wall_clock."""
    proc = cli("run", program_file(tmp_path, "1"), "--level", "in_process", "--timeout", "5")
    assert proc.returncode == 4
    assert "wall_clock" in proc.stderr


@pytest.mark.slow
def test_console_script_works_like_python_dash_m(tmp_path: Path) -> None:
    """The installed ``sandbox`` script gives the same output and exit codes as -m sandbox."""
    script = Path(sys.executable).parent / "sandbox"
    assert script.is_file(), f"no console script at {script}"
    ok = program_file(tmp_path, "print('out')\nhost.word_count('a b')", "ok.py")
    cases: list[tuple[str | Path, ...]] = [
        ("--help",),
        ("run", ok, "--tools", TOOLS_PY),
        ("run", program_file(tmp_path, "raise KeyError('k')", "fails.py")),
        (
            "run",
            program_file(tmp_path, FIVE_CALLS, "quota.py"),
            "--tools",
            TOOLS_PY,
            "--max-calls",
            "1",
        ),
        ("run", tmp_path / "missing.py"),
        ("run", ok, "--max-memory", "lots"),
    ]
    codes = []
    for args in cases:
        module = cli(*args)
        console = cli(*args, command=str(script))
        assert console.returncode == module.returncode, args
        assert console.stdout == module.stdout, args
        # The last line reports a duration, which differs from run to run.
        assert console.stderr.splitlines()[:-1] == module.stderr.splitlines()[:-1], args
        codes.append(console.returncode)
    assert codes == [0, 0, 1, 3, 2, 2]


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_make_demo(tmp_path: Path) -> None:
    """``make demo`` exits 0 and prints the concurrent example's value (the failure is shown
    as intended)."""
    source = (PROGRAMS / "concurrent.py").read_text()
    expected = sandbox.run_sync(source, tools=example_tools.TOOLS, budget=Budget(max_calls=20))
    assert expected.ok, expected.error
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(
        ["make", "demo"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=540,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    values = []
    for line in proc.stdout.splitlines():
        try:
            values.append(msgspec.json.decode(line))
        except msgspec.DecodeError:
            continue
    assert expected.value in values, proc.stdout
    assert "sandbox: denied" in proc.stderr  # the second program fails, on purpose
    assert "make:" not in proc.stderr  # and make does not say it failed (or ignored it)


def test_make_demo_shows_the_failure_as_intended(tmp_path: Path) -> None:
    """``make demo``'s second program fails on purpose: the demo says so and make reports no
    error, ignored or not (here with this interpreter in place of ``.venv``)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sandbox"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m sandbox "$@"\n')
    script.chmod(0o755)
    installed = tmp_path / "installed"  # newer than pyproject.toml: nothing to install
    installed.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(
        [
            "make",
            "--no-print-directory",
            "demo",
            f"BIN={bin_dir}",
            f"STAMP={installed}",
            f"DEMO_STAMP={installed}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "make:" not in proc.stderr  # no "Error 1 (ignored)"
    assert "sandbox: denied" in proc.stderr
    assert "demo: failure.py failed as intended" in proc.stdout


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("cold", marks=pytest.mark.slow),
        "zygote",
        pytest.param("pool", marks=pytest.mark.slow),
    ],
)
def test_every_spawn_mode_runs_the_program(tmp_path: Path, mode: str) -> None:
    proc = cli("run", "--spawn", mode, program_file(tmp_path, "6 * 7"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


@pytest.mark.slow
def test_a_bad_spawn_mode_is_a_usage_error(tmp_path: Path) -> None:
    proc = cli("run", "--spawn", "fork", program_file(tmp_path, "1"))
    assert proc.returncode == 2
    assert "--spawn" in proc.stderr


@pytest.mark.slow
def test_stack_on_timeout_prints_where_the_program_was(tmp_path: Path) -> None:
    source = "def stuck_here():\n    while True:\n        pass\n\nstuck_here()\n"
    proc = cli("run", "--timeout", "1", "--stack-on-timeout", program_file(tmp_path, source))
    assert proc.returncode == 3, proc.stderr
    assert "stuck_here" in proc.stderr or "no stack: py-spy" in proc.stderr


def test_bench_help_without_a_checkout(tmp_path: Path) -> None:
    """Installed without a checkout (the packages alone, as pip puts them), ``sandbox bench
    --help`` exits 0 with its help, and ``sandbox bench`` says it needs a clone (exit 4)."""
    site = tmp_path / "site"
    for package in ("protocol", "runner", "sandbox"):
        shutil.copytree(ROOT / package, site / package, ignore=shutil.ignore_patterns("*.pyc"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}

    def bench(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", BENCH_FROM_SITE, *args],
            capture_output=True,
            text=True,
            cwd=elsewhere,
            env=env,
            timeout=TIMEOUT,
            check=False,
        )

    for flag in ("--help", "-h"):
        shown = bench(flag)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"{site}\nusage: sandbox bench")
    ran = bench()
    assert ran.returncode == 4
    assert "bench needs a source checkout" in ran.stderr
    assert "Traceback" not in ran.stderr


#: ``sandbox bench ARGS`` from wherever ``sandbox`` is imported, that place printed first.
BENCH_FROM_SITE = """
import sys
from pathlib import Path
import sandbox
from sandbox._commands import main
print(Path(sandbox.__file__).parent.parent, flush=True)
sys.exit(main(["bench", *sys.argv[1:]]))
"""


@pytest.mark.slow
def test_bench_passes_its_arguments_to_the_study() -> None:
    proc = cli("bench", "--help-study")
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout


def test_stack_on_timeout_in_process_is_bad_usage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--stack-on-timeout`` at ``in_process`` is refused as ``sandbox.run`` refuses it
    (a ValueError there): bad usage, exit 2, before anything runs."""
    program = program_file(tmp_path, "print('ran')")
    assert main(["run", str(program), "--level", "in_process", "--stack-on-timeout"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "--stack-on-timeout needs a child level (process or confined)" in err
