"""Suite-wide settings: every async test runs on asyncio (debug mode) and on trio."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# The machine is small and shared: Hypothesis must not fail a test because one example
# was slow, and CI runs a fixed, moderate number of examples.
settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    max_examples=200,
)
settings.load_profile("default")


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {"debug": True}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param
