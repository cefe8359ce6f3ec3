"""The one exception family of streamanon.

Every message says what was wrong and, where it helps, what to do. The CLI prints the message
on one line and exits non-zero; it never shows a traceback for these.
"""

from __future__ import annotations


class StreamanonError(Exception):
    """Base class of every error streamanon raises on purpose."""


class InputError(StreamanonError):
    """The data given to streamanon cannot be used: missing file, bad column, bad value."""


class ParameterError(StreamanonError):
    """A parameter is out of range or unknown (k, engine name, engine parameter)."""


class KAnonymityError(StreamanonError):
    """A release failed the k-anonymity gate; it must not be published."""
