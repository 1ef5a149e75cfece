"""Programs that send the wire's hostile shapes themselves (issue 12): whatever the bytes,
``sandbox.run`` returns a RunResult whose cause is ``protocol``, and the host survives."""

from __future__ import annotations

from typing import Any

import pytest

import sandbox
from sandbox import Budget, BudgetError, Kind, Level

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("spawn")]

# The runner's arguments, up the stack, carry the channels' descriptors: start (read,
# write), call (read, write). The program writes one frame itself, on the channel's write
# end, then waits.
_PROGRAM = """\
import os, sys, time
frame = sys._getframe()
while frame is not None and type(frame.f_locals.get("args")).__name__ != "Arguments":
    frame = frame.f_back
args = frame.f_locals["args"]
fds = (*args.start_fds, *args.call_fds)
payload = {payload!r}
os.write(fds[{fd}], len(payload).to_bytes(4, "big") + payload)
time.sleep(600)
"""

_DEEP = b'{"x":' + b"[" * 10_000 + b"]" * 10_000 + b"}"
_DEEP_V = b'{"v":[' + b"[" * 1_000 + b"]" * 1_000 + b"]}"
_HUGE_DEADLINE = b'{"v":1,"id":"1","tool":"echo","args":"1","deadline_ms":1' + b"0" * 400 + b"}"


def echo(n: int) -> int:
    return n


@pytest.mark.parametrize(
    ("payload", "fd"),
    [(_DEEP, 3), (_DEEP_V, 3), (_DEEP, 1), (_HUGE_DEADLINE, 3)],
    ids=["deep-on-call", "deep-v-on-call", "deep-on-start", "deadline-past-int64"],
)
async def test_a_hostile_frame_is_a_protocol_failure(payload: bytes, fd: int) -> None:
    """A frame no decoder can follow, on either channel, or a deadline past int64, ends the
    run as a protocol failure: a RunResult, never an exception out of ``run``."""
    program = _PROGRAM.format(payload=payload, fd=fd)
    result = await sandbox.run(
        program, tools=[echo], budget=Budget(wall_clock=10.0), level=Level.PROCESS
    )
    assert (result.kind, result.cause) == (Kind.UNKNOWN, "protocol"), result.error
    assert result.wall_time < 10


@pytest.mark.parametrize(
    "items",
    [{"wall_clock": 1e10}, {"wall_clock": 10.0, "max_calls": 2**63}, {"max_memory": 2**63}],
    ids=["wall-clock-past-int64-ns", "max-calls-past-int64", "max-memory-past-int64"],
)
def test_a_budget_the_wire_cannot_carry_is_refused_when_made(items: dict[str, Any]) -> None:
    """A budget past Go's int64 (292 years of wall clock in ns, say) could not be sent in a
    Start: it is refused when it is made, naming the item, before anything runs."""
    with pytest.raises(BudgetError) as info:
        Budget(**items)
    (item,) = info.value.items
    assert item in items
    assert "int64" in str(info.value)
