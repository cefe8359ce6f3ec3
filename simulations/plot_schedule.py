"""Paper 001, Figs. 8-13, drawn from the scheduler library (quadratic costs, uniform arrivals).

    python -m simulations.plot_schedule [--out DIR]      # default simulations/results/figures

Writes one PNG per figure:

- fig08_critical_ratio.png: nu_- and its strong approximation 1/(2+s)
- fig09_optimal_ratio.png: nu* with nu_- and the (2+s)/4 branch
- fig10_gain_curves.png: dtau(nu) for several s, with nu_- and nu* marked
- fig11_optimal_gain.png: dtau* against s
- fig12_min_deadline.png: tau_end_min = 1 - dtau*
- fig13_discriminant.png: (2+s)^2 - 8 (1 - tau_end_min), zero up to s_-
- fig13b_deadline_ratio.png: nu_end against s for several deadlines, with (1-tau_end)/(2+s)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

from simulations.common import FIGURES

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from scheduler.closed_forms import (
    ARRIVAL_THRESHOLD,
    critical_ratio,
    critical_ratio_approx,
    deadline_ratio,
    deadline_ratio_approx,
    min_relative_deadline,
    optimal_gain,
    optimal_ratio,
    relative_gain,
)

S = np.concatenate([np.linspace(0, 2, 401), np.geomspace(2, 100, 300)[1:]])


def _axes(title: str, xlabel: str = "arrival coefficient s", log: bool = True):
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    if log:
        ax.set_xscale("symlog", linthresh=1)
    ax.grid(alpha=0.3)
    return fig, ax


def _threshold(ax) -> None:
    ax.axvline(ARRIVAL_THRESHOLD, color="grey", ls=":", lw=1)
    ax.annotate("s_- = 0.309", (ARRIVAL_THRESHOLD, ax.get_ylim()[1]), fontsize=8,
                ha="left", va="top", color="grey")


def figures(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(fig, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    fig, ax = _axes("Fig. 8: critical ratio nu_- and its strong approximation")
    s_pos = S[S > 0]
    ax.plot(s_pos, [critical_ratio(s) for s in s_pos], label="nu_- (exact)")
    ax.plot(s_pos, [critical_ratio_approx(s) for s in s_pos], "--", label="1/(2+s)")
    ax.set_ylabel("nu_-")
    ax.legend()
    save(fig, "fig08_critical_ratio.png")

    fig, ax = _axes("Fig. 9: optimal data ratio nu*")
    ax.plot(S, [optimal_ratio(s) for s in S], lw=2.5, label="nu*")
    ax.plot(s_pos, [critical_ratio(s) for s in s_pos], "--", label="nu_-")
    ax.plot(S, (2 + S) / 4, ":", label="(2+s)/4")
    ax.set_ylim(0, 1)
    ax.set_ylabel("data ratio")
    _threshold(ax)
    ax.legend()
    save(fig, "fig09_optimal_ratio.png")

    fig, ax = _axes("Fig. 10: time gain dtau(nu) for several s", xlabel="data ratio nu",
                    log=False)
    nus = np.linspace(0, 1, 1001)
    for s in (0.0, 0.2, ARRIVAL_THRESHOLD, 1.0, 5.0):
        line, = ax.plot(nus, [relative_gain(x, s) for x in nus], label=f"s = {s:.3g}")
        ax.plot(optimal_ratio(s), optimal_gain(s), "o", color=line.get_color())
        if s > 0:
            ax.axvline(critical_ratio(s), color=line.get_color(), ls=":", lw=0.8)
    ax.set_ylabel("relative gain dtau")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    save(fig, "fig10_gain_curves.png")

    fig, ax = _axes("Fig. 11: optimal gain dtau*")
    ax.plot(S, [optimal_gain(s) for s in S])
    ax.axhline(0.5, color="grey", ls="--", lw=0.8)
    ax.set_ylabel("dtau*")
    ax.set_ylim(0.45, 1.02)
    _threshold(ax)
    save(fig, "fig11_optimal_gain.png")

    fig, ax = _axes("Fig. 12: earliest relative finish tau_end_min = 1 - dtau*")
    ax.plot(S, [min_relative_deadline(s) for s in S])
    ax.set_ylabel("tau_end_min")
    _threshold(ax)
    save(fig, "fig12_min_deadline.png")

    fig, ax = _axes("Fig. 13: discriminant (2+s)^2 - 8 (1 - tau_end_min)")
    ax.plot(S, [(2 + s) ** 2 - 8 * (1 - min_relative_deadline(s)) for s in S])
    ax.set_ylabel("discriminant")
    _threshold(ax)
    save(fig, "fig13_discriminant.png")

    fig, ax = _axes("Deadline ratio nu_end (sec. IV-C) and (1 - tau_end)/(2+s)")
    s_grid = np.geomspace(0.5, 100, 300)
    for tau_end in (0.1, 0.3, 0.5, 0.8):
        feasible = [s for s in s_grid if tau_end >= min_relative_deadline(s)]
        line, = ax.plot(feasible, [deadline_ratio(s, tau_end) for s in feasible],
                        label=f"tau_end = {tau_end}")
        ax.plot(feasible, [deadline_ratio_approx(s, tau_end) for s in feasible], "--",
                color=line.get_color(), lw=0.8)
    ax.set_ylabel("nu_end")
    ax.legend(fontsize=8)
    save(fig, "fig13b_deadline_ratio.png")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Draw paper 001's Figs. 8-13 to PNG.")
    parser.add_argument("--out", default=str(FIGURES))
    args = parser.parse_args()
    for path in figures(Path(args.out)):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
