"""The paper's closed forms: quadratic base and incremental costs, uniform arrivals
(Rebollo-Monedero et al. 2018, sections III-B and IV; design spec §4).

Times are relative to ``t_ref``, the one-shot run time on all n records; ``s`` is the arrival
coefficient (``tau_- = s nu``). These reproduce the paper's numbers; the general planner
(:mod:`scheduler.planner`) solves the same problems numerically for any cost models and any
arrival forecast, and agrees with them in their special case. All functions are pure.
"""

from __future__ import annotations

import math
import warnings

#: The transition arrival coefficient s_- = 2 (2/sqrt(3) - 1) ~ 0.3094 (paper 001, sec. IV-B).
ARRIVAL_THRESHOLD = 2.0 * (2.0 / math.sqrt(3.0) - 1.0)


class InfeasibleDeadlineWarning(UserWarning):
    """The deadline cannot be met even at the optimal ratio nu*; nu* is used instead."""


def _check_coefficient(arrival_coefficient: float) -> float:
    s = float(arrival_coefficient)
    if not s >= 0:
        raise ValueError(f"arrival_coefficient must be >= 0, got {arrival_coefficient!r}")
    return s


# ---------------------------------------------------------------------------------------------
# Closed forms: quadratic costs, uniform arrivals.
# ---------------------------------------------------------------------------------------------


def critical_ratio(arrival_coefficient: float) -> float:
    """nu_-: the ratio at which the base run exactly fills the head start (tau_0 = tau_-).

    ``(2 + s - sqrt(s (4 + s))) / 2`` (paper 001, sec. IV-B).
    """
    s = _check_coefficient(arrival_coefficient)
    if math.isinf(s):
        return 0.0
    # 2 / (2 + s + sqrt(s (4 + s))) is the same number without cancellation for large s
    return 2.0 / (2.0 + s + math.sqrt(s * (4.0 + s)))


def critical_ratio_approx(arrival_coefficient: float) -> float:
    """Strong approximation of nu_- for slow arrivals: ``1 / (2 + s)``."""
    return 1.0 / (2.0 + _check_coefficient(arrival_coefficient))


def optimal_ratio(arrival_coefficient: float) -> float:
    """nu*: the ratio that maximises the time gain. ``(2 + s) / 4`` up to s_-, then nu_-."""
    s = _check_coefficient(arrival_coefficient)
    if s <= ARRIVAL_THRESHOLD:
        return (2.0 + s) / 4.0
    return critical_ratio(s)


def optimal_gain(arrival_coefficient: float) -> float:
    """dtau*: the largest relative time gain. ``(2 + s)^2 / 8`` up to s_-, then
    ``sqrt(s (4 + s)) (2 + s - sqrt(s (4 + s))) / 2`` (= 1 - nu_-^2; paper 001, Fig. 11)."""
    s = _check_coefficient(arrival_coefficient)
    if s <= ARRIVAL_THRESHOLD:
        return (2.0 + s) ** 2 / 8.0
    return 1.0 - critical_ratio(s) ** 2


def relative_gain(nu: float, arrival_coefficient: float) -> float:
    """dtau(nu) for quadratic costs and uniform arrivals."""
    s = _check_coefficient(arrival_coefficient)
    return min(s * nu + 1.0 - (1.0 - nu) ** 2, 1.0) - nu**2


def min_relative_deadline(arrival_coefficient: float) -> float:
    """tau_end_min = 1 - dtau*: the earliest relative finish after close."""
    return 1.0 - optimal_gain(arrival_coefficient)


def deadline_feasible(arrival_coefficient: float, relative_deadline: float) -> bool:
    """Whether a release ``relative_deadline`` (tau_end) after close can be met at all:
    tau_end >= tau_end_min (always when tau_end >= 1: the one-shot run fits)."""
    s = _check_coefficient(arrival_coefficient)
    tau_end = float(relative_deadline)
    return tau_end >= 1.0 or tau_end >= min_relative_deadline(s) - 1e-12


def deadline_ratio(arrival_coefficient: float, relative_deadline: float, *,
                   warn: bool = True) -> float:
    """nu_end: the smallest ratio that finishes ``relative_deadline`` (tau_end) after close.

    ``(2 + s - sqrt((2 + s)^2 - 8 (1 - tau_end))) / 4`` for tau_end_min <= tau_end < 1. With
    tau_end >= 1 the one-shot run fits and the result is 0. Below tau_end_min the deadline
    cannot be met (:func:`deadline_feasible` says so beforehand): nu* is returned and, with
    ``warn``, an :class:`InfeasibleDeadlineWarning` is issued.
    """
    s = _check_coefficient(arrival_coefficient)
    tau_end = float(relative_deadline)
    if tau_end >= 1.0:
        return 0.0
    if not deadline_feasible(s, tau_end):
        if warn:
            warnings.warn(
                f"a deadline of {tau_end:.4g} t_ref after close cannot be met (the earliest "
                f"finish is {min_relative_deadline(s):.4g} t_ref at nu* = "
                f"{optimal_ratio(s):.4g}); using nu*",
                InfeasibleDeadlineWarning,
                stacklevel=2,
            )
        return optimal_ratio(s)
    discriminant = max((2.0 + s) ** 2 - 8.0 * (1.0 - tau_end), 0.0)
    # the smaller root, written without cancellation
    return 2.0 * (1.0 - tau_end) / (2.0 + s + math.sqrt(discriminant))


def deadline_ratio_approx(arrival_coefficient: float, relative_deadline: float) -> float:
    """Strong approximation of nu_end for slow arrivals: ``(1 - tau_end) / (2 + s)``."""
    return (1.0 - relative_deadline) / (2.0 + _check_coefficient(arrival_coefficient))


def head_start(arrival_coefficient: float, nu: float, t_ref: float) -> float:
    """Seconds between the base snapshot and close under uniform arrivals: ``s nu t_ref``."""
    return _check_coefficient(arrival_coefficient) * nu * t_ref
