"""The exact noise of the differentially private releases (:mod:`streamanon.dp`), drawn by
OpenDP (https://opendp.org, the ``opendp`` package).

Every draw here is exact: integers from the discrete Laplace and discrete Gaussian
distributions, and choices of the noisy-max mechanisms, sampled without floating-point
arithmetic (Canonne, Kamath and Steinke, "The discrete Gaussian for differential privacy",
NeurIPS 2020, section 5, the algorithms OpenDP implements), from random bits of OpenSSL's
cryptographically secure generator (``RAND_bytes``, linked into OpenDP's library). Nothing here
takes a seed: nobody can replay the noise, and the tests and the service draw the same way.

Each sampler builds its OpenDP measurement once and invokes it on a whole vector (the cells'
sums of one attribute), or once per cell on its candidates' scores (the noisy max). The
``*_measurement`` functions return that measurement, whose ``map`` is OpenDP's own privacy
accounting: the tests check :mod:`streamanon.dp`'s accounting against it.

Pure: arrays in, arrays out; no I/O.
"""

from __future__ import annotations

import numpy as np
import opendp.prelude as opendp

# OpenDP's measurements are in its "contrib" set (vetted by proof documents, not yet by
# its committee): the ones used here are the integer Laplace and Gaussian and the noisy max.
opendp.enable_features("contrib")

_INTEGERS = opendp.vector_domain(opendp.atom_domain(T="i64"))


def laplace_measurement(scale: float) -> opendp.Measurement:
    """OpenDP's discrete Laplace on a vector of 64-bit integers, with its ``L1`` privacy map:
    ``map(d)`` is ``d / scale``, the epsilon of a vector whose L1 sensitivity is ``d``."""
    return opendp.m.make_laplace(_INTEGERS, opendp.l1_distance(T="i64"), scale=float(scale))


def gaussian_measurement(sigma: float) -> opendp.Measurement:
    """OpenDP's discrete Gaussian on a vector of 64-bit integers, with its zero-concentrated
    privacy map: ``map(d)`` is ``d**2 / (2 sigma**2)``, the rho of a vector whose L2
    sensitivity is ``d`` (Bun and Steinke 2016, Proposition 1.6; and for the discrete
    Gaussian, Canonne, Kamath and Steinke 2020, section 2)."""
    return opendp.m.make_gaussian(_INTEGERS, opendp.l2_distance(T="f64"), scale=float(sigma))


def exponential_measurement(scale: float) -> opendp.Measurement:
    """OpenDP's noisy max with Gumbel noise of scale ``scale`` on a vector of 64-bit integer
    scores (over the ``LInf`` distance of scores that may move both ways): it draws index i
    with probability proportional to ``exp(score_i / scale)``, the exponential mechanism.
    Its map is zero-concentrated: ``map(d)`` = ``(2 d / scale)**2 / 8`` as rho (bounded
    range: Cesar and Rogers, "Bounding, concentrating, and truncating", ALT 2021). The same
    draw is ``2 d / scale``-differentially private (McSherry and Talwar, FOCS 2007); OpenDP's
    pure-DP noisy max draws exponential noise instead (permute-and-flip), another
    distribution."""
    return opendp.m.make_noisy_max(_INTEGERS, opendp.linf_distance(T="i64"),
                                   opendp.zero_concentrated_divergence(), scale=float(scale))


def discrete_laplace(values: np.ndarray, scale: float) -> np.ndarray:
    """``values`` (integers) plus independent integers z drawn with probability proportional
    to ``exp(-|z| / scale)``: the discrete Laplace distribution of scale ``scale``. Added to a
    vector of L1 sensitivity ``d`` it is ``d / scale``-differentially private (Ghosh,
    Roughgarden and Sundararajan 2012; Canonne, Kamath and Steinke 2020, section 5.2). The
    sums stay integers: a float Laplace draw added to a float mean leaves low-order bits
    that tell which mean it was added to (Mironov, CCS 2012). Saturates at the 64-bit
    bounds (:data:`streamanon.dp.MAX_NOISE_SCALE` keeps the scale far below them)."""
    return _invoke(laplace_measurement(scale), values)


def discrete_gaussian(values: np.ndarray, sigma: float) -> np.ndarray:
    """``values`` (integers) plus independent integers z drawn with probability proportional
    to ``exp(-z**2 / (2 sigma**2))``: the discrete Gaussian of scale ``sigma`` (its variance
    is at most ``sigma**2``). Added to a vector of L2 sensitivity ``d`` it is
    ``d**2 / (2 sigma**2)``-zCDP (Canonne, Kamath and Steinke 2020, section 2)."""
    return _invoke(gaussian_measurement(sigma), values)


def _invoke(measurement: opendp.Measurement, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.int64)
    if len(values) == 0:
        return values.copy()
    return np.asarray(measurement(values.tolist()), dtype=np.int64)


def exponential_mechanism(utility: np.ndarray, epsilon: float,
                          sensitivity: int = 1) -> np.ndarray:
    """One index per row of ``utility`` (integers, rows x candidates), drawn with probability
    proportional to ``exp(epsilon * utility / (2 sensitivity))``: the exponential mechanism
    (McSherry and Talwar 2007), by OpenDP's exact Gumbel noisy max
    (:func:`exponential_measurement`) of scale
    ``2 sensitivity / epsilon``. Where one record moves each utility by at most
    ``sensitivity``, each row's draw is epsilon-differentially private and
    ``epsilon**2 / 8``-zCDP (bounded range: Cesar and Rogers 2021)."""
    utility = np.asarray(utility, dtype=np.int64)
    rows, candidates = utility.shape
    if candidates == 1:
        return np.zeros(rows, dtype=np.int64)
    draw = exponential_measurement(2.0 * sensitivity / epsilon)
    return np.fromiter((draw(row) for row in utility.tolist()), dtype=np.int64, count=rows)
