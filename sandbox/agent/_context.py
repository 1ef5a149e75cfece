"""The context window: the prompt history, how full it is, and its compaction.

Theory of operation
-------------------

:class:`ContextWindow` keeps every :class:`~sandbox.agent.Step` the loop adds, and renders
the prompt from them on each :meth:`~ContextWindow.build_prompt` (seed 004, "ContextManager
interface")::

    system · user(task) · [compacted messages] · rendered steps added since

**Rendering.** Steps are taken in *units*: a standalone step, or the steps of one model
response (a shared non-zero ``response_group``). A unit with calls becomes one assistant
message (its thoughts, its calls) followed by one tool message per call, in call order,
answering the call's id; then each step's ``user_nudge`` as a user message. A step with
only a nudge that arrives between the steps of a group joins the group, its nudge after the
group's tool messages, so a response's calls are never split by it. A step without an
action is an assistant message with its thought (none when it has no thought). Every
assistant tool call therefore has its tool message right after it: the pairing the chat
APIs insist on, which :func:`check_pairing` verifies.

**Counting.** Each message costs its text's tokens plus a small overhead
(:data:`MESSAGE_OVERHEAD`, :data:`CALL_OVERHEAD`); counts are memoized per message. The
provider's count of a prompt (:meth:`~ContextWindow.correct_token_count`) anchors later
estimates: ``estimate(raw) = api + slope * (raw - raw_at_api)``, where the slope (1 at
first) is fitted by least squares over the last few reports once their prompt sizes differ
enough, and clamped to [0.5, 2]. Right after a report, the estimate of that prompt is the
provider's number exactly; the anchor absorbs the fixed overhead (tool schemas, chat
template) and the slope the tokenizer's difference from ours.

**Fill.** The window's capacity for the prompt is ``max_tokens`` less the room kept for
the answer: ``min(output_limit, max_tokens // 2)`` (a small test window with a large
output limit keeps half of itself). Fill is used / capacity, in percent; the status is
``ok`` below 70%, ``compact`` from 70%, ``warning`` from 85%, ``emergency`` from 95% and
``reject`` from 100% (all thresholds are arguments).

**Compaction.** :meth:`~ContextWindow.compact` hands *all* steps to the strategy with a
budget that brings the whole prompt to ``compact_target`` (50%) of capacity, well under the
compact threshold so that the next step does not compact again, and replaces the rendering
of those steps with what the strategy returns. Later steps render after it as before; the
next compaction again starts from every step, so a strategy is a pure function of the steps
and the budget. The default strategy, :class:`PruneObservations`, keeps the last steps
verbatim and stubs older results (their cache hash lets the model read them back).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Final, final

import msgspec

from ._types import (
    CompactionResult,
    CompactionStrategy,
    FillCheck,
    FillStatus,
    Message,
    Step,
    TokenCounter,
    ToolCall,
    VulnerableOutput,
    estimate_tokens,
)

__all__ = [
    "CALL_OVERHEAD",
    "DEFAULT_KEEP_LAST",
    "DEFAULT_MIN_PRUNE_CHARS",
    "MESSAGE_OVERHEAD",
    "ContextWindow",
    "PruneObservations",
    "check_pairing",
    "input_hint",
    "message_tokens",
    "render_steps",
]

#: Tokens a message costs beyond its text (role, separators): OpenAI's cookbook counts
#: three or four per message for its chat format.
MESSAGE_OVERHEAD: Final = 4
#: Tokens a tool call costs beyond its name and arguments (its id, type and wrapping).
CALL_OVERHEAD: Final = 4

#: Steps the default strategy keeps verbatim: about the last two or three responses, which
#: is what a model usually still refers to.
DEFAULT_KEEP_LAST: Final = 6
#: Observations no longer than this are never pruned: the stub would save nothing.
DEFAULT_MIN_PRUNE_CHARS: Final = 256

#: Sizes of an input hint and of a user message quoted in a summary.
_HINT_CHARS: Final = 60
_QUOTE_CHARS: Final = 160
#: How many earlier reports of the provider's count the slope is fitted over.
_SAMPLES: Final = 8

_NO_OUTPUT: Final = "(no output)"
_STUB_PREFIX: Final = "[pruned: "


def _count(counter: TokenCounter | None, text: str) -> int:
    if not text:
        return 0
    return counter.count(text) if counter is not None else estimate_tokens(text)


def message_tokens(message: Message, counter: TokenCounter | None = None) -> int:
    """A message's tokens as this module counts them: its content, reasoning and tool
    calls, plus the per-message and per-call overheads.

    Args:
        message: the message.
        counter: counts tokens (None: :func:`~sandbox.agent.estimate_tokens`).
    """
    n = MESSAGE_OVERHEAD + _count(counter, message.content) + _count(counter, message.reasoning)
    for call in message.tool_calls:
        n += CALL_OVERHEAD + _count(counter, call.name) + _count(counter, call.arguments)
    return n


def input_hint(arguments: str) -> str:
    """A short, human-readable summary of a call's arguments: the path, pattern, query,
    URL or command it names, else its first string value, else the text itself; at most
    60 characters."""
    hint = arguments
    try:
        parsed = msgspec.json.decode(arguments or "{}")
    except msgspec.DecodeError:
        parsed = None
    if isinstance(parsed, dict):
        keys = ("path", "file_path", "pattern", "query", "url", "command", "cmd", "name")
        values = [parsed[k] for k in keys if isinstance(parsed.get(k), str)]
        values += [v for v in parsed.values() if isinstance(v, str)]
        hint = values[0] if values else ""
    hint = " ".join(hint.split())
    return hint if len(hint) <= _HINT_CHARS else hint[: _HINT_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------
# Rendering


def _nudge_only(step: Step) -> bool:
    return step.action is None and not step.thought and not step.reasoning


def _units(steps: Sequence[Step]) -> list[list[Step]]:
    """Steps in rendering units: a response group (with nudge-only steps that come inside
    or right after it), or one standalone step."""
    units: list[list[Step]] = []
    group = 0  # the open unit's response group (0: none open)
    for step in steps:
        if units and group and (step.response_group == group or _nudge_only(step)):
            units[-1].append(step)
        else:
            units.append([step])
            group = step.response_group
    return units


def _calls(unit: Sequence[Step]) -> list[tuple[Step, ToolCall]]:
    """The unit's calls, each with an id unique in the unit (the model's, unless it is
    empty or repeated: then ``call_<step number>_<position>``)."""
    calls: list[tuple[Step, ToolCall]] = []
    seen: set[str] = set()
    for step in unit:
        if step.action is None:
            continue
        call = step.action
        if not call.id or call.id in seen:
            call = ToolCall(
                id=f"call_{step.number}_{len(calls)}", name=call.name, arguments=call.arguments
            )
        seen.add(call.id)
        calls.append((step, call))
    return calls


def _distinct(texts: Iterable[str]) -> str:
    return "\n\n".join(dict.fromkeys(t for t in texts if t))


def _render_unit(
    unit: Sequence[Step], observation: Callable[[Step], str], *, reasoning: bool = True
) -> list[Message]:
    calls = _calls(unit)
    out = _assistant(unit, calls, reasoning=reasoning)
    out.extend(
        Message(role="tool", content=observation(s) or _NO_OUTPUT, tool_call_id=c.id)
        for s, c in calls
    )
    out.extend(Message(role="user", content=s.user_nudge) for s in unit if s.user_nudge)
    return out


def _assistant(
    unit: Sequence[Step], calls: Sequence[tuple[Step, ToolCall]], *, reasoning: bool
) -> list[Message]:
    """The unit's assistant message: its distinct thoughts and reasoning, and its calls;
    none when it has none of them."""
    thought = _distinct(s.thought for s in unit)
    why = _distinct(s.reasoning for s in unit) if reasoning else ""
    if not (calls or thought or why):
        return []
    tool_calls = tuple(c for _, c in calls)
    return [Message(role="assistant", content=thought, tool_calls=tool_calls, reasoning=why)]


def _verbatim(step: Step) -> str:
    return step.observation


def render_steps(steps: Sequence[Step]) -> list[Message]:
    """The messages for ``steps``, verbatim, as the module docstring describes: a response
    group is one assistant message with its calls, then a tool message per call, then the
    steps' nudges as user messages."""
    return [m for unit in _units(steps) for m in _render_unit(unit, _verbatim)]


def check_pairing(messages: Sequence[Message]) -> None:
    """Check that every assistant tool call is answered by a tool message before the next
    non-tool message, and that every tool message answers one.

    Raises:
        ValueError: the first violation, described.
    """
    pending: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "tool":
            if m.tool_call_id not in pending:
                raise ValueError(f"message {i}: tool message for unknown call {m.tool_call_id!r}")
            pending.discard(m.tool_call_id)
            continue
        if pending:
            raise ValueError(f"message {i}: calls {sorted(pending)} have no tool message")
        if m.role == "assistant":
            ids = [c.id for c in m.tool_calls]
            if len(set(ids)) != len(ids):
                raise ValueError(f"message {i}: repeated call ids {ids}")
            pending = set(ids)
    if pending:
        raise ValueError(f"the last calls {sorted(pending)} have no tool message")


# --------------------------------------------------------------------------------------
# The default strategy


@final
class PruneObservations:
    """The default :class:`~sandbox.agent.CompactionStrategy`: prune old tool results.

    In order, stopping as soon as the messages fit ``budget_tokens``:

    1. Always: keep the last ``keep_last`` steps (those with an action or a thought,
       widened to whole responses) verbatim; in older steps replace each observation
       longer than ``min_chars`` by a one-line stub, ``[pruned: <tool> result, <n>
       chars; cache hash <hash> — read it with tool_result_read]`` (``not cached — run
       the tool again if you need it`` when there is no hash), and drop their reasoning.
    2. Replace the oldest older responses, as few as fit, with one user message: a
       paragraph saying which steps it stands for, which tools ran (with counts, failures
       and a few input hints) and the user messages among them.
    3. Last resort, when even that is too big: stub the kept steps' results too, oldest
       first, then summarize them, but never the last response.

    Every response is rendered whole or summarized whole, so the pairing of calls and tool
    messages holds whatever is dropped.

    Args:
        keep_last: steps kept verbatim.
        counter: counts tokens (None: :func:`~sandbox.agent.estimate_tokens`); use the
            context window's.
        min_chars: observations this short are left alone.

    Raises:
        ValueError: a negative argument.
    """

    def __init__(
        self,
        keep_last: int = DEFAULT_KEEP_LAST,
        *,
        counter: TokenCounter | None = None,
        min_chars: int = DEFAULT_MIN_PRUNE_CHARS,
    ) -> None:
        if keep_last < 0 or min_chars < 0:
            raise ValueError("keep_last and min_chars must be >= 0")
        self.keep_last = keep_last
        self.counter = counter
        self.min_chars = min_chars

    async def compact(self, steps: Sequence[Step], budget_tokens: int) -> list[Message]:
        """The :class:`~sandbox.agent.CompactionStrategy` entry point (see :meth:`prune`)."""
        return self.prune(steps, budget_tokens)

    def _tail_start(self, units: Sequence[Sequence[Step]]) -> int:
        """The index of the first unit kept verbatim."""
        kept = 0
        for i in range(len(units) - 1, -1, -1):
            if kept >= self.keep_last:
                return i + 1
            kept += sum(1 for s in units[i] if not _nudge_only(s))
        return 0

    def _prunable(self, step: Step) -> bool:
        return (
            step.action is not None
            and len(step.observation) > self.min_chars
            and not step.observation.startswith(_STUB_PREFIX)
        )

    def _stubbed(self, step: Step) -> str:
        if not self._prunable(step):
            return step.observation
        assert step.action is not None
        head = f"{_STUB_PREFIX}{step.action.name} result, {len(step.observation)} chars; "
        if step.cache_hash:
            return f"{head}cache hash {step.cache_hash} — read it with tool_result_read]"
        return f"{head}not cached — run the tool again if you need it]"

    def _pruned(self, unit: Sequence[Step]) -> list[Message]:
        return _render_unit(unit, self._stubbed, reasoning=False)

    def _cost(self, messages: Iterable[Message]) -> int:
        return sum(message_tokens(m, self.counter) for m in messages)

    def vulnerable(self, steps: Sequence[Step]) -> list[Step]:
        """The steps whose observations the next pruning will stub (step 1 above), oldest
        first."""
        units = _units(steps)
        older = units[: self._tail_start(units)]
        return [s for unit in older for s in unit if self._prunable(s)]

    def prune(self, steps: Sequence[Step], budget_tokens: int) -> list[Message]:
        """Compress ``steps`` into messages within ``budget_tokens`` where possible (the
        class docstring gives the order); the best effort otherwise."""
        units = _units(steps)
        t = self._tail_start(units)
        rendered = [self._pruned(u) for u in units[:t]] + [
            _render_unit(u, _verbatim) for u in units[t:]
        ]
        costs = [self._cost(r) for r in rendered]
        if sum(costs) <= budget_tokens:
            return _flat(rendered)
        for j in range(1, t + 1):  # step 2: summarize the oldest responses
            head = _summary_of(units, j)
            if self._cost(head) + sum(costs[j:]) <= budget_tokens:
                return head + _flat(rendered[j:])
        return self._last_resort(units, t, rendered, costs, budget_tokens)

    def _last_resort(
        self,
        units: Sequence[Sequence[Step]],
        t: int,
        rendered: list[list[Message]],
        costs: list[int],
        budget_tokens: int,
    ) -> list[Message]:
        """Step 3, with the older units (before ``t``) summarized: stub the kept results,
        oldest first, then summarize kept units too, but never the last."""
        head = _summary_of(units, t)
        for k in range(t, len(units) - 1):
            rendered[k] = self._pruned(units[k])
            costs[k] = self._cost(rendered[k])
            if self._cost(head) + sum(costs[t:]) <= budget_tokens:
                return head + _flat(rendered[t:])
        best = head + _flat(rendered[t:])
        for j in range(t + 1, len(units)):
            best = _summary_of(units, j) + _flat(rendered[j:])
            if self._cost(best) <= budget_tokens:
                break
        return best


def _flat(rendered: Iterable[list[Message]]) -> list[Message]:
    return [m for r in rendered for m in r]


def _summary_of(units: Sequence[Sequence[Step]], j: int) -> list[Message]:
    """The summary of the first ``j`` units (none for none)."""
    return [_summary([s for u in units[:j] for s in u])] if j else []


def _summary(steps: Sequence[Step]) -> Message:
    """One user message standing for ``steps``: the tools they ran and the user messages
    among them."""
    numbers = [s.number for s in steps if s.number > 0]
    span = f"steps {min(numbers)}-{max(numbers)}" if numbers else f"{len(steps)} steps"
    parts = _tools_ran(steps)
    text = f"[Context compacted: {span} were summarized to save space. "
    text += f"Tools that ran: {', '.join(parts)}. " if parts else "No tools ran. "
    text += _users_said(steps)
    text += "Their thoughts and results were dropped; run a tool again if you need its result.]"
    return Message(role="user", content=text)


def _tools_ran(steps: Sequence[Step]) -> list[str]:
    """Each tool that ran among ``steps``, in the order of first use: ``name (n calls;
    a few input hints; failures)``."""
    runs: dict[str, list[ToolCall]] = {}
    failures: collections.Counter[str] = collections.Counter()
    for s in steps:
        if s.action is not None:
            runs.setdefault(s.action.name, []).append(s.action)
            failures[s.action.name] += s.is_error
    parts: list[str] = []
    for name, calls in runs.items():
        distinct = list(dict.fromkeys(h for c in calls if (h := input_hint(c.arguments))))
        detail = [f"{len(calls)} call" + ("s" if len(calls) > 1 else "")]
        if distinct:
            detail.append(", ".join(distinct[:3]) + (", …" if len(distinct) > 3 else ""))
        if failures[name]:
            detail.append(f"{failures[name]} failed")
        parts.append(f"{name} ({'; '.join(detail)})")
    return parts


def _users_said(steps: Sequence[Step]) -> str:
    """The user messages among ``steps``: how many, and the last three, quoted short."""
    said = [" ".join(s.user_nudge.split()) for s in steps if s.user_nudge]
    if not said:
        return ""
    quoted = "; ".join(f"«{_clip(q, _QUOTE_CHARS)}»" for q in said[-3:])
    return f"User messages among them ({len(said)}), the last ones: {quoted}. "


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# --------------------------------------------------------------------------------------
# The window


class ContextWindow:
    """The loop's :class:`~sandbox.agent.parts.ContextManager` (see the module docstring).

    Args:
        system: the system message ("" for none).
        task: the first user message.
        max_tokens: the model's context window, in tokens.
        output_limit: the most tokens the model may write in one answer.
        counter: counts tokens (None: :func:`~sandbox.agent.estimate_tokens`).
        strategy: how to compact (None: :class:`PruneObservations` with ``counter``).
        compact_at: fill (a fraction of capacity) from which the status is ``compact``.
        warning_at: from which it is ``warning``.
        emergency_at: from which it is ``emergency``.
        reject_at: from which it is ``reject``.
        compact_target: the fill a compaction aims for.

    Raises:
        ValueError: ``max_tokens`` not positive, ``output_limit`` negative, or thresholds
            not in the order ``0 < compact_target < compact_at <= warning_at <=
            emergency_at <= reject_at``.
    """

    def __init__(
        self,
        system: str,
        task: str,
        max_tokens: int,
        output_limit: int = 4096,
        counter: TokenCounter | None = None,
        *,
        strategy: CompactionStrategy | None = None,
        compact_at: float = 0.70,
        warning_at: float = 0.85,
        emergency_at: float = 0.95,
        reject_at: float = 1.00,
        compact_target: float = 0.50,
    ) -> None:
        if max_tokens <= 0 or output_limit < 0:
            raise ValueError("max_tokens must be positive and output_limit >= 0")
        if not 0 < compact_target < compact_at <= warning_at <= emergency_at <= reject_at:
            raise ValueError("thresholds out of order")
        self._system = system
        self._task = task
        self._max_tokens = max_tokens
        self._output_limit = output_limit
        self._capacity = max_tokens - min(output_limit, max_tokens // 2)
        self._counter = counter
        self._strategy: CompactionStrategy = strategy or PruneObservations(counter=counter)
        self._thresholds = (
            (reject_at, FillStatus.REJECT),
            (emergency_at, FillStatus.EMERGENCY),
            (warning_at, FillStatus.WARNING),
            (compact_at, FillStatus.COMPACT),
        )
        self._compact_target = compact_target
        self._steps: list[Step] = []
        self._compacted: list[Message] = []
        self._compacted_upto = 0
        self._counts: dict[Message, int] = {}
        self._samples: collections.deque[tuple[int, int]] = collections.deque(maxlen=_SAMPLES)
        self._slope = 1.0
        self._last_prompt_raw: int | None = None

    # -- history --

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step added or seeded, oldest first (compacted ones included)."""
        return tuple(self._steps)

    def add_step(self, step: Step) -> None:
        """Record a step. The window renders it afresh on every prompt, so a change the
        loop makes to it later (an observation appended to) shows."""
        self._steps.append(step)

    def seed_steps(self, steps: Iterable[Step]) -> None:
        """Start from a resumed trajectory: ``steps`` replace the history, uncompacted."""
        self._steps = list(steps)
        self._compacted = []
        self._compacted_upto = 0

    def set_strategy(self, strategy: CompactionStrategy) -> None:
        """Use ``strategy`` for the next compactions."""
        self._strategy = strategy

    def _head(self) -> list[Message]:
        head = [Message(role="system", content=self._system)] if self._system else []
        head.append(Message(role="user", content=self._task))
        return head

    def _messages(self) -> list[Message]:
        return self._head() + self._compacted + render_steps(self._steps[self._compacted_upto :])

    def build_prompt(self) -> list[Message]:
        """The messages for the next model call (see the module docstring)."""
        messages = self._messages()
        self._last_prompt_raw = self._raw(messages)
        return messages

    # -- counting --

    def _raw(self, messages: Iterable[Message]) -> int:
        """Our own count of ``messages``, memoized per message (only the current ones are
        kept)."""
        counts: dict[Message, int] = {}
        total = 0
        for m in messages:
            n = counts.get(m)
            if n is None:
                n = self._counts.get(m)
                if n is None:
                    n = message_tokens(m, self._counter)
                counts[m] = n
            total += n
        self._counts = counts
        return total

    def _estimate(self, raw: int) -> int:
        if not self._samples:
            return raw
        raw_at, api = self._samples[-1]
        return max(0, round(api + self._slope * (raw - raw_at)))

    def _raw_for(self, tokens: float) -> float:
        """The inverse of :meth:`_estimate`: our count that estimates to ``tokens``."""
        if not self._samples:
            return tokens
        raw_at, api = self._samples[-1]
        return raw_at + (tokens - api) / self._slope

    def correct_token_count(self, api_input_tokens: int) -> None:
        """Reconcile with the provider's count of the last prompt built (see the module
        docstring); a non-positive count is ignored."""
        if api_input_tokens <= 0:
            return
        raw = self._last_prompt_raw
        if raw is None:
            raw = self._raw(self._messages())
        if raw <= 0:
            return
        self._samples.append((raw, api_input_tokens))
        xs = [x for x, _ in self._samples]
        if max(xs) - min(xs) >= 0.2 * max(xs):
            ys = [y for _, y in self._samples]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            var = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
            self._slope = min(2.0, max(0.5, slope))

    def _used(self) -> int:
        return self._estimate(self._raw(self._messages()))

    def check_fill(self) -> FillCheck:
        """The fill: percent of capacity, status, tokens used and capacity."""
        used = self._used()
        fraction = used / self._capacity
        status = next((s for at, s in self._thresholds if fraction >= at), FillStatus.OK)
        return FillCheck(percent=100 * fraction, status=status, used=used, max=self._capacity)

    def fill_percent(self) -> float:
        """How full the window is, in percent of its capacity for the prompt."""
        return 100 * self._used() / self._capacity

    def available_tokens(self) -> int:
        """The tokens the prompt may still grow by (never negative)."""
        return max(0, self._capacity - self._used())

    def output_limit(self) -> int:
        """The most tokens the model may write in one answer."""
        return self._output_limit

    # -- compaction --

    async def compact(self) -> CompactionResult:
        """Compact every step so far with the strategy, aiming at ``compact_target``.

        Raises:
            ValueError: the strategy's messages break the call/tool-message pairing (the
                history is left as it was).
        """
        before = self.fill_percent()
        steps = list(self._steps)
        if not steps:
            return CompactionResult(before_percent=before, after_percent=before)
        target = self._raw_for(self._compact_target * self._capacity)
        head = sum(message_tokens(m, self._counter) for m in self._head())
        budget = max(0, math.floor(target) - head)
        messages = list(await self._strategy.compact(steps, budget))
        check_pairing(messages)
        self._compacted = messages
        self._compacted_upto = len(steps)
        return CompactionResult(before_percent=before, after_percent=self.fill_percent())

    def vulnerable_outputs(self) -> list[VulnerableOutput]:
        """The results the next pruning will drop that the prompt still shows whole,
        oldest first, each with a hint of its input (path, pattern, …). Foreign strategies
        are assumed to prune as :class:`PruneObservations` does."""
        strategy = self._strategy
        if not isinstance(strategy, PruneObservations):
            strategy = PruneObservations(counter=self._counter)
        whole = self._shown_whole()
        return [
            VulnerableOutput(tool_name=s.action.name, input_hint=input_hint(s.action.arguments))
            for s in strategy.vulnerable(self._steps)
            if s.action is not None and id(s) in whole
        ]

    def _shown_whole(self) -> set[int]:
        """The ids of the steps whose results the prompt shows whole: every step since the
        compaction, and a compacted one whose exact tool message the compaction kept."""
        shown = {(m.tool_call_id, m.content) for m in self._compacted if m.role == "tool"}
        whole = {
            id(s)
            for unit in _units(self._steps[: self._compacted_upto])
            for s, c in _calls(unit)
            if (c.id, s.observation or _NO_OUTPUT) in shown
        }
        whole.update(id(s) for s in self._steps[self._compacted_upto :])
        return whole
