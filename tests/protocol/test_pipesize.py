"""A pipe is grown by its writer to fit a large frame, and only then (protocol._pipesize)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator

import anyio
import pytest

from protocol import VERSION, FdChannel, Result, Runner, Start
from protocol._pipesize import DEFAULT_PIPE_BYTES, MAX_PIPE_BYTES, fit_pipe

from .roles import start_against


@contextlib.contextmanager
def _pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    try:
        yield r, w
    finally:
        for fd in (r, w):
            with contextlib.suppress(OSError):
                os.close(fd)


#: The real call, for reading a pipe's size while a test replaces the module's.
_fcntl = fcntl.fcntl


def _size(fd: int) -> int:
    return _fcntl(fd, fcntl.F_GETPIPE_SZ)


def test_a_pipe_is_grown_to_fit_and_asked_once() -> None:
    with _pipe() as (_, w):
        assert _size(w) == DEFAULT_PIPE_BYTES
        assert fit_pipe(w, 1000) == DEFAULT_PIPE_BYTES  # small: nothing asked
        assert _size(w) == DEFAULT_PIPE_BYTES
        holds = fit_pipe(w, 300_000)
        assert holds == _size(w) >= 300_000  # the kernel rounds up to a power of two pages
        assert fit_pipe(w, 5 << 20, holds) == MAX_PIPE_BYTES == _size(w)  # capped


def test_what_is_known_to_fit_asks_the_kernel_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    def counting(fd: int, cmd: int, arg: int = 0) -> int:
        asked.append(cmd)
        return MAX_PIPE_BYTES

    monkeypatch.setattr(fcntl, "fcntl", counting)
    holds = fit_pipe(1, 2 << 20)
    assert fit_pipe(1, 2 << 20, holds) == holds
    assert fit_pipe(1, 700_000, holds) == holds
    assert asked == [fcntl.F_SETPIPE_SZ]


def test_a_refusal_or_a_socket_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = socket.socketpair()
    with a, b:
        # Not a pipe: the kernel refuses, and the writer stops asking.
        assert fit_pipe(a.fileno(), 1 << 20) == MAX_PIPE_BYTES

    def quota(fd: int, cmd: int, arg: int = 0) -> int:
        raise PermissionError(1, "Operation not permitted")  # pipe-user-pages-soft

    monkeypatch.setattr(fcntl, "fcntl", quota)
    with _pipe() as (_, w):
        assert fit_pipe(w, 1 << 20) == MAX_PIPE_BYTES


@pytest.mark.anyio
async def test_a_channel_writes_a_large_frame_in_one_go() -> None:
    """The pipe takes a 200 KiB write whole (a 64 KiB pipe would take 64 KiB of it); a
    small write leaves the pipe as it was."""
    with _pipe() as (r, w):
        channel = FdChannel(r, w)
        try:
            assert channel.try_write(b"x" * 100) == 100
            assert _size(w) == DEFAULT_PIPE_BYTES
            assert channel.try_write(b"y" * (200 << 10)) == 200 << 10
            assert _size(w) >= 200 << 10
        finally:
            channel.close()


@pytest.mark.anyio
async def test_a_refused_growth_still_moves_the_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    def quota(fd: int, cmd: int, arg: int = 0) -> int:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(fcntl, "fcntl", quota)
    payload = os.urandom(300 << 10)
    with _pipe() as (r, w):
        writer, reader = FdChannel(r, w), FdChannel(r, r)
        got = bytearray()

        async def read() -> None:
            while len(got) < len(payload):
                got.extend(await reader.receive())

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read)
                await writer.send_all(payload)
        assert bytes(got) == payload
        assert _size(w) == DEFAULT_PIPE_BYTES


@pytest.mark.anyio
async def test_a_large_result_grows_the_runners_pipe_and_arrives_whole() -> None:
    """The child's Runner grows its write pipe before a 1 MiB Result (and not for a small
    one); the host's Starter reads it whole."""
    value = '"' + "v" * (1 << 20) + '"'
    sizes: dict[str, int] = {}
    for name, sent in (("small", "1"), ("large", value)):
        with _pipe() as (down_r, down_w), _pipe() as (up_r, up_w):

            def answer(runner: Runner, start: Start, sent: str = sent) -> None:
                runner.send_result(
                    Result(v=VERSION, result_id=start.result_id, ok=True, value=sent)
                )

            result = await start_against(Runner(down_r, up_w), FdChannel(up_r, down_w), answer)
            assert result.value == sent
            sizes[name] = _size(up_w)
    assert sizes == {"small": DEFAULT_PIPE_BYTES, "large": MAX_PIPE_BYTES}
