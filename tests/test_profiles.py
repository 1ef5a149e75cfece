"""The study's profiles (``benchmarks/profiles.py``): every target has the profile that
explains it, the engine is stamped only while profiling, and the memory by mapping adds
up to the USS."""

from __future__ import annotations

import os

import psutil
import pytest

from benchmarks import profiles, study
from protocol import StarterCore
from sandbox._engine import _process


def test_every_target_has_a_profile_that_explains_it() -> None:
    ids = {t.id for t in study.TARGETS} | {study.FAILED_RUNS.id}
    ids |= {spec[0] for spec in study.PEER_TARGETS}
    assert ids == set(profiles.EXPLAINED_BY)
    for kind, cell in profiles.EXPLAINED_BY.values():
        assert kind in profiles.ANCHORS
        assert cell is None or cell in profiles.PHASE_CELLS
    # The latency targets are explained at their own cell.
    for cell, target in study.LATENCY_TARGETS.items():
        assert profiles.EXPLAINED_BY[target] == ("phases", cell)


def _engine() -> tuple[object, object, object]:
    return (
        vars(_process)["acquire"],
        StarterCore.__dict__["send_start"],
        _process._Run.__dict__["_await_result"],
    )


def test_the_engine_is_stamped_only_while_profiling() -> None:
    before = _engine()
    with profiles.stamped() as stamps:
        assert all(a is not b for a, b in zip(_engine(), before, strict=True))
        assert stamps == {}
    assert _engine() == before
    with pytest.raises(KeyError), profiles.stamped():
        raise KeyError("a run failed")
    assert _engine() == before


def test_private_bytes_by_mapping_add_up_to_the_uss() -> None:
    by_mapping = profiles.private_by_mapping(os.getpid())
    uss = psutil.Process().memory_full_info().uss
    assert sum(by_mapping.values()) == pytest.approx(uss, rel=0.05)
    assert "[heap]" in by_mapping or "[anonymous]" in by_mapping
    assert all(size >= 0 for size in by_mapping.values())


def test_a_missing_process_is_an_error() -> None:
    with pytest.raises(OSError):
        profiles.private_by_mapping(2**22 + 1)  # above pid_max's default
