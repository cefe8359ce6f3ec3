"""The command line run in the test's process."""

from __future__ import annotations

import contextlib
import io

from streamanon.cli import main


def run(argv: list[str]) -> tuple[int, str, str]:
    """``streamanon ARGV`` in this process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()
