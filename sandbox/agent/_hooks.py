"""What the loop tells and asks its host: events, the human in the loop, breakers' limits."""

from __future__ import annotations

import enum
import inspect
from typing import Any, Protocol, final

import msgspec

from ._types import CompactionResult, FillCheck, ToolCall

__all__ = [
    "Approval",
    "Breakers",
    "Events",
    "Grant",
    "HumanInTheLoop",
    "NoHuman",
    "NoEvents",
    "Verdict",
    "maybe_await",
]


@final
class Breakers(msgspec.Struct, frozen=True, kw_only=True):
    """Thresholds that stop an unproductive loop: a nudge first, then an abort (which the
    human in the loop may override). 0 disables a threshold.

    Attributes:
        repeat_nudge, repeat_abort: consecutive identical calls (name and arguments).
        truncation_abort: consecutive responses cut at max tokens that held tool calls.
        parse_error_abort: consecutive calls of one tool whose arguments do not parse.
        fruitless_nudge, fruitless_abort: consecutive calls whose result is at most
            ``fruitless_max_len`` characters.
        same_tool_nudge, same_tool_abort: consecutive calls of one tool with other
            arguments whose results differ in length by at most ``same_tool_size_delta``.
    """

    repeat_nudge: int = 3
    repeat_abort: int = 5
    truncation_abort: int = 3
    parse_error_abort: int = 3
    fruitless_nudge: int = 5
    fruitless_abort: int = 8
    fruitless_max_len: int = 48
    same_tool_nudge: int = 8
    same_tool_abort: int = 12
    same_tool_size_delta: int = 128


class Verdict(enum.StrEnum):
    """A person's answer about one tool call."""

    APPROVE = "approve"
    DENY = "deny"
    MODIFY = "modify"


@final
class Approval(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to :meth:`HumanInTheLoop.approve`: run it, refuse it (with a reason the
    model is told), or run it with other arguments."""

    verdict: Verdict = Verdict.APPROVE
    reason: str = ""
    arguments: dict[str, Any] | None = None


class Grant(enum.StrEnum):
    """A person's answer at the step limit or a breaker's abort."""

    ONCE = "once"  # one more step, or go on past this breaker once
    MORE = "more"  # ``more`` more steps, or the breaker's count starts again
    ALWAYS = "always"  # no step limit, or this breaker off for the run
    DENY = "deny"  # stop the run


class HumanInTheLoop(Protocol):
    """Approves tool calls and decides at limits. Every method may be async."""

    async def approve(self, call: ToolCall, arguments: dict[str, Any]) -> Approval: ...

    async def on_step_limit(self, steps: int, limit: int) -> tuple[Grant, int]: ...

    async def on_breaker(self, breaker: str, detail: str) -> Grant: ...


class NoHuman:
    """No one to ask: every call runs, and a limit or a breaker's abort ends the run."""

    async def approve(self, call: ToolCall, arguments: dict[str, Any]) -> Approval:
        return Approval()

    async def on_step_limit(self, steps: int, limit: int) -> tuple[Grant, int]:
        return Grant.DENY, 0

    async def on_breaker(self, breaker: str, detail: str) -> Grant:
        return Grant.DENY


class Events:
    """The loop's lifecycle, for a display or a log; every method does nothing by default,
    so a host overrides what it shows."""

    def step_start(self, step: int) -> None: ...

    def thought(self, step: int, content: str, reasoning: str) -> None: ...

    def assistant_done(self, step: int, content: str) -> None: ...

    def tool_call(self, step: int, call: ToolCall) -> None: ...

    def tool_result(self, step: int, call: ToolCall, observation: str, is_error: bool) -> None: ...

    def step_complete(self, step: int, seconds: float) -> None: ...

    def context_fill(self, check: FillCheck) -> None: ...

    def context_compaction(self, result: CompactionResult, reactive: bool) -> None: ...

    def diagnostic(self, name: str, detail: str) -> None: ...


NoEvents = Events


async def maybe_await(value: Any) -> Any:
    """``value``, awaited if it is awaitable: what a host's callback returned, whether the
    callback is sync or async."""
    return await value if inspect.isawaitable(value) else value
