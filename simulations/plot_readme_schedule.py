"""The README's picture: the arrival curve, the base run's start and the release, for the
paper's example schedule, drawn from the scheduler's own planner (never by hand).

    python -m simulations.plot_readme_schedule              # writes docs/img/schedule.svg
    python -m simulations.plot_readme_schedule --out FILE

The survey is the one of ``streamanon plan --survey-hours 10 --t-ref 2h``: 1,000,000 records
arriving uniformly over 10 hours, a base engine whose one-shot run takes t_ref = 2 h with
quadratic cost (``PowerLaw(b=2)``), 2MDAV as the incremental stage. The plan
(:func:`scheduler.planner.plan_optimal`) gives nu*, the head start and the time after close;
the figure shows them on the arrival curve, beside the one-shot release at close + t_ref.
The SVG is deterministic (fixed hash salt, no date), so a test remakes it and compares.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from scheduler.arrivals import UniformForecast
from scheduler.cost_model import PowerLaw, TwoStageCost
from scheduler.planner import plan_optimal
from simulations.common import ROOT

OUT = ROOT / "docs" / "img" / "schedule.svg"
N, HOURS, T_REF = 1_000_000, 10.0, 2 * 3600.0


def schedule():
    """The example's plan and forecast."""
    model = PowerLaw(a=T_REF / N**2, b=2.0)
    forecast = UniformForecast(total=N, pace=N / (HOURS * 3600))
    plan = plan_optimal(N, model, TwoStageCost(model), forecast.head_start, k=10)
    return plan, forecast


def draw(out: Path) -> Path:
    plan, _ = schedule()
    plt.rcParams.update({"svg.hashsalt": "streamanon", "svg.fonttype": "none",
                         "font.size": 9})
    close = HOURS
    start = close - plan.head_start / 3600
    base_end = start + plan.base_seconds / 3600
    release = close + plan.finish_after_close / 3600
    one_shot = close + T_REF / 3600
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    t = np.linspace(0, close, 200)
    ax.plot(t, t / close * N / 1000, color="#1f77b4", lw=2, label="responses received")
    ax.axvline(close, color="black", lw=1)
    ax.text(close, N / 1000 * 1.04, " close", va="bottom", ha="left")
    ax.axvspan(start, base_end, ymax=0.08, color="#ff7f0e", alpha=0.8,
               label=f"base run on {1 - plan.nu:.0%} of the records")
    ax.axvline(start, color="#ff7f0e", lw=1, ls="--")
    ax.annotate(f"base run starts\n{plan.head_start / 3600:.1f} h before close "
                f"(nu* = {plan.nu:.3f})", xy=(start, start / close * N / 1000),
                xytext=(start - 5.2, 0.78 * N / 1000), arrowprops={"arrowstyle": "->"})
    ax.axvline(release, color="#2ca02c", lw=2)
    ax.annotate(f"release: {plan.finish_after_close:.0f} s after close",
                xy=(release, 0.55 * N / 1000), xytext=(close - 4.6, 0.42 * N / 1000),
                arrowprops={"arrowstyle": "->"})
    ax.axvline(one_shot, color="#d62728", lw=1, ls=":",
               label=f"one-shot release: t_ref = {T_REF / 3600:.0f} h after close")
    ax.set_xlim(0, one_shot + 0.3)
    ax.set_ylim(0, N / 1000 * 1.15)
    ax.set_xlabel("hours since the survey opened")
    ax.set_ylabel("responses (thousands)")
    ax.set_title("When streamanon starts the base run: the paper's example (s = 5)", fontsize=10)
    ax.legend(loc="upper left", frameon=False, fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"default {OUT.relative_to(ROOT)}")
    print(f"wrote {draw(parser.parse_args().out)}")


if __name__ == "__main__":
    main()
