"""The information loss of mixed survey data by type (:func:`loss_by_type`): the embedding's
SSE / SST, the numeric attributes' share of it, the mean rank shift of the ordinals, the share
of nominal values changed, and the values withheld or imputed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from streamanon.metrics import Standardisation
from streamanon.mixed import Encoding, embed


def loss_by_type(C: np.ndarray, R: np.ndarray, encoding: Encoding, scaling: Standardisation,
                 weights: np.ndarray | None = None, Z: np.ndarray | None = None,
                 counts: np.ndarray | None = None) -> dict[str, Any]:
    """The information loss of released codes ``R`` against the original codes ``C``, per type,
    over the values that were observed (a weighted share when ``weights`` are given):

    - ``distortion``: the embedding's SSE / SST (design spec §3; on complete numeric data the
      literature's D): squared distances of each record's embedding to its released one,
      over the squared distances to the mean; a withheld value counts as released at the mean;
    - ``numeric``: the same, over the numeric attributes only;
    - ``ordinal``: the mean rank shift, normalised by (levels - 1);
    - ``nominal``: the share of values changed;
    - ``withheld`` / ``imputed``: values observed but not released / missing but released.

    ``Z``: ``embed(C, encoding, scaling)`` when the caller has it already. ``counts``: how
    many records each row stands for, when the rows are the distinct (record, released record)
    pairs of a release (:func:`loss_of_pairs`); ``weights`` are then each pair's total weight.
    """
    w = np.ones(C.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    if counts is not None and weights is None:
        w = np.asarray(counts, dtype=np.float64)
    per_row = np.ones(C.shape[0]) if counts is None else np.asarray(counts, dtype=np.float64)
    if counts is not None:
        weights = w  # the weighted sums below, each pair counted as its records
    seen = ~np.isnan(C)
    released = ~np.isnan(R)
    complete = bool(seen.all())
    Z = embed(C, encoding, scaling) if Z is None else Z
    ZR = embed(R if complete else np.where(seen, R, np.nan), encoding, scaling)
    # whole-matrix sums per embedding column (one pass each, not one per strided column)
    attribute = np.concatenate([np.full(part.stop - part.start, j)
                                for j, part in enumerate(encoding.slices)]).astype(np.int64)
    m = len(encoding.columns)
    if complete and weights is None:
        total = np.full(m, float(C.shape[0]))
        sse_e = np.sum((Z - ZR) ** 2, axis=0)
        sst_e = np.sum((Z - Z.mean(axis=0)) ** 2, axis=0)
    else:
        W = np.where(seen, w[:, None], 0.0)  # n x m: each observed value's weight
        total = W.sum(axis=0)
        We = W[:, attribute]
        centre = (We * Z).sum(axis=0) / np.where(total[attribute] > 0, total[attribute], 1.0)
        sse_e = np.sum(We * (Z - ZR) ** 2, axis=0)
        sst_e = np.sum(We * (Z - centre) ** 2, axis=0)
    sse = np.where(total > 0, np.bincount(attribute, weights=sse_e, minlength=m), 0.0)
    sst = np.where(total > 0, np.bincount(attribute, weights=sst_e, minlength=m), 0.0)
    kinds = {"numeric": [j for j, c in enumerate(encoding.columns) if c.kind in ("float", "int")],
             "ordinal": [j for j, c in enumerate(encoding.columns) if c.kind == "ordinal"],
             "nominal": [j for j, c in enumerate(encoding.columns) if c.nominal]}
    out: dict[str, Any] = {
        "distortion": float(sse.sum() / sst.sum()) if sst.sum() > 0 else 0.0}
    num = kinds["numeric"]
    out["numeric"] = (float(sse[num].sum() / sst[num].sum())
                      if num and sst[num].sum() > 0 else None)
    both = seen & released
    for kind in ("ordinal", "nominal"):
        cols = kinds[kind]
        if not cols:
            out[kind] = None
            continue
        shift = np.zeros(C.shape[0])
        weight = np.zeros(C.shape[0])
        for j in cols:
            col = encoding.columns[j]
            b = both[:, j]
            if kind == "ordinal":
                span = max(len(col.levels) - 1, 1)
                d = np.abs(np.where(b, C[:, j] - R[:, j], 0.0)) / span
            else:
                d = np.where(b, (C[:, j] != R[:, j]).astype(np.float64), 0.0)
            shift += w * d
            weight += np.where(b, w, 0.0)
        out[kind] = float(shift.sum() / weight.sum()) if weight.sum() > 0 else 0.0
    out["withheld"] = int(np.sum((seen & ~released) * per_row[:, None]))
    out["imputed"] = int(np.sum((~seen & released) * per_row[:, None]))
    return out


def loss_of_pairs(C: np.ndarray, R: np.ndarray, encoding: Encoding, scaling: Standardisation,
                  pairs: np.ndarray, weights: np.ndarray | None = None,
                  Z: np.ndarray | None = None) -> dict[str, Any]:
    """:func:`loss_by_type` of every record, computed once per distinct pair of an original
    and a released tuple (``pairs``: each record's pair, numbered from 0): records of one pair
    have the same codes, embedding and released codes, so each pair's terms are counted as
    its records (or their total weight). The same measures up to the rounding of the sums: a
    survey whose keys repeat has few pairs (1.4 million military records, 3,300 pairs)."""
    n_pairs = int(pairs.max()) + 1 if pairs.size else 0
    first = np.full(n_pairs, len(pairs), dtype=np.int64)
    np.minimum.at(first, pairs, np.arange(len(pairs)))
    counts = np.bincount(pairs, minlength=n_pairs)
    total = None if weights is None else np.bincount(pairs, weights=weights, minlength=n_pairs)
    return loss_by_type(C[first], R[first], encoding, scaling, total,
                        None if Z is None else Z[first], counts)
