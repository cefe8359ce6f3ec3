from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest_plugins = ["tests.browser"]  # the headless Chromium fixture, ``browser``

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO / "tests" / "data"  # Census, Tarragona, EIA (tests/data/README.md)


@pytest.fixture(scope="session")
def datasets_dir() -> Path:
    if not (DATASETS / "census.csv").exists():
        pytest.fail(f"benchmark datasets not found at {DATASETS}")
    return DATASETS


@pytest.fixture(scope="session")
def benchmark_data(datasets_dir: Path) -> dict[str, np.ndarray]:
    return {
        name: pd.read_csv(datasets_dir / f"{name}.csv").to_numpy(dtype=np.float64)
        for name in ("census", "tarragona", "eia")
    }


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    """Cost models and other state go to a temporary directory, never the user's home."""
    monkeypatch.setenv("STREAMANON_DATA_DIR", str(tmp_path_factory.mktemp("data")))
