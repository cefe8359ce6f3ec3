import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tradeoff_script_writes_table_csv_and_figures(subprocesses, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "simulations.incremental_tradeoff", "--n", "1500",
         "--repeat", "1", "--ms", "2,3", "--ks", "5", "--nus", "0.1,0.5", "--out",
         str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True,
    )
    assert "delta (%)" in result.stdout and "| nu | 2MDAV |" in result.stdout
    with open(tmp_path / "incremental_tradeoff.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 1 * 2 * 6  # m x k x nu x variants
    for row in rows:
        assert float(row["D_T"]) > 0 and float(row["tau_plus"]) > 0
    assert len(list((tmp_path / "figures").glob("fig*.png"))) == 9
