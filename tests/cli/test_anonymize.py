"""The command line: anonymize, verify, engines; one-line errors; atomic output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamanon.cli import main


def run_streamanon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamanon", *args], capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def survey(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    n = 200
    frame = pd.DataFrame({
        "respondent_id": [f"R{i}" for i in range(n)],
        "age": rng.integers(18, 90, n),
        "income": rng.lognormal(10, 0.5, n).round(2),
        "answer": rng.integers(1, 6, n),
    })
    path = tmp_path / "survey.csv"
    frame.to_csv(path, index=False)
    return path


ARGS = ["--k", "5", "--qi", "age,income", "--confidential", "answer", "--drop", "respondent_id"]


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_anonymize_writes_a_verified_release_and_report(survey, tmp_path, suffix, capsys):
    out = tmp_path / f"release{suffix}"
    assert main(["anonymize", str(survey), *ARGS, "--out", str(out), "--seed", "1"]) == 0
    release = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    original = pd.read_csv(survey)
    assert list(release.columns) == ["age", "income", "answer"]
    assert len(release) == len(original)
    assert sorted(release["answer"]) == sorted(original["answer"])  # unchanged, shuffled
    report = json.loads((tmp_path / "release.report.json").read_text())
    assert {"n", "m", "k", "engine", "distortion", "information_loss", "seconds"} <= set(report)
    assert (report["n"], report["m"], report["k"], report["engine"]) == (200, 2, 5, "mdav")
    assert report["information_loss"] == pytest.approx(100 * report["distortion"])
    assert main(["verify", str(out), "--k", "5", "--qi", "age,income"]) == 0
    assert "5-anonymous" in capsys.readouterr().out


def test_the_report_goes_where_report_says_apart_from_the_release(survey, tmp_path, capsys):
    """The report is computed on the raw answers: ``--report`` keeps it out of the folder
    that is published."""
    published, kept = tmp_path / "publish", tmp_path / "kept"
    published.mkdir()
    kept.mkdir()
    out, report = published / "release.csv", kept / "report.json"
    assert main(["anonymize", str(survey), *ARGS, "--out", str(out),
                 "--report", str(report)]) == 0
    assert sorted(p.name for p in published.iterdir()) == ["release.csv"]
    assert json.loads(report.read_text())["k"] == 5
    assert f"report {report}" in capsys.readouterr().out
    for clash in (out, survey):
        assert main(["anonymize", str(survey), *ARGS, "--out", str(out),
                     "--report", str(clash)]) == 2
        assert "a file of its own" in capsys.readouterr().err


def test_release_rows_are_shuffled(survey, tmp_path):
    out = tmp_path / "release.csv"
    main(["anonymize", str(survey), *ARGS, "--out", str(out), "--seed", "4"])
    release = pd.read_csv(out)
    from streamanon import Output, microaggregate

    ordered = microaggregate(pd.read_csv(survey), 5, qi=["age", "income"], confidential="answer",
                             drop=["respondent_id"], output=Output(shuffle=False))
    assert not np.array_equal(release["income"].to_numpy(), ordered.data["income"].to_numpy())


def test_verify_fails_on_a_table_that_is_not_k_anonymous(survey, capsys):
    assert main(["verify", str(survey), "--k", "2", "--qi", "age,income"]) == 1
    assert "NOT 2-anonymous" in capsys.readouterr().err


def test_engines_lists_mdav(capsys):
    assert main(["engines"]) == 0
    assert "mdav" in capsys.readouterr().out


def _bad_inputs(survey: Path, tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    frame = pd.read_csv(survey)
    with_nan = tmp_path / "nan.csv"
    frame.assign(income=frame["income"].where(frame.index != 3)).to_csv(with_nan, index=False)
    with_inf = tmp_path / "inf.csv"
    with_inf_frame = frame.assign(income=frame["income"].where(frame.index != 3, np.inf))
    with_inf_frame.to_csv(with_inf, index=False)
    tiny = tmp_path / "tiny.csv"
    frame.head(3).to_csv(tiny, index=False)
    out = str(tmp_path / "out.csv")
    return {
        "missing file": ([str(tmp_path / "nope.csv"), *ARGS, "--out", out], "no such file"),
        "unknown column": ([str(survey), "--k", "5", "--qi", "age,salary", "--confidential",
                            "answer", "--drop", "respondent_id,income", "--out", out],
                           "unknown column(s): salary"),
        "non-numeric qi": ([str(survey), "--k", "5", "--qi", "age,respondent_id",
                            "--confidential", "answer,income", "--out", out], "not numeric"),
        "nan": ([str(with_nan), *ARGS, "--out", out], "NaN or infinite"),
        "inf": ([str(with_inf), *ARGS, "--out", out],
                "1 infinite value(s) in quasi-identifier column income"),
        "fewer than k": ([str(tiny), *ARGS, "--out", out], "3 records cannot form a cell of k = 5"),
        "column without role": ([str(survey), "--k", "5", "--qi", "age,income", "--drop",
                                 "respondent_id", "--out", out], "answer have no role"),
        "bad output type": ([str(survey), *ARGS, "--out", str(tmp_path / "o.xlsx")],
                            "unsupported file type"),
    }


@pytest.mark.parametrize("case", ["missing file", "unknown column", "non-numeric qi", "nan", "inf",
                                  "fewer than k", "column without role", "bad output type"])
def test_bad_input_gives_one_line_error_and_no_output(survey, tmp_path, case, capsys):
    args, message = _bad_inputs(survey, tmp_path)[case]
    assert main(["anonymize", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("streamanon: error:") and message in err
    assert "\n" not in err and "Traceback" not in err
    assert not (tmp_path / "out.csv").exists()
    assert not list(tmp_path.glob(".out.csv.*"))  # no temporary file left behind


def test_k_below_one_is_a_usage_error(subprocesses, survey, tmp_path):
    result = run_streamanon("anonymize", str(survey), "--k", "0", "--qi", "age", "--out",
                     str(tmp_path / "o.csv"))
    assert result.returncode == 2
    assert "must be at least 1" in result.stderr and "Traceback" not in result.stderr


def test_errors_from_the_installed_command_have_no_traceback(subprocesses, tmp_path):
    result = run_streamanon("verify", str(tmp_path / "missing.csv"), "--k", "3", "--qi", "a")
    assert result.returncode == 2
    assert result.stderr.strip() == f"streamanon: error: {tmp_path / 'missing.csv'}: no such file"


def test_failed_write_keeps_the_previous_release(survey, tmp_path, monkeypatch, capsys):
    out = tmp_path / "release.csv"
    out.write_text("previous release\n")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    import pyarrow.csv

    monkeypatch.setattr(pyarrow.csv, "write_csv", broken)
    assert main(["anonymize", str(survey), *ARGS, "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip() == "streamanon: error: disk full"
    assert out.read_text() == "previous release\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".release")] == []


def test_anonymize_records_its_timing_in_the_cost_model(survey, tmp_path):
    from scheduler.cost_model import CostModelStore

    main(["anonymize", str(survey), *ARGS, "--out", str(tmp_path / "r.csv")])
    samples = CostModelStore().samples("mdav", 2, 5)
    assert [(n, src) for n, _, src in samples] == [(200, "run")]


def test_anonymize_records_the_timing_of_an_engine_with_parameters_apart(survey, tmp_path):
    from scheduler.cost_model import CostModelStore

    main(["anonymize", str(survey), *ARGS, "--engine", "ona_star", "--param", "start=mdav",
          "--param", "max_rounds=1", "--out", str(tmp_path / "r.csv")])
    store = CostModelStore()
    params = {"start": "mdav", "max_rounds": 1}
    assert [(n, src) for n, _, src in store.samples("ona_star", 2, 5, params)] == [(200, "run")]
    assert store.samples("ona_star", 2, 5) == []


def test_two_stage_release_from_the_command_line(survey, tmp_path, capsys):
    out = tmp_path / "two.csv"
    assert main(["anonymize", str(survey), *ARGS, "--incremental", "nn_split_end", "--nu",
                 "0.2", "--compare-one-shot", "--out", str(out)]) == 0
    assert "delta =" in capsys.readouterr().out
    report = json.loads((tmp_path / "two.report.json").read_text())
    assert (report["incremental"], report["n_0"], report["n_plus"]) == ("nn_split_end", 160, 40)
    assert report["nu"] == pytest.approx(0.2)
    for key in ("tau_0", "tau_plus", "delta", "distortion_two_stage", "one_shot_distortion"):
        assert report[key] is not None
    assert report["distortion"] == report["distortion_two_stage"]
    assert main(["verify", str(out), "--k", "5", "--qi", "age,income"]) == 0


def test_incremental_needs_nu(survey, tmp_path, capsys):
    assert main(["anonymize", str(survey), *ARGS, "--incremental", "nn", "--out",
                 str(tmp_path / "x.csv")]) == 2
    assert "--incremental and --nu go together" in capsys.readouterr().err


def test_unknown_incremental_stage(survey, tmp_path, capsys):
    assert main(["anonymize", str(survey), *ARGS, "--incremental", "magic", "--nu", "0.1",
                 "--out", str(tmp_path / "x.csv")]) == 2
    assert "unknown incremental stage 'magic'" in capsys.readouterr().err


def _release_report(tmp_path: Path, out: Path) -> dict:
    return json.loads((tmp_path / f"{out.stem}.report.json").read_text())


def test_engines_lists_every_engine_with_column_parameters(capsys):
    from streamanon.engines import available_engines

    assert main(["engines"]) == 0
    text = capsys.readouterr().out
    for info in available_engines():
        assert info.name in text
    assert "--param labels=COLUMN[,COLUMN...]" in text and "--param Y=COLUMN[,COLUMN...]" in text
    # a runtime parameter is a Python object: the listing says how the command line sets it
    assert "--param runner=" not in text
    assert "runner (Python only; on the command line --cluster):" in text


def test_lda_mdav_takes_its_label_column_by_name(survey, tmp_path, capsys):
    frame = pd.read_csv(survey)
    frame["smoker"] = np.where(frame["age"] + frame["answer"] * 5 > 60, "yes", "no")
    path = tmp_path / "labelled.csv"
    frame.to_csv(path, index=False)
    out = tmp_path / "lda.csv"
    args = ["anonymize", str(path), "--k", "5", "--qi", "age,income",
            "--confidential", "answer,smoker", "--drop", "respondent_id", "--out", str(out)]
    assert main([*args, "--engine", "lda_mdav", "--param", "labels=smoker",
                 "--param", "alpha=8"]) == 0
    report = _release_report(tmp_path, out)
    assert report["engine"] == "lda_mdav"
    assert report["params"] == {"labels": "smoker", "alpha": 8}  # the column name, no values
    release = pd.read_csv(out)
    assert sorted(release["smoker"]) == sorted(frame["smoker"])
    assert main(["verify", str(out), "--k", "5", "--qi", "age,income"]) == 0
    assert main([*args, "--engine", "lda_mdav", "--param", "labels=nope"]) == 2
    assert "unknown column(s) nope" in capsys.readouterr().err


@pytest.mark.heavy  # seconds of computation: make test runs it, make check leaves it out
def test_dependence_wraps_an_engine_with_json_parameters(survey, tmp_path):
    out = tmp_path / "dep.csv"
    assert main(["anonymize", str(survey), *ARGS, "--out", str(out), "--engine", "dependence",
                 "--param", "Y=answer", "--param", "lam=0.3", "--param", "engine=mona",
                 "--param", 'engine_params={"rho": 0.7}']) == 0
    assert _release_report(tmp_path, out)["params"]["engine_params"] == {"rho": 0.7}
    assert main(["verify", str(out), "--k", "5", "--qi", "age,income"]) == 0


def test_incremental_stage_splits_with_another_engine(survey, tmp_path):
    out = tmp_path / "split.csv"
    assert main(["anonymize", str(survey), *ARGS, "--out", str(out), "--engine", "ona_star",
                 "--incremental", "nn_split_end", "--nu", "0.3",
                 "--incremental-param", "engine=mondrian_v2d"]) == 0
    assert main(["verify", str(out), "--k", "5", "--qi", "age,income"]) == 0


def test_bad_json_parameter_is_a_usage_error(survey, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["anonymize", str(survey), *ARGS, "--out", str(tmp_path / "x.csv"),
              "--param", "engine_params={oops"])
    assert "not a valid JSON object" in capsys.readouterr().err


def test_a_declared_level_spelled_NA_is_not_read_as_missing(tmp_path):
    """``country`` has the declared level "NA" (Namibia). read_table uses pandas' default
    na_values, so the CLI reads every "NA" as a missing answer: a required field is refused
    with a misleading "missing values" error, and an optional one releases them as blanks."""
    rng = np.random.default_rng(0)
    n = 40
    survey = pd.DataFrame({"id": [f"R{i}" for i in range(n)], "age": rng.integers(18, 80, n),
                           "country": ["NA"] * 15 + ["ZA"] * 13 + ["BW"] * 12,
                           "q": rng.integers(1, 6, n)})
    survey.to_csv(tmp_path / "survey.csv", index=False)
    schema = str(tmp_path / "schema.toml")
    Path(schema).write_text("""[schema]
id = {role = "identifier"}
age = {role = "quasi_identifier", type = "int"}
country = {role = "quasi_identifier", type = "category", levels = ["NA", "ZA", "BW"]}
q = {role = "confidential", type = "int"}
""", encoding="utf-8")
    out = tmp_path / "release.parquet"
    assert main(["anonymize", str(tmp_path / "survey.csv"), "--schema", schema, "--k", "5",
                 "--out", str(out), "--seed", "1", "--no-progress"]) == 0
    released = pd.read_parquet(out)
    assert released["country"].notna().all()
    assert set(released["country"]) <= {"NA", "ZA", "BW"}
