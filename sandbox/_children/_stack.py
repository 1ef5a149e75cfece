"""The program's Python stack at the moment its run is killed at the wall clock (opt-in).

Taken with py-spy (``pip install 'sandbox-runtime[diagnose]'``), which reads the stopped
process's memory from outside: nothing runs in the child, and a program cannot fake or
refuse it. py-spy needs to trace the child (``ptrace`` rights over it: the host's own uid,
or ``CAP_SYS_PTRACE``, and a Yama ``ptrace_scope`` that allows it); where it cannot, the
result says why instead of carrying a stack.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import anyio

__all__ = ["program_first", "py_spy", "python_stack"]

#: The longest taking a stack may add to a run that has already reached its wall clock.
STACK_TIMEOUT: Final = 10.0


def py_spy() -> str | None:
    """The py-spy executable: beside this interpreter (a virtual environment), or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file():
        return str(beside)
    return shutil.which("py-spy")


async def python_stack(pid: int, seconds: float = STACK_TIMEOUT) -> tuple[str | None, str | None]:
    """``(stack, None)`` with the Python stack of every thread of ``pid``, or ``(None, why)``."""
    exe = py_spy()
    if exe is None:
        return None, "py-spy is not installed (pip install 'sandbox-runtime[diagnose]')"
    try:
        with anyio.fail_after(seconds):
            done = await anyio.run_process(
                [exe, "dump", "--pid", str(pid)],
                check=False,
                stdin=subprocess.DEVNULL,
            )
    except TimeoutError:
        return None, f"py-spy did not finish within {seconds} s"
    except OSError as exc:
        return None, f"py-spy could not be started: {exc}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()
        why = lines[-1] if lines else f"exit status {done.returncode}"
        return None, f"py-spy could not read process {pid}: {why}"
    return program_first(done.stdout.decode("utf-8", "replace")), None


# py-spy prints each thread innermost frame first; the runner hands the program to Python
# in this frame, so every frame printed before it is the program's (or code it called).
# py-spy names the file relative to the process's sys.path where it can
# (``runner/_backends/python.py``), else by its base name (a zygote's child at ``process``,
# whose code is named by its place in a confined view: :mod:`runner._relocate`).
_RUNNER_ENTRY: Final = re.compile(r"_execute \((?:\S*/)?(?:runner/_backends/)?python\.py:")


def program_first(dump: str) -> str:
    """``py-spy dump``'s text, rearranged for whoever reads why a program was killed.

    The thread the runner started the program in comes first, the program's frames first
    and the runner's below them under a heading; then the other threads (the program's
    own, and the runner's); then py-spy's header (the process and the interpreter). Text
    that does not look like a dump is returned as it is.
    """
    header: list[str] = []
    threads: list[list[str]] = []
    for line in dump.splitlines():
        if line.startswith("Thread "):
            threads.append([line])
        elif threads and line.strip():
            threads[-1].append(line)
        elif line.strip():
            header.append(line)
    if not threads:
        return dump
    running = [_split_at_runner(t) for t in threads if _runs_program(t)]
    others = [t for t in threads if not _runs_program(t)]
    parts = [*("\n".join(t) for t in running)]
    if others:
        parts.append("the other threads:\n" + "\n\n".join("\n".join(t) for t in others))
    if header:
        parts.append("\n".join(header))
    return "\n\n".join(parts) + "\n"


def _runs_program(thread: list[str]) -> bool:
    return any(_RUNNER_ENTRY.match(line.strip()) for line in thread)


def _split_at_runner(thread: list[str]) -> list[str]:
    """A thread's lines with a heading between the program's frames and the runner's."""
    at = next(i for i, line in enumerate(thread) if _RUNNER_ENTRY.match(line.strip()))
    return [*thread[:at], "    -- the runner, below the program:", *thread[at:]]
