"""Wire benchmark: the parent's call-channel cost against a raw blocking pipe, same run.

Usage::

    .venv/bin/python -m benchmarks.bench_wire [--quick] [--rounds N] [--json PATH]

Theory of operation
-------------------
Every measurement is one *session*: a fresh child process (``benchmarks._wire_child``)
started with ``subprocess.Popen`` over two OS pipes, the call channel. The child is the
caller and the clock: it warms up, times its calls with ``perf_counter_ns``, reports the
timed part as JSON on stdout and closes the channel. The parent (this process) answers the
calls with one of these *variants*:

* ``raw``: the baseline. Plain blocking ``os.read``/``os.write`` with the same 4-byte
  big-endian framing, ``msgspec.json.Decoder(protocol.Request)`` to decode and
  :func:`protocol.frame_message` of a :class:`protocol.Response` to encode; one write per
  response, no admission, no accounting, no event loop.
* ``asyncio``, ``uvloop``, ``trio``: :class:`protocol.Server` over
  :class:`protocol.FdChannel`, under ``anyio.run`` on that backend, with a synchronous
  handler (answered inline). ``uvloop`` is left out when it cannot be imported.

The benchmarks (what the child does):

* ``seq``: sequential round trips of ``echo`` with ``{"x":1}``, the blocking
  :meth:`protocol.Client.call` (latency, µs per call).
* ``pipe_gather``: 64 calls in flight, the child's asyncio form (``acall`` under
  ``asyncio.gather``), so the child's asyncio cost is in every row including the baseline.
* ``pipe_raw``: 64 in flight, the child writes 64 pre-encoded frames then reads 64 with
  plain ``os.read``: the child's cost is minimal, which isolates the parent's.
* ``bulk_1m``, ``bulk_16m``: the child calls ``blob`` and the parent answers with a string
  value of 1 MiB, or of 16 MiB less 256 bytes (so the Response fits the 16 MiB frame cap):
  the parent -> child direction, in MB/s (10**6 bytes of value per second).

Noise: absolute numbers drift by tens of percent on this kind of machine (PERF-NOTES), so
all variants of a benchmark run one after the other, round-robin, in every round, starting
from a different variant each round; each round's variant is divided by the same round's
raw baseline, and the table gives the median [min-max] of those per-round ratios.

CPU placement (``--pin``, default ``none`` and ``same``): on a 2-vCPU VM a wake-up that
crosses CPUs can cost tens of microseconds, and whether it happens depends on where the
scheduler put the two processes, so unpinned round trips are bimodal. Each placement is
measured and reported on its own; pinned to one CPU the numbers are steady and the ratios
show the parents' own CPU cost.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import anyio
import msgspec

from protocol import VERSION, CallStats, FdChannel, Request, Response, Server, frame_message

from ._machine import environment
from ._wire_child import BATCH, BLOB_TOOL, ECHO_TOOL, ChildReport

ROOT: Final = Path(__file__).resolve().parent.parent
RESULTS_DIR: Final = ROOT / "benchmarks" / "results"

MIB: Final = 1 << 20
#: The largest value that fits one frame: the 16 MiB cap less room for the Response's
#: envelope (``{"v":1,"id":"...","ok":true,"value":"..."}``).
BULK_16M_VALUE: Final = 16 * MIB - 256
_READ_CHUNK: Final = 1 << 16
_PREFIX: Final = 4

BenchKind = Literal["latency", "pipelined", "bulk"]
RawHandler = Callable[[Request], str]

#: Where the two processes run. ``none``: wherever the scheduler puts them. ``same``: both
#: pinned to one CPU (every wake-up is a context switch on that CPU). ``split``: parent and
#: child on two different CPUs (every wake-up crosses CPUs).
PINS: Final = ("none", "same", "split")


# -- what is measured ------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One way for the parent to answer the call channel."""

    key: str
    label: str
    backend: str | None  # None: the raw blocking baseline, no event loop
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Bench:
    """One benchmark: what the child does, and how its number compares with raw.

    ``targets`` maps a variant to its ratio target: a ceiling on the time ratio for
    ``latency``, a floor on the throughput ratio for ``pipelined``.
    """

    key: str
    title: str
    kind: BenchKind
    mode: str
    count: int
    warmup: int
    size: int = 0
    targets: dict[str, float] = field(default_factory=dict)

    @property
    def expected_calls(self) -> int:
        """Calls the parent must answer in one session (warm-up, timed, final check)."""
        per = BATCH if self.mode in ("gather", "raw64") else 1
        return (self.warmup + self.count + 1) * per


RAW: Final = Variant("raw", "raw blocking os.read/os.write + msgspec (baseline)", None)


def available_variants() -> list[Variant]:
    """The parent variants this machine can run (uvloop only if it imports)."""
    variants = [RAW, Variant("asyncio", "protocol.Server, anyio on asyncio", "asyncio")]
    try:
        import uvloop  # noqa: F401  (only probing that it imports)
    except ImportError:
        pass
    else:
        variants.append(
            Variant(
                "uvloop",
                "protocol.Server, anyio on asyncio+uvloop",
                "asyncio",
                {"use_uvloop": True},
            )
        )
    variants.append(Variant("trio", "protocol.Server, anyio on trio", "trio"))
    return variants


# The targets: sequential round trip within 3.5x raw on plain asyncio and within
# 2x on uvloop or trio; 64 in flight at least 0.5x raw throughput (per call <= 2x raw).
SEQ_TARGETS: Final = {"asyncio": 3.5, "uvloop": 2.0, "trio": 2.0}
PIPE_TARGETS: Final = {"asyncio": 0.5, "uvloop": 0.5, "trio": 0.5}


def make_benches(quick: bool) -> list[Bench]:
    """The five benchmarks, sized for a full run or for ``--quick``."""
    q = quick
    return [
        Bench(
            "seq",
            '(a) sequential round trip: echo {"x":1}, child blocking Client.call',
            "latency",
            "seq",
            count=4_000 if q else 20_000,
            warmup=500 if q else 2_000,
            targets=SEQ_TARGETS,
        ),
        Bench(
            "pipe_gather",
            "(b1) 64 in flight: child Client.acall x64 under asyncio.gather "
            "(child asyncio cost in every row)",
            "pipelined",
            "gather",
            count=150 if q else 1_000,
            warmup=20 if q else 50,
            targets=PIPE_TARGETS,
        ),
        Bench(
            "pipe_raw",
            "(b2) 64 in flight: child writes 64 raw frames, then reads 64 (isolates the parent)",
            "pipelined",
            "raw64",
            count=300 if q else 1_000,
            warmup=20 if q else 50,
            targets=PIPE_TARGETS,
        ),
        Bench(
            "bulk_1m",
            "(c1) bulk parent->child: value of 1 MiB per call",
            "bulk",
            "bulk",
            count=16 if q else 64,
            warmup=2 if q else 4,
            size=MIB,
        ),
        Bench(
            "bulk_16m",
            "(c2) bulk parent->child: value of 16 MiB - 256 B per call",
            "bulk",
            "bulk",
            count=2 if q else 8,
            warmup=1,
            size=BULK_16M_VALUE,
        ),
    ]


# -- the parent's side of one session ---------------------------------------------------


def echo_handler(request: Request) -> str:
    """The ``echo`` tool: the args, as they came, answered synchronously."""
    return request.args


def blob_handler(size: int) -> RawHandler:
    """The ``blob`` tool: a prebuilt ASCII string of ``size`` bytes."""
    blob = "x" * size

    def handler(request: Request) -> str:
        if request.tool != BLOB_TOOL:
            raise ValueError(f"unexpected tool {request.tool!r}")
        return blob

    return handler


def _write_all(fd: int, data: bytearray) -> None:
    with memoryview(data) as view:
        while view:
            view = view[os.write(fd, view) :]


def serve_raw(read_fd: int, write_fd: int, handler: RawHandler) -> int:
    """The baseline: answer calls with blocking ``os.read``/``os.write`` until EOF.

    Returns:
        The number of calls answered.
    """
    decoder = msgspec.json.Decoder(Request)
    buf = bytearray()
    calls = 0
    while True:
        data = os.read(read_fd, _READ_CHUNK)
        if not data:
            if buf:
                raise RuntimeError(f"{len(buf)} bytes of a truncated frame at EOF")
            return calls
        buf += data
        end_of_data = len(buf)
        pos = 0
        while end_of_data - pos >= _PREFIX:
            end = pos + _PREFIX + int.from_bytes(buf[pos : pos + _PREFIX], "big")
            if end > end_of_data:
                break
            request = decoder.decode(buf[pos + _PREFIX : end])
            pos = end
            response = Response(v=VERSION, id=request.id, ok=True, value=handler(request))
            _write_all(write_fd, frame_message(response))
            calls += 1
        if pos:
            del buf[:pos]


async def serve_protocol(channel: FdChannel, handler: RawHandler) -> CallStats:
    """A variant: :class:`protocol.Server` until the child closes the channel."""
    server = Server(channel, handler)
    await server.serve()
    return server.statistics()


def _close_fds(*fds: int) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def placement(pin: str) -> tuple[int | None, int | None]:
    """The CPUs of the parent and of the child for ``pin`` (None: not pinned).

    Raises:
        ValueError: ``split`` on a machine with one usable CPU.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if pin == "none":
        return None, None
    if pin == "same":
        return cpus[0], cpus[0]
    if len(cpus) < 2:
        raise ValueError("--pin split needs two CPUs")
    return cpus[0], cpus[1]


@dataclass
class _Stop:
    """Ctrl-C or SIGTERM: the signal seen, and the child of the session running now."""

    signum: int = 0
    proc: subprocess.Popen[bytes] | None = None


_STOP: Final = _Stop()


def _on_stop_signal(signum: int, frame: object) -> None:
    """Kill the running child; the session then ends (its parent reads EOF) and the run stops.

    Raising from the handler instead would land inside an event loop's internals (trio's
    or uvloop's), which then fail untidily; killing the child ends the session cleanly.
    """
    _STOP.signum = signum
    proc = _STOP.proc
    if proc is not None:
        try:
            proc.kill()
        except OSError:
            pass


def _check_stop() -> None:
    if _STOP.signum == signal.SIGINT:
        raise KeyboardInterrupt
    if _STOP.signum:
        raise SystemExit(128 + _STOP.signum)


def run_session(bench: Bench, variant: Variant, timeout: float, pin: str) -> ChildReport:
    """Start a child, answer its calls with ``variant``, return what the child timed.

    The child is killed and reaped whatever happens; a child that takes longer than
    ``timeout`` seconds is killed by a watchdog (the parent then reads EOF) and the
    session fails with :class:`TimeoutError`.

    Raises:
        TimeoutError: the session overran ``timeout``.
        RuntimeError: the child failed, or the parent answered a different number of calls.
        KeyboardInterrupt: Ctrl-C (SIGINT) during the session.
        SystemExit: SIGTERM during the session.
    """
    _check_stop()
    parent_cpu, child_cpu = placement(pin)
    up_r, up_w = os.pipe()  # child -> parent: requests
    down_r, down_w = os.pipe()  # parent -> child: responses
    cmd = [
        sys.executable,
        "-m",
        "benchmarks._wire_child",
        bench.mode,
        str(down_r),
        str(up_w),
        f"--count={bench.count}",
        f"--warmup={bench.warmup}",
        f"--size={bench.size}",
        f"--cpu={-1 if child_cpu is None else child_cpu}",
    ]
    try:
        proc = subprocess.Popen(
            cmd, pass_fds=(down_r, up_w), stdout=subprocess.PIPE, cwd=ROOT, env=_child_env()
        )
    except BaseException:
        _close_fds(up_r, down_w)
        raise
    finally:
        _close_fds(down_r, up_w)  # the child's ends: only the child may hold them now

    handler = echo_handler if bench.mode != "bulk" else blob_handler(bench.size)
    expired = threading.Event()

    def on_timeout() -> None:
        expired.set()
        proc.kill()

    watchdog = threading.Timer(timeout, on_timeout)
    watchdog.daemon = True
    own_cpus = os.sched_getaffinity(0)
    _STOP.proc = proc
    try:
        _check_stop()  # a signal that came while the child was being started
        watchdog.start()
        if parent_cpu is not None:
            os.sched_setaffinity(0, {parent_cpu})
        if variant.backend is None:
            try:
                calls = serve_raw(up_r, down_w, handler)
            finally:
                _close_fds(up_r, down_w)
            refused = 0
        else:
            channel = FdChannel(up_r, down_w)  # owns the two descriptors from here
            try:
                stats = anyio.run(
                    serve_protocol,
                    channel,
                    handler,
                    backend=variant.backend,
                    backend_options=variant.options,
                )
            finally:
                channel.close()
            calls, refused = stats.calls, stats.refused
        out, _ = proc.communicate(timeout=timeout)
        _check_stop()
        if expired.is_set():
            raise TimeoutError(f"{bench.key}/{variant.key}: session overran {timeout} s")
        if proc.returncode != 0:
            raise RuntimeError(f"{bench.key}/{variant.key}: child exited {proc.returncode}")
        if calls != bench.expected_calls or refused:
            raise RuntimeError(
                f"{bench.key}/{variant.key}: parent answered {calls} calls "
                f"({refused} refused), expected {bench.expected_calls}"
            )
        return msgspec.json.decode(out, type=ChildReport)
    except Exception:
        _check_stop()  # the failure is the child we killed on the signal: report the signal
        raise
    finally:
        _STOP.proc = None
        os.sched_setaffinity(0, own_cpus)
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


# -- numbers --------------------------------------------------------------------------


def value_of(bench: Bench, report: ChildReport) -> float:
    """The session's number: µs per call, or MB/s for bulk."""
    if bench.kind == "bulk":
        return report.bytes / report.ns * 1e3  # bytes/ns * 1e9 / 1e6
    return report.ns / report.calls / 1e3


def ratio_of(bench: Bench, value: float, raw: float) -> float:
    """The per-round ratio to raw: time ratio for latency, throughput ratio otherwise."""
    if bench.kind == "latency":
        return value / raw  # µs / raw µs: lower is better
    if bench.kind == "pipelined":
        return raw / value  # calls/s / raw calls/s: higher is better
    return value / raw  # MB/s / raw MB/s: higher is better


def verdict(bench: Bench, variant: str, ratio: float) -> tuple[str, str]:
    """The target as text and PASS/MISS, or ("", "") when there is no target."""
    target = bench.targets.get(variant)
    if target is None:
        return "", ""
    if bench.kind == "latency":
        return f"<={target:g}x", "PASS" if ratio <= target else "MISS"
    return f">={target:g}x", "PASS" if ratio >= target else "MISS"


def summarize(xs: Sequence[float]) -> dict[str, float]:
    """Median, min and max."""
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


# -- the run --------------------------------------------------------------------------


Reports = dict[str, dict[str, dict[str, list[ChildReport]]]]  # pin -> bench -> variant


def run_all(
    benches: list[Bench], variants: list[Variant], pins: list[str], rounds: int, timeout: float
) -> Reports:
    """Every placement, benchmark and variant, ``rounds`` times, interleaved round-robin.

    In each round, each placement and benchmark runs all its variants back to back; the
    variant that goes first moves by one every round, so no variant always follows the
    same one.
    """
    reports: Reports = {
        pin: {b.key: {v.key: [] for v in variants} for b in benches} for pin in pins
    }
    for r in range(rounds):
        shift = r % len(variants)
        order = variants[shift:] + variants[:shift]
        for pin in pins:
            for bench in benches:
                line = []
                for variant in order:
                    report = run_session(bench, variant, timeout, pin)
                    reports[pin][bench.key][variant.key].append(report)
                    line.append(f"{variant.key} {_fmt(bench, value_of(bench, report))}")
                print(
                    f"  round {r + 1}/{rounds} pin={pin:5} {bench.key:12} " + ", ".join(line),
                    flush=True,
                )
    return reports


def _fmt(bench: Bench, x: float) -> str:
    return f"{x:.0f} MB/s" if bench.kind == "bulk" else f"{x:.2f} us"


def analyse(
    benches: list[Bench], variants: list[Variant], reports: dict[str, dict[str, list[ChildReport]]]
) -> dict[str, Any]:
    """Values, per-round ratios, summaries and verdicts, ready for the table and JSON."""
    out: dict[str, Any] = {}
    for bench in benches:
        raw_values = [value_of(bench, rep) for rep in reports[bench.key][RAW.key]]
        per_variant: dict[str, Any] = {}
        for variant in variants:
            reps = reports[bench.key][variant.key]
            values = [value_of(bench, rep) for rep in reps]
            ratios = [ratio_of(bench, v, raw) for v, raw in zip(values, raw_values, strict=True)]
            ratio_summary = summarize(ratios)
            target, status = verdict(bench, variant.key, ratio_summary["median"])
            entry: dict[str, Any] = {
                "label": variant.label,
                "samples": [msgspec.structs.asdict(rep) for rep in reps],
                "values": values,
                "value": summarize(values),
                "ratios": ratios,
                "ratio": ratio_summary,
                "target": target or None,
                "status": status or None,
            }
            if bench.kind != "bulk":
                entry["calls_per_s"] = summarize([1e6 / v for v in values])
            per_variant[variant.key] = entry
        out[bench.key] = {
            "title": bench.title,
            "kind": bench.kind,
            "child_mode": bench.mode,
            "count": bench.count,
            "warmup": bench.warmup,
            "value_bytes": bench.size or None,
            "unit": "MB/s (10**6 value bytes per s)" if bench.kind == "bulk" else "us per call",
            "ratio_definition": {
                "latency": "variant us / raw us, per round (lower is better)",
                "pipelined": "variant calls/s / raw calls/s = raw us / variant us, per round "
                "(higher is better)",
                "bulk": "variant MB/s / raw MB/s, per round (higher is better)",
            }[bench.kind],
            "variants": per_variant,
        }
    return out


PIN_TITLES: Final = {
    "none": "processes not pinned (the scheduler places parent and child)",
    "same": "parent and child pinned to the same CPU",
    "split": "parent and child pinned to two different CPUs",
}


def print_table(
    pin: str, benches: list[Bench], variants: list[Variant], results: dict[str, Any]
) -> None:
    """The readable table: median [min-max] of each number and of each per-round ratio."""
    print()
    print(f"=== pin={pin}: {PIN_TITLES[pin]} ===")
    for bench in benches:
        res = results[bench.key]
        print()
        print(bench.title)
        if bench.kind == "bulk":
            head, ratio_head = "MB/s median [min-max]", "xraw MB/s"
        elif bench.kind == "pipelined":
            head, ratio_head = "us/call median [min-max]", "xraw calls/s"
        else:
            head, ratio_head = "us/RT median [min-max]", "xraw time"
        print(
            f"  {'parent':48} {head:26} {'calls/s':>8}  {ratio_head + ' [min-max]':24} "
            f"{'target':7} result"
        )
        for variant in variants:
            e = res["variants"][variant.key]
            v, rt = e["value"], e["ratio"]
            digits = 0 if bench.kind == "bulk" else 2
            num = f"{v['median']:.{digits}f} [{v['min']:.{digits}f}-{v['max']:.{digits}f}]"
            cps = f"{e['calls_per_s']['median'] / 1e3:.1f}k" if "calls_per_s" in e else ""
            rat = f"{rt['median']:.2f} [{rt['min']:.2f}-{rt['max']:.2f}]"
            print(
                f"  {variant.label:48} {num:26} {cps:>8}  {rat:24} "
                f"{e['target'] or '':7} {e['status'] or ''}"
            )


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_wire",
        description="Call-channel cost of protocol.Server on anyio (asyncio, uvloop, trio) "
        "against a raw blocking pipe, measured in the same run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer calls and 3 rounds (under a minute)"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds (default 5, quick 3)"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="where to write the results (default benchmarks/results/wire-<date>[-quick].json)",
    )
    parser.add_argument(
        "--bench",
        action="append",
        choices=["seq", "pipe_gather", "pipe_raw", "bulk_1m", "bulk_16m"],
        help="run only this benchmark (repeatable; default all)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        choices=["asyncio", "uvloop", "trio"],
        help="run only this parent variant, beside the raw baseline (repeatable)",
    )
    parser.add_argument(
        "--pin",
        action="append",
        choices=PINS,
        help="CPU placement of parent and child (repeatable; default: none and same)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds before a session is killed"
    )
    opts = parser.parse_args(argv)
    if opts.rounds is not None and opts.rounds < 1:
        parser.error("--rounds must be at least 1")
    return opts


def main(argv: list[str] | None = None) -> None:
    """Run the benchmarks, print the table, write the JSON."""
    signal.signal(signal.SIGINT, _on_stop_signal)
    signal.signal(signal.SIGTERM, _on_stop_signal)
    args = sys.argv[1:] if argv is None else argv
    opts = parse_args(args)
    rounds: int = opts.rounds or (3 if opts.quick else 5)
    variants = available_variants()
    if opts.variant:
        variants = [v for v in variants if v is RAW or v.key in opts.variant]
    benches = make_benches(opts.quick)
    if opts.bench:
        benches = [b for b in benches if b.key in opts.bench]
    pins: list[str] = list(dict.fromkeys(opts.pin or ["none", "same"]))
    for pin in pins:
        placement(pin)  # fail now, not after minutes of measuring
    meta = environment(args)
    if variants != available_variants() or opts.bench:
        print("note: a subset run; its ratios are still per round against raw")
    print(
        f"wire benchmark: {rounds} rounds x pins {'/'.join(pins)} x {len(benches)} benchmarks "
        f"x {len(variants)} parents ({', '.join(v.key for v in variants)}), interleaved; "
        "one child process per session"
    )
    t0 = dt.datetime.now()
    try:
        reports = run_all(benches, variants, pins, rounds, opts.timeout)
    except KeyboardInterrupt:
        print("interrupted: the running child was killed and reaped", file=sys.stderr)
        raise SystemExit(130) from None
    wall = (dt.datetime.now() - t0).total_seconds()
    results = {pin: analyse(benches, variants, reports[pin]) for pin in pins}
    for pin in pins:
        print_table(pin, benches, variants, results[pin])
    misses = [
        f"pin={pin} {b.key}/{v.key}"
        for pin in pins
        for b in benches
        for v in variants
        if results[pin][b.key]["variants"][v.key]["status"] == "MISS"
    ]
    print()
    print(f"targets missed: {', '.join(misses) if misses else 'none'}   (wall {wall:.1f} s)")

    meta["loadavg_at_end"] = list(os.getloadavg())
    meta["wall_seconds"] = round(wall, 2)
    document = {
        "benchmark": "bench_wire",
        "environment": meta,
        "parameters": {
            "rounds": rounds,
            "quick": opts.quick,
            "pins": {pin: PIN_TITLES[pin] for pin in pins},
            "inflight": BATCH,
            "echo": {"tool": ECHO_TOOL, "args": '{"x":1}'},
            "bulk_direction": "parent -> child (Response.value of the blob tool)",
            "variants": {v.key: v.label for v in variants},
            "variant_order_per_round": [
                [v.key for v in variants[r % len(variants) :] + variants[: r % len(variants)]]
                for r in range(rounds)
            ],
            "targets": {"seq": SEQ_TARGETS, "pipe_gather": PIPE_TARGETS, "pipe_raw": PIPE_TARGETS},
        },
        "results": results,
        "targets_missed": misses,
    }
    path: Path = opts.json or RESULTS_DIR / (
        f"wire-{dt.date.today().isoformat()}{'-quick' if opts.quick else ''}.json"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n")
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
