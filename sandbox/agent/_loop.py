"""The agent loop (ReAct): think, act, observe, until the model finishes or a limit ends it.

:class:`Agent` is the loop; the execution plane's ``Executor`` is another thing (what runs a
tool call). Each iteration, in this order (the seed's lifecycle):

1. the trajectory store is synced;
2. at the step limit, the human in the loop may grant more steps;
3. ``step_start``, then cancellation is checked (it beats a pause);
4. the pause checker: a pause returns :class:`Paused` with the resumable trajectory and
   drains no live message;
5. one live user message, if the source has one, becomes the last user message of this
   request (recorded as a nudge-only step: delivered exactly once);
6. the model is called; a context overflow compacts and retries once, and a pending
   interjection is consumed only after a successful response;
7. ``thought``; a response with no tool calls is nudged toward finish, and after the
   nudges taken as an implicit finish, which passes the finish gates as a finish call
   does;
8. a response cut at max tokens that holds tool calls runs none of them: a nudge, and the
   max-tokens breaker;
9. each call: a finish passes the finish gates; any other call is run by the actor
   (approved by the human in the loop, run, truncated in two stages with the result cache
   and ``tool_result_read``, wrapped when untrusted); a successful edit schedules one
   verification at the end of the response; then the per-call breakers see the calls;
10. ``step_complete``; then the context's fill is checked and compacted when needed.

The run itself (:class:`_Run`) keeps only this lifecycle and the run's steps. What it asks
along the way are objects of their own, each with one narrow method: the finish gates
(:mod:`~sandbox.agent._gates`), the breakers (:mod:`~sandbox.agent._breakers`), the actor
that runs one call (:mod:`~sandbox.agent._acting`), and verification
(:mod:`~sandbox.agent._verify`). A breaker's or a gate's abort comes back here: the human
in the loop decides whether the run goes on.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, final

import anyio
import anyio.lowlevel

from ._acting import Actor, parse_arguments
from ._breakers import Abort, BadArguments, CallBreakers, MaxTokens, Nudge, Seen
from ._cache import ResultCache
from ._gates import CHECKLIST, ChecklistGate, FinishGate, FinishGuard, MutationGate
from ._hooks import Breakers, Events, Grant, HumanInTheLoop, NoHuman, maybe_await
from ._readback import READ_TOOL_NAME, ToolResultRead
from ._tools import FINISH, ToolExecutor, finish_spec
from ._truncation import ResultBudget, TruncationConfig, default_truncation
from ._types import (
    AgentResult,
    ChatRequest,
    ChatResponse,
    ContextManager,
    ContextOverflow,
    FillCheck,
    FillStatus,
    ModelCaller,
    Paused,
    Step,
    StopReason,
    TokenCounter,
    ToolCall,
    ToolSpec,
)
from ._verify import DEFAULT_VERIFY_CAP, EDIT_TOOLS, Verifier, VerifyResult

__all__ = ["Agent", "TrajectoryStore"]

NUDGE_FINISH: Final = (
    "You answered without calling a tool. If the task is done, call the finish tool with "
    "your answer; otherwise call the tool you need."
)
NUDGE_TEXT_CALL: Final = (
    "You wrote a tool call as text; it did not run. Call tools through the tool-calling "
    "interface, not in your message."
)
NUDGE_TRUNCATED: Final = (
    "Your response was cut off at the output limit, so none of its tool calls ran. Make "
    "fewer or smaller calls (split large content)."
)

_TEXT_CALL: Final = re.compile(
    r"<tool_call>|\"(?:name|function)\"\s*:\s*\"[^\"]+\"\s*,\s*\"(?:arguments|parameters)\""
    r"|^\s*(?:finish|[a-z_]+)\(\s*[a-z_]+\s*=",
    re.IGNORECASE | re.MULTILINE,
)
#: Fill statuses at which the context is compacted after a step.
_COMPACT: Final = (FillStatus.COMPACT, FillStatus.WARNING, FillStatus.EMERGENCY, FillStatus.REJECT)
#: The loop's own tools, which the per-call breakers do not count.
_UNCOUNTED: Final = (FINISH, READ_TOOL_NAME, CHECKLIST)


class TrajectoryStore:
    """Holds the run's steps for tools that read them (a reflector); synced every step."""

    def __init__(self) -> None:
        self._steps: list[Step] = []

    def sync(self, steps: Sequence[Step]) -> None:
        self._steps = list(steps)

    def steps(self) -> list[Step]:
        return list(self._steps)


@final
class Agent:
    """The ReAct loop over ``model`` and ``tools``, for at most ``max_steps`` iterations.

    Not for concurrent use: one :meth:`run` at a time (make one Agent per concurrent run).

    Args:
        model: the model caller (:class:`~sandbox.agent.OpenAICaller`, or a decorator).
        tools: runs the tool calls (:class:`~sandbox.agent.PlaneTools`).
        max_steps: the step budget; resumed steps count against it.
        counter: counts tokens (for the result budget); default: an estimate.
        events: lifecycle events; default: none.
        suppress_assistant_events: no ``assistant_done`` events (for nested runs).
        result_budget: stage 2 of truncation (default 30000 tokens, 0.4 of the context).
        truncation: stage 1, per tool (default :func:`default_truncation`).
        cache: the tool-result cache (default: one per Agent, 5 minute TTL for remote
            results); ``tool_result_read`` is offered with it.
        breakers: loop-protection thresholds (default :class:`Breakers`).
        human: the human in the loop (default: none; limits end the run).
        resume: steps to resume from (the context must be seeded with them too); the step
            counter starts after them.
        pause: checked at each step boundary; True pauses the run.
        messages: polled at each step boundary for one live user message ("" for none).
        finish_guard: returns an error message to refuse a finish once (a soft gate: the
            second attempt is accepted).
        mutation_required: refuse finish until a mutating tool has succeeded.
        checklist_gate: nudge toward a current checklist when ``update_checklist`` is
            offered.
        verify: the host's verification, run once after a response with a successful
            edit; its command comes from the host's configuration, never from the model.
        verify_cap: characters of verification output kept (0 or less: 4000).
        pre_warning_percent: context fill at which the model is warned of what the next
            pruning drops (0: never).
        text_only_nudges: text-only responses nudged before one is taken as the answer.
        reasoning_effort: passed to the model, when set.
        trajectory: synced with the steps at every iteration.
    """

    def __init__(
        self,
        model: ModelCaller,
        tools: ToolExecutor,
        max_steps: int,
        *,
        counter: TokenCounter | None = None,
        events: Events | None = None,
        suppress_assistant_events: bool = False,
        result_budget: ResultBudget | None = None,
        truncation: dict[str, TruncationConfig] | None = None,
        cache: ResultCache | None = None,
        breakers: Breakers | None = None,
        human: HumanInTheLoop | None = None,
        resume: Sequence[Step] = (),
        pause: Callable[[], bool | Awaitable[bool]] | None = None,
        messages: Callable[[], str | Awaitable[str]] | None = None,
        finish_guard: Callable[[], str | Awaitable[str | None] | None] | None = None,
        mutation_required: bool = False,
        checklist_gate: bool = True,
        verify: Callable[[], Awaitable[VerifyResult]] | None = None,
        verify_cap: int = DEFAULT_VERIFY_CAP,
        pre_warning_percent: int = 0,
        text_only_nudges: int = 2,
        reasoning_effort: str | None = None,
        trajectory: TrajectoryStore | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.model = model
        self.tools = tools
        self.max_steps = max_steps
        self.counter = counter
        self.events = events or Events()
        self.suppress_assistant_events = suppress_assistant_events
        self.result_budget = result_budget or ResultBudget()
        self.truncation = dict(truncation) if truncation is not None else default_truncation()
        self.cache = cache if cache is not None else ResultCache()
        self.breakers = breakers or Breakers()
        self.human: HumanInTheLoop = human or NoHuman()
        self.resume = list(resume)
        self.pause = pause
        self.messages = messages
        self.finish_guard = finish_guard
        self.mutation_required = mutation_required
        self.checklist_gate = checklist_gate
        self.verify = verify
        self.verify_cap = verify_cap if verify_cap > 0 else DEFAULT_VERIFY_CAP
        self.pre_warning_percent = pre_warning_percent
        self.text_only_nudges = text_only_nudges
        self.reasoning_effort = reasoning_effort
        self.trajectory = trajectory
        self._reader = ToolResultRead(self.cache, self.truncation)

    async def run(self, tools: Sequence[ToolSpec], context: ContextManager) -> AgentResult:
        """Run the loop until finish, a limit or a breaker (see the module docstring).

        Returns:
            The result: ``finished`` when the model's finish was accepted; otherwise
            ``output`` says what ended it.

        Raises:
            Paused: the pause checker said so; ``Paused.result.steps`` resumes the run.
            ModelError: the model could not be called (a context overflow that compaction
                did not cure among them).
        """
        return await _Run(self, tools, context).run()


class _Stop(Exception):
    """Ends the run unfinished, with the reason as its output."""


@final
class _Run:
    """One run's lifecycle (see the module docstring): its steps, and the gates, breakers
    and actor it asks."""

    def __init__(self, agent: Agent, tools: Sequence[ToolSpec], context: ContextManager) -> None:
        self.a = agent
        self.context = context
        offered = list(tools)
        if not any(t.name == FINISH for t in offered):
            offered.append(finish_spec())
        if not any(t.name == READ_TOOL_NAME for t in offered):
            offered.append(agent._reader.definition())
        self.offered = tuple(offered)
        names = frozenset(t.name for t in offered)
        self.steps: list[Step] = list(agent.resume)
        self.step_num = len(self.steps) + 1
        self.limit = agent.max_steps
        self.unlimited = False
        self.group = max((s.response_group for s in self.steps), default=0)
        self.text_only = 0
        self.warned_fill = False
        self.breakers = CallBreakers(agent.breakers)
        self.max_tokens = MaxTokens(agent.breakers.truncation_abort)
        self.mutation = MutationGate(agent.mutation_required)
        self.checklist = ChecklistGate(agent.checklist_gate and CHECKLIST in names, agent.events)
        self.gates: tuple[FinishGate, ...] = (
            FinishGuard(agent.finish_guard),
            self.mutation,
            self.checklist,
        )
        self.verifier = Verifier(agent.verify, agent.verify_cap, agent.events)
        bad_arguments = BadArguments(agent.breakers.parse_error_abort)
        self.actor = Actor(agent, context, names, agent._reader, bad_arguments, self._abort)

    # -- the loop --

    async def run(self) -> AgentResult:
        try:
            while True:
                await self._boundary()
                started = time.perf_counter()
                response = await self._call_model()
                done = await self._handle(response)
                self.a.events.step_complete(self.step_num, time.perf_counter() - started)
                if done is not None:
                    return done
                await self._manage_context()
                self.step_num += 1
        except _Stop as stop:
            return self._result(str(stop), finished=False)

    async def _boundary(self) -> None:
        """The step boundary (steps 1 to 5): sync, step limit, pause, live message."""
        if self.a.trajectory is not None:
            self.a.trajectory.sync(self.steps)
        if not self.unlimited and self.step_num > self.limit:
            await self._at_step_limit()
        self.a.events.step_start(self.step_num)
        await anyio.lowlevel.checkpoint()  # cancellation beats a pause
        if self.a.pause is not None and await maybe_await(self.a.pause()):
            raise Paused(self._result("paused", finished=False))
        if self.a.messages is not None:
            message = await maybe_await(self.a.messages())
            if message:
                self._record(Step(number=self.step_num, user_nudge=message))
                self.a.events.diagnostic("live_user_message", message)

    def _result(self, output: str, *, finished: bool) -> AgentResult:
        if self.a.trajectory is not None:
            self.a.trajectory.sync(self.steps)
        return AgentResult(output=output, steps=list(self.steps), finished=finished)

    def _record(self, step: Step) -> None:
        self.steps.append(step)
        self.context.add_step(step)

    async def _at_step_limit(self) -> None:
        grant, more = await maybe_await(self.a.human.on_step_limit(len(self.steps), self.limit))
        grant = Grant(grant)
        if grant is Grant.DENY:
            raise _Stop(f"the step limit ({self.limit}) was reached")
        if grant is Grant.ALWAYS:
            self.unlimited = True
        else:
            self.limit = self.step_num - 1 + (max(1, more) if grant is Grant.MORE else 1)

    async def _abort(self, abort: Abort) -> None:
        """A breaker's or a gate's abort: the human may let the run go on.

        Raises:
            _Stop: the person denied it.
        """
        name, detail = abort.counter.name, abort.detail
        self.a.events.diagnostic(f"breaker_{name}", detail)
        grant = Grant(await maybe_await(self.a.human.on_breaker(name, detail)))
        if grant is Grant.DENY:
            raise _Stop(f"circuit breaker {name}: {detail}")
        abort.counter.allow(grant)

    async def _call_model(self) -> ChatResponse:
        request = self._request()
        try:
            response = await self.a.model.call(request)
        except ContextOverflow:
            result = await self.context.compact()
            self.a.events.context_compaction(result, True)
            response = await self.a.model.call(self._request())  # once; a second overflow raises
        consume = getattr(self.context, "consume_interjection", None)
        if callable(consume):
            consume()  # only now: a retry after an overflow still carried it
        if response.usage.input_tokens:
            self.context.correct_token_count(response.usage.input_tokens)
        return response

    def _request(self) -> ChatRequest:
        return ChatRequest(
            messages=tuple(self.context.build_prompt()),
            tools=self.offered,
            max_tokens=self.context.output_limit() or None,
            reasoning_effort=self.a.reasoning_effort,
        )

    # -- one response --

    async def _handle(self, response: ChatResponse) -> AgentResult | None:
        """One response (steps 7 to 9); the result when the run ends with it."""
        self.a.events.thought(self.step_num, response.content, response.reasoning)
        if not self.a.suppress_assistant_events:
            self.a.events.assistant_done(self.step_num, response.content)
        if not response.tool_calls:
            return await self._text_only(response)
        self.text_only = 0
        if response.stop_reason is StopReason.MAX_TOKENS:
            self._record(
                Step(
                    number=self.step_num,
                    thought=response.content,
                    reasoning=response.reasoning,
                    tokens_used=response.usage.total_tokens,
                    user_nudge=NUDGE_TRUNCATED,
                )
            )
            abort = self.max_tokens.check(cut=True)
            if abort is not None:
                await self._abort(abort)
            return None
        self.max_tokens.check(cut=False)
        return await self._calls(response)

    async def _text_only(self, response: ChatResponse) -> AgentResult | None:
        """A response without tool calls: a nudge, or past the nudges the answer (an
        implicit finish, through the finish gates)."""
        self.text_only += 1
        step = Step(
            number=self.step_num,
            thought=response.content,
            reasoning=response.reasoning,
            tokens_used=response.usage.total_tokens,
        )
        if self.text_only > self.a.text_only_nudges and response.content.strip():
            refusal = await self._finish_refusal()
            if refusal is None:
                self._record(step)
                self.a.events.diagnostic("implicit_finish", response.content[:200])
                return self._result(response.content, finished=True)
            step.user_nudge = refusal
        elif _TEXT_CALL.search(response.content):
            step.user_nudge = NUDGE_TEXT_CALL
        else:
            step.user_nudge = NUDGE_FINISH
        self._record(step)
        return None

    async def _calls(self, response: ChatResponse) -> AgentResult | None:
        """The response's calls as one response group; then verification and the
        breakers, unless a finish was accepted."""
        self.group += 1
        group: list[Step] = []
        sizes: list[int] = []
        calls = [c for c in response.tool_calls if c.name not in (FINISH, READ_TOOL_NAME)]
        with self.a.tools.batch(calls):
            answer, edited = await self._run_calls(response, group, sizes)
        if edited and answer is None:
            await self.verifier.after(group)
        for step in group:
            self._record(step)
        if answer is not None:
            return self._result(answer, finished=True)
        await self._check_breakers(group, sizes)
        return None

    async def _run_calls(
        self, response: ChatResponse, group: list[Step], sizes: list[int]
    ) -> tuple[str | None, bool]:
        """Each call into a step of ``group`` (with its raw result's size in ``sizes``),
        until a finish is accepted; that finish's answer, and whether an edit succeeded."""
        edited = False
        for i, call in enumerate(response.tool_calls):
            step = _call_step(response, i, self.step_num, self.group)
            group.append(step)
            self.a.events.tool_call(self.step_num, call)
            if call.name == FINISH:
                sizes.append(0)  # the breakers do not count finish
                answer = await self._finish(step, call, group, edited)
                if answer is not None:
                    return answer, edited
                continue
            size, ok_edit = await self._act(step, call)
            sizes.append(size)
            edited |= ok_edit
            self.a.events.tool_result(self.step_num, call, step.observation, step.is_error)
            nudge = self.checklist.stale()
            if nudge is not None:
                step.user_nudge = nudge
        return None, edited

    async def _act(self, step: Step, call: ToolCall) -> tuple[int, bool]:
        """Run one call; its raw result's size, and whether it was a successful edit.
        The gates take in what ran."""
        acted = await self.actor.act(step, call)
        outcome = acted.ran
        if outcome is None:
            return acted.size, False
        step.observation += self.checklist.observe(
            call.name, acted.arguments, failed=outcome.is_error
        )
        if not outcome.is_error and self.a.tools.is_mutating(call.name):
            self.mutation.changed()
        return acted.size, not outcome.is_error and call.name in EDIT_TOOLS

    # -- finishing --

    async def _finish(
        self, step: Step, call: ToolCall, group: list[Step], edited: bool
    ) -> str | None:
        """A finish call: its answer when accepted; else None, with why in ``step``."""
        arguments = parse_arguments(call.arguments)
        answer = arguments.get("answer") if isinstance(arguments, dict) else None
        if not isinstance(answer, str):
            step.observation = 'finish takes {"answer": "<the final answer>"}'
            step.is_error = True
            return None
        if edited:
            await self.verifier.after(group[:-1])  # a finish never skips a pending verification
        refusal = await self._finish_refusal()
        if refusal is not None:
            step.observation = f"finish refused: {refusal}"
            step.is_error = True
            self.a.events.diagnostic("finish_refused", refusal)
            return None
        step.observation = "finished"
        return answer

    async def _finish_refusal(self) -> str | None:
        """Why finish is refused now, or None: the gates in order, until one refuses (an
        abort the person lets go on refuses nothing)."""
        for gate in self.gates:
            trip = await gate.check()
            if isinstance(trip, Nudge):
                return trip.text
            if trip is not None:
                await self._abort(trip)
        return None

    # -- breakers --

    async def _check_breakers(self, group: Sequence[Step], sizes: Sequence[int]) -> None:
        """The per-call breakers, over the response's calls in order: aborts go to the
        person, nudges after the call's step."""
        for step, size in zip(group, sizes, strict=True):
            call = step.action
            if call is None or call.name in _UNCOUNTED:
                continue
            nudges: list[str] = []
            for trip in self.breakers.check(Seen.of(call, size)):
                if isinstance(trip, Abort):
                    await self._abort(trip)
                else:
                    nudges.append(trip.text)
            if not nudges:
                continue
            extra = "\n".join(nudges)
            step.user_nudge = f"{step.user_nudge}\n{extra}".strip()
            # the step is already in the context: the nudge goes in as its own
            self.context.add_step(Step(number=step.number, user_nudge=extra))
            self.steps.append(Step(number=step.number, user_nudge=extra))
            self.a.events.diagnostic("breaker_nudge", extra)

    # -- the context --

    async def _manage_context(self) -> None:
        check = self.context.check_fill()
        self.a.events.context_fill(check)
        self._warn_of_pruning(check)
        if check.status in _COMPACT:
            result = await self.context.compact()
            self.a.events.context_compaction(result, False)
            self.warned_fill = False
            if self.context.check_fill().status is FillStatus.REJECT:
                raise _Stop("the context is full even after compaction")

    def _warn_of_pruning(self, check: FillCheck) -> None:
        """Past ``pre_warning_percent``, tell the model once which results the next
        pruning drops (when there are some), so that it keeps what it needs."""
        percent = self.a.pre_warning_percent
        if not (percent and check.percent >= percent and not self.warned_fill):
            return
        outputs = self.context.vulnerable_outputs()
        if not outputs:
            return
        self.warned_fill = True
        listed = "; ".join(f"{o.tool_name} ({o.input_hint})" for o in outputs[:10])
        self._record(
            Step(
                number=self.step_num,
                user_nudge=(
                    f"The context is {check.percent:.0f}% full. These results will be "
                    f"pruned soon: {listed}. Keep what you need of them."
                ),
            )
        )


def _call_step(response: ChatResponse, i: int, number: int, group: int) -> Step:
    """The step of the response's ``i``-th call; the first carries the response's thought,
    reasoning and tokens."""
    first = i == 0
    return Step(
        number=number,
        thought=response.content if first else "",
        reasoning=response.reasoning if first else "",
        action=response.tool_calls[i],
        tokens_used=response.usage.total_tokens if first else 0,
        response_group=group,
    )
