"""The ``host`` object a program sees: one attribute per binding, each a callable tool.

How a call looks from the program
---------------------------------
``host.search("q")`` is awaitable when an asyncio event loop is running in the calling
thread, so ``await host.search(q)`` works and many calls under ``asyncio.gather`` are many
calls in flight on the one call channel (matched by id, invariant 6). Called with no loop
running, the same expression blocks and returns the value, so a plain script needs no
``await``. ``host.search.blocking("q")`` always blocks, loop or not.

However many calls the program makes at once (``asyncio.gather`` over a thousand, threads
calling the blocking form together), at most the parent's in-flight cap of them are sent:
the rest wait their turn in the call channel's client (:class:`protocol.Client`), in the
order they were made, and a call cancelled while it waits is never sent. So the cap, which
the parent enforces by refusing what goes past it, never fails a program's call.

How arguments cross the wire
----------------------------
A binding's signature (``"search(query, limit=10)"``) names its parameters. The program
may pass them by position or by keyword; the runner sends a JSON object of the names to
the values *as passed*. It fills in no defaults and checks no types: the host owns the
tool, its defaults and its validation. It does refuse, with :class:`TypeError` and before
anything is sent, what the signature cannot accept: too many positional arguments, a
keyword it does not name, the same argument twice. Every parameter is an argument, a
leading one named ``host`` included (the seed's ``get_logs(host, count)`` takes a host name).

A binding without a signature takes exactly one argument, sent as its JSON text (no
argument sends ``null``).

A tool's value text is decoded as JSON and returned; text that is not JSON is returned as
it is. A failed call raises :class:`protocol.CallError` with the parent's kind.

Signatures are read leniently, so that the call shapes other runners use (the seed writes
them JavaScript-style) work too: each parameter is a name, optionally followed by a type
(``": str"``), a default (``"= 10"``) or ``"?"``; ``*args``, ``...args``, a bare ``*``,
``/`` and ``**kwargs`` mean what they mean in Python. A return annotation is ignored.
"""

from __future__ import annotations

import sys
from collections.abc import Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final, final

from protocol import CallError, Kind, LocalFrameTooLarge

from ._value import decode_result, encode_json

if TYPE_CHECKING:
    from protocol import Client, StartBinding

__all__ = ["Host", "Signature", "Tool", "parse_signature"]


@final
class Signature:
    """The parameters of one binding, as far as the runner checks calls against them.

    Attributes:
        positional: names that positional arguments fill, in order.
        keyword: names a keyword argument may use (positional ones included, unless they
            are positional-only).
        var_positional: the name extra positional arguments are sent under as a list, or
            None when extra positional arguments are refused.
        var_keyword: whether keywords the signature does not name are accepted (sent as
            they are).
    """

    __slots__ = ("keyword", "positional", "var_keyword", "var_positional")

    def __init__(
        self,
        positional: tuple[str, ...],
        keyword: frozenset[str],
        var_positional: str | None,
        var_keyword: bool,
    ) -> None:
        self.positional = positional
        self.keyword = keyword
        self.var_positional = var_positional
        self.var_keyword = var_keyword

    def bind(
        self, tool: str, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> dict[str, object]:
        """Map a call's arguments to parameter names, as Python would (minus defaults).

        Raises:
            TypeError: too many positional arguments, an unknown keyword, or an argument
                given twice.
        """
        positional = self.positional
        bound: dict[str, object] = {}
        if len(args) > len(positional) and self.var_positional is None:
            raise TypeError(
                f"host.{tool}() takes {_count(len(positional), 'positional argument')} "
                f"but {len(args)} were given"
            )
        bound.update(zip(positional, args, strict=False))
        if self.var_positional is not None and len(args) > len(positional):
            bound[self.var_positional] = list(args[len(positional) :])
        for name, value in kwargs.items():
            if name in bound:
                raise TypeError(f"host.{tool}() got multiple values for argument {name!r}")
            if name not in self.keyword and not self.var_keyword:
                known = ", ".join(sorted(self.keyword)) or "none"
                raise TypeError(
                    f"host.{tool}() got an unexpected keyword argument {name!r} "
                    f"(its keyword arguments: {known})"
                )
            bound[name] = value
        return bound


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


# Bracket pairs a default value or a type may nest (``x: dict[str, int] = {}``). Angle
# brackets count (``Map<string, number>``) except as part of an arrow (``=>``, ``->``).
_OPEN: Final = "([{<"
_CLOSE: Final = ")]}>"
# Quotes that open a string literal (in a default value), JavaScript's backtick included.
_QUOTES: Final = "\"'`"


def _outside_quotes(text: str) -> Iterator[tuple[int, str, int]]:
    """``(index, char, depth)`` for each character outside string literals.

    ``depth`` is the bracket depth *after* the character: an opening bracket is reported
    at its inner depth, a closing one at its outer depth.
    """
    depth = 0
    quote = ""  # the quote character of the literal we are in, if any
    escaped = False
    for i, ch in enumerate(text):
        if quote:
            quote, escaped = _in_literal(ch, quote, escaped)
        elif ch in _QUOTES:
            quote = ch
        else:
            depth += _bracket_step(text, i)
            yield i, ch, depth


def _in_literal(ch: str, quote: str, escaped: bool) -> tuple[str, bool]:
    """One character inside a literal opened by ``quote``: (the quote still open, or ""
    once it closes; whether the next character is escaped)."""
    if escaped:
        return quote, False
    if ch == "\\":
        return quote, True
    return ("" if ch == quote else quote), False


def _bracket_step(text: str, i: int) -> int:
    """How the bracket depth changes at ``text[i]``: +1, -1 or 0 (an arrow's ``>`` is no
    bracket)."""
    ch = text[i]
    if ch in _OPEN:
        return 1
    if ch in _CLOSE and not (ch == ">" and i and text[i - 1] in "=-"):
        return -1
    return 0


def _split_top_level(text: str) -> list[str]:
    """Split ``text`` at commas outside brackets and quotes."""
    parts: list[str] = []
    start = 0
    for i, ch, depth in _outside_quotes(text):
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _parameter_list(signature: str) -> str:
    """The text between a signature's outer parentheses.

    Raises:
        ValueError: the signature has no parenthesized parameter list.
    """
    open_at = signature.find("(")
    if open_at >= 0:
        inner = signature[open_at:]
        for i, ch, depth in _outside_quotes(inner):
            if depth == 0 and ch == ")":
                return inner[1:i]
    raise ValueError("expected a parameter list in parentheses, as in 'search(query, limit)'")


def _leading_name(text: str) -> str:
    """The identifier ``text`` starts with ("" if it starts with none)."""
    end = 0
    while end < len(text) and text[: end + 1].isidentifier():
        end += 1
    return text[:end]


def parse_signature(signature: str) -> Signature:
    """Read a binding's call shape, e.g. ``"search(query, limit=10)"``.

    Raises:
        ValueError: no parameter list in parentheses, or a parameter without a name the
            runner can read.
    """
    positional: list[str] = []
    keyword: set[str] = set()
    var_positional: str | None = None
    var_keyword = False
    keyword_only = False
    for raw in _split_top_level(_parameter_list(signature)):
        part = raw.strip()
        if not part:
            continue  # a trailing comma, or no parameters at all
        if part == "/":  # the names before it are positional-only
            keyword.difference_update(positional)
            continue
        if part == "*":
            keyword_only = True
            continue
        if part.startswith("**"):
            var_keyword = True
            continue
        variadic = part.startswith(("*", "..."))
        name = _leading_name(part.lstrip("*."))
        if not name:
            raise ValueError(f"cannot read a parameter name in {part!r}")
        if variadic:  # *args or ...args
            var_positional = name
            keyword_only = True
        else:
            keyword.add(name)
            if not keyword_only:
                positional.append(name)
    return Signature(tuple(positional), frozenset(keyword), var_positional, var_keyword)


def _running_loop_in_this_thread() -> bool:
    """Whether an asyncio event loop runs in this thread (without importing asyncio)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return False  # never imported, so nothing can be running
    return asyncio._get_running_loop() is not None


@final
class Tool:
    """One host tool, callable from the program (see the module docstring).

    Attributes:
        name: the tool's name, as bound in Start.
        signature: its call shape as the Start gave it ("" if none).
    """

    __slots__ = ("_client", "_params", "name", "signature")

    def __init__(self, client: Client, name: str, signature: str) -> None:
        self._client = client
        self.name = name
        self.signature = signature
        self._params = parse_signature(signature) if signature else None

    def __repr__(self) -> str:
        shape = self.signature or f"{self.name}(value)"
        return f"<host tool {shape}>"

    def __call__(self, /, *args: object, **kwargs: object) -> Any:
        """Call the tool: awaitable under a running asyncio loop, else blocking.

        Raises:
            TypeError: arguments the signature does not accept, or that have no JSON form.
            CallError: the call failed (blocking form; the awaitable raises it when awaited).
        """
        text = self._encode(args, kwargs)
        if _running_loop_in_this_thread():
            return self._acall(text)
        return self._call(text)

    def blocking(self, /, *args: object, **kwargs: object) -> Any:
        """Call the tool and block until it answers, even under a running event loop.

        Raises:
            TypeError: as for a call.
            CallError: the call failed.
        """
        return self._call(self._encode(args, kwargs))

    def _encode(self, args: tuple[object, ...], kwargs: dict[str, object]) -> str:
        params = self._params
        if params is None:
            if kwargs or len(args) > 1:
                raise TypeError(
                    f"host.{self.name}() takes one argument (sent as JSON) and no keywords; "
                    f"pass a dict to send several values"
                )
            payload: object = args[0] if args else None
        else:
            payload = params.bind(self.name, args, kwargs)
        try:
            return encode_json(payload, "args")
        except TypeError as exc:
            raise TypeError(f"host.{self.name}(): arguments not sendable: {exc}") from None

    def _call(self, text: str) -> object:
        try:
            return decode_result(self._client.call(self.name, text))
        except LocalFrameTooLarge as exc:
            raise CallError(Kind.LIMIT, f"host.{self.name}(): arguments too large: {exc}") from None

    def _acall(self, text: str) -> Coroutine[Any, Any, object]:
        client = self._client
        name = self.name

        async def call() -> object:
            try:
                return decode_result(await client.acall(name, text))
            except LocalFrameTooLarge as exc:
                raise CallError(Kind.LIMIT, f"host.{name}(): arguments too large: {exc}") from None

        return call()


@final
class Host:
    """The ``host`` object: its attributes are the run's tools, and nothing else."""

    __slots__ = ("__tools",)

    def __init__(self, client: Client, bindings: Iterable[StartBinding]) -> None:
        """Build the tools of ``bindings``, calling over ``client``.

        Raises:
            ValueError: two bindings share a name, or a signature cannot be read (the
                message names the binding).
        """
        tools: dict[str, Tool] = {}
        for binding in bindings:
            if binding.name in tools:
                raise ValueError(f"two bindings are named {binding.name!r}")
            try:
                tools[binding.name] = Tool(client, binding.name, binding.signature)
            except ValueError as exc:
                raise ValueError(
                    f"binding {binding.name!r} has a signature the runner cannot read "
                    f"({binding.signature!r}): {exc}"
                ) from None
        self.__tools = tools

    @classmethod
    def empty(cls) -> Host:
        """A ``host`` with no tools (it calls nobody, so it needs no client)."""
        host = cls.__new__(cls)
        host.__tools = {}
        return host

    def __getattr__(self, name: str) -> Tool:
        # Only called when ordinary lookup fails, i.e. for every tool name.
        if name.startswith("_Host__"):
            raise AttributeError(name)  # during construction, before the slot is set
        try:
            return self.__tools[name]
        except KeyError:
            available = ", ".join(sorted(self.__tools)) or "none"
            raise AttributeError(
                f"host has no tool named {name!r} (available tools: {available})",
                name=name,
                obj=self,
            ) from None

    def __dir__(self) -> list[str]:
        return sorted(self.__tools)

    def __repr__(self) -> str:
        return f"<host with tools: {', '.join(sorted(self.__tools)) or 'none'}>"
