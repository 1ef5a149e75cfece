"""The four frames of the wire, as msgspec Structs with exactly the seed's JSON encoding.

Field names, order and omissions mirror the seed's Go structs, so that a Go or Node.js
peer produces and accepts the same bytes: a field the Go struct tags ``omitempty`` has a
default here and is left out when it holds it (``omit_defaults``); every other field is
required and always written. ``v`` is therefore a required field: it is written in every
frame and a frame without it is refused.

``args`` and ``value`` are *strings* on the wire, as the seed's Go structs have them: text
whose encoding the tool surface decides (for us, JSON text) carried as a JSON string. They
are not embedded JSON, so a peer in any language reads them as plain strings.

The wire tells frames apart by channel and direction, never by a tag, so each direction has
its own typed decoder (:data:`REQUEST_DECODER` and friends), built once and reused. Decoding
goes through :func:`decode`, which checks ``v`` before anything else (invariant 1) and turns
every failure into a :class:`~protocol.RemoteProtocolError`.

Whatever the bytes, decoding raises only the protocol's own errors. The first two points
below are worked out only once the typed decoder has failed, so a valid frame pays nothing
for them; the integer bounds are checked by msgspec while it decodes.

* The version decides first. A frame the typed decoder refuses is read again for its
  top-level ``v`` alone, first by msgspec skipping every other member unchecked (so an
  out-of-range number, bad UTF-8 or a wrong type elsewhere do not hide the version), then,
  if even that fails (a bad escape, broken syntax, nesting too deep to skip), by
  :func:`_survey`, a small non-recursive scan of the top-level members.
* Nesting: see :data:`~protocol.MAX_NESTING`. Too deep for the decoder is a
  ``RemoteProtocolError`` (a ``LocalProtocolError`` when our own stack is what left too
  little room), never a ``RecursionError``.
* Integers are Go's ``int64`` (``Meta(le=...)`` on every counter and duration; ``v`` must
  be VERSION anyway): a value outside it is refused on receipt, and :func:`frame_message`
  refuses to send one.
* Text is UTF-8: :func:`frame_message` sends a lone surrogate (which UTF-8 cannot carry) as
  U+FFFD, in every text field of every frame, as Go does when it encodes invalid UTF-8.
"""

from __future__ import annotations

import re
import sys
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeAlias, TypeVar

import msgspec

from ._constants import INT64_MAX, INT64_MIN, MAX_FRAME_BYTES, MAX_NESTING, VERSION
from ._errors import (
    LocalFrameTooLarge,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    VersionMismatch,
)
from ._frames import PREFIX_BYTES
from ._kinds import Kind

__all__ = [
    "Message",
    "Request",
    "Response",
    "Result",
    "Start",
    "StartBinding",
    "StartBudget",
    "decode",
    "frame_message",
    "frame_result_pieces",
    "valid_unicode",
]

# Integers are Go's int64; counters and durations are never negative; ids are never empty
# (seed: "must be non-empty and unique within one execution") and at most MAX_ID_CHARS
# long, so that an answer always fits in a frame whatever the id. msgspec checks these
# while decoding; frame_message checks the integers before sending.
MAX_ID_CHARS: Final = 64
_NonNegative = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]


class Message(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Base of the four frames: frozen, keyword-only, defaults left off the wire.

    ``gc=False``: the frames hold only strings, numbers and other frames, never cycles, so
    the cycle collector need not track them (one less cost per call on the hot path).

    ``v`` has no int64 bound of its own: anything but :data:`~protocol.VERSION` is refused
    as another version's anyway, and the bound would cost every frame a range check.
    """

    v: int


class Request(Message, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A tool call, child -> parent, on the call channel.

    Attributes:
        v: protocol version (:data:`~protocol.VERSION`).
        id: the call's id; responses are matched by it (invariant 6). Non-empty, unique
            among the calls in flight.
        tool: the tool's name, as bound in Start.
        args: the arguments as raw text (JSON text for our tools), not parsed by the wire.
        deadline_ms: the child's wish for this call's deadline, in milliseconds; 0 means
            none. The parent enforces it and may only shorten it (it clamps to its own cap).
    """

    id: _Id
    tool: str
    args: str
    deadline_ms: _NonNegative = 0


class Response(Message, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The answer to one call, parent -> child, on the call channel.

    Attributes:
        id: the id of the Request it answers.
        ok: whether the call succeeded.
        value: on success, the result as text.
        kind: on failure, why (a :class:`~protocol.Kind`; never a free string).
        error: on failure, a reason for people; never used to decide anything.
    """

    id: _Id
    ok: bool
    value: str = ""
    kind: Kind | None = None
    error: str = ""


class StartBinding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One host tool the program may call: its name and call shape, never its code.

    Attributes:
        name: the tool's name.
        signature: the call shape, e.g. ``"get_logs(host, count)"``; empty means the tool
            takes one argument, sent as JSON text.
    """

    name: str
    signature: str = ""


class StartBudget(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """What the parent asks of this run. 0 means "not asked for" in every field.

    Attributes:
        wall_clock: the run's wall-clock limit in nanoseconds (as Go encodes
            ``time.Duration``).
        max_calls: the most tool calls the run may make.
        max_bytes: the most result bytes the run may receive.
        max_memory: the most memory, in bytes, the run may use. A runner that cannot
            enforce it must refuse rather than pretend.
        max_inflight: the parent's cap on calls in flight at once (invariant 4). The
            parent answers ``limit`` to a call over it, so a child's client holds calls
            past it back until an answer frees a place, rather than send them (the
            :class:`~protocol.Client` does). 0: not said, and the cap is
            :data:`~protocol.DEFAULT_MAX_INFLIGHT`. Not in the seed's Go struct: added
            after it, as a field a peer that does not know it ignores.
    """

    wall_clock: _NonNegative = 0
    max_calls: _NonNegative = 0
    max_bytes: _NonNegative = 0
    max_memory: _NonNegative = 0
    max_inflight: _NonNegative = 0


class Start(Message, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Start one run, parent -> child, on the start channel, exactly once.

    Attributes:
        program: the program; its language is the runner backend's business.
        bindings: the host tools the program may call. ``None`` is how a Go peer writes an
            empty list (a nil slice); it means no bindings.
        budget: what the parent asks of the run.
        result_id: echoed in the Result, so a Result cannot be taken for another run's.
        argv: the program's command line, as a Python program reads it in ``sys.argv``:
            its name (shown in its tracebacks), then its arguments. Empty (and left off
            the wire) means no arguments and the runner's placeholder name,
            ``<program>`` (a Go peer's ``[]string`` tagged ``omitempty`` writes it so). A
            field added after the seed's, as its last: a peer that does not know it
            ignores it.
    """

    program: str
    bindings: tuple[StartBinding, ...] | None
    budget: StartBudget
    result_id: _Id
    argv: tuple[str, ...] = ()


class Result(Message, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """How one run ended, child -> parent, on the start channel, exactly once.

    Attributes:
        result_id: the Start's ``result_id``.
        ok: whether the program succeeded.
        value: on success, the program's value as text (JSON text for our runner).
        kind: on failure, why.
        error: on failure, a reason for people (a traceback, say).
        calls: the calls the child believes it made. For reconciliation only: the parent
            counts for itself and never trusts this (invariant 3).
        bytes: the result bytes the child believes it received; reconciliation only.
    """

    result_id: _Id
    ok: bool
    value: str = ""
    kind: Kind | None = None
    error: str = ""
    calls: _NonNegative = 0
    bytes: _NonNegative = 0


M = TypeVar("M", bound=Message)

_ENCODER: Final = msgspec.json.Encoder()
_ANY_DECODER: Final = msgspec.json.Decoder()


class _VersionOnly(msgspec.Struct, gc=False):
    """A frame read for its ``v`` alone: msgspec skips every other member unchecked."""

    v: Any = None


_VERSION_DECODER: Final = msgspec.json.Decoder(_VersionOnly)


def decode(decoder: msgspec.json.Decoder[M], payload: bytes | bytearray | memoryview) -> M:
    """Decode one frame's payload with a direction's typed decoder, checking ``v`` first.

    Raises:
        VersionMismatch: ``v`` is missing or is not :data:`~protocol.VERSION`, whatever else
            is wrong with the frame (as long as its top-level ``v`` can be read at all).
        RemoteProtocolError: the payload is not UTF-8 JSON of the expected shape (a kind
            outside the closed set, an integer outside int64, nesting deeper than the
            decoder can follow included).
        LocalProtocolError: the frame may be legal, but this call's own stack leaves the
            decoder too little room for its nesting (see :data:`~protocol.MAX_NESTING`).
    """
    try:
        message = decoder.decode(payload)
    except (msgspec.DecodeError, RecursionError) as exc:
        # Slow path, taken only for bad frames: look at ``v`` before blaming anything else,
        # so a frame from another version is reported as exactly that.
        raise _refusal(payload, exc) from None
    if message.v != VERSION:
        raise VersionMismatch(message.v, VERSION)
    return message


def _refusal(payload: bytes | bytearray | memoryview, exc: Exception) -> ProtocolError:
    """The error for a payload the typed decoder refused with ``exc``."""
    v = _version_of(payload)
    if v is not _OURS and v is not _UNREADABLE:
        return VersionMismatch(v, VERSION)
    if not isinstance(exc, RecursionError):
        return RemoteProtocolError(f"malformed frame: {exc}")
    room = sys.getrecursionlimit() - _stack_depth()
    if room - _STACK_MARGIN < MAX_NESTING:
        return LocalProtocolError(
            f"too little stack left to decode a frame: {room} levels, and frames may nest "
            f"{MAX_NESTING} deep; decode from a shallower stack"
        )
    return RemoteProtocolError(
        f"malformed frame: nested deeper than the decoder can follow ({room} levels; "
        f"frames are read up to {MAX_NESTING} deep)"
    )


# Python frames the decoder's failure path itself may add, and slack for C calls that count
# against the recursion limit without a Python frame.
_STACK_MARGIN: Final = 50


def _stack_depth() -> int:
    """How many Python frames deep the caller is (failure path only: O(depth))."""
    depth = 0
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


class _Verdict:
    """What reading a bad frame for its version found, when it is not another version."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: ``v`` is ours: the frame is broken in some other way.
_OURS: Final = _Verdict("OURS")
#: No ``v`` could be read before the frame broke (or it is not an object): malformed.
_UNREADABLE: Final = _Verdict("UNREADABLE")


def _version_of(payload: bytes | bytearray | memoryview) -> object:
    """The frame's top-level ``v`` if it is not ours (None when absent), else a verdict."""
    try:
        v = _VERSION_DECODER.decode(payload).v
    except (msgspec.DecodeError, RecursionError):
        return _survey(payload)
    return _OURS if type(v) is int and v == VERSION else v


# One token of JSON, after any whitespace: only its kind and extent matter to _survey, so a
# string's escapes and UTF-8, and a number's digits, are not checked.
_TOKEN: Final = re.compile(
    rb'[ \t\n\r]*(?:("[^"\\]*(?:\\.[^"\\]*)*")|([\[{])|([\]}])|([,:])|([^ \t\n\r,:\[\]{}"]+))',
    re.DOTALL,
)
_STRING, _OPEN, _CLOSE, _PUNCT, _ATOM = 1, 2, 3, 4, 5
_STRING_AT: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET: Final = re.compile(rb"[\[\]{}]")
#: Steps _survey takes at most (a token, a stretch between strings, or a bracket), so that
#: its cost is bounded whatever the frame: a few milliseconds, plus a count of the
#: frame's brackets in C.
_SURVEY_STEPS: Final = 1 << 12
#: The longest ``v`` shown as the value it is; a longer one is shown cut.
_SHOWN_BYTES: Final = 64

if TYPE_CHECKING:
    from collections.abc import Callable

    #: A state of :class:`_Survey`: it reads one token and returns the next state.
    _Expect: TypeAlias = Callable[[re.Match[bytes]], "_Expect | None"]


def _survey(payload: bytes | bytearray | memoryview) -> object:
    """Find the top-level ``v`` of a frame msgspec cannot even skip through.

    A scan with no recursion and a bounded number of steps: the last ``v`` among the
    top-level members read before the frame breaks (or the steps run out) decides, as the
    last one does in the typed decoder. Returns the verdict :data:`_OURS`,
    :data:`_UNREADABLE`, or ``v`` as a :class:`VersionMismatch` shows it (None when the
    whole object was read and has no ``v``).
    """
    data = bytes(payload)
    m = _TOKEN.match(data, 0)
    if m is None or m.lastindex != _OPEN or data[m.start(_OPEN)] != ord("{"):
        return _UNREADABLE  # not an object: there is no version to read
    return _Survey(data, m.end()).run()


class _Survey:
    """One scan of :func:`_survey`, past the opening brace: a state machine over tokens.

    Its state is the method that reads the next token (``expect``): each reads one, notes
    what it found, and returns the method for the token after it, or None when the scan
    is over (the object ended, or broken syntax: what was read before it decides).
    """

    __slots__ = ("data", "found", "is_v", "pos", "steps")

    def __init__(self, data: bytes, pos: int) -> None:
        self.data = data
        self.pos = pos
        self.steps = _SURVEY_STEPS
        self.found: object = _UNREADABLE
        self.is_v = False  # whether the member being read is a "v"

    def run(self) -> object:
        """Read tokens until the scan is over or the steps run out; the verdict."""
        expect: _Expect | None = self._key_or_end
        match, data = _TOKEN.match, self.data
        while expect is not None and self.steps > 0:
            self.steps -= 1
            m = match(data, self.pos)
            if m is None:
                break
            self.pos = m.end()
            expect = expect(m)
        return self.found

    def _key_or_end(self, m: re.Match[bytes]) -> _Expect | None:
        """Right after the opening brace: the first key, or the end of an empty object."""
        if m.lastindex == _CLOSE:
            return self._end()
        return self._key(m)

    def _key(self, m: re.Match[bytes]) -> _Expect | None:
        """A member's key (noting whether it is ``v``)."""
        if m.lastindex != _STRING:
            return None
        self.is_v = _is_v(self.data[m.start(_STRING) : self.pos])
        return self._colon

    def _colon(self, m: re.Match[bytes]) -> _Expect | None:
        """The colon between a key and its value."""
        if m.lastindex == _PUNCT and self.data[m.start(_PUNCT)] == ord(":"):
            return self._value
        return None

    def _value(self, m: re.Match[bytes]) -> _Expect | None:
        """A member's value: a string or an atom (the verdict, if the key is ``v``), or a
        container."""
        kind = m.lastindex
        if kind in (_STRING, _ATOM):
            if self.is_v:
                start = m.start(kind)
                token = self.data[start : self.pos]
                ours = token == b"%d" % VERSION
                self.found = _OURS if ours else _shown(self.data, start, self.pos)
            return self._comma_or_end
        if kind == _OPEN:
            return self._nested(m.start(_OPEN))
        return None

    def _nested(self, start: int) -> _Expect | None:
        """A value that opened a bracket at ``start``: skipped whole, within the steps."""
        if self.is_v:  # a container is not the version, however it ends
            self.found = _shown(self.data, start, len(self.data))
        self.pos, self.steps = _skip_nested(self.data, self.pos, self.steps)
        if self.pos < 0:
            return None
        if self.is_v:
            self.found = _shown(self.data, start, self.pos)
        return self._comma_or_end

    def _comma_or_end(self, m: re.Match[bytes]) -> _Expect | None:
        """After a value: a comma before the next key, or the end of the object."""
        if m.lastindex == _CLOSE:
            return self._end()
        if m.lastindex == _PUNCT and self.data[m.start(_PUNCT)] == ord(","):
            return self._key
        return None

    def _end(self) -> _Expect | None:
        """The whole object was read: without a ``v``, the verdict is None. Nothing follows."""
        if self.found is _UNREADABLE:
            self.found = None
        return None


def _skip_nested(data: bytes, pos: int, steps: int) -> tuple[int, int]:
    """Skip the rest of a value one bracket deep at ``pos``: (where it ends, steps left),
    or (-1, steps) if it does not end (or the steps run out) first.

    Between two strings only the brackets count, and a stretch that cannot close the
    value (it has fewer closing brackets than the value is deep) is taken whole, its
    brackets counted in C; only the stretch that closes it is walked bracket by bracket.
    """
    depth = 1
    end = len(data)
    while steps > 0:
        steps -= 1
        quote = data.find(b'"', pos)
        stop = end if quote < 0 else quote
        closes = data.count(b"]", pos, stop) + data.count(b"}", pos, stop)
        if closes >= depth:  # this stretch may close the value: walk it
            for m in _BRACKET.finditer(data, pos, stop):
                steps -= 1
                if steps <= 0:
                    return -1, steps
                depth += 1 if data[m.start()] in b"[{" else -1
                if depth == 0:
                    return m.end(), steps
        else:
            depth += data.count(b"[", pos, stop) + data.count(b"{", pos, stop) - closes
        if quote < 0:
            return -1, steps  # the frame ends inside the value
        string = _STRING_AT.match(data, quote)
        if string is None:
            return -1, steps  # a string that never ends
        pos = string.end()
    return -1, steps


def _is_v(key: bytes) -> bool:
    if key == b'"v"':
        return True
    if b"\\" not in key or len(key) > _SHOWN_BYTES:
        return False
    try:
        return bool(_ANY_DECODER.decode(key) == "v")  # "\u0076" is "v" too
    except msgspec.DecodeError:
        return False


def _shown(data: bytes, start: int, end: int) -> object:
    """A ``v`` that is not ours, as a VersionMismatch shows it: decoded when it is short
    and decodes, else its first bytes as text."""
    raw = data[start : min(end, start + _SHOWN_BYTES + 1)]
    if end - start <= _SHOWN_BYTES:
        try:
            return _ANY_DECODER.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            pass
    return raw[:_SHOWN_BYTES].decode("utf-8", "replace") + "..."


def frame_message(message: Message, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytearray:
    """One message as a whole frame, prefix and payload in one buffer, ready to write.

    The payload is encoded straight behind a reserved prefix (``encode_into``), so a large
    message is never copied to be prefixed. Text that is not valid Unicode (a lone
    surrogate, as ``surrogateescape`` makes from undecodable bytes) is sent with U+FFFD in
    its place, in every field: UTF-8 cannot carry it, and Go does the same.

    Raises:
        LocalProtocolError: an integer outside Go's int64 (a peer could not decode it);
            nothing is produced.
        LocalFrameTooLarge: the encoded message is over the cap; nothing is produced.
    """
    # The hot path's frames carry v = VERSION and a small deadline: two comparisons. Any
    # other message is checked field by field.
    cls = type(message)
    if not (
        message.v == VERSION
        and (cls is Response or (cls is Request and 0 <= message.deadline_ms <= INT64_MAX))  # type: ignore[attr-defined]
    ):
        _check_integers(message)
    buf = bytearray(PREFIX_BYTES)
    try:
        _ENCODER.encode_into(message, buf, PREFIX_BYTES)
    except UnicodeEncodeError:  # rare: only text with lone surrogates pays for this
        del buf[PREFIX_BYTES:]
        _ENCODER.encode_into(_with_valid_text(message), buf, PREFIX_BYTES)
    size = len(buf) - PREFIX_BYTES
    if size > max_frame_bytes:
        raise LocalFrameTooLarge(size, max_frame_bytes)
    buf[:PREFIX_BYTES] = size.to_bytes(PREFIX_BYTES, "big")
    return buf


#: A value's JSON text from this size on is written into its Result frame where it lies,
#: not copied (:func:`frame_result_pieces`); below it, copying costs less than the pieces.
SPLICE_FROM: Final = 1 << 16
#: At most this many characters of the value's JSON text to escape for it to be spliced:
#: each is a piece of its own (a list of strings has two quotes per item).
MAX_SPLICED_ESCAPES: Final = 256
#: The value the Result frame is encoded around; its JSON form is where the text goes.
_MARK: Final = "\x00"
_MARK_JSON: Final = b"\\u0000"


def frame_result_pieces(
    result: Result,
    value_json: bytes,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    *,
    splice_from: int = SPLICE_FROM,
) -> list[bytes | bytearray | memoryview]:
    """``result`` with ``value_json`` as its value, as a frame in pieces to write in order
    (``os.writev``): the same bytes as :func:`frame_message` of ``result`` with
    ``value=value_json.decode()``, without the two copies of a large value that makes (into
    a ``str``, then escaped into the frame).

    ``value_json`` is JSON text as msgspec writes it: UTF-8, no raw control character.
    Escaping it into the frame's JSON string then only puts a backslash before each ``"``
    and ``\\``; the pieces are slices of ``value_json`` with those backslashes between. A
    value under ``splice_from`` bytes, or with more than :data:`MAX_SPLICED_ESCAPES`
    characters to escape, is framed whole, as :func:`frame_message` does.

    Raises:
        LocalProtocolError: an integer outside Go's int64; nothing is produced.
        LocalFrameTooLarge: the frame is over the cap; nothing is produced.
        UnicodeDecodeError: ``value_json`` is not UTF-8 (framed whole only).
        MemoryError: no memory for the frame.
    """
    escapes = (
        _escapes(value_json, MAX_SPLICED_ESCAPES + 1) if len(value_json) >= splice_from else []
    )
    if len(value_json) >= splice_from and len(escapes) <= MAX_SPLICED_ESCAPES:
        shell = frame_message(msgspec.structs.replace(result, value=_MARK), max_frame_bytes)
        if shell.count(_MARK_JSON) == 1:  # (not when another field holds the mark too)
            mark = shell.find(_MARK_JSON)
            head, tail = shell[PREFIX_BYTES:mark], shell[mark + len(_MARK_JSON) :]
            size = len(head) + len(value_json) + len(escapes) + len(tail)
            if size > max_frame_bytes:
                raise LocalFrameTooLarge(size, max_frame_bytes)
            pieces: list[bytes | bytearray | memoryview] = [
                size.to_bytes(PREFIX_BYTES, "big") + head
            ]
            text = memoryview(value_json)
            begin = 0
            for at in escapes:
                pieces += (text[begin:at], b"\\")
                begin = at  # the escaped character starts the next slice
            pieces += (text[begin:], tail)
            return pieces
    whole = msgspec.structs.replace(result, value=value_json.decode("utf-8"))
    return [frame_message(whole, max_frame_bytes)]


def _escapes(text: bytes, most: int) -> list[int]:
    """Where ``"`` and ``\\`` are in ``text``, in order; at most ``most`` of them."""
    found: list[int] = []
    quote, backslash = text.find(b'"'), text.find(b"\\")
    while (quote >= 0 or backslash >= 0) and len(found) < most:
        if backslash < 0 or 0 <= quote < backslash:
            found.append(quote)
            quote = text.find(b'"', quote + 1)
        else:
            found.append(backslash)
            backslash = text.find(b"\\", backslash + 1)
    return found


def _check_integers(message: Message) -> None:
    """Refuse a message holding an integer outside int64 (what a Go peer can decode)."""
    bad = _integer_outside_int64(message)
    if bad is None:
        return
    where, value = bad
    path = type(message).__name__ + "".join(reversed(where))
    shown = str(value) if value.bit_length() <= 128 else f"a {value.bit_length()}-bit integer"
    raise LocalProtocolError(f"{path} = {shown} is outside Go's int64; nothing was sent")


def _integer_outside_int64(value: object) -> tuple[list[str], int] | None:
    """The first integer in ``value`` that int64 cannot hold, and where it is (the path's
    steps, innermost first); None if there is none. The steps are named on the way back
    from a bad value only (a Start's walk that named each field as it went took 2% of the
    host's own work for a trivial run, in a sampled profile)."""
    if type(value) is int:  # (a bool is no integer here)
        return None if INT64_MIN <= value <= INT64_MAX else ([], value)
    if type(value) is str:
        return None
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            bad = _integer_outside_int64(getattr(value, name))
            if bad is not None:
                bad[0].append(f".{name}")
                return bad
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            bad = _integer_outside_int64(item)
            if bad is not None:
                bad[0].append(f"[{i}]")
                return bad
    return None


def valid_unicode(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (unchanged when valid)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.translate(_SURROGATES)
    return text


_SURROGATES: Final = dict.fromkeys(range(0xD800, 0xE000), 0xFFFD)


def _with_valid_text(value: Any) -> Any:
    """``value`` (a frame or a part of one) with :func:`valid_unicode` applied to every
    text it holds."""
    if type(value) is str:
        return valid_unicode(value)
    if isinstance(value, msgspec.Struct):
        changes = {name: _with_valid_text(getattr(value, name)) for name in value.__struct_fields__}
        return msgspec.structs.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_with_valid_text(item) for item in value)
    return value


#: One reusable decoder per channel and direction.
REQUEST_DECODER: Final = msgspec.json.Decoder(Request)
RESPONSE_DECODER: Final = msgspec.json.Decoder(Response)
START_DECODER: Final = msgspec.json.Decoder(Start)
RESULT_DECODER: Final = msgspec.json.Decoder(Result)
