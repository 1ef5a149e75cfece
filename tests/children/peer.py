"""A child peer for end-to-end tests: speaks the wire over inherited descriptors.

Usage: ``python peer.py START_R START_W CALL_R CALL_W MODE [ARG]``. The modes:

* ``echo N``: await Start, make N blocking ``echo`` calls with ``{"i": k}``, report the
  values joined in Result.value.
* ``gather N``: the same N calls, concurrently under asyncio.gather.
* ``calls-from-start``: run the Start's program as a list of ``[tool, args, deadline_ms]``
  calls made concurrently; Result.value is a JSON list of ``[ok, value or kind]``.
* ``lie``: make one call, then report calls=1000 and bytes=10**9 in Result.
* ``silent``: never read Start; sleep.
* ``wait-eof``: make one call to ``block`` and report what happened to it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from protocol import VERSION, CallError, Client, Result, Runner


def main() -> None:
    start_r, start_w, call_r, call_w = (int(x) for x in sys.argv[1:5])
    mode = sys.argv[5]
    arg = sys.argv[6] if len(sys.argv) > 6 else ""
    if mode == "silent":
        time.sleep(60)
        return
    runner = Runner(start_r, start_w)
    client = Client(call_r, call_w)
    start = runner.await_start(timeout=30)
    value = ""
    calls_report = None
    if mode == "echo":
        value = ",".join(client.call("echo", json.dumps({"i": k})) for k in range(int(arg)))
    elif mode == "gather":

        async def go() -> list[str]:
            return await asyncio.gather(
                *(client.acall("echo", json.dumps({"i": k})) for k in range(int(arg)))
            )

        value = ",".join(asyncio.run(go()))
    elif mode == "calls-from-start":

        async def one(tool: str, args: str, deadline_ms: int) -> list[object]:
            try:
                return [True, await client.acall(tool, args, deadline_ms=deadline_ms)]
            except CallError as exc:
                return [False, exc.kind.value]

        async def run_all() -> list[list[object]]:
            return await asyncio.gather(*(one(*c) for c in json.loads(start.program)))

        value = json.dumps(asyncio.run(run_all()))
    elif mode == "lie":
        client.call("echo", "1")
        calls_report = 1000
    elif mode == "wait-eof":
        try:
            client.call("block", "")
            value = "answered"
        except CallError as exc:
            value = exc.kind.value
    runner.send_result(
        Result(
            v=VERSION,
            result_id=start.result_id,
            ok=True,
            value=value,
            calls=client.calls_made if calls_report is None else calls_report,
            bytes=client.bytes_received if calls_report is None else 10**9,
        )
    )


if __name__ == "__main__":
    main()
