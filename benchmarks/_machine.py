"""Machine facts every benchmark records beside its numbers.

What a result depends on, so that a number can be read later and compared with another
run's: the date, the command line, the interpreter and library versions, the kernel, the
CPU (count and model), the load when the run started, and which source tree was measured
(the git commit, the paths that differed from it, and a digest of every file the runs
execute, since the working tree may be dirty while a benchmark runs).

Shared by ``bench_wire``, ``bench_levels`` and ``study``; the keys are the ones
``bench_wire`` and ``bench_levels`` have always written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

__all__ = [
    "DEFAULT_PACKAGES",
    "ROOT",
    "changed_sources",
    "cpu_model",
    "cpu_ticks",
    "environment",
    "git_head",
    "report_head",
    "source_digest",
    "stolen_share",
    "version",
    "write_report",
]

ROOT: Final = Path(__file__).resolve().parent.parent

#: The distributions whose versions every benchmark records.
DEFAULT_PACKAGES: Final = ("anyio", "msgspec", "trio", "uvloop", "psutil")
#: The packages whose sources the runs execute (what ``source_digest`` covers).
MEASURED_PACKAGES: Final = ("protocol", "runner", "sandbox")


def version(dist: str) -> str | None:
    """The installed version of ``dist``, or None if it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    """The CPU's model name, from ``/proc/cpuinfo`` where there is one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: The columns of ``/proc/stat``'s ``cpu`` line, in clock ticks since boot, all CPUs.
_CPU_COLUMNS: Final = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
)


def cpu_ticks() -> dict[str, int] | None:
    """The machine's CPU time so far by kind (``/proc/stat``), None where there is none.

    ``steal`` is the time a virtual machine's CPUs were ready to run and the hypervisor ran
    something else (another tenant): over a benchmark's window, the share of it says how
    much of the machine the run did not have.
    """
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    return {name: int(value) for name, value in zip(_CPU_COLUMNS, fields[1:], strict=False)}


def stolen_share(start: dict[str, int] | None, end: dict[str, int] | None) -> float | None:
    """The share of all CPU time between two :func:`cpu_ticks` that was stolen (None if
    either is missing or no time passed)."""
    if not start or not end:
        return None
    total = sum(end[k] - start[k] for k in _CPU_COLUMNS if k in start and k in end)
    if total <= 0 or "steal" not in start or "steal" not in end:
        return None
    return (end["steal"] - start["steal"]) / total


def environment(argv: list[str], extra_packages: Iterable[str] = ()) -> dict[str, Any]:
    """What the numbers depend on: versions, machine, date, command line, load.

    Args:
        argv: the benchmark's own arguments (recorded as ``arguments``).
        extra_packages: distributions to record beside :data:`DEFAULT_PACKAGES`.

    Returns:
        A JSON-ready dict; ``loadavg_at_start`` is the load average now, and
        ``cpu_ticks_at_start`` the machine's CPU time so far (:func:`cpu_ticks`).
    """
    uname = platform.uname()
    packages = dict.fromkeys((*DEFAULT_PACKAGES, *extra_packages))
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command_line": list(sys.orig_argv),
        "arguments": argv,
        "python": sys.version,
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
        "versions": {name: version(name) for name in packages},
        "platform": platform.platform(),
        "kernel": uname.release,
        "machine": uname.machine,
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "loadavg_at_start": list(os.getloadavg()),
        "cpu_ticks_at_start": cpu_ticks(),
    }


def source_digest(root: Path = ROOT) -> dict[str, str]:
    """A short sha256 of every source file the runs execute (the tree may be dirty)."""
    out = {}
    for package in MEASURED_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return out


def git_head(root: Path = ROOT) -> dict[str, Any]:
    """The commit measured, the paths that differ from it, and :func:`source_digest`.

    Returns:
        ``{"commit": None}`` when git or the repository is not there.
    """
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=root, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], capture_output=True, text=True, cwd=root, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None}
    return {
        "commit": head,
        "dirty_paths": dirty.splitlines(),
        "measured_sources": source_digest(root),
    }


def changed_sources(before: dict[str, str], root: Path = ROOT) -> list[str]:
    """The measured source files whose digest differs from ``before`` (or appeared, or went)."""
    after = source_digest(root)
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def report_head(argv: Sequence[str] | None, extra_packages: Iterable[str] = ()) -> dict[str, Any]:
    """The first fields of a benchmark's JSON report: the machine, the library versions
    and the command line (``argv``, or this process's), and the commit measured."""
    return {
        "environment": environment(list(argv or sys.argv[1:]), extra_packages),
        "git": git_head(),
    }


def write_report(path: Path | None, report: dict[str, Any]) -> None:
    """Write ``report`` to ``path`` as JSON, if a path was given."""
    if path is not None:
        path.write_bytes(msgspec.json.format(msgspec.json.encode(report)))
