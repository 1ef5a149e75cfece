"""Circuit breakers: small counters that stop an unproductive loop (seed 004, "Circuit
breakers").

Theory of operation
-------------------

Each breaker counts one kind of consecutive failure and is asked once per occasion by
the loop, through one method, ``check``, which returns what the count has reached:

* None: nothing to do;
* a :class:`Nudge`: a user message telling the model to change course (the loop adds
  it after the step);
* an :class:`Abort`: the run ends, unless the human in the loop lets it go on. A person
  who allows it once or more starts the count again; one who allows it always turns the
  breaker off for the run (:meth:`Counter.allow`).

The five breakers and what they count (thresholds from :class:`~sandbox.agent.Breakers`,
where 0 turns one off):

============================  ==========================================================
:class:`Repeat`               identical calls (name and canonical arguments)
:class:`MaxTokens`            responses cut at max tokens that held tool calls
:class:`BadArguments`         calls of one tool whose arguments do not parse
:class:`Fruitless`            calls whose raw result is at most ``fruitless_max_len``
                              characters
:class:`SimilarResults`       calls of one tool with other arguments whose results differ
                              in length by at most ``same_tool_size_delta``
============================  ==========================================================

:class:`Repeat`, :class:`Fruitless` and :class:`SimilarResults` see every call of a
response but the loop's own (finish, read-back, the checklist), after the response's calls
ran, in order (:class:`CallBreakers`). Each keeps what it remembers of the last call
itself, so each can be tested alone.

A breaker counts on while it is off; only its verdicts stop.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, Literal, final

import msgspec

from ._hooks import Breakers, Grant
from ._types import ToolCall

__all__ = [
    "NUDGE_FRUITLESS",
    "NUDGE_REPEAT",
    "NUDGE_SAME_TOOL",
    "Abort",
    "BadArguments",
    "CallBreakers",
    "Counter",
    "Fruitless",
    "MaxTokens",
    "Nudge",
    "Repeat",
    "Seen",
    "SimilarResults",
    "Trip",
]

NUDGE_REPEAT: Final = (
    "You have made the same call {n} times in a row with the same result. Change approach."
)
NUDGE_FRUITLESS: Final = (
    "Your last {n} calls returned almost nothing. Step back and try something else."
)
NUDGE_SAME_TOOL: Final = (
    "You have called {tool} {n} times in a row with results of about the same size. "
    "Reconsider whether this is making progress."
)

_CANONICAL: Final = msgspec.json.Encoder(order="sorted")


@final
class Counter:
    """One breaker's consecutive count, its two thresholds (0: that one off) and whether
    it is still on.

    Args:
        name: the breaker's name, as the human in the loop and the abort's reason say it.
        nudge: the count at which the model is nudged.
        abort: the count at which the run is aborted.
    """

    def __init__(self, name: str, nudge: int, abort: int) -> None:
        self.name, self.nudge, self.abort = name, nudge, abort
        self.count = 0
        self.on = True

    def hit(self) -> Literal["nudge", "abort"] | None:
        """Count one more; what the count has reached (None when the breaker is off)."""
        self.count += 1
        if not self.on:
            return None
        if self.abort and self.count >= self.abort:
            return "abort"
        if self.nudge and self.count >= self.nudge:
            return "nudge"
        return None

    def reset(self) -> None:
        """Start the count again (the failure did not happen this time)."""
        self.count = 0

    def allow(self, grant: Grant) -> None:
        """A person let the run go on past this breaker's abort: the count starts again,
        and :attr:`Grant.ALWAYS` turns the breaker off for the run."""
        self.reset()
        if grant is Grant.ALWAYS:
            self.on = False


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Nudge:
    """A message for the model: change course (or, from a gate, why finish is refused)."""

    text: str


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Abort:
    """The end of the run, unless a person lets it go on past ``counter``.

    Attributes:
        counter: the breaker's count (its name is what the person is asked about).
        detail: what happened, in a few words.
    """

    counter: Counter
    detail: str


#: What a check finds.
Trip = Nudge | Abort


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One call as the per-call breakers see it.

    Attributes:
        tool: the tool's name.
        key: the call's identity: name and arguments, canonical (sorted keys), encoded.
        size: the length of the raw result, before truncation.
    """

    tool: str
    key: bytes
    size: int

    @classmethod
    def of(cls, call: ToolCall, size: int) -> Seen:
        """``call`` with a raw result of ``size`` characters."""
        return cls(call.name, _CANONICAL.encode((call.name, _canonical_args(call.arguments))), size)


@final
class Repeat:
    """Identical calls in a row: a nudge at ``nudge``, an abort at ``abort``."""

    def __init__(self, nudge: int, abort: int) -> None:
        self.counter = Counter("repeat", nudge, abort)
        self._last: bytes | None = None

    def check(self, seen: Seen) -> Trip | None:
        """Count ``seen`` if it is the same call as the last one, else start again."""
        if seen.key != self._last:
            self.counter.reset()
        self._last = seen.key
        state = self.counter.hit()
        if state == "abort":
            return Abort(self.counter, f"{seen.tool} called {self.counter.count} times alike")
        if state == "nudge":
            return Nudge(NUDGE_REPEAT.format(n=self.counter.count))
        return None


@final
class Fruitless:
    """Calls in a row whose raw result is at most ``max_len`` characters."""

    def __init__(self, nudge: int, abort: int, max_len: int) -> None:
        self.counter = Counter("fruitless", nudge, abort)
        self.max_len = max_len

    def check(self, seen: Seen) -> Trip | None:
        """Count ``seen`` if its result is that short, else start again."""
        if seen.size > self.max_len:
            self.counter.reset()
            return None
        state = self.counter.hit()
        if state == "abort":
            return Abort(self.counter, f"{self.counter.count} calls returned almost nothing")
        if state == "nudge":
            return Nudge(NUDGE_FRUITLESS.format(n=self.counter.count))
        return None


@final
class SimilarResults:
    """Calls in a row of one tool, each with other arguments than the one before, whose
    results differ in length by at most ``delta``. A series counts from its first call."""

    def __init__(self, nudge: int, abort: int, delta: int) -> None:
        self.counter = Counter("same_tool", nudge, abort)
        self.delta = delta
        self._last: Seen | None = None

    def check(self, seen: Seen) -> Trip | None:
        """Count ``seen`` if it goes on the series, else start one with it."""
        last, self._last = self._last, seen
        similar = (
            last is not None
            and seen.tool == last.tool
            and seen.key != last.key
            and abs(seen.size - last.size) <= self.delta
        )
        if not similar:
            self.counter.reset()
        state = self.counter.hit()
        if state == "abort":
            return Abort(self.counter, f"{seen.tool} called {self.counter.count} times alike")
        if state == "nudge":
            return Nudge(NUDGE_SAME_TOOL.format(tool=seen.tool, n=self.counter.count))
        return None


@final
class CallBreakers:
    """The breakers that see every call: :class:`Repeat`, :class:`Fruitless` and
    :class:`SimilarResults`, asked in that order."""

    def __init__(self, config: Breakers) -> None:
        self.repeat = Repeat(config.repeat_nudge, config.repeat_abort)
        self.fruitless = Fruitless(
            config.fruitless_nudge, config.fruitless_abort, config.fruitless_max_len
        )
        self.similar = SimilarResults(
            config.same_tool_nudge, config.same_tool_abort, config.same_tool_size_delta
        )

    def check(self, seen: Seen) -> list[Trip]:
        """What each breaker found for ``seen``, in order (every breaker counts it)."""
        found = (self.repeat.check(seen), self.fruitless.check(seen), self.similar.check(seen))
        return [trip for trip in found if trip is not None]


@final
class MaxTokens:
    """Responses in a row cut at max tokens that held tool calls (none of which ran)."""

    def __init__(self, abort: int) -> None:
        self.counter = Counter("truncation", 0, abort)

    def check(self, cut: bool) -> Abort | None:
        """Count a response with tool calls if it was ``cut``, else start again."""
        if not cut:
            self.counter.reset()
            return None
        if self.counter.hit() == "abort":
            return Abort(self.counter, "responses keep being cut at max tokens")
        return None


@final
class BadArguments:
    """Calls in a row of one tool whose arguments do not parse: one count per tool."""

    def __init__(self, abort: int) -> None:
        self.abort = abort
        self.counters: dict[str, Counter] = {}

    def check(self, tool: str, parsed: bool) -> Abort | None:
        """Count a call of ``tool`` whose arguments did not parse, or start its count
        again when they did."""
        counter = self.counters.setdefault(tool, Counter(f"parse_error:{tool}", 0, self.abort))
        if parsed:
            counter.reset()
            return None
        if counter.hit() == "abort":
            return Abort(counter, f"the arguments of {tool} keep failing to parse")
        return None


def _canonical_args(text: str) -> Any:
    """The arguments decoded (``""`` is ``{}``), or the text itself when it is not JSON."""
    try:
        return msgspec.json.decode(text or "{}")
    except msgspec.DecodeError:
        return text
