"""A chat-completions server on loopback that plays a script, so that model callers are
tested over real HTTP: the SDK, its transport and its error handling all run, and only the
model is made up.

Each request to ``POST /v1/chat/completions`` takes the next entry of the script:

- a dict is the JSON body of a 200 answer (:func:`reply` builds a whole chat completion;
  any other dict is sent as it is, for bodies a real server might send);
- an :class:`Error` is an error status with a JSON body (:func:`error`);
- a :class:`Delay` waits, then answers with its own entry (:func:`delay`);
- a callable is called with the request's JSON body and returns the entry to play.

A request past the end of the script, or to another path, gets a 500 (404) that says so,
so a test that asks more than it planned fails loudly.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self, TypeAlias

__all__ = [
    "DEADLINE",
    "Delay",
    "Entry",
    "Error",
    "ScriptedServer",
    "delay",
    "error",
    "reply",
]

#: The path the SDK posts chat completions to, under ``base_url``.
COMPLETIONS_PATH = "/v1/chat/completions"

#: Seconds any wait on the scripted server may take, a test's calls or the server's close.
#: The server answers at once (a :class:`Delay` is at most a few seconds, and cut short on
#: close), and a handler's read gives up after 10 s; longer means something hangs.
DEADLINE = 30.0


@dataclass(frozen=True)
class Error:
    """An error answer: ``status``, a JSON ``body``, and extra ``headers``."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (cut short when the server closes), then answer with ``then``."""

    seconds: float
    then: Entry


Entry: TypeAlias = "dict[str, Any] | Error | Delay | Callable[[dict[str, Any]], Entry]"

#: A tool call for :func:`reply`: id, name, and arguments (an object, or raw text).
ScriptedCall: TypeAlias = tuple[str, str, "Mapping[str, Any] | str"]


def reply(
    content: str = "",
    tool_calls: Iterable[ScriptedCall] = (),
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = (10, 5),
    reasoning: str | None = None,
    *,
    reasoning_field: str = "reasoning_content",
    model: str = "scripted-model",
) -> dict[str, Any]:
    """A whole chat-completion body, as OpenAI writes it.

    Args:
        content: the message text (null in the body if empty and there are tool calls).
        tool_calls: the calls, each ``(id, name, arguments)``.
        finish_reason: default ``tool_calls`` if there are calls, else ``stop``.
        usage: ``(prompt_tokens, completion_tokens)``; None leaves ``usage`` out.
        reasoning: reasoning text, put in the message under ``reasoning_field`` (vLLM and
            DeepSeek say ``reasoning_content``; some servers say ``reasoning``).
        model: the model name the body reports.
    """
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {
                "name": name,
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            },
        }
        for call_id, name, arguments in tool_calls
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or not calls else None,
    }
    if calls:
        message["tool_calls"] = calls
    if reasoning is not None:
        message[reasoning_field] = reasoning
    body: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
    }
    if usage is not None:
        prompt, completion = usage
        body["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
    return body


def error(
    status: int,
    message: str,
    code: str | int | None = None,
    *,
    type: str = "invalid_request_error",  # the field's name in the body
    headers: Mapping[str, str] | None = None,
) -> Error:
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.
    For another shape, make an :class:`Error` with the body wanted."""
    body = {"error": {"message": message, "type": type, "param": None, "code": code}}
    return Error(status, body, dict(headers or {}))


def delay(seconds: float, then: Entry | None = None) -> Delay:
    """Wait ``seconds``, then answer ``then`` (default: an empty :func:`reply`)."""
    return Delay(seconds, reply() if then is None else then)


class ScriptedServer:
    """An HTTP server on 127.0.0.1 (a free port) playing ``script``, one entry a request,
    from a daemon thread. Use it as a context manager (in sync or async tests alike): the
    server is closed, and its threads joined, on the way out, whatever happened inside.

    Attributes:
        base_url: the API root to give the client, ``http://127.0.0.1:PORT/v1``.
    """

    def __init__(self, script: Sequence[Entry] = ()) -> None:
        self._lock = threading.Lock()
        self._script: deque[Entry] = deque(script)
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.scripted = self
        port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-server-{port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far, in order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of each request received so far, names in lower case (a copy)."""
        with self._lock:
            return list(self._headers)

    @property
    def remaining(self) -> int:
        """How many entries of the script are left."""
        with self._lock:
            return len(self._script)

    def add(self, *entries: Entry) -> None:
        """Append ``entries`` to the script."""
        with self._lock:
            self._script.extend(entries)

    def close(self) -> None:
        """Stop serving, cut short any delay, and join every thread, within
        :data:`DEADLINE`. Idempotent.

        Raises:
            AssertionError: the server did not close in time (a thread hangs).
        """
        if self._closing.is_set():
            return
        self._closing.set()
        # shutdown() and server_close() wait without a timeout of their own: they run in a
        # thread of their own, which is joined with one.
        closer = threading.Thread(target=self._shut_down, name=f"{self._thread.name}-close")
        closer.daemon = True
        closer.start()
        closer.join(DEADLINE)
        if closer.is_alive():
            raise AssertionError(f"the scripted server did not close within {DEADLINE} s")

    def _shut_down(self) -> None:
        self._server.shutdown()
        self._server.server_close()  # joins the handler threads (see _Server)
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _take(self, body: dict[str, Any], headers: dict[str, str]) -> Entry | None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            return self._script.popleft() if self._script else None

    def _resolve(self, entry: Entry, body: dict[str, Any]) -> dict[str, Any] | Error:
        while True:
            if isinstance(entry, Delay):
                self._closing.wait(entry.seconds)
                entry = entry.then
            elif isinstance(entry, dict | Error):
                return entry
            else:
                entry = entry(body)


class _Server(ThreadingHTTPServer):
    # Handler threads are not daemons, so server_close() joins them; none can hang there,
    # since a Delay wakes when the server closes and a socket read times out (_Handler).
    daemon_threads = False
    block_on_close = True
    scripted: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (its timeout passed) closed the socket under our answer:
        # expected in the timeout tests, and nothing to report. Anything else is printed.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 10.0  # a read that waits longer than this is a stuck client: drop it

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {"_unparsed": raw.decode(errors="replace")}
        headers = {name.lower(): value for name, value in self.headers.items()}
        scripted = self.server.scripted
        if self.path != COMPLETIONS_PATH:
            scripted._take(body, headers)  # recorded, but it takes no entry
            self._send(error(404, f"scripted server: no such path {self.path}"))
            return
        entry = scripted._take(body, headers)
        if entry is None:
            n = len(scripted.requests)
            message = f"scripted server: the script ran out (request #{n} has no entry)"
            self._send(error(500, message, type="script_exhausted"))
            return
        self._send(scripted._resolve(entry, body))

    def do_GET(self) -> None:
        self._send(error(404, f"scripted server: no GET {self.path}"))

    def _send(self, answer: dict[str, Any] | Error) -> None:
        if isinstance(answer, Error):
            status, body, headers = answer.status, answer.body, answer.headers
        else:
            status, body, headers = 200, answer, {}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read .requests instead
