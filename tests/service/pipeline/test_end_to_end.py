"""The service against the real embedded broker: responses in, one k-anonymous release out."""

from __future__ import annotations

import collections
import hashlib
import json
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from streamanon.metrics import check_k_anonymity
from tests.service.kafka_helpers import DROP, headers, produce, read_release, read_topic, response

QI = ["age", "income", "height"]


def scrape(svc) -> dict[tuple[str, tuple], float]:
    """``/metrics`` as {(sample name, sorted labels): value}; also checks that no respondent
    id or other raw text appears in it."""
    from prometheus_client.parser import text_string_to_metric_families

    request = urllib.request.Request(  # the data holder's scrape: with the control token
        f"{svc.http}/metrics", headers={"Authorization": f"Bearer {svc.token}"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    assert "R0000" not in text and "Infinity" not in text.replace("+Inf", "")
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def invalid_messages(start: int) -> list[tuple[bytes, str]]:
    """One message per reason, with the reason the dead-letter topic must give."""
    return [
        (b"{not json", "invalid_json"),
        (b"[1, 2, 3]", "not_an_object"),
        (response(start, age=DROP), "missing_field"),
        (response(start + 1, shoe_size=44), "unexpected_field"),
        (response(start + 2, age="old"), "wrong_type"),
        (response(start + 3, height=170.5).replace(b"170.5", b"Infinity"), "not_finite"),
        (response(start + 4, age=200), "out_of_bounds"),
        # respondent R000007 already answered, and this is another answer
        (response(7, age=99), "duplicate_respondent"),
    ]


def test_end_to_end_release_and_dead_letters(service_factory, broker, tmp_path):
    svc = service_factory(k=5)
    svc.start()
    n_valid = 600
    valid = [(f"R{i:06d}".encode(), response(i)) for i in range(n_valid)]
    invalid = invalid_messages(10_000)
    topic = f"{svc.prefix}.wellbeing.responses"
    # R000008's answer is sent twice (a platform retrying): the same record, stored once
    # R000007's second answer goes with R000007's key, so to the same partition after the first
    # (across partitions Kafka keeps no order, and "first" would be whichever is read first)
    produce(broker.bootstrap, topic, valid[:300] + [
        (b"R000007" if reason == "duplicate_respondent" else None, m) for m, reason in invalid]
        + valid[300:] + [valid[8]])

    svc.wait_for("wellbeing", lambda s: s["stored"] == n_valid and s["redelivered"] == 1
                 and sum(s["dead_lettered"].values()) == len(invalid), what="ingest")
    before = scrape(svc)
    assert before[("streamanon_records_received_total", (("survey", "wellbeing"),))] \
        == n_valid + len(invalid) + 1
    assert before[("streamanon_records_stored_total", (("survey", "wellbeing"),))] == n_valid
    assert before[("streamanon_records_redelivered_total", (("survey", "wellbeing"),))] == 1
    for _, reason in invalid:
        key = ("streamanon_records_dead_lettered_total",
               (("reason", reason), ("survey", "wellbeing")))
        assert before[key] == 1, reason
    assert before[("streamanon_releases_published_total", (("survey", "wellbeing"),))] == 0
    assert before[("streamanon_survey_state", (("state", "OPEN"), ("survey", "wellbeing")))] == 1
    assert svc.post("/api/surveys/wellbeing/close", token="wrong")[0] == 401
    code, _ = svc.post("/api/surveys/wellbeing/close")
    assert code == 202
    status = svc.wait_for("wellbeing", lambda s: s["state"] == "RELEASED", what="release")
    assert status["release"]["n"] == n_valid
    after = scrape(svc)
    assert after[("streamanon_releases_published_total", (("survey", "wellbeing"),))] == 1
    assert after[("streamanon_survey_state",
                  (("state", "RELEASED"), ("survey", "wellbeing")))] == 1
    for name in ("base_seconds", "incremental_seconds", "publish_seconds",
                 "close_to_release_seconds", "release_distortion"):
        assert after[(f"streamanon_{name}_count", (("survey", "wellbeing"),))] == 1, name
    assert after[("streamanon_release_distortion_sum", (("survey", "wellbeing"),))] \
        == pytest.approx(status["release"]["distortion"])

    _, rows, manifest = read_release(broker.bootstrap, f"{svc.prefix}.wellbeing.release")
    # exactly the valid records' confidential values, as a multiset
    expected = collections.Counter(json.loads(v)["satisfaction"] for _, v in valid)
    assert collections.Counter(r["satisfaction"] for r in rows) == expected
    # nothing that identifies or orders a record
    assert set(rows[0]) == {"age", "income", "height", "satisfaction", "ticket"}
    frame = pd.DataFrame(rows)
    assert check_k_anonymity(frame[QI].to_numpy(), 5).ok
    # the manifest matches the files and the messages
    release_dir = Path(tmp_path / "releases" / "wellbeing")
    assert manifest["count"] == len(rows) == n_valid
    assert manifest["sha256"] == hashlib.sha256(
        (release_dir / "release.parquet").read_bytes()).hexdigest()
    assert manifest["k"] == 5
    parquet = pd.read_parquet(release_dir / "release.parquet")
    assert len(parquet) == n_valid and check_k_anonymity(parquet[QI].to_numpy(), 5).ok
    # centroids are in original units: the mean of each float QI over the release is
    # preserved; the int QI (age) is released as its cell mean rounded, an integer within
    # 0.5 of it, so its overall mean moves by at most 0.5
    originals = np.array([[json.loads(v)[c] for c in QI] for _, v in valid])
    assert np.allclose(parquet[QI[1:]].mean().to_numpy(), originals[:, 1:].mean(axis=0))
    assert parquet["age"].dtype == np.int64
    assert abs(parquet["age"].mean() - originals[:, 0].mean()) <= 0.5
    report_text = (tmp_path / "reports" / "wellbeing" / "report.json").read_text()
    report = json.loads(report_text)
    assert report["n"] == n_valid and report["k"] == 5
    for key in ("engine", "nu", "arrival_coefficient", "n_base", "base_seconds",
                "incremental_seconds", "close_to_release_seconds", "distortion",
                "information_loss"):
        assert key in report
    # the report names every schema field with its role (schema order) and what the release
    # did with it, so a statistician can read the release without the service's config
    assert report["quasi_identifiers"] == QI
    assert report["columns"] == [
        {"name": "respondent_id", "role": "identifier", "type": None, "treatment": "dropped"},
        {"name": "age", "role": "quasi_identifier", "type": "int",
         "treatment": "microaggregated"},
        {"name": "income", "role": "quasi_identifier", "type": "float",
         "treatment": "microaggregated"},
        {"name": "height", "role": "quasi_identifier", "type": "float",
         "treatment": "microaggregated"},
        {"name": "satisfaction", "role": "confidential", "type": "int", "treatment": "unchanged"},
        {"name": "ticket", "role": "confidential", "type": "int", "treatment": "unchanged"},
        {"name": "comment", "role": "ignore", "type": "str", "treatment": "dropped"},
    ]
    assert {c["name"] for c in report["columns"] if c["treatment"] != "dropped"} \
        == set(rows[0]) == set(parquet.columns)
    assert "R0000" not in report_text  # names and roles only, never a response value

    dead = read_topic(broker.bootstrap, f"{svc.prefix}.wellbeing.deadletter",
                      expected=len(invalid))
    assert sorted(headers(r)["streamanon-reason"] for r in dead) == sorted(
        reason for _, reason in invalid)
    assert sorted(r.value for r in dead) == sorted(m for m, _ in invalid)  # original bytes
    assert all(headers(r)["streamanon-source"].startswith(topic) for r in dead)

    # after close, a late response is dead-lettered as closed and nothing is released twice
    produce(broker.bootstrap, topic, [(b"late", response(99_999))])
    svc.wait_for("wellbeing", lambda s: s["dead_lettered"].get("closed") == 1, what="late")
    assert svc.post("/api/surveys/wellbeing/close")[0] == 202
    again = read_topic(broker.bootstrap, f"{svc.prefix}.wellbeing.release",
                       expected=n_valid + 2, timeout=5)
    assert len(again) == n_valid + 1


def test_store_file_is_private_and_holds_no_identifiers(service_factory, broker, tmp_path):
    svc = service_factory(k=3)
    svc.start()
    produce(broker.bootstrap, f"{svc.prefix}.wellbeing.responses",
            [(None, response(i)) for i in range(40)])
    svc.wait_for("wellbeing", lambda s: s["stored"] == 40, what="ingest")
    db = tmp_path / "store" / "streamanon.db"
    assert db.stat().st_mode & 0o777 == 0o600
    svc.stop()
    blob = b"".join(p.read_bytes() for p in db.parent.iterdir())
    assert b"R000001" not in blob and b"respondent_id" not in blob
