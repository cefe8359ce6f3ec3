"""Progress of a long command, wherever its output goes.

On a terminal a bar (rich) shows the phase and the engine's counter. When standard error is a
file or a pipe (a log, ``nohup``, a CI job, a scheduler), a line every
:data:`INTERVAL_SECONDS` instead: the time so far, the phase, and where the work counts its
records, done of total and the rate::

    streamanon: 10 s: engine mdav: 412,000 of 1,414,593 records (41,200/s)

Nothing is printed for work that ends within the first interval. ``STREAMANON_PROGRESS_SECONDS``
sets the interval (a log that wants a line a minute, a test that wants one a tenth of a
second).

While numba compiles kernels (the first run after an install), the phase says so, and a run
that compiled any ends with a line saying how many and for how long
(:class:`~._compiling.CompileWatch`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from streamanon.cli._compiling import NOTE, CompileWatch
from streamanon.progress import Progress

#: Seconds between two progress lines when standard error is not a terminal.
INTERVAL_SECONDS = 10.0


def interval() -> float:
    """:data:`INTERVAL_SECONDS`, or ``STREAMANON_PROGRESS_SECONDS`` when set to a positive
    number."""
    try:
        value = float(os.environ.get("STREAMANON_PROGRESS_SECONDS", ""))
    except ValueError:
        return INTERVAL_SECONDS
    return value if value > 0 else INTERVAL_SECONDS


def line(progress: Progress, elapsed: float, phase_elapsed: float,
         compiling: bool = False) -> str:
    """One progress line (see the module docstring); ``compiling``: numba compiles meanwhile.

    >>> p = Progress()
    >>> p.enter("engine mdav"); p.start(1_000_000); p.counter[0] = 250_000
    >>> line(p, 12.0, 5.0)
    'streamanon: 12 s: engine mdav: 250,000 of 1,000,000 records (50,000/s)'
    >>> p.enter("release table"); line(p, 20.4, 1.0)
    'streamanon: 20 s: release table'
    >>> line(p, 3.0, 3.0, compiling=True)
    'streamanon: 3 s: release table (compiling numba kernels, once after an install)'
    """
    text = f"streamanon: {elapsed:.0f} s: {phase(progress, compiling)}"
    if progress.total:
        rate = progress.done / phase_elapsed if phase_elapsed > 0 else 0.0
        text += f": {progress.done:,} of {progress.total:,} records ({rate:,.0f}/s)"
    return text


def phase(progress: Progress, compiling: bool) -> str:
    """The phase as shown: its name, and that numba compiles meanwhile."""
    name = progress.phase or "working"
    return f"{name} ({NOTE})" if compiling else name


@contextmanager
def watching_compiles(stop: threading.Event) -> Iterator[CompileWatch]:
    """A :class:`CompileWatch` attached as soon as the command has imported numba (checked
    every tenth of a second until ``stop``), detached at the end. The watcher imports
    nothing, and the end waits for it a second at most: the progress never holds a command
    back."""
    watch = CompileWatch()

    def attach() -> None:
        while not watch.attach() and not stop.wait(0.1):
            pass

    attacher = threading.Thread(target=attach, name="compile-watch", daemon=True)
    attacher.start()
    try:
        yield watch
    finally:
        stop.set()
        attacher.join(timeout=1.0)
        watch.detach()


@contextmanager
def shown(progress: Progress, label: str, enabled: bool = True,
          stream: TextIO | None = None) -> Iterator[Progress]:
    """Show ``progress`` while the body runs: a bar on a terminal, else a line every
    :func:`interval` seconds (none when not ``enabled``); then, if numba compiled kernels
    meanwhile, how many and for how long."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        yield progress
        return
    with watching_compiles(threading.Event()) as watch:
        if stream.isatty():
            with _bar(progress, label, stream, watch):
                yield progress
        else:
            with _lines(progress, stream, watch):
                yield progress
    said = watch.summary()
    if said is not None:
        print(said, file=stream, flush=True)


@contextmanager
def _lines(progress: Progress, stream: TextIO, watch: CompileWatch) -> Iterator[None]:
    stop = threading.Event()
    started = time.perf_counter()

    def report() -> None:
        while not stop.wait(interval()):
            now = time.perf_counter()
            print(line(progress, now - started, now - progress.since, watch.compiling),
                  file=stream, flush=True)

    reporter = threading.Thread(target=report, name="progress", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        stop.set()
        reporter.join()


@contextmanager
def _bar(progress: Progress, label: str, stream: TextIO,
         watch: CompileWatch) -> Iterator[None]:
    from rich.console import Console
    from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    stop = threading.Event()
    with Bar(TextColumn("{task.description}"), BarColumn(),
             TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), transient=True,
             console=Console(file=stream)) as bar:
        task = bar.add_task(label, total=None)

        def follow() -> None:
            while not stop.wait(0.1):
                description = (f"{label}: {phase(progress, watch.compiling)}"
                               if progress.phase or watch.compiling else label)
                bar.update(task, description=description, total=progress.total or None,
                           completed=progress.done)

        follower = threading.Thread(target=follow, name="progress-bar", daemon=True)
        follower.start()
        try:
            yield
        finally:
            stop.set()
            follower.join()
