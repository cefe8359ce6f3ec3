"""``streamanon plan`` and ``streamanon calibrate``."""

from __future__ import annotations

import json

import pytest

from streamanon.cli import main


def plan_json(capsys, *args: str) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_with_arrival_coefficient_prints_the_paper_numbers(capsys):
    assert main(["plan", "--arrival-coefficient", "5"]) == 0
    out = capsys.readouterr().out
    assert "optimal ratio nu*      0.1459" in out
    assert "0.7295 t_ref before close" in out


def test_plan_worked_example_with_deadline(capsys):
    assert main(["plan", "--survey-hours", "10", "--t-ref", "2h", "--deadline", "1h"]) == 0
    out = capsys.readouterr().out
    assert "1 h 27.5 min (0.7295 t_ref) before close" in out
    assert "153 s" in out
    assert "deadline ratio nu_end  0.0729" in out


def test_plan_json_matches_the_closed_forms(capsys):
    report = plan_json(capsys, "--survey-hours", "10", "--t-ref", "2h", "--deadline", "1h")
    cf = report["closed_form"]
    assert cf["arrival_coefficient"] == pytest.approx(5)
    assert cf["optimal_ratio"] == pytest.approx(0.145898, abs=1e-6)
    assert cf["deadline_ratio"] == pytest.approx(0.072949, abs=1e-6)
    assert cf["deadline_feasible"] is True


def test_plan_reports_an_infeasible_deadline(capsys):
    assert main(["plan", "--survey-hours", "10", "--t-ref", "2h", "--deadline", "10s"]) == 0
    assert "the deadline cannot be met; using nu* = 0.1459" in capsys.readouterr().out


def test_plan_without_deadline_pressure(capsys):
    assert main(["plan", "--survey-hours", "10", "--t-ref", "2h", "--deadline", "3h"]) == 0
    assert "the one-shot run at close meets the deadline" in capsys.readouterr().out


def test_plan_from_the_cost_model_uses_the_general_planner(capsys, tmp_path):
    store = tmp_path / "models.json"
    assert main(["calibrate", "--m", "3", "--k", "5", "--budget", "1s",
                 "--cost-models", str(store)]) == 0
    out = capsys.readouterr().out
    assert "t = " in out and "residual" in out and "saved to" in out
    report = plan_json(capsys, "--n", "200000", "--m", "3", "--k", "5", "--survey-hours", "1",
                       "--deadline", "1s", "--cost-models", str(store))
    assert report["cost_model"]["engine"] == "mdav"
    assert 0 < report["optimal"]["nu"] < 1
    assert report["optimal"]["finish_after_close_seconds"] < report["t_ref_seconds"]


def test_plan_calibrates_when_no_model_is_stored(capsys, tmp_path):
    store = tmp_path / "models.json"
    assert main(["plan", "--n", "50000", "--m", "2", "--k", "3", "--arrival-coefficient", "5",
                 "--cost-models", str(store)]) == 0
    assert "calibrating" in capsys.readouterr().out
    assert store.exists()


def _models(path, ona_seconds_at_2000: float) -> None:
    from scheduler.cost_model import Calibration, CostModelStore, PowerLaw

    store = CostModelStore(path)
    for engine, t2000 in (("mdav", 0.05), ("ona_star", ona_seconds_at_2000)):
        samples = [(1000, t2000 / 4), (2000, t2000)]
        store.put(engine, 4, 5, Calibration(PowerLaw.fit(*zip(*samples, strict=True)),
                                            samples))


@pytest.mark.parametrize("ona_seconds, chosen", [(0.1, "ona_star"), (500.0, "mdav")])
def test_plan_engine_auto_reports_the_choice_and_the_expected_loss(capsys, tmp_path,
                                                                   ona_seconds, chosen):
    store = tmp_path / "models.json"
    _models(store, ona_seconds)
    args = ["--n", "20000", "--m", "4", "--k", "5", "--survey-hours", "1", "--engine", "auto",
            "--cost-models", str(store)]
    report = plan_json(capsys, *args, "--deadline", "5min")
    assert report["cost_model"]["engine"] == "mdav"  # t_ref and the arrival pace are MDAV's
    for key in ("optimal", "deadline"):
        choice = report["engine_choice"][key]
        assert choice["chosen"] == chosen
        by_engine = {c["engine"]: c for c in choice["candidates"]}
        assert set(by_engine) == {"ona_star", "mdav"} and by_engine[chosen]["fits"]
    assert main(["plan", *args]) == 0
    out = capsys.readouterr().out
    assert f"{chosen} (chosen)" in out and "expected IL" in out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--arrival-coefficient", "5", "--engine", "auto"],
         "--engine auto needs --n, --m and --k"),
        ([], "exactly one of --arrival-coefficient and --survey-hours"),
        (["--survey-hours", "10"], "--survey-hours needs --t-ref"),
        (["--arrival-coefficient", "5", "--deadline", "1h"], "--deadline needs --t-ref"),
        (["--arrival-coefficient", "-1"], "must be >= 0"),
        (["--arrival-coefficient", "5", "--n", "1000"], "--n, --m and --k go together"),
        (["--arrival-coefficient", "5", "--param", "max_rounds=6"],
         "--param selects a cost model: it needs --n, --m and --k"),
        (["--arrival-coefficient", "5", "--engine", "auto", "--n", "1000", "--m", "2", "--k",
          "3", "--param", "max_rounds=6"], "--engine auto takes no --param"),
        (["--arrival-coefficient", "5", "--engine", "ona_star", "--n", "1000", "--m", "2",
          "--k", "3", "--param", "rounds=6"], "'ona_star' has no parameter rounds"),
    ],
)
def test_plan_usage_errors(capsys, args, message):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_duration_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--arrival-coefficient", "5", "--t-ref", "2 fortnights"])
    assert exc.value.code == 2
    assert "unknown unit" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["tclose_tfirst", "tclose_merge", "dependence", "lda_mdav"])
def test_calibrate_makes_up_the_per_record_inputs_of_an_engine(engine, capsys, tmp_path):
    """The t-closeness engines (a sensitive answer ``S``) and the other per-record engines get
    a cost model too: the planner can plan them."""
    store = tmp_path / "models.json"
    assert main(["calibrate", "--engine", engine, "--m", "3", "--k", "5", "--budget", "1s",
                 "--cost-models", str(store)]) == 0
    assert f"{engine}, m = 3, k = 5: t = " in capsys.readouterr().out
    assert engine in store.read_text()


def test_calibrate_and_plan_with_engine_parameters_use_their_own_model(capsys, tmp_path):
    """A survey's ``engine_params`` select a cost model of their own in the service;
    ``calibrate --param`` makes it and ``plan --param`` reads it, beside the defaults' one."""
    from scheduler.cost_model import CostModelStore

    store = tmp_path / "models.json"
    params = {"start": "mdav", "max_rounds": 1}
    base = ["--engine", "ona_star", "--m", "3", "--k", "5", "--cost-models", str(store)]
    assert main(["calibrate", *base, "--budget", "1s", "--param", "start=mdav",
                 "--param", "max_rounds=1"]) == 0
    assert "ona_star (max_rounds=1, start=mdav), m = 3, k = 5: t = " in capsys.readouterr().out
    models = CostModelStore(store)
    assert models.get("ona_star", 3, 5, params) is not None
    assert models.get("ona_star", 3, 5) is None
    report = plan_json(capsys, "--n", "20000", "--survey-hours", "1", *base,
                       "--param", "max_rounds=1", "--param", "start=mdav")
    fitted = models.get("ona_star", 3, 5, params)
    assert report["cost_model"]["engine"] == "ona_star"
    assert report["cost_model"]["params"] == params
    assert (report["cost_model"]["a"], report["cost_model"]["b"]) == (fitted.a, fitted.b)
    assert models.get("ona_star", 3, 5) is None  # the defaults' model was not calibrated
    assert main(["plan", "--n", "20000", "--survey-hours", "1", *base, "--param",
                 "max_rounds=1.0", "--param", "start=mdav"]) == 0  # 1.0 is 1: the same model
    out = capsys.readouterr().out
    assert "cost model of ona_star (max_rounds=1.0, start=mdav)" in out
    assert "calibrating" not in out


@pytest.mark.heavy  # seconds of computation: make test runs it, make check leaves it out
def test_calibrate_a_t_closeness_engine_at_a_given_t(capsys, tmp_path):
    """The made-up calibration inputs include t = 0.2; a given --param t replaces it."""
    store = tmp_path / "models.json"
    assert main(["calibrate", "--engine", "tclose_kfirst", "--m", "3", "--k", "5", "--budget",
                 "1s", "--param", "t=0.3", "--cost-models", str(store)]) == 0
    from scheduler.cost_model import CostModelStore

    assert CostModelStore(store).get("tclose_kfirst", 3, 5, {"t": 0.3}) is not None


@pytest.mark.parametrize("param, message", [("progress=x", "progress cannot be calibrated"),
                                            ("S=col", "S cannot be calibrated"),
                                            ("rounds=3", "has no parameter rounds")])
def test_calibrate_refuses_what_is_not_an_engine_setting(capsys, tmp_path, param, message):
    engine = "tclose_kfirst" if param.startswith("S=") else "ona_star"
    assert main(["calibrate", "--engine", engine, "--m", "3", "--k", "5", "--param", param,
                 "--cost-models", str(tmp_path / "m.json")]) == 2
    assert message in capsys.readouterr().err


def test_plan_warns_of_a_window_shorter_than_the_engines_one_shot_run(capsys, tmp_path):
    """Issue 49: ONA* in a window shorter than its one-shot run released after the close
    with nothing said beforehand. `plan` says so, and names the engine stored here that would
    run one-shot in seconds."""
    store = tmp_path / "models.json"
    _models(store, 500.0)  # ONA*: 500 s for 2,000 records; MDAV 0.05 s
    args = ["--n", "20000", "--m", "4", "--k", "5", "--engine", "ona_star",
            "--cost-models", str(store)]
    report = plan_json(capsys, *args, "--arrival-coefficient", "0.5")
    (warning,) = report["warnings"]
    assert "ona_star's one-shot run" in warning and "longer than" in warning
    assert 'engine = "mdav"' in warning
    assert main(["plan", *args, "--arrival-coefficient", "0.5"]) == 0
    assert "warning: ona_star's one-shot run" in capsys.readouterr().out
    # MDAV in a long window: nothing to warn of
    quiet = plan_json(capsys, "--n", "20000", "--m", "4", "--k", "5", "--survey-hours", "1",
                      "--cost-models", str(store))
    assert quiet["warnings"] == []
