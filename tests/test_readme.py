"""The README's configuration example is a valid configuration, and the commands of "Your own
survey, step by step" run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from streamanon.service.config import parse_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def test_configuration_reference_parses():
    text = README.read_text()
    blocks = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    reference = next(b for b in blocks if "[[surveys]]" in b)
    config = parse_config(tomllib.loads(reference),
                          {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32})
    survey = config.surveys[0]
    assert survey.deadline == 3600 and survey.k == 10
    assert set(survey.fields) >= {"respondent_id", "age", "income", "satisfaction"}


def _section(title: str) -> str:
    text = README.read_text()
    assert f"\n## {title}\n" in text, f"README has no section {title!r}"
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_own_survey_walkthrough_runs_as_written(tmp_path):
    """The commands of "Your own survey, step by step", as written there (run as
    tests/test_commands.py runs the other sections'): on ``survey.csv``, the example survey the
    package ships, with the section's schema saved as ``schema.toml``. The release is
    k-anonymous on the schema's key, and the report shows the record linkage anonymize
    measured, saying where it came from."""
    section = _section("Your own survey, step by step")
    (tmp_path / "schema.toml").write_text(
        re.search(r"```toml\n(.*?)```", section, flags=re.S).group(1), encoding="utf-8")
    shutil.copyfile(REPO / "streamanon" / "data" / "example_survey.csv", tmp_path / "survey.csv")
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    commands = [line.split("#")[0].split() for line in block.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["streamanon", "anonymize"], ["streamanon", "verify"],
                                         ["streamanon", "report"]]
    assert "--qi" not in commands[1]  # the key comes from the schema
    outputs = []
    for words in commands:
        result = subprocess.run([sys.executable, "-m", "streamanon", *words[1:]], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "STREAMANON_DATA_DIR": str(tmp_path)})
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout + result.stderr)
    k = commands[1][commands[1].index("--k") + 1]
    assert f"{k}-anonymous (2000 records" in outputs[1]
    assert "measured by anonymize before shuffling, from release.report.json" in outputs[2]
    assert (tmp_path / "release.report.html").stat().st_size > 10_000


def test_report_is_in_the_command_list_with_the_command_the_walkthrough_runs():
    commands = _section("Command line")
    assert "\n### `streamanon report`" in commands
    report = commands.split("\n### `streamanon report`", 1)[1].split("\n### ", 1)[0]
    shown = re.search(r"```sh\n(.*?)```", report, flags=re.S).group(1).split()
    walkthrough = re.search(r"```sh\n(.*?)```", _section("Your own survey, step by step"),
                            flags=re.S).group(1)
    assert shown[:2] == ["streamanon", "report"]
    assert " ".join(shown) in [" ".join(line.split()) for line in walkthrough.splitlines()]


def test_the_demo_sample_is_the_one_a_real_run_made():
    """The README's ``make demo`` block is made by ``simulations/readme_demo.py`` from the
    summary of a real run kept in docs/demo-sample.json, never edited by hand: remade from
    that summary it is the same, and what it claims holds in the summary."""
    import json

    from simulations.readme_demo import END, SAMPLE, START, block

    sample = json.loads(SAMPLE.read_text())
    text = README.read_text()
    shown = START + text.split(START, 1)[1].split(END, 1)[0] + END
    assert shown == block(sample)
    provenance = sample["provenance"]
    assert provenance["command"] == "make demo" and provenance["commit"] != "unknown"
    assert f"commit {provenance['commit']}" in shown and provenance["machine"] in shown
    summary = sample["summary"]
    release = summary["release"]
    assert release["mode"] == "two-stage" and release["nu"] > 0
    sooner = summary["one_shot_release_seconds"] / release["close_to_release_seconds"]
    assert f"{sooner:.1f}x sooner" in shown
