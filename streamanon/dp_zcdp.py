"""Zero-concentrated differential privacy (rho-zCDP, Bun and Steinke, "Concentrated
differential privacy: simplifications, extensions, and lower bounds", TCC 2016) and its
(epsilon, delta) reading.

A rho-zCDP release is (epsilon, delta)-differentially private for every delta in (0, 1), with
``epsilon = rho + 2 sqrt(rho ln(1 / delta))`` (Bun and Steinke, Proposition 1.3), or the
smaller epsilon of the tighter conversion OpenDP uses (``make_zCDP_to_approxDP``: Canonne,
Kamath and Steinke 2020, Proposition 12 and Corollary 13). :func:`epsilon_of` is that
conversion; :func:`rho_for` inverts it: the largest rho whose release is (epsilon,
delta)-private, found by bisection on the conversion (increasing in rho), so that the rho it
returns never overshoots. :func:`bun_steinke_rho` is the closed-form inversion of
Proposition 1.3, smaller (the tests check that ``rho_for`` never gives less).

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math

import opendp.prelude as opendp

from streamanon.errors import ParameterError

opendp.enable_features("contrib")


def check_delta(delta: float) -> None:
    """Refuse a delta outside the open interval (0, 1)."""
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ParameterError(f"delta must be a number in (0, 1), not {delta!r}: the "
                             "probability that the epsilon bound fails, typically far "
                             "below 1 / n (say 1e-6 to 1e-9)")


def check_rho(rho: float) -> None:
    """Refuse a rho that is not a finite positive number."""
    if not (isinstance(rho, (int, float)) and rho > 0 and math.isfinite(rho)):
        raise ParameterError(f"rho must be a finite positive number, not {rho!r}")


def epsilon_of(rho: float, delta: float) -> float:
    """The epsilon for which a rho-zCDP release is (epsilon, delta)-differentially private,
    by OpenDP's conversion (Bun and Steinke's larger one where rho is too large for it, in
    the thousands)."""
    check_rho(rho)
    check_delta(delta)
    # a Gaussian of scale 1 at sensitivity sqrt(2 rho) is exactly rho-zCDP
    unit = opendp.m.make_gaussian(opendp.atom_domain(T=float, nan=False),
                                  opendp.absolute_distance(T=float), scale=1.0)
    try:
        curve = opendp.c.make_zCDP_to_approxDP(unit).map(math.sqrt(2.0 * rho))
        return float(curve.epsilon(delta))
    except opendp.OpenDPException:  # a rho so large its search overflows: the closed form
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def bun_steinke_rho(epsilon: float, delta: float) -> float:
    """The rho of Bun and Steinke's Proposition 1.3 solved for rho:
    ``(sqrt(ln(1/delta) + epsilon) - sqrt(ln(1/delta)))**2``."""
    check_delta(delta)
    log = math.log(1.0 / delta)
    return (math.sqrt(log + epsilon) - math.sqrt(log)) ** 2


def rho_for(epsilon: float, delta: float) -> float:
    """The largest rho (to 1e-9 relative) whose release is (epsilon, delta)-differentially
    private by :func:`epsilon_of`: a zCDP release calibrated to (epsilon, delta)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ParameterError(f"epsilon must be a finite positive number, not {epsilon!r}")
    check_delta(delta)
    low = bun_steinke_rho(epsilon, delta)  # private: the conversion above is never looser
    high = max(epsilon, 2.0 * low)  # epsilon_of(rho) >= rho: epsilon_of(epsilon) > epsilon
    while epsilon_of(high, delta) <= epsilon:
        high *= 2.0
    for _ in range(200):
        if high - low <= 1e-9 * high:
            break
        middle = (low + high) / 2.0
        if epsilon_of(middle, delta) <= epsilon:
            low = middle
        else:
            high = middle
    return low
