"""numba's compilations while a command runs, so that the progress can say why a first run is
slow.

The kernels compile on first use and are cached on disk (``cache=True``): the first run after
an install or an upgrade compiles those it uses (tens of seconds for an engine's), every later
run loads them in milliseconds. :class:`CompileWatch` listens to numba's ``"numba:compile"``
events (``numba.core.event``, which numba triggers for a compilation and not for a load from
its cache) and counts them; the progress shows "compiling" while they happen and says at the
end how many were compiled and for how long. It attaches once the command has imported numba
whole, and never imports anything of numba itself: a command that runs no kernel does not load
numba for it, and a watcher that imported numba while the command's own thread was importing
it would wait on numba's locks for ever (it did: a run that ended while numba was still being
imported waited for the watcher at its exit).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

#: How long after a compilation ends the progress still says "compiling": a run compiles its
#: kernels one after the other, with moments of Python in between.
LINGER_SECONDS = 1.0

NOTE = "compiling numba kernels, once after an install"


def imported(name: str) -> Any:
    """Module ``name`` if it is imported whole (not being imported right now), else None."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is None or getattr(spec, "_initializing", False):
        return None
    return module


class CompileWatch:
    """The numba compilations seen since :meth:`attach` (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listener: Any = None
        self._open: list[float] = []  # start times of the compilations under way
        self.count = 0  # functions compiled (a callee compiled inside its caller counts too)
        self.seconds = 0.0  # wall time spent compiling, outermost compilations only
        self._last_end = float("-inf")

    def attach(self) -> bool:
        """Listen to numba's compilations, once numba and its event module are imported whole
        (True once listening); nothing is imported here."""
        if self._listener is not None:
            return True
        event = imported("numba.core.event")
        if event is None or imported("numba") is None:
            return False

        watch = self

        class Listener(event.Listener):
            def on_start(self, _event: Any) -> None:
                with watch._lock:
                    watch.count += 1
                    watch._open.append(time.perf_counter())

            def on_end(self, _event: Any) -> None:
                with watch._lock:
                    if not watch._open:
                        return
                    started = watch._open.pop()
                    watch._last_end = time.perf_counter()
                    if not watch._open:
                        watch.seconds += watch._last_end - started

        self._listener = Listener()
        event.register("numba:compile", self._listener)
        return True

    def detach(self) -> None:
        event = imported("numba.core.event")
        if self._listener is not None and event is not None:
            event.unregister("numba:compile", self._listener)
        self._listener = None

    @property
    def compiling(self) -> bool:
        """A compilation is under way, or ended within :data:`LINGER_SECONDS`."""
        with self._lock:
            return bool(self._open) or time.perf_counter() - self._last_end < LINGER_SECONDS

    def summary(self) -> str | None:
        """What the run compiled, in a sentence; None when it compiled nothing.

        >>> w = CompileWatch(); w.summary() is None
        True
        >>> w.count, w.seconds = 12, 31.4
        >>> print(w.summary())
        streamanon: compiled 12 numba kernels in 31 s, once: later runs load them cached
        """
        if not self.count:
            return None
        kernels = "kernel" if self.count == 1 else "kernels"
        return (f"streamanon: compiled {self.count} numba {kernels} in {self.seconds:.0f} s, "
                "once: later runs load them cached")
