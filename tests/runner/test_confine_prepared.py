"""A confined runner puts its walls up from what the zygote worked out of its request, or
from the request itself (:func:`runner._confine.prepare`); neither way is a wall skipped."""

from __future__ import annotations

import sys

import msgspec
import pytest

from protocol import ConfineRequest
from runner import _confine, _main


def _request_json(workdir: str = "/tmp/sandbox-run") -> str:
    request = ConfineRequest(
        workdir=workdir,
        import_paths=(sys.executable,),
        disk_bytes=1 << 24,
        disk_files=1024,
        host_uid=None,
        host_gid=None,
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
    assert spec.host_uid is None
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
