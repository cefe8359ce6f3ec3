"""The anytime refinement (streamanon.refine): valid at every step, never worse, bounded."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from streamanon.engines import run_engine
from streamanon.errors import ParameterError
from streamanon.incremental import run_stage
from streamanon.incremental.run import TwoStageRun
from streamanon.metrics import check_partition, distortion, standardise
from streamanon.refine import (
    AUTO_SECONDS,
    parse_refine,
    refine,
    refine_partition,
    refine_window,
    window_budget,
)


@pytest.fixture(scope="module")
def two_stage():
    """Standardised records, the index of the first late one, and the MDAV base + NN-split-end
    partition of all of them."""
    X = standardise(np.random.default_rng(3).standard_normal((3000, 6)))
    n0 = 2700
    base = run_engine("mdav", X[:n0], 5)
    return X, n0, run_stage("nn_split_end", X[:n0], base, X[n0:], 5)


def original_cells(labels):
    return [set(np.flatnonzero(labels == c)) for c in range(labels.max() + 1)]


@pytest.mark.parametrize("k", [2, 5, 11])
def test_every_cell_has_at_least_k_and_every_record_is_in_one_cell(k):
    X = standardise(np.random.default_rng(k).standard_normal((900, 4)))
    X[:40] = X[0]  # duplicates
    start = run_engine("mdav", X, k)
    out = refine(X, start, k, max_rounds=10)
    check_partition(out, len(X), k)  # labels 0..c-1, none unused, each of k or more


def test_information_loss_never_increases_along_the_way(two_stage):
    X, n0, start = two_stage
    losses = [distortion(X, start)]
    for bound in (1, 10, 100, 1000, None):  # each run is a prefix of the next one
        out = refine(X, start, 5, first=np.arange(n0, len(X)), max_moves=bound)
        check_partition(out, len(X), 5)  # every intermediate state is k-anonymous
        losses.append(distortion(X, out))
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(losses))
    assert losses[-1] < losses[0]


def test_a_move_bound_stops_it_and_makes_it_deterministic(two_stage):
    X, n0, start = two_stage
    a = refine_partition(X, start, 5, first=np.arange(n0, len(X)), max_moves=50)
    b = refine_partition(X, start, 5, first=np.arange(n0, len(X)), max_moves=50)
    assert a.stopped == "max_moves" and a.operations == 50
    assert np.array_equal(a.labels, b.labels)


def test_it_stops_when_the_budget_is_spent():
    X = standardise(np.random.default_rng(0).standard_normal((2000, 5)))
    start = run_engine("mdav", X, 5)
    ticks = itertools.count()
    result = refine_partition(X, start, 5, budget_seconds=6.5, clock=lambda: float(next(ticks)))
    assert result.stopped == "budget" and result.seconds <= 6.5 + 4  # a few reads late
    check_partition(result.labels, len(X), 5)
    assert refine_partition(X, start, 5, budget_seconds=0).stopped == "budget"
    assert np.array_equal(refine(X, start, 5, budget_seconds=0), start)


def test_it_stops_when_no_move_improves(two_stage):
    X, _, start = two_stage
    done = refine_partition(X, start, 5, max_rounds=1000)
    assert done.stopped == "converged"
    again = refine_partition(X, done.labels, 5, max_rounds=1000)
    assert again.operations == 0 and np.array_equal(again.labels, done.labels)


def test_the_cells_the_increment_touched_come_first(two_stage):
    """In its first round only the touched cells are visited, so records leave no other cell:
    no cell ends up with the members of two different untouched cells (a split of a receiver
    keeps its members apart from every other cell's)."""
    X, n0, start = two_stage
    touched = set(start[n0:])

    def untouched_cells_mixed(out):
        owner = {}
        for c, members in enumerate(original_cells(start)):
            if c not in touched:
                owner.update(dict.fromkeys(members, c))
        for members in original_cells(out):
            if len({owner[i] for i in members if i in owner}) > 1:
                return True
        return False

    first = refine_partition(X, start, 5, first=np.arange(n0, len(X)), max_rounds=1)
    assert first.operations > 0 and not untouched_cells_mixed(first.labels)
    everywhere = refine_partition(X, start, 5, max_rounds=1)
    assert untouched_cells_mixed(everywhere.labels)


def test_it_brings_a_two_stage_release_closer_to_one_shot(two_stage):
    X, n0, start = two_stage
    out = refine(X, start, 5, first=np.arange(n0, len(X)))
    assert distortion(X, out) < 0.97 * distortion(X, start)


def test_small_inputs_and_bad_arguments():
    X = np.random.default_rng(0).standard_normal((7, 2))
    assert np.array_equal(refine(X, np.zeros(7, int), 5), np.zeros(7))  # one cell: nothing
    with pytest.raises(Exception, match="fewer than k"):
        refine(X, np.arange(7) % 2, 5)
    with pytest.raises(ParameterError):
        refine(X, np.zeros(6, int), 5)
    with pytest.raises(ParameterError):
        refine(X, np.zeros(7, int), 5, max_moves=-1)
    with pytest.raises(ParameterError):
        refine(X, np.zeros(7, int), 5, first=np.array([9]))


# -- the ``refine`` setting -------------------------------------------------------------------


@pytest.mark.parametrize(("value", "parsed"), [
    ("off", "off"), ("AUTO", "auto"), (30, 30.0), ("2.5", 2.5), ("2min", 120.0)])
def test_refine_setting_values(value, parsed):
    assert parse_refine(value) == parsed


@pytest.mark.parametrize("value", ["sometimes", 0, -3, "0s", True, None, float("inf")])
def test_a_bad_refine_setting_says_what_is_allowed(value):
    with pytest.raises(ParameterError, match='refine must be "off", "auto" or a number'):
        parse_refine(value)


def test_the_refinement_window():
    assert refine_window("off", deadline_at=100.0) == (None, None)
    assert refine_window("auto") == (AUTO_SECONDS, None)
    assert refine_window("auto", deadline_at=100.0, overhead=7.0) == (None, 93.0)
    assert refine_window(20, deadline_at=100.0, overhead=7.0) == (20.0, 93.0)
    assert window_budget(None, None) is None
    assert window_budget(20.0, 93.0, now=lambda: 80.0) == 13.0
    assert window_budget(None, 93.0, now=lambda: 99.0) == 0.0  # too late: none


def test_two_stage_run_refines_after_the_incremental_stage(two_stage):
    X, n0, _ = two_stage
    plain = TwoStageRun(5, "mdav", "nn_split_end").run(X, n0)
    refined = TwoStageRun(5, "mdav", "nn_split_end", refine=30).run(X, n0)
    assert plain.refinement is None and plain.refine_seconds == 0
    assert refined.refinement is not None and refined.refinement.stopped == "converged"
    assert refined.distortion < plain.distortion
    assert refined.report()["refine_stopped"] == "converged"
    late = TwoStageRun(5, "mdav", "nn_split_end", refine="auto", refine_until=0.0).run(X, n0)
    assert late.refinement.stopped == "budget" and late.distortion == plain.distortion
    with pytest.raises(ParameterError, match="refine"):
        TwoStageRun(5, refine="soon")


def test_the_survey_configuration_checks_refine():
    from streamanon.service.config import ConfigError, parse_config

    env = {"STREAMANON_HMAC_KEY": "k" * 32, "STREAMANON_HTTP_TOKEN": "t" * 32}

    def survey(**over):
        return {"surveys": [{"id": "s1", "k": 5, "schema": {
            "rid": {"role": "identifier"},
            "age": {"role": "quasi_identifier", "type": "int"}}, **over}]}

    assert parse_config(survey(), env).surveys[0].refine == "off"
    assert parse_config(survey(refine="auto"), env).surveys[0].refine == "auto"
    assert parse_config(survey(refine="45s"), env).surveys[0].refine == 45.0
    with pytest.raises(ConfigError, match="refine"):
        parse_config(survey(refine="later"), env)


def test_simulate_rejects_a_bad_refine_setting(capsys):
    from streamanon.cli import main

    assert main(["simulate", "--dry-run", "--refine", "later", "--n", "100", "--k", "5"]) != 0
    assert 'refine must be "off", "auto"' in capsys.readouterr().err


def test_the_planner_assumes_the_refinement_s_own_auto_budget():
    from scheduler.live import AUTO_REFINE_SECONDS

    assert AUTO_SECONDS == AUTO_REFINE_SECONDS  # the core may not import the scheduler
