"""Suite-wide settings: every async test runs on asyncio (debug mode) and on trio.

Two tiers. ``make test`` (CI) runs everything: every async test on both backends, every
system test at each level and with each way of making a child. ``make check``
(``SANDBOX_TESTS=fast``) is for use while working: the same tests, but each parametrized
over a backend, a level or a spawn mode only with the first of them (asyncio, the first
level listed, the zygote), without the tests marked ``slow`` (system tests slow by
nature: real servers, benchmark smoke runs, hundreds of runs, fork bombs; one of each kind
stays), and with 20 examples of each property instead of 200.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.host import HOST_CANNOT, REQUIRE_CONFINED

# The machine is small and shared: Hypothesis must not fail a test because one example
# was slow, and CI runs a fixed, moderate number of examples.
settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=200,
)
#: ``make check``: the fast tier (see the module docstring).
FAST = os.environ.get("SANDBOX_TESTS") == "fast"
# The fast tier tries a few examples of each property; CI tries the default's 200.
settings.register_profile("fast", settings.get_profile("default"), max_examples=20)
settings.load_profile("fast" if FAST else "default")


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"debug": True}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


#: The parameters whose values multiply the system tests, and the one value the fast tier
#: keeps of each (None: the first value the test lists).
_MATRIX: dict[str, str | None] = {"anyio_backend": "asyncio", "spawn": "zygote", "level": None}


#: The suite's longest tests (seconds each, measured on a loaded two-core machine), run
#: first: pytest-xdist's worksteal hands each worker a contiguous share of the collection
#: and rebalances by count, not by time, so a two-minute test collected near the end can
#: still be running alone when every other test is done. Started first, it overlaps the
#: rest. A name here that matches no test (renamed, deselected) changes nothing.
LONG_FIRST: dict[str, float] = {
    "tests/test_readme.py::test_readme_commands_on_a_fresh_clone": 120,
    "tests/test_bench_plane.py::test_smoke_run_writes_every_series": 16,
    "tests/sandbox/test_leaks.py::test_many_runs_leave_nothing_behind": 12,
    "tests/test_study.py::test_smoke_run_measures_every_cell": 12,
    "tests/sandbox/plane/test_http.py::"
    "test_pings_keep_a_session_open_and_a_lost_one_is_dialed_again": 7,
    "tests/sandbox/plane/test_remote.py::"
    "test_a_reading_cut_off_is_read_again_once_on_a_new_connection": 6,
    "tests/upstream/test_serve_agent.py::test_serve_offers_upstream_tools_to_its_programs": 6,
    "tests/sandbox/test_cli.py::test_console_script_works_like_python_dash_m": 6,
    "tests/sandbox/test_cgroup2.py::test_v2_delegated_no_survivors": 5,
    "tests/sandbox/test_nonroot.py::test_serve_and_agent_start_at_confined": 5,
    "tests/test_tiers.py::test_the_fast_tier_keeps_one_cell_of_each_matrix_and_no_slow_test": 5,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if FAST:
        _keep_the_fast_tier(config, items)
    # Longest first, the rest in collection order (a stable sort).
    items.sort(key=lambda item: -LONG_FIRST.get(item.nodeid.split("[", 1)[0], 0))


def _keep_the_fast_tier(config: pytest.Config, items: list[pytest.Item]) -> None:
    first: dict[tuple[str, str], str] = {}  # (test function, parameter) -> first value's id
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        wanted = item.get_closest_marker("slow") is None
        if callspec is not None and wanted:
            function = item.nodeid.split("[", 1)[0]
            for name, value in _MATRIX.items():
                if name not in callspec.params:
                    continue
                shown = _value_id(callspec.params[name])
                chosen = value if value is not None else first.setdefault((function, name), shown)
                if shown != chosen:
                    wanted = False
                    break
        (keep if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _value_id(value: object) -> str:
    if isinstance(value, tuple):  # the anyio_backend parameter: (name, options)
        return str(value[0])
    return str(getattr(value, "value", value))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Where ``SANDBOX_REQUIRE_CONFINED=1`` (CI), a test skipped because this host cannot
    confine, or has no cgroups (:mod:`tests.host`), fails instead."""
    report = yield
    if REQUIRE_CONFINED and report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2])
        if reason.removeprefix("Skipped: ").startswith(HOST_CANNOT):
            report.outcome = "failed"
            report.longrepr = f"SANDBOX_REQUIRE_CONFINED=1, and {reason}"
    return report
