"""What is left of a run once its result is in, cleared off the run's path.

Theory of operation
-------------------
A run is over, for its caller, once no process of it can execute another instruction of
the program: each has been sent SIGKILL (a process with SIGKILL pending never returns to
user space; the kernel tears it down) or is gone. :func:`sandbox.run` returns then. What
is left is the run's *remains*: processes still being torn down and reaped by the zygote,
the run's cgroups (which can be removed only once empty), its working directory, a
confined run's uid lease, and the host's descriptors of the child. Waiting for all that
cost a run about half of its time on the host (the kernel's teardown of a forked Python,
the zygote's report of the reaping, a few ``rmdir`` and an ``rmtree``); none of it can
change the result.

So the run hands its child to :data:`REMAINS` and returns, and one background thread per
host clears each child in turn (:meth:`~sandbox._children.Child.clear`): it waits for
the zygote's report that the runner was reaped, kills again whatever its cgroups still
hold, removes them, the working directory and the lease. The guarantees are restated,
not weakened:

* once ``run`` returns, no process of that run executes program code again (the run
  sent SIGKILL to every one of them before returning);
* the remains waiting to be cleared are bounded (:data:`MAX_PENDING`): a new run waits
  for room before it takes a child, so a host that runs faster than it can clear never
  piles up processes, cgroups or directories;
* closing a pool, or the host (:func:`~sandbox._children.shutdown`, at exit), waits
  until every remains is gone.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from typing import TYPE_CHECKING, Final

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from ._supervisor import Child

__all__ = ["MAX_PENDING", "REMAINS", "Remains"]

#: The most remains waiting to be cleared before new runs wait: a few per CPU, enough
#: that bursts never wait, small enough that a host outrunning its clearing holds little.
MAX_PENDING: Final = 8 * (os.cpu_count() or 1)


class Remains:
    """The queue of children whose runs are over, and the thread that clears them."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self._limit = limit
        self._queue: deque[Child] = deque()
        self._busy = 0  # children taken off the queue and being cleared
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def pending(self) -> int:
        """Remains not cleared yet."""
        with self._changed:
            return len(self._queue) + self._busy

    def put(self, child: Child) -> None:
        """Clear ``child`` in the background (never blocks; see :meth:`room`)."""
        with self._changed:
            self._queue.append(child)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._work, name="sandbox-remains", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def has_room(self) -> bool:
        with self._changed:
            return len(self._queue) + self._busy < self._limit

    def wait_room(self, timeout: float | None = None) -> bool:
        """Block until fewer than the limit are pending; False if ``timeout`` passed."""
        with self._changed:
            return self._changed.wait_for(
                lambda: len(self._queue) + self._busy < self._limit, timeout
            )

    async def room(self) -> None:
        """Wait, without blocking the event loop, until a new run may take a child."""
        if not self.has_room():
            await anyio.to_thread.run_sync(self.wait_room, abandon_on_cancel=True)

    def wait_empty(self, timeout: float | None = None) -> bool:
        """Block until every remains is cleared; False if ``timeout`` passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)

    def _work(self) -> None:
        while True:
            with self._changed:
                if not self._changed.wait_for(lambda: bool(self._queue), timeout=5.0):
                    self._thread = None  # idle: a later put starts another
                    return
                child = self._queue.popleft()
                self._busy += 1
            try:
                child.clear()
            except Exception:  # a clearing that fails must not stop the others
                pass
            finally:
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()


#: The host's one clearing queue.
REMAINS: Final = Remains()
