"""The privacy budget: which releases spend it (:func:`charged`), and the file ledger of the
releases made by ``anonymize --epsilon --budget-ledger FILE`` (:class:`BudgetLedger`).

Every differentially private release of the same respondents adds its epsilon to what they
tell together (sequential composition), so the ledger keeps the sum and refuses the release
that would take it over the budget. Only a release that is differentially private as a table
is charged: a budget record for any other one would state a bound that does not hold.

The ledger is a JSON file, private to its owner (mode 0600), replaced whole at each release
(written to a temporary file in the same directory, then renamed over it) while an exclusive
``flock`` on its directory is held, so that two runs at once never both pay from the same sum
and a crash leaves the old ledger or the new one, never half of one. The directory is locked
rather than the file, because the rename gives the file a new inode: a lock on the old one
would not exclude a run that opened the new one.

It may import the standard library and :mod:`streamanon.errors`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from streamanon.errors import BudgetSpentError, InputError

#: The ``format`` of a ledger file.
FORMAT = "streamanon-budget-ledger/1"
#: What a sum may exceed the budget by and still count as within it (sums of decimals).
SLACK = 1e-9


def charged(mechanism: str, scope: str) -> bool:
    """Whether a release drawn by ``mechanism`` over ``scope`` (:mod:`streamanon.dp`) spends
    privacy budget: only the ``insensitive`` mechanism over ``all`` the released columns makes
    a table that is differentially private (:func:`streamanon.dp.guarantee`).
    ``individual_ranking`` pairs values in rows without noise, and the ``quasi_identifiers``
    scope publishes the confidential answers as they are: no epsilon bounds either."""
    return mechanism == "insensitive" and scope == "all"


def sha256_of(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, in hex: which data a release was drawn from."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Spending:
    """A release's charge: ``spent`` in all with it, of ``budget``."""

    epsilon: float
    spent: float
    budget: float

    @property
    def remaining(self) -> float:
        return max(self.budget - self.spent, 0.0)

    def to_json(self) -> dict[str, float]:
        return {"spent": self.spent, "total": self.budget, "this_release": self.epsilon,
                "remaining": self.remaining}


class BudgetLedger:
    """The ledger file at ``path``; ``budget`` is the epsilon all its releases may spend (None:
    the one the file records, or for a new file the first release's epsilon, one release).
    A budget given for a file that records another replaces it from the next release on,
    as raising ``epsilon_budget`` does in the service: a decision, noted with the release."""

    def __init__(self, path: str | os.PathLike[str], budget: float | None = None) -> None:
        self.path = Path(path)
        self.budget = budget

    def read(self) -> dict[str, Any]:
        """The ledger's contents (an empty ledger when the file does not exist)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {"format": FORMAT, "budget": None, "spent": 0.0, "releases": []}
        except OSError as exc:
            raise InputError(f"budget ledger {self.path}: cannot read it ({exc.strerror})"
                             ) from None
        try:
            ledger = json.loads(text)
            if ledger.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            ledger["spent"] = sum(float(r["epsilon"]) for r in ledger["releases"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"budget ledger {self.path} is not a streamanon budget ledger "
                             f"({exc}): give the file an earlier run wrote, or a new path"
                             ) from None
        return ledger

    def _budget(self, ledger: dict[str, Any], epsilon: float) -> float:
        if self.budget is not None:
            return self.budget
        return float(ledger["budget"]) if ledger["budget"] is not None else epsilon

    def check(self, epsilon: float) -> Spending:
        """Refuse (:class:`BudgetSpentError`) a release of ``epsilon`` the budget cannot pay
        for now, before anything is read or drawn; :meth:`charge` checks again under the lock.
        Returns what the release would spend."""
        return self._afford(self.read(), epsilon)

    def _afford(self, ledger: dict[str, Any], epsilon: float) -> Spending:
        budget = self._budget(ledger, epsilon)
        spent = float(ledger["spent"])
        if spent + epsilon > budget * (1 + SLACK):
            raise BudgetSpentError(
                f"budget ledger {self.path}: a release with epsilon = {epsilon:g} would spend "
                f"{spent + epsilon:g} of the privacy budget of {budget:g} ({spent:g} spent by "
                f"{len(ledger['releases'])} release(s) before); nothing was written. Raise "
                "--epsilon-budget to allow it, knowing that every release of the same "
                "respondents adds to what they tell together")
        return Spending(epsilon=epsilon, spent=spent + epsilon, budget=budget)

    def charge(self, epsilon: float, release: dict[str, Any]) -> Spending:
        """Record a release of ``epsilon`` (``release``: what to note of it, e.g. mechanism,
        input, output), or refuse it (:class:`BudgetSpentError`) recording nothing, when the
        budget cannot pay for it. Atomic against other runs on the same file."""
        with self._locked():
            ledger = self.read()
            spending = self._afford(ledger, epsilon)
            entry = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     "epsilon": epsilon, **release, "budget": spending.budget}
            ledger.update(budget=spending.budget, spent=spending.spent,
                          releases=[*ledger["releases"], entry])
            self._replace(ledger)
        return spending

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive ``flock`` on the ledger's directory, released when the block ends (or
        by the system when the process dies)."""
        directory = self.path.parent
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise InputError(f"budget ledger {self.path}: cannot open its directory "
                             f"({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _replace(self, ledger: dict[str, Any]) -> None:
        """Write ``ledger`` to a private temporary file beside the ledger, flush it to disk,
        rename it over the ledger and flush the directory: all of it or none."""
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                         suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(ledger, handle, indent=2)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        directory = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
