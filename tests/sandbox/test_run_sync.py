"""``run_sync`` where an event loop already runs (a notebook cell, an ``async def``)."""

from __future__ import annotations

import pytest

import sandbox


@pytest.mark.anyio
async def test_run_sync_inside_a_running_loop_says_to_await_run() -> None:
    with pytest.raises(RuntimeError, match=r"await sandbox\.run\(") as caught:
        sandbox.run_sync("1 + 1", level="in_process")
    assert "already runs one" in str(caught.value)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_sync_outside_a_loop_runs(backend: str) -> None:
    result = sandbox.run_sync("1 + 1", level="in_process", backend=backend)
    assert result.ok
    assert result.value == 2
