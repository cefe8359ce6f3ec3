"""``streamanon schema from-xlsform`` end to end: the commands of "From an XLSForm"
(docs/guide/survey-data.md) as written there, on a real field form (pyxform's UCL Biomass Plot
Form) and a few hundred synthetic responses consistent with it: the schema is written, the
responses released with ``anonymize --schema`` and the release verified k-anonymous."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamanon.io import read_table, write_table
from streamanon.metrics import check_table_k_anonymity
from streamanon.schema import FieldSpec, Schema, load_schema
from tests.cli.helpers import run
from tests.docs_pages import block, blocks, commands, page, section

FORMS = Path(__file__).resolve().parents[1] / "data" / "forms"
N = 400
K = 5




def responses(schema: Schema, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` submissions consistent with the schema as the platform's export has them: every
    value within its field's levels and bounds, identifiers unique, a text answer only where
    its form asks one, ignored fields (notes, repeats, locations...) not exported."""
    rng = np.random.default_rng(seed)
    start = pd.Timestamp("2024-03-01T08:00:00")
    columns: dict[str, object] = {}
    for name, spec in schema.fields.items():
        columns[name] = _values(name, spec, n, rng, start)
    frame = pd.DataFrame({k: v for k, v in columns.items() if v is not None})
    # the free text the form asks, which the page's command leaves out (--ignore)
    frame["info/leader_number"] = [f"07{d:08d}" for d in rng.integers(0, 10**8, size=n)]
    frame["info/leader_name_other"] = [f"Enumerator {i}" for i in rng.integers(1, 50, size=n)]
    other = frame["info/leader_name"] != "other"  # relevant: ${leader_name} = 'other'
    frame.loc[other, "info/leader_name_other"] = None
    frame["remarks"] = [f"plot remark {i}" for i in rng.integers(1, 1000, size=n)]
    return frame


def _values(name: str, spec: FieldSpec, n: int, rng: np.random.Generator,
            start: pd.Timestamp) -> object:
    if spec.role == "ignore":
        return None
    if spec.role == "identifier":
        return [f"uuid:{rng.bytes(16).hex()}" for _ in range(n)]
    if spec.levels:
        return rng.choice(np.array(spec.levels, dtype=object), size=n)
    if spec.type == "int":
        low, high = int(spec.min if spec.min is not None else 0), int(
            spec.max if spec.max is not None else 100)
        return rng.integers(low, high + 1, size=n)
    if spec.type == "bool":
        return rng.random(n) < 0.3
    if spec.type == "category":  # choices in a CSV beside the form
        return [f"{name.rsplit('/', 1)[-1]}_{i}" for i in rng.integers(1, 4, size=n)]
    if spec.type == "timestamp":
        return [(start + pd.Timedelta(minutes=int(m))).isoformat()
                for m in rng.integers(0, 60 * 24 * 30, size=n)]
    if spec.type == "text":
        return [f"0{rng.integers(700_000_000, 799_999_999)}" for _ in range(n)]
    raise AssertionError(f"{name}: no generator for {spec}")


@pytest.fixture
def shown() -> list[list[str]]:
    """The commands of "From an XLSForm", as written on the page."""
    text = section(page("guide/survey-data.md"), "From an XLSForm")
    lines = [shlex.split(line) for line in commands(block(text, "sh"))]
    assert [words[:3] for words in lines] == [["streamanon", "schema", "from-xlsform"],
                                             ["streamanon", "anonymize", "plots.csv"],
                                             ["streamanon", "verify", "plots.release.csv"]]
    return lines


def test_the_xlsform_commands_release_a_real_form_k_anonymously(shown, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(FORMS / "UCL_Biomass_Plot_Form.xlsx", tmp_path / "plots.xlsx")
    status, stdout, stderr = run(shown[0][1:])
    assert status == 0, stderr
    assert "wrote plots.toml" in stdout
    schema = load_schema(tmp_path / "plots.toml")
    assert schema.quasi_identifiers == ["location/plant_phase", "location/canopy_cover",
                                        "location/monumented", "location/slope"]
    assert schema.dropped[:3] == ["intro/note2", "intro/note1", "info/leader_name_other"]
    # the TOML the page shows is what the command wrote
    text = (tmp_path / "plots.toml").read_text(encoding="utf-8")
    toml = blocks(section(page("guide/survey-data.md"), "From an XLSForm"), "toml")[0]
    for line in toml.splitlines():
        assert line in text.splitlines(), line

    frame = responses(schema, N)
    write_table(frame, tmp_path / "plots.csv")
    status, stdout, stderr = run(shown[1][1:])
    assert status == 0, stderr
    assert f"{N} records" in stdout
    release = read_table(tmp_path / "plots.release.csv")
    assert len(release) == N
    gone = set(schema.dropped) & set(frame.columns)
    assert "meta/instanceID" in gone and "info/leader_number" in gone
    assert not gone & set(release.columns)
    assert not check_table_k_anonymity(frame, schema.quasi_identifiers, K).ok  # before
    report = check_table_k_anonymity(release, schema.quasi_identifiers, K)
    assert report.ok and report.smallest_group >= K, report
    assert set(release["location/plant_phase"]) <= set(range(2022, 2029))
    assert release["location/canopy_cover"].between(0, 100).all()
    # the confidential answers are published unchanged, as a multiset
    burned = "disturbance/burning"
    assert sorted(release[burned].tolist()) == sorted(frame[burned].tolist())

    status, stdout, stderr = run(shown[2][1:])
    assert status == 0, stdout + stderr
    assert f"{K}-anonymous" in stdout


def test_a_bad_form_is_one_error_line_and_no_file(tmp_path):
    out = tmp_path / "schema.toml"
    status, _, stderr = run(["schema", "from-xlsform", str(FORMS / "UCL_Biomass_Plot_Form.xlsx"),
                             "--qi", "location/slope", "--out", str(out)])
    assert status == 2 and not out.exists()
    assert stderr.count("\n") == 1 and "row 32, column type" in stderr
    status, _, stderr = run(["schema", "from-xlsform", str(FORMS / "group.xlsx"),
                             "--qi", "father/agee", "--out", str(out)])
    assert status == 2 and "'father/agee' is not a field" in stderr and not out.exists()


def test_schema_alone_prints_its_help():
    status, stdout, _ = run(["schema"])
    assert status == 2 and "from-xlsform" in stdout
