"""The workspaces made ahead for runs forked on demand: one per kind, a few kinds, and
none left once closed (a fake workspace stands in: only the bookkeeping is tested here)."""

from __future__ import annotations

import threading

import pytest

from sandbox._children import _workspace
from sandbox._children._workspace import Spares


class _Fake:
    """A workspace that says when it is removed."""

    made: list[_Fake]

    def __init__(self, *, confined: bool, use_cgroups: bool, disk_bytes: int | None) -> None:
        self.kind = (confined, use_cgroups, disk_bytes)
        self.removed = False
        _Fake.made.append(self)

    def remove(self, *, runner_gone: bool) -> None:
        assert runner_gone
        self.removed = True


@pytest.fixture(autouse=True)
def fake(monkeypatch: pytest.MonkeyPatch) -> None:
    _Fake.made = []
    monkeypatch.setattr(_workspace, "Workspace", _Fake)


def test_one_per_kind_taken_once() -> None:
    spares = Spares()
    spares.make((False, True, None))
    spares.make((False, True, None))  # one is kept already: not made again
    assert len(_Fake.made) == 1
    taken: object = spares.take((False, True, None))
    assert taken is _Fake.made[0]
    assert spares.take((False, True, None)) is None
    assert spares.take((True, True, 1 << 20)) is None


def test_a_few_kinds_kept_the_oldest_goes() -> None:
    spares = Spares()
    kinds = [(True, True, (i + 1) << 20) for i in range(_workspace._SPARE_KINDS + 1)]
    for kind in kinds:
        spares.make(kind)
    oldest, *kept = _Fake.made
    assert oldest.removed
    assert [id(w) for w in spares.held()] == [id(w) for w in kept]
    assert not any(w.removed for w in kept)


def test_closed_removes_all_and_makes_none_until_taken_from_again() -> None:
    spares = Spares()
    spares.make((False, True, None))
    (made,) = _Fake.made
    spares.close()
    assert made.removed
    assert spares.held() == []
    spares.make((False, True, None))  # a run's leftover request, after close: nothing made
    assert len(_Fake.made) == 1
    assert spares.take((False, True, None)) is None  # a run: the host is in use again
    spares.make((False, True, None))
    assert len(_Fake.made) == 2


def test_close_waits_for_one_being_made_and_removes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    spares = Spares()
    entered, go = threading.Event(), threading.Event()

    class Slow(_Fake):
        def __init__(self, **kind: object) -> None:
            entered.set()
            assert go.wait(10)
            super().__init__(**kind)  # type: ignore[arg-type]

    monkeypatch.setattr(_workspace, "Workspace", Slow)
    maker = threading.Thread(target=spares.make, args=((False, True, None),))
    maker.start()
    assert entered.wait(10)
    closer = threading.Thread(target=spares.close)
    closer.start()
    closer.join(0.2)
    assert closer.is_alive()  # waits for the one being made
    go.set()
    closer.join(10)
    maker.join(10)
    (made,) = _Fake.made
    assert made.removed
    assert spares.held() == []


def test_a_workspace_that_cannot_be_made_is_left_to_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Making one ahead fails quietly, whatever the reason (the run that makes its own
    says it); nothing is kept, and the next attempt tries again."""
    from sandbox import CgroupSettingError, SpawnFailed

    spares = Spares()
    for error in (SpawnFailed("no uid left"), OSError("no room"), CgroupSettingError("bad")):

        def failing(*, raised: Exception = error, **kind: object) -> None:
            raise raised

        monkeypatch.setattr(_workspace, "Workspace", failing)
        spares.make((False, True, None))
        assert spares.held() == []
    monkeypatch.setattr(_workspace, "Workspace", _Fake)
    spares.make((False, True, None))
    assert len(spares.held()) == 1
