"""A session's budget capped at the server's ceilings, and budgets carried as JSON."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from sandbox import Budget
from sandbox._budget import UNSET
from sandbox._model import Descriptor
from sandbox.plane._capability import Asked, Capability, cap_budget

#: (asked, ceiling, the session's item) for an item with no default (max_calls): a value
#: or None (no limit).
_CALLS = [
    (None, None, None),
    (5, None, 5),
    (None, 3, 3),
    (5, 3, 3),
    (2, 3, 2),
    (0, 3, 0),
    (5, 0, 0),
]
#: The same for an item with a default (wall_clock: 30 s), which may also be left unset.
_WALL_CLOCK = [
    (UNSET, UNSET, UNSET),
    (None, UNSET, UNSET),  # the default ceiling cannot be lifted by the session
    (10.0, UNSET, 10.0),
    (60.0, UNSET, 30.0),  # capped at the default
    (UNSET, None, UNSET),
    (None, None, None),
    (60.0, None, 60.0),
    (UNSET, 20.0, 20.0),
    (None, 20.0, 20.0),
    (10.0, 20.0, 10.0),
]


@pytest.mark.parametrize(("asked", "ceiling", "got"), _CALLS)
def test_a_count_is_capped_at_its_ceiling(asked: Any, ceiling: Any, got: Any) -> None:
    """None is no limit on either side; zero is zero."""
    budget = cap_budget(Budget(max_calls=asked), Budget(max_calls=ceiling))
    assert budget.max_calls == got


@pytest.mark.parametrize(("asked", "ceiling", "got"), _WALL_CLOCK)
def test_an_item_with_a_default_is_capped_at_its_ceiling(
    asked: Any, ceiling: Any, got: Any
) -> None:
    """Unset is the item's default on either side, None no limit."""
    budget = cap_budget(Budget(wall_clock=asked), Budget(wall_clock=ceiling))
    assert budget.wall_clock == got


def test_no_ask_is_the_ceilings() -> None:
    ceilings = Budget(max_calls=3, wall_clock=None)
    assert cap_budget(None, ceilings) is ceilings


def test_a_budget_crosses_the_wire_as_json_and_back() -> None:
    """An unset item is left out (its default), None is null (no limit), 0 is 0: a budget
    decodes to itself, in the capability and in a client's ask."""
    budget = Budget(wall_clock=None, max_calls=0, max_bytes=None, max_output=2048)
    cap = Capability(version=1, descriptor=Descriptor(), tools=(), ceilings=budget)
    raw = msgspec.json.decode(msgspec.json.encode(cap))
    ceilings = raw["ceilings"]
    assert (ceilings["wall_clock"], ceilings["max_calls"], ceilings["max_bytes"]) == (None, 0, None)
    assert "max_inflight" not in ceilings
    assert msgspec.convert(raw, Capability) == cap
    asked = Asked(budget=budget, invoke=True)
    assert msgspec.json.decode(msgspec.json.encode(asked), type=Asked) == asked
    assert msgspec.json.decode(b"{}", type=Budget) == Budget()
    assert msgspec.json.decode(b'{"max_calls": null}', type=Budget).max_calls is None
