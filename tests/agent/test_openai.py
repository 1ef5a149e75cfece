"""OpenAICaller against a real HTTP server playing scripted chat completions: what it
sends, what it reads back, when it retries, and how failures are reported."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from sandbox.agent._openai import NO_API_KEY, OpenAICaller
from sandbox.agent._types import (
    ChatRequest,
    ChatResponse,
    ContextOverflow,
    Message,
    ModelCaller,
    ModelError,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
)

from .scripted import DEADLINE, Entry, Error, ScriptedServer, delay, error, reply

pytestmark = pytest.mark.anyio

HELLO = ChatRequest(messages=(Message(role="user", content="hello"),))


@asynccontextmanager
async def caller_for(server: ScriptedServer, **options: Any) -> AsyncIterator[OpenAICaller]:
    """A caller of ``server`` with short retry waits, closed on the way out. The body of
    the ``async with`` runs within the scripted server's :data:`DEADLINE`."""
    settings: dict[str, Any] = {
        "api_key": "sk-test",
        "timeout": 10.0,
        "max_retries": 2,
        "retry_base_delay": 0.01,
        "retry_max_delay": 0.05,
    }
    settings.update(options)
    with anyio.fail_after(DEADLINE):
        async with OpenAICaller("test-model", base_url=server.base_url, **settings) as caller:
            yield caller


async def call_once(entries: list[Entry], request: ChatRequest = HELLO, **options: Any) -> Any:
    """Play ``entries``, make one call, return (the response, the bodies the server saw)."""
    with ScriptedServer(entries) as server:
        async with caller_for(server, **options) as caller:
            return await caller.call(request), server.requests


# --- what is sent ---


async def test_sends_messages_tools_and_settings_in_the_chat_shape() -> None:
    """Every role maps to its chat message; assistant calls carry id, name and arguments,
    a tool message its call id; reasoning is not sent back; tools, limits and settings go
    in the body."""
    request = ChatRequest(
        messages=(
            Message(role="system", content="be brief"),
            Message(role="user", content="list files"),
            Message(
                role="assistant",
                content="",
                reasoning="I should look",
                tool_calls=(
                    ToolCall(id="call_1", name="ls", arguments='{"path": "."}'),
                    ToolCall(id="call_2", name="pwd"),
                ),
            ),
            Message(role="tool", content="a.txt", tool_call_id="call_1"),
            Message(role="tool", content="/work", tool_call_id="call_2"),
        ),
        tools=(
            ToolSpec(
                name="ls",
                description="list a directory",
                parameters={"type": "object", "properties": {"path": {"type": "string"}}},
            ),
            ToolSpec(name="pwd"),
        ),
        max_tokens=256,
        reasoning_effort="low",
    )
    with ScriptedServer([reply("done")]) as server:
        async with caller_for(server, temperature=0.2, extra_body={"top_k": 20}) as caller:
            await caller.call(request)
        [body] = server.requests
        [headers] = server.headers

    assert body["model"] == "test-model"
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "ls", "arguments": '{"path": "."}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "pwd", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "content": "a.txt", "tool_call_id": "call_1"},
        {"role": "tool", "content": "/work", "tool_call_id": "call_2"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "ls",
                "description": "list a directory",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {"name": "pwd", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert body["max_tokens"] == 256
    assert body["reasoning_effort"] == "low"
    assert body["temperature"] == 0.2
    assert body["top_k"] == 20
    assert "stream" not in body or body["stream"] is False
    assert headers["authorization"] == "Bearer sk-test"


async def test_leaves_out_what_is_not_set() -> None:
    """No tools, limit, effort or temperature: none of those fields is sent."""
    _, [body] = await call_once([reply("hi")])
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    for name in ("tools", "max_tokens", "max_completion_tokens", "reasoning_effort", "temperature"):
        assert name not in body


async def test_max_tokens_can_go_in_max_completion_tokens() -> None:
    """For OpenAI's reasoning models, the limit is sent as ``max_completion_tokens``."""
    request = ChatRequest(messages=HELLO.messages, max_tokens=99)
    _, [body] = await call_once([reply("hi")], request, max_tokens_field="max_completion_tokens")
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body


async def test_api_key_comes_from_the_environment_else_a_placeholder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without ``api_key``, OPENAI_API_KEY is sent; without that, a placeholder."""
    with ScriptedServer([reply(), reply()]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
        async with OpenAICaller("m", base_url=server.base_url) as caller:
            await caller.call(HELLO)
        monkeypatch.delenv("OPENAI_API_KEY")
        async with OpenAICaller("m", base_url=server.base_url) as caller:
            await caller.call(HELLO)
        assert [h["authorization"] for h in server.headers] == [
            "Bearer sk-from-env",
            f"Bearer {NO_API_KEY}",
        ]


async def test_a_conversation_goes_back_and_forth() -> None:
    """Each call is one request, answered from what that request said."""

    def shout(body: dict[str, Any]) -> Entry:
        return reply(body["messages"][-1]["content"].upper())

    with ScriptedServer([shout, shout]) as server:
        async with caller_for(server) as caller:
            first = await caller.call(HELLO)
            second = await caller.call(
                ChatRequest(messages=(Message(role="user", content="again"),))
            )
        assert len(server.requests) == 2
    assert (first.content, second.content) == ("HELLO", "AGAIN")


# --- what is read back ---


async def test_reads_content_tool_calls_usage_and_model() -> None:
    """The answer's text, calls (in order), usage and model name come back as written."""
    entry = reply(
        "let me look",
        tool_calls=[("call_a", "ls", {"path": "/tmp"}), ("call_b", "cat", '{"file": "x"')],
        usage=(120, 17),
        model="qwen3-8b",
    )
    response, _ = await call_once([entry])
    assert response == ChatResponse(
        content="let me look",
        tool_calls=(
            ToolCall(id="call_a", name="ls", arguments='{"path": "/tmp"}'),
            ToolCall(id="call_b", name="cat", arguments='{"file": "x"'),
        ),
        stop_reason=StopReason.TOOL_CALLS,
        usage=Usage(input_tokens=120, output_tokens=17),
        model="qwen3-8b",
    )
    assert response.usage.total_tokens == 137


async def test_null_content_beside_tool_calls_reads_as_empty() -> None:
    """OpenAI writes ``content: null`` when the model only calls tools."""
    response, _ = await call_once([reply(tool_calls=[("c1", "pwd", {})])])
    assert response.content == ""
    assert response.tool_calls == (ToolCall(id="c1", name="pwd", arguments="{}"),)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reads_reasoning_under_either_name(field: str) -> None:
    """vLLM, DeepSeek and llama.cpp write ``reasoning_content``; others ``reasoning``."""
    response, _ = await call_once([reply("42", reasoning="think", reasoning_field=field)])
    assert (response.content, response.reasoning) == ("42", "think")


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason"),
    [
        ("stop", StopReason.STOP),
        ("tool_calls", StopReason.TOOL_CALLS),
        ("length", StopReason.MAX_TOKENS),
        ("content_filter", StopReason.CONTENT_FILTER),
        ("function_call", StopReason.OTHER),
        ("eos_token", StopReason.OTHER),
    ],
)
async def test_maps_finish_reasons(finish_reason: str, stop_reason: StopReason) -> None:
    """Each finish reason maps to its stop reason; one we do not know is OTHER."""
    response, _ = await call_once([reply("x", finish_reason=finish_reason)])
    assert response.stop_reason is stop_reason


async def test_a_null_finish_reason_is_other() -> None:
    """Some servers write no finish reason at all."""
    body = reply("x")
    body["choices"][0]["finish_reason"] = None
    response, _ = await call_once([body])
    assert response.stop_reason is StopReason.OTHER


async def test_missing_usage_counts_zero() -> None:
    """A server that reports no usage gives zeros, not an error."""
    response, _ = await call_once([reply("x", usage=None)])
    assert response.usage == Usage(input_tokens=0, output_tokens=0)


async def test_tool_calls_written_loosely_are_read() -> None:
    """Arguments as a JSON object become JSON text, empty arguments ``{}``, and a call
    without an id gets one."""
    body = reply(tool_calls=[("x", "a", {})])
    body["choices"][0]["message"]["tool_calls"] = [
        {"id": "c1", "type": "function", "function": {"name": "a", "arguments": {"n": 1}}},
        {"id": "c2", "type": "function", "function": {"name": "b", "arguments": ""}},
        {"function": {"name": "c", "arguments": "{}"}},
    ]
    response, _ = await call_once([body])
    first, second, third = response.tool_calls
    assert first == ToolCall(id="c1", name="a", arguments='{"n": 1}')
    assert second == ToolCall(id="c2", name="b", arguments="{}")
    assert third.name == "c"
    assert third.id.startswith("call_")


async def test_an_answer_without_choices_is_a_model_error() -> None:
    """A 200 whose body is an error (some proxies do this) is not mistaken for an answer."""
    with ScriptedServer([{"error": {"message": "upstream failed"}}, reply()]) as server:
        async with caller_for(server) as caller:
            with pytest.raises(ModelError, match="upstream failed") as info:
                await caller.call(HELLO)
        assert len(server.requests) == 1
    assert not isinstance(info.value, ContextOverflow)


# --- retries ---


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504])
async def test_a_passing_failure_is_retried(status: int) -> None:
    """One retryable failure, then an answer: the call succeeds, in two requests."""
    with ScriptedServer([error(status, "try later"), reply("ok")]) as server:
        async with caller_for(server) as caller:
            response = await caller.call(HELLO)
        assert len(server.requests) == 2
    assert response.content == "ok"


async def test_a_connection_dropped_mid_request_is_retried() -> None:
    """A delay cut off by the client's timeout, then an answer: one success."""
    with ScriptedServer([delay(5.0), reply("ok")]) as server:
        async with caller_for(server, timeout=0.5) as caller:
            response = await caller.call(HELLO)
        assert len(server.requests) == 2
    assert response.content == "ok"


async def test_gives_up_after_max_retries() -> None:
    """A 500 every time: max_retries + 1 requests, then ModelError with the status, the
    provider's message and the attempts."""
    entries: list[Entry] = [error(500, "the GPU is on fire", type="server_error")] * 4
    with ScriptedServer([*entries, reply("too late")]) as server:
        async with caller_for(server, max_retries=3) as caller:
            with pytest.raises(ModelError) as info:
                await caller.call(HELLO)
        assert len(server.requests) == 4
    message = str(info.value)
    assert "HTTP 500" in message
    assert "the GPU is on fire" in message
    assert "after 4 attempts" in message
    assert not isinstance(info.value, ContextOverflow)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_a_refusal_is_not_retried(status: int) -> None:
    """A request the server refuses is sent once, and the error names the status."""
    with ScriptedServer([error(status, "no such thing"), reply("never")]) as server:
        async with caller_for(server) as caller:
            with pytest.raises(ModelError) as info:
                await caller.call(HELLO)
        assert len(server.requests) == 1
    assert f"HTTP {status}" in str(info.value)
    assert "no such thing" in str(info.value)
    assert not isinstance(info.value, ContextOverflow)


async def test_a_server_asking_for_a_retry_of_a_400_is_not_obeyed() -> None:
    """The SDK would obey ``x-should-retry: true``; this caller keeps its own policy."""
    entry = error(400, "bad request", headers={"x-should-retry": "true"})
    with ScriptedServer([entry, reply("never")]) as server:
        async with caller_for(server) as caller:
            with pytest.raises(ModelError, match="HTTP 400"):
                await caller.call(HELLO)
        assert len(server.requests) == 1


async def test_retry_after_is_honoured() -> None:
    """A 429 asking for a one-second wait gets it, however short the backoff."""
    entries: list[Entry] = [error(429, "slow down", headers={"retry-after": "1"}), reply("ok")]
    with ScriptedServer(entries) as server:
        async with caller_for(server) as caller:
            started = time.monotonic()
            response = await caller.call(HELLO)
            elapsed = time.monotonic() - started
        assert len(server.requests) == 2
    assert response.content == "ok"
    assert elapsed >= 0.9


async def test_a_timeout_every_time_is_a_model_error() -> None:
    """No answer within the timeout, on every attempt: ModelError, without waiting for
    the server."""
    with ScriptedServer([delay(5.0), delay(5.0), reply("never")]) as server:
        async with caller_for(server, timeout=0.5, max_retries=1) as caller:
            started = time.monotonic()
            with pytest.raises(ModelError, match=r"no answer .* within 0\.5 s") as info:
                await caller.call(HELLO)
            elapsed = time.monotonic() - started
        assert len(server.requests) == 2
    assert "after 2 attempts" in str(info.value)
    assert elapsed < 4.0


async def test_cancelling_a_call_is_not_a_failure() -> None:
    """A call cancelled while it waits for the server ends as cancelled, not as an error,
    and the caller works afterwards."""
    with ScriptedServer([delay(5.0), reply("after")]) as server:
        async with caller_for(server) as caller:
            with anyio.move_on_after(0.5) as scope:
                await caller.call(HELLO)
            assert scope.cancelled_caught
            response = await caller.call(HELLO)
        assert len(server.requests) == 2
    assert response.content == "after"


async def test_an_unreachable_server_is_a_model_error() -> None:
    """Nothing listening: every attempt fails to connect, then ModelError."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with OpenAICaller(
        "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, retry_base_delay=0.01
    ) as caller:
        with anyio.fail_after(DEADLINE), pytest.raises(ModelError, match="cannot reach") as info:
            await caller.call(HELLO)
    assert "after 2 attempts" in str(info.value)


async def test_a_script_overrun_fails_loudly() -> None:
    """Asking the scripted server more than it was given is a 500 that says so."""
    with ScriptedServer([]) as server:
        async with caller_for(server, max_retries=0) as caller:
            with pytest.raises(ModelError, match="script ran out"):
                await caller.call(HELLO)


# --- context overflow ---

OVERFLOWS = {
    "openai": error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9010 tokens. Please reduce the length of the messages.",
        code="context_length_exceeded",
    ),
    "openai-code-only": error(400, "Input is too large.", code="context_length_exceeded"),
    "openai-context-window": error(
        400, "Your input exceeds the context window of this model. Please adjust your input."
    ),
    "vllm": Error(
        400,
        {
            "error": {
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 5000 tokens (4000 in the messages, 1000 in the completion). "
                "Please reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
    ),
    "vllm-top-level": Error(
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens. Please reduce the length of the messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ),
    "vllm-model-length": error(
        400,
        "The decoder prompt (length 5000) is longer than the maximum model length of 4096.",
        type="BadRequestError",
    ),
    "llama.cpp": Error(
        400,
        {
            "error": {
                "code": 400,
                "message": "request (9412 tokens) exceeds the available context size "
                "(8192 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 9412,
                "n_ctx": 8192,
            }
        },
    ),
    "llama.cpp-old-500": Error(
        500,
        {
            "error": {
                "code": 500,
                "message": "the request exceeds the available context size, try increasing "
                "the context size or enable context shift",
                "type": "server_error",
            }
        },
    ),
    "too-many-tokens": error(400, "Too many tokens in the prompt."),
    "prompt-too-long": error(400, "prompt is too long: 210000 tokens > 200000 maximum"),
}


@pytest.mark.parametrize("name", list(OVERFLOWS))
async def test_context_overflow_is_recognised_and_not_retried(name: str) -> None:
    """Each provider's way of saying "too long" raises ContextOverflow, after one request
    (even the 500 an older llama.cpp sends)."""
    with ScriptedServer([OVERFLOWS[name], reply("never")]) as server:
        async with caller_for(server) as caller:
            with pytest.raises(ContextOverflow) as info:
                await caller.call(HELLO)
        assert len(server.requests) == 1
    assert "HTTP" in str(info.value)


async def test_a_rate_limit_on_tokens_is_not_an_overflow() -> None:
    """A 429 that says "too many tokens" means per minute: retried, then ModelError."""
    entry = error(429, "Too many tokens, please wait before trying again.")
    with ScriptedServer([entry, entry]) as server:
        async with caller_for(server, max_retries=1) as caller:
            with pytest.raises(ModelError) as info:
                await caller.call(HELLO)
        assert len(server.requests) == 2
    assert not isinstance(info.value, ContextOverflow)


# --- the object ---


async def test_is_a_model_caller() -> None:
    """It satisfies the protocol the loop takes, and closing twice is harmless."""
    caller = OpenAICaller("m", base_url="http://127.0.0.1:9/v1")
    assert isinstance(caller, ModelCaller)
    assert caller.base_url.startswith("http://127.0.0.1:9/v1")
    with anyio.fail_after(DEADLINE):
        await caller.aclose()
        await caller.aclose()


@pytest.mark.parametrize(
    "options",
    [{"max_retries": -1}, {"timeout": 0}, {"retry_base_delay": -1.0}],
)
def test_refuses_bad_settings(options: dict[str, Any]) -> None:
    """Negative retries, a zero timeout or a negative delay are refused at once."""
    with pytest.raises(ValueError):
        OpenAICaller("m", **options)
