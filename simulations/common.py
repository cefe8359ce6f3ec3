"""What the simulation and benchmark scripts share: where results go, how durations are
written, and the synthetic data they run on.

The release-after-close formula that the scheduling scripts evaluate on actual arrival times is
the planner's own, :func:`scheduler.planner.release_after_close` (the same one
``Plan.finish_after_close`` predicts with), so a script and the plan it checks cannot drift
apart.

Every script runs from the repository root as ``python -m simulations.NAME``: the folder is a
package so that the scripts import each other and the project by name, but it is not installed
(``pyproject.toml`` leaves it out of the wheel), so no script edits the import path and none
ships to the users of ``streamanon``.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np

#: The repository's root folder (this file is ``simulations/common.py``).
ROOT = Path(__file__).resolve().parents[1]
#: Where the scripts write their CSV and JSON results by default (not tracked).
RESULTS = ROOT / "simulations" / "results"
#: Where they write their figures by default.
FIGURES = RESULTS / "figures"


def shown(path: Path) -> Path:
    """``path`` as a report shows it: relative to the repository when inside it."""
    path = Path(path).resolve()
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


# -- durations ---------------------------------------------------------------------------------


def clock(seconds: float) -> str:
    """A duration in a report: ``1 h 27 min 32 s`` / ``2 min 33 s`` / ``12 s`` / ``0.4 s``.

    >>> clock(5252.3), clock(153.26), clock(0.42)
    ('1 h 27 min 32 s', '2 min 33 s', '0.42 s')
    """
    if seconds < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h} h {m:02d} min {s:02d} s" if h else f"{m} min {s:02d} s"


def clock_hms(seconds: float) -> str:
    """A duration on a figure, compact: ``1:27:32``.

    >>> clock_hms(5252.3)
    '1:27:32'
    """
    h, rest = divmod(round(seconds), 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def seconds_cell(seconds: float | None) -> str:
    """A table cell in a column of seconds: ``0.123``, ``12.3``; hours and minutes from an
    hour on (``3 h 7 min``); ``-`` for none.

    >>> seconds_cell(0.1234), seconds_cell(12.34), seconds_cell(11220.0), seconds_cell(None)
    ('0.123', '12.3', '3 h 7 min', '-')
    """
    if seconds is None:
        return "-"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"
    return f"{seconds:.3f}" if seconds < 10 else f"{seconds:.1f}"


# -- data --------------------------------------------------------------------------------------


def gaussian(n: int, m: int, seed: int | np.random.Generator) -> np.ndarray:
    """``n`` x ``m`` i.i.d. standard Gaussian records, standardised (population standard
    deviation, design spec §3): the synthetic data of paper 001's experiments (Table 3, m = 15).

    ``seed`` is a seed or a generator to draw from (which then goes on to draw what the caller
    needs next).
    """
    from streamanon.metrics import standardise

    return standardise(np.random.default_rng(seed).standard_normal((n, m)))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux ``/proc``); 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time every process of the machine has used so far (Linux ``/proc/stat``)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(
        int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """Cores and CPU model, for a benchmark table's provenance."""
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}"


def commit(root: Path = ROOT) -> str:
    """The short hash of the commit checked out at ``root`` (this repository by default), for a
    benchmark table's provenance."""
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
