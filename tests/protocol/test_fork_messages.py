"""The host-zygote wire (protocol._fork): exact bytes, and whatever the bytes, a typed refusal."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    CONFINE_DECODER,
    FORK_REQUEST_DECODER,
    REPORT_DECODER,
    ConfineRequest,
    Exited,
    Failed,
    Forked,
    ForkRequest,
    Moved,
    RemoteProtocolError,
    RunnerExit,
    decode_fork,
)

#: Each message and the bytes it is on the wire, written out by hand: a zygote in another
#: language must produce and accept exactly these.
GOLDEN: list[tuple[Any, bytes]] = [
    (
        ForkRequest(mode="warm", workdir="/tmp/w", env={"HOME": "/tmp/w"}),
        b'{"mode":"warm","workdir":"/tmp/w","env":{"HOME":"/tmp/w"},"cgroups":[],'
        b'"confine":"","start_timeout":60.0,"linger":true,"argv":[],"warm_up":true,'
        b'"warm_calls":false,"warm_await":false}',
    ),
    (
        ForkRequest(
            mode="cold",
            workdir="/tmp/w",
            env={},
            cgroups=("/sys/fs/cgroup/pids/run-1-a/cgroup.procs",),
            confine='{"workdir":"/tmp/w","disk_bytes":null}',
            start_timeout=0.0,
            linger=False,
            argv=("/usr/bin/python3", "-I", "-S"),
            warm_up=False,
            warm_calls=True,
            warm_await=True,
        ),
        b'{"mode":"cold","workdir":"/tmp/w","env":{},'
        b'"cgroups":["/sys/fs/cgroup/pids/run-1-a/cgroup.procs"],'
        b'"confine":"{\\"workdir\\":\\"/tmp/w\\",\\"disk_bytes\\":null}","start_timeout":0.0,'
        b'"linger":false,"argv":["/usr/bin/python3","-I","-S"],"warm_up":false,'
        b'"warm_calls":true,"warm_await":true}',
    ),
    (Forked(pid=42), b'{"type":"forked","pid":42}'),
    (Moved(pid=43), b'{"type":"moved","pid":43}'),
    (
        Exited(status=9, utime=0.5, stime=0.25, maxrss=1024),
        b'{"type":"exited","status":9,"utime":0.5,"stime":0.25,"maxrss":1024}',
    ),
    (Failed(error="fork: no memory"), b'{"type":"failed","error":"fork: no memory"}'),
    (
        ConfineRequest(workdir="/w", disk_bytes=1 << 20, host_uid=2097152000),
        b'{"workdir":"/w","disk_bytes":1048576,"import_paths":[],"hostname":"sandbox",'
        b'"host_uid":2097152000,"host_gid":null,"disk_files":null}',
    ),
]


def _decoder(message: object) -> msgspec.json.Decoder[Any]:
    if isinstance(message, ForkRequest):
        return FORK_REQUEST_DECODER
    if isinstance(message, ConfineRequest):
        return CONFINE_DECODER
    return REPORT_DECODER


@pytest.mark.parametrize(("message", "wire"), GOLDEN, ids=lambda x: type(x).__name__)
def test_each_message_is_exactly_these_bytes(message: object, wire: bytes) -> None:
    assert msgspec.json.encode(message) == wire
    assert decode_fork(_decoder(message), wire) == message


@pytest.mark.parametrize(
    ("decoder", "wire"),
    [
        (REPORT_DECODER, b'{"type":"forked"}'),  # no pid
        (REPORT_DECODER, b'{"type":"forked","pid":0}'),  # not a pid
        (REPORT_DECODER, b'{"type":"forked","pid":2147483648}'),
        (REPORT_DECODER, b'{"type":"spawned","pid":42}'),  # no such report
        (REPORT_DECODER, b'{"pid":42}'),  # no tag
        (REPORT_DECODER, b'{"type":"exited","status":-1,"utime":0,"stime":0,"maxrss":0}'),
        (REPORT_DECODER, b'{"type":"forked","pid":42,"extra":1}'),
        (FORK_REQUEST_DECODER, b'{"mode":"hot","workdir":"/w","env":{}}'),
        (FORK_REQUEST_DECODER, b'{"mode":"warm","workdir":"/w","env":{},"start_timeout":-1}'),
        (FORK_REQUEST_DECODER, b'{"mode":"warm","workdir":"/w"}'),
        (CONFINE_DECODER, b'{"workdir":"/w"}'),  # disk_bytes is the host's to give
        (CONFINE_DECODER, b'{"workdir":"/w","disk_bytes":0}'),
        (CONFINE_DECODER, b'{"workdir":"/w","disk_bytes":null,"host_uid":-1}'),
        (REPORT_DECODER, b'{"type":"failed","error":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        (REPORT_DECODER, b"\xff\xfe"),
        (REPORT_DECODER, b""),
    ],
)
def test_what_is_not_a_message_is_refused_whole(
    decoder: msgspec.json.Decoder[Any], wire: bytes
) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_fork(decoder, wire)


@given(st.binary(max_size=512) | st.text(max_size=256).map(str.encode))
def test_any_bytes_decode_or_are_refused_as_a_protocol_error(data: bytes) -> None:
    """Whatever the bytes, each decoder gives a message or a RemoteProtocolError."""
    decoders: tuple[msgspec.json.Decoder[Any], ...] = (
        FORK_REQUEST_DECODER,
        REPORT_DECODER,
        CONFINE_DECODER,
    )
    for decoder in decoders:
        try:
            decode_fork(decoder, data)
        except RemoteProtocolError:
            pass


@given(
    st.builds(Forked, pid=st.integers(1, 2**31 - 1))
    | st.builds(Moved, pid=st.integers(1, 2**31 - 1))
    | st.builds(
        Exited,
        status=st.integers(0, 0xFFFF),
        utime=st.floats(0, 1e9),
        stime=st.floats(0, 1e9),
        maxrss=st.integers(0, 2**63 - 1),
    )
    | st.builds(Failed, error=st.text())
)
def test_every_report_round_trips(report: Forked | Moved | Exited | Failed) -> None:
    assert decode_fork(REPORT_DECODER, msgspec.json.encode(report)) == report


def test_the_runners_exit_statuses_are_the_contracts() -> None:
    """The statuses the runner's modules use are the ones the contract names."""
    from runner import _main, _namespaces

    assert _main.EXIT_NOT_CONFINED == RunnerExit.NOT_CONFINED
    assert _main.EXIT_NO_START == RunnerExit.NO_START
    assert int(_namespaces.EXIT_DETACHED) == int(RunnerExit.DETACHED)
