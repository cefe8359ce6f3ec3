"""The ``streamanon`` command line.

Every subcommand has ``--help``. Errors print one line, ``streamanon: error: ...``, and exit
with status 2 (bad input or parameters) or 1 (a check failed, or a write failed); ``--debug``
shows tracebacks. ``kill -USR1 PID`` makes a running command print the stack of each of its
threads to stderr and go on (for a bug report about a command that seems stuck).
"""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from collections.abc import Sequence

from streamanon import __version__
from streamanon.cli import anonymize, plan, report, schema, serve, simulate, verify
from streamanon.errors import StreamanonError

EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2

#: What numba says when no folder it tries may hold its compiled kernels, and what to do.
NO_CACHE = "no locator available"
NO_CACHE_TEXT = ("numba has no folder it may write for its compiled kernels (NUMBA_CACHE_DIR, "
                 "the package's __pycache__, ~/.cache/numba); set NUMBA_CACHE_DIR to one this "
                 "account may write (the getting-started page: a cache several accounts share)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamanon",
        description="Streaming, incremental k-anonymous microaggregation for large e-surveys.",
    )
    parser.add_argument("--version", action="version", version=f"streamanon {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    anonymize.register(sub)
    verify.register(sub)
    report.register(sub)
    schema.register(sub)
    plan.register(sub)
    serve.register(sub)
    simulate.register(sub)
    return parser


def entry() -> int:
    """The ``streamanon`` process: :func:`main`, with ``kill -USR1`` printing each thread's
    stack to stderr (left out of :func:`main`, which a host program may call)."""
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    return main()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except StreamanonError as exc:
        if args.debug:
            raise
        print(f"streamanon: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # disk full, permission denied, ...: nothing partial was written
        if args.debug:
            raise
        print(f"streamanon: error: {exc}", file=sys.stderr)
        return EXIT_CHECK_FAILED
    except KeyboardInterrupt:
        print("streamanon: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        if args.debug or NO_CACHE not in str(exc):
            raise
        print(f"streamanon: error: {NO_CACHE_TEXT}", file=sys.stderr)
        return EXIT_USAGE
