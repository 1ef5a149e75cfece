"""Model callers that wrap another and pass every request through untouched: one writes
the traffic to a JSONL dump, one logs it. They compose in either order::

    caller = LoggingCaller(DumpCaller(raw, dump_file), "openai", log)
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Literal, Protocol, final

import msgspec

from ._types import ChatRequest, ChatResponse, ModelCaller

__all__ = ["DumpCaller", "LoggingCaller", "TextWriter"]


class TextWriter(Protocol):
    """Anything text can be written to: an open text file, ``sys.stderr``, a ``StringIO``.
    Flushed after each record if it has a ``flush`` method."""

    def write(self, text: str, /) -> Any: ...


class _Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    time: str
    direction: Literal["request", "response"]
    payload: Any
    error: str | None = None


_ENCODER = msgspec.json.Encoder()


@final
class DumpCaller:
    """Forwards to ``inner``, writing each request and each response to ``writer`` as a
    JSON line: ``{"time", "direction", "payload"}``, where ``time`` is UTC in ISO 8601,
    ``direction`` is ``request`` or ``response``, and ``payload`` is the whole
    :class:`~sandbox.agent.parts.ChatRequest` or :class:`~sandbox.agent.parts.ChatResponse` as plain
    JSON. A call that fails writes a ``response`` record whose ``payload`` is null and whose
    ``error`` says what was raised (the exception itself propagates unchanged). A
    cancelled call writes no response.

    Each record is one ``write`` of one line, flushed, so a dump read while the run goes
    on, or after a crash, ends with a whole record. With ``writer`` None, it only forwards.
    """

    def __init__(self, inner: ModelCaller, writer: TextWriter | None) -> None:
        self.inner = inner
        self.writer = writer

    async def call(self, request: ChatRequest) -> ChatResponse:
        """Forward ``request`` to the inner caller, recording both ways.

        Raises:
            Exception: whatever the inner caller raises.
        """
        self._write(_Record(time=_now(), direction="request", payload=request))
        try:
            response = await self.inner.call(request)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            self._write(_Record(time=_now(), direction="response", payload=None, error=error))
            raise
        self._write(_Record(time=_now(), direction="response", payload=response))
        return response

    def _write(self, record: _Record) -> None:
        if self.writer is None:
            return
        self.writer.write(_ENCODER.encode(record).decode() + "\n")
        flush = getattr(self.writer, "flush", None)
        if callable(flush):
            flush()


@final
class LoggingCaller:
    """Forwards to ``inner``, logging each exchange to ``logger`` at DEBUG: the request
    (``provider``, message and tool counts), then the response (input, output and total
    tokens, stop reason, tool-call count) or the failure. With ``logger`` None, it only
    forwards.
    """

    def __init__(self, inner: ModelCaller, provider: str, logger: logging.Logger | None) -> None:
        self.inner = inner
        self.provider = provider
        self.logger = logger

    async def call(self, request: ChatRequest) -> ChatResponse:
        """Forward ``request`` to the inner caller, logging both ways.

        Raises:
            Exception: whatever the inner caller raises.
        """
        log = self.logger
        if log is None:
            return await self.inner.call(request)
        log.debug(
            "model request: provider=%s messages=%d tools=%d",
            self.provider,
            len(request.messages),
            len(request.tools),
        )
        try:
            response = await self.inner.call(request)
        except Exception as exc:
            log.debug("model error: provider=%s %s: %s", self.provider, type(exc).__name__, exc)
            raise
        usage = response.usage
        log.debug(
            "model response: provider=%s input_tokens=%d output_tokens=%d total_tokens=%d"
            " stop_reason=%s tool_calls=%d",
            self.provider,
            usage.input_tokens,
            usage.output_tokens,
            usage.total_tokens,
            response.stop_reason.value,
            len(response.tool_calls),
        )
        return response


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()
