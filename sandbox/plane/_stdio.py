"""MCP on this process's standard input and output, for ``sandbox serve``.

The SDK's own stdio transport drops a line it cannot read without a word (the client then
waits out its own timeout), and lets a write to a client that has gone end the server with
a BrokenPipe traceback. This one answers a bad line with the JSON-RPC error it deserves
(:func:`~sandbox.plane._jsonrpc.diagnose`) and says so on standard error, and takes a
broken pipe for what it is: the client hung up, so the session ends, in one line.

While it serves, descriptor 0 reads from the null device and descriptor 1 writes to
standard error, so that nothing a tool prints or reads can reach the wire; both are put
back at the end. The wire's own copies are read and written by two daemon threads, which
hand each message to the event loop and back (:func:`anyio.from_thread.run`): a thread
blocked on a client that neither writes nor hangs up can never keep the process from
exiting, as a worker thread of the event loop would.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Final, final

import anyio
import anyio.from_thread
import anyio.lowlevel
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError

from ._jsonrpc import diagnose

__all__ = ["StdioTransport"]

#: What a hand-over between a thread and the event loop raises once the session or the loop
#: is over (the loop cancels what was pending when it ends).
_OVER: Final = (
    anyio.RunFinishedError,
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    concurrent.futures.CancelledError,
)
#: How long the end of a session waits for the messages already written to reach a client
#: that is slow to read them.
_DRAIN: Final = 5.0


@final
class StdioTransport:
    """The streams of one MCP session on standard input and output (an async context
    manager): :attr:`read` and :attr:`write` for the server, and :attr:`hung_up`, set
    when a write found the client gone.

    Args:
        log: told, in a line, of each message refused and of a client that hung up.
    """

    def __init__(self, log: Callable[[str], Any]) -> None:
        self._log = log
        self._read_send, self.read = anyio.create_memory_object_stream[SessionMessage | Exception](
            0
        )
        self.write, self._write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        # The dispatcher closes its write stream when it ends; refusals go on a clone.
        self._refusals = self.write.clone()
        self.hung_up = anyio.Event()
        self._written = anyio.Event()
        self._fds: tuple[int, int] | None = None
        self._saved: tuple[int, int] | None = None
        self._reader: threading.Thread | None = None
        self._writer: threading.Thread | None = None

    async def __aenter__(self) -> StdioTransport:
        self._claim()
        token = anyio.lowlevel.current_token()
        assert self._fds is not None
        wire_in, wire_out = self._fds
        self._reader = threading.Thread(
            target=self._read_lines, args=(wire_in, token), name="sandbox stdio reader", daemon=True
        )
        self._writer = threading.Thread(
            target=self._write_lines,
            args=(wire_out, token),
            name="sandbox stdio writer",
            daemon=True,
        )
        self._reader.start()
        self._writer.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            self._read_send.close()
            self._refusals.close()
            self.write.close()
            # What the server wrote last (its answers to a closing session) goes out
            # before the streams are given back, unless the client does not read it.
            with anyio.move_on_after(_DRAIN):
                await self._written.wait()
            self._write_receive.close()
            self._release()

    # -- the descriptors --

    def _claim(self) -> None:
        sys.stdout.flush()
        wire_in, wire_out = os.dup(0), os.dup(1)
        saved_in, saved_out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
            os.dup2(2, 1)
        finally:
            os.close(null)
        self._fds = (wire_in, wire_out)
        self._saved = (saved_in, saved_out)

    def _release(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()  # what a tool printed goes to standard error, not the wire
        if self._saved is not None:
            for fd, saved in zip((0, 1), self._saved, strict=True):
                os.dup2(saved, fd)
                os.close(saved)
            self._saved = None
        if self._fds is not None:
            # A thread still blocked on a descriptor keeps it: closing it under the thread
            # could hand its number to another file, which the thread would then read.
            for thread, fd in zip((self._reader, self._writer), self._fds, strict=True):
                if thread is None or not thread.is_alive():
                    os.close(fd)
            self._fds = None

    # -- the threads --

    @staticmethod
    def _back(token: Any, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> bool:
        """Run ``fn`` in the event loop; False once the loop or the session is over."""
        try:
            anyio.from_thread.run(fn, *args, token=token)
        except _OVER:
            return False
        return True

    def _read_lines(self, fd: int, token: Any) -> None:
        with open(fd, "rb", closefd=False) as wire:
            try:
                for line in wire:
                    if line.strip() and not self._back(token, self._deliver, line):
                        return
            except OSError as exc:
                self._back(token, self._say, f"cannot read standard input: {exc}")
        self._back(token, self._end_of_input)

    def _write_lines(self, fd: int, token: Any) -> None:
        try:
            while True:
                try:
                    message = anyio.from_thread.run(self._write_receive.receive, token=token)
                except _OVER:
                    return
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    _write_all(fd, data.encode() + b"\n")
                except OSError as exc:
                    self._back(token, self._hang_up, exc)
                    return
        finally:
            with contextlib.suppress(*_OVER):
                anyio.from_thread.run_sync(self._written.set, token=token)

    # -- in the event loop --

    async def _deliver(self, line: bytes) -> None:
        try:
            message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValidationError:
            bad = diagnose(line)
            self._log(f"refused a malformed message on standard input: {bad.line()}")
            if bad.answer:
                await self._refusals.send(SessionMessage(bad.error()))
            return
        await self._read_send.send(SessionMessage(message))

    async def _end_of_input(self) -> None:
        self._read_send.close()

    async def _say(self, line: str) -> None:
        self._log(line)

    async def _hang_up(self, exc: OSError) -> None:
        if not self.hung_up.is_set():
            why = "broken pipe" if isinstance(exc, BrokenPipeError) else str(exc)
            self._log(f"the client hung up ({why}); its session is ended")
            self.hung_up.set()
        # Whoever writes next learns that nobody reads (instead of waiting for ever).
        self._write_receive.close()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
