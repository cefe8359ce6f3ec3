"""The loss of a release computed once per (original, released) pair of tuples
(streamanon.type_loss.loss_of_pairs) is the loss of every record (loss_by_type): with missing
answers, withheld and imputed values, sampling weights and every kind of attribute."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from streamanon.mixed import Column, Encoding, embed, fit_embedding
from streamanon.released_values import release_codes
from streamanon.type_loss import loss_by_type, loss_of_pairs

ENC = Encoding((Column("age", "int", missing="impute"),
                Column("income", "float", missing="impute"),
                Column("edu", "ordinal", ("a", "b", "c", "d"), missing="impute"),
                Column("region", "category", ("n", "s", "e", "w"), missing="impute")))


def survey(n: int, seed: int, missing: float) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``n`` records over a few hundred tuples (answers repeat), some missing, and
    a partition into cells of about 8."""
    rng = np.random.default_rng(seed)
    tuples = np.column_stack([rng.integers(18, 30, 300), rng.integers(1, 5, 300) * 1000.0,
                              rng.integers(0, 4, 300), rng.integers(0, 4, 300)]).astype(float)
    tuples[rng.random(tuples.shape) < missing] = np.nan
    C = tuples[rng.integers(0, 300, n)]
    order = np.lexsort(np.nan_to_num(C, nan=-1).T[::-1])
    labels = np.empty(n, dtype=np.int64)
    labels[order] = np.arange(n) // 8
    return C, labels


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("missing", [0.0, 0.05])
def test_the_loss_of_the_pairs_is_the_loss_of_every_record(seed, weighted, missing):
    C, labels = survey(5_000, seed, missing)
    rng = np.random.default_rng(seed + 10)
    weights = rng.uniform(0.5, 3.0, len(C)) if weighted else None
    withheld = np.zeros(C.shape, dtype=bool)
    withheld[labels % 17 == 0, 2] = True  # a cell withholds its ordinal
    R = release_codes(C, labels, ENC, withheld, weights)
    scaling = fit_embedding(C, ENC)
    Z = embed(C, ENC, scaling)
    tuple_of = pd.factorize(pd.MultiIndex.from_arrays(np.nan_to_num(C, nan=-1).T))[0]
    pairs, _ = pd.factorize(tuple_of * (labels.max() + 1) + labels)
    assert pairs.max() + 1 < len(C) / 2  # the pairs are fewer than the records
    every = loss_by_type(C, R, ENC, scaling, weights, Z)
    once = loss_of_pairs(C, R, ENC, scaling, pairs, weights, Z)
    assert every["withheld"] > 0 and (every["imputed"] > 0) == (missing > 0)
    assert once.keys() == every.keys()
    for name, value in every.items():
        assert once[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
