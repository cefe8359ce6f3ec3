"""Release files are as private as the store: a release, its report and its risk page are
written 0640 in a 0750 directory whatever the process umask (a configured mode otherwise)."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pandas as pd
import pytest

import streamanon.risk_page
from streamanon.service.config import ConfigError, parse_config
from streamanon.service.publisher import (
    FileModes,
    write_release_files,
    write_release_formats,
    write_report,
    write_risk_page,
)
from tests.service.release.test_reports import PUBLICATION, report

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    old = os.umask(0o022)  # the usual default: files 0644, directories 0755
    yield
    os.umask(old)


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({"age": np.repeat([30.0, 40.0], 5), "answer": np.arange(10)})


def test_a_release_and_its_report_are_private_whatever_the_umask(open_umask, frame, tmp_path,
                                                                 monkeypatch):
    output = tmp_path / "releases"
    files = write_release_files(frame, output, "s1", later=True)
    files = write_release_formats(frame, files)
    write_report(report(files).published(PUBLICATION))
    monkeypatch.setattr(streamanon.risk_page, "render", lambda *a, **kw: "<html></html>")
    write_risk_page({}, frame, frame, _survey(), files)
    written = sorted((output / "s1").iterdir())
    assert [p.name for p in written] == ["release.csv", "release.parquet"]
    reports = tmp_path / "reports"
    kept = sorted((reports / "s1").iterdir())
    assert [p.name for p in kept] == ["report.html", "report.json"]
    assert {p.name: oct(mode(p)) for p in written + kept} == {
        p.name: "0o640" for p in written + kept}
    for folder in (output / "s1", output, reports / "s1", reports):
        assert oct(mode(folder)) == "0o750"


def test_the_configured_modes_are_used(open_umask, frame, tmp_path):
    modes = FileModes(file=0o600, directory=0o700)
    files = write_release_files(frame, tmp_path / "releases", "s1", modes=modes,
                                reports=tmp_path / "kept")
    write_report(report(files).published(PUBLICATION), modes=modes)
    for path in (tmp_path / "releases" / "s1" / "release.parquet",
                 tmp_path / "releases" / "s1" / "release.csv",
                 tmp_path / "kept" / "s1" / "report.json"):
        assert oct(mode(path)) == "0o600"
    assert oct(mode(tmp_path / "releases" / "s1")) == "0o700"
    assert oct(mode(tmp_path / "kept" / "s1")) == "0o700"
    report_json = json.loads((tmp_path / "kept" / "s1" / "report.json").read_text())
    assert report_json["survey"] == "s1"


def _config(**output):
    return parse_config({"output": output, "surveys": [{"id": "s1", "k": 3, "schema": {
        "rid": {"role": "identifier"},
        "age": {"role": "quasi_identifier", "type": "float"},
        "answer": {"role": "confidential", "type": "int"}}}]}, ENV)


def _survey():
    return _config().surveys[0]


@pytest.mark.parametrize(("given", "expected"), [("0640", 0o640), ("0o600", 0o600),
                                                 (0o644, 0o644), ("750", 0o750)])
def test_modes_are_read_as_octal(given, expected):
    output = _config(file_mode=given, directory_mode=given).output
    assert output.file_mode == expected and output.directory_mode == expected


@pytest.mark.parametrize("given", ["0999", "rw-r-----", 0o1777, -1, "0646", 0o777])
def test_a_bad_or_world_writable_mode_is_refused(given):
    with pytest.raises(ConfigError, match="mode"):
        _config(file_mode=given)
