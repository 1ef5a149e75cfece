"""The words of the parent's own failures: each names the tool and the limit, counts
agree with their nouns (``1 call``), sizes are in binary units (``2 KiB``)."""

from __future__ import annotations

from protocol import CallLimits, Request, ServerCore
from protocol._messages import RESPONSE_DECODER, decode


def request(call_id: str, tool: str = "search", deadline_ms: int = 0) -> Request:
    return Request(v=1, id=call_id, tool=tool, args="[]", deadline_ms=deadline_ms)


def error_of(frame: bytes | bytearray | None) -> str:
    assert frame is not None
    response = decode(RESPONSE_DECODER, memoryview(frame)[4:])
    assert response.ok is False
    return response.error or ""


def test_a_passed_deadline_names_the_tool_the_time_and_whose_it_was() -> None:
    """``search: call deadline of 2 s passed (max_call_deadline)``; a shorter deadline the
    caller asked for is named as the caller's."""
    server = ServerCore(CallLimits(max_call_deadline=2.0))
    assert server.admit(request("a", "search")) is None
    assert server.admit(request("b", "fetch", deadline_ms=500)) is None
    server.arm_deadline("a", 0, now=0.0, tool="search")
    server.arm_deadline("b", 500, now=0.0, tool="fetch")
    expired = dict(server.expire(5.0))
    assert error_of(expired["a"]) == "search: call deadline of 2 s passed (max_call_deadline)"
    assert error_of(expired["b"]) == "fetch: call deadline of 0.5 s passed (the caller's own)"


def test_quotas_say_one_call_and_sizes_in_binary_units() -> None:
    """A quota of one call says ``1 call``; a byte quota says ``2 KiB``, not 2048 bytes."""
    one = ServerCore(CallLimits(max_calls=1))
    assert one.admit(request("a")) is None
    assert error_of(one.admit(request("b"))) == "search: call quota of 1 call used up"
    inflight = ServerCore(CallLimits(max_inflight=1))
    assert inflight.admit(request("a")) is None
    assert error_of(inflight.admit(request("b"))) == "search: in-flight cap of 1 call reached"
    small = ServerCore(CallLimits(max_bytes=2048))
    assert small.admit(request("a")) is None
    error = error_of(small.settle("a", "x" * 3000))
    assert error == "result of 2.93 KiB would pass the quota of 2 KiB (0 bytes already delivered)"
    assert small.admit(request("b")) is None
    assert small.settle("b", "x" * 2048) is not None
    assert error_of(small.admit(request("c"))) == "search: result quota of 2 KiB used up"
