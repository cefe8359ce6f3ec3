"""Scheduling from the command line: ``plan`` and ``calibrate`` (their arguments; the
commands themselves are :mod:`streamanon.cli._planning`, loaded when one of them runs, since
the scheduler and scipy's optimisers take a second to import and no other command needs them)."""

from __future__ import annotations

import argparse

from streamanon.cli._args import duration, param, positive_int


def cmd_plan(args: argparse.Namespace) -> int:
    from streamanon.cli._planning import cmd_plan as run

    return run(args)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from streamanon.cli._planning import cmd_calibrate as run

    return run(args)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``plan`` and ``calibrate``."""
    pl = sub.add_parser(
        "plan",
        help="when to start the base run: nu*, head start, and nu_end for a deadline",
        description=(
            "Compute the schedule of paper 001: the optimal data ratio nu* (earliest release), "
            "the head start before close at which the base snapshot is taken, the predicted "
            "release time after close, and with --deadline the smallest ratio nu_end that still "
            "meets it. Arrivals are taken as uniform. Give the arrival coefficient directly, or "
            "the survey length and the one-shot time t_ref (--t-ref, or --n/--m/--k to take it "
            "from the calibrated cost model of --engine)."
        ),
    )
    pl.add_argument("--arrival-coefficient", type=float, metavar="S",
                    help="time for all data to arrive, relative to t_ref")
    pl.add_argument("--survey-hours", type=float, metavar="H",
                    help="survey length in hours (uniform arrivals): s = H / t_ref")
    pl.add_argument("--t-ref", type=duration, metavar="DURATION",
                    help="one-shot run time on all records, e.g. 2h or 45min")
    pl.add_argument("--deadline", type=duration, metavar="DURATION",
                    help="time allowed from close to release, e.g. 1h")
    pl.add_argument("--n", type=positive_int, help="expected number of records")
    pl.add_argument("--m", type=positive_int, help="number of quasi-identifiers")
    pl.add_argument("--k", type=positive_int, help="anonymity parameter")
    pl.add_argument("--engine", default="mdav",
                    help="base engine of the cost model (mdav); 'auto' plans with ONA* and "
                         "MDAV and reports which the planner chooses, with the expected "
                         "information loss of each (needs --n/--m/--k)")
    pl.add_argument("--param", type=param, action="append", default=[], metavar="NAME=VALUE",
                    help="parameter of --engine, repeatable: the cost model of the engine with "
                         "these parameters (what a survey's engine_params select)")
    pl.add_argument("--cost-models", metavar="FILE",
                    help="cost-model file (default $STREAMANON_DATA_DIR/cost_models.json)")
    pl.add_argument("--json", action="store_true", help="print JSON instead of a table")
    pl.set_defaults(handler=cmd_plan)

    ca = sub.add_parser(
        "calibrate",
        help="fit the cost model t = a n^b of an engine on this machine",
        description=(
            "Time ENGINE on synthetic Gaussian data with m columns at doubling sizes within a "
            "small budget, fit t = a n^b, print the fit and its residual, and save it to the "
            "cost-model file that 'plan' and the service read. Real runs refine it later."
        ),
    )
    ca.add_argument("--engine", default="mdav", help="engine to time (default mdav)")
    ca.add_argument("--m", type=positive_int, required=True, help="number of quasi-identifiers")
    ca.add_argument("--k", type=positive_int, required=True, help="anonymity parameter")
    ca.add_argument("--param", type=param, action="append", default=[], metavar="NAME=VALUE",
                    help="engine parameter, repeatable: calibrates the engine with these "
                         "parameters, kept as its own model (a survey's engine_params)")
    ca.add_argument("--budget", type=duration, default=5.0, metavar="DURATION",
                    help="time to spend timing (default 5s)")
    ca.add_argument("--cost-models", metavar="FILE",
                    help="cost-model file (default $STREAMANON_DATA_DIR/cost_models.json)")
    ca.set_defaults(handler=cmd_calibrate)
