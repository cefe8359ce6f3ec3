"""ANJANA's k-anonymity (generalisation and suppression) on a CSV, for bench_real_surveys.

Runs in a side environment where ``anjana`` is installed (it pins its own numpy and pandas;
it imports nothing of streamanon), as ``bench_real_surveys --anjana PYTHON`` starts it:

    python simulations/anjana_side.py DATA.csv KEYS NUMERIC K OUT.json

KEYS: the comma-separated quasi-identifiers; NUMERIC: those of them that are numbers, given
the hierarchy value -> band of 5 -> band of 10 -> ``*``; every other key value -> ``*``
(a missing value is the level ``missing``). Suppression up to 5 % of the records, as in
ANJANA's examples. Writes the seconds, the suppressed records and the share of records whose
key tuple changed (generalised or suppressed).
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pandas as pd
from anjana.anonymity import k_anonymity


def bands(values: np.ndarray, width: int) -> np.ndarray:
    low = (np.floor(values.astype(float) / width) * width).astype(int)
    return np.array([f"[{a}, {a + width})" for a in low], dtype=object)


def main() -> None:
    path, keys, numeric, k, out = sys.argv[1:6]
    keys = keys.split(",")
    numeric = [c for c in numeric.split(",") if c]
    frame = pd.read_csv(path)
    for c in keys:
        if c in numeric:
            frame[c] = frame[c].fillna(-1).astype(int)
        else:
            frame[c] = frame[c].astype(object).where(frame[c].notna(), "missing").astype(str)
    hierarchies = {}
    for c in keys:
        values = np.array(sorted(frame[c].unique()), dtype=object)
        if c in numeric:
            hierarchies[c] = {0: values, 1: bands(values, 5), 2: bands(values, 10),
                              3: np.full(len(values), "*", dtype=object)}
        else:
            hierarchies[c] = {0: values, 1: np.full(len(values), "*", dtype=object)}
    original = frame[keys].astype(str).reset_index(drop=True)
    started = time.perf_counter()
    released = k_anonymity(frame, [], keys, int(k), 5, hierarchies)
    seconds = time.perf_counter() - started
    # ANJANA renumbers the rows it keeps: a released row is unchanged when every key holds
    # a value of the original level (not a band, not "*")
    unchanged = np.ones(len(released), dtype=bool)
    for c in keys:
        unchanged &= released[c].astype(str).isin(set(original[c])).to_numpy()
    changed = int((~unchanged).sum())
    suppressed = len(frame) - len(released)
    with open(out, "w") as file:
        json.dump({"seconds": seconds, "n": len(frame), "released": len(released),
                   "suppressed": int(suppressed),
                   "changed": float((changed + suppressed) / len(frame))}, file)


if __name__ == "__main__":
    main()
