"""The command line: ``sandbox run``, ``sandbox serve``, ``sandbox bench``, ``sandbox doctor``.

Exit codes of ``sandbox run``: 0 the program succeeded; 1 the program failed; 3 a limit
ended it (kind ``limit``); 4 the sandbox could not run it (a budget the level cannot
enforce, a bad tools module, a spawn failure, a program too large for a Start frame); 2 bad
usage (argparse's own).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from protocol import Kind

from .._engine import Level, Tool, Toolset, run_sync
from .._errors import SandboxError
from .._text import printable, printable_json
from ._options import (
    budget_from,
    budget_options,
    level_option,
    spawn_option,
    tool_objects,
    tools_option,
)

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LIMIT, EXIT_SANDBOX = 0, 1, 2, 3, 4


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandbox",
        description="Run untrusted programs in isolated child processes that can call host tools.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser(
        "run",
        help="run a Python program in a sandbox",
        description="Run PROGRAM (a Python file; '-' reads standard input) in a sandbox and "
        "print its value and output. Exit codes: 0 ok, 1 the program failed, 3 a limit "
        "ended it, 4 the sandbox refused or could not run it, 2 bad usage.",
    )
    r.add_argument("program", help="the program file, or - for standard input")
    level_option(r, default=Level.PROCESS, child_levels_only=False)
    tools_option(r)
    spawn_option(r)
    r.add_argument(
        "--stack-on-timeout",
        action="store_true",
        help="if the wall clock ends the run, print the program's Python stack (py-spy)",
    )
    r.add_argument("--json", action="store_true", help="print the whole RunResult as JSON")
    budget_options(r)
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
    return parser


def _doctor(as_json: bool) -> int:
    from runner import probe_walls

    from .._children import cgroup_support, uid_usable
    from .._engine import confinement_gaps, unenforceable

    walls = probe_walls()
    namespaces = walls.namespaces
    # Who a confined program is on the host: a uid of its own (None), or why not.
    own_uid = uid_usable()
    report = {
        "namespaces": namespaces,
        "own_uid_per_run": own_uid,
        "landlock_abi": walls.landlock_abi,
        "seccomp": walls.seccomp,
        "cgroups": cgroup_support(),
        "levels": {
            level.value: {
                "unenforceable": unenforceable(level),
                **({"missing_walls": confinement_gaps()} if level is Level.CONFINED else {}),
            }
            for level in Level
        },
    }
    if as_json:
        print(msgspec.json.format(msgspec.json.encode(report)).decode())
        return EXIT_OK

    def yes(reason: str | None) -> str:
        return "yes" if reason is None else f"no ({reason})"

    print("namespaces:")
    for name, reason in namespaces.items():
        print(f"  {name:8} {yes(reason)}")
    abi = walls.landlock_abi
    print(f"landlock:   {'ABI ' + str(abi) if abi else 'no'}")
    print(f"seccomp:    {yes(walls.seccomp)}")
    print("cgroups:")
    for name, reason in cgroup_support().items():
        print(f"  {name:8} {yes(reason)}")
    for level in Level:
        gaps = unenforceable(level)
        print(f"level {level.value}:")
        if level is Level.CONFINED:
            missing = confinement_gaps()
            print(f"  available: {yes('; '.join(f'{k}: {v}' for k, v in missing.items()) or None)}")
            print(f"  a host uid of its own per run: {yes(own_uid)}")
        if gaps:
            for item, reason in gaps.items():
                print(f"  refuses {item}: {reason}")
        else:
            print("  enforces every budget item")
    return EXIT_OK


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
    """Entry point of the ``sandbox`` command; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after it is the study's (argparse would object)
        return _bench(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        return _doctor(args.json)
    if args.command == "serve":
        from ._serve import serve

        return serve(args)
    if args.command == "agent":
        from ._agent import agent

        return agent(args)
    if args.stack_on_timeout and args.level == Level.IN_PROCESS:
        # As the API refuses it (ValueError): in_process has no wall clock to kill at.
        print(
            "sandbox run: error: --stack-on-timeout needs a child level (process or "
            "confined), not in_process",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.program == "-":
        source = sys.stdin.read()
    else:
        try:
            source = Path(args.program).read_text()
        except OSError as exc:
            print(f"sandbox: cannot read {args.program}: {exc.strerror}", file=sys.stderr)
            return EXIT_SANDBOX
    try:
        budget = budget_from(args)
        toolset = Toolset(_load_tools(args.tools))
        result = run_sync(
            source,
            tools=toolset,
            budget=budget,
            level=args.level,
            spawn=args.spawn,
            stack_on_timeout=args.stack_on_timeout,
        )
    except (SandboxError, ValueError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return EXIT_SANDBOX
    if args.json:
        document = msgspec.json.format(msgspec.json.encode(result)).decode()
        sys.stdout.write(printable_json(document) + "\n")
    else:
        # Everything below that came from the program is escaped (see sandbox._text).
        if result.stdout:
            sys.stdout.write(printable(result.stdout))
        if result.stderr:
            sys.stderr.write(printable(result.stderr))
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
            f"sandbox: {result.calls} calls, {result.bytes} result bytes, "
            f"{result.wall_time * 1000:.1f} ms",
            file=sys.stderr,
        )
    if result.ok:
        return EXIT_OK
    if result.kind is Kind.INVALID and result.cause == "protocol":
        return EXIT_SANDBOX  # a Start the wire cannot carry: refused, nothing ran
    return EXIT_LIMIT if result.kind is Kind.LIMIT else EXIT_FAILED
