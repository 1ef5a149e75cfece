"""A confined runner puts its walls up from what the zygote worked out of its request, or
from the request itself (:func:`runner._confine.prepare`); neither way is a wall skipped."""

from __future__ import annotations

import sys

import msgspec
import pytest

from protocol import ConfineRequest
from runner import _confine, _main, _namespaces

from .helpers import HOST_ID


def _request_json(workdir: str = "/tmp/sandbox-run") -> str:
    request = ConfineRequest(
        workdir=workdir,
        import_paths=(sys.executable,),
        disk_bytes=1 << 24,
        disk_files=1024,
        host_uid=HOST_ID,
        host_gid=HOST_ID,
    )
    return msgspec.json.encode(request).decode()


@pytest.fixture
def put_up(monkeypatch: pytest.MonkeyPatch) -> list[_confine.Confinement]:
    """What :func:`runner._confine.confine` is given, in place of the walls themselves
    (which this process must not put up)."""
    given: list[_confine.Confinement] = []

    def record(confinement: _confine.Confinement, **_: object) -> None:
        given.append(confinement)

    monkeypatch.setattr(_confine, "confine", record)
    return given


def test_prepare_decodes_the_request_and_works_out_its_walls() -> None:
    text = _request_json()
    confinement = _confine.prepare(text)
    assert confinement.request == _confine.parse(text)
    spec = confinement.spec
    assert spec.workdir == "/tmp/sandbox-run"
    assert (spec.disk_bytes, spec.disk_files) == (1 << 24, 1024)
    assert spec.host_uid == HOST_ID
    assert sys.executable in spec.read_only
    # The same walls a child would work out for itself.
    assert spec == _confine.prepare(text).spec


def test_prepare_refuses_what_is_not_a_request() -> None:
    with pytest.raises(ValueError, match="--confine"):
        _confine.prepare('{"workdir": 3}')


def test_what_the_zygote_prepared_goes_up_as_it_is(put_up: list[_confine.Confinement]) -> None:
    prepared = _confine.prepare(_request_json())
    # The JSON is not decoded again: were it, this would be refused.
    assert _main._confine("not a request", prepared=prepared) is None
    assert len(put_up) == 1
    assert put_up[0] is prepared


def test_a_runner_not_given_its_walls_works_them_out(
    put_up: list[_confine.Confinement],
) -> None:
    text = _request_json("/tmp/sandbox-other")
    assert _main._confine(text) is None
    assert len(put_up) == 1
    assert put_up[0].request == _confine.parse(text)
    assert put_up[0].spec == _confine.prepare(text).spec
    failure = _main._confine("not a request")
    assert failure is not None
    assert failure.startswith("the sandbox's walls could not be put up: --confine:")
    assert len(put_up) == 1  # nothing was put up for it


class _Entered(Exception):
    """Raised in place of the walls, once :func:`runner._namespaces.enter` was called."""


def test_walls_checked_by_the_template_go_to_enter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A confinement checked in the template (``check``) carries the plan its child
    would make, and :func:`runner._confine.confine` hands it on; unchecked, it hands none
    (``enter`` checks the spec itself)."""
    given: list[dict[str, object]] = []

    def enter(spec: object, **kwargs: object) -> None:
        given.append({"spec": spec, **kwargs})
        raise _Entered

    monkeypatch.setattr(_namespaces, "enter", enter)
    confinement = _confine.prepare(_request_json())
    with pytest.raises(_Entered):
        _confine.confine(confinement)
    confinement.check(shared=False)
    assert confinement.plan == _namespaces.check(confinement.spec)
    with pytest.raises(_Entered):
        _confine.confine(confinement, view=None)
    assert [entered["plan"] for entered in given] == [None, confinement.plan]
    assert all(entered["spec"] is confinement.spec for entered in given)
