"""The fuzz targets under a short Hypothesis profile, in every run of the suite.

The long campaign is ``python -m tests.fuzz TARGET -runs=1000000`` (see ``__main__.py``);
here each target gets a few hundred scripts (the Server over pipes a few dozen, on each
backend), the inputs a campaign kept as interesting (``corpus/NAME.hex``, replayed
exactly), and scripts that reach each hostile payload for certain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.targets import HOSTILE_FRAMING, HOSTILE_PAYLOADS, TARGETS, server_pipes

CORES: Final = ["server_core", "client_core", "starter_core", "runner_core"]
CORPUS: Final = Path(__file__).parent / "corpus"

#: The suite's share of fuzzing: short, so that the whole suite stays quick.
SHORT: Final = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
SHORT_PIPES: Final = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("name", CORES)
@SHORT
@given(data=st.binary(max_size=1024))
def test_core_keeps_its_promises_whatever_the_bytes(name: str, data: bytes) -> None:
    """Only protocol errors escape, nothing is answered twice, the cap holds, and no
    call is lost, for any script of operations on the role's core."""
    TARGETS[name](data)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@SHORT_PIPES
@given(data=st.binary(max_size=256))
def test_server_over_pipes_keeps_its_promises_whatever_the_bytes(backend: str, data: bytes) -> None:
    """The real Server over OS pipes: the same promises, no hang, no handler unawaited."""
    server_pipes(data, backend=backend)


# Scripts that feed one hostile frame for certain: the role's options (its first bytes,
# left 0), then the bytes of "feed a hostile frame", then the table and the entry.
_OPTIONS: Final = {"server_core": 5, "client_core": 1, "starter_core": 1, "runner_core": 1}
_HOSTILE_OP: Final = {
    "server_core": b"\x02",
    "client_core": b"\x03",
    "starter_core": b"\x03\x00",  # (then a result_id it does not use)
    "runner_core": b"\x01",
}


@pytest.mark.parametrize("name", CORES)
@pytest.mark.parametrize("entry", range(len(HOSTILE_PAYLOADS) + len(HOSTILE_FRAMING)))
@pytest.mark.parametrize("cut", [0, 7], ids=["whole", "in-chunks"])
def test_core_survives_each_hostile_frame(name: str, entry: int, cut: int) -> None:
    """Every entry of the hostile tables, fed to every core (whole, or cut in chunks)."""
    table, index = (0, entry)
    if entry >= len(HOSTILE_PAYLOADS):
        table, index = 1, entry - len(HOSTILE_PAYLOADS)
    chunking = bytes([1, cut]) if cut else bytes([0])
    script = bytes(_OPTIONS[name]) + _HOSTILE_OP[name] + bytes([table, index]) + chunking
    TARGETS[name](script * 2)


def _corpus(name: str) -> list[bytes]:
    """The inputs a campaign kept for ``name``: one hex line each in ``corpus/NAME.hex``."""
    path = CORPUS / f"{name}.hex"
    if not path.is_file():
        return []
    return [bytes.fromhex(line) for line in path.read_text().split()]


@pytest.mark.parametrize("name", CORES)
def test_campaign_corpus_replays(name: str) -> None:
    """Every input the long campaign kept (each reached new coverage then) still passes."""
    for data in _corpus(name):
        TARGETS[name](data)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_campaign_corpus_replays_over_pipes(backend: str) -> None:
    """The same for the Server over pipes, each input on each backend (a loop of its own
    per input: the suite leaves no event loop running behind it)."""
    for data in _corpus("server_pipes"):
        server_pipes(data, backend=backend)
