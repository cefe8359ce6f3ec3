"""A survey's differentially private release at close (``[surveys] epsilon``, streamanon.dp).

Its cells are runs of one order fixed by the schema, so they need neither the base run nor the
incremental stage: the whole release is a sort and one draw of noise, made at close from every
stored record. In order:

1. the release is drawn in memory from every stored record, with a generator seeded by the
   operating system's entropy and never stored; a release that cannot be drawn (a value
   outside its declared domain) spends nothing;
2. the survey's privacy budget is charged in the store (:meth:`Store.spend_privacy`) before
   any value leaves the process: a release drawn and then lost in a crash after the charge
   counts as spent, since nobody can tell whether its values were seen; a release the budget
   cannot pay for is refused (:class:`streamanon.errors.BudgetSpentError`, the survey's
   error) and its values are dropped unseen. A release written before a restart is published
   again from its files, never drawn again;
3. its files are written and it is noted as the survey's release, as a k-anonymous one is.

The manifest on the release topic carries no distortion (a statistic of the raw answers); the
report kept by the service has the guarantee, the noise per attribute, the loss and the
budget.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import numpy as np
import pandas as pd

from streamanon import dp
from streamanon.errors import DomainRefusedError
from streamanon.release import decoded_original, prepare_stored
from streamanon.service.publisher import record_messages, release_columns
from streamanon.service.reports import ReleaseReport
from streamanon.service.runtime import RunningSurvey
from streamanon.service.store import ReleaseRow

log = logging.getLogger(__name__)



async def write_private(releaser: Any, survey: RunningSurvey, frame: pd.DataFrame,
                        ahead: int) -> tuple[ReleaseRow, pd.DataFrame, list[bytes], np.ndarray]:
    """Charge the budget, draw the release of the stored records ``frame``, write its files
    and note it as written (the steps above). Returns the row, the shuffled table, its
    messages (one per row, in row order) and its order (row i is record ``order[i]``).
    ``releaser``: the service's :class:`~streamanon.service.releasing.Releaser`, of which only
    the public parts are used: its ``store`` through ``in_store`` (the store thread),
    ``in_thread``, and its steps ``write_files`` and ``save_written``, as a k-anonymous
    release's; ``ahead``: the records read ahead of the close."""
    sc = survey.config
    sid = sc.id
    n = len(frame)
    release_id = uuid.uuid4().hex
    budget = sc.privacy_budget  # None: not differentially private, charged nothing
    assert sc.private, "a private release only"
    if sc.out_of_domain == "refuse" and await releaser.in_store(releaser.store.refused, sid):
        # no count in the message: the survey's error is on the public status
        raise DomainRefusedError(
            "answers outside the declared domain were refused (out_of_domain = \"refuse\"; "
            "see the dead-letter topic): a release without them would tell that they were "
            "sent, so none is drawn; out_of_domain = \"clamp\" releases every answer put in "
            "its domain")
    started = time.time()
    step = time.perf_counter()

    def draw() -> tuple[dp.DPRelease, list[bytes]]:  # in memory: nothing has left yet
        original = decoded_original(frame, prepare_stored(frame, sc.schema, sc.k))
        made = dp.release(original, sc.schema, sc.k, sc.epsilon, sc.dp_mechanism, sc.dp_scope,
                          delta=sc.delta)
        return made, record_messages(made.table)

    made, messages = await releaser.in_thread(draw)
    # charged before any value leaves the process (files, the topic): a release that cannot
    # be drawn spends nothing, one drawn and lost in a crash after this counts as spent
    if budget is not None:
        spent = await releaser.in_store(releaser.store.spend_privacy, sid, release_id,
                                        sc.epsilon, budget)
        charge = {"spent": spent, "total": budget, "this_release": sc.epsilon}
        if sc.delta is not None:  # zCDP calibrated to (epsilon, delta): its one release
            charge["delta"] = sc.delta
        log.info("survey %s: differentially private release %s of %d records drawn (epsilon = "
                 "%g, %s, %s; %g of the survey's budget of %g spent with it)", sid, release_id,
                 n, sc.epsilon, sc.dp_mechanism, sc.dp_scope, spent, budget)
    else:  # a budget record would state a bound that does not hold
        charge = {"applies": False, "why": "the release is not differentially private: no "
                  "epsilon bounds what its releases tell together, so none is charged"}
        log.info("survey %s: private release %s of %d records drawn (epsilon = %g, %s, %s; "
                 "not differentially private, no budget charged)", sid, release_id, n,
                 sc.epsilon, sc.dp_mechanism, sc.dp_scope)
    for warning in made.report["warnings"]:  # from the settings alone: no answer in them
        log.warning("survey %s: %s", sid, warning)
    survey.record("compute", time.perf_counter() - step)
    files = await releaser.write_files(survey, made.table)
    closed_at = (await releaser.in_store(releaser.store.survey_state, sid)).close_requested_at
    guarantee = {**made.report, "budget": charge}
    report = private_report(survey, n, release_id, files, guarantee, closed_at, started, ahead)
    row = await releaser.save_written(survey, report, 0)  # its generator is never stored
    return row, made.table, messages, made.order


def private_report(survey: RunningSurvey, n: int, release_id: str, files: dict[str, str],
                   guarantee: dict[str, Any], closed_at: float | None, started: float,
                   ahead: int) -> ReleaseReport:
    """The release report of a drawn release: one-shot at close, no distortion, the
    guarantee in ``differential_privacy``."""
    sc = survey.config
    loss = guarantee["information_loss"]
    return ReleaseReport(
        survey=sc.id, release_id=release_id, n=n, m=len(sc.quasi_identifiers), k=sc.k,
        quasi_identifiers=list(sc.quasi_identifiers), columns=release_columns(sc),
        engine=dp.engine_name(sc.dp_mechanism), incremental=None, mode="one-shot", nu=0.0, n_base=0,
        n_increment=n, arrival_coefficient=None, planned_nu=None,
        predicted_seconds_after_close=None, one_shot_estimate_seconds=0.0,
        base_started_at=None, closed_at=closed_at, base_seconds=0.0, incremental_seconds=0.0,
        compute_seconds_after_close=time.time() - (closed_at or started), distortion=None,
        information_loss=loss.get("il", 0.0), rejected=dict(survey.ingest.rejected), files=files,
        read_ahead=ahead, n_spanned=n, differential_privacy=guarantee)
