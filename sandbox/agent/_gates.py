"""The finish gates: what may refuse a finish, each a small object the loop asks in turn.

Theory of operation
-------------------

A finish, whether the model called the finish tool or a text-only answer is being taken
as the answer after its nudges (the implicit finish), passes three gates in this order
(seed 004, "FinishTool" and "Checklist gate"). The first that refuses wins, and the
gates after it are not asked:

1. :class:`FinishGuard`, the host's guard: its words refuse the first attempt, and the
   next attempt is accepted without asking it (a soft gate).
2. :class:`MutationGate`, when the task requires a change and no mutating tool has
   succeeded: a nudge the first time; every later time an abort, so that the human in
   the loop decides whether the finish goes on or the run ends.
3. :class:`ChecklistGate`, when ``update_checklist`` is offered: a task of more than
   :data:`CHECKLIST_TRIVIAL` productive calls that never recorded a checklist is nudged
   once, and a checklist with unchecked items is nudged once.

Each gate answers through one method, ``check``, in the breakers' terms
(:mod:`~sandbox.agent._breakers`): None lets the finish through, a ``Nudge`` refuses it
(its text is what the model is told), an ``Abort`` hands the decision to the person.
``check`` is async because the host's guard may be; the other gates answer at once.

The checklist gate also watches the run between finishes (:meth:`ChecklistGate.observe`,
:meth:`ChecklistGate.stale`): it counts the productive calls (every call that ran, except
``update_checklist`` itself), corrects an update that checks several items at once, and
nudges toward a checklist left stale mid-run.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, final

from ._breakers import Abort, Counter, Nudge, Trip
from ._hooks import Events, maybe_await

__all__ = [
    "CHECKLIST",
    "CHECKLIST_STALE",
    "CHECKLIST_STALE_CAP",
    "CHECKLIST_TRIVIAL",
    "ChecklistGate",
    "FinishGate",
    "FinishGuard",
    "MutationGate",
]

#: The checklist tool's name, as the model calls it.
CHECKLIST: Final = "update_checklist"
#: A task past this many productive calls is not trivial: it needs a checklist.
CHECKLIST_TRIVIAL: Final = 2
#: Productive calls since the last update after which the checklist is stale.
CHECKLIST_STALE: Final = 3
#: The most stale-checklist nudges in a run.
CHECKLIST_STALE_CAP: Final = 2

NUDGE_CHECKLIST_MISSING: Final = (
    "Before finishing: this was not a trivial task, and you never recorded a checklist. "
    "Call update_checklist with what you did, then finish."
)
NUDGE_CHECKLIST_UNCHECKED: Final = (
    "Before finishing: your checklist still has unchecked items: {items}. Finish them or "
    "update the checklist, then finish."
)
NUDGE_CHECKLIST_STALE: Final = (
    "You have made {n} calls since you last updated your checklist. Update it now, one item "
    "at a time."
)
NUDGE_MUTATION: Final = (
    "You are finishing without having changed anything, and this task requires a change. "
    "Make the change, then finish."
)


class FinishGate(Protocol):
    """What the loop asks before a finish is accepted."""

    async def check(self) -> Trip | None:
        """None: the finish may go on; a Nudge: refused; an Abort: the person decides."""
        ...


@final
class FinishGuard:
    """The host's finish guard: an error message refuses a finish, once.

    Args:
        guard: returns why finish is refused now, or None (or ""); may be async. None for
            no guard.
    """

    def __init__(self, guard: Callable[[], str | Awaitable[str | None] | None] | None) -> None:
        self._guard = guard
        self._refused = False

    async def check(self) -> Trip | None:
        """The guard's refusal, the first time it gives one; after that, nothing."""
        if self._guard is None or self._refused:
            return None
        error = await maybe_await(self._guard())
        if not error:
            return None
        self._refused = True  # soft: the next attempt is accepted
        return Nudge(str(error))


@final
class MutationGate:
    """Refuses a finish until a mutating tool has succeeded, when ``required``."""

    def __init__(self, required: bool) -> None:
        self.required = required
        self.mutated = False
        self.refusals = 0

    def changed(self) -> None:
        """A mutating tool succeeded: the gate is open for the rest of the run."""
        self.mutated = True

    async def check(self) -> Trip | None:
        """A nudge at the first finish without a change; an abort at every later one."""
        if not self.required or self.mutated:
            return None
        self.refusals += 1
        if self.refusals == 1:
            return Nudge(NUDGE_MUTATION)
        return Abort(Counter("mutation_gate", 0, 1), "finish without any change, again")


@final
class ChecklistGate:
    """Keeps the model's checklist current, when ``enabled`` (``update_checklist`` is
    offered and the gate is on).

    Args:
        enabled: whether it refuses finishes and nudges stale checklists. A disabled gate
            still corrects batched updates: that is the tool's own feedback.
        events: where its diagnostics go.
    """

    def __init__(self, enabled: bool, events: Events) -> None:
        self.enabled = enabled
        self._events = events
        self.items: list[tuple[str, bool]] | None = None
        self.productive = 0
        self.since_update = 0
        self.stale_nudges = 0
        self._missing_nudged = False
        self._unchecked_nudged = False

    async def check(self) -> Trip | None:
        """A nudge, once each: no checklist after real work; unchecked items."""
        if not self.enabled:
            return None
        if self.items is None and self.productive > CHECKLIST_TRIVIAL and not self._missing_nudged:
            self._missing_nudged = True
            return Nudge(NUDGE_CHECKLIST_MISSING)
        unchecked = [text for text, done in self.items or () if not done]
        if unchecked and not self._unchecked_nudged:
            self._unchecked_nudged = True
            return Nudge(NUDGE_CHECKLIST_UNCHECKED.format(items="; ".join(unchecked)))
        return None

    def observe(self, tool: str, arguments: dict[str, Any], *, failed: bool) -> str:
        """Take in a call that ran; what to append to its observation ("" for nothing).

        Any tool but ``update_checklist`` is a productive call. A successful update
        replaces the checklist; checking several items at once is corrected, checking
        one is encouraged, and the first update is exempt.
        """
        if tool != CHECKLIST:
            self.productive += 1
            self.since_update += 1
            return ""
        items = None if failed else _checklist_items(arguments)
        if items is None:
            return ""
        before, self.items = self.items, items
        self.since_update = 0
        if before is None:
            return ""  # the first (initialising) update is exempt
        return self._judge(before, items)

    def _judge(self, before: list[tuple[str, bool]], after: list[tuple[str, bool]]) -> str:
        """The feedback on an update: how many open items it checked."""
        was = {text for text, done in before if not done}
        newly = [text for text, done in after if done and text in was]
        if len(newly) > 1:
            self._events.diagnostic("checklist_batched_update", "; ".join(newly))
            return (
                f"\n[checklist] You checked {len(newly)} items at once. Check each item as "
                "you finish it, one at a time."
            )
        if len(newly) == 1:
            return "\n[checklist] Good: one item checked as it was done."
        return ""

    def stale(self) -> str | None:
        """The nudge toward a checklist that productive calls have left stale, at most
        :data:`CHECKLIST_STALE_CAP` times a run; None when it is current."""
        if (
            not self.enabled
            or self.items is None
            or self.since_update < CHECKLIST_STALE
            or self.stale_nudges >= CHECKLIST_STALE_CAP
        ):
            return None
        self.stale_nudges += 1
        self.since_update = 0
        self._events.diagnostic("checklist_stale_nudge", str(CHECKLIST_STALE))
        return NUDGE_CHECKLIST_STALE.format(n=CHECKLIST_STALE)


def _checklist_items(arguments: dict[str, Any]) -> list[tuple[str, bool]] | None:
    """The checklist an update gives: ``items`` as ``[{"text", "done"}]``, or
    ``checklist`` as Markdown task lines (``- [x] text``); None when it gives neither."""
    raw = arguments.get("items")
    if isinstance(raw, list):
        return [
            (item["text"], bool(item.get("done")))
            for item in raw
            if isinstance(item, dict) and isinstance(item.get("text"), str)
        ]
    text = arguments.get("checklist")
    if isinstance(text, str):
        found = re.findall(r"^\s*[-*]\s*\[([ xX])\]\s*(.+?)\s*$", text, re.MULTILINE)
        return [(t, mark.lower() == "x") for mark, t in found]
    return None
