"""``anonymize --epsilon E --budget-ledger FILE [--epsilon-budget B]``: a private file that
records each differentially private release and refuses, before anything is written, the one
that would take the total over the budget; two runs at once never overspend."""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from streamanon.errors import BudgetSpentError
from streamanon.ledger import BudgetLedger, charged
from tests.cli.helpers import run
from tests.docs_pages import block, commands, page, section

SCHEMA = """
[schema]
respondent_id = { role = "identifier" }
age = { role = "quasi_identifier", type = "int", min = 18, max = 90 }
region = { role = "quasi_identifier", type = "category", levels = ["north", "south", "east"] }
q1 = { role = "confidential", type = "int", min = 1, max = 5 }
"""


@pytest.fixture
def survey(tmp_path: Path) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    n = 200
    pd.DataFrame({"respondent_id": [f"R{i}" for i in range(n)],
                  "age": rng.integers(18, 91, n),
                  "region": rng.choice(["north", "south", "east"], n),
                  "q1": rng.integers(1, 6, n)}).to_csv(tmp_path / "survey.csv", index=False)
    (tmp_path / "schema.toml").write_text(SCHEMA)
    return tmp_path / "survey.csv", tmp_path / "schema.toml"


def release(data: Path, schema: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    return run(["anonymize", str(data), "--schema", str(schema), "--k", "10", "--out",
                str(out), "--no-progress", *extra])


def test_each_release_is_recorded_and_the_one_over_the_budget_is_refused_before_writing(
        survey, tmp_path):
    data, schema = survey
    ledger = tmp_path / "ledger.json"
    status, stdout, _ = release(data, schema, tmp_path / "a.csv", "--epsilon", "0.6",
                                "--budget-ledger", str(ledger), "--epsilon-budget", "1")
    assert status == 0
    assert "privacy budget: 0.6 of 1 spent (0.4 left)" in stdout
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600
    status, stdout, _ = release(data, schema, tmp_path / "b.csv", "--epsilon", "0.4",
                                "--budget-ledger", str(ledger))  # the budget the file records
    assert status == 0 and "privacy budget: 1 of 1 spent (0 left)" in stdout
    report = json.loads((tmp_path / "b.report.json").read_text())
    assert report["budget"] == {"spent": 1.0, "total": 1.0, "this_release": 0.4,
                                "remaining": 0.0, "ledger": str(ledger)}
    before = ledger.read_text()
    status, _, stderr = release(data, schema, tmp_path / "c.csv", "--epsilon", "0.1",
                                "--budget-ledger", str(ledger))
    assert status != 0
    assert "would spend 1.1 of the privacy budget of 1" in stderr
    assert "nothing was written" in stderr and "Traceback" not in stderr
    assert not (tmp_path / "c.csv").exists() and not (tmp_path / "c.report.json").exists()
    assert ledger.read_text() == before
    recorded = json.loads(before)
    assert recorded["budget"] == 1.0 and recorded["spent"] == pytest.approx(1.0)
    first, second = recorded["releases"]
    assert (first["epsilon"], second["epsilon"]) == (0.6, 0.4)
    assert first["mechanism"] == "insensitive" and first["scope"] == "all"
    assert first["input"] == str(data) and first["output"] == str(tmp_path / "a.csv")
    assert first["input_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert first["at"].endswith("+00:00")


@pytest.mark.parametrize("extra, message", [
    (["--dp-mechanism", "individual_ranking"], "not differentially private"),
    (["--dp-scope", "quasi-identifiers"], "not differentially private"),
    (["--epsilon-budget", "0.5"], "less than one release's epsilon"),
])
def test_a_ledger_is_refused_where_it_would_record_a_false_bound(survey, tmp_path, extra,
                                                                 message):
    data, schema = survey
    status, _, stderr = release(data, schema, tmp_path / "r.csv", "--epsilon", "1",
                                "--budget-ledger", str(tmp_path / "ledger.json"), *extra)
    assert status != 0 and message in stderr
    assert not (tmp_path / "ledger.json").exists() and not (tmp_path / "r.csv").exists()


def test_a_budget_needs_a_ledger(survey, tmp_path):
    data, schema = survey
    status, _, stderr = release(data, schema, tmp_path / "r.csv", "--epsilon", "1",
                                "--epsilon-budget", "2")
    assert status != 0 and "--epsilon-budget needs --budget-ledger" in stderr


def test_a_file_that_is_not_a_ledger_is_refused(survey, tmp_path):
    data, schema = survey
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    status, _, stderr = release(data, schema, tmp_path / "r.csv", "--epsilon", "1",
                                "--budget-ledger", str(tmp_path / "notes.json"))
    assert status != 0 and "is not a streamanon budget ledger" in stderr
    assert not (tmp_path / "r.csv").exists()


def test_only_the_insensitive_mechanism_over_all_columns_is_charged():
    assert charged("insensitive", "all")
    assert not charged("individual_ranking", "all")
    assert not charged("insensitive", "quasi_identifiers")


def _spend(path: str, rounds: int, start: Any, paid: Any) -> None:
    """Charge 0.05 ``rounds`` times; count the charges the ledger accepted in ``paid``."""
    ledger = BudgetLedger(path, budget=1.0)
    start.wait()
    for i in range(rounds):
        with contextlib.suppress(BudgetSpentError):  # the budget is spent: the test counts
            ledger.charge(0.05, {"process": os.getpid(), "round": i})
            with paid.get_lock():
                paid.value += 1


def test_two_processes_charging_at_once_record_every_release_and_never_overspend(tmp_path):
    """Forty charges of 0.05 from two processes at once on a budget of 1.0: exactly twenty
    are accepted, and each of them is recorded (none lost to the other process's rename)."""
    path = str(tmp_path / "ledger.json")
    context = multiprocessing.get_context("fork")
    start, paid = context.Barrier(2), context.Value("i", 0)
    workers = [context.Process(target=_spend, args=(path, 20, start, paid)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    recorded = json.loads(Path(path).read_text())
    assert paid.value == 20, f"{paid.value} charges of 0.05 accepted on a budget of 1.0"
    assert len(recorded["releases"]) == 20
    assert recorded["spent"] == pytest.approx(1.0)
    assert len({r["process"] for r in recorded["releases"]}) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_two_cli_runs_at_once_spend_the_budget_once(survey, tmp_path, subprocesses):
    """Two ``streamanon anonymize`` processes started together on a budget for one release:
    both pass the early check, one is charged, the other refused before writing."""
    data, schema = survey
    ledger = tmp_path / "ledger.json"
    runs = [subprocess.Popen(
        [sys.executable, "-m", "streamanon", "anonymize", str(data), "--schema", str(schema),
         "--k", "10", "--epsilon", "1", "--budget-ledger", str(ledger), "--out",
         str(tmp_path / f"r{i}.csv"), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    results = [(p.wait(120), p.stderr.read()) for p in runs]
    for p in runs:
        p.stdout.close()
        p.stderr.close()
    assert sorted(code == 0 for code, _ in results) == [False, True], results
    refused = next(err for code, err in results if code)
    assert "would spend 2 of the privacy budget of 1" in refused
    assert len(json.loads(ledger.read_text())["releases"]) == 1
    assert len(list(tmp_path.glob("r?.csv"))) == 1


def test_the_documented_commands_run(survey, tmp_path, monkeypatch):
    """"A privacy budget across releases" in guide/cli.md, as written there."""
    shown = section(page("guide/cli.md"), "A privacy budget across releases")
    lines = [line.split() for line in commands(block(shown, "sh"))]
    assert [words[:2] for words in lines] == [["streamanon", "anonymize"]] * 3
    monkeypatch.chdir(tmp_path)
    results = [run([*words[1:], "--no-progress"]) for words in lines]
    assert [status == 0 for status, _, _ in results] == [True, True, False]
    assert "privacy budget: 1 of 2 spent (1 left)" in results[0][1]
    assert "privacy budget: 2 of 2 spent (0 left)" in results[1][1]
    assert "would spend 3 of the privacy budget of 2" in results[2][2]
    assert len(json.loads((tmp_path / "budget.json").read_text())["releases"]) == 2
