"""t-closeness side by side: streamanon's three engines against privlib's ``T_closeness``.

    python -m simulations.bench_tcloseness                        # 18,000 and 100,000 rows
    python -m simulations.bench_tcloseness --rows 2000 --repeats 1 --out tc.json

Every side works on the same synthetic survey (``simulations.make_example_survey.make``, seed
``--seed``): five numeric quasi-identifiers (age, household size, commute, years at the
address, health score) and one ordered confidential attribute, the income, published
unchanged. streamanon's ``tclose_merge``, ``tclose_kfirst`` (the default when ``t`` is given)
and ``tclose_tfirst`` run in this process on the standardised quasi-identifiers; their release
is each cell's mean. privlib 0.0.4 (Soria-Comas et al.'s t-closeness-first algorithm, from the
authors' group) runs in a virtual environment of its own, made by this script the first time
(``--side-env``, default ``~/.cache/streamanon/bench-privlib``), on a CSV this script writes,
as its documentation uses it: ``T_closeness(dataset, k, t).calculate_anonymization(Mdav())``;
its release is the table it publishes. ANJANA (generalisation) is not run: its t-closeness
needs a hierarchy per quasi-identifier, and its release (intervals) has no centroid to measure
the same information loss on.

Seconds: median of ``--repeats`` runs of the anonymisation only (streamanon: the engine on the
standardised array; privlib: ``calculate_anonymization``, the loading of its data set left out).
Every other column is measured on the release by :func:`check_release`, written here from the
definitions and sharing no code with ``streamanon.privacy``: the equivalence classes are the
groups of records with identical published quasi-identifiers; *IL* is ``100 SSE / SST`` on the
standardised quasi-identifiers, SSE between published and original values; *IL cells* the same
with each class's exact mean as its published value (no rounding); *largest EMD* the largest
ordered EMD (ground distance ``|i - j| / (m - 1)`` on the ranks of the ``m`` distinct incomes)
of a class to the whole; violations count classes with fewer than ``k`` records or EMD above
``t``; *unchanged* counts records published with every quasi-identifier as it was.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from simulations.common import commit, machine
from simulations.make_example_survey import make
from streamanon.engines import run_engine

QI = ["age", "household_size", "commute_km", "years_at_address", "health_score"]
SENSITIVE = "income"
ENGINES = ["tclose_merge", "tclose_kfirst", "tclose_tfirst"]
PRIVLIB = "privlib==0.0.4"
SIDE_ENV = Path("~/.cache/streamanon/bench-privlib").expanduser()
#: Slack on ``EMD <= t`` for float sums, as for streamanon's own check.
SLACK = 1e-12
COLUMNS = ["rows", "method", "seconds", "il", "il_cells", "classes", "smallest", "largest_emd",
           "k_violations", "t_violations", "unchanged"]

#: Run by the side environment's Python: privlib on the CSV, its clusters and published table.
PRIVLIB_RUNNER = r'''
import contextlib, json, os, sys, time
import pandas as pd
from privlib.anonymization.src.algorithms.mdav import Mdav
from privlib.anonymization.src.algorithms.t_closeness import T_closeness
from privlib.anonymization.src.entities.dataset_DataFrame import Dataset_DataFrame

csv, xml, k, t, repeats, out, published_csv = sys.argv[1:]
frame = pd.read_csv(csv)
frame.name = "survey"
seconds, clusters = [], []
with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
    dataset = Dataset_DataFrame(frame, xml)  # privlib prints per value; not timed
    for _ in range(int(repeats)):
        scheme = T_closeness(dataset, int(k), float(t))
        made = scheme.create_k_t_clusters
        def capture():
            found = made()
            clusters[:] = [[record.id for record in cluster] for cluster in found]
            return found
        scheme.create_k_t_clusters = capture
        started = time.perf_counter()
        scheme.calculate_anonymization(Mdav())
        seconds.append(time.perf_counter() - started)
    scheme.anonymized_dataset_to_dataframe().to_csv(published_csv, index=False)
with open(out, "w") as f:
    json.dump({"seconds": seconds, "clusters": clusters}, f)
'''


def survey(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The quasi-identifiers (n x 5, float) and the income of ``n`` synthetic respondents."""
    frame = make(n, seed)
    return frame[QI].to_numpy(np.float64), frame[SENSITIVE].to_numpy(np.float64)


def standardised(X: np.ndarray, like: np.ndarray) -> np.ndarray:
    """``X`` with ``like``'s columns' mean 0 and population standard deviation 1."""
    return (X - like.mean(axis=0)) / like.std(axis=0)


def ordered_emds(classes: np.ndarray, sensitive: np.ndarray) -> np.ndarray:
    """Each class's EMD to the whole, ordered ground distance on the ranks of the distinct
    values: ``sum_i |P_class(i) - P(i)| / (m - 1)`` over the cumulative distributions."""
    values, ranks = np.unique(sensitive, return_inverse=True)
    m = len(values)
    n_classes = int(classes.max()) + 1
    if m == 1:
        return np.zeros(n_classes)
    whole = np.cumsum(np.bincount(ranks, minlength=m))[:-1] / len(sensitive)
    order = np.argsort(classes, kind="stable")
    bounds = np.searchsorted(classes[order], np.arange(n_classes + 1))
    out = np.empty(n_classes)
    for c in range(n_classes):
        members = ranks[order[bounds[c]:bounds[c + 1]]]
        cell = np.cumsum(np.bincount(members, minlength=m))[:-1] / len(members)
        out[c] = np.abs(cell - whole).sum() / (m - 1)
    return out


def check_release(published: np.ndarray, original: np.ndarray, sensitive: np.ndarray, k: int,
                  t: float) -> dict[str, Any]:
    """What an observer of the release can measure: its equivalence classes (identical
    published quasi-identifiers), their sizes and EMDs, and the information loss."""
    _, classes = np.unique(published, axis=0, return_inverse=True)
    classes = classes.ravel()
    sizes = np.bincount(classes)
    emds = ordered_emds(classes, sensitive)
    Z = standardised(original, original)
    sst = float(((Z - Z.mean(axis=0)) ** 2).sum())
    sse = float(((standardised(published, original) - Z) ** 2).sum())
    means = np.stack([np.bincount(classes, Z[:, j]) / sizes for j in range(Z.shape[1])], axis=1)
    sse_cells = float(((Z - means[classes]) ** 2).sum())
    return {
        "il": 100.0 * sse / sst,
        "il_cells": 100.0 * sse_cells / sst,
        "classes": len(sizes),
        "smallest": int(sizes.min()),
        "largest_emd": float(emds.max()),
        "k_violations": int((sizes < k).sum()),
        "t_violations": int((emds > t + SLACK).sum()),
        "unchanged": int((published == original).all(axis=1).sum()),
    }


def run_streamanon(X: np.ndarray, s: np.ndarray, k: int, t: float, repeats: int
                   ) -> dict[str, tuple[float, np.ndarray]]:
    """Median seconds and release (cell means) of each engine."""
    Z = standardised(X, X)
    out = {}
    for engine in ENGINES:
        run_engine(engine, Z[:200], k, S=s[:200], t=t)  # compiled kernels loaded, not timed
        seconds = []
        for _ in range(repeats):
            started = time.perf_counter()
            labels = run_engine(engine, Z, k, S=s, t=t)
            seconds.append(time.perf_counter() - started)
        sizes = np.bincount(labels)
        means = np.stack([np.bincount(labels, X[:, j]) / sizes for j in range(X.shape[1])],
                         axis=1)
        out[engine] = (statistics.median(seconds), means[labels])
    return out


def side_env(path: Path = SIDE_ENV) -> tuple[Path, float]:
    """The side environment's Python with privlib importable, made when missing; and the
    seconds spent making it (about 0 when it was there)."""
    python = path / "bin" / "python"
    started = time.perf_counter()
    check = [str(python), "-c", "import privlib.anonymization.src.algorithms.t_closeness"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, time.perf_counter() - started
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(path)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    PRIVLIB], check=True)
    subprocess.run(check, check=True)
    return python, time.perf_counter() - started


def run_privlib(python: Path, X: np.ndarray, s: np.ndarray, k: int, t: float, repeats: int,
                folder: Path) -> tuple[float, np.ndarray]:
    """privlib's median seconds and its published quasi-identifiers, in the side environment."""
    frame = pd.DataFrame(X, columns=QI).assign(**{SENSITIVE: s})
    csv, xml = folder / "survey.csv", folder / "survey.xml"
    frame.to_csv(csv, index=False)
    attributes = [f'<attribute name="{name}" sensitivity_type="quasi_identifier" '
                  f'attribute_type="numerical_continuous"/>' for name in QI]
    attributes.append(f'<attribute name="{SENSITIVE}" sensitivity_type="confidential" '
                      f'attribute_type="numerical_continuous"/>')
    xml.write_text('<?xml version="1.0"?>\n<dataset>\n' + "\n".join(attributes) + "\n</dataset>\n")
    runner, out, published = folder / "run_privlib.py", folder / "out.json", folder / "pub.csv"
    runner.write_text(PRIVLIB_RUNNER)
    subprocess.run([str(python), str(runner), str(csv), str(xml), str(k), str(t), str(repeats),
                    str(out), str(published)], check=True, cwd=folder)
    result = json.loads(out.read_text())
    released = pd.read_csv(published)[QI].to_numpy(np.float64)
    return statistics.median(result["seconds"]), released


def table(results: list[dict[str, Any]]) -> str:
    head = ("| rows | method | seconds | IL | IL cells | classes | smallest | largest EMD "
            "| k viol. | t viol. | unchanged |")
    lines = [head, "|---:|---|" + "---:|" * 9]
    for r in results:
        lines.append(f"| {r['rows']:,} | {r['method']} | {r['seconds']:.2f} | {r['il']:.2f} "
                     f"| {r['il_cells']:.2f} | {r['classes']:,} | {r['smallest']} "
                     f"| {r['largest_emd']:.3f} | {r['k_violations']} | {r['t_violations']} "
                     f"| {r['unchanged']:,} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.bench_tcloseness",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="18000,100000",
                        help="comma-separated data set sizes (default 18000,100000)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--t", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=3, help="runs per method; the median")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--skip-privlib", action="store_true", help="streamanon's engines only")
    parser.add_argument("--side-env", type=Path, default=SIDE_ENV,
                        help=f"privlib's virtual environment (default {SIDE_ENV})")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]

    setup = {}
    python = None
    if not args.skip_privlib:
        python, seconds = side_env(args.side_env)
        setup = {"side_env": str(args.side_env), "side_env_seconds": seconds}
        print(f"privlib side environment {args.side_env} ready in {seconds:.1f} s", flush=True)
    results = []
    for n in rows:
        X, s = survey(n, args.seed)
        for engine, (seconds, released) in run_streamanon(X, s, args.k, args.t,
                                                          args.repeats).items():
            results.append({"rows": n, "method": f"streamanon {engine}", "seconds": seconds,
                            **check_release(released, X, s, args.k, args.t)})
            print(table(results[-1:]).splitlines()[-1], flush=True)
        if python is not None:
            with tempfile.TemporaryDirectory() as folder:
                seconds, released = run_privlib(python, X, s, args.k, args.t, args.repeats,
                                                Path(folder))
            results.append({"rows": n, "method": "privlib T_closeness", "seconds": seconds,
                            **check_release(released, X, s, args.k, args.t)})
            print(table(results[-1:]).splitlines()[-1], flush=True)
    provenance = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "commit": commit(), "machine": machine(), "k": args.k, "t": args.t,
                  "repeats": args.repeats, "seed": args.seed, **setup}
    print()
    print(f"k = {args.k}, t = {args.t}, median of {args.repeats}; {provenance['date']}, "
          f"commit {provenance['commit']}, {provenance['machine']}")
    print(table(results))
    if args.out is not None:
        args.out.write_text(json.dumps({**provenance, "columns": COLUMNS, "results": results},
                                       indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
