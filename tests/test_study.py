"""The isolation-overhead study (``benchmarks/study.py``): a smoke run measures every cell
and writes its JSON, plots and RESULTS.md; ``--render`` rebuilds the page from JSON alone.

Nothing here asserts on speed: only that every number is there and sane.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from benchmarks import cpu_profile, profiles, study

#: The studies' results, as committed.
RESULTS = Path(study.__file__).parent / "results"

CELLS = [
    "in_process",
    "process/cold",
    "process/zygote",
    "process/pool",
    "confined/cold",
    "confined/zygote",
    "confined/pool",
]
#: Issue 15's targets, and the study's own check that no run failed.
TARGET_IDS = {
    "confined_pool_trivial_p50_ms",
    "confined_pool_await_p50_ms",
    "confined_zygote_trivial_p50_ms",
    "process_pool_trivial_p50_ms",
    "in_process_trivial_p50_ms",
    "confined_runs_per_s",
    "confined_cpu_per_run_ms",
    "idle_confined_child_uss_mb",
    "confined_1mib_value_vs_raw_pipe",
    "failed_runs",
}


def _failed(doc: dict[str, Any], phase: str, cell: str) -> int:
    """Failed samples listed for one phase and cell (warm-ups, numbered below 0, apart)."""
    return sum(
        1 for f in doc["failures"] if f["phase"] == phase and f["cell"] == cell and f["sample"] >= 0
    )


def _check_stats(stats: dict[str, Any]) -> None:
    assert 0 < stats["p50"] <= stats["p90"] <= stats["p99"], stats


def _check_latency(doc: dict[str, Any]) -> None:
    lat, p = doc["latency"], doc["parameters"]
    assert set(lat["cells"]) == {
        study.BARE,
        study.RAW_PIPE,
        *CELLS,
        "await@confined/pool",
        "value@in_process",
        "value@process/pool",
        "value@confined/pool",
    }
    for key, cell in lat["cells"].items():
        n = sum(len(r) for r in cell["samples_ms"])
        assert n + _failed(doc, "latency", key) == p["latency_rounds"] * p["latency_per_round"]
        assert all(x > 0 for r in cell["samples_ms"] for x in r)
        if n:
            _check_stats(cell["stats"])
            assert cell["stats"]["n"] == n
        if key not in (study.BARE, study.RAW_PIPE) and n:
            assert cell["ratio_to_bare_spawn"]["p50"] > 0
    value = lat["value_1mib"]["cells"]
    assert list(value) == ["in_process", "process/pool", "confined/pool"]
    for key, entry in value.items():
        if entry["ratio"] is None:  # (a cell without samples: listed under failures)
            continue
        assert entry["value_p50_ms"] == lat["cells"][f"value@{key}"]["stats"]["p50"]
        assert entry["trivial_p50_ms"] == lat["cells"][key]["stats"]["p50"]
        assert entry["raw_pipe_p50_ms"] == lat["cells"][study.RAW_PIPE]["stats"]["p50"]
        assert entry["ratio"] == pytest.approx(
            (entry["value_p50_ms"] - entry["trivial_p50_ms"]) / entry["raw_pipe_p50_ms"]
        )


def _check_sustained(doc: dict[str, Any]) -> None:
    sus = doc["sustained"]
    assert set(sus["cells"]) == {study.BARE, *CELLS}
    for key, cell in sus["cells"].items():
        assert cell["runs_per_s"] > 0, key
        assert cell["runs"] == len(cell["samples_ms"]) > 0
        _check_stats(cell["latency_under_load"])
        assert cell["failed"] == _failed(doc, "sustained", key), key
        assert cell["concurrency"] == sus["concurrency"] >= 1
        cpu = cell["cpu"]
        assert cpu["runs"] == cell["runs"] + cell["failed"], key
        parts = cpu["per_run_ms"]
        assert parts["host"] > 0, key  # (every cell's runs cost this process something)
        assert cpu["total_per_run_ms"] == pytest.approx(sum(parts.values())), key
        assert cpu["counted"]
        assert cpu["not_counted"]
        if key == study.BARE:
            assert parts["spawned"] > 0  # the interpreters, reaped by this process
        elif key != "in_process":
            assert parts["runs_processes"] > 0, key
            assert cpu["ratio_to_bare_spawn"] > 0, key
            assert {"keeper", "zygote"} <= set(cpu["standing_processes"]), key
            if doc["environment"]["cgroups_usable"]:
                # The runs' own CPU, inside their cgroups, is part of what was reaped.
                inside = cpu["runs_cgroup_per_run_ms"]
                assert 0 < inside <= parts["runs_processes"] + 1e-9, key


def _check_calls(doc: dict[str, Any]) -> None:
    calls, rounds = doc["calls"], doc["parameters"]["call_rounds"]
    assert set(calls["cells"]) == set(CELLS)
    for name in study.RAW_BENCHES:
        base = calls["baselines"][name]
        assert len(base["samples_us"]) + _failed(doc, "calls", f"raw/{name}") == rounds
        assert base["us"] is None or base["us"] > 0
    for key, cell in calls["cells"].items():
        for workload in ("seq", "pipe"):
            values = cell[f"{workload}_samples_us"]
            assert len(values) + _failed(doc, "calls", f"{key}/{workload}") == rounds
            assert all(v > 0 for v in values)
            assert (cell[f"{workload}_us"] is None) == (not values)
        if cell["seq_us"] is not None and calls["baselines"]["seq"]["us"] is not None:
            assert cell["seq_ratio_to_raw_seq"] > 0


def _check_memory(doc: dict[str, Any]) -> None:
    mem, runs = doc["memory"], doc["parameters"]["memory_runs"]
    for level in ("process", "confined"):
        idle = mem["idle"][level]
        children = idle["children"]
        assert len(children) + _failed(doc, "memory", f"idle/{level}") == mem["pool_size"]
        if children:
            summary = idle["summary"]
            assert 0 < summary["uss_mb"]["mean"] <= summary["uss_mb"]["max"]
            assert summary["pss_mb"]["mean"] > 0
        warmed = mem["idle_awaiting"][level]["children"]
        failed = _failed(doc, "memory", f"idle_awaiting/{level}")
        assert len(warmed) + failed == mem["pool_size"]
        for spawn in ("cold", "zygote"):
            key = f"{level}/{spawn}"
            samples = mem["in_run"][key]["samples"]
            assert len(samples) + _failed(doc, "memory", f"in_run/{key}") == runs
            assert all(x["uss"] > 0 and x["processes"] >= 1 for x in samples)
    assert mem["zygote"]["uss"] > 0
    assert mem["bare_interpreter"]["uss_mb"]["mean"] > 0


@pytest.mark.slow
def test_smoke_run_measures_every_cell(tmp_path: Path) -> None:
    """A smoke run writes a JSON with every cell, sane numbers, every verdict and every
    failed run accounted for, and the plots and RESULTS.md beside it; it leaves no process
    behind."""
    study.main(["--smoke", "--out", str(tmp_path)])

    (json_path,) = tmp_path.glob("study-*-smoke.json")
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    assert doc["study"] == "isolation-overhead"
    assert doc["mode"] == "smoke"
    env = doc["environment"]
    for key in ("python", "kernel", "cpu_count", "cpu_model", "loadavg_at_start", "date"):
        assert env[key], key
    for package in ("anyio", "msgspec", "trio", "psutil"):
        assert env["versions"][package], package
    assert "commit" in env["git"]
    assert set(env["cpu_ticks_at_start"]) >= {"user", "system", "idle", "steal"}
    assert 0 <= env["cpu_stolen_share"] <= 1
    page = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert f"{env['cpu_stolen_share']:.1%} of all CPU time" in page

    _check_latency(doc)
    _check_sustained(doc)
    _check_calls(doc)
    _check_memory(doc)
    _check_profiles(doc, page)

    targets = {t["id"]: t for t in doc["targets"]}
    assert set(targets) == TARGET_IDS
    for t in targets.values():
        assert t["verdict"] in ("PASS", "MISS")
        assert isinstance(t["goal_met"], bool)
        assert t["comparison"] in ("<=", ">=")
        assert t["baseline"]
        assert t["detail"]
    for spec in study.TARGETS:
        t = targets[spec.id]
        assert (t["floor"], t["goal"], t["comparison"]) == (spec.floor, spec.goal, spec.comparison)
        if not doc["failures"]:
            assert t["measured"] is not None, spec.id  # every figure of the table is measured
    cpu = doc["sustained"]["cells"]["confined/pool"]["cpu"]
    assert targets["confined_cpu_per_run_ms"]["measured"] == cpu["total_per_run_ms"]
    value = doc["latency"]["value_1mib"]["cells"]["confined/pool"]
    assert targets["confined_1mib_value_vs_raw_pipe"]["measured"] == value["ratio"]
    # A failed run is the sandbox's to fix, not the study's: the study must count and list
    # it, and flag it, which is what is checked here.
    for failure in doc["failures"]:
        assert set(failure) == {"phase", "cell", "sample", "error"}
        assert failure["error"]
    assert targets["failed_runs"]["measured"] == len(doc["failures"])
    assert targets["failed_runs"]["verdict"] == ("MISS" if doc["failures"] else "PASS")
    assert doc["processes_left_behind"] == []

    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert len(pngs) == 4
    assert all((tmp_path / p).stat().st_size > 1000 for p in pngs)
    page = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "## Targets" in page
    assert "| figure | measured | floor | goal | verdict (floor) | goal met |" in page
    for png in pngs:
        assert f"]({png})" in page


def _check_profiles(doc: dict[str, Any], page: str) -> None:
    """Every phase cell stamped in order, the process costs and the memory measured, and
    the page's section that says which profile explains each MISS."""
    sizes = profiles.PRESETS["smoke"]
    cells = doc["profiles"]["phases"]["cells"]
    assert set(cells) == set(profiles.PHASE_CELLS)
    for cell, c in cells.items():
        assert c["n"] + _failed(doc, "profile", cell) == sizes.rounds * sizes.per_round
        for run in c["samples_ms"]:
            phases = {k: v for k, v in run.items() if k != "total"}
            # Every phase after the one before: the host's and the child's stamps are on
            # one clock, and the engine's steps come in the order the profile says.
            assert all(v > 0 for v in phases.values()), (cell, run)
            assert sum(phases.values()) == pytest.approx(run["total"], abs=1e-6)
        for p50 in c["phases_p50_ms"].values():
            assert 0 < p50 <= c["total_p50_ms"]
    handoff = doc["profiles"]["phases"][profiles.HANDOFF]
    assert handoff["n"] == sizes.rounds * sizes.per_round
    assert handoff["p50_ms"] > 0
    procs = doc["profiles"]["processes"]
    for prepare in ("zygote", "bare"):
        assert procs[prepare]["fork_exit"]["cpu_ms"] > 0, procs[prepare]
        assert procs[prepare]["fresh_page_us"] > procs[prepare]["warm_page_us"] > 0
    assert procs["zygote"]["rss_mb"] > procs["bare"]["rss_mb"]
    fresh = procs["zygote"]["fresh_child"]
    assert set(fresh) == {"nothing", *(name for name, _ in profiles.FRESH_STEPS)}
    for name, _ in profiles.FRESH_STEPS:
        assert fresh[name]["fresh_ms"] > 0
        assert fresh[name]["warm_ms"] > 0
        assert fresh[name]["private_kb"] >= 0
    memory = doc["profiles"]["memory"]
    assert memory["private_bytes"] == sum(memory["by_mapping"].values()) > 0
    cpu = doc["profiles"]["cpu"]
    if "error" in cpu:  # no perf here, or not allowed to sample the machine: it says why
        assert cpu["error"]
    else:
        assert cpu["runs"] > 0
        assert cpu["roles_ms"][cpu_profile.RUNS] > 0
        assert cpu["roles_ms"][cpu_profile.ZYGOTE] > 0
        assert cpu["busy_ms"] > 0
        assert 0.5 < cpu["coverage"] < 1.5  # the samples stand for the CPUs' time
    assert cpu_profile.TITLE in page
    assert "## Why each MISS: profiles measured in this run" in page
    for t in doc["targets"]:
        if t["verdict"] == "MISS":
            assert f"| {t['description']} | [" in page, t["id"]


def _stats(p50: float) -> dict[str, float]:
    return {"p50": p50, "p90": p50 * 1.2, "p99": p50 * 1.5, "mean": p50 * 1.1, "n": 3}


def _memory_summary(uss: float) -> dict[str, Any]:
    return {
        "n": 2,
        "uss_mb": {"mean": uss, "max": uss, "min": uss},
        "pss_mb": {"mean": uss * 2, "max": uss * 2, "min": uss * 2},
        "processes": [1],
    }


def _hand_written() -> dict[str, Any]:
    """A small study document of an earlier study (schema 1, one threshold per target):
    two cells and a baseline, one target met and one missed."""
    return {
        "study": "isolation-overhead",
        "schema": 1,
        "mode": "full",
        "environment": {
            "date": "2030-01-02T03:04:05+00:00",
            "cpu_count": 2,
            "cpu_model": "Test CPU",
            "python": "3.11.7 (main)",
            "versions": {"anyio": "4.0"},
            "git": {"commit": "0123456789abcdef"},
            "command_line": ["python", "-m", "benchmarks.study"],
        },
        "parameters": {"concurrency": 4, "backend": "asyncio"},
        "latency": {
            "cells": {
                "bare_spawn": {"stats": _stats(8.0), "per_round_p50_ms": [8.0]},
                "confined/pool": {
                    "stats": _stats(12.5),
                    "ratio_to_bare_spawn": {"p50": 1.5625, "p99": 1.5},
                },
            }
        },
        "sustained": {
            "concurrency": 4,
            "duration_s": 5.0,
            "cells": {
                "bare_spawn": {"runs": 700, "failed": 0, "runs_per_s": 140.0},
                "confined/pool": {
                    "runs": 400,
                    "failed": 0,
                    "runs_per_s": 80.0,
                    "ratio_to_bare_spawn": 0.571,
                },
            },
        },
        "calls": {
            "runs_per_cell": 1,
            "baselines": {"seq": {"us": 15.0}, "pipe_raw": {"us": 7.0}},
            "cells": {
                "confined/pool": {
                    "seq_us": 40.0,
                    "pipe_us": 30.0,
                    "seq_ratio_to_raw_seq": 2.67,
                    "pipe_ratio_to_raw_pipe_raw": 4.29,
                    "pipe_ratio_to_raw_pipe_gather": None,
                }
            },
        },
        "memory": {
            "pool_size": 2,
            "idle": {"confined": {"summary": _memory_summary(3.1)}},
            "in_run": {},
            "bare_interpreter": {"n": 1, **_memory_summary(2.6)},
            "zygote": {"uss": 1_700_000, "pss": 3_400_000},
        },
        "targets": [
            {
                "id": "confined_trivial_p50_ms",
                "description": "confined p50 through the pool",
                "measured": 12.5,
                "threshold": 3.0,
                "comparison": "<=",
                "unit": "ms",
                "verdict": "MISS",
                "detail": "best: confined/pool",
            },
            {
                "id": "idle_confined_child_uss_mb",
                "description": "USS per idle warm confined child",
                "measured": 3.1,
                "threshold": 4.0,
                "comparison": "<=",
                "unit": "MB",
                "verdict": "PASS",
                "detail": "",
            },
        ],
        "failures": [],
        "processes_left_behind": [],
    }


def _mark(
    host: float, display: float | None, standing: dict[int, tuple[str, float, float]]
) -> study.CpuMark:
    """A CPU mark: this process's CPU, its display thread's, and the standing processes
    as {pid: (role, own, reaped)}."""
    return study.CpuMark(
        host=host,
        spawned=0.0,
        display=display,
        standing={
            (pid, 1.0): {"role": role, "own": own, "reaped": reaped}
            for pid, (role, own, reaped) in standing.items()
        },
    )


#: A window of 100 runs: this process +0.5 s of which its display +0.1 s, the zygote +0.2
#: s and its reaped children +0.9 s, the keeper nothing; an idle child before (taken by a
#: run) and another after (made in the window), neither standing.
_BEFORE = _mark(
    10.0, 1.0, {1: ("keeper", 1.0, 0.0), 2: ("zygote", 5.0, 100.0), 9: ("other", 0.5, 0)}
)
_AFTER = _mark(10.5, 1.1, {1: ("keeper", 1.0, 0.0), 2: ("zygote", 5.2, 100.9), 10: ("other", 0, 0)})


def _hand_written_now() -> dict[str, Any]:
    """:func:`_hand_written` as the study writes it now: the awaiting program, the raw
    pipe and the 1 MiB value in the latency rounds, the CPU per run, and issue 15's
    targets evaluated on it."""
    doc = _hand_written()
    doc["schema"] = 2
    lat = doc["latency"]
    lat["raw_pipe_label"] = study.RAW_PIPE_LABEL
    lat["cells"].update(
        {
            "in_process": {"stats": _stats(0.04), "ratio_to_bare_spawn": {"p50": 0.005}},
            "await@confined/pool": {"stats": _stats(20.0), "ratio_to_bare_spawn": {"p50": 2.5}},
            study.RAW_PIPE: {"stats": _stats(0.5)},
            "value@confined/pool": {"stats": _stats(40.0), "ratio_to_bare_spawn": {"p50": 5.0}},
        }
    )
    lat["value_1mib"] = study.analyse_value(lat["cells"])
    for key in ("bare_spawn", "confined/pool"):
        doc["sustained"]["cells"][key]["cpu"] = study.cpu_per_run(_BEFORE, _AFTER, 100, 0.6, 0)
    doc["targets"] = study.evaluate_targets(doc)
    return doc


def _row(lines: list[str], start: str) -> str:
    (line,) = [ln for ln in lines if ln.startswith(start)]
    return line


@pytest.mark.slow
def test_the_share_of_cpu_time_stolen_is_steal_over_all() -> None:
    """Steal over every kind of CPU time between the two readings; not known when either
    reading is missing or no time passed."""
    from benchmarks._machine import cpu_ticks, stolen_share

    start = dict.fromkeys(("user", "nice", "system", "idle", "iowait", "irq", "softirq"), 0)
    start["steal"] = 0
    end = {**start, "user": 50, "idle": 30, "steal": 20}
    assert stolen_share(start, end) == pytest.approx(0.2)
    assert stolen_share(start, start) is None
    assert stolen_share(None, end) is None
    here = cpu_ticks()
    assert here is not None  # (Linux)
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:  # some ticks pass (they are 10 ms)
        pass
    share = stolen_share(here, cpu_ticks())
    assert share is not None
    assert 0 <= share <= 1


def test_the_memory_plot_takes_a_mean_a_rounding_above_its_max(tmp_path: Path) -> None:
    """Equal samples can average a rounding above their maximum (3.6536320000000004 over
    four of 3.653632, in a full run here): the plot's error bar is then 0, not refused."""
    doc = json.loads((RESULTS / "study-2026-12-04-ff8d524.json").read_text(encoding="utf-8"))
    uss = {"mean": 3.6536320000000004, "max": 3.653632, "min": 3.653632}
    for entry in doc["memory"]["in_run"].values():
        if entry.get("summary"):
            entry["summary"]["uss_mb"] = uss
    path = tmp_path / "memory.png"
    study.plot_memory(doc, path)
    assert path.stat().st_size > 0


def test_render_from_json_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--render`` of a hand-written JSON writes RESULTS.md with every table, issue 15's
    targets with their floor, goal, verdict (against the floor) and whether the goal is
    met, the new figures' tables, and the plots it links to."""
    json_path = tmp_path / "study-2030-01-02.json"
    json_path.write_text(json.dumps(_hand_written_now()), encoding="utf-8")
    out = tmp_path / "out"

    study.main(["--render", str(json_path), "--out", str(out)])

    assert "predates" not in capsys.readouterr().err
    page = (out / "RESULTS.md").read_text(encoding="utf-8")
    lines = page.splitlines()
    assert "| figure | measured | floor | goal | verdict (floor) | goal met |" in page
    missed = _row(lines, "| trivial run, confined, from the pool, p50 |")
    assert missed.startswith(
        "| trivial run, confined, from the pool, p50 | 12.5 ms | <= 1 ms | <= 0.3 ms | "
        "**MISS** | no | bare spawn p50 8 ms: 1.56x |"
    )
    met = _row(lines, "| `in_process` trivial run, p50 |")
    assert met.startswith("| `in_process` trivial run, p50 | 0.04 ms | <= 0.15 ms | <= 0.05 ms | ")
    assert "| **PASS** | **yes** |" in met
    floor_only = _row(lines, "| idle confined child, USS")
    assert "| 3.1 MB | <= 4 MB | <= 2 MB | **PASS** | no |" in floor_only
    value = _row(lines, "| a run whose value is a 1 MiB string")
    assert "| 55x | <= 3x | <= 1.25x | **MISS** | no | raw pipe moving 1 MiB, p50 0.5 ms |" in value
    not_measured = _row(lines, "| trivial run, confined, forked on demand (zygote), p50 |")
    assert "| n/a ms | <= 3 ms | <= 1.5 ms | **MISS** | no |" in not_measured
    cpu = _row(lines, "| CPU time per confined run")
    assert "| 15 ms | <= 2.5 ms | <= 1.5 ms | **MISS** | no |" in cpu
    assert "this process 4 + the runs' processes 9 (inside their cgroups up to the kill: 6)" in cpu
    for header in (
        "## Targets",
        "| cell | n | p50 | p90 | p99 |",
        "| cell | runs | failed | runs/s |",
        "| cell | runs | this process | the runs' processes | of which inside their cgroups |",
        "| cell | value's run p50 ms | trivial run p50 ms | difference ms | raw pipe p50 ms |",
        "| cell | sequential µs |",
        "| what | n | processes each | USS mean |",
        "- **A program that awaits one host call**: `await host.echo(1)`",
        "- **A 1 MiB value**: `'x' * (1 << 20)`",
        "- **CPU per run**, in every sustained cell: over the window",
        "## Machine and versions",
    ):
        assert header in page, header
    assert any(ln.startswith("| confined / pool | 3 | 12.5 |") for ln in lines)
    assert any(ln.startswith("| confined / pool, awaits a call | 3 | 20 |") for ln in lines)
    assert any(ln.startswith("| raw pipe, 1 MiB (baseline): 1 MiB through") for ln in lines)
    assert "| confined / pool | 40 | 12.5 | 27.5 | 0.5 | 55x |" in page
    assert "| confined / pool | 100 | 4 | 9 | 6 | 2 | 0 | 0 | 0 | **15** |" in page
    assert "0123456789ab" in page
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [f"study-2030-01-02-{name}.png" for name in sorted(study.SECTIONS)]
    for png in pngs:
        assert f"]({png})" in page
    assert "Peers" not in page  # a document without the peers section


@pytest.mark.slow
def test_render_of_an_earlier_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSON of an earlier study (one threshold per target, none of issue 15's figures)
    still renders, its targets table as it was measured against, and ``--render`` says
    that it predates the floors and goals."""
    json_path = tmp_path / "study-2030-01-02.json"
    json_path.write_text(json.dumps(_hand_written()), encoding="utf-8")
    out = tmp_path / "out"

    study.main(["--render", str(json_path), "--out", str(out)])

    assert "study-2030-01-02.json predates issue 15's targets" in capsys.readouterr().err
    page = (out / "RESULTS.md").read_text(encoding="utf-8")
    lines = page.splitlines()
    assert "| target | measured | threshold | verdict | detail |" in page
    missed = _row(lines, "| confined p50 through the pool |")
    assert "| 12.5 ms | <= 3 ms | **MISS** |" in missed
    assert "**PASS**" in _row(lines, "| USS per idle warm confined child |")
    assert "## 1. Trivial-run latency" in page
    assert "CPU per run" not in page
    assert any(ln.startswith("| confined / pool | 3 | 12.5 |") for ln in lines)
    assert len(list(out.glob("*.png"))) == len(study.SECTIONS)


# -- each target's verdict, on each side of its floor and its goal -------------------------

#: What a measurement the verdicts are tested with is, on the target's losing side, for the
#: spawn modes that are not the best: the throughput verdict must come from the best one.
_WORSE = 1000.0
TARGETS = {t.id: t for t in study.TARGETS}


def _measured(numbers: dict[str, float] | None = None, *, failures: int = 0) -> dict[str, Any]:
    """A study document holding only what :func:`study.evaluate_targets` reads: each
    target's figure at its goal (every verdict PASS, every goal met) but those given; the
    confined cold and zygote throughputs far on the losing side, so that only the pool's
    can pass."""
    n = {tid: t.goal for tid, t in TARGETS.items()}
    n.update(numbers or {})
    assert set(n) == set(TARGETS), numbers
    lat = {study.BARE: {"stats": _stats(1000.0)}, "confined/cold": {"stats": _stats(_WORSE)}}
    for key, tid in study.LATENCY_TARGETS.items():
        lat[key] = {"stats": _stats(n[tid])}
    uss = n["idle_confined_child_uss_mb"]
    return {
        "latency": {
            "cells": lat,
            "value_1mib": {
                "cells": {"confined/pool": {"ratio": n["confined_1mib_value_vs_raw_pipe"]}}
            },
        },
        "sustained": {
            "concurrency": 4,
            "cells": {
                "confined/cold": {"runs_per_s": 1.0 / _WORSE, "failed": 0},
                "confined/zygote": {"runs_per_s": 1.0 / _WORSE, "failed": 0},
                "confined/pool": {
                    "runs_per_s": n["confined_runs_per_s"],
                    "failed": 0,
                    "cpu": {"runs": 10, "total_per_run_ms": n["confined_cpu_per_run_ms"]},
                },
            },
        },
        "memory": {
            "idle": {"confined": {"summary": {"n": 2, "uss_mb": {"mean": uss / 2, "max": uss}}}}
        },
        "failures": [
            {"phase": "latency", "cell": "confined/pool", "sample": i, "error": "x"}
            for i in range(failures)
        ],
    }


def _outcomes(doc: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    return {t["id"]: (t["verdict"], t["goal_met"]) for t in study.evaluate_targets(doc)}


def test_the_memory_target_takes_the_larger_of_a_fresh_and_a_warmed_child() -> None:
    """A pool warms its children for programs that call tools and await once it has seen
    one: the idle child's figure is the largest of both kinds, whichever it is; a study
    from before (no warmed children) is judged on the fresh pool's alone."""

    def summary(uss: float) -> dict[str, Any]:
        return {"n": 2, "uss_mb": {"mean": uss - 0.1, "max": uss}}

    for fresh, warmed, verdict in ((3.9, 4.7, "MISS"), (4.7, 3.9, "MISS"), (3.5, 3.9, "PASS")):
        doc = _measured()
        doc["memory"]["idle"]["confined"]["summary"] = summary(fresh)
        doc["memory"]["idle_awaiting"] = {"confined": {"summary": summary(warmed)}}
        (row,) = [t for t in study.evaluate_targets(doc) if t["id"] == "idle_confined_child_uss_mb"]
        assert (row["measured"], row["verdict"]) == (max(fresh, warmed), verdict)
        assert f"warmed for calls and awaits: max {warmed:g} MB" in row["detail"]
    doc = _measured({"idle_confined_child_uss_mb": 3.9})
    (row,) = [t for t in study.evaluate_targets(doc) if t["id"] == "idle_confined_child_uss_mb"]
    assert (row["measured"], row["verdict"]) == (3.9, "PASS")
    assert "warmed" not in row["detail"]


def test_every_target_passes_when_every_figure_is_at_its_goal() -> None:
    """The reference document of the tests below: every verdict PASS, every goal met."""
    assert _outcomes(_measured()) == dict.fromkeys(TARGET_IDS, ("PASS", True))


def test_the_targets_are_issue_15s_table() -> None:
    """Issue 15's figures, floors and goals, in its order."""
    assert [(t.id, t.comparison, t.floor, t.goal, t.unit) for t in study.TARGETS] == [
        ("confined_pool_trivial_p50_ms", "<=", 1.0, 0.3, "ms"),
        ("confined_pool_await_p50_ms", "<=", 1.5, 0.5, "ms"),
        ("confined_zygote_trivial_p50_ms", "<=", 3.0, 1.5, "ms"),
        ("process_pool_trivial_p50_ms", "<=", 0.8, 0.25, "ms"),
        ("in_process_trivial_p50_ms", "<=", 0.15, 0.05, "ms"),
        ("confined_runs_per_s", ">=", 400.0, 600.0, "runs/s"),
        ("confined_cpu_per_run_ms", "<=", 2.5, 1.5, "ms"),
        ("idle_confined_child_uss_mb", "<=", 4.0, 2.0, "MB"),
        ("confined_1mib_value_vs_raw_pipe", "<=", 3.0, 1.25, "x"),
    ]


def _beyond(t: study.Target, value: float) -> float:
    """``value`` moved 1 % to the better side of the target."""
    return value * (0.99 if t.comparison == "<=" else 1.01)


def _short(t: study.Target, value: float) -> float:
    """``value`` moved 1 % to the worse side of the target."""
    return value * (1.01 if t.comparison == "<=" else 0.99)


#: (where the figure is, the figure, the verdict, whether the goal is met).
POSITIONS = [
    ("beyond the goal", lambda t: _beyond(t, t.goal), "PASS", True),
    ("at the goal", lambda t: t.goal, "PASS", True),
    ("short of the goal", lambda t: _short(t, t.goal), "PASS", False),
    ("between", lambda t: (t.floor + t.goal) / 2, "PASS", False),
    ("at the floor", lambda t: t.floor, "PASS", False),
    ("short of the floor", lambda t: _short(t, t.floor), "MISS", False),
]


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize(
    ("figure", "verdict", "goal_met"),
    [pos[1:] for pos in POSITIONS],
    ids=[pos[0] for pos in POSITIONS],
)
def test_a_verdict_is_against_the_floor_and_the_goal_said_beside_it(
    target: str, figure: Any, verdict: str, goal_met: bool
) -> None:
    """A figure on each side of its goal and of its floor: PASS down to the floor itself,
    MISS past it; the goal met down to the goal itself; the other targets unchanged."""
    spec = TARGETS[target]
    got = {t["id"]: t for t in study.evaluate_targets(_measured({target: figure(spec)}))}
    mine = got.pop(target)
    assert (mine["verdict"], mine["goal_met"]) == (verdict, goal_met)
    assert mine["measured"] == pytest.approx(figure(spec))
    assert (mine["floor"], mine["goal"]) == (spec.floor, spec.goal)
    assert {(t["verdict"], t["goal_met"]) for t in got.values()} == {("PASS", True)}


def test_the_throughput_target_takes_the_best_confined_spawn_mode() -> None:
    """The zygote's runs/s above the floor and the pool's below: PASS, from the zygote."""
    doc = _measured()
    cells = doc["sustained"]["cells"]
    cells["confined/zygote"]["runs_per_s"] = 500.0
    cells["confined/pool"]["runs_per_s"] = 1.0
    (t,) = [t for t in study.evaluate_targets(doc) if t["id"] == "confined_runs_per_s"]
    assert (t["verdict"], t["goal_met"], t["measured"]) == ("PASS", False, 500.0)
    assert t["detail"].startswith("best: confined/zygote")


@pytest.mark.parametrize(("failures", "verdict"), [(0, "PASS"), (1, "MISS")])
def test_no_failed_run_is_met_by_none_only(failures: int, verdict: str) -> None:
    """The "no failed run" target: PASS with none, MISS with one."""
    outcomes = _outcomes(_measured(failures=failures))
    assert outcomes.pop("failed_runs") == (verdict, verdict == "PASS")
    assert set(outcomes.values()) == {("PASS", True)}


def test_a_target_not_measured_is_missed() -> None:
    """A figure the run could not measure (no cell, no children, no CPU) is a MISS with
    its goal not met, not a PASS."""
    doc = _measured()
    doc["latency"]["cells"] = {study.BARE: doc["latency"]["cells"][study.BARE]}
    doc["latency"]["value_1mib"]["cells"] = {}
    doc["sustained"]["cells"] = {}
    doc["memory"]["idle"] = {}
    got = {t["id"]: t for t in study.evaluate_targets(doc)}
    assert got.pop("failed_runs")["verdict"] == "PASS"
    assert {(t["verdict"], t["goal_met"], t["measured"]) for t in got.values()} == {
        ("MISS", False, None)
    }


# -- the figures behind the new targets -----------------------------------------------------


def test_the_1mib_value_is_set_against_the_raw_pipe_per_round_too() -> None:
    """(value's run - trivial run) / raw pipe, by p50 over all samples and per round; a
    cell without samples has no ratio."""
    rounds: dict[str, list[list[float]]] = {
        study.BARE: [[0.010], [0.010], [0.010]],
        study.RAW_PIPE: [[0.001], [0.002], [0.003]],
        "confined/pool": [[0.004], [0.004], [0.004]],
        "value@confined/pool": [[0.007], [0.010], [0.013]],
        "in_process": [[0.001], [0.001], [0.001]],
        "value@in_process": [[], [], []],
    }
    out = study.analyse_latency(rounds)
    value = out["value_1mib"]["cells"]
    pool = value["confined/pool"]
    assert pool["value_p50_ms"] == pytest.approx(10.0)
    assert pool["trivial_p50_ms"] == pytest.approx(4.0)
    assert pool["extra_ms"] == pytest.approx(6.0)
    assert pool["raw_pipe_p50_ms"] == pytest.approx(2.0)
    assert pool["ratio"] == pytest.approx(3.0)
    assert pool["per_round"] == pytest.approx([3.0, 3.0, 3.0])
    assert value["in_process"]["ratio"] is None
    assert value["process/pool"]["ratio"] is None  # (not in these rounds at all)
    assert "ratio_to_bare_spawn" not in out["cells"][study.RAW_PIPE]  # a baseline
    assert out["cells"]["value@confined/pool"]["workload"] == "value"


def test_cpu_per_run_counts_each_part_once() -> None:
    """The window's CPU by part, per run: this process's without its display thread; the
    standing processes' own; the runs' processes as reaped, their cgroups' share apart
    (not added again); processes at one end only (idle children) left out."""
    cpu = study.cpu_per_run(_BEFORE, _AFTER, 100, 0.6, 0)
    part = cpu["per_run_ms"]
    assert part["host"] == pytest.approx(4.0)  # (0.5 - 0.1) s / 100 runs
    assert part["zygote"] == pytest.approx(2.0)
    assert part["keeper"] == 0.0
    assert part["other_standing"] == 0.0
    assert part["runs_processes"] == pytest.approx(9.0)
    assert cpu["runs_cgroup_per_run_ms"] == pytest.approx(6.0)
    assert cpu["runs_outside_cgroup_per_run_ms"] == pytest.approx(3.0)
    assert cpu["total_per_run_ms"] == pytest.approx(15.0)
    assert cpu["display_ms_not_counted"] == pytest.approx(100.0)
    assert cpu["standing_processes"] == ["keeper", "zygote"]
    assert cpu["runs_source"] == "reaped"


def test_cpu_per_run_takes_the_cgroups_when_the_reaping_was_not_seen() -> None:
    """Runs' processes reaped by no process measured here (the cgroups' sum above what was
    reaped): their cgroups' CPU stands for them, and that is said; no runs, no figure."""
    cpu = study.cpu_per_run(_BEFORE, _AFTER, 100, 1.5, 0)
    assert cpu["runs_source"] == "cgroups"
    assert cpu["per_run_ms"]["runs_processes"] == pytest.approx(15.0)
    assert cpu["runs_outside_cgroup_per_run_ms"] is None
    assert cpu["total_per_run_ms"] == pytest.approx(21.0)
    assert study.cpu_per_run(_BEFORE, _AFTER, 0, 0.0, 0)["total_per_run_ms"] is None


def test_cpu_per_run_without_the_zygote_at_both_ends_is_not_a_figure() -> None:
    """Where the zygote was not found at both ends of the sustained confined pool's window
    (the tree could not be listed, or the zygote was replaced), the CPU per run lacks its
    part and the runs' processes' outside their cgroups: the target says so and counts as
    not measured (a MISS), rather than passing on the part that was counted."""
    doc = _hand_written_now()
    no_zygote = _mark(10.5, 1.1, {})
    cpu = study.cpu_per_run(_BEFORE, no_zygote, 100, 0.6, 0)
    assert cpu["standing_processes"] == []
    assert cpu["runs_source"] == "cgroups"
    doc["sustained"]["cells"]["confined/pool"]["cpu"] = cpu
    target = {t["id"]: t for t in study.evaluate_targets(doc)}["confined_cpu_per_run_ms"]
    assert target["measured"] is None
    assert target["verdict"] == "MISS"
    assert target["detail"].startswith("not measured whole: the zygote was not found")
    assert "counted: 10 ms per run over 100 runs" in target["detail"]
    # A window with the zygote at both ends is whole, as before.
    doc["sustained"]["cells"]["confined/pool"]["cpu"] = study.cpu_per_run(
        _BEFORE, _AFTER, 100, 0.6, 0
    )
    target = {t["id"]: t for t in study.evaluate_targets(doc)}["confined_cpu_per_run_ms"]
    assert target["measured"] == pytest.approx(15.0)


def test_standing_lists_the_tree_again_when_it_changed_under_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listing that fails while the zygote's tree changes is tried again; one that keeps
    failing gives nothing (and the CPU target then says it was not measured whole)."""
    import psutil

    import sandbox

    failures = [2]
    real = psutil.Process.parent

    def flaky(self: psutil.Process) -> psutil.Process | None:
        if failures[0]:
            failures[0] -= 1
            raise psutil.NoSuchProcess(self.pid)
        return real(self)

    monkeypatch.setattr(sandbox._children._supervisor, "zygote_pid", os.getpid)
    monkeypatch.setattr(psutil.Process, "parent", flaky)
    found = study._standing()
    assert [v["role"] for v in found.values()].count("zygote") == 1
    failures[0] = 3
    assert study._standing() == {}


def test_the_raw_pipe_moves_1mib_from_a_second_process() -> None:
    """Each sample moves the whole 1 MiB (a short one would hang, then time out); closing
    ends and reaps the writer."""
    pipe = study.RawPipe()
    try:
        samples = [pipe.sample(30.0) for _ in range(3)]
    finally:
        pipe.close()
    assert all(0 < x < 30.0 for x in samples)
    assert pipe._proc.returncode == 0


# -- the peers section (``--peers``): its targets, and its page from JSON alone -----------

PEER_TARGET_IDS = {tid for tid, *_ in study.PEER_TARGETS}


def _trivial(p50: float | None, per_round: list[float] | None = None) -> dict[str, Any]:
    """A peers-section cell's trivial workload with the given p50 (None: no samples)."""
    return {
        "unsupported": None,
        "samples_ms": [[p50]] if p50 is not None else [],
        "stats": _stats(p50) if p50 is not None else None,
        "per_round_p50_ms": per_round if per_round is not None else [p50],
        "ratios": {},
    }


def _peers_section(
    ms: dict[str, float | None], status: dict[str, str] | None = None
) -> dict[str, Any]:
    """A peers section holding only the trivial workload of the cells in ``ms``."""
    status = status or {}
    return {
        "cells": {
            key: {
                "kind": "peer" if key.startswith("monty") else "ours",
                "status": status.get(key, "ok"),
                "workloads": {"trivial": _trivial(None if key in status else p50)},
            }
            for key, p50 in ms.items()
        }
    }


#: (target, our cell, Monty's cell).
PEER_CASES = [(tid, ours, peer) for tid, ours, peer, _ in study.PEER_TARGETS]


@pytest.mark.parametrize(("target", "ours", "peer"), PEER_CASES, ids=[c[0] for c in PEER_CASES])
@pytest.mark.parametrize(
    ("ours_ms", "verdict"),
    [(0.99, "PASS"), (1.0, "MISS"), (1.01, "MISS")],
    ids=["faster", "same", "slower"],
)
def test_a_peer_target_is_met_when_ours_is_faster_only(
    target: str, ours: str, peer: str, ours_ms: float, verdict: str
) -> None:
    """Our trivial p50 against Monty's (1 ms), in the same run: PASS only when ours is
    faster (below, not at, the threshold); the other peer target is missed (its cells
    are not in the document); the study's own targets are there as before."""
    assert study.PEER_TARGET_RATIO == 1.0  # (the cases above are worked out for it)
    doc = _measured()
    doc["peers"] = _peers_section({ours: ours_ms, peer: 1.0})
    got = {t["id"]: t for t in study.evaluate_targets(doc)}
    assert set(got) == TARGET_IDS | PEER_TARGET_IDS
    assert got[target]["verdict"] == verdict
    assert got[target]["measured"] == pytest.approx(ours_ms)
    assert got[target]["comparison"] == "<"
    assert f"{ours} p50" in got[target]["detail"]
    (other,) = PEER_TARGET_IDS - {target}
    assert got[other]["verdict"] == "MISS"
    assert {got[t]["verdict"] for t in TARGET_IDS} == {"PASS"}


def test_a_peer_target_whose_peer_is_missing_is_missed_and_says_why() -> None:
    reason = (
        "not installed (No module named 'pydantic_monty'): pip install 'sandbox-runtime[peers]'"
    )
    section = _peers_section(
        {
            "confined/pool": 0.5,
            "confined/zygote": 0.5,
            "monty/reused": None,
            "monty/new_worker": None,
        },
        status={"monty/reused": reason, "monty/new_worker": reason},
    )
    got = {t["id"]: t for t in study.peer_targets(section)}
    for tid in PEER_TARGET_IDS:
        assert got[tid]["verdict"] == "MISS"
        assert got[tid]["measured"] is None
        assert "not installed" in got[tid]["detail"]


def _workload_entry(p50: float | None, unsupported: str | None = None) -> dict[str, Any]:
    entry = _trivial(p50)
    entry["unsupported"] = unsupported
    if p50 is not None:
        entry["ratios"] = {
            "confined/pool": {
                "p50": p50 / 5.0,
                "per_round": [p50 / 5.0],
                "summary": {"median": p50 / 5.0, "min": p50 / 5.0, "max": p50 / 5.0},
            },
        }
    return entry


_ISOLATES = {k: f"{k}: no" for k, _ in study.ISOLATES}
_WORKLOADS = {
    "trivial": {"label": "trivial run", "program": "1"},
    "gather": {"label": "64 host calls under asyncio.gather", "program": "await g()"},
}


def _peers_doc() -> dict[str, Any]:
    """A peers section: our confined pool, Monty reused (with an equivalent), smolagents
    (gather n/a) and RestrictedPython not installed."""

    def cell(
        kind: str, label: str, trivial: float | None, gather: dict[str, Any], **kw: Any
    ) -> dict[str, Any]:
        return {
            "kind": kind,
            "label": label,
            "status": "ok",
            "how": f"how {label} runs",
            "versions": {"x": "1.0"},
            "isolates": _ISOLATES,
            "probes": {"read_host_file": "allowed", "connect_host_loopback": "blocked: no socket"},
            "observed": {},
            "equivalents": {},
            "workloads": {"trivial": _workload_entry(trivial), "gather": gather},
            **kw,
        }

    missing = cell("peer", "RestrictedPython", None, _workload_entry(None))
    missing.update(
        status="not installed (No module named 'RestrictedPython'): "
        "pip install 'sandbox-runtime[peers]'",
        probes={},
    )
    return {
        "sizes": {"rounds": 1, "per_round": 1, "cpu_per_round": 1, "warmup": 0},
        "workloads": _WORKLOADS,
        "references": ["confined/pool", "exec", "bare_spawn"],
        "cells": {
            "confined/pool": cell("ours", "confined / pool", 5.0, _workload_entry(30.0)),
            "monty/reused": cell(
                "peer",
                "Monty, reused worker",
                0.05,
                _workload_entry(3.0),
                equivalents={"gather": "futures resolved in one resume"},
                observed={
                    "worker": {"uid": "0", "seccomp": "0", "namespaces_shared_with_host": ["net"]}
                },
            ),
            "smolagents": cell(
                "peer",
                "smolagents LocalPythonExecutor",
                0.5,
                _workload_entry(None, unsupported="its interpreter has no `await`"),
            ),
            "restrictedpython": missing,
        },
    }


def test_render_with_the_peers_section(tmp_path: Path) -> None:
    """A study document with a peers section renders the study's tables, then the peers':
    who is who (a missing peer's row says why), what each isolates, the probes, time per
    run (n/a with its reason, an equivalent marked and said), the ratios; and the two
    peer targets with their verdicts."""
    doc = _hand_written()
    doc["parameters"]["peers"] = "also"
    doc["peers"] = _peers_doc()
    doc["targets"] = study.evaluate_targets(doc)
    json_path = tmp_path / "study-2030-01-02.json"
    json_path.write_text(json.dumps(doc), encoding="utf-8")
    out = tmp_path / "out"

    study.main(["--render", str(json_path), "--out", str(out)])

    page = (out / "RESULTS.md").read_text(encoding="utf-8")
    lines = page.splitlines()
    for header in (
        "| cell | n | p50 | p90 | p99 |",  # the study's own sections are still there
        "## Peers: the alternatives on the same workloads",
        "### Who is who",
        "### What each isolates",
        "| | process boundary | file system | network | memory limit | time limit |",
        "### Time per run",
        "### Ratio to our `confined` pool",
    ):
        assert header in page, header
    (missing,) = [ln for ln in lines if ln.startswith("| RestrictedPython |") and "**" in ln]
    assert "**not installed" in missing
    assert "sandbox-runtime[peers]" in missing
    (times,) = [ln for ln in lines if ln.startswith("| smolagents LocalPythonExecutor | 0.5 [")]
    assert times.endswith("| n/a |")
    assert (
        "- smolagents LocalPythonExecutor, 64 host calls under asyncio.gather: n/a, "
        "its interpreter has no `await`" in page
    )
    (monty,) = [ln for ln in lines if ln.startswith("| Monty, reused worker | 0.05 [")]
    assert monty.endswith("| 3 [3.6] * |")
    assert "futures resolved in one resume" in page
    assert "uid 0, seccomp 0" in page
    assert "| confined / pool (ours) | allowed | blocked: no socket |" in page
    (target,) = [
        ln for ln in lines if ln.startswith("| trivial run, our confined pool p50 over Monty")
    ]
    assert "100x" in target
    assert "**MISS**" in target
    assert "No ratios to plain `exec()`" in page  # exec was not in this section
    assert (out / "study-2030-01-02-peers.png").stat().st_size > 1000
    assert "](study-2030-01-02-peers.png)" in page


def test_render_of_the_peers_section_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``--peers-only`` document renders its own page beside its JSON (never over
    RESULTS.md), without the study's sections."""
    results_md = tmp_path / "RESULTS.md"
    monkeypatch.setattr(study, "RESULTS_MD", results_md)
    doc: dict[str, Any] = {
        "study": "isolation-overhead",
        "mode": "quick",
        "environment": {
            "date": "2030-01-02T03:04:05+00:00",
            "python": "3.11.7 (main)",
            "git": {"commit": "0123456789ab"},
        },
        "parameters": {"peers": "only"},
        "peers": _peers_doc(),
        "failures": [],
        "processes_left_behind": [],
    }
    doc["targets"] = study.evaluate_targets(doc)
    assert {t["id"] for t in doc["targets"]} == PEER_TARGET_IDS | {"failed_runs"}
    json_path = tmp_path / "peers-2030-01-02-quick.json"
    json_path.write_text(json.dumps(doc), encoding="utf-8")

    study.main(["--render", str(json_path)])

    assert not results_md.exists()
    page = (tmp_path / "peers-2030-01-02-quick.md").read_text(encoding="utf-8")
    assert page.startswith("# Isolation overhead beside the alternatives")
    assert "--quick --peers-only" in page
    assert "## Peers: the alternatives on the same workloads" in page
    assert "Not measured in this run" not in page
    assert "## Method" not in page
    assert sorted(p.name for p in tmp_path.glob("*.png")) == ["peers-2030-01-02-quick-peers.png"]


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to
    hyphens."""
    kept = "".join(ch for ch in heading.lower() if ch.isalnum() or ch in " -_")
    return kept.strip().replace(" ", "-")


def _hand_written_profiles() -> dict[str, Any]:
    run = {"api": 0.1, "acquire": 0.1, "ready": 0.3, "to_program": 0.7, "program": 0.01}
    run |= {"to_host": 0.3, "read": 0.19, "after": 0.6, "total": 2.3}
    alone = {"to_program": 0.15, "program": 0.01, "after": 0.09, "total": 0.25}
    cells = {
        cell: profiles.summarize_phases(cell, [alone] if cell == "in_process" else [run])
        for cell in profiles.PHASE_CELLS
    }
    return {
        "phases": {
            "cells": cells,
            profiles.HANDOFF: {"n": 1, "p50_ms": 0.09, "samples_ms": [0.09]},
        },
        "processes": {
            "zygote": {
                "rss_mb": 25.5,
                "fork_exit": {"cpu_ms": 1.8, "machine_cpu_ms": 1.9, "wall_ms": 1.85},
                "fork_netns_exit": {"error": "unshare(CLONE_NEWNET) refused here"},
                "fresh_page_us": 1.7,
                "warm_page_us": 0.09,
                "cow_page_us": 2.1,
                "fresh_child": {
                    "nothing": {"fresh_ms": 0.001, "warm_ms": 0.0005, "private_kb": 80},
                    "start_and_result": {"fresh_ms": 0.3, "warm_ms": 0.012, "private_kb": 460},
                    "event_loop": {"fresh_ms": 1.2, "warm_ms": 0.19, "private_kb": 1300},
                },
            },
            "bare": {"error": "RuntimeError: exit 1: no python"},
        },
        "memory": {
            "processes": 1,
            "private_bytes": 3_000_000,
            "by_mapping": {"[anonymous]": 2_000_000, "[heap]": 1_000_000},
        },
        "cpu": {
            "frequency_hz": 1000,
            "samples": 20,
            "window_s": 0.01,
            "runs": 2,
            "callers": 4,
            "coverage": 1.0,
            "table_ms": {"runs/fault_cow": 6.0, "zygote/fork": 2.0, "idle/idle": 2.0},
            "roles_ms": {"runs": 6.0, "zygote": 2.0, "idle": 2.0},
            "kinds_ms": {"fault_cow": 6.0, "fork": 2.0, "idle": 2.0},
            "busy_ms": 8.0,
        },
    }


def test_render_says_which_profile_explains_each_miss(tmp_path: Path) -> None:
    """Each MISS of the targets table is listed with the profile that explains it, whose
    heading is where its link points; a target that passed is not listed; a profile that
    could not be measured says why."""
    doc = _hand_written_now()
    doc["profiles"] = _hand_written_profiles()
    json_path = tmp_path / "study-2030-01-02.json"
    page = study.render_markdown(doc, tmp_path / "RESULTS.md", json_path, [])
    lines = page.splitlines()
    section = page[page.index("## Why each MISS") : page.index("## Method")]
    anchors = {_slug(ln.lstrip("#").strip()) for ln in lines if ln.startswith("#")}
    assert set(profiles.ANCHORS.values()) <= anchors
    for t in doc["targets"]:
        listed = f"| {t['description']} | [" in section
        assert listed == (t["verdict"] == "MISS"), t["id"]
    assert (
        "| trivial run, confined, from the pool, p50 | "
        "[phases](#profile-1-the-runs-path-phase-by-phase), cell `confined/pool` | "
        "the largest phase: the Start sent, to the program's first line (in the child), "
        "0.7 of 2.3 ms |"
    ) in section
    cpu = _row(section.splitlines(), "| CPU time per confined run")
    assert cpu.endswith(
        f"| [cpu](#{cpu_profile.ANCHOR}) | the most: page faults: copy on write (a page "
        "shared, first written) in the runs' processes, 6 of 8 ms of CPU per run |"
    )
    # Columns: the zygote, the runs' processes, idle; then all.
    assert "| page faults: copy on write (a page shared, first written) |  | 6 |  | 6 |" in section
    assert "| **all** | **2** | **6** | **2** | |" in section
    # Without that profile (perf missing), the fork's cost stands in, and says why.
    del doc["profiles"]["cpu"]["table_ms"]
    doc["profiles"]["cpu"]["error"] = "perf is not installed"
    page = study.render_markdown(doc, tmp_path / "RESULTS.md", json_path, [])
    section = page[page.index("## Why each MISS") : page.index("## Method")]
    assert _row(section.splitlines(), "| CPU time per confined run").endswith(
        "| not measured (perf is not installed); profile 2: a fork and exit of the "
        "zygote-like interpreter: 1.8 ms of CPU |"
    )
    assert "Not measured: perf is not installed" in section
    assert "| `bare` | not measured: RuntimeError: exit 1: no python |" in section
    assert "| not measured: unshare(CLONE_NEWNET) refused here |" in section
    assert "| `[anonymous]` | 2 | 67% |" in section
    assert (
        "| a Start decoded and a Result framed (`RunnerCore`): every run | 0.3 | 0.012 | 380 |"
        in section
    )
    assert "| **total, p50** | 2.3 | 2.3 | 2.3 | 2.3 | 0.25 | 2.3 |" in section


def test_a_page_without_profiles_has_no_such_section(tmp_path: Path) -> None:
    doc = _hand_written_now()
    page = study.render_markdown(doc, tmp_path / "RESULTS.md", tmp_path / "s.json", [])
    assert "Why each MISS" not in page
