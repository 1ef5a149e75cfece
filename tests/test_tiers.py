"""The suite's own machinery (``tests/conftest.py``): the fast tier's selection, and CI's
refusal of a skip for a wall or a cgroup the host lacks. Each test runs pytest on a small
test file of its own, in a subprocess, with the hooks of ``tests/conftest.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import ROOT

CONFTEST = """
from tests.conftest import anyio_backend, pytest_collection_modifyitems, pytest_runtest_makereport

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: longer system tests")
"""

SKIPS = """
import pytest
from tests.host import skip_because_host_cannot, skipif_host_cannot

def test_needs_a_wall():
    skip_because_host_cannot("confine: (a test of the suite)")

@skipif_host_cannot(True, "enforce max_memory: (a test of the suite)")
def test_needs_a_cgroup():
    pass

def test_needs_something_else():
    pytest.skip("py-spy is not installed")
"""

MATRIX = """
import pytest

@pytest.mark.anyio
@pytest.mark.parametrize("level", ["process", "confined"])
@pytest.mark.parametrize("spawn", ["cold", "zygote", "pool"])
async def test_matrix(spawn, level):
    pass

@pytest.mark.parametrize("level", ["in_process", "process"])
def test_levels(level):
    pass

@pytest.mark.slow
def test_slow():
    pass

def test_plain():
    pass
"""


def pytest_in(
    tmp_path: Path, source: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``source`` (as ``test_it.py``, beside :data:`CONFTEST`) in
    ``tmp_path``, with ``env`` added to the environment and nothing else of it that
    picks a tier."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(source)
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SANDBOX_TESTS", "SANDBOX_REQUIRE_CONFINED")
    }
    environ.update(env, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args, "test_it.py"],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_a_skip_for_a_missing_wall_or_cgroup_fails_where_they_are_required(
    tmp_path: Path,
) -> None:
    """With ``SANDBOX_REQUIRE_CONFINED=1``, a test skipped because the host cannot confine
    or has no cgroups fails (in its call, or in its setup for a ``skipif`` mark); a skip
    for any other reason stays a skip."""
    proc = pytest_in(tmp_path, SKIPS, SANDBOX_REQUIRE_CONFINED="1")
    assert proc.returncode == 1, proc.stdout
    summary = proc.stdout.splitlines()[-1]
    assert "1 failed" in summary, proc.stdout
    assert "1 skipped" in summary, proc.stdout
    assert "1 error" in summary, proc.stdout
    assert "FAILED test_it.py::test_needs_a_wall" in proc.stdout
    assert "ERROR test_it.py::test_needs_a_cgroup" in proc.stdout
    assert "SANDBOX_REQUIRE_CONFINED=1, and Skipped: this host cannot confine" in proc.stdout


@pytest.mark.slow
def test_without_the_requirement_such_skips_are_skips(tmp_path: Path) -> None:
    """Elsewhere (a developer's host without cgroups, say) the same tests skip."""
    proc = pytest_in(tmp_path, SKIPS)
    assert proc.returncode == 0, proc.stdout
    assert "3 skipped" in proc.stdout.splitlines()[-1], proc.stdout


def collected(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return sorted(line.split("::")[1] for line in proc.stdout.splitlines() if "::" in line)


@pytest.mark.slow
def test_the_fast_tier_keeps_one_cell_of_each_matrix_and_no_slow_test(tmp_path: Path) -> None:
    """``SANDBOX_TESTS=fast``: asyncio only, the zygote only, the first level listed, and
    nothing marked ``slow``; without it, everything."""
    fast = pytest_in(tmp_path, MATRIX, "--collect-only", "-q", SANDBOX_TESTS="fast")
    assert collected(fast) == [
        "test_levels[in_process]",
        "test_matrix[asyncio-zygote-process]",
        "test_plain",
    ], fast.stdout
    full = pytest_in(tmp_path, MATRIX, "--collect-only", "-q")
    assert len(collected(full)) == 2 * 3 * 2 + 2 + 2, full.stdout
