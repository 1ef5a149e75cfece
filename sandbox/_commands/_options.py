"""The options the commands share, each defined once: the budget's, the level, the spawn
mode, the tools modules; and turning them into the API's values."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from msgspec import UNSET, UnsetType

from .._budget import Budget
from .._children import Spawn
from .._engine import Level
from .._errors import SandboxError

__all__ = [
    "DEFAULT_TIMEOUT",
    "budget_from",
    "budget_options",
    "level_option",
    "size",
    "spawn_option",
    "tool_objects",
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


#: A program that runs longer than this on the command line has most likely hung.
DEFAULT_TIMEOUT = 30.0


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


def budget_options(p: argparse.ArgumentParser, *, default_timeout: str) -> None:
    """The budget's options, shared by ``run`` and ``serve``."""
    p.add_argument(
        "--timeout", type=float, default=None, help=f"wall clock, seconds ({default_timeout})"
    )
    p.add_argument("--max-calls", type=int, default=0, help="tool calls allowed (0: no limit)")
    p.add_argument("--max-bytes", type=size, default=0, help="result bytes allowed (0: no limit)")
    p.add_argument("--max-inflight", type=int, default=64, help="tool calls in flight at once")
    p.add_argument("--call-timeout", type=float, default=None, help="seconds one call may take")
    p.add_argument("--max-memory", type=size, default=None, help="memory, e.g. 256M")
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
        type=size,
        default=None,
        help="bytes of files, e.g. 256M, and a file per 16k of them (confined; default: 64M; "
        "0: no limit but memory)",
    )
    p.add_argument("--max-output", type=size, default=1 << 20, help="stdout/stderr kept, each")
    p.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module whose TOOLS list (or public functions) become host tools; repeatable",
    )


def budget_from(args: argparse.Namespace) -> Budget:
    """The budget the options say (raises BudgetError for an impossible one)."""
    return Budget(
        wall_clock=UNSET if args.timeout is None else args.timeout,
        max_calls=args.max_calls or None,
        max_bytes=args.max_bytes or None,
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
