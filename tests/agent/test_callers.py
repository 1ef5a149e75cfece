"""DumpCaller and LoggingCaller: they forward untouched, and record what passed, alone and
stacked on OpenAICaller over HTTP."""

from __future__ import annotations

import datetime
import io
import json
import logging
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from sandbox.agent._callers import DumpCaller, LoggingCaller
from sandbox.agent._openai import OpenAICaller
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

from .scripted import DEADLINE, Entry, ScriptedServer, error, reply

pytestmark = pytest.mark.anyio

LOGGER = "tests.agent.callers"

REQUEST = ChatRequest(
    messages=(
        Message(role="system", content="be brief"),
        Message(role="user", content="where am I?"),
    ),
    tools=(ToolSpec(name="pwd"),),
    max_tokens=64,
)
RESPONSE = ChatResponse(
    content="let me see",
    tool_calls=(ToolCall(id="c1", name="pwd"),),
    stop_reason=StopReason.TOOL_CALLS,
    usage=Usage(input_tokens=12, output_tokens=7),
    reasoning="pwd tells",
    model="m",
)


class Canned:
    """A model caller in process: answers (or raises) from a list, and keeps what it got."""

    def __init__(self, *answers: ChatResponse | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[ChatRequest] = []

    async def call(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class CountingWriter:
    """A writer that keeps each write and counts flushes."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.flushes = 0

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        self.flushes += 1


def records(text: str) -> list[dict[str, Any]]:
    """The JSONL records in ``text``; each line must be one JSON object."""
    assert text.endswith("\n")
    out = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(r, dict) for r in out)
    return out


def as_json(value: object) -> Any:
    """``value`` as plain JSON would read it back (lists, not tuples)."""
    return json.loads(msgspec.json.encode(value))


def assert_utc_time(value: str) -> None:
    stamp = datetime.datetime.fromisoformat(value)
    assert stamp.utcoffset() == datetime.timedelta(0)


# --- DumpCaller ---


async def test_dump_writes_the_request_then_the_response() -> None:
    """Two JSON lines: the whole request, then the whole response, each with a UTC time."""
    out = io.StringIO()
    inner = Canned(RESPONSE)
    response = await DumpCaller(inner, out).call(REQUEST)

    assert response is RESPONSE
    assert inner.requests == [REQUEST]
    first, second = records(out.getvalue())
    assert first["direction"] == "request"
    assert first["payload"] == as_json(REQUEST)
    assert second["direction"] == "response"
    assert second["payload"] == as_json(RESPONSE)
    assert "error" not in first
    assert "error" not in second
    for record in (first, second):
        assert set(record) <= {"time", "direction", "payload", "error"}
        assert_utc_time(record["time"])
    assert msgspec.convert(second["payload"], ChatResponse) == RESPONSE


async def test_dump_records_an_error_and_lets_it_through() -> None:
    """A failed call writes a response record with the error; the exception is the same."""
    out = io.StringIO()
    overflow = ContextOverflow("HTTP 400: prompt is too long")
    with pytest.raises(ContextOverflow) as info:
        await DumpCaller(Canned(overflow), out).call(REQUEST)

    assert info.value is overflow
    first, second = records(out.getvalue())
    assert first["direction"] == "request"
    assert second["direction"] == "response"
    assert second["payload"] is None
    assert second["error"] == "ContextOverflow: HTTP 400: prompt is too long"
    assert_utc_time(second["time"])


async def test_dump_writes_one_flushed_line_per_record() -> None:
    """Each record is a single write of a single line, flushed at once."""
    writer = CountingWriter()
    dump = DumpCaller(Canned(RESPONSE, ModelError("down")), writer)
    await dump.call(REQUEST)
    with pytest.raises(ModelError):
        await dump.call(REQUEST)

    assert len(writer.writes) == 4
    assert writer.flushes == 4
    for text in writer.writes:
        assert text.endswith("\n")
        assert text.count("\n") == 1
    directions = [json.loads(text)["direction"] for text in writer.writes]
    assert directions == ["request", "response", "request", "response"]


async def test_dump_to_a_file_reads_back(tmp_path: Path) -> None:
    """A dump file is read back, line by line, while it is still open."""
    path = tmp_path / "dump.jsonl"
    with path.open("w", encoding="utf-8") as f:
        await DumpCaller(Canned(RESPONSE), f).call(REQUEST)
        assert len(records(path.read_text(encoding="utf-8"))) == 2


async def test_dump_without_a_writer_only_forwards() -> None:
    """With no writer, the call goes through and nothing else happens."""
    inner = Canned(RESPONSE)
    assert await DumpCaller(inner, None).call(REQUEST) is RESPONSE
    assert inner.requests == [REQUEST]


# --- LoggingCaller ---


async def test_logging_logs_the_request_and_the_usage(caplog: pytest.LogCaptureFixture) -> None:
    """At DEBUG: provider and counts going out, usage, stop reason and calls coming back."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inner = Canned(RESPONSE)
    caller = LoggingCaller(inner, "openai", logging.getLogger(LOGGER))
    assert await caller.call(REQUEST) is RESPONSE

    ours = [r for r in caplog.records if r.name == LOGGER]
    assert [r.levelno for r in ours] == [logging.DEBUG, logging.DEBUG]
    sent, received = (r.getMessage() for r in ours)
    assert sent == "model request: provider=openai messages=2 tools=1"
    assert received == (
        "model response: provider=openai input_tokens=12 output_tokens=7 total_tokens=19"
        " stop_reason=tool_calls tool_calls=1"
    )


async def test_logging_logs_a_failure_and_lets_it_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A failed call is logged at DEBUG and raised unchanged."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    failure = ModelError("HTTP 503: busy")
    with pytest.raises(ModelError) as info:
        await LoggingCaller(Canned(failure), "vllm", logging.getLogger(LOGGER)).call(REQUEST)

    assert info.value is failure
    ours = [r for r in caplog.records if r.name == LOGGER]
    assert [r.getMessage() for r in ours] == [
        "model request: provider=vllm messages=2 tools=1",
        "model error: provider=vllm ModelError: HTTP 503: busy",
    ]
    assert all(r.levelno == logging.DEBUG for r in ours)


async def test_logging_without_a_logger_only_forwards(caplog: pytest.LogCaptureFixture) -> None:
    """With no logger, the call goes through and nothing is logged."""
    caplog.set_level(logging.DEBUG)
    inner = Canned(RESPONSE)
    assert await LoggingCaller(inner, "openai", None).call(REQUEST) is RESPONSE
    assert inner.requests == [REQUEST]
    assert not [r for r in caplog.records if r.name.startswith("sandbox")]


async def test_logging_is_quiet_above_debug(caplog: pytest.LogCaptureFixture) -> None:
    """At INFO, the exchange leaves no record."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    await LoggingCaller(Canned(RESPONSE), "openai", logging.getLogger(LOGGER)).call(REQUEST)
    assert not [r for r in caplog.records if r.name == LOGGER]


# --- stacked ---


def test_the_decorators_are_model_callers() -> None:
    """Both satisfy the protocol the loop takes, whatever they wrap."""
    inner = Canned()
    assert isinstance(DumpCaller(inner, None), ModelCaller)
    assert isinstance(LoggingCaller(inner, "x", None), ModelCaller)


async def test_stacked_on_openai_over_http(caplog: pytest.LogCaptureFixture) -> None:
    """LoggingCaller(DumpCaller(OpenAICaller)): the answer comes through untouched, the dump
    and the log each see the exchange, and an overflow passes through both as itself."""
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    out = io.StringIO()
    entries: list[Entry] = [
        reply("here", tool_calls=[("c1", "pwd", {})], usage=(30, 4), model="m"),
        error(400, "prompt too big", code="context_length_exceeded"),
    ]
    with ScriptedServer(entries) as server:
        async with OpenAICaller("m", base_url=server.base_url, max_retries=0) as raw:
            caller = LoggingCaller(DumpCaller(raw, out), "openai", logging.getLogger(LOGGER))
            with anyio.fail_after(DEADLINE):
                response = await caller.call(REQUEST)
            with anyio.fail_after(DEADLINE), pytest.raises(ContextOverflow):
                await caller.call(REQUEST)
        assert len(server.requests) == 2

    assert response.content == "here"
    assert response.tool_calls == (ToolCall(id="c1", name="pwd", arguments="{}"),)
    assert response.usage == Usage(input_tokens=30, output_tokens=4)

    dumped = records(out.getvalue())
    assert [r["direction"] for r in dumped] == ["request", "response", "request", "response"]
    assert dumped[1]["payload"] == as_json(response)
    assert dumped[3]["payload"] is None
    assert dumped[3]["error"].startswith("ContextOverflow: HTTP 400")

    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert messages[1].endswith("total_tokens=34 stop_reason=tool_calls tool_calls=1")
    assert messages[3].startswith("model error: provider=openai ContextOverflow: HTTP 400")
