"""Regenerate the bundled synthetic example survey ``streamanon/data/example_survey.csv``.

The data are invented (seeded), with correlated quasi-identifiers, a few identifiers that must
be dropped and confidential answers that are published unchanged.

    python -m simulations.make_example_survey
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

N = 2000
SEED = 20261125


def make(n: int = N, seed: int = SEED) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 91, n)
    household = np.clip(rng.poisson(1.6, n) + 1, 1, 8)
    income = np.round(np.exp(rng.normal(10.2 + 0.012 * (age - 18) - 0.00015 * (age - 45) ** 2,
                                        0.45, n)), -2)
    commute = np.round(rng.gamma(2.0, 6.0, n) * (age < 67), 1)
    years = np.minimum(age - 18, rng.integers(0, 40, n))
    satisfaction = rng.integers(1, 6, n)
    health = np.clip(np.round(95 - 0.45 * (age - 18) + rng.normal(0, 8, n)), 0, 100).astype(int)
    vote = rng.choice(["yes", "no", "undecided"], n, p=[0.55, 0.25, 0.2])
    ids = [f"R{100000 + i}" for i in rng.permutation(n)]
    return pd.DataFrame({
        "respondent_id": ids,
        "email": [f"person{i}@example.org" for i in range(n)],
        "age": age,
        "household_size": household,
        "income": income.astype(int),
        "commute_km": commute,
        "years_at_address": years,
        "satisfaction": satisfaction,
        "health_score": health,
        "votes_next_election": vote,
    })


if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "streamanon" / "data" / "example_survey.csv"
    make().to_csv(target, index=False)
    print(f"wrote {target}")
