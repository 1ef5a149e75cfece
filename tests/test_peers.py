"""The peers section of the study (``benchmarks/peers.py``): every peer adapter runs the
shared workloads it can express and returns the checked value; a workload it is said not
to express really fails in it; a peer that is not installed says so; and a short section
measured with one cell of ours, a peer and a missing peer has every sample, ratio and
probe in its place.

Peers that are not installed (the ``peers`` extra is optional) are skipped, not failed.
Nothing here asserts on speed.
"""

from __future__ import annotations

import importlib.util
import socket
from typing import Any

import pytest
from rich.progress import Progress

from benchmarks import peers, study


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


WORKLOADS = {w.key: w for w in peers.WORKLOADS}


def test_the_workloads_are_the_ones_the_issue_names() -> None:
    """A trivial run, 64 calls in a row, 64 under gather, a CPU loop, a 1 MiB result."""
    assert list(WORKLOADS) == ["trivial", "seq", "gather", "cpu", "blob"]
    assert WORKLOADS["seq"].calls == WORKLOADS["gather"].calls == 64
    assert WORKLOADS["gather"].asynchronous
    assert len(WORKLOADS["blob"].expected) == 1 << 20
    assert WORKLOADS["seq"].expected == WORKLOADS["gather"].expected == sum(range(64))


@pytest.mark.parametrize(
    ("program", "body", "expression"),
    [
        ("1", "\n", "1"),
        ("x = 2\nx * 3", "x = 2\n", "x * 3"),
        ("x = 2\n", "x = 2\n", "None"),
        ("import asyncio\nv = await f()\nsum(v)", "import asyncio\nv = await f()\n", "sum(v)"),
    ],
)
def test_split_program_takes_the_last_expression_off(
    program: str, body: str, expression: str
) -> None:
    assert peers.split_program(program) == (body, expression)


def test_a_workload_checks_its_value_and_its_type() -> None:
    seq = WORKLOADS["seq"]
    assert seq.check(2016) is None
    assert "wrong value" in (seq.check(2015) or "")
    assert seq.check(2016.0) is not None  # a float is not the int the program returns
    blob = WORKLOADS["blob"]
    assert blob.check("x" * (1 << 20)) is None
    problem = blob.check("y" * (1 << 20)) or ""
    assert "characters of repr" in problem
    assert len(problem) < 300


def _peer(key: str) -> peers.Peer:
    (peer,) = [p for p in peers.make_peers(timeout=30.0) if p.key == key]
    return peer


#: (peer key, the module it needs, or None).
PEERS = [
    ("exec", None),
    ("bare_spawn", None),
    ("restrictedpython", "RestrictedPython"),
    ("smolagents", "smolagents"),
    ("monty/reused", "pydantic_monty"),
    ("monty/new_worker", "pydantic_monty"),
]


@pytest.mark.parametrize(("key", "module"), PEERS, ids=[k for k, _ in PEERS])
def test_each_peer_runs_every_workload_it_expresses(key: str, module: str | None) -> None:
    """Every workload returns the checked value, and each workload said to be n/a for the
    peer fails in it (so the reason given is true)."""
    if module is not None and not _installed(module):
        pytest.skip(f"{module} is not installed (the peers extra)")
    peer = _peer(key)
    peer.prepare()
    try:
        for workload in peers.WORKLOADS:
            if workload.key in peer.unsupported:
                with pytest.raises(Exception):  # noqa: B017 (whatever the peer raises)
                    peer.run(workload)
                continue
            assert workload.check(peer.run(workload)) is None, (key, workload.key)
    finally:
        peer.close()


def test_a_peer_that_is_not_installed_says_how_to_install_it() -> None:
    with pytest.raises(peers.PeerUnavailable) as caught:
        peers._import("surely_not_a_module_of_this_machine")
    assert "not installed" in str(caught.value)
    assert peers.INSTALL_HINT in str(caught.value)


class _Missing(peers.Peer):
    """A peer whose package is not there."""

    key = "missing"
    label = "a missing peer"
    isolation = peers.Isolation("no", "no", "no", "no", "no")

    def prepare(self) -> None:
        peers._import("surely_not_a_module_of_this_machine")


def _recorder(keys: list[str], sizes: peers.PeerSizes) -> tuple[study.Recorder, Progress]:
    progress = Progress(disable=True)
    rec = study.Recorder(progress)
    peers.plan(rec, sizes, keys)
    return rec, progress


TINY = peers.PeerSizes(rounds=2, per_round=1, cpu_per_round=1, warmup=0, pool_size=1)


@pytest.mark.anyio
async def test_a_short_section_has_every_sample_ratio_and_probe() -> None:
    """``in_process`` (ours), ``exec`` and a missing peer, two rounds: every cell's
    samples and ratios are there, the missing one's row says why it is missing, the
    probes tell ``exec`` (no wall) apart from nothing, and nothing failed."""
    rec, progress = _recorder(["in_process", "exec", "missing"], TINY)
    with progress:
        section = await peers.measure_peers(
            rec, TINY, 30.0, peers=[peers.Exec(), _Missing()], ours=["in_process"]
        )
    assert rec.failures == []
    cells = section["cells"]
    assert list(cells) == ["in_process", "exec", "missing"]
    assert "not installed" in cells["missing"]["status"]
    assert peers.INSTALL_HINT in cells["missing"]["status"]
    assert all(w["samples_ms"] == [] for w in cells["missing"]["workloads"].values())
    for key in ("in_process", "exec"):
        assert cells[key]["status"] == "ok"
        for w, entry in cells[key]["workloads"].items():
            assert [len(r) for r in entry["samples_ms"]] == [1, 1], (key, w)
            assert entry["stats"]["p50"] > 0
            assert entry["ratios"]["exec"]["summary"]["median"] > 0
            assert "confined/pool" not in entry["ratios"]  # (not measured here)
        assert cells[key]["probes"] == {
            "read_host_file": "allowed",
            "connect_host_loopback": "allowed",
        }
    assert cells["exec"]["isolates"]["process"].startswith("no")
    assert cells["in_process"]["isolates"]["memory"].startswith("no")

    doc = {
        "study": "isolation-overhead",
        "mode": "smoke",
        "environment": {},
        "parameters": {"peers": "only"},
        "peers": section,
        "failures": [],
    }
    targets = {t["id"]: t for t in study.evaluate_targets(doc)}
    assert set(targets) == {*(t[0] for t in study.PEER_TARGETS), "failed_runs"}
    for tid, *_ in study.PEER_TARGETS:  # neither Monty nor our confined cells were measured
        assert targets[tid]["verdict"] == "MISS"


def test_the_probes_listen_on_loopback_only_and_clean_up() -> None:
    probes = peers._Probes()
    try:
        read, connect = probes.workloads
        with open(read.program.split("'")[1], encoding="utf-8") as f:
            assert read.check(f.read()) is None
        host, port = probes._listener.getsockname()
        assert host == "127.0.0.1"
        with socket.create_connection((host, port), 2):
            pass
        assert "127.0.0.1" in connect.program
    finally:
        probes.close()


def _observed(**kw: Any) -> dict[str, Any]:
    return {"uid": "0", "seccomp": "0", "no_new_privs": "0", **kw}


def test_observe_process_reads_this_process() -> None:
    import os

    seen = peers.observe_process(os.getpid())
    assert seen["namespaces_shared_with_host"] == ["user", "mnt", "net", "pid", "ipc", "uts"]
    assert seen["seccomp"] is not None
    assert set(_observed()) <= set(seen)
