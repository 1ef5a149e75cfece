"""A runner forked from the zygote uses the backend the zygote built and prepared."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from protocol import Client, Start
from runner import _main
from runner._backends import DEFAULT_BACKEND, Outcome


class _Counting:
    """A backend that counts the times it is prepared."""

    def __init__(self) -> None:
        self.prepared = 0

    def prepare(self) -> None:
        self.prepared += 1

    def run(self, start: Start, client: Client) -> Outcome:  # pragma: no cover (not run)
        raise AssertionError("not run here")


@pytest.fixture
def template() -> Iterator[_Counting]:
    """This process as a template that prepared its backend (undone after the test)."""
    backend = _Counting()
    _main.keep_prepared(DEFAULT_BACKEND, backend)
    try:
        yield backend
    finally:
        _main._prepared.clear()


def _arguments(*, warm_up: bool) -> _main.Arguments:
    return _main.Arguments((3, 4), (5, 6), warm_up=warm_up)


def test_a_child_for_a_waiting_run_uses_it_as_it_is(template: _Counting) -> None:
    assert _main._load_backend(_arguments(warm_up=False)) is template
    assert template.prepared == 0


def test_a_child_forked_ahead_prepares_it_again(template: _Counting) -> None:
    assert _main._load_backend(_arguments(warm_up=True)) is template
    assert template.prepared == 1


def test_without_a_template_a_runner_builds_and_prepares_its_own() -> None:
    assert not _main._prepared
    backend = _main._load_backend(_arguments(warm_up=False))
    assert backend is not None
    assert type(backend).__name__ == "PythonBackend"
    assert backend._interpreter  # type: ignore[attr-defined]  # (prepare found it)
