"""The close of a survey (design spec §6): stop taking responses, drain those sent before, release.

The close is stored first, so a restart carries it on. Then each partition of the survey's
response topic is marked at its end offset: a message at or past its mark is dead-lettered
``closed``, one below it was sent before the close and is drained into the store
(:meth:`~.collector.KafkaCollector.take_close`, :meth:`~.collector.KafkaCollector.drain`).
A running base run is waited for; then the release (:mod:`streamanon.service.releasing`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from streamanon.errors import KAnonymityError, describe_error, withheld
from streamanon.service.collector import KafkaCollector
from streamanon.service.offsets import broker_errors
from streamanon.service.runtime import RunningSurvey, StoreCall
from streamanon.service.states import BASE_DONE, CLOSING, OPEN, RELEASED
from streamanon.service.store import Store
from streamanon.service.validation import Closure

log = logging.getLogger(__name__)


async def close_survey(survey: RunningSurvey, *, store: Store, in_store: StoreCall,
                       collector: KafkaCollector, release: Callable[[], Awaitable[None]],
                       before_marks: Callable[[str, float], Awaitable[None]] | None = None
                       ) -> None:
    """The close sequence of ``survey``'s survey, from wherever it stopped before a restart: the
    close request stored, the planner stopped, the close marks taken (or those stored), the
    drain, the base run waited for, ``CLOSING``, then ``release()``. Store calls go through
    ``in_store``. A failure is logged and stored as the survey's error, never raised.

    ``before_marks(survey, closed_at)``, when given, is awaited before the marks are taken:
    with several instances collecting, until every other one has stopped taking the
    survey's responses unjudged (:meth:`.leadership.Coordinator.followers_closed`); the drain
    then waits for the group's committed offsets, whichever instance committed them."""
    sid = survey.config.id
    try:
        st = await in_store(store.survey_state, sid)
        if st.state == RELEASED:
            survey.released()
            return
        if st.close_requested_at is None:
            st = await in_store(store.request_close, sid, time.time())
        survey.closing(st.close_requested_at)
        step = time.perf_counter()
        marks = await in_store(store.close_marks, sid)
        if marks is None and before_marks is not None:
            await before_marks(sid, st.close_requested_at)
        while marks is None:
            try:
                marks = await collector.take_close(
                    sid, st.close_requested_at,
                    lambda ends: in_store(store.save_close_marks, sid, ends))
            except broker_errors() as exc:
                log.warning("survey %s: close: cannot read the end offsets (%s); trying "
                            "again in 5 s", sid, describe_error(exc))
                await asyncio.sleep(5.0)
        log.info("survey %s: close: draining the responses sent before it (end offsets %s)",
                 sid, marks)
        await collector.drain(sid, marks)
        survey.drained(Closure(st.close_requested_at, marks, final=True),
                   time.perf_counter() - step)
        log.info("survey %s: close: drained", sid)
        step = time.perf_counter()
        if survey.base_task is not None:
            await asyncio.shield(survey.base_task)
        survey.record("wait_for_base", time.perf_counter() - step)
        st = await survey.stored_state()
        if st.state in (OPEN, BASE_DONE):
            await survey.move(CLOSING, "closing")
        await release()
    except Exception as exc:
        log.error("survey %s: close failed (%s)", sid, describe_error(exc),
                  exc_info=withheld(exc))
        await in_store(store.set_error, sid, f"close failed: {public_error(exc)}")


def public_error(exc: BaseException) -> str:
    """A failed close as the survey's error says it, on the public status: a failed privacy
    gate without the values it achieved (l and t of the unpublished cells, statistics of the
    raw answers: the log, the data holder's, has them), anything else as it is."""
    if isinstance(exc, KAnonymityError):
        return ("the release did not pass its privacy gate (k, l or t; the values it reached "
                "are in the service's log) and is not published")
    return describe_error(exc)
