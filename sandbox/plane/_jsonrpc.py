"""What is wrong with a message that is not JSON-RPC the server can read, in a line.

The MCP SDK's stdio transport drops such a line unanswered, so the client waits out its own
timeout; over HTTP it answers with pydantic's whole report and the wrong code. Both
transports of ``sandbox serve`` ask :func:`diagnose` instead, once the SDK has refused a
message, and answer (or, for a message that may not be answered, only log) what it says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, final

import msgspec
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

__all__ = ["Malformed", "diagnose"]

_DECODER: Final = msgspec.json.Decoder()
#: How much of a bad message a diagnosis quotes.
_QUOTE: Final = 60


@final
@dataclass(frozen=True)
class Malformed:
    """Why a message was refused.

    Attributes:
        code: the JSON-RPC error code: -32700 (not JSON), -32600 (not a request), -32602
            (a request whose params are not an object).
        message: what is wrong, for people.
        id: the request's id, when it has one that can be read (else the answer's is null).
        answer: whether an error response is owed: not for a notification or a response
            (JSON-RPC answers neither), but for anything that is not even a message.
    """

    code: int
    message: str
    id: str | int | None = None
    answer: bool = True

    def error(self) -> JSONRPCError:
        """The error response."""
        return JSONRPCError(
            jsonrpc="2.0", id=self.id, error=ErrorData(code=self.code, message=self.message)
        )

    def line(self) -> str:
        """One line for a log: the code, the id, the message."""
        rid = "" if self.id is None else f"(id {self.id!r}) "
        return f"{rid}{self.code}: {self.message}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _request_id(message: dict[str, Any]) -> str | int | None:
    rid = message.get("id")
    return rid if isinstance(rid, str | int) and not isinstance(rid, bool) else None


def diagnose(raw: bytes | str) -> Malformed:
    """Say what is wrong with ``raw``, a message the SDK could not read.

    Only for messages already refused: a message with nothing wrong that this function can
    name is still diagnosed as not a JSON-RPC 2.0 message (-32600).
    """
    try:
        message = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        quoted = text.strip()[:_QUOTE]
        return Malformed(PARSE_ERROR, f"Parse error: not JSON ({exc}): {quoted!r}")
    if not isinstance(message, dict):
        return Malformed(
            INVALID_REQUEST,
            f"Invalid Request: a message is a JSON object, not {_kind(message)}",
        )
    rid = _request_id(message)
    if message.get("jsonrpc") != "2.0":
        return Malformed(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', rid)
    if "method" in message:
        return _request(message, rid)
    if "result" in message or "error" in message:
        # A response from the client: nobody waits for an answer to it.
        return Malformed(
            INVALID_REQUEST, "Invalid Request: a response that is not JSON-RPC 2.0", rid, False
        )
    return Malformed(
        INVALID_REQUEST, "Invalid Request: neither a request, a notification nor a response", rid
    )


def _request(message: dict[str, Any], rid: str | int | None) -> Malformed:
    """What is wrong with a JSON-RPC 2.0 request or notification (it has a method), whose
    id reads as ``rid``."""
    if "id" in message and rid is None:
        what = _kind(message["id"])
        return Malformed(
            INVALID_REQUEST, f"Invalid Request: an id is a string or an integer, not {what}"
        )
    method = message["method"]
    if not isinstance(method, str):
        return Malformed(
            INVALID_REQUEST, f"Invalid Request: a method is a string, not {_kind(method)}", rid
        )
    params = message.get("params")
    if params is not None and not isinstance(params, dict):
        return Malformed(
            INVALID_PARAMS,
            f"Invalid params: {method} takes its params as an object, not {_kind(params)}",
            rid,
            answer=rid is not None,
        )
    return Malformed(INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 request", rid)
