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


class PublishError(StreamanonError):
    """The release topic did not take a release's messages (a broker fault or timeout):
    the publish is tried again."""


class BudgetSpentError(StreamanonError):
    """A differentially private release would spend more of its survey's privacy budget
    than is left: it is not drawn."""


class DomainRefusedError(StreamanonError):
    """An epsilon survey with ``out_of_domain = "refuse"`` dead-lettered answers outside their
    declared domain: no release is drawn without them."""


class WithheldError(StreamanonError):
    """Stands in for an exception whose message is withheld (see :func:`withheld`)."""


_WITHHELD = "message withheld: it may hold a response value"


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" \
        else f"{kind.__module__}.{kind.__qualname__}"


def _safe_message(exc: BaseException) -> str | None:
    """The message of ``exc`` if it cannot hold a value, else None."""
    if isinstance(exc, StreamanonError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno is not None and exc.strerror:
        return f"[Errno {exc.errno}] {exc.strerror}"  # without the file name
    return None


def describe_error(exc: BaseException) -> str:
    """One line about ``exc`` that is safe to show anywhere (status, dashboard, logs).

    The message of a :class:`StreamanonError` is kept: streamanon writes those, and they name
    fields, counts and what to do, never a value. An ``OSError`` keeps its errno and reason (a
    full disk says so). Any other message may quote the data that caused it (pyarrow: ``Could
    not convert 'VALUE' with type str``), so only the exception's type is named.
    """
    message = _safe_message(exc)
    if isinstance(exc, StreamanonError):
        return str(message)
    if message is not None:
        return f"{type(exc).__name__}: {message}"
    return f"{type(exc).__name__} ({_WITHHELD}; the log has the traceback)"


def withheld(exc: BaseException) -> BaseException:
    """``exc`` for logging (``log.error(..., exc_info=withheld(exc))``): the same traceback and
    chain of causes, with every exception whose message :func:`describe_error` would not show
    replaced by a :class:`WithheldError` that names its type and, when safe, its message."""
    seen: dict[int, BaseException | None] = {}

    def copy(e: BaseException | None) -> BaseException | None:
        if e is None:
            return None
        if id(e) in seen:
            return seen[id(e)] or e  # a cycle: its copy is being made
        seen[id(e)] = None
        cause, context = copy(e.__cause__), copy(e.__context__)
        if isinstance(e, StreamanonError) and cause is e.__cause__ \
                and context is e.__context__:
            seen[id(e)] = e  # ours, and nothing foreign below it
            return e
        message = _safe_message(e)
        stand_in = WithheldError(f"{_type_name(e)}: {message}" if message is not None
                                 else f"{_type_name(e)} ({_WITHHELD})")
        stand_in.__traceback__ = e.__traceback__
        stand_in.__cause__, stand_in.__context__ = cause, context
        stand_in.__suppress_context__ = e.__suppress_context__
        seen[id(e)] = stand_in
        return stand_in

    return copy(exc) or exc
