"""Paper 003 reproduction: the quick report runs, and the paper's mechanism and claim show up.

Section 3.2.2 (Figs. 7 and 10): stretching the discriminant axis makes MDAV's cells thin across
the class boundary, so fewer cells hold both classes, at the price of more SSE in the original
space (digest section 3.3). Section 4.6 (Fig. 13): on the breast-cancer data a classifier
trained on the LDA-MDAV release is more accurate than one trained on the MDAV release.
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

from simulations.repro.paper003 import (
    SPLIT_SEED,
    TEST_FRACTION,
    breast_cancer,
    release_accuracy,
    report,
    select_alpha,
    synthetic_gaussian,
)


def _splits(X: np.ndarray, y: np.ndarray, n: int):
    for split in range(n):
        yield train_test_split(X, y, test_size=TEST_FRACTION, stratify=y,
                               random_state=SPLIT_SEED + split)


def test_quick_report_runs_and_states_a_computed_verdict():
    text = report(quick=True)
    assert text.startswith("### Paper 003")
    assert "`python -m simulations.repro.paper003`" in text
    for k in (5, 25):
        assert f"| synthetic 2-D Gaussian (1000 x 2) | {k} |" in text
    assert "Verdict (computed):" in text
    assert text.count("LDA-MDAV against MDAV: **") == 2
    assert "partition in every run: yes" in text


def test_stretched_discriminant_leaves_fewer_class_mixed_cells_and_more_sse():
    X, y = synthetic_gaussian()
    for X_train, X_test, y_train, y_test in _splits(X, y, 5):
        mdav = release_accuracy(X_train, y_train, X_test, y_test, 50, None)
        stretched = release_accuracy(X_train, y_train, X_test, y_test, 50, 16.0)
        assert stretched.mixed_cells < mdav.mixed_cells
        assert stretched.information_loss > mdav.information_loss


def test_alpha_one_release_is_the_mdav_release():
    X, y = synthetic_gaussian()
    X_train, X_test, y_train, y_test = next(_splits(X, y, 1))
    mdav = release_accuracy(X_train, y_train, X_test, y_test, 25, None)
    plain = release_accuracy(X_train, y_train, X_test, y_test, 25, 1.0)
    assert np.array_equal(plain.cells, mdav.cells)
    assert plain.accuracy == mdav.accuracy


def test_stretched_release_trains_a_more_accurate_classifier_on_breast_cancer():
    """k = 50, alpha in {16, 32}, 10 splits: higher mean accuracy than MDAV, more wins than
    losses (the gain is about 1-2 points; alpha = 1 would give exactly 0)."""
    X, y = breast_cancer()
    gains = []
    for X_train, X_test, y_train, y_test in _splits(X, y, 10):
        mdav = release_accuracy(X_train, y_train, X_test, y_test, 50, None).accuracy
        gains += [release_accuracy(X_train, y_train, X_test, y_test, 50, alpha).accuracy - mdav
                  for alpha in (16.0, 32.0)]
    gains = np.array(gains)
    assert gains.mean() > 0.005
    assert np.sum(gains > 0) > np.sum(gains < 0)


def test_alpha_is_the_smallest_with_the_best_validation_accuracy():
    X, y = synthetic_gaussian(n=400)
    alphas = (1.0, 2.0, 4.0, 8.0)
    alpha, scores = select_alpha(X, y, 10, alphas, folds=3, seed=0)
    assert scores.shape == (4,) and ((scores > 0.5) & (scores <= 1)).all()
    assert alpha == min(a for a, score in zip(alphas, scores, strict=True) if score == scores.max())
