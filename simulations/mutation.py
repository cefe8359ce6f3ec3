"""Mutation testing of the privacy-critical code (docs/benchmarks/mutation.md), always in a copy
of the working tree, never in it.

    python -m simulations.mutation copy --to COPY            # the copy (no .venv, no .git)
    python -m simulations.mutation named --copy COPY         # the reviewer's mutants of dp.py
    python -m simulations.mutation mutmut privacy --copy COPY \\
        --python MUTVENV/bin/python                           # a mutmut run over one target

COPY defaults to ``streamanon-mutants`` in the system's temporary folder; MUTVENV is the side
environment with mutmut (docs/benchmarks/mutation.md).

``named``: each of :data:`NAMED` is a textual change of ``streamanon/dp.py`` (noise C = n // k
times too small, a cell's level drawn with epsilon_a instead of epsilon_a / C, ...); the copy's
file is changed, the tests that must catch it run against the copy, and the file is put back.
A mutant whose text is no longer in the file (the code was rewritten) is reported as such.

``mutmut``: mutmut 3 (not a dependency of the project: install it in a side environment, see
the page) over one of :data:`TARGETS`, each restricted to its module's functions that decide
privacy and to the tests that exercise them, configured by a ``setup.cfg`` written into the
copy only (the project's ``pyproject.toml`` is left alone).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPY = Path(tempfile.gettempdir()) / "streamanon-mutants"


@dataclass(frozen=True)
class Named:
    """A hand-written mutant: the first of ``changes`` (a regular expression and its
    replacement) whose expression occurs in ``path``, applied once; ``tests`` must fail on
    it. Alternatives cover dp.py before and after its samplers moved to
    ``streamanon.dp_noise``."""

    name: str
    path: str
    changes: tuple[tuple[str, str], ...]
    tests: tuple[str, ...] = ("tests/test_dp_guarantees.py",)


DP = "streamanon/dp.py"
NAMED = (
    Named("noise scale divided by C (the noise drawn only)", DP, (
        (r"discrete_laplace\(moved / epsilon,", "discrete_laplace(moved / epsilon / count,"),
        (r"discrete_laplace\(sums, scale\)", "discrete_laplace(sums, scale / count)"))),
    Named("noise scale divided by C (drawn and reported)", DP, (
        (r"moved = units \* \(1 if ranked else count\)", "moved = units"),
        (r"return cells \* units,", "return units,"))),
    Named("noise 1.5 times too small", DP, (
        (r"discrete_laplace\(moved / epsilon,", "discrete_laplace(moved / epsilon / 1.5,"),
        (r"discrete_laplace\(sums, scale\)", "discrete_laplace(sums, scale / 1.5)"))),
    Named("epsilon_a per cell instead of epsilon_a / C", DP, (
        (r"per_cell = epsilon / count", "per_cell = epsilon"),
        (r"per_cell = \(budget\.epsilon / count", "per_cell = (budget.epsilon"))),
    Named("epsilon_a per cell drawn, epsilon_a / C reported", DP, (
        (r"noisy = exponential\(utility, per_cell,", "noisy = exponential(utility, epsilon,"),
        (r"exponential_mechanism\(scores, per_cell,",
         "exponential_mechanism(scores, per_cell * count,"))),
    Named("half the per-cell budget spent", DP, (
        (r"noisy = exponential\(utility, per_cell,",
         "noisy = exponential(utility, per_cell / 2,"),
        (r"exponential_mechanism\(scores, per_cell,",
         "exponential_mechanism(scores, per_cell / 2,"))),
    Named("budget not split among the attributes", DP, (
        (r"share = epsilon / len\(attributes\)", "share = epsilon"),
        (r"share = budget\.share\(len\(attributes\)\)", "share = budget"))),
    Named("cells ordered by the data's own range, not the declared domain", DP, (
        (r"(\n    )keys = \[scaled\[:, j\]",
         r"\1scaled = (scaled - scaled.min(axis=0)) / np.maximum(np.ptp(scaled, axis=0), 1e-12)"
         r"\1keys = [scaled[:, j]"),)),
)


@dataclass(frozen=True)
class Target:
    """A mutmut run: the file mutated, the mutants run (mutmut's names, ``*`` a wildcard: the
    functions that decide privacy) and the tests that exercise them."""

    path: str
    mutants: tuple[str, ...]
    tests: tuple[str, ...]


TARGETS = {
    "privacy": Target(
        "streamanon/privacy.py", ("streamanon.privacy.*",),
        # not tests/engines/test_tcloseness.py: its tclose_merge engine's worker dies of
        # SIGTERM in mutmut's forked children on any mutant (numba after fork), so every
        # mutant it reaches is "suspicious"; the engines call these same functions
        ("tests/test_privacy_gate_mutants.py", "tests/cli/test_verify.py")),
    "gate": Target(
        "streamanon/release.py",
        ("streamanon.release.xǁPrivacyǁ*", "streamanon.release.x_key_groups*",
         "streamanon.release.x_release_prepared*"),
        # not tests/test_mixed.py (105 s a run), nor tests/test_release.py and
        # tests/test_api_safety.py, whose engines die as test_tcloseness.py's do
        ("tests/test_privacy_gate_mutants.py", "tests/cli/test_verify.py")),
    "metrics": Target(
        "streamanon/metrics.py",
        ("streamanon.metrics.x_require_k_anonymous*", "streamanon.metrics.x__qi_group_keys*",
         "streamanon.metrics.x_check_table_k_anonymity*", "streamanon.metrics.x__pass_gate*",
         "streamanon.metrics.x__report_from_sizes*", "streamanon.metrics.x_check_k_anonymity*"),
        ("tests/test_privacy_gate_mutants.py", "tests/test_metrics.py")),
    "verify": Target(
        "streamanon/cli/verify.py", ("streamanon.cli.verify.*",),
        ("tests/cli/test_verify.py", "tests/test_privacy_gate_mutants.py")),
    "dp": Target(
        "streamanon/dp.py", ("streamanon.dp.*",),
        ("tests/test_dp.py", "tests/test_dp_guarantees.py")),
}


def make_copy(to: Path) -> None:
    """The working tree at ``to`` (replacing it), without its virtual environment, its git
    directory, caches and a previous run's mutants."""
    if to.exists():
        shutil.rmtree(to)
    ignore = shutil.ignore_patterns(".venv", ".git", "__pycache__", "mutants", ".pytest_cache",
                                    "site", "*.egg-info")
    shutil.copytree(REPO, to, ignore=ignore, symlinks=True)


def pytest_failures(copy: Path, tests: tuple[str, ...], python: str) -> tuple[list[str], float]:
    """The tests among ``tests`` that fail against the copy's package (``import streamanon``
    resolving to the copy, checked first), and the seconds they took."""
    env = {**os.environ, "PYTHONPATH": str(copy)}
    where = subprocess.run([python, "-c", "import streamanon; print(streamanon.__file__)"],
                           cwd=copy, env=env, capture_output=True, text=True, check=True)
    if not where.stdout.strip().startswith(str(copy)):
        raise SystemExit(f"streamanon resolves to {where.stdout.strip()}, not the copy")
    start = time.perf_counter()
    run = subprocess.run([python, "-m", "pytest", "-n", "0", "-q", "-rfE", "-p",
                          "no:cacheprovider", "--no-header", *tests],
                         cwd=copy, env=env, capture_output=True, text=True)
    failed = [line.split()[1].split("::")[-1] for line in run.stdout.splitlines()
              if line.startswith(("FAILED ", "ERROR "))]
    if run.returncode and not failed:
        raise SystemExit(f"pytest did not run:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return failed, time.perf_counter() - start


def run_named(copy: Path, python: str) -> list[tuple[str, str]]:
    """Each named mutant's outcome: killed, survived, or not applicable (its text is gone);
    the unmutated copy must pass first."""
    tests = tuple(sorted({t for m in NAMED for t in m.tests}))
    failed, seconds = pytest_failures(copy, tests, python)
    out = [("original", f"{'FAILS: ' + ', '.join(failed) if failed else 'passes'} "
                        f"({seconds:.1f} s)")]
    for mutant in NAMED:
        target = copy / mutant.path
        original = target.read_text()
        mutated = next((re.sub(pattern, replacement, original, count=1)
                        for pattern, replacement in mutant.changes
                        if re.search(pattern, original)), None)
        if mutated is None:
            out.append((mutant.name, "not applicable: its text is no longer in the file"))
            continue
        try:
            target.write_text(mutated)
            failed, seconds = pytest_failures(copy, mutant.tests, python)
        finally:
            target.write_text(original)
        verdict = (f"killed by {len(failed)} test(s): {', '.join(sorted(set(failed)))}"
                   if failed else "SURVIVED")
        out.append((mutant.name, f"{verdict} ({seconds:.1f} s)"))
    return out


def setup_cfg(target: Target) -> str:
    """mutmut's configuration for ``target``, as the copy's ``setup.cfg``."""
    lines = "\n    ".join(target.tests)
    return ("[mutmut]\n"
            "source_paths = streamanon\n"
            f"only_mutate = {target.path}\n"
            f"pytest_add_cli_args_test_selection =\n    {lines}\n"
            "pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -n\n    0\n"
            "    --timeout=300\n"
            "also_copy =\n    simulations\n    scheduler\n    docs\n    README.md\n")


def run_mutmut(copy: Path, name: str, python: str, jobs: int,
               only: list[str] | None = None) -> int:
    """mutmut 3 over ``TARGETS[name]`` in the copy (``only``: these mutants, by mutmut's
    names, e.g. a previous run's survivors); its results are printed by mutmut."""
    target = TARGETS[name]
    (copy / "setup.cfg").write_text(setup_cfg(target))
    shutil.rmtree(copy / "mutants", ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": ""}
    mutmut = [python, "-m", "mutmut"]
    run = subprocess.run([*mutmut, "run", "--max-children", str(jobs),
                          *(only or target.mutants)],
                         cwd=copy, env=env)
    subprocess.run([*mutmut, "results"], cwd=copy, env=env)
    return run.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulations.mutation", description=__doc__.split("\n\n")[0],
        epilog="each command's options: copy --to DIR; named --copy DIR --python PYTHON; "
               "mutmut TARGET --copy DIR --python PYTHON --jobs N --only FILE (TARGET one of "
               f"{', '.join(sorted(TARGETS))})")
    sub = parser.add_subparsers(dest="command", required=True)
    copy = sub.add_parser("copy", help="copy the working tree")
    copy.add_argument("--to", type=Path, default=COPY)
    named = sub.add_parser("named", help="the named mutants of dp.py against their tests")
    named.add_argument("--copy", type=Path, default=COPY)
    named.add_argument("--python", default=sys.executable)
    mut = sub.add_parser("mutmut", help="mutmut over one target")
    mut.add_argument("target", choices=sorted(TARGETS))
    mut.add_argument("--copy", type=Path, default=COPY)
    mut.add_argument("--python", default=sys.executable,
                     help="a Python with mutmut 3 and the project's dependencies")
    mut.add_argument("--jobs", type=int, default=2)
    mut.add_argument("--only", type=Path, default=None,
                     help="a file of mutmut's mutant names, one a line: run these only")
    args = parser.parse_args(argv)
    if args.command == "copy":
        make_copy(args.to)
        return 0
    if args.command == "named":
        for name, outcome in run_named(args.copy, args.python):
            print(f"{name}: {outcome}")
        return 0
    only = args.only.read_text().split() if args.only else None
    return run_mutmut(args.copy, args.target, args.python, args.jobs, only)


if __name__ == "__main__":
    sys.exit(main())
