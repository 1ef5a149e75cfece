"""The code-mode benchmark runs, and both ways give the same answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import code_mode

from .servers import command


@pytest.mark.slow
def test_code_mode_benchmark_smoke(tmp_path: Path) -> None:
    """One round on 9 files: the program's answer is the calls' (both checked against the
    expected one inside), and it sends the model fewer bytes than the results would."""
    command("filesystem")  # skips (or fails) when the server is not installed
    out = tmp_path / "cm.json"
    assert code_mode.main(["--rounds", "1", "--files", "9", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["summary"]["calls_per_task"] == 10
    assert doc["summary"]["bytes_ratio"] > 10
    assert len(doc["expected"]) == 3
