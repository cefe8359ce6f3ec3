"""A two-stage release on the embedded broker is spliced (issue 17): the base release is made
right after the base run, while the survey is open, and at close only the cells the
incremental stage made or changed are serialised; what is published is still the whole
k-anonymous release, byte for byte its file's rows, every record once."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamanon.metrics import check_k_anonymity
from streamanon.splicing import record_messages
from tests.service.kafka_helpers import (
    base_run,
    produce,
    read_release,
    release_kind,
    response,
)

QI = ["age", "income", "height"]


@pytest.mark.parametrize("incremental, late", [("nn_split_end", 120), ("two_stage", 120),
                                               ("nn_split_end", 0)])
def test_a_two_stage_release_is_spliced_from_the_base_release(service_factory, broker,
                                                               tmp_path, incremental, late):
    """``late`` 0: every response arrived before the base snapshot (a survey whose responses
    stopped before its close): the base release is the release."""
    svc = service_factory(k=5, incremental=incremental)
    svc.start()
    n_base = 400
    n = n_base + late
    msgs = [(f"R{i:06d}".encode(), response(i)) for i in range(n)]
    base_run(svc, broker.bootstrap, "wellbeing", msgs[:n_base])
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses", msgs[n_base:])
    svc.wait_for("wellbeing", lambda s: s["stored"] == n, what="the late responses")
    assert svc.post("/api/surveys/wellbeing/close")[0] == 202
    svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")

    log = svc.log.read_text()
    assert f"base release of {n_base} records prepared" in log
    assert "spliced into the base release made before close" in log
    # only the late records went to the compute process: it kept the snapshot's
    assert (f"{n - n_base} records after the base snapshot sent to the compute process, the "
            f"snapshot's {n_base} kept there") in log
    directory = Path(tmp_path / "releases" / "wellbeing")
    report = json.loads((tmp_path / "reports" / "wellbeing" / "report.json").read_text())
    assert report["mode"] == "two-stage" and report["spliced"] is True
    assert report["n_base"] == n_base and report["n"] == n
    # the records gated again at close: the late ones, and the members of the base cells they
    # joined (2MDAV leaves every base cell as it was)
    if incremental == "two_stage" or late == 0:
        assert report["n_spanned"] == late
    else:
        assert late < report["n_spanned"] < n
    assert set(report["close_steps_seconds"]) >= {"drain", "load", "compute",
                                                   "gate_and_table", "files", "publish"}
    # the base run's own steps, while the survey was open
    assert set(report["base_steps_seconds"]) == {"load", "prepare", "engine", "checkpoint",
                                                 "prepare_release"}
    assert all(seconds >= 0 for seconds in report["base_steps_seconds"].values())
    assert report["risk"] is not None  # measured after the release was out
    records, rows, manifest = read_release(broker.bootstrap, f"{svc.prefix}.wellbeing.release")
    parquet = pd.read_parquet(directory / "release.parquet")
    sent = [r.value for r in records if release_kind(r) == "record"]
    assert sent == record_messages(parquet)  # the file, row by row, in order
    assert manifest["count"] == len(rows) == n
    assert check_k_anonymity(parquet[QI].to_numpy(), 5).ok
    # every record once: the tickets (a label) are 0 .. n - 1, the answers as sent
    assert sorted(parquet["ticket"]) == list(range(n))
    assert collections.Counter(parquet["satisfaction"]) == collections.Counter(
        json.loads(v)["satisfaction"] for _, v in msgs)
    csv = pd.read_csv(directory / "release.csv")  # written after the publish
    assert np.array_equal(csv["ticket"], parquet["ticket"])
