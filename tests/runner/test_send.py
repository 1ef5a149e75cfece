"""How the runner reports its outcome (``runner._main._run_program`` and ``_send``): a
backend with ``run_json`` has a successful value sent from its JSON bytes; one without
is reported as before; a Result that cannot be sent becomes a small failure."""

from __future__ import annotations

from typing import Any, cast

import msgspec
import pytest

from protocol import VERSION, Client, Kind, LocalFrameTooLarge, Result, Runner, Start, StartBudget
from runner import Outcome
from runner._main import _run_program, _send

START = Start(v=VERSION, program="1", bindings=(), budget=StartBudget(), result_id="r" * 32)


class _Client:
    calls_made = 2
    bytes_received = 9


class _Runner:
    """Records what the runner would send; ``refuse`` makes the first send raise."""

    def __init__(self, refuse: BaseException | None = None) -> None:
        self.refuse = refuse
        self.sent: list[tuple[Result, bytes | None]] = []

    def _refused(self) -> None:
        if self.refuse is not None:
            refuse, self.refuse = self.refuse, None
            raise refuse

    def send_result(self, result: Result) -> None:
        self._refused()
        self.sent.append((result, None))

    def send_result_json(self, result: Result, value_json: bytes) -> None:
        self._refused()
        self.sent.append((result, value_json))


class _Backend:
    def prepare(self) -> None:
        pass

    def run(self, start: Start, client: Client) -> Outcome:
        return Outcome.success('"from run"')


class _JsonBackend(_Backend):
    def run_json(self, start: Start, client: Client) -> Outcome | bytes:
        return b'"from run_json"'


def _sent(outcome: Outcome | bytes, runner: _Runner) -> list[tuple[Result, bytes | None]]:
    _send(cast(Runner, runner), START, outcome, cast(Client, _Client()))
    return runner.sent


def test_a_backend_with_run_json_is_asked_for_the_values_bytes() -> None:
    client = cast(Client, _Client())
    assert _run_program(_JsonBackend(), START, client) == b'"from run_json"'
    assert _run_program(_Backend(), START, client) == Outcome.success('"from run"')


def test_a_value_as_bytes_is_sent_from_them() -> None:
    ((result, value_json),) = _sent(b'"v"', _Runner())
    assert value_json == b'"v"'
    assert (result.ok, result.value, result.result_id) == (True, "", START.result_id)
    assert (result.calls, result.bytes) == (2, 9)


def test_an_outcome_is_sent_as_it_is() -> None:
    outcome = Outcome.failure(Kind.RAISED, "boom", value="3")
    ((result, value_json),) = _sent(outcome, _Runner())
    assert value_json is None
    assert (result.ok, result.kind, result.error, result.value) == (False, Kind.RAISED, "boom", "3")


@pytest.mark.parametrize("outcome", [b'"v"', Outcome.success('"v"')], ids=["bytes", "outcome"])
@pytest.mark.parametrize(
    ("refusal", "says"),
    [
        (LocalFrameTooLarge(20 << 20, 16 << 20), "value is too large for one Result frame"),
        (MemoryError(), "out of memory while encoding the program's value"),
    ],
    ids=["too-large", "no-memory"],
)
def test_a_result_that_cannot_be_sent_becomes_a_limit_failure(
    outcome: Any, refusal: BaseException, says: str
) -> None:
    ((result, value_json),) = _sent(outcome, _Runner(refuse=refusal))
    assert value_json is None
    assert (result.ok, result.kind) == (False, Kind.LIMIT)
    assert says in result.error
    assert msgspec.json.encode(result)  # small, and sendable
