"""Validation of survey responses: which messages are stored and which are dead-lettered why.

:class:`Validator` checks one response against its survey's schema and pseudonymises the
respondent id; :func:`check_batch` takes a batch of one survey's messages apart into the late
(after the survey's :class:`Closure`), the invalid (:class:`Rejection`, with a reason from
:data:`REASONS`) and the valid ones, pseudonymised and ready to store. Pure functions over
bytes and the survey's configuration: no broker, no store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import msgspec
import numpy as np
import orjson

from streamanon.service.compiled_schema import compiled_schema
from streamanon.service.config import SurveyConfig
from streamanon.service.out_of_domain import clamp, domains

log = logging.getLogger(__name__)

REASONS = (
    "invalid_json",  # not UTF-8 JSON
    "not_an_object",  # JSON, but not an object
    "missing_field",
    "unexpected_field",
    "wrong_type",
    "not_finite",  # NaN or infinity
    "out_of_bounds",
    "out_of_levels",  # a category or ordinal value that is not one of the field's levels
    "duplicate_respondent",  # respondent already stored (duplicates = "reject")
    "closed",  # sent after the survey closed
    "unknown_survey",
    "too_large",  # longer than kafka.max_message_bytes
    "unprocessable",  # the collector failed on it: a bug, dead-lettered instead of stopping
)

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # what an int column of the release holds
# Largest quasi-identifier magnitude: standardisation sums squares, which must stay finite
# over any number of records (one income of 1e200 made the whole release fail at close).
QI_MAX_MAGNITUDE = 1e100


class Message(NamedTuple):
    """What the collector needs of a Kafka message."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    # The broker's log-append time in seconds when the topic keeps it (message.timestamp.type
    # = LogAppendTime), else None: the producer's clock is never used.
    timestamp: float | None


class Closure(NamedTuple):
    """Where a survey stopped taking responses: the service's decision, never the producer's.

    ``marks`` maps each partition of the survey's response topic to its end offset when the
    close was taken: a message at or past its partition's mark was appended to the log after
    the close, one below it before, however long it then waited to be read (a backlog at the
    close, a redelivery after a restart). ``final`` once the drain is done or the survey is
    released: from then on nothing is on time. Without marks, the moment decides: the broker's
    log-append time when the topic keeps it, else the time the collector received the message.
    """

    at: float
    marks: dict[int, int] | None = None
    final: bool = False

    def is_late(self, msg: Message, received_at: float) -> bool:
        return self.late(msg.partition, msg.offset, msg.timestamp, received_at)

    def late(self, partition: int, offset: int, timestamp: float | None,
             received_at: float) -> bool:
        """:meth:`is_late` for a message given by its position and log-append time."""
        if self.final:
            return True
        if self.marks is not None:
            return offset >= self.marks.get(partition, 0)
        return (timestamp if timestamp is not None else received_at) > self.at



@dataclass(frozen=True)
class Rejection:
    message: Message
    reason: str
    detail: str
    redacted: str | None = None  # what redaction did (deadletters.redact_dead_letter)


class Invalid(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _reject_constant(name: str) -> float:
    raise Invalid("not_finite", f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Invalid("not_finite", "a number too large for a 64-bit float")
    return value


def _float_sized_int(text: str) -> int:
    if len(text) > 400:  # beyond any double; int() of thousands of digits is slow or refused
        raise Invalid("out_of_bounds", "an integer too large for a 64-bit number")
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise Invalid("out_of_bounds", "an integer too large for a 64-bit number") from None
    return value


def _why_not_json(raw: bytes) -> Invalid:
    """Why orjson refused ``raw``. The stdlib parser accepts NaN, Infinity, numbers that
    overflow a double and byte-order marks: its hooks tell those apart from garbage. It
    recurses per nesting level, so a deeply nested message is caught here, not raised."""
    try:
        json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float,
                   parse_int=_float_sized_int)
    except Invalid as exc:
        return exc
    except RecursionError:
        return Invalid("invalid_json", "nested too deeply")
    except ValueError:  # UnicodeDecodeError included
        pass
    if raw[:3] == b"\xef\xbb\xbf":
        return Invalid("invalid_json", "starts with a byte-order mark")
    return Invalid("invalid_json", "not valid JSON")


def field_names(names: Sequence[str], shown: int = 5, width: int = 64) -> str:
    """Sender-chosen field names, fit for a header or a log line: at most ``shown`` of them,
    each cut to ``width`` characters and quoted with every control, format (bidi) and
    non-ASCII character escaped, then how many more there were."""
    text = ", ".join(json.dumps(name[:width]) for name in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


@dataclass(slots=True)
class Validated:
    rid_hash: bytes
    qi: np.ndarray
    confidential: dict[str, Any]
    label: str | None


# What an identifier of each declared type may be (bool is not an int here).
_IDENTIFIER_TYPES: dict[str | None, tuple[type, ...]] = {
    None: (str, int), "str": (str,), "int": (int,), "float": (), "bool": ()}


def _getter(attributes: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple of ``attributes`` of an object, in one C call."""
    if len(attributes) > 1:
        return attrgetter(*attributes)
    if attributes:
        one = attrgetter(attributes[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


class Validator:
    """Checks one response against a survey's schema and pseudonymises its respondent id.

    One set of checks, :meth:`_diagnose`, finds a response's first problem and names it.
    :meth:`validate_batch` is the fast path for many responses: column-wise tests pick out
    the responses that need a closer look, and only those go through :meth:`_diagnose`.
    """

    def __init__(self, survey: SurveyConfig, hmac_key: bytes, *,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        self.survey = survey
        self.max_message_bytes = max_message_bytes
        # HMAC's inner and outer hashes with the key absorbed (RFC 2104): an id then costs
        # two copies of a SHA-256 state, not a Python-level ``hmac.HMAC`` object
        block = (hmac_key if len(hmac_key) <= 64
                 else hashlib.sha256(hmac_key).digest()).ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))
        # the schema as the release reads it: a survey that clamps has its level fields'
        # missing answer in their domain (SurveyConfig.schema)
        self.fields = survey.schema.fields
        self.qi = survey.quasi_identifiers
        # an epsilon survey that clamps (SurveyConfig.clamps): each answer outside its
        # declared domain is put in it before the checks (_clamp), never dead-lettered for it
        self._domain = domains(self.fields) if survey.clamps else None
        self.identifier = survey.identifier
        # stored with the confidential answers: published unchanged
        self.confidential = [n for n, s in self.fields.items()
                             if s.role in ("confidential", "weight")]
        self.label = (survey.names("label") or [None])[0]
        self.required = frozenset(n for n, spec in self.fields.items() if spec.required)
        self.known = frozenset(self.fields)
        self._bounds = [(n, s.min, s.max) for n, s in self.fields.items()
                        if s.min is not None or s.max is not None]
        # A category, ordinal or boolean quasi-identifier is stored as its level's number
        # (streamanon.mixed codes), keyed by (type, value): JSON 1 is not level "1" nor true.
        self._levels = {n: {(type(v), v): float(i) for i, v in enumerate(
            [False, True] if self.fields[n].type == "bool" else self.fields[n].levels or [])}
            for n in self.qi if self.fields[n].type in ("category", "ordinal", "bool")}
        # every category's and ordinal's levels, whatever its role, as (type, value)
        self._level_sets = {n: {(type(v), v) for v in spec.levels or []}
                            for n, spec in self.fields.items()
                            if spec.type in ("category", "ordinal")}
        # a response's values of every field in schema order, in one C call
        names = tuple(self.fields)
        self._names = names
        self._values: Any = (itemgetter(*names) if len(names) > 1
                             else lambda obj: (obj[names[0]],))
        # The schema compiled (compiled_schema): one C call parses and checks a response and
        # gives its values as attributes; None: every response goes the per-field way.
        response = None if self._domain is not None else compiled_schema(survey,
                                                                          QI_MAX_MAGNITUDE)
        self._decode = None if response is None else msgspec.json.Decoder(response).decode
        attribute = {n: f"f{j}" for j, n in enumerate(names)}
        self._qi_of = _getter([attribute[n] for n in self.qi])
        self._confidential_of = _getter([attribute[n] for n in self.confidential])
        self._rid_of = attrgetter(attribute[self.identifier])
        self._label_of = (attrgetter(attribute[self.label]) if self.label is not None
                          else None)

    def pseudonym(self, respondent_id: str) -> bytes:
        """HMAC-SHA256 (RFC 2104) of the id, truncated to 128 bits (collisions: about 2^-64
        at 2^32 respondents), which keeps the de-duplication index small. The keyed inner
        and outer states are prepared once; copying them per id costs about half of
        ``hmac.digest``."""
        inner = self._inner.copy()
        inner.update(respondent_id.encode("utf-8"))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()[:16]

    def validate(self, raw: bytes | None) -> Validated:
        """The record, or :class:`Invalid` with a reason from :data:`REASONS`: the checks of
        :meth:`_diagnose`, one message at a time (:meth:`validate_batch` is the fast path,
        tested to give the same outcome for every message)."""
        obj = self._clamp(self.parse(raw))
        self._diagnose(obj)
        return self._record(obj)

    def _clamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with every answer outside its declared domain put in it, for a survey that
        clamps (:func:`~.out_of_domain.clamp`); else ``obj`` as it is."""
        return obj if self._domain is None else clamp(self._domain, self.fields, obj)

    def _record(self, obj: dict[str, Any]) -> Validated:
        """The stored form of a response that passed the checks."""
        label = obj.get(self.label) if self.label is not None else None
        return Validated(
            rid_hash=self.pseudonym(str(obj[self.identifier])),
            qi=np.array([self._code(n, obj.get(n)) for n in self.qi], dtype=np.float64),
            confidential={n: obj.get(n) for n in self.confidential},
            label=None if label is None else str(label),
        )

    def _code(self, name: str, value: Any) -> float:
        """A checked quasi-identifier value as stored: the number, the level's number, or
        NaN for a missing answer (an optional field)."""
        if value is None:
            return math.nan
        levels = self._levels.get(name)
        return value if levels is None else levels[(type(value), value)]

    def validate_batch(self, raws: Sequence[bytes | None]) -> list[Validated | Invalid]:
        """:meth:`validate` for many messages at once, with the same outcome per message.

        With the schema compiled (:func:`compiled_schema`), each response is parsed and
        checked in one C call into an object with no per-field Python; what it refuses goes
        through :meth:`validate`, which names the reason (or takes it after all). Otherwise
        the per-field column checks (:meth:`_validate_dicts`)."""
        decode = self._decode
        if decode is None:
            return self._validate_dicts(raws)
        out: list[Validated | Invalid | None] = [None] * len(raws)
        where: list[int] = []
        responses: list[Any] = []
        limit = self.max_message_bytes
        for i, raw in enumerate(raws):
            if raw and len(raw) <= limit:
                try:
                    responses.append(decode(raw))
                except Exception:  # refused (or not UTF-8): validate names why
                    pass
                else:
                    where.append(i)
                    continue
            out[i] = self._alone(raw)
        if not responses:
            return out  # type: ignore[return-value]
        qi = self._qi_rows(responses)
        pseudonym, names = self.pseudonym, self.confidential
        confidential_of, label_of = self._confidential_of, self._label_of
        for j, (i, response) in enumerate(zip(where, responses, strict=True)):
            label = None if label_of is None else label_of(response)
            out[i] = Validated(pseudonym(str(self._rid_of(response))), qi[j],
                               dict(zip(names, confidential_of(response), strict=True)),
                               None if label is None else str(label))
        return out  # type: ignore[return-value]

    def _alone(self, raw: bytes | None) -> Validated | Invalid:
        try:
            return self.validate(raw)
        except Invalid as exc:
            return exc

    def _qi_rows(self, responses: list[Any]) -> np.ndarray:
        """The quasi-identifiers of compiled responses as an n x m float64 matrix in C order,
        a missing answer NaN, a level its number."""
        rows = list(map(self._qi_of, responses))
        if not self._levels:
            return np.array(rows, dtype=np.float64).reshape(len(rows), len(self.qi))
        columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
        for j, name in enumerate(self.qi):
            levels = self._levels.get(name)
            if levels is not None:
                columns[j] = [None if v is None else levels[(type(v), v)] for v in columns[j]]
        return np.ascontiguousarray(np.array(columns, dtype=np.float64).T)

    def _validate_dicts(self, raws: Sequence[bytes | None]) -> list[Validated | Invalid]:
        """:meth:`validate_batch` for a schema that is not compiled.

        The checks run column by column over the responses that have the schema's fields
        (optional ones may be left out: they count as null, as :meth:`validate` reads them),
        so the per-record Python work is a parse, a key comparison and an HMAC; any response
        a column check flags goes through :meth:`validate` alone.
        """
        out: list[Validated | Invalid | None] = [None] * len(raws)
        where: list[int] = []  # positions of the responses checked column-wise
        objs: list[dict[str, Any]] = []
        rows: list[tuple[Any, ...]] = []  # their values, field by field (self._names)
        known, required, limit, loads = (self.known, self.required, self.max_message_bytes,
                                         orjson.loads)
        values, width = self._values, len(known)
        for i, raw in enumerate(raws):
            try:
                obj: Any = loads(raw) if raw and len(raw) <= limit else None
            except orjson.JSONDecodeError:
                obj = None
            if type(obj) is not dict:  # parse() says why (or takes it after all)
                try:
                    obj = self.parse(raw)
                except Invalid as exc:
                    out[i] = exc
                    continue
            obj = self._clamp(obj)
            if len(obj) == width:  # exactly the schema's fields, if every one is there
                try:
                    rows.append(values(obj))
                except KeyError:
                    pass
                else:
                    objs.append(obj)
                    where.append(i)
                    continue
            keys = obj.keys()
            if required <= keys <= known:  # optional fields left out: null
                obj = {**obj, **dict.fromkeys(known - keys)}
                rows.append(values(obj))
                objs.append(obj)
                where.append(i)
            else:
                out[i] = self._one(obj)
        if not objs:
            return out  # type: ignore[return-value]
        ok = np.ones(len(objs), dtype=bool)
        columns = dict(zip(self._names, zip(*rows, strict=True), strict=True))
        for name, values in columns.items():
            self._check_column(name, values, ok)
        qi = self._qi_columns(columns, ok)
        rids, labels = columns[self.identifier], columns.get(self.label) if self.label else None
        pseudonym, confidential = self.pseudonym, self.confidential
        for j, (i, good) in enumerate(zip(where, ok.tolist(), strict=True)):
            obj = objs[j]
            if not good:
                out[i] = self._one(obj)
                continue
            label = labels[j] if labels is not None else None
            out[i] = Validated(pseudonym(str(rids[j])), qi[j],
                               {n: obj[n] for n in confidential},
                               None if label is None else str(label))
        return out  # type: ignore[return-value]

    def _qi_columns(self, columns: dict[str, Sequence[Any]], ok: np.ndarray) -> np.ndarray:
        """The quasi-identifiers of the column path as an n x m float64 matrix (rows in C
        order: each record's bytes are one row), a missing answer NaN; rows that fail the
        range checks here are cleared in ``ok``, and their values are not used."""
        qi: np.ndarray | None = None
        if not self._levels and ok.all():  # every value a number or null: one conversion
            try:
                qi = np.ascontiguousarray(np.array([columns[n] for n in self.qi],
                                                   dtype=np.float64).T)
            except (TypeError, ValueError, OverflowError):  # an int beyond any double
                qi = None
        if qi is None:
            qi = np.zeros((len(ok), len(self.qi)))
            if ok.any():
                for j, name in enumerate(self.qi):
                    levels = self._levels.get(name)
                    if levels is None:
                        qi[:, j] = [(math.nan if v is None else v) if good else 0.0
                                    for v, good in zip(columns[name], ok, strict=True)]
                    else:  # a value off the levels: the slow path names it
                        qi[:, j] = [(math.nan if v is None else levels.get((type(v), v), math.inf))
                                    if good else 0.0
                                    for v, good in zip(columns[name], ok, strict=True)]
        if ok.any():
            missing = np.isnan(qi)  # only where the field is optional (checked above)
            seen = np.where(missing, 0.0, qi)
            ok &= np.isfinite(seen).all(axis=1) & (np.abs(seen) <= QI_MAX_MAGNITUDE).all(axis=1)
            for name, lo, hi in self._bounds:
                if name in self.qi:
                    col = np.where(missing[:, self.qi.index(name)], lo if lo is not None
                                   else hi, qi[:, self.qi.index(name)])
                    if lo is not None:
                        ok &= col >= lo
                    if hi is not None:
                        ok &= col <= hi
        return qi

    def _one(self, obj: dict[str, Any]) -> Validated | Invalid:
        try:
            self._diagnose(obj)
        except Invalid as exc:
            return exc
        return self._record(obj)

    def _check_column(self, name: str, values: list[Any], ok: np.ndarray) -> None:
        """Mark in ``ok`` the rows whose value for ``name`` needs a closer look."""
        spec = self.fields[name]
        kinds = set(map(type, values))
        if spec.role == "identifier":
            allowed = set(_IDENTIFIER_TYPES[spec.type])
        elif spec.role == "quasi_identifier":
            allowed = ({int} if spec.type == "int" else {bool} if spec.type == "bool"
                       else {type(v) for v in spec.levels or []}
                       if spec.type in ("category", "ordinal") else {int, float})
            if not spec.required:
                allowed = allowed | {type(None)}
        elif spec.type in ("category", "ordinal"):  # a confidential or ignored level field
            allowed = {type(v) for v in spec.levels or []} | {type(None)}
            if spec.required:
                allowed = allowed - {type(None)}
            levels = self._level_sets[name]
            for j, v in enumerate(values):
                if v is not None and (type(v), v) not in levels:
                    ok[j] = False  # off its levels: the slow path names it
        else:
            allowed = {None: {str, int, float, bool, type(None)}, "int": {int, type(None)},
                       "float": {int, float, type(None)}, "str": {str, type(None)},
                       "bool": {bool, type(None)}, "timestamp": {str, type(None)},
                       "text": {str, type(None)}}[
                spec.type or ("float" if spec.role == "weight" else None)]
            if spec.required:  # null is a missing answer
                allowed = allowed - {type(None)}
        if not kinds <= allowed:
            for j, v in enumerate(values):
                if type(v) not in allowed:
                    ok[j] = False
        if spec.role == "identifier" and str in kinds:
            for j, v in enumerate(values):
                if v == "":
                    ok[j] = False
        if spec.type == "int" and int in kinds:
            ints = values if len(kinds) == 1 else [v for v in values if type(v) is int]
            if min(ints) < _INT64_MIN or max(ints) > _INT64_MAX:
                for j, v in enumerate(values):
                    if type(v) is int and not _INT64_MIN <= v <= _INT64_MAX:
                        ok[j] = False
        if spec.role != "quasi_identifier" and (spec.min is not None or spec.max is not None):
            for j, v in enumerate(values):
                if v is not None and ok[j] and ((spec.min is not None and v < spec.min)
                                                or (spec.max is not None and v > spec.max)):
                    ok[j] = False
        if spec.role == "weight":
            for j, v in enumerate(values):
                if v is not None and ok[j] and not v > 0:
                    ok[j] = False
        if spec.role != "quasi_identifier" and float in kinds:
            for j, v in enumerate(values):
                if type(v) is float and not math.isfinite(v):
                    ok[j] = False

    def parse(self, raw: bytes | None) -> dict[str, Any]:
        """The message as a JSON object, or :class:`Invalid` (bounded in size and nesting)."""
        if raw is None:
            raise Invalid("invalid_json", "tombstone: the message value is null")
        if not raw:
            raise Invalid("invalid_json", "empty message")
        if len(raw) > self.max_message_bytes:
            raise Invalid("too_large", f"{len(raw)} bytes, more than kafka.max_message_bytes "
                                       f"({self.max_message_bytes})")
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _why_not_json(raw) from None
        if not isinstance(obj, dict):
            raise Invalid("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
        return obj

    def _diagnose(self, obj: dict[str, Any]) -> None:
        """Raise :class:`Invalid` for the first problem of ``obj`` (the slow path)."""
        missing = [n for n in self.required if obj.get(n) is None]
        if missing:
            raise Invalid("missing_field", f"missing field(s): {', '.join(sorted(missing))}")
        extra = [n for n in obj if n not in self.fields]
        if extra:
            raise Invalid("unexpected_field", f"unexpected field(s): {field_names(sorted(extra))}")
        for name, value in obj.items():
            if value is not None:
                self._check(name, value)

    def _check(self, name: str, value: Any) -> None:
        spec = self.fields[name]
        kind = spec.type or ("float" if spec.role in ("quasi_identifier", "weight") else None)
        if spec.role == "identifier":
            if type(value) not in _IDENTIFIER_TYPES[spec.type] or value == "":
                expected = {"str": "a non-empty string", "int": "an integer"}.get(
                    spec.type or "", "a non-empty string or integer")
                raise Invalid("wrong_type", f"{name}: expected {expected}")
            return
        if kind == "int":
            if type(value) is float and value.is_integer() and abs(value) >= 2.0**63:
                raise Invalid("out_of_bounds", f"{name}: outside the 64-bit integer range")
            if isinstance(value, bool) or not isinstance(value, int):
                raise Invalid("wrong_type", f"{name}: expected an integer")
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise Invalid("out_of_bounds", f"{name}: outside the 64-bit integer range")
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise Invalid("wrong_type", f"{name}: expected a number")
            if not math.isfinite(value):
                raise Invalid("not_finite", f"{name} is not a finite number")
            if spec.role == "quasi_identifier" and abs(value) > QI_MAX_MAGNITUDE:
                raise Invalid("out_of_bounds", f"{name}: beyond +-{QI_MAX_MAGNITUDE:g}, more "
                                               "than microaggregation can compute with")
        elif kind in ("str", "timestamp", "text"):
            if not isinstance(value, str):
                raise Invalid("wrong_type", f"{name}: expected a string")
        elif kind in ("category", "ordinal"):
            if isinstance(value, (dict, list)):
                raise Invalid("wrong_type", f"{name}: expected one of its levels")
            if (type(value), value) not in self._level_sets[name]:
                raise Invalid("out_of_levels", f"{name}: not one of its "
                                               f"{len(self._level_sets[name])} levels")
        elif kind == "bool":
            if not isinstance(value, bool):
                raise Invalid("wrong_type", f"{name}: expected true or false")
        elif isinstance(value, (dict, list)):
            raise Invalid("wrong_type", f"{name}: expected a scalar")
        if spec.min is not None and value < spec.min:
            raise Invalid("out_of_bounds", f"{name}: below the minimum {spec.min:g}")
        if spec.max is not None and value > spec.max:
            raise Invalid("out_of_bounds", f"{name}: above the maximum {spec.max:g}")
        if spec.role == "weight" and not value > 0:
            raise Invalid("out_of_bounds", f"{name}: a sampling weight is positive")



def check_batch(messages: Sequence[Message], validator: Validator, closure: Closure | None,
                received_at: float | None = None
                ) -> tuple[list[Rejection], list[tuple[Message, Validated]]]:
    """First half of :func:`~.ingest.process_batch`, no store needed: late and invalid
    messages out, the valid ones checked and pseudonymised. Late is decided by ``closure`` (see
    :class:`Closure`); ``received_at`` is when the collector read the batch (default: now)."""
    rejected, valid, records = check_columns(
        [m.partition for m in messages], [m.offset for m in messages],
        [m.value for m in messages], [m.timestamp for m in messages], validator, closure,
        received_at)
    return ([Rejection(messages[i], reason, detail) for i, reason, detail in rejected],
            [(messages[i], record) for i, record in zip(valid, records, strict=True)])


def check_columns(partitions: Sequence[int], offsets: Sequence[int],
                  values: Sequence[bytes | None], timestamps: Sequence[float | None],
                  validator: Validator, closure: Closure | None,
                  received_at: float | None = None
                  ) -> tuple[list[tuple[int, str, str]], list[int], list[Validated]]:
    """:func:`check_batch` for messages given as columns (the ingest worker's form, with no
    object per message): the rejections as (index, reason, detail), late ones first, then
    the indexes of the valid messages and their records."""
    rejected: list[tuple[int, str, str]] = []
    on_time: Sequence[int] = range(len(values))
    raws = values
    if closure is not None:
        received = time.time() if received_at is None else received_at
        on_time = []
        for i, (partition, offset, timestamp) in enumerate(
                zip(partitions, offsets, timestamps, strict=True)):
            if closure.late(partition, offset, timestamp, received):
                rejected.append((i, "closed", "sent after the survey closed"))
            else:
                on_time.append(i)
        raws = [values[i] for i in on_time]
    valid: list[int] = []
    records: list[Validated] = []
    for i, outcome in zip(on_time, _validate_each(validator, raws), strict=True):
        if isinstance(outcome, Invalid):
            rejected.append((i, outcome.reason, outcome.detail))
        else:
            valid.append(i)
            records.append(outcome)
    return rejected, valid, records


def _validate_each(validator: Validator, raws: Sequence[bytes | None]
                   ) -> list[Validated | Invalid]:
    """:meth:`Validator.validate_batch`; if it fails unexpectedly, each message alone, so that
    an error one message provokes dead-letters that message (``unprocessable``), not the
    batch. Only the exception's type is logged: its text may quote a value."""
    try:
        return validator.validate_batch(raws)
    except Exception as exc:
        log.error("survey %s: batch validation failed (%s); validating one by one",
                  validator.survey.id, type(exc).__name__)
    out: list[Validated | Invalid] = []
    for raw in raws:
        try:
            out.append(validator.validate(raw))
        except Invalid as exc:
            out.append(exc)
        except Exception as exc:
            log.error("survey %s: a message could not be validated (%s); dead-lettered",
                      validator.survey.id, type(exc).__name__)
            out.append(unprocessable(exc))
    return out


def unprocessable(exc: BaseException) -> Invalid:
    """The rejection of a message the collector failed on (a bug): the error's type only."""
    return Invalid("unprocessable", f"the collector failed on this message "
                                    f"({type(exc).__name__}); please report it")
