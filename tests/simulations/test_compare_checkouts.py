"""simulations/compare_checkouts.py: labels and times of two checkouts in one run (tiny sizes, no
speed assertions)."""

from __future__ import annotations

import contextlib
import io
import textwrap

import pytest

from simulations import compare_checkouts
from simulations.common import ROOT


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = compare_checkouts.main(argv)
    return code, out.getvalue()


def test_a_checkout_against_itself_has_the_same_labels_in_every_case(subprocesses):
    code, text = run(["--before", str(ROOT), "--after", str(ROOT), "--sizes", "300",
                      "--repeat", "1", "--engines", "mdav,ona_star", "--stages", "nn_split_end"])
    assert code == 0
    rows = [line for line in text.splitlines() if line.startswith("| ") and "| 300 |" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["mdav", "ona_star", "nn_split_end"]
    assert all(row.rstrip().endswith("| yes |") for row in rows)
    assert "labels the same in every case" in text


def test_a_checkout_whose_engine_partitions_otherwise_is_reported_and_fails(
        subprocesses, tmp_path):
    package = tmp_path / "streamanon"
    (package / "engines").mkdir(parents=True)
    (package / "incremental").mkdir()
    (package / "__init__.py").write_text("")
    (package / "metrics.py").write_text("def standardise(X):\n    return X\n")
    # one cell per k consecutive records: a valid partition, not MDAV's
    (package / "engines" / "__init__.py").write_text(textwrap.dedent("""\
        import numpy as np

        def run_engine(name, X, k):
            return np.minimum(np.arange(len(X)) // k, len(X) // k - 1)
        """))
    (package / "incremental" / "__init__.py").write_text(
        "def run_stage(*args, **params):\n    raise NotImplementedError\n")
    code, text = run(["--before", str(ROOT), "--after", str(tmp_path), "--sizes", "300",
                      "--repeat", "1", "--engines", "mdav", "--stages", ""])
    assert code == 1
    assert any(line.startswith("| mdav | 300 |") and line.rstrip().endswith("| NO |")
               for line in text.splitlines())
    assert "labels DIFFER" in text


def test_a_folder_that_is_not_a_checkout_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        compare_checkouts.main(["--before", str(tmp_path)])
    assert "is not a streamanon checkout" in capsys.readouterr().err
