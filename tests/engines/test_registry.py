from __future__ import annotations

import numpy as np
import pytest

from streamanon.engines import available_engines, get_engine, run_engine
from streamanon.errors import InputError, ParameterError


def test_mdav_is_registered_with_source():
    info = get_engine("mdav")
    assert "001" in info.source
    assert "mdav" in [e.name for e in available_engines()]


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(ParameterError, match=r"available engines: .*mdav"):
        get_engine("nope")


def test_unknown_parameter_is_rejected():
    with pytest.raises(ParameterError, match="no parameter colour"):
        run_engine("mdav", np.zeros((5, 1)), 2, colour="red")


@pytest.mark.parametrize(
    "X,k,error,match",
    [
        (np.zeros((5, 2)), 0, ParameterError, "at least 1"),
        (np.zeros((5, 2)), 2.5, ParameterError, "integer"),
        (np.zeros((3, 2)), 4, InputError, "3 records cannot form a cell of k = 4"),
        (np.array([[1.0, np.nan]] * 5), 2, InputError, "NaN or infinite"),
        (np.array([[1.0, np.inf]] * 5), 2, InputError, "NaN or infinite"),
        (np.zeros((5, 0)), 2, InputError, "at least one quasi-identifier"),
        (np.zeros(5), 2, InputError, "2-D"),
        (np.array([["a"]] * 5), 2, InputError, "numeric"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(X, k, error, match):
    with pytest.raises(error, match=match):
        run_engine("mdav", X, k)
