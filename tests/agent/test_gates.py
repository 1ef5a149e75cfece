"""Each finish gate alone: when it refuses, with what, and when it lets a finish through
(the loop's use of them, on a finish call and on an implicit finish, is in test_loop.py)."""

from __future__ import annotations

import pytest

from sandbox.agent import Events
from sandbox.agent._breakers import Abort, Nudge
from sandbox.agent._gates import (
    CHECKLIST,
    CHECKLIST_STALE_CAP,
    ChecklistGate,
    FinishGuard,
    MutationGate,
)

pytestmark = pytest.mark.anyio


class Diagnostics(Events):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def diagnostic(self, name: str, detail: str) -> None:
        self.seen.append(name)


def items(*done: bool) -> dict[str, object]:
    return {"items": [{"text": f"i{n}", "done": d} for n, d in enumerate(done)]}


# -- the finish guard --


async def test_the_guard_refuses_once_with_its_words_then_is_not_asked() -> None:
    asked: list[int] = []

    async def guard() -> str | None:
        asked.append(1)
        return "still running"

    gate = FinishGuard(guard)
    assert await gate.check() == Nudge("still running")
    assert await gate.check() is None
    assert asked == [1]


async def test_a_guard_with_nothing_to_say_refuses_nothing_and_is_asked_again() -> None:
    answers = ["", None, "now"]
    gate = FinishGuard(lambda: answers.pop(0))
    assert await gate.check() is None
    assert await gate.check() is None
    assert await gate.check() == Nudge("now")
    assert await FinishGuard(None).check() is None


# -- the mutation gate --


async def test_the_mutation_gate_nudges_then_hands_every_later_finish_to_the_person() -> None:
    gate = MutationGate(required=True)
    first = await gate.check()
    assert isinstance(first, Nudge)
    assert "without having changed anything" in first.text
    for _ in range(2):
        later = await gate.check()
        assert isinstance(later, Abort)
        assert (later.counter.name, later.detail) == (
            "mutation_gate",
            "finish without any change, again",
        )


async def test_the_mutation_gate_opens_after_a_change_and_is_open_when_not_required() -> None:
    gate = MutationGate(required=True)
    gate.changed()
    assert await gate.check() is None
    assert await MutationGate(required=False).check() is None


# -- the checklist gate --


async def test_the_checklist_gate_nudges_a_missing_checklist_once_after_real_work() -> None:
    gate = ChecklistGate(True, Events())
    for _ in range(2):
        gate.observe("echo", {}, failed=False)
    assert await gate.check() is None, "two productive calls are trivial"
    gate.observe("echo", {}, failed=True)  # a failed call is work too
    missing = await gate.check()
    assert isinstance(missing, Nudge)
    assert "never recorded a checklist" in missing.text
    assert await gate.check() is None


async def test_the_checklist_gate_nudges_unchecked_items_once() -> None:
    gate = ChecklistGate(True, Events())
    gate.observe(CHECKLIST, items(False, True, False), failed=False)
    unchecked = await gate.check()
    assert isinstance(unchecked, Nudge)
    assert "unchecked items: i0; i2." in unchecked.text
    assert await gate.check() is None


async def test_a_disabled_checklist_gate_refuses_nothing_and_nudges_nothing() -> None:
    gate = ChecklistGate(False, Events())
    gate.observe(CHECKLIST, items(False), failed=False)
    for _ in range(5):
        gate.observe("echo", {}, failed=False)
    assert await gate.check() is None
    assert gate.stale() is None


def test_an_update_that_checks_several_items_is_corrected_and_one_is_encouraged() -> None:
    events = Diagnostics()
    gate = ChecklistGate(False, events)
    assert gate.observe(CHECKLIST, items(False, False, False), failed=False) == ""
    assert "Good: one item" in gate.observe(CHECKLIST, items(True, False, False), failed=False)
    batched = gate.observe(CHECKLIST, items(True, True, True), failed=False)
    assert "checked 2 items at once" in batched
    assert events.seen == ["checklist_batched_update"]
    assert gate.observe(CHECKLIST, items(True, True, True), failed=False) == ""


def test_a_failed_or_shapeless_update_changes_nothing_and_markdown_is_read() -> None:
    gate = ChecklistGate(True, Events())
    gate.observe(CHECKLIST, items(False), failed=True)
    gate.observe(CHECKLIST, {"other": 1}, failed=False)
    before = gate.items
    markdown = {"checklist": "- [x] done one\n* [ ] open one\nnot an item"}
    gate.observe(CHECKLIST, markdown, failed=False)
    assert (before, gate.items) == (None, [("done one", True), ("open one", False)])
    assert gate.productive == 0, "updating the checklist is not productive"


def test_a_stale_checklist_is_nudged_after_three_productive_calls_at_most_twice() -> None:
    events = Diagnostics()
    gate = ChecklistGate(True, events)
    for _ in range(3):
        gate.observe("echo", {}, failed=False)
    assert gate.stale() is None, "no checklist yet: nothing is stale"
    gate.observe(CHECKLIST, items(False), failed=False)
    nudges: list[str | None] = []
    for _ in range(3 * (CHECKLIST_STALE_CAP + 1)):
        gate.observe("echo", {}, failed=False)
        nudges.append(gate.stale())
    given = [n for n in nudges if n is not None]
    assert len(given) == CHECKLIST_STALE_CAP
    assert nudges[2] is not None
    assert "3 calls since you last updated" in nudges[2]
    assert nudges[:2] == [None, None]
    assert events.seen == ["checklist_stale_nudge"] * CHECKLIST_STALE_CAP
