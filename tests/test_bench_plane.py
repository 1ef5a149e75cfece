"""The plane benchmark (``benchmarks/bench_plane.py``): a smoke run measures every variant
of every operation and writes a JSON with positive numbers and ratios.

Nothing here asserts on speed: only that every number is there and sane. The benchmark runs
in a subprocess of its own session, so that its servers can be ended with it if it fails
or overruns.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = {
    "inprocess",
    "sdk_stdio",
    "remote_stdio",
    "sdk_http",
    "remote_http",
    "lines_stdio",
    "keepalive_http",
}
OPS = {"seq", "concurrent", "facts_1", "facts_16_batch", "facts_16_single"}
#: Each variant's baselines: every variant has InProcess; Remote has its transport's SDK;
#: the minimal client over HTTP has the same client over stdio.
BASELINES = {
    "inprocess": set(),
    "sdk_stdio": {"inprocess"},
    "sdk_http": {"inprocess"},
    "remote_stdio": {"inprocess", "sdk_stdio"},
    "remote_http": {"inprocess", "sdk_http"},
    "lines_stdio": {"inprocess"},
    "keepalive_http": {"inprocess", "lines_stdio"},
}
#: Well above the smoke run's ~7 s, under the suite's per-test timeout (60 s).
RUN_TIMEOUT = 45.0


def _positive(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _run_smoke(json_path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.bench_plane --smoke``; its process group (the benchmark and
    its HTTP server) is killed if it overruns or anything fails (the stdio servers end on
    their standard input's EOF)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.bench_plane", "--smoke", "--json", str(json_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def _check_latency(op: str, key: str, e: dict[str, Any]) -> None:
    assert e["n"] == sum(len(r) for r in e["samples_us"]) > 0, (op, key)
    assert all(_positive(x) for r in e["samples_us"] for x in r), (op, key)
    assert 0 < e["p50"] <= e["p90"] <= e["p99"], (op, key, e)
    assert _positive(e["mean"]), (op, key)
    assert all(_positive(x) for x in e["p50_per_round"]), (op, key)


def _check_ratios(op: str, key: str, kind: str, ratios: dict[str, Any]) -> None:
    assert BASELINES[key] <= set(ratios), (op, key, set(ratios))
    for base, r in ratios.items():
        if kind == "throughput":
            numbers = [r["median"], *r["per_round"], *r["per_round_summary"].values()]
        else:
            numbers = [r["p50"], r["p90"], r["p99"], *r["p50_per_round"]]
            numbers += r["p50_per_round_summary"].values()
        assert all(_positive(x) for x in numbers), (op, key, base, r)


@pytest.mark.slow
def test_smoke_run_writes_every_series(tmp_path: Path) -> None:
    """A smoke run exits 0 and writes, for every operation and variant, positive numbers and
    positive cost ratios to InProcess and (for Remote) to the SDK over the same transport,
    with the machine and the library versions."""
    json_path = tmp_path / "plane.json"
    done = _run_smoke(json_path)
    assert done.returncode == 0, done.stdout
    doc = json.loads(json_path.read_text())

    assert doc["benchmark"] == "bench_plane"
    assert doc["parameters"]["mode"] == "smoke"
    env = doc["environment"]
    for dist in ("mcp", "anyio", "msgspec"):
        assert env["versions"][dist], dist
    assert env["python"]
    assert env["cpu_count"] >= 1
    assert env["backend"] == "asyncio"
    assert set(doc["connect_ms"]) == VARIANTS

    results = doc["results"]
    assert set(results) >= OPS
    for op in OPS:
        res = results[op]
        assert set(res["variants"]) == VARIANTS, op
        for key, e in res["variants"].items():
            if res["kind"] == "throughput":
                assert all(_positive(x) for x in e["calls_per_s_per_round"]), (op, key)
                assert all(_positive(x) for x in e["calls_per_s"].values()), (op, key)
                assert all(_positive(x) for x in e["us_per_call"].values()), (op, key)
            else:
                _check_latency(op, key, e)
            _check_ratios(op, key, res["kind"], e["ratios"])
    for key, b in results["batching"]["variants"].items():
        assert all(_positive(x) for x in b["singles_over_batch_per_round"]), key
        assert all(_positive(x) for x in b["batch16_over_batch1"].values()), key
    # HTTP kept alive against stdio, the same client: a ratio per round and its target
    # (numbers only: whether it is met is for the full run to say, not a smoke run).
    hos = results["http_over_stdio"]
    assert hos["target"] == 3
    assert all(_positive(x) for x in [*hos["p50_per_round"], *hos["summary"].values()])
    assert isinstance(hos["within_target"], bool)
