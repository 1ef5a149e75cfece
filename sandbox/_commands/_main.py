"""The command line: ``sandbox run``, ``sandbox serve``, ``sandbox bench``, ``sandbox doctor``.

Exit codes of ``sandbox run``: 0 the program succeeded; 1 the program failed; 2 bad usage
(a malformed or out-of-range option, options that do not go together, a program file or
tools module that does not exist); 3 a limit ended it (kind ``limit``); 4 the sandbox could
not run it (a budget the level cannot enforce, a tools module that fails while loading, a
spawn failure, a program too large for a Start frame). The other commands use the same
codes (:mod:`._options`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from protocol import Kind

from .._engine import Level, Tool, Toolset
from .._errors import SandboxError
from .._result import RunResult
from .._text import plural, printable, printable_json, size
from ._options import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_LIMIT,
    EXIT_OK,
    EXIT_SANDBOX,
    EXIT_USAGE,
    MissingExtra,
    UsageError,
    budget_from,
    budget_options,
    extras_for,
    level_option,
    spawn_of,
    spawn_option,
    tool_objects,
    tools_option,
)
from ._upstream import add_describe_parser, describe, mcp_options, run_with_mcp
from ._version import package_version

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbox",
        description="Run untrusted programs in isolated child processes that can call host tools.",
        epilog=EXIT_CODES,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {package_version()}",
        help="print the version",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser(
        "run",
        help="run a Python program in a sandbox",
        description="Run PROGRAM (a Python file; '-' reads standard input) in a sandbox and "
        "print its value and output. " + EXIT_CODES,
    )
    r.add_argument("program", help="the program file, or - for standard input")
    r.add_argument(
        "args",
        nargs="*",
        metavar="ARG",
        help="the program's arguments (its sys.argv[1:]); put them after -- "
        "(sandbox run prog.py -- --n 3); its sys.argv[0] is the file's name",
    )
    level_option(r, default=Level.PROCESS, child_levels_only=False)
    tools_option(r)
    spawn_option(r)
    r.add_argument(
        "--stack-on-timeout",
        action="store_true",
        help="if the wall clock ends the run, print the program's Python stack (py-spy; "
        "not at in_process)",
    )
    r.add_argument(
        "--json",
        action="store_true",
        help="print the whole RunResult as JSON (a refused run: an object with ok false, "
        "refused true and the error)",
    )
    budget_options(r)
    mcp_options(r)
    sub.add_parser(
        "bench",
        help="run the isolation-overhead study (a source checkout's benchmarks/study.py)",
        description="Measure every level with every spawn mode against same-run baselines, "
        "and write JSON, plots and benchmarks/RESULTS.md. The remaining arguments go to the "
        "study (try: sandbox bench --help-study).",
    )
    d = sub.add_parser(
        "doctor",
        help="report what this host can enforce, level by level",
        description="Probe this host (namespaces, Landlock, seccomp, cgroups) and report, for "
        "each level, which budget items and walls it can enforce here and why not.",
    )
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    from ._serve import add_serve_parser

    add_serve_parser(sub)
    from ._agent import add_agent_parser

    add_agent_parser(sub)
    add_describe_parser(sub)
    return parser


def _load_tools(names: Sequence[str]) -> list[Tool]:
    return [t if isinstance(t, Tool) else Tool(t) for t in tool_objects(names)]


#: What ``sandbox bench --help`` says, with or without a source checkout.
_BENCH_HELP = """usage: sandbox bench [STUDY OPTIONS]

Run the isolation-overhead study: every level with every spawn mode against same-run
baselines, written as JSON, plots and benchmarks/RESULTS.md. The study is part of a source
checkout (benchmarks/study.py), not of the installed package: run this command from a
clone of the repository. 'sandbox bench --help-study' lists the study's own options.
"""


def _bench(study_args: Sequence[str]) -> int:
    """``sandbox bench``: the study of a source checkout, run as its own process (the
    installed package never imports ``benchmarks``)."""
    if study_args[:1] in (["-h"], ["--help"]):
        sys.stdout.write(_BENCH_HELP)
        return EXIT_OK
    root = _checkout()
    if root is None:
        print(
            "sandbox: bench needs a source checkout of the repository (it runs "
            "benchmarks/study.py, which the installed package does not include); run it "
            "from a clone",
            file=sys.stderr,
        )
        return EXIT_SANDBOX
    args = ["--help" if arg == "--help-study" else arg for arg in study_args]
    import subprocess

    return subprocess.call([sys.executable, "-m", "benchmarks.study", *args], cwd=root)


def _checkout() -> Path | None:
    """The source checkout this package runs from (or the current directory's), if any."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (root / "benchmarks" / "study.py").is_file() and (root / "sandbox").is_dir():
            return root
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sandbox`` command; returns the exit code (argparse's own errors
    and ``--help`` raise :class:`SystemExit`, as argparse does)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] == ["bench"]:  # everything after it is the study's (argparse would object)
            return _bench(argv[1:])
        argv, program_args = _split_program_args(argv)
        args = _parser().parse_args(argv)
        if program_args is not None:
            args.args = [*args.args, *program_args]
        if args.command == "doctor":
            from ._doctor import doctor

            return doctor(args.json)
        if args.command == "describe":
            return describe(args)
        if args.command in ("serve", "agent"):
            return _extra_command(args)
        return _run(args)
    except BrokenPipeError:
        # The reader went away (`sandbox doctor | head`): what it read was all it wanted.
        _silence_stdout()
        return EXIT_OK


def _split_program_args(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``sandbox run``'s command line, and what follows its first ``--``: the program's
    arguments, taken whole (argparse, which lets a ``*`` positional match nothing
    before an option, would leave them unrecognized)."""
    if argv[:1] != ["run"] or "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _extra_command(args: argparse.Namespace) -> int:
    """``serve`` or ``agent``: each needs an extra; one that is missing is named, with the
    pip command that installs it (exit 4), not a traceback."""
    try:
        with extras_for(args.command):
            if args.command == "serve":
                from ._serve import serve

                return serve(args)
            from ._agent import agent

            return agent(args)
    except MissingExtra as exc:
        print(f"sandbox {exc}", file=sys.stderr)
        return EXIT_SANDBOX


def _run(args: argparse.Namespace) -> int:
    """``sandbox run``."""
    try:
        source = _refuse_bad_usage(args)
        budget = budget_from(args)
        toolset = Toolset(_load_tools(args.tools))
        # The program's output is shown as it comes (in_process: it writes to this
        # process's own streams already; --json: only the document goes to stdout).
        echo = None if args.json or args.level == Level.IN_PROCESS else _Echo()
        result = run_with_mcp(
            args,
            source,
            tools=toolset,
            budget=budget,
            level=args.level,
            spawn=spawn_of(args),
            stack_on_timeout=args.stack_on_timeout,
            on_output=echo,
            argv=_program_argv(args),
        )
    except UsageError as exc:
        return _refused(args, "sandbox run: error:", str(exc), EXIT_USAGE)
    except (SandboxError, ValueError) as exc:
        return _refused(args, "sandbox:", str(exc), EXIT_SANDBOX)
    code = _exit_code(result)
    try:
        _report(args, result, echo)
    except BrokenPipeError:
        # `sandbox run ... | head`: the reader has what it wanted; the run's code stands.
        _silence_stdout()
    return code


def _program_argv(args: argparse.Namespace) -> list[str]:
    """The program's ``sys.argv``: its file's name (no directory: nothing of the host's
    paths), or the API's placeholder for standard input, then its arguments."""
    name = "<program>" if args.program == "-" else os.path.basename(args.program)
    return [name or "<program>", *args.args]


def _refuse_bad_usage(args: argparse.Namespace) -> str:
    """The program's source, once the options are known to go together.

    Raises:
        UsageError: options that do not go together, or a program file that cannot be read.
    """
    if args.level == Level.IN_PROCESS:
        # As the API refuses it (ValueError): in_process has no wall clock to kill at, and
        # no child to make, nor a sys.argv of the program's own.
        if args.args:
            raise UsageError(
                "program arguments need a child level (process or confined): in_process "
                "runs the program in this process, whose sys.argv it shares"
            )
        if args.stack_on_timeout:
            raise UsageError(
                "--stack-on-timeout needs a child level (process or confined), not in_process"
            )
        if args.spawn is not None:
            raise UsageError(
                f"--spawn {args.spawn} needs a child level (process or confined): in_process "
                "runs the program in a thread of this process"
            )
    if args.program == "-":
        return sys.stdin.read()
    try:
        return Path(args.program).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {args.program}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read {args.program}: not UTF-8 text ({exc.reason})") from None


def _refused(args: argparse.Namespace, prefix: str, error: str, code: int) -> int:
    """A run refused before it started: one line on stderr, and with ``--json`` an object
    on stdout that says so (decodable as a RunResult: ``ok`` is false)."""
    print(f"{prefix} {error}", file=sys.stderr)
    if args.json:
        document = {"ok": False, "refused": True, "error": error}
        try:
            print(msgspec.json.format(msgspec.json.encode(document)).decode())
        except BrokenPipeError:
            _silence_stdout()
    return code


def _exit_code(result: RunResult) -> int:
    if result.ok:
        return EXIT_OK
    if result.kind is Kind.INVALID and result.cause == "protocol":
        return EXIT_SANDBOX  # a Start the wire cannot carry: refused, nothing ran
    return EXIT_LIMIT if result.kind is Kind.LIMIT else EXIT_FAILED


class _Echo:
    """The run's ``on_output``: writes the program's output (escaped) to this process's
    stdout and stderr as it comes, and remembers how each stream's last text ended."""

    def __init__(self) -> None:
        #: Per stream: whether it ended a line (or showed nothing), for what follows it.
        self.ended = {"stdout": True, "stderr": True}
        self._gone: set[str] = set()  # streams whose reader went away (`| head`)

    def __call__(self, name: str, text: str) -> None:
        self.ended[name] = text.endswith("\n")
        if name in self._gone:
            return
        out = sys.stdout if name == "stdout" else sys.stderr
        try:
            out.write(printable(text))
            out.flush()
        except BrokenPipeError:
            # The reader has what it wanted; the program runs on, and its code stands.
            self._gone.add(name)
            if name == "stdout":
                _silence_stdout()


def _report(args: argparse.Namespace, result: RunResult, echo: _Echo | None = None) -> None:
    """Prints a finished run: its RunResult as JSON, or its output (unless ``echo`` showed
    it as it came), value and summary."""
    if args.json:
        document = msgspec.json.format(msgspec.json.encode(result)).decode()
        sys.stdout.write(printable_json(document) + "\n")
        return
    # Everything below that came from the program is escaped (see sandbox._text).
    _program_output(
        sys.stdout,
        "stdout",
        result.stdout,
        result.stdout_truncated,
        result.stdout_bytes,
        shown=None if echo is None else echo.ended["stdout"],
    )
    _program_output(
        sys.stderr,
        "stderr",
        result.stderr,
        result.stderr_truncated,
        result.stderr_bytes,
        shown=None if echo is None else echo.ended["stderr"],
    )
    if result.ok:
        print(printable(msgspec.json.encode(result.value).decode()))
    else:
        error = printable(result.error)
        print(f"sandbox: {result.kind} ({result.cause}): {error}", file=sys.stderr)
    if result.stack is not None:
        stack = printable(result.stack)
        print(f"sandbox: the program's stack when it was killed:\n{stack}", file=sys.stderr)
    elif result.stack_error is not None:
        print(f"sandbox: no stack: {result.stack_error}", file=sys.stderr)
    print(
        f"sandbox: {plural(result.calls, 'call')}, {size(result.bytes)} of results, "
        f"{result.wall_time * 1000:.1f} ms",
        file=sys.stderr,
    )


def _program_output(
    out: Any, name: str, text: str, truncated: bool, total: int, *, shown: bool | None = None
) -> None:
    """What the program printed on one stream, ended by a newline (so that what follows,
    the value, starts a line of its own), and marked where it was cut. ``shown``: the
    text was shown as it came already, and ended a line (True) or not (False)."""
    if shown is None and text:
        out.write(printable(text))
    if text and not (text.endswith("\n") if shown is None else shown):
        out.write("\n")
    if truncated:
        kept = len(text.encode(errors="surrogatepass"))
        out.write(f"sandbox: {name} truncated here: {kept} of {total} bytes kept (--max-output)\n")
    out.flush()


def _silence_stdout() -> None:
    """Points standard output at /dev/null, so that the interpreter's last flush does not
    fail again on the closed pipe (the recipe of Python's signal documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real descriptor (a test's capture): nothing to do
        pass
