"""A model caller for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, the
llama.cpp server, Ollama), on the official ``openai`` SDK.

The SDK's own retries are switched off (``max_retries=0`` on its client) and this caller
retries by itself, because the SDK's policy is not ours: it retries 408, 409 and every 5xx,
obeys a server's ``x-should-retry: true`` even on a 400, and its backoff base is a module
constant (0.5 s), so a test of five failures would sleep for seconds. Retrying here keeps
the set exactly :data:`RETRY_STATUSES` plus connection errors and timeouts, never retries
a context overflow whatever its status (an older llama.cpp server says it with a 500), and
lets tests make the backoff short.
"""

from __future__ import annotations

import json
import os
import random
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, cast, final

import anyio
import openai
from openai import AsyncOpenAI, omit

from ._types import (
    ChatRequest,
    ChatResponse,
    ContextOverflow,
    Message,
    ModelError,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

if TYPE_CHECKING:
    from types import TracebackType

    from openai.types import CompletionUsage
    from openai.types.chat import (
        ChatCompletion,
        ChatCompletionMessageParam,
        ChatCompletionToolUnionParam,
    )
    from openai.types.shared import ReasoningEffort

__all__ = ["NO_API_KEY", "RETRY_STATUSES", "OpenAICaller"]

#: The key sent when none is given or set in ``OPENAI_API_KEY``: local servers (vLLM,
#: llama.cpp, Ollama) want none, and the SDK refuses to start without one.
NO_API_KEY: Final = "not-needed"

#: The HTTP statuses worth another try: a request timeout, a rate limit, and the server or
#: a gateway failing on the way. 400, 401, 403, 404 and 422 say the request itself is wrong,
#: and sending it again cannot help.
RETRY_STATUSES: Final = frozenset({408, 429, 500, 502, 503, 504})

#: The longest ``Retry-After`` honoured (seconds). The SDK allows two minutes; an agent step
#: that waits longer than one is better reported than hidden.
MAX_RETRY_AFTER: Final = 60.0

# How providers say "the prompt does not fit". OpenAI: code ``context_length_exceeded``,
# "This model's maximum context length is 8192 tokens..." (and, lately, "Your input exceeds
# the context window of this model"); vLLM: "This model's maximum context length is..." or
# "...is longer than the maximum model length of..."; the llama.cpp server: type
# ``exceed_context_size_error``, "the request exceeds the available context size"; an
# Anthropic-compatible endpoint: "prompt is too long".
_OVERFLOW_CODES: Final = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_OVERFLOW_PHRASES: Final = (
    "context length",
    "context size",
    "context window",
    "maximum model length",
    "too many tokens",
    "prompt is too long",
)

_STOP_REASONS: Final = {
    "stop": StopReason.STOP,
    "tool_calls": StopReason.TOOL_CALLS,
    "length": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
}


@final
class OpenAICaller:
    """Calls ``model`` through the chat-completions API at ``base_url``; a
    :class:`~sandbox.agent.ModelCaller`. Use it as an async context manager, or call
    :meth:`aclose` when done, to close its connections.

    A failed request is tried again, up to ``max_retries`` more times, when the failure may
    pass: HTTP 408, 429, 500, 502, 503 or 504, a connection error, or no answer within
    ``timeout``. The wait doubles from ``retry_base_delay`` up to ``retry_max_delay``, less
    a random quarter so that many clients spread out, and is at least what a
    ``Retry-After`` header asks (up to :data:`MAX_RETRY_AFTER`).

    The assistant's ``reasoning`` is not sent back: providers that write it do not read it.

    Args:
        model: the model's name, as the server knows it.
        base_url: the API's root (``http://127.0.0.1:8000/v1``); None means the SDK's
            default (``OPENAI_BASE_URL``, else OpenAI).
        api_key: the bearer key; None means ``OPENAI_API_KEY``, else :data:`NO_API_KEY`.
        timeout: seconds allowed for each phase of one attempt (connect, send, each read).
        max_retries: attempts after the first.
        temperature: sent when set.
        extra_body: extra request fields, sent as they are (``{"top_k": 20}`` for vLLM).
        retry_base_delay: the first wait between attempts, in seconds.
        retry_max_delay: the longest computed wait between attempts, in seconds.
        max_tokens_field: the field that carries :attr:`ChatRequest.max_tokens`. OpenAI's
            reasoning models refuse ``max_tokens`` and want ``max_completion_tokens``;
            local servers read ``max_tokens``.

    Raises:
        ValueError: a negative ``max_retries``, ``timeout`` or delay.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 8.0,
        max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, not {max_retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, not {timeout}")
        if retry_base_delay < 0 or retry_max_delay < 0:
            raise ValueError("retry delays must be >= 0")
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.temperature = temperature
        self.extra_body = dict(extra_body) if extra_body is not None else None
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.max_tokens_field = max_tokens_field
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY") or NO_API_KEY
        self._client = AsyncOpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0
        )

    @property
    def base_url(self) -> str:
        """The API's root, as the SDK resolved it."""
        return str(self._client.base_url)

    async def aclose(self) -> None:
        """Close the connections. Idempotent."""
        await self._client.close()

    async def __aenter__(self) -> OpenAICaller:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def call(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` and return the model's answer, trying again as the class says.

        Raises:
            ContextOverflow: the provider says the prompt does not fit the model's context
                (never retried).
            ModelError: any other failure, after the retries; the message has the HTTP
                status and the provider's own words.
        """
        attempt = 0
        while True:
            try:
                completion = await self._create(request)
            except openai.APIStatusError as exc:
                if _is_overflow(exc):
                    raise ContextOverflow(self._describe(exc, attempt)) from exc
                if exc.status_code not in RETRY_STATUSES or attempt >= self.max_retries:
                    raise ModelError(self._describe(exc, attempt)) from exc
                delay = max(self._backoff(attempt), _retry_after(exc))
            except openai.APIConnectionError as exc:  # APITimeoutError included
                if attempt >= self.max_retries:
                    raise ModelError(self._describe(exc, attempt)) from exc
                delay = self._backoff(attempt)
            except openai.OpenAIError as exc:  # a body the SDK could not read, say
                raise ModelError(f"{self.base_url}: {type(exc).__name__}: {exc}") from exc
            else:
                return self._response(completion)
            attempt += 1
            await anyio.sleep(delay)

    async def _create(self, request: ChatRequest) -> ChatCompletion:
        max_tokens = omit if request.max_tokens is None else request.max_tokens
        effort = request.reasoning_effort
        return await self._client.chat.completions.create(
            model=self.model,
            messages=cast("list[ChatCompletionMessageParam]", _messages(request.messages)),
            tools=cast("list[ChatCompletionToolUnionParam]", _tools(request.tools)) or omit,
            max_tokens=max_tokens if self.max_tokens_field == "max_tokens" else omit,
            max_completion_tokens=(
                max_tokens if self.max_tokens_field == "max_completion_tokens" else omit
            ),
            reasoning_effort=omit if effort is None else cast("ReasoningEffort", effort),
            temperature=omit if self.temperature is None else self.temperature,
            extra_body=self.extra_body,
        )

    def _backoff(self, attempt: int) -> float:
        delay = min(self.retry_base_delay * 2.0 ** min(attempt, 30), self.retry_max_delay)
        return delay * (1.0 - 0.25 * random.random())

    def _describe(self, exc: openai.APIError, attempt: int) -> str:
        tries = f" (after {attempt + 1} attempts)" if attempt else ""
        if isinstance(exc, openai.APIStatusError):
            return f"HTTP {exc.status_code} from {self.base_url}: {_provider_message(exc)}{tries}"
        if isinstance(exc, openai.APITimeoutError):
            return f"no answer from {self.base_url} within {self.timeout:g} s{tries}"
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        return f"cannot reach {self.base_url}{cause}{tries}"

    def _response(self, completion: ChatCompletion) -> ChatResponse:
        # The SDK builds the model without validating it, so a field a server left out is
        # None (or absent) whatever its annotation says: read every one defensively.
        choices = getattr(completion, "choices", None)
        if not choices:
            extra = completion.model_extra or {}
            said = f": {extra['error']}" if "error" in extra else ""
            raise ModelError(f"{self.base_url} answered with no choices{said}")
        choice = choices[0]
        message = choice.message
        return ChatResponse(
            content=message.content or "",
            tool_calls=tuple(_tool_call(raw) for raw in message.tool_calls or ()),
            stop_reason=_STOP_REASONS.get(choice.finish_reason, StopReason.OTHER),
            usage=_usage(completion.usage),
            reasoning=_reasoning(message.model_extra),
            model=completion.model or "",
        )


def _usage(usage: CompletionUsage | None) -> Usage:
    """The tokens a completion reports, 0 for each the server left out."""
    if usage is None:
        return Usage()
    return Usage(input_tokens=usage.prompt_tokens or 0, output_tokens=usage.completion_tokens or 0)


def _reasoning(extras: dict[str, Any] | None) -> str:
    """The message's reasoning text, where the server sends one (vLLM and DeepSeek:
    ``reasoning_content``; some servers: ``reasoning``)."""
    extras = extras or {}
    reasoning = extras.get("reasoning_content") or extras.get("reasoning")
    return reasoning if isinstance(reasoning, str) else ""


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        # Content is always a string, "" rather than null beside tool calls: OpenAI, vLLM
        # and llama.cpp take either, and Ollama refuses null.
        item: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "assistant" and m.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in m.tool_calls
            ]
        elif m.role == "tool":
            item["tool_call_id"] = m.tool_call_id
        out.append(item)
    return out


def _tools(tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
        if tool.description:
            function["description"] = tool.description
        out.append({"type": "function", "function": function})
    return out


def _tool_call(raw: object) -> ToolCall:
    # Some servers write the arguments as a JSON object rather than JSON text, write ""
    # for a call without arguments, or leave the id out; the loop needs text and an id.
    function = getattr(raw, "function", None)
    name = getattr(function, "name", None) or ""
    arguments = getattr(function, "arguments", None)
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        arguments = "{}"
    elif not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    call_id = getattr(raw, "id", None) or f"call_{uuid.uuid4().hex[:24]}"
    return ToolCall(id=str(call_id), name=str(name), arguments=arguments)


def _error_fields(exc: openai.APIStatusError) -> tuple[str, str, str]:
    """The provider's message, code and type, from whichever shape its error body has."""
    body = exc.body
    if isinstance(body, Mapping):
        message = body.get("message")
        kind = body.get("type")
        return (
            message if isinstance(message, str) else json.dumps(body, default=str),
            exc.code or "",
            kind if isinstance(kind, str) else "",
        )
    if isinstance(body, str) and body:
        return body, "", ""
    return exc.message, "", ""


def _provider_message(exc: openai.APIStatusError) -> str:
    return _error_fields(exc)[0]


def _is_overflow(exc: openai.APIStatusError) -> bool:
    # A 429 can say "too many tokens" (per minute), and a gateway's 502-504 is not the
    # model's verdict; an older llama.cpp server reports an overflow as a 500.
    if exc.status_code in (401, 403, 404, 429) or exc.status_code > 500:
        return False
    message, code, kind = _error_fields(exc)
    if code in _OVERFLOW_CODES or kind in _OVERFLOW_CODES:
        return True
    lowered = message.lower()
    return any(phrase in lowered for phrase in _OVERFLOW_PHRASES)


def _retry_after(exc: openai.APIStatusError) -> float:
    """The wait a ``Retry-After`` (or ``retry-after-ms``) header asks, in seconds; 0 if
    none, or if it is not a number of seconds (an HTTP date is ignored)."""
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if 0.0 <= seconds <= MAX_RETRY_AFTER:
            return seconds
    return 0.0
