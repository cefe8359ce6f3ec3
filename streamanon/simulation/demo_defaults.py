"""The demo's settings a user can change (``streamanon demo --help`` shows them): kept apart
from :mod:`streamanon.simulation.demo`, which loads the scheduler, so that building the
command line's parser loads no more than it needs."""

#: The survey's quasi-identifiers and k, its base engine and incremental stage.
M, K, ENGINE, INCREMENTAL = 15, 10, "ona_star", "auto"

#: Seconds the demo aims to take after set-up: the survey open, its release, the one-shot
#: release of the same records.
BUDGET_SECONDS = 180.0
