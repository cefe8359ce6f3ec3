"""The argument types shared by the subcommands (``streamanon.cli._args``)."""

from __future__ import annotations

import argparse

import pytest

from streamanon.cli import main
from streamanon.cli._args import positive_float, share


@pytest.mark.parametrize("text,value", [("0", 0.0), ("0.2", 0.2), ("1", 1.0)])
def test_share_takes_a_number_from_zero_to_one(text, value):
    assert share(text) == value


@pytest.mark.parametrize("text,message", [
    ("1.5", "must be between 0 and 1, got 1.5"), ("-0.1", "must be between 0 and 1, got -0.1"),
    ("nan", "must be between 0 and 1, got nan"), ("a fifth", "expected a number, got 'a fifth'"),
])
def test_share_refuses_what_is_not_between_zero_and_one(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        share(text)


@pytest.mark.parametrize("text", ["0", "-2", "nan", "x"])
def test_positive_float_refuses_zero_negative_and_not_a_number(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_float(text)


@pytest.mark.parametrize("argv", [
    ["anonymize", "in.csv", "--k", "5", "--qi", "a", "--sensitive", "s"],
    ["verify", "in.csv", "--k", "5", "--qi", "a", "--sensitive", "s"],
    ["report", "in.csv", "out.csv", "--schema", "s.toml", "--k", "5"],
])
def test_t_outside_zero_to_one_is_refused_before_any_file_is_read(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--t", "1.5"])
    assert exit_.value.code == 2
    assert "argument --t: must be between 0 and 1, got 1.5" in capsys.readouterr().err
