"""A runner forked from the zygote uses the backend the zygote built and prepared."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from protocol import Client, Start
from runner import _main
from runner._backends import DEFAULT_BACKEND, Outcome

from .helpers import assert_closed, one_pipe_then_emfile


class _Counting:
    """A backend that counts the times it is prepared, for programs that await too."""

    def __init__(self) -> None:
        self.prepared = 0
        self.prepared_for: list[tuple[bool, bool]] = []

    def prepare(self) -> None:
        self.prepared += 1

    def prepare_for(self, *, calls: bool, awaits: bool) -> None:
        self.prepared_for.append((calls, awaits))

    def run(self, start: Start, client: Client) -> Outcome:  # pragma: no cover (not run)
        raise AssertionError("not run here")


class _Plain:
    """A backend with ``prepare`` only."""

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


def _arguments(
    *, warm_up: bool, warm_calls: bool = False, warm_await: bool = False
) -> _main.Arguments:
    return _main.Arguments(
        (3, 4), (5, 6), warm_up=warm_up, warm_calls=warm_calls, warm_await=warm_await
    )


def test_a_child_for_a_waiting_run_uses_it_as_it_is(template: _Counting) -> None:
    assert _main._load_backend(_arguments(warm_up=False)) is template
    assert template.prepared == 0


def test_a_child_forked_ahead_prepares_it_again(
    template: _Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    rehearsed: list[bool] = []

    def rehearse() -> bool:
        rehearsed.append(True)
        return True

    monkeypatch.setattr(_main, "rehearse", rehearse)
    assert _main._load_backend(_arguments(warm_up=True)) is template
    assert (template.prepared, template.prepared_for, rehearsed) == (1, [], [True])


@pytest.mark.parametrize(("calls", "awaits"), [(True, False), (False, True), (True, True)])
def test_a_child_forked_ahead_for_calls_or_awaits_prepares_for_them_too(
    template: _Counting, calls: bool, awaits: bool
) -> None:
    arguments = _arguments(warm_up=True, warm_calls=calls, warm_await=awaits)
    assert _main._load_backend(arguments) is template
    assert (template.prepared, template.prepared_for) == (1, [(calls, awaits)])


def test_a_child_for_a_waiting_run_prepares_nothing_whatever_it_is_asked(
    template: _Counting,
) -> None:
    arguments = _arguments(warm_up=False, warm_calls=True, warm_await=True)
    assert _main._load_backend(arguments) is template
    assert (template.prepared, template.prepared_for) == (0, [])


def test_a_backend_with_nothing_more_to_prepare_is_prepared_all_the_same() -> None:
    """``prepare_for`` is optional: a backend without it is prepared as ever."""
    plain = _Plain()
    _main.keep_prepared(DEFAULT_BACKEND, plain)
    try:
        arguments = _arguments(warm_up=True, warm_calls=True, warm_await=True)
        assert _main._load_backend(arguments) is plain
    finally:
        _main._prepared.clear()
    assert plain.prepared == 1


def test_without_a_template_a_runner_builds_and_prepares_its_own() -> None:
    assert not _main._prepared
    backend = _main._load_backend(_arguments(warm_up=False))
    assert backend is not None
    assert type(backend).__name__ == "PythonBackend"
    assert backend._interpreter  # type: ignore[attr-defined]  # (prepare found it)


def test_a_rehearsal_goes_through_a_run_and_leaves_nothing() -> None:
    """``rehearse`` reads a Start and writes its Result on channels of its own, all the
    way through, and leaves no descriptor and no thread behind."""
    import threading

    before = sorted(os.listdir("/proc/self/fd")), threading.enumerate()
    assert _main.rehearse()
    assert (sorted(os.listdir("/proc/self/fd")), threading.enumerate()) == before


def test_a_rehearsal_without_descriptors_to_spare_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No pipe to be had: the rehearsal is skipped (False), nothing raised, nothing left."""
    made = one_pipe_then_emfile(monkeypatch)
    assert not _main.rehearse()
    assert len(made) == 2
    assert_closed(made)


def test_a_rehearsal_frames_its_start_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rehearsal's Start is framed once (a template's children use that frame): two
    rehearsals, one framing, both all the way through."""
    from protocol import StarterCore

    framed: list[Start] = []
    real = StarterCore.send_start

    def counting(self: StarterCore, start: Start) -> bytearray:
        framed.append(start)
        return real(self, start)

    _main._rehearsal_frame.cache_clear()
    monkeypatch.setattr(StarterCore, "send_start", counting)
    try:
        assert _main.rehearse()
        assert _main.rehearse()
    finally:
        _main._rehearsal_frame.cache_clear()
    assert framed == [_main._REHEARSAL]


def test_a_prepared_backend_finds_the_interpreter_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child prepares the template's backend again (its warm-up): the interpreter's real
    file, found by the template, is not looked for again."""
    from runner._backends.python import PythonBackend

    backend = PythonBackend()
    backend.prepare()
    found = backend._interpreter
    assert found == os.path.realpath(sys.executable)

    def refuse(path: str) -> str:
        raise AssertionError(f"looked for {path} again")

    monkeypatch.setattr(os.path, "realpath", refuse)
    backend.prepare()
    assert backend._interpreter == found
