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


def test_a_numba_without_a_cache_folder_is_one_line_saying_what_to_set(monkeypatch, capsys):
    """numba raises RuntimeError("cannot cache function ...: no locator available ...") when no
    folder it tries may be written (an account without a home, a package installed read-only):
    one line naming NUMBA_CACHE_DIR, not a traceback; any other RuntimeError stays one."""
    import pytest

    from streamanon import cli
    from streamanon.cli import anonymize

    def no_cache(args):
        raise RuntimeError("cannot cache function '_canonical': no locator available for file "
                           "'/usr/lib/python3/site-packages/streamanon/tuples.py'")

    monkeypatch.setattr(anonymize, "cmd_engines", no_cache)
    assert cli.main(["engines"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.startswith("streamanon: error: numba has no folder") and "NUMBA_CACHE_DIR" in err
    assert "\n" not in err

    def other(args):
        raise RuntimeError("something else")

    monkeypatch.setattr(anonymize, "cmd_engines", other)
    with pytest.raises(RuntimeError, match="something else"):
        cli.main(["engines"])
