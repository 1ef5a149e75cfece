"""The options the commands share, each defined once: the budget's, the level, the spawn
mode, the tools modules; and turning them into the API's values. Also what every command
means by its exit codes, and the two errors of the command line itself.

Exit codes, the same in every command: 0 ok; 1 the program (or the agent's task) failed;
2 bad usage: the command line is malformed or asks for a value out of range, or names a
file or module that does not exist (argparse's own code); 3 a limit ended the run; 4 the
command line is well formed but this host cannot do it (a budget item the level cannot
enforce, a wall missing, a tools module that fails while loading, a spawn failure, an
extra that is not installed).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from msgspec import UNSET

from .._budget import DEFAULTS, Budget
from .._children import Spawn
from .._engine import Level
from .._errors import BudgetError, SandboxError

__all__ = [
    "BUDGET_OPTIONS",
    "DISTRIBUTION",
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_LIMIT",
    "EXIT_OK",
    "EXIT_SANDBOX",
    "EXIT_USAGE",
    "EXTRAS",
    "BudgetOption",
    "MissingExtra",
    "UsageError",
    "extras_for",
    "budget_from",
    "budget_options",
    "count",
    "level_option",
    "seconds",
    "size",
    "spawn_of",
    "spawn_option",
    "tool_objects",
    "tools_option",
]


EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LIMIT, EXIT_SANDBOX = 0, 1, 2, 3, 4
#: What the help of every command that runs programs ends with.
EXIT_CODES: Final = (
    "Exit codes: 0 ok, 1 the program failed, 2 bad usage, 3 a limit ended it, 4 the sandbox "
    "refused or could not run it (or an extra it needs is not installed)."
)


#: The distribution, and the extra that brings each top-level module the commands import
#: only when they need it (pyproject.toml's ``[project.optional-dependencies]``).
DISTRIBUTION: Final = "sandbox-runtime"
EXTRAS: Final[dict[str, str]] = {
    "mcp": "mcp",
    "mcp_types": "mcp",  # the MCP SDK's types, installed with it
    "uvicorn": "mcp",
    "jwt": "mcp",  # pyjwt
    "openai": "agent",
}


class UsageError(Exception):
    """The command line is wrong: a value out of range, options that do not go together, a
    file or module it names that does not exist. Exit code 2, as argparse's own errors."""


class MissingExtra(SandboxError):
    """A command needs an optional dependency (an extra) that is not installed.

    Attributes:
        extra: the extra to install.
    """

    def __init__(self, command: str, extra: str, missing: str) -> None:
        super().__init__(
            f"{command} needs the {extra!r} extra, which is not installed (no module named "
            f"{missing!r}): pip install '{DISTRIBUTION}[{extra}]'"
        )
        self.extra = extra


@contextlib.contextmanager
def extras_for(command: str) -> Iterator[None]:
    """Turns the import of a module that an extra brings, and that is missing, into
    :class:`MissingExtra` naming the extra and the pip command.

    Raises:
        MissingExtra: such a module could not be imported inside the block.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in EXTRAS:
            raise
        raise MissingExtra(command, EXTRAS[top], exc.name or top) from exc


def level_option(p: argparse.ArgumentParser, *, default: Level, child_levels_only: bool) -> None:
    """``--level``: the level programs run at."""
    levels = [lv for lv in Level if not (child_levels_only and lv is Level.IN_PROCESS)]
    names = [lv.value for lv in levels]
    p.add_argument(
        "--level",
        choices=names,
        default=default.value,
        metavar="LEVEL",
        help=f"isolation level: {', '.join(names)} (default: %(default)s)",
    )


def spawn_option(p: argparse.ArgumentParser) -> None:
    """``--spawn``: how a run's child is made."""
    p.add_argument(
        "--spawn",
        choices=[mode.value for mode in Spawn],
        default=None,  # not given: zygote (None tells `run` it was not asked for)
        metavar="MODE",
        help="how the child is made: zygote (forked from a warm template), cold (a fresh "
        f"interpreter), or pool (forked ahead) (default: {Spawn.ZYGOTE.value})",
    )


def spawn_of(args: argparse.Namespace) -> Spawn:
    """The spawn mode ``--spawn`` asks for, zygote if not given."""
    return Spawn(args.spawn or Spawn.ZYGOTE.value)


def size(text: str) -> int:
    """A byte count: 1000, 64k, 256M, 1G (binary multiples)."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except (ValueError, OverflowError):  # not a number; inf or nan
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 1000, 64k, 256M)") from None


def count(text: str) -> int:
    """A whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def seconds(text: str) -> float:
    """A number of seconds: 30, 0.5."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


@dataclass(frozen=True)
class BudgetOption:
    """One budget item's option: its flag (the item's own name, with dashes), the
    :class:`~sandbox.Budget` item it sets, how its value is read, and what it means.

    ``aliases`` are earlier names of the flag: still read, never shown in the help."""

    item: str
    metavar: str
    parse: Callable[[str], float]
    help: str
    #: Whether ``none`` may lift it (said in the help; the Budget refuses it otherwise).
    liftable: bool = True
    aliases: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        """The option, named as the API names the item: ``wall_clock`` is ``--wall-clock``."""
        return "--" + self.item.replace("_", "-")


#: The budget's options, one per item of :class:`~sandbox.Budget`, the same for every
#: command that runs programs (``run``, ``serve``, ``agent``).
BUDGET_OPTIONS: Final = (
    BudgetOption(
        "wall_clock", "S", seconds, "seconds the whole run may take", aliases=("--timeout",)
    ),
    BudgetOption("max_calls", "N", count, "tool calls the program may make"),
    BudgetOption("max_bytes", "SIZE", size, "result bytes it may receive from tools"),
    BudgetOption(
        "max_inflight", "N", count, "tool calls in flight at once, always capped", liftable=False
    ),
    BudgetOption(
        "max_call_deadline",
        "S",
        seconds,
        "seconds one tool call may take",
        aliases=("--call-timeout",),
    ),
    BudgetOption("max_memory", "SIZE", size, "memory of all its processes together"),
    BudgetOption("max_cpu", "S", seconds, "CPU seconds of all its processes together"),
    BudgetOption("max_output", "SIZE", size, "bytes of stdout, and of stderr, kept"),
    BudgetOption("max_file_size", "SIZE", size, "the largest file it may write"),
    BudgetOption(
        "max_open_files_per_process",
        "N",
        count,
        "descriptors each of its processes may hold open",
        aliases=("--max-open-files",),
    ),
    BudgetOption("max_processes", "N", count, "processes and threads at once"),
    BudgetOption(
        "max_disk", "SIZE", size, "bytes of files, and a file per 16k of them (confined only)"
    ),
)


def _import_tools(name: str) -> ModuleType:
    """The tools module ``name``: a ``.py`` path (loaded from that file, whatever its name) or
    a module name (imported from the current directory or the installed packages).

    Raises:
        UsageError: there is no such file or module.
        SandboxError: it fails while loading, whatever it raises.
    """
    try:
        if name.endswith(".py") or "/" in name:
            path = Path(name).resolve()
            # A private module name: a file called signal.py must not find the stdlib's.
            if not path.is_file():
                raise UsageError(f"cannot load tools module {name!r}: no such file: {path}")
            spec = importlib.util.spec_from_file_location(f"_sandbox_tools_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ImportError(f"not a Python module: {path}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        if "" not in sys.path and "." not in sys.path:
            sys.path.insert(0, ".")
        return importlib.import_module(name)
    except UsageError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            # The module named on the command line (or its package) is not there: usage.
            raise UsageError(
                f"cannot load tools module {name!r}: {type(exc).__name__}: {exc}"
            ) from exc
        raise SandboxError(  # one of its own imports is missing: the module is broken
            f"cannot load tools module {name!r}: {type(exc).__name__}: {exc}"
        ) from exc
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


def tools_option(p: argparse.ArgumentParser) -> None:
    """``--tools``: modules whose tools the programs may call."""
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module whose TOOLS list (or public functions) become host tools; repeatable "
        "(default: none: the program has no host tools)",
    )


def budget_options(p: argparse.ArgumentParser) -> None:
    """The budget's options, one per item of :data:`BUDGET_OPTIONS`, each with its default
    (from :data:`sandbox.DEFAULTS`) in its help, and each earlier name as a hidden alias."""
    fixed = ", ".join(o.flag for o in BUDGET_OPTIONS if not o.liftable)
    group = p.add_argument_group(
        "budget",
        "One option per item of the API's Budget, with the item's name. Each takes a value, "
        f"or 'none' for no limit (all but {fixed}). 0 means zero (--max-calls 0: no "
        "call), as in the API; a time must be more than 0. An item not given has its "
        "default where the level can enforce it, and no limit otherwise. S: seconds (30, "
        "0.5); SIZE: bytes, or with k, M or G (64k, 256M: binary); N: a whole number.",
    )
    for option in BUDGET_OPTIONS:
        kwargs: dict[str, Any] = {
            "dest": option.item,
            "type": _budget_value(option),
            "default": UNSET,
            "metavar": option.metavar,
        }
        group.add_argument(option.flag, help=f"{option.help} ({_default_of(option)})", **kwargs)
        for alias in option.aliases:  # read as before, not shown
            group.add_argument(alias, help=argparse.SUPPRESS, **kwargs)


def budget_from(args: argparse.Namespace) -> Budget:
    """The budget the options say: only the items given (raises BudgetError for an
    impossible one)."""
    given = {o.item: getattr(args, o.item) for o in BUDGET_OPTIONS}
    return Budget(**{item: value for item, value in given.items() if value is not UNSET})


def _budget_value(option: BudgetOption) -> Callable[[str], float | None]:
    """The argparse type of a budget option: its value, or ``none``, checked as the Budget
    checks it, so that a value out of range is bad usage (exit 2) naming the option."""

    def parse(text: str) -> float | None:
        value = None if text.strip().lower() == "none" else option.parse(text)
        try:
            items: dict[str, Any] = {option.item: value}
            Budget(**items)
        except BudgetError as exc:
            # The Budget's own words, in the command line's terms.
            problem = str(exc).replace("(None means no limit)", "('none' means no limit)")
            raise argparse.ArgumentTypeError(problem) from None
        return value

    parse.__name__ = option.parse.__name__  # argparse names the type in its errors
    return parse


def _default_of(option: BudgetOption) -> str:
    """What the help says of an option's default: ``default: 30 s``, ``default: 512M``,
    ``default: none`` (no limit), written as the option reads it."""
    default = DEFAULTS.get(option.item)
    if default is None:
        return "default: no limit"
    if option.metavar == "SIZE":
        for shift, unit in ((30, "G"), (20, "M"), (10, "k")):
            if default >= 1 << shift and default % (1 << shift) == 0:
                return f"default: {int(default) >> shift}{unit}"
    if option.metavar == "S":
        return f"default: {default:g} s"
    return f"default: {default:g}"
