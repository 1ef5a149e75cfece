"""Fixtures for runs: every test checks that its runs left nothing behind."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest


def runner_processes() -> list[psutil.Process]:
    """Live processes started by any run (they all carry the runner's command line)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or ())
        except psutil.Error:
            continue
        # A run's process: python with the runner's bootstrap (or forked from one).
        if "from runner._main import main" in cmdline and proc.pid != os.getpid():
            found.append(proc)
    return found


def run_dirs() -> set[str]:
    """Temporary working directories of runs that still exist."""
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("sandbox-run-*")}


@pytest.fixture(autouse=True)
def nothing_left_behind() -> Iterator[None]:
    """After each test: no run's process, zombie, or working directory remains."""
    dirs_before = run_dirs()
    procs_before = {p.pid for p in runner_processes()}
    yield
    left = [p for p in runner_processes() if p.pid not in procs_before]
    for proc in left:  # clean up for the next test, then fail this one
        try:
            proc.kill()
        except psutil.Error:
            pass
    assert left == [], f"processes left running: {left}"
    zombies = [c for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
    assert zombies == [], f"zombies left: {zombies}"
    assert run_dirs() - dirs_before == set()
