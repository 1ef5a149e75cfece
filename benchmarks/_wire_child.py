"""The child half of ``bench_wire``: the caller, and the clock, of every wire benchmark.

Run by the parent as ``python -m benchmarks._wire_child MODE READ_FD WRITE_FD [options]``
over two inherited OS pipes (the call channel). The child warms up, times the measured
part alone with ``perf_counter_ns``, writes one :class:`ChildReport` as JSON on stdout and
closes the channel, which ends the parent's side of the session (it reads EOF).

Modes (the child is the same whichever parent answers it):

* ``seq``: ``count`` blocking :meth:`protocol.Client.call` of the ``echo`` tool, one
  after the other.
* ``gather``: ``count`` batches of 64 :meth:`protocol.Client.acall` under
  ``asyncio.gather``: 64 requests written, then 64 responses read.
* ``raw64``: ``count`` batches of 64 pre-encoded request frames written with plain
  ``os.write``, then 64 response frames read with ``os.read`` and only counted, so the
  child's own cost is as small as it can be and the parent's cost dominates.
* ``bulk``: ``count`` blocking calls of the ``blob`` tool, whose value is a string of
  ``size`` bytes (the parent -> child direction).

Only the standard library, msgspec and ``protocol`` are imported (asyncio only in
``gather``), as in a real child. ``--cpu N`` pins the child to one CPU before it starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Final

import msgspec

from protocol import VERSION, Client, Request, Response, frame_message

__all__ = ["BATCH", "BLOB_TOOL", "ECHO_ARGS", "ECHO_TOOL", "MODES", "ChildReport", "main"]

#: The small call of every latency and throughput benchmark: ``echo`` with ``{"x":1}``.
ECHO_TOOL: Final = "echo"
ECHO_ARGS: Final = '{"x":1}'
#: The bulk tool: its value is a string of the size the request's args name.
BLOB_TOOL: Final = "blob"
#: Calls in flight in the pipelined benchmarks (the protocol's default in-flight cap).
BATCH: Final = 64
MODES: Final = ("seq", "gather", "raw64", "bulk")

_PREFIX: Final = 4
_READ_CHUNK: Final = 1 << 16


class ChildReport(msgspec.Struct, frozen=True, kw_only=True):
    """What the child measured: the timed part only, warm-up excluded.

    Attributes:
        ns: elapsed nanoseconds of the timed part (``perf_counter_ns``).
        calls: calls answered in the timed part.
        bytes: value bytes received in the timed part (bulk only; else 0).
    """

    ns: int
    calls: int
    bytes: int = 0


def _check(value: str, expected: str) -> None:
    if value != expected:
        raise RuntimeError(f"unexpected value {value[:60]!r}, wanted {expected[:60]!r}")


def run_seq(client: Client, count: int, warmup: int) -> ChildReport:
    """Sequential blocking round trips of the small ``echo`` call."""
    call = client.call
    for _ in range(warmup):
        _check(call(ECHO_TOOL, ECHO_ARGS), ECHO_ARGS)
    t0 = time.perf_counter_ns()
    for _ in range(count):
        call(ECHO_TOOL, ECHO_ARGS)
    elapsed = time.perf_counter_ns() - t0
    _check(call(ECHO_TOOL, ECHO_ARGS), ECHO_ARGS)  # still answering correctly afterwards
    return ChildReport(ns=elapsed, calls=count)


def run_gather(client: Client, count: int, warmup: int) -> ChildReport:
    """Batches of 64 ``acall`` under ``asyncio.gather`` (the child's real asyncio form)."""
    import asyncio

    acall = client.acall

    async def batch() -> list[str]:
        return await asyncio.gather(*[acall(ECHO_TOOL, ECHO_ARGS) for _ in range(BATCH)])

    async def main() -> int:
        for _ in range(warmup):
            for value in await batch():
                _check(value, ECHO_ARGS)
        t0 = time.perf_counter_ns()
        for _ in range(count):
            await batch()
        elapsed = time.perf_counter_ns() - t0
        for value in await batch():
            _check(value, ECHO_ARGS)
        return elapsed

    return ChildReport(ns=asyncio.run(main()), calls=count * BATCH)


def run_raw64(read_fd: int, write_fd: int, count: int, warmup: int) -> ChildReport:
    """Batches of 64 pre-encoded frames written raw, then 64 answers read and counted.

    The responses are decoded and checked during warm-up and after the timed part; in the
    timed part they are only delimited by their length prefix.
    """
    os.set_blocking(read_fd, True)
    os.set_blocking(write_fd, True)
    frames = [
        bytes(frame_message(Request(v=VERSION, id=str(i), tool=ECHO_TOOL, args=ECHO_ARGS)))
        for i in range(1, BATCH + 1)
    ]
    decoder = msgspec.json.Decoder(Response)
    buf = bytearray()

    def batch(check: bool) -> None:
        for frame in frames:
            # Under PIPE_BUF bytes: a blocking pipe write is atomic and complete.
            if os.write(write_fd, frame) != len(frame):
                raise RuntimeError("short write of a small frame")
        got = 0
        while got < BATCH:
            data = os.read(read_fd, _READ_CHUNK)
            if not data:
                raise EOFError("the parent closed the call channel")
            buf.extend(data)
            end_of_data = len(buf)
            pos = 0
            while end_of_data - pos >= _PREFIX:
                end = pos + _PREFIX + int.from_bytes(buf[pos : pos + _PREFIX], "big")
                if end > end_of_data:
                    break
                if check:
                    response = decoder.decode(buf[pos + _PREFIX : end])
                    if not response.ok:
                        raise RuntimeError(f"call failed: {response.kind} {response.error}")
                    _check(response.value, ECHO_ARGS)
                got += 1
                pos = end
            del buf[:pos]
        if got != BATCH or buf:
            raise RuntimeError(f"expected {BATCH} responses, got {got} and {len(buf)} bytes")

    for _ in range(warmup):
        batch(True)
    t0 = time.perf_counter_ns()
    for _ in range(count):
        batch(False)
    elapsed = time.perf_counter_ns() - t0
    batch(True)
    return ChildReport(ns=elapsed, calls=count * BATCH)


def run_bulk(client: Client, size: int, count: int, warmup: int) -> ChildReport:
    """Blocking calls of ``blob`` whose value is ``size`` bytes (parent -> child)."""
    call = client.call
    args = str(size)
    for _ in range(warmup):
        if len(call(BLOB_TOOL, args)) != size:
            raise RuntimeError("blob of the wrong size")
    t0 = time.perf_counter_ns()
    for _ in range(count):
        call(BLOB_TOOL, args)
    elapsed = time.perf_counter_ns() - t0
    if len(call(BLOB_TOOL, args)) != size:
        raise RuntimeError("blob of the wrong size")
    return ChildReport(ns=elapsed, calls=count, bytes=size * count)


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, run one mode, report on stdout, close the channel."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks._wire_child")
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("read_fd", type=int, help="the descriptor responses arrive on")
    parser.add_argument("write_fd", type=int, help="the descriptor requests leave by")
    parser.add_argument("--count", type=int, required=True, help="timed calls or batches")
    parser.add_argument("--warmup", type=int, default=0, help="untimed calls or batches")
    parser.add_argument("--size", type=int, default=0, help="bulk value size in bytes")
    parser.add_argument("--cpu", type=int, default=-1, help="pin to this CPU; -1: don't")
    opts = parser.parse_args(argv)
    if opts.cpu >= 0:
        os.sched_setaffinity(0, {opts.cpu})
    if opts.mode == "raw64":
        try:
            report = run_raw64(opts.read_fd, opts.write_fd, opts.count, opts.warmup)
        finally:
            os.close(opts.read_fd)
            os.close(opts.write_fd)
    else:
        client = Client(opts.read_fd, opts.write_fd)
        try:
            if opts.mode == "seq":
                report = run_seq(client, opts.count, opts.warmup)
            elif opts.mode == "gather":
                report = run_gather(client, opts.count, opts.warmup)
            else:
                report = run_bulk(client, opts.size, opts.count, opts.warmup)
        finally:
            client.close()  # the parent reads EOF: its side of the session ends
    sys.stdout.buffer.write(msgspec.json.encode(report) + b"\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
