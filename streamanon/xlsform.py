"""A survey schema (``streamanon.schema``) from the XLSForm the survey was collected with.

KoboToolbox, ODK, SurveyCTO and Ona define a form as an XLSForm workbook: a ``survey`` sheet
(one row per question: ``type``, ``name``, ``label``, ``constraint``, ``required``,
``relevant``, groups and repeats) and a ``choices`` sheet. The workbook is read by pyxform,
XLSForm's own converter, so every alias it accepts (``select one from``, ``begin_group``,
``phone number``, ...) means here what it means on the platform; pyxform's own complaints
about a workbook are passed on as one line naming the sheet, the row and the column.

Each question becomes one field, named by the path the platform sends (``household/age`` for
``age`` in group ``household``), typed from its XLSForm type:

=====================================  ====================================================
XLSForm                                schema field
=====================================  ====================================================
``integer``, ``decimal``, ``range``    ``int`` / ``float``; ``min``/``max`` from the
                                       constraint's plain bounds (``. >= 0 and . <= 120``)
                                       or the range's ``start``/``end``
``select_one LIST``                    ``category`` with LIST's choice names as levels
                                       (``ordinal`` when asked; from a file: no levels)
``select_multiple LIST``               one ``bool`` per choice, ``PATH/CHOICE``
``date``, ``datetime``, ``start``,     ``timestamp``
``end``, ``today``
``text``, ``barcode``, ``phone         ``text``: never a quasi-identifier (a warning names
number``                               each: free text can name people)
``time``, ``rank``                     ``str``
``note``, ``calculate``, ``acknowledge``, media, ``geopoint`` and the other locations,
device and user metadata (``deviceid``, ``username``, ...), ``meta/instanceID``:
role ``ignore`` (accepted and left out of the release), each with the reason in a comment
=====================================  ====================================================

A field is ``confidential`` unless the user names it otherwise; an identifier is only ever
one the user names. ``required`` is true only for a question the form requires with no
``relevant`` condition on it or its groups. A repeat (several answers per submission) is
refused, or with ``drop_repeats`` left out whole (its list is ``ignore``).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamanon.errors import InputError

#: XLSForm types (pyxform's names) that never carry an answer a release could use, and why.
_DROPPED = {
    "note": "a note: shown to the enumerator, holds no answer",
    "acknowledge": "an acknowledgement: holds only OK",
    "trigger": "an acknowledgement: holds only OK",
    "calculate": "a calculation: derived from other answers (--weight may name it)",
    "hidden": "a hidden value: no answer",
    "deviceid": "device metadata: identifies the phone",
    "uri:deviceid": "device metadata: identifies the phone",
    "subscriberid": "device metadata: identifies the SIM card",
    "simserial": "device metadata: identifies the SIM card",
    "phonenumber": "device metadata: the phone's number",
    "username": "user metadata: names the enumerator",
    "email": "user metadata: names the enumerator",
    "uri:email": "user metadata: names the enumerator",
    "uri:username": "user metadata: names the enumerator",
    "audit": "device metadata: the audit log",
}
#: By pyxform's bind type.
_DROPPED_BIND = {
    "binary": "a media file (photo, audio, video, file): not released",
    "geopoint": "a location: coordinates locate the respondent, not released",
    "geotrace": "a location: coordinates locate the respondent, not released",
    "geoshape": "a location: coordinates locate the respondent, not released",
}
_INSTANCE_ID = "meta/instanceID"
_TEXT_BINDS = ("string", "barcode")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?"
_BOUND = re.compile(rf"^\.\s*(<=|>=|<|>)\s*({_NUMBER})$|^({_NUMBER})\s*(<=|>=|<|>)\s*\.$")


@dataclass
class Question:
    """One question of the form, as pyxform parsed it."""

    path: str
    kind: str  # pyxform's type: "integer", "select one", "select all that apply", ...
    bind: str | None  # pyxform's bind type: "int", "decimal", "string", "dateTime", ...
    row: int | None  # the survey sheet's row (None: added by pyxform, e.g. meta/instanceID)
    labels: dict[str, str]
    choices: list[tuple[str, str]] | None  # (name, label); None: no list in the workbook
    itemset: str | None
    constraint: str | None
    parameters: dict[str, str]
    required: bool  # required, with no relevant condition on it or its groups
    repeat: str | None  # the repeat it belongs to
    children: int = 0  # of a repeat: the questions inside it


@dataclass
class Entry:
    """A field of the written schema, with the comments written above it."""

    name: str
    spec: dict[str, Any]
    comments: list[str]


@dataclass
class FormSchema:
    """The schema an XLSForm gives, the comments that explain it, and what to warn about."""

    source: str
    title: str | None
    entries: list[Entry]
    warnings: list[str] = field(default_factory=list)

    def fields(self) -> dict[str, dict[str, Any]]:
        return {e.name: e.spec for e in self.entries}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _where(source: str, sheet: str, row: int | None, column: str) -> str:
    return f"{source}: sheet {sheet}, row {row if row is not None else '?'}, column {column}"


def _pyxform_error(source: str, exc: Exception) -> InputError:
    """pyxform's complaint as one line naming the sheet, the row and the column."""
    text = _one_line(exc).split(" Learn more:")[0]
    row_match = re.match(r"\[row : (\d+)\]\s*(.*)", text)
    row = int(row_match.group(1)) if row_match else None
    message = row_match.group(2) if row_match else text
    sheet = next((s for s in ("choices", "settings", "survey")
                  if f"'{s}' sheet" in message or f"{s} sheet" in message), "survey")
    if "List name not in choices" in message:
        sheet = "survey"
    column = re.search(r"the '([^']+)' value", message)
    name = column.group(1) if column else (
        "type" if re.search(r"type|list name|begin|end", message, re.I) else "name")
    return InputError(f"{_where(source, sheet, row, name)}: {message}")


def _rows(definition: Any) -> dict[str, int]:
    """Each question's path -> its row on the survey sheet (1 is the header)."""
    out: dict[str, int] = {}
    stack: list[str] = []
    for index, raw in enumerate(definition.survey or ()):
        kind = re.sub(r"[\s_]+", " ", str(raw.get("type", "")).strip().lower())
        name = str(raw.get("name", "")).strip()
        if kind.startswith("end "):
            if stack:
                stack.pop()
            continue
        if name:
            out.setdefault("/".join([*stack, name]), index + 2)
        if kind.startswith("begin "):
            stack.append(name)
    return out


def _check_survey_sheet(source: str, definition: Any) -> None:
    """The mistakes pyxform reports without a column, found first with theirs."""
    if not definition.survey_header:
        raise InputError(f"{source}: no 'survey' sheet (sheets: "
                         f"{', '.join(definition.sheet_names or []) or 'none'})")
    header = set(definition.survey_header[0])
    for column in ("type", "name"):
        if column not in header:
            raise InputError(f"{_where(source, 'survey', 1, column)}: the survey sheet has no "
                             f"'{column}' column")
    for index, raw in enumerate(definition.survey or ()):
        kind = str(raw.get("type", "")).strip()
        if raw.get("name") and not kind:
            raise InputError(f"{_where(source, 'survey', index + 2, 'type')}: question "
                             f"{raw['name']!r} has no type")
        if kind and not raw.get("name") and not re.match(r"end[\s_]", kind.lower()):
            raise InputError(f"{_where(source, 'survey', index + 2, 'name')}: a {kind!r} row "
                             "needs a name")


def read_xlsform(path: str | os.PathLike[str]) -> tuple[str | None, list[Question]]:
    """The form's title and its questions (groups opened, repeats kept as one question each
    with their questions after them), read by pyxform.

    Raises
    ------
    InputError
        Not a readable workbook, or not a valid XLSForm: one line naming the sheet, the row
        and the column.
    """
    from pyxform.aliases import yes_no
    from pyxform.errors import PyXFormError
    from pyxform.question_type_dictionary import QUESTION_TYPE_DICT
    from pyxform.xls2json import workbook_to_json
    from pyxform.xls2json_backends import get_xlsform

    source = str(path)
    if not Path(path).is_file():
        raise InputError(f"{source}: no such file")
    try:
        definition = get_xlsform(xlsform=source)
    except PyXFormError as exc:
        raise InputError(f"{source}: not an XLSForm workbook (.xlsx or .xls): "
                         f"{_one_line(exc)}") from None
    _check_survey_sheet(source, definition)
    try:
        form = workbook_to_json(workbook_dict=definition, form_name=None,
                                fallback_form_name=definition.fallback_form_name, warnings=[])
    except PyXFormError as exc:
        raise _pyxform_error(source, exc) from None
    rows = _rows(definition)
    questions: list[Question] = []

    def is_yes(value: Any) -> bool:
        return yes_no.get(str(value).strip(), False) is True

    def walk(children: list[dict[str, Any]], prefix: str, relevant: bool,
             repeat: str | None) -> None:
        for child in children:
            path = f"{prefix}{child['name']}"
            kind = child.get("type", "")
            bind = child.get("bind", {})
            known = QUESTION_TYPE_DICT.get(kind, {})
            label = child.get("label")
            labels = label if isinstance(label, dict) else ({"default": label} if label else {})
            choices = child.get("choices")
            question = Question(
                path=path, kind=kind, bind=known.get("bind", {}).get("type"),
                row=rows.get(path), labels={k: _one_line(v) for k, v in labels.items()},
                choices=None if choices is None else [
                    (str(c["name"]), _one_line(next(iter(c["label"].values()))
                                               if isinstance(c.get("label"), dict)
                                               else c.get("label") or ""))
                    for c in choices],
                itemset=child.get("itemset"), constraint=bind.get("constraint"),
                parameters=parameters if isinstance(
                    parameters := child.get("parameters"), dict) else {},
                required=is_yes(bind.get("required", "")) and relevant
                and not bind.get("relevant"),
                repeat=repeat)
            if kind in ("group", "repeat"):
                inner = repeat or (path if kind == "repeat" else None)
                if kind == "repeat":
                    questions.append(question)
                start = len(questions)
                walk(child.get("children", []), f"{path}/",
                     relevant and not bind.get("relevant"), inner)
                if kind == "repeat":
                    question.children = len(questions) - start
                continue
            if not known and kind not in ("select one", "select all that apply"):
                raise InputError(f"{_where(source, 'survey', question.row, 'type')}: unknown "
                                 f"question type {kind!r}")
            questions.append(question)

    walk(form.get("children", []), "", True, None)
    return form.get("title"), questions


def _bound_terms(constraint: str | None) -> list[tuple[str, float]]:
    """The comparisons of the answer (``.``) with a number in a conjunction (``and``), each as
    ``(operator, number)`` with the answer on the left; none if the constraint has ``or``."""
    if not constraint or re.search(r"\bor\b", constraint):
        return []
    terms = []
    for term in re.split(r"\band\b", constraint):
        term = term.strip()
        while term.startswith("(") and term.endswith(")"):
            term = term[1:-1].strip()
        match = _BOUND.match(term)
        if match and match.group(1):
            terms.append((match.group(1), float(match.group(2))))
        elif match:  # "N <= ." is ". >= N"
            terms.append(({"<=": ">=", ">=": "<=", "<": ">", ">": "<"}[match.group(4)],
                          float(match.group(3))))
    return terms


def constraint_bounds(constraint: str | None, integer: bool = False
                      ) -> tuple[float | None, float | None, bool]:
    """``(min, max, strict)`` of a constraint's plain bounds on the answer.

    Only a conjunction (``and``) of comparisons of ``.`` with a number is read: each is a
    necessary condition, so the bounds hold whatever the other terms say. A constraint with
    ``or`` gives none. A strict bound on an integer moves to the next integer; on a decimal
    it is kept as an inclusive one, and ``strict`` says so.

    >>> constraint_bounds(". >= 0 and . <= 120")
    (0.0, 120.0, False)
    >>> constraint_bounds(". > 0 and . <= ${hh_size}", integer=True)
    (1.0, None, False)
    >>> constraint_bounds(". > 0.5", integer=False)
    (0.5, None, True)
    >>> constraint_bounds(". < 5 or . > 10")
    (None, None, False)
    """
    low = high = None
    strict = False
    for op, number in _bound_terms(constraint):
        if integer:
            number = float({">=": math.ceil(number), ">": math.floor(number) + 1,
                            "<=": math.floor(number), "<": math.ceil(number) - 1}[op])
        else:
            strict = strict or op in ("<", ">")
        if op in (">=", ">"):
            low = number if low is None else max(low, number)
        else:
            high = number if high is None else min(high, number)
    return low, high, strict


def _levels(choices: list[tuple[str, str]]) -> list[str | int]:
    """Choice names, as integers when every name is one (a CSV reads them as numbers)."""
    names = [name for name, _ in choices]
    if all(_INTEGER.fullmatch(n) for n in names):
        return [int(n) for n in names]
    return names


def _label_comments(question: Question) -> list[str]:
    return [f"label{'' if lang == 'default' else '::' + lang}: {text}"
            for lang, text in question.labels.items() if text]


def _bounds(question: Question, kind: str) -> tuple[dict[str, float | int], str | None]:
    """The field's min/max and the comment saying where they come from."""
    if question.kind == "range":
        low, high = question.parameters.get("start"), question.parameters.get("end")
        try:
            values = sorted(float(v) for v in (low, high) if v is not None)
        except ValueError:
            return {}, "range: its parameters are not numbers, no bounds"
        if len(values) == 2:
            cast = int if kind == "int" else float
            return ({"min": cast(values[0]), "max": cast(values[1])},
                    "bounds from the range's start and end")
        return {}, None
    low, high, strict = constraint_bounds(question.constraint, integer=kind == "int")
    if low is None and high is None:
        return {}, (f"constraint not read as bounds: {_one_line(question.constraint)}"
                    if question.constraint else None)
    cast = int if kind == "int" else float
    out = {k: cast(v) for k, v in (("min", low), ("max", high)) if v is not None}
    note = f"bounds from the constraint {_one_line(question.constraint or '')!r}"
    if strict:
        note += " (a strict bound kept as an inclusive one)"
    return out, note


def _kind(question: Question) -> tuple[str, str]:
    """What a question becomes: ``int``, ``float``, ``category``, ``bools``, ``timestamp``,
    ``text``, ``str`` or ``dropped``, with the reason written in the comment."""
    kind, bind = question.kind, question.bind
    if question.path == _INSTANCE_ID:
        return "dropped", ("the submission's id (set by the platform): dropped unless "
                           "--identifier names it")
    if question.row is None and not question.path.startswith("meta/"):
        return "dropped", f"{kind} added by pyxform (e.g. a table-list's labels): no answer"
    if kind in _DROPPED:
        return "dropped", _DROPPED[kind]
    if bind in _DROPPED_BIND:
        return "dropped", _DROPPED_BIND[bind]
    if kind == "range":
        whole = all(_INTEGER.fullmatch(str(question.parameters.get(p, "1")))
                    for p in ("start", "end", "step"))
        return ("int" if whole else "float"), "range"
    if bind == "int":
        return "int", kind
    if bind == "decimal":
        return "float", kind
    if kind.startswith("select one"):
        if question.choices is None:
            return "category", (f"{kind}: choices in {question.itemset or 'a file'}, not in "
                                "the workbook: levels are the values seen")
        return "category", f"{kind} {question.itemset}"
    if kind == "select all that apply":
        if question.choices is None:
            return "str", (f"select_multiple from {question.itemset or 'a file'}: the "
                           "space-separated choice names as the platform sends them")
        return "bools", (f"select_multiple {question.itemset}: one true/false field per "
                         "choice, PATH/CHOICE")
    if kind == "rank":
        return "str", "rank: the choice names in the respondent's order"
    if bind in ("date", "dateTime"):
        return "timestamp", kind
    if bind == "time":
        return "str", "time of day"
    if bind in _TEXT_BINDS:
        return "text", f"{kind}: free text, never a quasi-identifier"
    return "dropped", f"{kind}: not an answer streamanon releases"


def schema_from_xlsform(path: str | os.PathLike[str], qi: Sequence[str],
                        sensitive: Sequence[str] = (), weight: str | None = None,
                        ordinal: Sequence[str] = (), identifier: Sequence[str] = (),
                        ignore: Sequence[str] = (), drop_repeats: bool = False) -> FormSchema:
    """The schema of the survey an XLSForm collects (see the module's table).

    ``qi`` are the quasi-identifiers, ``sensitive`` the confidential answers whose disclosure
    is limited beyond k (l-diversity, t-closeness), ``weight`` the sampling weight,
    ``ordinal`` the select_one questions whose choices are in order, ``identifier`` the
    identifiers (removed; the service keeps their HMAC), ``ignore`` fields left out. Names are
    paths (``household/age``); a select_multiple question's name stands for all its choices.

    Raises
    ------
    InputError
        An unreadable workbook, a repeat (without ``drop_repeats``), a name that is not a
        field of the form, a name given two roles, or a role the field's type cannot have.
    """
    source = str(path)
    title, questions = read_xlsform(path)
    repeats = [q for q in questions if q.kind == "repeat" and q.repeat is None]
    if repeats and not drop_repeats:
        first = repeats[0]
        raise InputError(
            f"{_where(source, 'survey', first.row, 'type')}: repeat {first.path!r} holds "
            "several answers per submission and a release has one record per respondent; "
            "remove the repeat, or give --drop-repeats to leave its answers out (its list is "
            "then ignored)")
    by_path = {q.path: q for q in questions if q.repeat is None}
    roles: dict[str, str] = {}
    asked = [("quasi_identifier", qi), ("sensitive", sensitive),
             ("weight", [weight] if weight else []), ("identifier", identifier),
             ("ignore", ignore)]
    for role, names in asked:
        for name in names:
            if name in roles:
                raise InputError(f"{name!r} is given two roles: {roles[name]} and {role}")
            roles[name] = role
    inside = {q.path for q in questions if q.repeat is not None}
    for name in [*roles, *ordinal]:
        if name in by_path:
            continue
        owner = _choice_owner(name, by_path)
        if owner is not None:
            continue
        if name in inside:
            raise InputError(f"{name!r} is inside a repeat, which the schema leaves out")
        fields = [p for p, q in by_path.items() if q.kind != "repeat"]
        raise InputError(f"{name!r} is not a field of {source}; its fields: "
                         f"{', '.join(fields[:30])}{', ...' if len(fields) > 30 else ''}")
    schema = FormSchema(source=source, title=title, entries=[])
    texts: list[str] = []
    for question in questions:
        if question.repeat is not None:
            continue
        if question.kind == "repeat":
            schema.entries.append(Entry(question.path, {"role": "ignore", "required": False}, [
                f"{question.path} (row {question.row}): repeat of {question.children} "
                "question(s), a list per submission: left out (--drop-repeats)"]))
            continue
        entries = _entries(question, roles, set(ordinal), source)
        schema.entries.extend(entries)
        texts += [e.name for e in entries if e.spec.get("type") == "text"
                  and e.spec["role"] == "confidential"]
    if texts:
        schema.warnings.append(
            f"free text published as it is: {', '.join(texts)}; free text can name people: "
            "give such fields to --ignore (or --identifier)")
    names = [e.name for e in schema.entries]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"{source}: two fields would be named {', '.join(twice)} (a "
                         "select_multiple's PATH/CHOICE is also a question's path)")
    return schema


def _choice_owner(name: str, by_path: dict[str, Question]) -> Question | None:
    """The select_multiple question whose choice ``name`` (``PATH/CHOICE``) is."""
    parent, _, choice = name.rpartition("/")
    question = by_path.get(parent)
    if question is not None and question.kind == "select all that apply" and any(
            c == choice for c, _ in question.choices or ()):
        return question
    return None


def _entries(question: Question, roles: dict[str, str], ordinal: set[str],
             source: str) -> list[Entry]:
    """The schema field(s) of one question."""
    kind, note = _kind(question)
    path = question.path
    where = f"{_where(source, 'survey', question.row, 'type')}:"
    role = roles.get(path, "confidential")
    comments = [f"{path} (row {question.row if question.row is not None else 'added by pyxform'}"
                f"): {note}", *_label_comments(question)]
    if role == "identifier":
        return [Entry(path, {"role": "identifier"}, comments)]
    if role == "ignore":
        return [Entry(path, {"role": "ignore", "required": False}, comments)]
    if path in ordinal and not (kind == "category" and question.choices is not None):
        raise InputError(f"{where} --ordinal {path}: only a select_one with its choices in "
                         "the workbook has levels in order")
    if kind == "dropped":
        if role == "weight" and question.kind == "calculate":
            return [Entry(path, {"role": "weight", "type": "float"}, comments)]
        if role != "confidential":
            raise InputError(f"{where} {path} cannot be a {_role_word(role)}: {note}")
        return [Entry(path, {"role": "ignore", "required": False}, comments)]
    if role == "weight" and kind not in ("int", "float"):
        raise InputError(f"{where} --weight {path}: a weight is a number (integer, decimal or "
                         f"calculate), not {question.kind}")
    if role == "quasi_identifier" and kind in ("text", "str", "timestamp"):
        raise InputError(f"{where} {path} cannot be a quasi-identifier: {note} (a "
                         "quasi-identifier is a number, a select_one or a select_multiple)")
    spec: dict[str, Any] = {"role": "confidential" if role == "sensitive" else role}
    if role == "sensitive":
        spec["sensitive"] = True
    if kind == "bools":
        out = []
        for choice, label in question.choices or ():
            name = f"{path}/{choice}"
            choice_role = roles.get(name, role)
            bool_spec = {"role": "confidential" if choice_role == "sensitive" else choice_role,
                         "type": "bool"}
            if choice_role == "sensitive":
                bool_spec["sensitive"] = True
            if choice_role in ("identifier", "ignore"):
                bool_spec = {"role": choice_role}
            bool_spec["required"] = question.required
            out.append(Entry(name, bool_spec, [f"{name}: {label}" if label else name]))
        out[0].comments[:0] = comments
        return out
    if kind == "category":
        spec["type"] = "ordinal" if path in ordinal else "category"
        if question.choices is not None:
            spec["levels"] = _levels(question.choices)
            comments.append("levels: " + ", ".join(f"{n} = {lab}" if lab else n
                                                   for n, lab in question.choices))
    else:
        spec["type"] = kind
        if kind in ("int", "float"):
            bounds, bounds_note = _bounds(question, kind)
            spec |= bounds
            if bounds_note:
                comments.append(bounds_note)
    spec["required"] = question.required or role == "weight"
    return [Entry(path, spec, comments)]


def _role_word(role: str) -> str:
    return {"quasi_identifier": "quasi-identifier", "sensitive": "sensitive answer"}.get(
        role, role)


def to_toml(schema: FormSchema) -> str:
    """The schema file: a ``[schema]`` table, one inline table per field, each after the
    comments that say where it comes from (``streamanon.schema.load_schema`` reads it)."""
    import tomlkit

    document = tomlkit.document()
    document.add(tomlkit.comment(f"Survey schema from the XLSForm {Path(schema.source).name}"
                                 + (f" ({_one_line(schema.title)})" if schema.title else "")))
    document.add(tomlkit.comment("Each field is named by the path the platform sends; a field "
                                 "no option named is confidential (published unchanged)."))
    table = tomlkit.table()
    for entry in schema.entries:
        for comment in entry.comments:
            table.add(tomlkit.comment(_one_line(comment)))
        value = tomlkit.inline_table()
        value.update(entry.spec)
        table.add(entry.name, value)
    document.add("schema", table)
    return tomlkit.dumps(document)
