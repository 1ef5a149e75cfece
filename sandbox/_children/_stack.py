"""The program's Python stack at the moment its run is killed at the wall clock (opt-in).

Taken with py-spy (``pip install 'sandbox-runtime[diagnose]'``), which reads the stopped
process's memory from outside: nothing runs in the child, and a program cannot fake or
refuse it. py-spy needs to trace the child (``ptrace`` rights over it: the host's own uid,
or ``CAP_SYS_PTRACE``, and a Yama ``ptrace_scope`` that allows it); where it cannot, the
result says why instead of carrying a stack.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import anyio

__all__ = ["py_spy", "python_stack"]

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
    return done.stdout.decode("utf-8", "replace"), None
