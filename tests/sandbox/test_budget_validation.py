"""Budget validation, as properties: any value for any item is either a budget every part
of the host can use (the Start frame, the call server's limits, the applied budget), or one
:class:`~sandbox.BudgetError` that names exactly the bad items, all of them at once.

The model below is the rule as the docs state it, written apart from the code: items in
seconds are an int or a float, positive, finite and from a nanosecond to what int64
nanoseconds hold; every other item is an int (never a float, even a whole one, never a
bool) from its least value to Go's int64 max; None lifts any item but ``max_inflight``.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import INT64_MAX, Start
from sandbox import Budget, BudgetError, Level
from sandbox._budget import MIN_MEMORY
from sandbox._engine import with_defaults

FIELDS = list(Budget.__struct_fields__)
SECONDS = {"wall_clock", "max_call_deadline", "max_cpu"}
LEAST = {
    "max_calls": 0,
    "max_bytes": 0,
    "max_inflight": 1,
    "max_memory": MIN_MEMORY,
    "max_output": 0,
    "max_file_size": 1,
    "max_open_files_per_process": 16,
    "max_processes": 1,
    "max_disk": 1,
}

#: Anything a caller might pass: numbers of every kind and size, near every bound, and
#: what is not a number at all.
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-3, max_value=20),
    st.sampled_from([MIN_MEMORY - 1, MIN_MEMORY, INT64_MAX, INT64_MAX + 1, 2**64, 10**400]),
    st.floats(),
    st.sampled_from([0.0, -0.0, 1e-9, 1e-10, 9.2e9, 9.3e9, 2.5, 1e9, 1.5e9, math.nan]),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.just(Decimal("1.5")),
    st.just(Fraction(3, 2)),
    st.lists(st.integers(), max_size=2),
    st.just(object()),
)


def is_valid(name: str, value: Any) -> bool:
    """The documented rule, for one item."""
    if value is None:
        return name != "max_inflight"
    if isinstance(value, bool):
        return False
    if name in SECONDS:
        if not isinstance(value, int | float):
            return False
        if isinstance(value, int) and value > 10**300:
            return False  # past every float: not finite
        ns = float(value) * 1e9
        return math.isfinite(ns) and 1 <= ns < 2.0**63
    return isinstance(value, int) and LEAST[name] <= value <= INT64_MAX


def usable(budget: Budget) -> None:
    """Everything the host makes of a budget, made: none of it may fail."""
    for level in Level:
        applied = with_defaults(level, budget)
        start = Start(v=1, program="1", bindings=(), budget=applied.start_budget(), result_id="r")
        msgspec.json.encode(start)
        applied.call_limits()


@pytest.mark.parametrize("name", FIELDS)
@given(value=values)
def test_any_value_of_one_item_is_usable_or_refused_by_name(name: str, value: Any) -> None:
    """Each item, whatever it is given: a budget that the Start frame, the call server and
    every level can take, or a BudgetError naming that item alone, with the value."""
    if is_valid(name, value):
        usable(Budget(**{name: value}))
        return
    with pytest.raises(BudgetError) as info:
        Budget(**{name: value})
    assert list(info.value.items) == [name]
    assert str(info.value).startswith(f"{name} ")
    assert isinstance(info.value, ValueError)


@given(st.dictionaries(st.sampled_from(FIELDS), values, max_size=len(FIELDS)))
def test_every_bad_item_is_named_together(items: dict[str, Any]) -> None:
    """A budget with several items: refused once, naming exactly the bad ones."""
    bad = {name for name, value in items.items() if not is_valid(name, value)}
    if not bad:
        usable(Budget(**items))
        return
    with pytest.raises(BudgetError) as info:
        Budget(**items)
    assert set(info.value.items) == bad
    assert all(f"{name} " in str(info.value) for name in bad)


@pytest.mark.parametrize(
    ("items", "says"),
    [
        ({"wall_clock": True}, "got True (bool)"),
        ({"max_calls": 2.5}, "got 2.5 (float)"),
        ({"max_memory": 2e9}, "int(2000000000.0) if that is meant"),
        ({"max_memory": 1000}, "at least 16 MiB"),
        ({"wall_clock": 0}, "None means no limit"),
        ({"max_cpu": "1"}, "got '1' (str)"),
    ],
    ids=repr,
)
def test_the_message_says_what_is_wrong_and_what_was_given(
    items: dict[str, Any], says: str
) -> None:
    """Each refusal shows the value and its type, sizes in binary units, and how to say
    what was likely meant (an int, or None for no limit)."""
    with pytest.raises(BudgetError) as info:
        Budget(**items)
    assert says in str(info.value)


@pytest.mark.parametrize("level", list(Level))
def test_a_budget_applied_with_its_defaults_passes_validation(level: Level) -> None:
    """``applied`` fills the items left unset without validating again: what it makes
    must be a budget that validation accepts, item for item."""
    for budget in (Budget(), Budget(max_calls=3), Budget(wall_clock=None, max_memory=None)):
        applied = with_defaults(level, budget)
        again = Budget(**{name: getattr(applied, name) for name in FIELDS})
        assert again == applied
        assert all(getattr(applied, name) is not msgspec.UNSET for name in FIELDS)
