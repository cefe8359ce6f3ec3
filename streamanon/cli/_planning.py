"""``plan`` and ``calibrate`` (:mod:`streamanon.cli.plan` holds their arguments)."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from typing import Any

from scheduler import live
from scheduler.arrivals import UniformForecast
from scheduler.choice import Choice, Option, PlanRequest, plan_survey
from scheduler.closed_forms import (
    ARRIVAL_THRESHOLD,
    critical_ratio,
    deadline_feasible,
    deadline_ratio,
    min_relative_deadline,
    optimal_gain,
    optimal_ratio,
)
from scheduler.cost_model import CostModelStore, PowerLaw, TwoStageCost, calibrate
from scheduler.planner import Plan, release_after_close
from scheduler.quality import DEFAULT_MAX_DELTA
from streamanon.durations import format_duration
from streamanon.errors import ParameterError


def _engine_function(name: str, params: dict[str, Any]) -> Any:
    """``engine(X, k)`` with ``params`` for the calibration; an engine's per-record inputs are
    made up to match the synthetic records: a binary class label (``labels``), two confidential
    attributes (``Y``), a sensitive answer on ten levels at t = 0.2 (``S``, the t-closeness
    engines)."""
    import functools

    import numpy as np

    from streamanon.engines import check_parameters

    info = check_parameters(name, params)
    given = sorted(set(params) & (set(info.per_record) | {"progress"}))
    if given:
        raise ParameterError(f"{name}: {', '.join(given)} cannot be calibrated with (per-record "
                             "inputs are made up for the calibration)")
    if not info.per_record:
        return functools.partial(info.function, **params)

    def run(X: Any, k: int) -> Any:
        rng = np.random.default_rng(len(X))
        made: dict[str, Any] = {}
        for parameter in sorted(info.per_record):
            if parameter == "labels":
                made["labels"] = rng.integers(0, 2, len(X))
            elif parameter == "Y":
                made["Y"] = rng.standard_normal((len(X), 2))
            elif parameter == "S":
                made |= {"S": rng.integers(0, 10, len(X)), "t": 0.2}
        return info.function(X, k, **{**made, **params})  # a given t replaces the made-up one

    return run


def _named(engine: str, params: dict[str, Any]) -> str:
    """``engine`` with its parameters, as the output names it."""
    return engine + (" (" + ", ".join(f"{k}={v}" for k, v in sorted(params.items())) + ")"
                     if params else "")


def _calibrate(store: CostModelStore, engine: str, m: int, k: int, budget: float,
               params: dict[str, Any]) -> tuple[PowerLaw, list[tuple[int, float]]]:
    """Calibrate ``engine`` with ``params`` and save it; the model and the timed samples."""
    from streamanon.engines import model_parameters
    from streamanon.service.machine import load_meter

    result = calibrate(_engine_function(engine, params), m, k, budget_seconds=budget,
                       meter=load_meter)
    return store.put(engine, m, k, result, model_parameters(engine, params)), result.samples


def cmd_calibrate(args: argparse.Namespace) -> int:
    from streamanon.cli._progress import shown
    from streamanon.progress import Progress

    store = CostModelStore(args.cost_models)
    params = dict(args.param)
    progress = Progress()
    progress.enter(f"timing {_named(args.engine, params)} on growing sizes, at most "
                   f"{args.budget:g} s")
    with shown(progress, "calibrate"):
        model, samples = _calibrate(store, args.engine, args.m, args.k, args.budget, params)
    print(f"{_named(args.engine, params)}, m = {args.m}, k = {args.k}: "
          f"t = {model.a:.4g} * n^{model.b:.3f} s")
    print(f"residual (RMS of log error): {model.residual:.3f}")
    print(f"{'n':>10} {'measured s':>12} {'fitted s':>12}")
    for n, seconds in samples:
        print(f"{n:>10,} {seconds:>12.4f} {model(n):>12.4f}")
    print("predicted: " + ", ".join(f"n = {n:,}: {format_duration(model(n))}"
                                    for n in (100_000, 1_000_000)))
    print(f"saved to {store.path}")
    return 0


def _arrival_coefficient(args: argparse.Namespace, t_ref: float | None) -> float:
    if (args.arrival_coefficient is None) == (args.survey_hours is None):
        raise ParameterError("give exactly one of --arrival-coefficient and --survey-hours")
    if args.arrival_coefficient is not None:
        if args.arrival_coefficient < 0:
            raise ParameterError("--arrival-coefficient must be >= 0")
        return args.arrival_coefficient
    if t_ref is None:
        raise ParameterError("--survey-hours needs --t-ref, or --n/--m/--k for the cost model")
    if args.survey_hours <= 0:
        raise ParameterError("--survey-hours must be > 0")
    return args.survey_hours * 3600.0 / t_ref


def _closed_form(s: float, t_ref: float | None, deadline: float | None) -> dict[str, Any]:
    nu = optimal_ratio(s)
    out: dict[str, Any] = {
        "model": "closed form: quadratic base and incremental cost, uniform arrivals",
        "arrival_coefficient": s,
        "critical_ratio": critical_ratio(s),
        "optimal_ratio": nu,
        "optimal_gain": optimal_gain(s),
        "regime": "nu* = nu_-" if s > ARRIVAL_THRESHOLD else "nu* = (2 + s)/4 < nu_-",
        "head_start_relative": s * nu,
        "base_relative": (1 - nu) ** 2,
        "incremental_relative": nu**2,
        "finish_after_close_relative": 1 - optimal_gain(s),
    }
    if deadline is not None and t_ref is not None:
        tau_end = deadline / t_ref
        out["relative_deadline"] = tau_end
        out["min_relative_deadline"] = min_relative_deadline(s)
        nu_end = deadline_ratio(s, tau_end, warn=False)
        out["deadline_ratio"] = nu_end
        out["deadline_feasible"] = deadline_feasible(s, tau_end)
        out["deadline_head_start_relative"] = s * nu_end
        out["deadline_finish_after_close_relative"] = float(
            release_after_close(s * nu_end, (1 - nu_end) ** 2, nu_end**2))
    return out


def _plan_dict(plan: Plan) -> dict[str, Any]:
    return {
        "mode": plan.mode,
        "nu": plan.nu,
        "n_total": plan.n_total,
        "n_base": plan.n_base,
        "n_increment": plan.n_increment,
        "t_ref_seconds": plan.t_ref,
        "head_start_seconds": plan.head_start,
        "base_seconds": plan.base_seconds,
        "incremental_seconds": plan.incremental_seconds,
        "finish_after_close_seconds": plan.finish_after_close,
        "relative_gain": plan.relative_gain,
        "critical_ratio": plan.critical_ratio,
        "deadline_seconds": plan.deadline,
        "meets_deadline": plan.meets_deadline,
        "warnings": list(plan.warnings),
    }


def _stored_model(store: CostModelStore, engine: str, args: argparse.Namespace,
                  params: dict[str, Any]) -> PowerLaw:
    from streamanon.engines import model_parameters

    model = store.get(engine, args.m, args.k, model_parameters(engine, params))
    if model is None:
        if not args.json:
            print(f"no cost model for {_named(engine, params)} at m = {args.m}, k = {args.k}: "
                  "calibrating (a few seconds) ...")
        model, _ = _calibrate(store, engine, args.m, args.k, 5.0, params)
    return model


def _request(args: argparse.Namespace, engine: str) -> PlanRequest:
    """What ``plan`` asks of the planner: ``engine`` (the cost model's) with a 2-stage
    incremental run, the earliest release (nu*) and the compute alone, as the closed forms;
    the default plan, the deadline's and ``--engine auto``'s choice are this request with
    their bound, deadline or engine."""
    from streamanon.service.engine_traits import stage_traits

    return PlanRequest(k=args.k, engine=engine, stage="two_stage",
                       stage_traits=stage_traits("two_stage"), max_delta=None, overhead=False)


def _chosen(planned: tuple[Plan, Choice | None]) -> Choice:
    choice = planned[1]
    assert choice is not None, "an engine = auto request is planned with a choice"
    return choice


def _choice_dict(choice: Choice) -> dict[str, Any]:
    return {"chosen": choice.engine, "reason": choice.reason,
            "candidates": [{"engine": p.engine, "fits": ok, **_plan_dict(p),
                            "expected_delta": p.expected_delta}
                           for p, ok in zip(choice.candidates, choice.fits, strict=True)]}


def cmd_plan(args: argparse.Namespace) -> int:
    model: PowerLaw | None = None
    if args.n is not None or args.m is not None or args.k is not None:
        if None in (args.n, args.m, args.k):
            raise ParameterError("--n, --m and --k go together (t_ref from the cost model)")
        if args.t_ref is not None:
            raise ParameterError("give either --t-ref or --n/--m/--k, not both")
        if args.engine == "auto" and args.param:
            raise ParameterError("--engine auto takes no --param (it plans with each "
                                 "candidate's defaults)")
        from streamanon.service.engine_traits import auto_engine_names

        store = CostModelStore(args.cost_models)
        models = {engine: _stored_model(store, engine, args, dict(args.param))
                  for engine in (auto_engine_names() if args.engine == "auto"
                                 else (args.engine,))}
        model = models["mdav" if args.engine == "auto" else args.engine]
        t_ref: float | None = model(args.n)
    elif args.engine == "auto":
        raise ParameterError("--engine auto needs --n, --m and --k (the engines' cost models)")
    elif args.param:
        raise ParameterError("--param selects a cost model: it needs --n, --m and --k")
    else:
        t_ref = args.t_ref
    if t_ref is not None and not t_ref > 0:
        raise ParameterError("t_ref must be positive")
    if args.deadline is not None and t_ref is None:
        raise ParameterError("--deadline needs --t-ref, or --n/--m/--k for the cost model")
    s = _arrival_coefficient(args, t_ref)

    report: dict[str, Any] = {"t_ref_seconds": t_ref, "closed_form": _closed_form(s, t_ref,
                                                                                   args.deadline)}
    if model is not None:
        from streamanon.service.engine_traits import auto_engine_names, engine_traits

        forecast = UniformForecast.from_arrival_coefficient(args.n, s, t_ref)
        engine = "mdav" if args.engine == "auto" else args.engine
        # a 2-stage incremental run; 2MDAV after either base: the increment's engine is MDAV
        increment = models["mdav"] if args.engine == "auto" else model
        options = [Option(engine_traits(e), found, TwoStageCost(increment))
                   for e, found in models.items()]
        request = _request(args, engine)
        report["cost_model"] = {"engine": engine, "params": dict(args.param),
                                "a": model.a, "b": model.b, "residual": model.residual}
        # the compute against the deadline, as the closed forms above: no release overhead
        report["optimal"] = _plan_dict(plan_survey(request, forecast, options)[0])
        if args.deadline is not None:
            report["deadline"] = _plan_dict(plan_survey(
                replace(request, deadline=args.deadline), forecast, options)[0])
        # said before the survey opens: a window shorter than the engine's one-shot run, or
        # a release more than a minute after close, with a faster engine stored here
        window = s * t_ref if t_ref is not None and math.isfinite(s) else None
        default, _ = plan_survey(replace(request, max_delta=DEFAULT_MAX_DELTA, overhead=True),
                                 forecast, options, seconds_to_close=window,
                                 overhead_model=store.release_overhead())
        others = {name: found for name in auto_engine_names() if name != engine
                  and (found := store.get(name, args.m, args.k)) is not None}
        warning = live.window_warning(engine, model, default, window, others)
        report["warnings"] = [] if warning is None else [warning]
        if args.engine == "auto":
            chooses = replace(request, engine="auto", max_delta=DEFAULT_MAX_DELTA)
            report["engine_choice"] = {
                key: _choice_dict(_chosen(plan_survey(replace(chooses, deadline=deadline),
                                                      forecast, options)))
                for key, deadline in (("optimal", None), ("deadline", args.deadline))
                if key == "optimal" or deadline is not None}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_report(report, args)
    return 0


def _when(relative: float, t_ref: float | None) -> str:
    if t_ref is None:
        return f"{relative:.4f} t_ref"
    return f"{format_duration(relative * t_ref)} ({relative:.4f} t_ref)"


def _print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    cf = report["closed_form"]
    t_ref = report["t_ref_seconds"]
    rows = [
        ("arrival coefficient s", f"{cf['arrival_coefficient']:.4g}"),
        ("one-shot time t_ref", format_duration(t_ref) if t_ref else "(relative units)"),
        ("critical ratio nu_-", f"{cf['critical_ratio']:.4f}"),
        ("optimal ratio nu*", f"{cf['optimal_ratio']:.4f}  ({cf['regime']}; s_- = "
                              f"{ARRIVAL_THRESHOLD:.4f})"),
        ("optimal gain dtau*", f"{cf['optimal_gain']:.4f}"),
        ("head start", _when(cf["head_start_relative"], t_ref) + " before close"),
        ("base run", _when(cf["base_relative"], t_ref)
         + f" on {100 * (1 - cf['optimal_ratio']):.2f} % of the records"),
        ("incremental run", _when(cf["incremental_relative"], t_ref)
         + f" on {100 * cf['optimal_ratio']:.2f} %"),
        ("release after close", _when(cf["finish_after_close_relative"], t_ref)
         + ("" if t_ref is None else f", instead of {format_duration(t_ref)}")),
    ]
    print("Optimal schedule (paper 001 closed forms: quadratic costs, uniform arrivals)")
    _rows(rows)
    if "relative_deadline" in cf:
        print(f"\nDeadline {format_duration(args.deadline)} after close "
              f"(tau_end = {cf['relative_deadline']:.4f}; the earliest possible release is "
              f"{cf['min_relative_deadline']:.4f} t_ref after close)")
        if cf["relative_deadline"] >= 1:
            _rows([("deadline ratio nu_end", "0: the one-shot run at close meets the deadline")])
        elif not cf["deadline_feasible"]:
            _rows([("deadline ratio nu_end", "the deadline cannot be met; using nu* = "
                    f"{cf['deadline_ratio']:.4f}")])
        else:
            _rows([
                ("deadline ratio nu_end", f"{cf['deadline_ratio']:.4f}"),
                ("head start", _when(cf["deadline_head_start_relative"], t_ref)
                 + " before close"),
                ("base run", _when((1 - cf["deadline_ratio"]) ** 2, t_ref)),
                ("incremental run", _when(cf["deadline_ratio"] ** 2, t_ref)),
                ("release after close", _when(cf["deadline_finish_after_close_relative"],
                                              t_ref)),
            ])
    if "cost_model" in report:
        cm = report["cost_model"]
        print(f"\nWith the calibrated cost model of {_named(cm['engine'], cm['params'])} "
              f"(t = {cm['a']:.4g} n^"
              f"{cm['b']:.3f}, residual {cm['residual']:.3f}) and a 2-stage incremental run:")
        for key, title in (("optimal", "optimal"), ("deadline", "deadline")):
            if key not in report:
                continue
            p = report[key]
            _rows([
                (f"{title}: nu", f"{p['nu']:.4f} ({p['mode']})"),
                ("  head start", format_duration(p["head_start_seconds"]) + " before close"),
                ("  base / incremental run",
                 f"{format_duration(p['base_seconds'])} / "
                 f"{format_duration(p['incremental_seconds'])}"),
                ("  release after close", format_duration(p["finish_after_close_seconds"])),
            ] + [("  note", w) for w in p["warnings"]])
    for warning in report.get("warnings", []):
        print(f"\nwarning: {warning}")
    for key, choice in report.get("engine_choice", {}).items():
        print(f"\nBase engine for the {key} schedule (--engine auto; expected IL against "
              "one-shot MDAV, 2-stage incremental run):")
        _rows([(f"{c['engine']}{' (chosen)' if c['engine'] == choice['chosen'] else ''}",
                f"nu {c['nu']:.4f}, release {format_duration(c['finish_after_close_seconds'])} "
                f"after close, expected IL {100 * c['expected_delta']:+.1f} %"
                + ("" if c["fits"] else ", does not fit"))
               for c in choice["candidates"]])


def _rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")

