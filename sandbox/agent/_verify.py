"""Verify-on-edit: the host's own check (tests, lint, a build) after a response that edited.

A successful ``write_file`` or ``edit_file`` (:data:`EDIT_TOOLS`) marks its response; the
loop asks its :class:`Verifier` once at the end of that response (and before a finish in
it, which never skips one), which runs the host's verification and appends its verdict
and output to the response's last call's observation. The command comes from the host's
configuration, never from the model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, final

import msgspec

from ._hooks import Events
from ._types import Step

__all__ = ["DEFAULT_VERIFY_CAP", "EDIT_TOOLS", "VerifyResult", "Verifier", "verification"]

#: Tools whose successful call marks the response for verification.
EDIT_TOOLS: Final = frozenset({"write_file", "edit_file"})
#: Characters of verification output kept by default: the seed's
#: ``DefaultVerifyOnEditCap``, enough for a test runner's summary and first failures.
DEFAULT_VERIFY_CAP: Final = 4000


@final
class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the host's verification (tests, lint, build) gave after an edit."""

    output: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    timeout: float | None = None
    error: str | None = None


async def verification(verify: Callable[[], Awaitable[VerifyResult]], cap: int) -> tuple[str, str]:
    """Run the host's verification once.

    Args:
        verify: the host's verification.
        cap: characters of its output kept (the rest is cut with a marker).

    Returns:
        The verdict in a few words (for a diagnostic), and the text to append to the
        observation: ``[verify_on_edit]``, the verdict, and the output.
    """
    try:
        r = await verify()
    except Exception as exc:  # the host's runner failed: the edit is not verified
        r = VerifyResult(error=f"{type(exc).__name__}: {exc}")
    output = r.output.strip()
    if len(output) > cap:
        output = output[:cap] + "\n[... verification output cut ...]"
    note = _verdict(r)
    return note, f"\n\n[verify_on_edit] {note}" + (f"\n{output}" if output else "")


@final
class Verifier:
    """Runs the host's verification after a response's edits, into the response.

    Args:
        verify: the host's verification; None for none.
        cap: characters of its output kept.
        events: where the verdict is reported (``verify_on_edit``).
    """

    def __init__(
        self, verify: Callable[[], Awaitable[VerifyResult]] | None, cap: int, events: Events
    ) -> None:
        self._verify = verify
        self._cap = cap
        self._events = events

    async def after(self, group: Sequence[Step]) -> None:
        """Verify once, appending the note to the last call's step of ``group``."""
        if self._verify is None or not group:
            return
        note, text = await verification(self._verify, self._cap)
        last = next((s for s in reversed(group) if s.action is not None), group[-1])
        last.observation += text
        self._events.diagnostic("verify_on_edit", note)


def _verdict(r: VerifyResult) -> str:
    if r.timed_out:
        return f"timed out after {r.timeout} s: the edit was not verified"
    if r.error is not None:
        return f"could not run ({r.error}): the edit was not verified"
    if r.exit_code is None or r.exit_code < 0:
        return "no exit status: the edit was not verified"
    if r.exit_code == 0:
        return "passed"
    return f"FAILED (exit {r.exit_code}): fix the failures"
