"""``model_parameters``: the parameters that select an engine's cost model."""

from __future__ import annotations

import numpy as np
import pytest

from streamanon.engines import model_parameters
from streamanon.errors import ParameterError


def test_one_model_for_one_setting_however_it_is_written():
    six = {"start": "mdav", "max_rounds": 6}
    assert model_parameters("ona_star", six) == six
    assert model_parameters("ona_star", {"max_rounds": 6.0, "start": "mdav"}) == six
    assert model_parameters("ona_star", {"max_rounds": np.int64(6), "start": "mdav"}) == six
    # a float that is a real fraction stays one
    assert model_parameters("dependence", {"lam": 0.25}) == {"lam": 0.25}


def test_the_defaults_written_out_are_the_defaults_model():
    assert model_parameters("ona_star", {"max_rounds": 30, "start": "mdav_star"}) == {}
    assert model_parameters("mdav", {"screen": True}) == {}
    assert model_parameters("mdav", {"screen": False}) == {"screen": False}


def test_data_and_progress_are_not_settings():
    assert model_parameters("lda_mdav", {"labels": "smoker", "alpha": 2.0}) == {"alpha": 2}
    assert model_parameters("mdav", {"progress": print}) == {}


def test_nested_parameters_are_normalised_too():
    got = model_parameters("dependence", {"engine": "ona_star",
                                          "engine_params": {"max_rounds": 6.0}})
    assert got == {"engine": "ona_star", "engine_params": {"max_rounds": 6}}


def test_an_unknown_parameter_is_refused():
    with pytest.raises(ParameterError, match="has no parameter rounds"):
        model_parameters("ona_star", {"rounds": 3})
