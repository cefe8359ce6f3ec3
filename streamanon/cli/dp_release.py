"""``anonymize --epsilon``: the differentially private release of a file (streamanon.dp), its
options and their checks, the report and the summary line."""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from streamanon.errors import ParameterError

#: Options of ``anonymize`` that a differentially private release does not take, and why.
NOT_WITH_EPSILON = {
    "l": "--l", "t": "--t", "engine": "--engine", "incremental": "--incremental",
    "cluster": "--cluster", "part_size": "--part-size", "seed": "--seed", "param": "--param",
    "strata": "--strata", "sensitive": "--sensitive", "nu": "--nu",
    "compare_one_shot": "--compare-one-shot", "incremental_param": "--incremental-param",
}


class _Rho(argparse.Action):
    """``--rho R``: stores rho, and in ``epsilon`` the epsilon it implies (at
    ``dp.REPORTED_DELTA``; :func:`check` reads it again at ``--delta``), so that every
    ``--epsilon`` path takes it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        from streamanon import dp, dp_zcdp

        if not (values > 0 and math.isfinite(values)):
            parser.error(f"argument --rho: must be a finite positive number, not {values:g}")
        namespace.rho = values
        namespace.epsilon = dp_zcdp.epsilon_of(values, dp.REPORTED_DELTA)


def add_arguments(an: argparse.ArgumentParser) -> None:
    """``--epsilon``, ``--delta``, ``--rho``, ``--dp-mechanism``, ``--dp-scope``."""
    budget = an.add_mutually_exclusive_group()
    budget.add_argument("--epsilon", type=float, default=None, metavar="E",
                        help="release with epsilon-differential privacy instead (needs "
                             "--schema: every released number's min and max and every "
                             "category's levels are declared there, never taken from the "
                             "data): cells of k in an order of the declared domain, exact "
                             "discrete Laplace noise on each cell's sums and the exponential "
                             "mechanism on its levels (OpenDP's samplers, from a "
                             "cryptographically secure generator); E is shared equally among "
                             "the released columns. With --delta: zCDP calibrated to (E, "
                             "delta) instead. See docs/guide/differential-privacy.md")
    budget.add_argument("--rho", type=float, default=None, metavar="R", action=_Rho,
                        help="release with rho-zero-concentrated differential privacy (zCDP, "
                             "Bun and Steinke 2016) instead of --epsilon: discrete Gaussian "
                             "noise on the cells' sums, the exponential mechanism on their "
                             "levels; R is shared equally among the released columns, and the "
                             "report gives the (epsilon, delta) it implies at --delta (default "
                             "1e-6)")
    an.add_argument("--delta", type=float, default=None, metavar="D",
                    help="with --epsilon: draw a zCDP release with the largest rho that is "
                         "(E, D)-differentially private (far less noise than pure epsilon "
                         "wherever the cells are many; D in (0, 1), far below 1 / n, e.g. "
                         "1e-6); with --rho: the delta its epsilon is reported at")
    an.add_argument("--dp-mechanism", choices=("insensitive", "individual_ranking"),
                    default="insensitive",
                    help="insensitive (default): one order of the whole domain, a table that is "
                         "epsilon-differentially private and k-anonymous; individual_ranking: "
                         "each column sorted and cut into cells of k on its own (Sanchez et "
                         "al. 2016, privlib), far less noise, but only each column's values "
                         "are private, not how they pair in rows")
    an.add_argument("--dp-scope", choices=("all", "quasi-identifiers"), default="all",
                    help="all (default): every released column goes through the mechanism; "
                         "quasi-identifiers: only they do and the confidential answers are "
                         "published as they are (privlib's setting; never called "
                         "differentially private)")
    an.add_argument("--budget-ledger", metavar="FILE", default=None,
                    help="charge the release's epsilon to the privacy budget kept in FILE (JSON, "
                         "created private, mode 0600): each release is recorded (time, "
                         "epsilon, mechanism, the input's SHA-256, the output), and one that "
                         "would take the total over the budget is refused before anything is "
                         "written; safe with several runs at once. Only a differentially "
                         "private release (insensitive, all columns) is charged. Use one "
                         "ledger per group of respondents")
    an.add_argument("--epsilon-budget", type=float, default=None, metavar="B",
                    help="with --budget-ledger: what all the ledger's releases may spend "
                         "(default: what the ledger records, or for a new ledger this "
                         "release's epsilon); a new value replaces the recorded one")


#: Options that only a differentially private release (``--epsilon`` or ``--rho``) takes.
ONLY_WITH_EPSILON = {"delta": "--delta", "budget_ledger": "--budget-ledger",
                     "epsilon_budget": "--epsilon-budget"}


def check_unused(args: argparse.Namespace) -> None:
    """Refuse, in a release that is not differentially private, the options that only such a
    release takes: silently ignored, they would leave the user believing a budget was kept."""
    given = [flag for name, flag in ONLY_WITH_EPSILON.items()
             if getattr(args, name, None) is not None]
    given += [flag for flag, value, default in (
        ("--dp-mechanism", args.dp_mechanism, "insensitive"),
        ("--dp-scope", args.dp_scope, "all")) if value != default]
    if given:
        raise ParameterError(f"{', '.join(given)} without --epsilon or --rho: "
                             f"{'it applies' if len(given) == 1 else 'they apply'} to a "
                             "differentially private release only")


def check(args: argparse.Namespace) -> None:
    """Refuse what an ``--epsilon`` (or ``--rho``) release cannot honour, before reading
    anything; with ``--rho``, ``args.epsilon`` becomes the epsilon it implies at ``--delta``."""
    from streamanon import dp

    rho, delta = getattr(args, "rho", None), args.delta
    if delta is not None:
        from streamanon import dp_zcdp

        dp_zcdp.check_delta(delta)
    if rho is not None:
        args.epsilon = dp.budget_of(rho=rho, delta=delta).epsilon
    if (rho is not None or delta is not None) and args.budget_ledger is not None:
        raise ParameterError("--budget-ledger with a zCDP release (--rho or --delta): the "
                             "ledger adds up epsilons and keeps no delta, so it would record "
                             "a bound that does not hold; leave --budget-ledger out, or "
                             "release with --epsilon alone")
    if args.schema is None:
        raise ParameterError("--epsilon needs --schema: a differentially private release "
                             "takes every column's bounds and levels from the schema, never "
                             "from the data")
    given = [flag for name, flag in NOT_WITH_EPSILON.items() if getattr(args, name, None)]
    if given:
        raise ParameterError(f"{', '.join(given)} and --epsilon: a differentially private "
                             "release has its own cells and noise (its noise is never seeded: "
                             "a known seed would let anyone subtract it)")
    if args.out_of_bounds == "drop":
        raise ParameterError("--out-of-bounds drop and --epsilon: dropping records would "
                             "change n, which the release makes public; use clip or refuse")
    _check_ledger(args)


def _check_ledger(args: argparse.Namespace) -> None:
    """``--budget-ledger`` and ``--epsilon-budget``: refused where a charge would state a bound
    that does not hold, and a release the ledger cannot pay for refused now, before the input
    is read (:func:`charge_ledger` checks again under the ledger's lock)."""
    from streamanon.ledger import BudgetLedger, charged

    budget = args.epsilon_budget
    if args.budget_ledger is None:
        if budget is not None:
            raise ParameterError("--epsilon-budget needs --budget-ledger FILE: the file keeps "
                                 "what the releases have spent")
        return
    if not charged(args.dp_mechanism, args.dp_scope.replace("-", "_")):
        raise ParameterError(f"--budget-ledger with --dp-mechanism {args.dp_mechanism} and "
                             f"--dp-scope {args.dp_scope}: that release is not differentially "
                             "private, so no epsilon bounds it and the ledger would record a "
                             "false bound; leave --budget-ledger out, or use the insensitive "
                             "mechanism over all columns")
    if budget is not None and not (budget > 0 and budget != float("inf")):
        raise ParameterError(f"--epsilon-budget {budget:g}: give a positive, finite number")
    if budget is not None and budget < args.epsilon:
        raise ParameterError(f"--epsilon-budget {budget:g} is less than one release's epsilon "
                             f"{args.epsilon:g}")
    BudgetLedger(args.budget_ledger, budget).check(args.epsilon)


def charge_ledger(args: argparse.Namespace, report: dict[str, Any]) -> str:
    """Charge the drawn release to ``--budget-ledger`` (refused with
    :class:`~streamanon.errors.BudgetSpentError`, recording nothing, when the budget cannot
    pay for it), before its table is written: a release charged and then lost counts as spent.
    Puts the charge in ``report`` and returns the line to print."""
    from streamanon.ledger import BudgetLedger, sha256_of

    ledger = BudgetLedger(args.budget_ledger, args.epsilon_budget)
    spending = ledger.charge(args.epsilon, {
        "mechanism": args.dp_mechanism, "scope": args.dp_scope.replace("-", "_"), "k": args.k,
        "input": str(args.input), "input_sha256": sha256_of(args.input),
        "output": str(args.out)})
    report["budget"] = {**spending.to_json(), "ledger": str(args.budget_ledger)}
    return (f"\nprivacy budget: {spending.spent:g} of {spending.budget:g} spent "
            f"({spending.remaining:g} left), ledger {args.budget_ledger}")


def run(args: argparse.Namespace, frame: Any, schema: Any, progress: Any,
        outside: dict[str, Any] | None) -> tuple[Any, dict[str, Any], str]:
    """The release of ``frame``: its table, its report and the summary line to print."""
    from streamanon import dp

    scope = args.dp_scope.replace("-", "_")
    rho = getattr(args, "rho", None)
    budget = dp.budget_of(None if rho is not None else args.epsilon, args.delta, rho)
    said = (f"epsilon = {budget.epsilon:g}" if budget.rho is None else
            f"rho = {budget.rho:.4g}, epsilon = {budget.epsilon:.4g} at delta = "
            f"{budget.delta:g}")
    progress.enter(f"draw the release ({said}, {args.dp_mechanism})")
    started = time.perf_counter()
    made = dp.release(frame, schema, args.k, budget.epsilon if rho is None else None,
                      mechanism=args.dp_mechanism, scope=scope, delta=args.delta, rho=rho)
    seconds = time.perf_counter() - started
    guarantee = made.report
    report = {"n": len(frame), "k": args.k, "epsilon": budget.epsilon,
              "differential_privacy": guarantee,
              "budget": {"spent": budget.epsilon, **({} if budget.rho is None else {
                  "rho": budget.rho, "delta": budget.delta})},
              "columns": {name: {"role": spec.role, "type": spec.type}
                          for name, spec in schema.fields.items()},
              "input": str(args.input), "output": str(args.out), "seconds": seconds}
    if outside is not None:
        report["outside_schema"] = outside
    loss = guarantee["information_loss"]
    parts = [f"IL = {loss['il']:.2f}%"] if "il" in loss else []
    if "categories_changed" in loss:
        parts.append(f"{loss['categories_changed']:.1f}% of category values changed")
    line = (f"{len(frame)} records, {guarantee['cells']} cells of {args.k}+, {said} "
            f"({args.dp_mechanism}, {args.dp_scope}), "
            f"{', '.join(parts) or 'no loss measured'}, {seconds:.2f} s\n"
            f"guarantee: {guarantee['guarantee']}\n"
            f"{args.k}-anonymous: {'yes' if guarantee['k_anonymous'] else 'no'} (smallest group "
            f"of equal keys: {guarantee['smallest_group']:,})")
    if args.budget_ledger is not None:  # charged before anything is written
        line += charge_ledger(args, report)
    return made.table, report, line
