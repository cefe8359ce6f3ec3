"""The spliced release of the service's stored records: its messages are the rows of the
release (and of its file) whatever JSON kind the late records give a column."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from streamanon.io import write_table
from streamanon.release import prepare_stored, release_prepared
from streamanon.service.config import parse_config
from streamanon.service.publisher import records_frame
from streamanon.service.store import Records
from streamanon.splicing import prepare_base, record_messages, splice

ENV = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}
K = 4


def _survey():
    return parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:1"}, "surveys": [
        {"id": "s1", "k": K, "schema": {
            "rid": {"role": "identifier"},
            "age": {"role": "quasi_identifier"},
            "income": {"role": "quasi_identifier"},
            # a float answer: the collector stores JSON 3 as the int 3 (validation allows
            # int and float for a float field and keeps the value as sent)
            "score": {"role": "confidential", "type": "float"}}}]}, ENV).surveys[0]


def _records(rng: np.random.Generator, n: int, scores: list[Any]) -> Records:
    qi = np.column_stack([rng.integers(18, 90, n), rng.normal(30000, 5000, n)]).astype(float)
    return Records(seq=np.arange(n), arrived_at=np.zeros(n), qi=np.ascontiguousarray(qi),
                   confidential=[{"score": s} for s in scores], labels=[None] * n)


def test_spliced_messages_are_the_rows_of_the_release_when_a_late_value_widens_a_column(
        tmp_path):
    """The base release's messages are serialised from the base snapshot's frame, whose
    column dtypes are inferred from the base records alone. When a late record widens a
    column (every base score an integral JSON number, a late one 2.5: int64 -> float64), the
    reused base messages say ``"score":3`` while the released table, its Parquet file, a
    release made from scratch and the resend after a restart (made from the file) all say
    ``3.0``: the published bytes depend on whether the release was spliced, and the messages
    are no longer the rows of the file their manifest's checksum names."""
    sc = _survey()
    rng = np.random.default_rng(5)
    n_base, n_late = 40, 8
    base_records = _records(rng, n_base, [int(v) for v in rng.integers(0, 10, n_base)])
    late_records = _records(rng, n_late, [2.5] * n_late)
    base_frame = records_frame(base_records, sc)  # as Service._base makes it
    frame = pd.concat([base_frame, records_frame(late_records, sc)],  # as Releaser.write
                      ignore_index=True)
    base_labels = np.arange(n_base) // K
    labels = np.concatenate([base_labels, base_labels.max() + 1 + np.arange(n_late) // K])
    base = prepare_base(base_frame, prepare_stored(base_frame, sc.schema, K), base_labels, K,
                        seed=1)
    own = prepare_stored(frame, sc.schema, K)
    release, messages, order = splice(base, frame, own, labels, K, seed=2)

    scratch = release_prepared(frame, own, labels, K, seed=None, shuffle=False)
    from_scratch = record_messages(scratch.table.iloc[order].reset_index(drop=True))
    write_table(release.table, tmp_path / "release.parquet")
    from_file = record_messages(pd.read_parquet(tmp_path / "release.parquet"))  # a restart
    sent = list(messages)
    assert sent == record_messages(release.table)
    assert sent == from_file
    assert sent == from_scratch




def test_base_messages_are_not_reused_when_a_column_changed_its_json_kind():
    """The guard behind the fix above, for any column whose type the late records change
    (here a label-like text column that a frame built elsewhere made numeric): the base
    messages are then made again, and the messages stay the rows of the release."""
    sc = _survey()
    rng = np.random.default_rng(6)
    base_records = _records(rng, 40, [1.0] * 40)
    frame_base = records_frame(base_records, sc).assign(extra=np.arange(40))  # int
    late = records_frame(_records(rng, 8, [1.0] * 8), sc).assign(extra=np.full(8, 0.5))
    frame = pd.concat([frame_base, late], ignore_index=True)  # extra: float now
    base_labels = np.arange(40) // K
    labels = np.concatenate([base_labels, base_labels.max() + 1 + np.arange(8) // K])
    base = prepare_base(frame_base, prepare_stored(frame_base, sc.schema, K), base_labels, K)
    release, messages, _ = splice(base, frame, prepare_stored(frame, sc.schema, K), labels, K)
    assert list(messages) == record_messages(release.table)
