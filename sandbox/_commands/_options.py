"""The options the commands share, each defined once: the budget's, the level, the spawn
mode, the tools modules; and turning them into the API's values."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from msgspec import UNSET

from .._budget import DEFAULTS, Budget
from .._children import Spawn
from .._engine import Level
from .._errors import SandboxError

__all__ = [
    "BUDGET_OPTIONS",
    "BudgetOption",
    "budget_from",
    "budget_options",
    "count",
    "level_option",
    "seconds",
    "size",
    "spawn_option",
    "tool_objects",
    "tools_option",
]


def level_option(p: argparse.ArgumentParser, *, default: Level, child_levels_only: bool) -> None:
    """``--level``: the level programs run at."""
    levels = [lv for lv in Level if not (child_levels_only and lv is Level.IN_PROCESS)]
    p.add_argument(
        "--level",
        choices=[lv.value for lv in levels],
        default=default.value,
        help="isolation level (default: %(default)s)",
    )


def spawn_option(p: argparse.ArgumentParser) -> None:
    """``--spawn``: how a run's child is made."""
    p.add_argument(
        "--spawn",
        choices=[mode.value for mode in Spawn],
        default=Spawn.ZYGOTE.value,
        help="how the child is made: forked from a warm zygote, a fresh interpreter (cold), "
        "or taken from a pool of children forked ahead (default: %(default)s)",
    )


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
    """One budget item's option: its flag, the :class:`~sandbox.Budget` item it sets, how
    its value is read, and what it means."""

    flag: str
    item: str
    metavar: str
    parse: Callable[[str], float]
    help: str
    #: Whether ``none`` may lift it (said in the help; the Budget refuses it otherwise).
    liftable: bool = True


#: The budget's options, one per item of :class:`~sandbox.Budget`, the same for every
#: command that runs programs (``run``, ``serve``, ``agent``).
BUDGET_OPTIONS: Final = (
    BudgetOption("--timeout", "wall_clock", "S", seconds, "seconds the whole run may take"),
    BudgetOption("--max-calls", "max_calls", "N", count, "tool calls the program may make"),
    BudgetOption("--max-bytes", "max_bytes", "SIZE", size, "result bytes it may receive"),
    BudgetOption(
        "--max-inflight",
        "max_inflight",
        "N",
        count,
        "tool calls in flight at once, always capped",
        liftable=False,
    ),
    BudgetOption(
        "--call-timeout", "max_call_deadline", "S", seconds, "seconds one tool call may take"
    ),
    BudgetOption("--max-memory", "max_memory", "SIZE", size, "memory, e.g. 256M"),
    BudgetOption("--max-cpu", "max_cpu", "S", seconds, "CPU seconds"),
    BudgetOption("--max-output", "max_output", "SIZE", size, "stdout and stderr kept, each"),
    BudgetOption("--max-file-size", "max_file_size", "SIZE", size, "the largest file it may write"),
    BudgetOption(
        "--max-open-files",
        "max_open_files_per_process",
        "N",
        count,
        "descriptors each of its processes may hold open",
    ),
    BudgetOption("--max-processes", "max_processes", "N", count, "processes and threads at once"),
    BudgetOption(
        "--max-disk",
        "max_disk",
        "SIZE",
        size,
        "bytes of files, and a file per 16k of them (confined only)",
    ),
)


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


def tools_option(p: argparse.ArgumentParser) -> None:
    """``--tools``: modules whose tools the programs may call."""
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module whose TOOLS list (or public functions) become host tools; repeatable",
    )


def budget_options(p: argparse.ArgumentParser) -> None:
    """The budget's options, one per item of :data:`BUDGET_OPTIONS`, each with its default
    (from :data:`sandbox.DEFAULTS`) in its help."""
    group = p.add_argument_group(
        "budget",
        "Each item takes a value, or 'none' for no limit; 0 means zero. An item not given "
        "has its default where the level can enforce it, and no limit otherwise.",
    )
    for option in BUDGET_OPTIONS:
        group.add_argument(
            option.flag,
            dest=option.item,
            type=_or_none(option.parse),
            default=UNSET,
            metavar=f"{option.metavar}|none" if option.liftable else option.metavar,
            help=f"{option.help} (default: {_default_of(option)})",
        )


def budget_from(args: argparse.Namespace) -> Budget:
    """The budget the options say: only the items given (raises BudgetError for an
    impossible one)."""
    given = {o.item: getattr(args, o.item) for o in BUDGET_OPTIONS}
    return Budget(**{item: value for item, value in given.items() if value is not UNSET})


def _or_none(parse: Callable[[str], float]) -> Callable[[str], float | None]:
    def parse_or_none(text: str) -> float | None:
        return None if text.strip().lower() == "none" else parse(text)

    parse_or_none.__name__ = parse.__name__  # argparse names the type in its errors
    return parse_or_none


def _default_of(option: BudgetOption) -> str:
    default = DEFAULTS.get(option.item)
    if default is None:
        return "no limit"
    if option.metavar == "SIZE":
        for shift, unit in ((30, "G"), (20, "M"), (10, "k")):
            if default >= 1 << shift and default % (1 << shift) == 0:
                return f"{int(default) >> shift}{unit}"
    return f"{default:g}"
