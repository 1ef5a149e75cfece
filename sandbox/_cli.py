"""The command line: ``sandbox run``, ``sandbox serve``, ``sandbox bench``, ``sandbox doctor``.

Exit codes of ``sandbox run``: 0 the program succeeded; 1 the program failed; 3 a limit
ended it (kind ``limit``); 4 the sandbox could not run it (a budget the level cannot
enforce, a bad tools module, a spawn failure, a program too large for a Start frame); 2 bad
usage (argparse's own).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from protocol import Kind

from ._api import run_sync
from ._budget import Budget
from ._errors import SandboxError
from ._levels import Level
from ._supervisor import Spawn
from ._text import printable, printable_json
from ._tools import Tool, Toolset

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LIMIT, EXIT_SANDBOX = 0, 1, 2, 3, 4
#: A program that runs longer than this on the command line has most likely hung.
DEFAULT_TIMEOUT = 30.0


def _size(text: str) -> int:
    """A byte count: 1000, 64k, 256M, 1G (binary multiples)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except (ValueError, OverflowError):  # not a number; inf or nan
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1000, 64k, 256M)") from None


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
    r.add_argument(
        "--level",
        choices=[lv.value for lv in Level],
        default=Level.PROCESS.value,
        help="isolation level (default: %(default)s)",
    )
    budget_options(
        r,
        default_timeout=f"default: {DEFAULT_TIMEOUT:g} at the process level; "
        "in_process cannot enforce one",
    )
    r.add_argument(
        "--spawn",
        choices=[mode.value for mode in Spawn],
        default=Spawn.ZYGOTE.value,
        help="how the child is made: forked from a warm zygote, a fresh interpreter (cold), "
        "or taken from a pool of children forked ahead (default: %(default)s)",
    )
    r.add_argument(
        "--stack-on-timeout",
        action="store_true",
        help="if the wall clock ends the run, print the program's Python stack (py-spy)",
    )
    r.add_argument("--json", action="store_true", help="print the whole RunResult as JSON")
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
    from .plane._command import add_serve_parser

    add_serve_parser(sub)
    from .agent._command import add_agent_parser

    add_agent_parser(sub)
    return parser


def _doctor(as_json: bool) -> int:
    from runner import probe_walls

    from . import _uid
    from ._levels import confinement_gaps, unenforceable
    from ._reaper import cgroup_support

    walls = probe_walls()
    namespaces = walls.namespaces
    # Who a confined program is on the host: a uid of its own (None), or why not.
    own_uid = _uid.usable()
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


def _import_tools(name: str) -> ModuleType:
    """The tools module ``name``: a ``.py`` path (loaded from that file, whatever its name) or
    a module name (imported from the current directory or the installed packages).

    Raises:
        SandboxError: it cannot be found or fails while loading, whatever it raises.
    """
    try:
        if name.endswith(".py") or "/" in name:
            path = Path(name).resolve()
            # A private module name: a file called signal.py must not find the stdlib's.
            spec = importlib.util.spec_from_file_location(f"_sandbox_tools_{path.stem}", path)
            if spec is None or spec.loader is None or not path.is_file():
                raise ImportError(f"no such file: {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, ".")
        return importlib.import_module(name)
    except Exception as exc:  # any failure of the user's module is a refusal, not a crash
        raise SandboxError(
            f"cannot load tools module {name!r}: {type(exc).__name__}: {exc}"
        ) from exc


def tool_objects(names: Sequence[str]) -> list[Any]:
    """What each tools module offers: its ``TOOLS`` list, or else its public functions."""
    found: list[Any] = []
    for name in names:
        module = _import_tools(name)
        listed: Any = getattr(module, "TOOLS", None)
        if listed is None:
            listed = [
                obj
                for key, obj in vars(module).items()
                if not key.startswith("_")
                and callable(obj)
                and getattr(obj, "__module__", None) == module.__name__
                and not isinstance(obj, type)
            ]
        found.extend(listed)
    return found


def _load_tools(names: Sequence[str]) -> list[Tool]:
    return [t if isinstance(t, Tool) else Tool(t) for t in tool_objects(names)]


def budget_options(p: argparse.ArgumentParser, *, default_timeout: str) -> None:
    """The budget's options, shared by ``run`` and ``serve``."""
    p.add_argument(
        "--timeout", type=float, default=None, help=f"wall clock, seconds ({default_timeout})"
    )
    p.add_argument("--max-calls", type=int, default=0, help="tool calls allowed (0: no limit)")
    p.add_argument("--max-bytes", type=_size, default=0, help="result bytes allowed (0: no limit)")
    p.add_argument("--max-inflight", type=int, default=64, help="tool calls in flight at once")
    p.add_argument("--call-timeout", type=float, default=None, help="seconds one call may take")
    p.add_argument("--max-memory", type=_size, default=None, help="memory, e.g. 256M")
    p.add_argument("--max-cpu", type=float, default=None, help="CPU seconds")
    p.add_argument(
        "--max-processes",
        type=int,
        default=None,
        help="processes and threads at once (default: 256 where the level can enforce it; "
        "0: no limit)",
    )
    p.add_argument(
        "--max-disk",
        type=_size,
        default=None,
        help="bytes of files, e.g. 256M, and a file per 16k of them (confined; default: 64M; "
        "0: no limit but memory)",
    )
    p.add_argument("--max-output", type=_size, default=1 << 20, help="stdout/stderr kept, each")
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module whose TOOLS list (or public functions) become host tools; repeatable",
    )


def budget_from(args: argparse.Namespace) -> Budget:
    """The budget the options say (raises BudgetError for an impossible one)."""
    timeout = args.timeout
    if timeout is None and args.level != Level.IN_PROCESS:
        timeout = DEFAULT_TIMEOUT
    return Budget(
        wall_clock=timeout,
        max_calls=args.max_calls,
        max_bytes=args.max_bytes,
        max_inflight=args.max_inflight,
        max_call_deadline=args.call_timeout,
        max_memory=args.max_memory,
        max_cpu=args.max_cpu,
        max_processes=_lifted_at_zero(args.max_processes),
        max_disk=_lifted_at_zero(args.max_disk),
        max_output=args.max_output,
    )


def _lifted_at_zero(value: int | None) -> int | UnsetType | None:
    """An option whose default is the budget's own (unset), and whose 0 lifts the limit."""
    if value is None:
        return UNSET
    return None if value == 0 else value


def _bench(study_args: Sequence[str]) -> int:
    """``sandbox bench``: the study lives with the benchmarks, in a source checkout."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "study.py").is_file():
        print(
            f"sandbox: bench needs a source checkout (no benchmarks/study.py under {root})",
            file=sys.stderr,
        )
        return EXIT_SANDBOX
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from benchmarks import study

    args = ["--help" if arg == "--help-study" else arg for arg in study_args]
    try:
        study.main(args)
    except SystemExit as exc:  # the study's own argparse (--help, a bad flag)
        return exc.code if isinstance(exc.code, int) else EXIT_SANDBOX
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sandbox`` command; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # everything after it is the study's (argparse would object)
        return _bench(argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "doctor":
        return _doctor(args.json)
    if args.command == "serve":
        from .plane._command import serve

        return serve(args)
    if args.command == "agent":
        from .agent._command import agent

        return agent(args)
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
        stack = args.stack_on_timeout and args.level != Level.IN_PROCESS
        result = run_sync(
            source,
            tools=toolset,
            budget=budget,
            level=args.level,
            spawn=args.spawn,
            stack_on_timeout=stack,
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
