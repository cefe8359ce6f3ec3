"""The scheduled path (planner fires the base run, close at its time), the demo, and closing by
the CLI and by a control message."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from scheduler.live import BUSY_FACTOR
from streamanon.service.broker import free_port
from streamanon.service.control import sign
from tests.conftest import REPO
from tests.service.kafka_helpers import produce, read_topic, response
from tests.service.lifecycle_helpers import put_model

# the compatibility subset: each test on Apache Kafka and on the embedded broker
pytestmark = pytest.mark.both_brokers

# The test's demo sizes itself like `make demo` within this many seconds after set-up.
DEMO_BUDGET = 90


def _demo_claims(report: dict, summary: dict) -> None:
    """What the demo promises, read from the release's own report and the one-shot
    reference the demo measured (issue 28): a real increment, a release at least 3x sooner
    than the one-shot release of the same records, distortion within +10 % of it."""
    late = report["n"] - report["n_base"]
    assert report["mode"] == "two-stage" and report["nu"] > 0 and late >= 1_000, report
    assert summary["one_shot_release_seconds"] >= 3 * report["close_to_release_seconds"], (
        summary["one_shot_release_seconds"], report["close_to_release_seconds"],
        report["close_steps_seconds"], summary["one_shot_close_steps_seconds"])
    assert report["distortion"] <= 1.10 * summary["one_shot_distortion"]


def test_make_demo_runs_the_scheduled_pipeline(tmp_path, subprocesses):
    """``make demo``, the README's first command, exactly as the Makefile runs it (sizing
    itself within a shorter budget through DEMO_ARGS): the dashboard is served while it runs
    and lingers after the release, JSON logs name survey and state but hold no respondent
    data, the side-by-side it prints is the one of the release it wrote, and the release keeps
    the demo's promise."""
    out = tmp_path / "demo"
    port = free_port()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "-C", str(REPO), "demo", f"DEMO_OUT={out}",
         f"DEMO_ARGS=--budget {DEMO_BUDGET} --http 127.0.0.1:{port} --linger 10 "
         "--log-level info --log-format json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        status = None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status",
                                            timeout=5) as r:
                    status = json.loads(r.read())["surveys"][0]
                if status["state"] == "RELEASED":
                    break
            except OSError:
                pass
            time.sleep(0.5)
        assert status is not None and status["state"] == "RELEASED", status
        # still served after the release (--linger): page, status and metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert b"streamanon" in r.read()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        n = status["stored"]
        assert f'streamanon_records_stored_total{{survey="demo"}} {n}.0' in metrics
        assert 'streamanon_releases_published_total{survey="demo"} 1.0' in metrics
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    report = json.loads((out / "reports" / "demo" / "report.json").read_text())
    assert sorted(p.name for p in (out / "releases" / "demo").iterdir()) == [
        "release.csv", "release.parquet"]  # the published folder: the release only
    summary = json.loads((out / "simulation.json").read_text())
    assert report["n"] == summary["n"] == n  # every valid response; the malformed ones not
    assert sum(report["rejected"].values()) == 4
    assert report["base_seconds"] > 0 and report["planned_nu"] is not None
    # the plan the base run was started on, beside what it took
    assert report["base_plan"]["n_base"] > 0 and report["base_plan"]["base_seconds"] > 0
    assert report["base_plan"]["head_start_seconds"] > 0 and report["base_steps_seconds"]
    assert f"dashboard at http://127.0.0.1:{port}/" in stdout
    assert "[1/4]" in stdout and "[2/4] scenario (chosen)" in stdout
    release = summary["release"]
    assert release["nu"] == report["nu"] and release["n"] == n
    assert summary["engine"] == "ona_star"
    _demo_claims(report, summary)
    # what the releases left for the next plans: the one-shot reference's engine run on every
    # record is a sample of ONA*'s cost, and the compute step's part outside the engines is
    # kept beside each release's close steps (issue 62)
    models = json.loads((out / "cost_models.json").read_text())
    runs = [s for key, entry in models.items() if key.startswith("ona_star|")
            for s in entry.get("samples", []) if s[2] == "run"]
    assert any(s[0] == n for s in runs), runs
    assert "compute_rest" in models["release_steps"]["runs"][-1][2]  # the reference's
    # the side-by-side shows the planned and achieved values of this release
    rows = {line.split("  ")[1].strip(): line for line in stdout.splitlines()
            if line.startswith("  ") and "  " in line[2:]}
    # the live plan the base run was started on, what happened, the up-front scenario
    assert f"{report['base_plan']['nu']:.4f}" in rows["nu (late records)"]
    assert f"{report['nu']:.4f}" in rows["nu (late records)"]
    assert f"{summary['prediction']['nu']:.4f}" in rows["nu (late records)"]
    assert f"{report['predicted_release_seconds']:.2f} s" in rows["close -> release"]
    assert f"{report['close_to_release_seconds']:.2f} s" in rows["close -> release"]
    assert f"{summary['one_shot_seconds']:.2f} s" in rows["one-shot ona_star: compute"]
    assert f"{summary['one_shot_release_seconds']:.2f} s" in \
        rows["one-shot ona_star: close -> release"]
    assert f"{summary['delta'] * 100:+.2f} %" in rows["delta = D / D_one_shot - 1"]
    sooner = summary["one_shot_release_seconds"] / report["close_to_release_seconds"]
    assert f"{sooner:.1f}x sooner after close than the one-shot release" in stdout
    page = (out / "dashboard.html").read_text()
    assert "STREAMANON_SNAPSHOT" in page and '"state": "RELEASED"' in page
    assert "R000" not in page  # counts and times only
    logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    transitions = [(e["from_state"], e["state"]) for e in logs
                   if e.get("survey") == "demo" and "from_state" in e]
    assert transitions == [("OPEN", "BASE_RUNNING"), ("BASE_RUNNING", "BASE_DONE"),
                           ("BASE_DONE", "CLOSING"), ("CLOSING", "RELEASED")]
    assert all({"ts", "level", "logger", "message"} <= set(e) for e in logs)
    assert "R000" not in stderr  # no respondent id in any log line


#: ONA*'s timings (records, seconds) at m = 15, k = 10, as `streamanon demo --dry-run`
#: calibrated them on a quiet machine (2026-12-05, 2 cores, AMD EPYC): n^1.28 over the range.
QUIET_ONA_STAR = [(2000, 0.0576), (4000, 0.1674), (8000, 0.4664), (16000, 1.3567),
                  (32000, 2.8068), (64000, 5.8962), (128000, 16.4696)]


def test_on_a_machine_four_times_faster_the_demo_sizes_a_larger_survey_that_shows_the_idea(
        tmp_path, subprocesses):
    """The demo's scenario follows the cost model: with the engine four times faster it
    chooses more responses, and its plan still leaves a real increment and releases at least
    3x sooner than the one-shot release, within +10 % of its loss. (A faster machine cannot
    be run here: this checks the scenario and its plan, written to scenario.json.) Both runs
    plan from one cost model, ONA*'s as the demo calibrated it on a quiet machine
    (QUIET_ONA_STAR): the demo's own calibration times ONA* up to 128,000 records (16 s), and
    timed beside the suite's other workers it once left no arrival coefficient within the
    budget the room below (1.5 x 19.7 s of base run against a 29.3 s head start). A dry run
    only plans, so its budget is that of a long demo."""
    from streamanon.simulation import demo

    out = tmp_path / "demo"
    out.mkdir()
    put_model(out / "cost_models.json", "ona_star", demo.M, demo.K, QUIET_ONA_STAR)
    plans = {}
    for speed in (1, 4):
        done = subprocess.run(
            [sys.executable, "-m", "streamanon", "demo", "--out", str(out),
             "--budget", "600", "--dry-run", "--speed", str(speed)],
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "calibrating" not in done.stdout + done.stderr  # the model given is used
        plans[speed] = json.loads((out / "scenario.json").read_text())
    assert plans[4]["n"] > plans[1]["n"]
    for preview in plans.values():
        p = preview["prediction"]
        assert p["nu"] > 0 and p["n_increment"] >= 1_000
        assert preview["one_shot_release_seconds"] >= 3 * p["release_after_close_seconds"]
        assert preview["sooner"] >= 3
        assert p["expected_delta_same_engine"] <= 0.10
        # the base run ends before the close even on a busier machine: the demo's base run,
        # 1.4 times its prediction while other tests ran, held a release back 2.3 s once
        assert BUSY_FACTOR * p["base_seconds"] <= p["head_start_seconds"]


@pytest.mark.parametrize("slower", [1.0, 2.0, 3.0, 4.0, 6.0])
def test_on_a_busy_machine_the_demo_keeps_a_margin_of_late_records(slower):
    """A demo under load (its engine calibrated several times slower) once chose 9,339
    responses for a predicted increment just over 1,000, and the live plan left 966. The
    scenario keeps a margin over MIN_LATE and at least MIN_N responses, taking longer than
    its budget rather than showing too small an increment."""
    from scheduler.cost_model import PowerLaw
    from streamanon.simulation.calibration import candidates
    from streamanon.simulation.demo import LATE_MARGIN, MIN_LATE, MIN_N, K, M, choose_scenario

    model = PowerLaw(a=1.0e-7 * slower, b=1.78)  # ONA* at m = 15, k = 10, slowed
    scenario = choose_scenario(model, candidates({"ona_star": model}, "auto", M, K), k=K,
                               budget=DEMO_BUDGET)
    assert scenario.shows_the_idea
    assert scenario.n >= MIN_N
    assert scenario.prediction["n_increment"] >= LATE_MARGIN * MIN_LATE >= 1.2 * MIN_LATE


@pytest.mark.parametrize("slower", [1.0, 2.5, 4.0, 6.0])
def test_a_demo_sized_on_a_busy_machine_still_shows_the_gain_when_the_reference_runs_quiet(
        slower):
    """Under load the demo calibrated ONA* about four times slower than it ran later, chose
    15,549 responses, and its one-shot reference then ran on a quieter machine in 3.35 s of
    compute (3.91 s close to release) while its own close, beside a full test suite and a
    busy loop, took 1.91 s: 2.05x, not the 3x it must show. Whatever the calibration's
    slow-down, the survey is large enough that its one-shot release on the quiet machine takes
    at least three times a 2-second close."""
    from scheduler.cost_model import PowerLaw
    from streamanon.simulation.calibration import candidates
    from streamanon.simulation.demo import K, M, choose_scenario, one_shot_release_model

    quiet = PowerLaw(a=1.0e-7, b=1.78)  # ONA* at m = 15, k = 10 on this machine, quiet
    model = PowerLaw(a=1.0e-7 * slower, b=1.78)
    scenario = choose_scenario(model, candidates({"ona_star": model}, "auto", M, K), k=K,
                               budget=DEMO_BUDGET)
    busy_close = 2.0
    assert one_shot_release_model(quiet, scenario.n) >= 3 * busy_close, scenario.describe()


@pytest.mark.parametrize("slower", [1.0, 2.5, 4.0])
def test_the_demo_leaves_the_base_run_room_to_run_slower_than_predicted(slower):
    """CI: the demo's base run, beside another test worker, ran about 2.4 times slower than
    its cost model; planned with room for 1.5 times, the release waited 4.2 s for it. Whatever
    the calibration, the scenario's plan ends the base run before the close even DEMO_ROOM
    times slower than predicted."""
    from scheduler.cost_model import PowerLaw
    from streamanon.simulation.calibration import candidates
    from streamanon.simulation.demo import DEMO_ROOM, K, M, choose_scenario

    assert DEMO_ROOM >= 2.4
    model = PowerLaw(a=1.0e-7 * slower, b=1.78)
    scenario = choose_scenario(model, candidates({"ona_star": model}, "auto", M, K), k=K,
                               budget=DEMO_BUDGET)
    p = scenario.prediction
    assert scenario.shows_the_idea and p["nu"] > 0, scenario.describe()
    assert DEMO_ROOM * p["base_seconds"] <= p["head_start_seconds"] * (1 + 1e-6)


@pytest.mark.heavy  # seconds each: make test runs them, make check leaves them out
@pytest.mark.parametrize("faster", [1.0, 4.4, 10.0])
def test_the_demo_keeps_its_increment_when_the_machine_is_faster_during_the_survey(faster):
    """A loaded suite: the demo calibrated ONA* while the machine was at its busiest (a base
    run predicted at 14.15 s) and sized its survey for that; when the survey ran the load had
    dropped (the base run took 3.22 s), and the live plan, with the faster timings, left 972
    late records where the demo promised 1,000. The demo's survey keeps a floor of
    LATE_MARGIN x MIN_LATE late records (``min_nu``), never above the scenario's ratio: above
    it the live plan takes the latest safe snapshot (issue 49: the scenario's whole ratio as
    the floor made the live plan leave 21 % late where 10 % were safe)."""
    from scheduler.cost_model import PowerLaw
    from scheduler.profiles import resolve
    from streamanon.simulation.calibration import candidates
    from streamanon.simulation.demo import LATE_MARGIN, MIN_LATE, K, M, choose_scenario
    from streamanon.simulation.simulate import predict, simulated_request

    calibrated = PowerLaw(a=4.4e-7, b=1.78)  # the busy calibration
    scenario = choose_scenario(calibrated, candidates({"ona_star": calibrated}, "auto", M, K),
                               k=K, budget=DEMO_BUDGET)
    assert scenario.shows_the_idea
    assert scenario.min_nu == pytest.approx(min(scenario.prediction["nu"],
                                                LATE_MARGIN * MIN_LATE / scenario.n))
    live_model = PowerLaw(a=calibrated.a / faster, b=calibrated.b)
    window = scenario.open_seconds
    options = candidates({"ona_star": live_model}, "auto", M, K)
    live = predict(resolve("uniform", window), scenario.n, window,
                   simulated_request(k=K, engine="ona_star", min_nu=scenario.min_nu), options)
    assert live["nu"] >= scenario.min_nu - 1e-12
    assert live["n_increment"] >= MIN_LATE, (scenario.describe(), live)
    free = predict(resolve("uniform", window), scenario.n, window,
                   simulated_request(k=K, engine="ona_star"), options)
    # above the floor the live plan's own ratio stands (the latest safe snapshot)
    assert live["nu"] == pytest.approx(max(free["nu"], scenario.min_nu), rel=1e-6)


@pytest.mark.heavy  # seconds: make test runs it, make check leaves it out
def test_the_demo_survey_is_planned_with_the_demos_floor(tmp_path, monkeypatch):
    """``run_demo`` hands its scenario's floor to the survey as ``min_nu``."""
    from scheduler.cost_model import PowerLaw
    from streamanon.simulation import calibration, demo, simulate

    seen = {}
    monkeypatch.setattr(calibration, "calibrated_model",
                        lambda *a, **kw: PowerLaw(a=1.0e-7, b=1.78))
    monkeypatch.setattr(simulate, "run_simulation", lambda **kw: seen.update(kw) or {})
    monkeypatch.setattr(demo, "side_by_side", lambda summary: "")
    scenario = demo.choose_scenario(
        PowerLaw(a=1.0e-7, b=1.78),
        calibration.candidates({"ona_star": PowerLaw(a=1.0e-7, b=1.78)}, "auto", demo.M,
                               demo.K),
        k=demo.K)
    demo.run_demo(out=tmp_path)
    assert 0 < scenario.min_nu <= scenario.prediction["nu"]
    assert seen["n"] == scenario.n and seen["min_nu"] == pytest.approx(scenario.min_nu)


def test_the_verdict_says_sooner_only_when_it_was_sooner():
    from streamanon.simulation.demo import verdict

    steps = {"drain": 0.1, "load": 0.2, "compute": 5.0, "files": 0.1, "publish": 0.2}
    assert "12.0x sooner" in verdict(12.0, 1.0, steps)
    later = verdict(2.7, 3.0, steps)
    assert "sooner" not in later.replace("NOT sooner", "") and "NOT sooner" in later
    assert "1.1x the 2.70 s" in later and "incremental stage (5.00 s" in later
    slow_path = verdict(3.0, 2.0, {"publish": 1.5, "compute": 0.2})
    assert "1.5x sooner" in slow_path and "release path" in slow_path


def _release(**base_plan):
    plan = {"nu": 0.1, "n_base": 900_000, "head_start_seconds": 30.0, "base_seconds": 20.0,
            "incremental_seconds": 1.0, "nu_limit": 0.2, "safety": 1.5} | base_plan
    return {"mode": "two-stage", "n": 1_000_000, "n_base": plan["n_base"],
            "base_plan": plan, "base_steps_seconds": {"load": 1.0, "engine": 39.0},
            "closed_at": 1000.0, "base_started_at": 970.0}


def test_the_verdict_names_what_held_the_release_back_from_the_measurements():
    """Issue 49: the demo blamed 'another load on the machine' where there was none (the
    small-size cost model was wrong). The verdict says which of the quality bound, a cost
    model's error (with its size) or a measured load it was."""
    from streamanon.simulation.demo import verdict

    waited = {"wait_for_base": 10.0, "compute": 1.0, "publish": 1.0}
    model = verdict(40.0, 14.0, waited, release=_release())
    assert "40.0 s against 20.0 s predicted (2.00x)" in model
    assert "cost model under-predicted" in model and "load" not in model
    loaded = verdict(40.0, 14.0, waited, release=_release(safety=1.8))
    assert "measured load of 1.80x" in loaded
    bound = verdict(40.0, 14.0, waited, release=_release(
        nu=0.2, nu_limit=0.2, base_seconds=25.0))
    assert "quality bound held it back" in bound and "nu = 0.2000" in bound
    stage = verdict(40.0, 14.0, {"wait_for_base": 0.0, "compute": 9.0, "publish": 1.0},
                    release=_release())
    assert "9.00 s for 100,000 late records against 1.00 s planned (9.0x)" in stage
    one_shot = verdict(40.0, 45.0, {"compute": 40.0, "publish": 2.0},
                       release={"mode": "one-shot", "n": 1_000_000, "n_base": 0})
    assert "no base run was started" in one_shot
    unused = verdict(40.0, 45.0, {"compute": 40.0, "publish": 2.0},
                     release={"mode": "one-shot", "n": 1_000_000, "n_base": 0,
                              "base_steps_seconds": {"engine": 30.0}})
    assert "base run's result was not used" in unused


def test_close_from_the_cli(service_factory, broker):
    svc = service_factory(k=3)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(30)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 30, what="ingest")
    env = {**svc.env, "STREAMANON_HTTP_TOKEN": "wrong"}
    bad = subprocess.run([sys.executable, "-m", "streamanon", "close", "wellbeing",
                          "--config", str(svc.config)], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "HTTP 401" in bad.stderr
    ok = subprocess.run([sys.executable, "-m", "streamanon", "close", "wellbeing",
                         "--config", str(svc.config)], capture_output=True, text=True,
                        env=svc.env)
    assert ok.returncode == 0, ok.stderr
    svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")


def test_signed_control_message_closes_and_unsigned_or_replayed_ones_are_ignored(
        service_factory, broker):
    close = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    svc = service_factory(k=3, close=close)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(30)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 30, what="ingest")
    control = f"{svc.prefix}.control"
    # the old format carried the token itself: refused even with the right token
    produce(broker.bootstrap, control, [(None, json.dumps(
        {"command": "close", "survey": "wellbeing", "token": svc.token}).encode())])
    produce(broker.bootstrap, control, [(None, b"garbage")])
    produce(broker.bootstrap, control, [(None, sign("close", "wellbeing", "x" * 32))])
    time.sleep(3)
    assert svc.survey("wellbeing")["state"] == "OPEN"
    sent = subprocess.run([sys.executable, "-m", "streamanon", "close", "wellbeing",
                           "--config", str(svc.config), "--via-kafka"],
                          capture_output=True, text=True, env=svc.env, timeout=60)
    assert sent.returncode == 0, sent.stderr
    status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")
    assert status["release"]["n"] == 30
    messages = read_topic(broker.bootstrap, control, expected=4)
    assert svc.token not in messages[-1].value.decode()  # signed, the secret stays home
    produce(broker.bootstrap, control, [(None, messages[-1].value)])  # a replay
    deadline = time.monotonic() + 30
    while "replayed" not in svc.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    log = svc.log.read_text()
    assert "carries a plain token" in log and "not JSON" in log and "bad signature" in log
    assert "replayed" in log and svc.token not in log
    assert svc.survey("wellbeing")["releases"] == 1
