"""Arrival profiles for simulations (re-exported from :mod:`scheduler.profiles`, which the
service and ``streamanon simulate`` import), and a plot of them all.

    python -m simulations.profiles        # writes results/figures/arrival_profiles.png
"""

from __future__ import annotations

from scheduler.profiles import PROFILES, Profile, diurnal, from_file, get_profile, resolve
from simulations.common import FIGURES, shown

__all__ = ["PROFILES", "Profile", "diurnal", "from_file", "get_profile", "resolve"]


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    duration = 10 * 3600.0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in PROFILES:
        t = resolve(name, duration).times(20_000, duration, seed=1)
        ax.plot(t / 3600, np.arange(1, len(t) + 1) / len(t), label=name)
    ax.set_xlabel("hours since opening (10 h survey)")
    ax.set_ylabel("share of responses arrived")
    ax.legend()
    out = FIGURES / "arrival_profiles.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    print(f"wrote {shown(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
