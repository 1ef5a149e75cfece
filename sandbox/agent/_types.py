"""The agent loop's vocabulary: messages, model requests and responses, steps, results.

Plain data (msgspec structs), so that a trajectory is written as JSONL and read back to
resume exactly as it was.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol, final, runtime_checkable

import msgspec

__all__ = [
    "AgentResult",
    "ChatRequest",
    "ChatResponse",
    "CompactionResult",
    "ContextManager",
    "ContextOverflow",
    "FillCheck",
    "FillStatus",
    "Message",
    "ModelCaller",
    "ModelError",
    "Paused",
    "Step",
    "StopReason",
    "TokenCounter",
    "ToolCall",
    "ToolOutcome",
    "ToolSpec",
    "Usage",
    "VulnerableOutput",
    "CompactionStrategy",
    "estimate_tokens",
]


@final
class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call as the model wrote it.

    Attributes:
        id: the model's id for the call (answered by the tool message that carries it).
        name: the tool's name.
        arguments: the arguments as the model wrote them: JSON text, possibly malformed.
    """

    id: str
    name: str
    arguments: str = "{}"


@final
class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One chat message, in the OpenAI chat shape.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: its text.
        tool_calls: an assistant message's tool calls.
        tool_call_id: a tool message's call id.
        reasoning: an assistant message's reasoning text, where the provider sends one.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    reasoning: str = ""


@final
class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the model is offered it (a function with a JSON schema)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )


@final
class ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One request to the model.

    Attributes:
        messages: the conversation, oldest first.
        tools: the tools offered.
        max_tokens: the most the model may write (None: the caller's default).
        reasoning_effort: for reasoning models (``low``, ``medium``, ``high``), if set.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int | None = None
    reasoning_effort: str | None = None


class StopReason(enum.StrEnum):
    """Why the model stopped writing."""

    STOP = "stop"
    TOOL_CALLS = "tool_calls"
    MAX_TOKENS = "max_tokens"
    CONTENT_FILTER = "content_filter"
    OTHER = "other"


@final
class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens, as the provider counted them (0 where it did not say)."""

    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@final
class ChatResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The model's answer to one request.

    Attributes:
        content: its text.
        tool_calls: the calls it asked for, in order.
        stop_reason: why it stopped.
        usage: tokens used.
        reasoning: reasoning text, where the provider sends it (``reasoning_content``).
        model: the model that answered, as the provider named it.
    """

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_reason: StopReason = StopReason.STOP
    usage: Usage = Usage()
    reasoning: str = ""
    model: str = ""


class ModelError(Exception):
    """The model could not be called (after the retries a caller makes)."""


class ContextOverflow(ModelError):
    """The provider refused the request: the prompt does not fit the model's context."""


@runtime_checkable
class ModelCaller(Protocol):
    """Sends a chat request to a model. Raises :class:`ContextOverflow` when the provider
    says the prompt is too long, :class:`ModelError` for any other failure."""

    async def call(self, request: ChatRequest) -> ChatResponse: ...


@final
class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What running one tool call gave, before any truncation.

    Attributes:
        text: the result as text.
        is_error: the call failed (the text says why).
        parse_error: the arguments were not valid JSON, or not what the tool takes.
    """

    text: str
    is_error: bool = False
    parse_error: bool = False


@final
class Step(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One iteration of the loop: a thought and at most one action with its observation.

    A response with several tool calls is several steps sharing one ``response_group``
    (non-zero), rendered back as one assistant message with several calls.

    Attributes:
        number: the step's number, from 1, as the loop counted it.
        thought: the model's text.
        reasoning: its reasoning text.
        action: the tool call, if there was one.
        observation: the tool result as the model sees it (truncated, wrapped).
        is_error: the tool call failed.
        tokens_used: the tokens of this step's model call.
        user_nudge: a user message recorded after the step (a nudge, a live message).
        response_group: links the steps of one response (0: alone).
        is_untrusted: the observation came from an untrusted source and is wrapped.
        cache_hash: the full result's key in the result cache, when it was cached.
    """

    number: int = 0
    thought: str = ""
    reasoning: str = ""
    action: ToolCall | None = None
    observation: str = ""
    is_error: bool = False
    tokens_used: int = 0
    user_nudge: str = ""
    response_group: int = 0
    is_untrusted: bool = False
    cache_hash: str = ""


@final
class AgentResult(msgspec.Struct, kw_only=True):
    """How a run ended.

    Attributes:
        output: the finish tool's answer; when not finished, why (a breaker, the step
            limit, a denial).
        steps: every step, resumed ones included.
        finished: the model called finish and it was accepted.
    """

    output: str
    steps: list[Step]
    finished: bool


class Paused(Exception):
    """The pause checker asked the run to stop at a step boundary.

    Attributes:
        result: the trajectory so far (``finished`` false): resume from ``result.steps``.
    """

    def __init__(self, result: AgentResult) -> None:
        super().__init__(f"paused after {len(result.steps)} steps")
        self.result = result


class FillStatus(enum.StrEnum):
    """How full the context window is."""

    OK = "ok"
    COMPACT = "compact"
    WARNING = "warning"
    EMERGENCY = "emergency"
    REJECT = "reject"


@final
class FillCheck(msgspec.Struct, frozen=True, kw_only=True):
    """A context-window fill check: percent used, status, tokens used and available."""

    percent: float
    status: FillStatus
    used: int
    max: int


@final
class CompactionResult(msgspec.Struct, frozen=True, kw_only=True):
    """Fill before and after a compaction, in percent."""

    before_percent: float
    after_percent: float


@final
class VulnerableOutput(msgspec.Struct, frozen=True, kw_only=True):
    """A tool output that the next pruning will drop (the model is told, to keep what it
    needs of it)."""

    tool_name: str
    input_hint: str


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a text for a model."""

    def count(self, text: str) -> int: ...


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate: about four characters a token (never 0 for non-empty)."""
    return (len(text) + 3) // 4


@runtime_checkable
class CompactionStrategy(Protocol):
    """Compresses a step history into fewer messages within ``budget_tokens``."""

    async def compact(self, steps: Sequence[Step], budget_tokens: int) -> list[Message]: ...


@runtime_checkable
class ContextManager(Protocol):
    """Owns the prompt history and its compaction (the loop's only view of the context)."""

    def build_prompt(self) -> list[Message]: ...

    def add_step(self, step: Step) -> None: ...

    async def compact(self) -> CompactionResult: ...

    def set_strategy(self, strategy: CompactionStrategy) -> None: ...

    def check_fill(self) -> FillCheck: ...

    def correct_token_count(self, api_input_tokens: int) -> None: ...

    def fill_percent(self) -> float: ...

    def available_tokens(self) -> int: ...

    def output_limit(self) -> int: ...

    def vulnerable_outputs(self) -> list[VulnerableOutput]: ...


#: A one-message-per-boundary source of live user messages ("" when there is none).
MessageSource = Callable[[], str | Awaitable[str]]
