"""Before and after: the synthetic e-survey raw, released with its schema, and released in a hurry.

    python -m simulations.bench_survey                         # n = 3000 and 30000, 3 repeats
    python -m simulations.bench_survey --n 3000 --k 5 --seed 0 --repeats 1

Prints the Markdown table of the README. The data are ``simulations/survey_data.py``'s survey
(seeded). The **key** an intruder would match on is age, household size, gender, region,
education and income, a missing income being a value of its own; a respondent is a **sample
unique** when nobody else in the file has their key. Rows, for each ``n``:

- ``raw file``: the export as it is;
- ``mdav``, ``ona_star``: the k-anonymous release with the survey's schema, as
  ``streamanon anonymize --schema`` makes it (the API with the same schema: strata region,
  integers kept integral, categories and levels released as categories and levels, missing
  incomes grouped, weighted by the design weight);
- ``mdav, hurried quick form``: what a user in a hurry gets from the quick form,
  ``--qi age,household_size --confidential gender,region,education,... --drop
  respondent_id,email,income``: gender, region and education published unchanged, income
  dropped (its row's shares are on the key without income, which it no longer has).

Columns: sample uniques before (raw file) and after (release) in percent, the smallest group of
equal keys in the release, the information loss per type in percent (``report.json``'s
``information_loss_by_type``: numeric SSE/SST, ordinal mean rank shift, nominal share changed)
and the wall time of one ``microaggregate`` call in seconds, the median of ``--repeats`` runs,
each in a fresh process after a warm-up run. A release whose first run takes longer than
``--time-limit`` seconds is skipped, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from simulations.common import seconds_cell

KEY = ["age", "household_size", "gender", "region", "education", "income"]
ENGINES = ("mdav", "ona_star")
HURRIED = "mdav, hurried quick form"
#: The quick form of the issue: only the numbers as quasi-identifiers, the categories published
#: as confidential answers, the income (which has gaps) dropped.
HURRIED_FORM: dict[str, list[str]] = {
    "qi": ["age", "household_size"],
    "confidential": ["gender", "region", "education", "submitted_at", "q1", "q2", "q3", "q4",
                     "q5", "comment", "weight"],
    "drop": ["respondent_id", "email", "income"],
}
COLUMNS = ["engine", "n", "sample uniques before %", "after %", "smallest group",
           "IL numeric %", "IL ordinal %", "IL nominal %", "seconds"]
#: Seconds a child process may take beyond the release itself (start-up, data, warm-up).
STARTUP_ALLOWANCE = 60.0


def release(n: int, k: int, seed: int, engine: str, hurried: bool = False) -> dict[str, Any]:
    """One timed release of the ``n``-response survey drawn from ``seed``, in this process:
    its sample-unique shares, smallest group, losses per type and seconds."""
    from simulations.survey_data import SURVEY_SCHEMA, SURVEY_STRATA, make_survey
    from streamanon.api import Output, microaggregate
    from streamanon.metrics import check_table_k_anonymity, sample_unique_share

    described: dict[str, Any] = (dict(HURRIED_FORM) if hurried else
                                 {"schema": {"schema": SURVEY_SCHEMA, "strata": SURVEY_STRATA}})
    microaggregate(make_survey(200, seed), k, engine, output=Output(seed=seed),
                   **described)  # compile, load
    frame = make_survey(n, seed)
    started = time.perf_counter()
    result = microaggregate(frame, k, engine, output=Output(seed=seed), **described)
    seconds = time.perf_counter() - started
    key = [c for c in KEY if c in result.data.columns]
    return {
        "key": key,
        "before": sample_unique_share(frame, key),
        "after": sample_unique_share(result.data, key),
        "smallest": check_table_k_anonymity(result.data, key, k).smallest_group,
        "loss": result.report()["information_loss_by_type"],
        "seconds": seconds,
    }


def _run_in_child(n: int, k: int, seed: int, engine: str, hurried: bool,
                  time_limit: float) -> dict[str, Any] | None:
    """:func:`release` in a fresh process; None when it outlives ``time_limit``."""
    code = ("import json; from simulations.bench_survey import release; "
            f"print(json.dumps(release({n}, {k}, {seed}, {engine!r}, {hurried})))")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, timeout=time_limit + STARTUP_ALLOWANCE)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{engine} at n = {n} failed:\n{exc.stderr}") from None
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return None if row["seconds"] > time_limit else row


def measure(n: int, k: int, seed: int, engine: str, *, hurried: bool = False, repeats: int = 3,
            time_limit: float = 120.0) -> dict[str, Any]:
    """A table row: :func:`release` ``repeats`` times (median seconds), or a skipped row when
    the first run takes longer than ``time_limit`` seconds."""
    label = HURRIED if hurried else engine
    runs = []
    for _ in range(repeats):
        row = _run_in_child(n, k, seed, engine, hurried, time_limit)
        if row is None:
            return {"engine": label, "n": n, "skipped": time_limit}
        runs.append(row)
    return {"engine": label, "n": n, **runs[0],
            "seconds": statistics.median(r["seconds"] for r in runs)}


def raw_row(n: int, seed: int) -> dict[str, Any]:
    """The raw export's row: every share on the full key, nothing released."""
    from simulations.survey_data import make_survey
    from streamanon.metrics import check_table_k_anonymity, sample_unique_share

    frame = make_survey(n, seed)
    share = sample_unique_share(frame, KEY)
    return {"engine": "raw file", "n": n, "key": KEY, "before": share, "after": share,
            "smallest": check_table_k_anonymity(frame, KEY, 1).smallest_group,
            "loss": None, "seconds": None}


def rows(ns: list[int], k: int, seed: int, repeats: int, time_limit: float,
         engines: tuple[str, ...] = ENGINES) -> list[dict[str, Any]]:
    out = []
    for n in ns:
        out.append(raw_row(n, seed))
        out += [measure(n, k, seed, engine, repeats=repeats, time_limit=time_limit)
                for engine in engines]
        out.append(measure(n, k, seed, "mdav", hurried=True, repeats=repeats,
                           time_limit=time_limit))
    return out


def _percent(share: float) -> str:
    return f"{100 * share:.1f}"


def markdown(table: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (see the module docstring for the columns)."""
    lines = ["| " + " | ".join(COLUMNS) + " |",
             "|" + "|".join("---" if c == "engine" else "---:" for c in COLUMNS) + "|"]
    for row in table:
        if "skipped" in row:
            cells = [row["engine"], f"{row['n']:,}", "-", f"skipped (over {row['skipped']:g} s)",
                     "-", "-", "-", "-", f"> {row['skipped']:g}"]
        else:
            loss = row["loss"] or {}
            cells = [row["engine"], f"{row['n']:,}", _percent(row["before"]),
                     _percent(row["after"]), str(row["smallest"]),
                     *("-" if loss.get(kind) is None else f"{loss[kind]:.2f}"
                       for kind in ("numeric", "ordinal", "nominal")),
                     seconds_cell(row["seconds"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def notes(k: int, seed: int, repeats: int, time_limit: float,
          table: list[dict[str, Any]]) -> str:
    skipped = sorted({(r["engine"], r["n"]) for r in table if "skipped" in r})
    lines = [
        f"Synthetic survey (`simulations/survey_data.py`, seed {seed}); k = {k}. Key: "
        f"{', '.join(KEY)} (a missing income is a value of its own). Sample uniques: share of "
        "respondents whose key occurs once in the file; smallest group: fewest respondents "
        "sharing a key.",
        "`mdav`, `ona_star`: the release with the survey's schema (`streamanon anonymize "
        "--schema`). Seconds: wall time of one `microaggregate` call, median of "
        f"{repeats} run(s), each in a fresh process after a warm-up.",
        f"`{HURRIED}`: `--qi {','.join(HURRIED_FORM['qi'])} --confidential "
        f"{','.join(HURRIED_FORM['confidential'])} --drop {','.join(HURRIED_FORM['drop'])}`; "
        "its shares are on the key without income, which that release drops.",
    ]
    lines += [f"`{engine}` at n = {n:,} skipped: its first run took longer than "
              f"{time_limit:g} s." for engine, n in skipped]
    return "\n".join(f"- {line}" for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[3000, 30000], metavar="N",
                        help="survey sizes (default 3000 30000)")
    parser.add_argument("--k", type=int, default=5, help="minimum cell size (default 5)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the survey and of the row shuffle (default 0)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs per release, median reported (default 3)")
    parser.add_argument("--time-limit", type=float, default=120.0, metavar="SECONDS",
                        help="skip a release whose first run takes longer (default 120)")
    args = parser.parse_args(argv)
    if min(args.n) < args.k or args.k < 1:
        parser.error(f"need 1 <= k <= n, got k = {args.k}, n = {min(args.n)}")
    if args.repeats < 1 or args.time_limit <= 0:
        parser.error("--repeats must be at least 1 and --time-limit positive")
    table = rows(args.n, args.k, args.seed, args.repeats, args.time_limit)
    print(markdown(table))
    print()
    print(notes(args.k, args.seed, args.repeats, args.time_limit, table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
