"""The disclosure-risk and utility report of a release, as one self-contained HTML page.

:func:`render` takes the measures of a release (``streamanon.risk.Measures.to_json()``), the
original and the released table, the schema and the run's settings, and returns the page: the
settings, a verdict in plain words written from the numbers (with a warning wherever a measure
is bad), the risk before and after, l-diversity and t-closeness of each sensitive attribute,
the utility of each attribute, its distribution before and after as pictures, and the two
correlation matrices. Pictures are drawn with matplotlib (Agg) and embedded as base64 PNG: the
page loads nothing and runs no script.

The page shows aggregates only, never a record: histograms are binned between the 0.5 % and
99.5 % quantiles (values outside fall into the edge bins, so an outlier's value is not on an
axis), and the levels of a category without declared levels that occur fewer than k times are
shown together as one bar. Every name from the data is escaped. Pure: no I/O.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd

from streamanon.risk import INTERVAL_PERCENT
from streamanon.schema import Schema

#: At most this many attributes get a distribution picture: the key first, then the sensitive
#: attributes, then the others.
MAX_FIGURES = 12
#: Histograms are drawn between these quantiles of the pooled values; the rest go to the edge
#: bins, so no single extreme value sets an axis.
TAILS = (0.005, 0.995)
#: A numeric attribute with at most this many integer values in range gets one bar per value.
MAX_DISCRETE = 25
NUMERIC_TYPES = (None, "int", "float")
LEVEL_TYPES = ("category", "ordinal", "bool")
RARE = "(rare levels)"
#: Shown for a measure that was not taken (an en dash).
NONE = "\u2013"
MISSING = "(missing)"
BEFORE_COLOUR, AFTER_COLOUR = "#8c8c8c", "#1f77b4"
UNLINKED = ("Record linkage and interval disclosure were not measured: they need to know which "
            "released row comes from which original row, and the released file is shuffled.")
DISTANCES = {"ordered": "ordered distance (earth mover's over the ordered values)",
             "equal": "equal distance (half the total variation)"}


@dataclass(frozen=True)
class Sentence:
    """One sentence of the verdict; ``warning`` when it reports a bad measure."""

    text: str
    warning: bool = False


def render(measures: Mapping[str, Any], original: pd.DataFrame, release: pd.DataFrame,
           schema: Schema, settings: Mapping[str, Any]) -> str:
    """The report page of a release.

    Parameters
    ----------
    measures
        ``Measures.to_json()`` of ``streamanon.risk.measure`` on these tables.
    original, release
        The raw table and the released one (only their distributions are drawn).
    schema
        The data set's schema: the attributes' types and levels.
    settings
        ``k`` (required), and as far as known ``l``, ``t`` (the thresholds asked), ``engine``,
        ``original``, ``release``, ``schema`` (file names) and ``date``; other keys are listed
        as they are.

    Returns
    -------
    str
        A complete HTML document.
    """
    sentences = verdict(measures, settings)
    warnings = sum(s.warning for s in sentences)
    title = f"Disclosure risk and utility: {PurePath(str(settings.get('release', 'release'))).name}"
    parts = [
        _settings_section(measures, settings),
        _verdict_section(sentences, warnings),
        _risk_section(measures, settings),
        _sensitive_section(measures, settings),
        _attacks_section(measures.get("attacks")),
        _utility_section(measures),
        _distributions_section(measures, original, release, schema, int(settings["k"])),
        _correlations_section(measures),
    ]
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{_e(title)}</h1>\n" + "\n".join(parts) + "\n</body>\n</html>\n"
    )


def verdict(measures: Mapping[str, Any], settings: Mapping[str, Any]) -> list[Sentence]:
    """The verdict in plain words, one :class:`Sentence` per finding, from the numbers alone."""
    k = int(settings["k"])
    risk = measures["risk"]
    before, after = risk["before"], risk["after"]
    n = measures["n_release"]
    out: list[Sentence] = []
    private = settings.get("differential privacy")
    if private:  # the guarantee the release was drawn with, in its own words
        out.append(Sentence(f"{private[0].upper()}{private[1:]}.",
                            warning=private.startswith("not ")))
    below = after["records_in_groups_below_k"]
    uniques = (f"no respondent is unique (before: {_pct(before['sample_uniques'])})"
               if after["sample_uniques"] == 0 else None)
    if below == 0 and after["smallest_group"] >= k:
        hidden = (f"Every respondent is hidden among at least {after['smallest_group']:,} with "
                  f"the same key (k = {k})")
        out.append(Sentence(f"{hidden}; {uniques}." if uniques else f"{hidden}."))
    else:
        out.append(Sentence(
            f"{below:,} of {n:,} respondents ({_pct(below / n if n else 0.0)}) are in groups of "
            f"fewer than k = {k} with the same key (smallest group: "
            f"{after['smallest_group']:,}): the release is not {k}-anonymous.", warning=True))
        if uniques:
            out.append(Sentence(uniques[0].upper() + uniques[1:] + "."))
    if after["sample_uniques"] > 0:
        alone = round(after["sample_uniques"] * n)
        out.append(Sentence(
            f"{alone:,} respondent{'s are' if alone != 1 else ' is'} unique on their key "
            f"({_pct(after['sample_uniques'])}; before: {_pct(before['sample_uniques'])}): "
            "whoever knows such a respondent's key finds their record.", warning=True))
    for name, s in risk.get("sensitive", {}).items():
        out.extend(_sensitive_sentences(name, s, settings.get("l"), settings.get("t")))
    asked = [f"{p} = {settings[p]}" for p in ("l", "t") if settings.get(p) is not None]
    if asked and not risk.get("sensitive"):
        out.append(Sentence(
            f"No attribute is sensitive, so the {' and '.join(asked)} asked were not checked: "
            "mark the answers sensitive = true in the schema or name them with --sensitive.",
            warning=True))
    out.extend(_linkage_sentences(risk, k))
    out.extend(_utility_sentences(measures["utility"]))
    return out


def _sensitive_sentences(name: str, s: Mapping[str, Any], l_asked: int | None,
                         t_asked: float | None) -> list[Sentence]:
    label = f"the sensitive answer {name}"
    if s["l"] <= 1:
        l_part = Sentence(
            f"On {label}, some group holds only one answer (l = 1): whoever knows a "
            f"respondent's key learns their {name}.", warning=True)
    elif l_asked is not None and s["l"] < l_asked:
        l_part = Sentence(
            f"On {label}, some group holds only {s['l']} different answers, fewer than the "
            f"l = {l_asked} asked.", warning=True)
    else:
        l_part = Sentence(f"On {label}, every group holds at least {s['l']} different answers")
    if t_asked is not None and s["t"] > t_asked:
        t_part = Sentence(
            f"On {label}, a group's distribution is {s['t']:.3f} away from the whole "
            f"release's, more than t = {t_asked:g}: membership in that group says much "
            f"about {name}.", warning=True)
    elif t_asked is not None:
        t_part = Sentence(f"its distribution in every group is within t = {t_asked:g} of the "
                          f"whole release's (largest {s['t']:.3f})")
    else:
        t_part = Sentence(f"its distribution in every group is at most {s['t']:.3f} away "
                          f"from the whole release's")
    if not l_part.warning and not t_part.warning:
        return [Sentence(f"{l_part.text} and {t_part.text}.")]
    if l_part.warning and t_part.warning:
        return [l_part, t_part]
    if l_part.warning:
        return [l_part, Sentence(f"Its distribution in every group is within "
                                 f"{s['t']:.3f} of the whole release's.")]
    return [Sentence(f"{l_part.text}."), t_part]


def _linkage_sentences(risk: Mapping[str, Any], k: int) -> list[Sentence]:
    out = []
    linkage = risk.get("record_linkage")
    if linkage is None and risk.get("interval_disclosure") is None:
        return [Sentence(UNLINKED)]
    if linkage is not None:
        text = (f"An intruder who knows a respondent's key links them to their own record with "
                f"probability {_pct(linkage)}")
        if linkage > 1 / k:
            out.append(Sentence(f"{text}: more than the 1/k = {_pct(1 / k)} that k-anonymity "
                                "promises.", warning=True))
        else:
            out.append(Sentence(f"{text}."))
    interval = risk.get("interval_disclosure")
    if interval is not None:
        out.append(Sentence(f"{_pct(interval)} of the original numeric key values lie within "
                            f"{INTERVAL_PERCENT:g} % of their range of the released value "
                            "(interval disclosure)."))
    return out


def _utility_sentences(utility: Mapping[str, Any]) -> list[Sentence]:
    means, variances = [], []
    for name, a in utility["attributes"].items():
        mb, ma, vb, va = (a.get(f) for f in ("mean_before", "mean_after", "var_before",
                                              "var_after"))
        if None in (mb, ma, vb) or not vb > 0:
            continue
        means.append((abs(ma - mb) / math.sqrt(vb), name))
        if va is not None:
            variances.append((abs(va / vb - 1), name))
    parts = []
    if means:
        shift, name = max(means)
        parts.append(f"means change by at most {shift:.3f} standard deviations ({name})")
    if variances:
        ratio, name = max(variances)
        parts.append(f"variances by at most {_pct(ratio)} ({name})")
    columns = list(utility.get("correlation_columns") or [])
    if len(columns) >= 2:
        change = np.abs(_matrix(utility["correlation_after"])
                        - _matrix(utility["correlation_before"]))
        if np.isfinite(change).any():
            i, j = np.unravel_index(np.nanargmax(change), change.shape)
            parts.append(f"correlations by at most {change[i, j]:.3f} "
                         f"({columns[i]} and {columns[j]})")
    if not parts:
        return []
    text = ", ".join(parts)
    return [Sentence(text[0].upper() + text[1:] + ".")]


def largest_change_text(largest: Mapping[str, Any]) -> str:
    """``largest_change`` in words: a mean's shift in standard deviations before, a variance's
    relative change, a correlation's absolute change."""
    what, value = str(largest["what"]), float(largest["value"])
    if what.startswith("mean "):
        return f"{what}, by {value:.3f} standard deviations"
    if what.startswith("variance "):
        return f"{what}, by {_pct(value)} of the variance before"
    if what.startswith("correlation "):
        return f"{what}, by {value:.3f}"
    return f"{what} ({_num(value)})"


def _settings_section(measures: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    labels = {"k": "k", "l": "l (asked)", "t": "t (asked)", "engine": "engine",
              "original": "original file", "release": "released file", "schema": "schema file",
              "date": "date"}
    rows = [(label, settings[key]) for key, label in labels.items()
            if settings.get(key) is not None]
    rows += [(key, value) for key, value in settings.items()
             if key not in labels and value is not None]
    rows += [("records", f"{measures['n_original']:,} original, "
                         f"{measures['n_release']:,} released"),
             ("key (quasi-identifiers)", ", ".join(measures["key"]))]
    body = "".join(f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>" for label, value in rows)
    return f'<section id="settings"><h2>Settings</h2><table class="text">{body}</table></section>'


def _verdict_section(sentences: Sequence[Sentence], warnings: int) -> str:
    text = " ".join(f'<span class="warning">{_e(s.text)}</span>' if s.warning else _e(s.text)
                    for s in sentences)
    head = ("No warnings." if warnings == 0
            else f"{warnings} warning{'s' if warnings > 1 else ''}: see the marked sentences.")
    cls = "ok" if warnings == 0 else "bad"
    return (f'<section id="verdict" class="{cls}"><h2>Verdict</h2>'
            f'<p class="summary">{head}</p><p>{text}</p></section>')


def _risk_section(measures: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    risk = measures["risk"]
    k = int(settings["k"])
    rows = [("records", measures["n_original"], measures["n_release"], _int),
            ("groups with the same key", risk["before"]["groups"], risk["after"]["groups"], _int),
            ("smallest group", risk["before"]["smallest_group"], risk["after"]["smallest_group"],
             _int),
            (f"records in groups below k = {k}", risk["before"]["records_in_groups_below_k"],
             risk["after"]["records_in_groups_below_k"], _int),
            ("sample uniques", risk["before"]["sample_uniques"], risk["after"]["sample_uniques"],
             _pct)]
    body = "".join(f"<tr><th>{_e(label)}</th><td>{fmt(b)}</td><td>{fmt(a)}</td></tr>"
                   for label, b, a, fmt in rows)
    attacks = "".join(
        f"<tr><th>{label}</th><td>{_pct(risk.get(key))}</td><td>{_e(meaning)}</td></tr>"
        for key, label, meaning in (
            ("record_linkage", "record linkage",
             "share of respondents an intruder who knows their key links to their own record"),
            ("interval_disclosure", "interval disclosure",
             f"share of original numeric key values within {INTERVAL_PERCENT:g} % of the "
             "attribute's range of their released value")))
    return ('<section id="risk"><h2>Disclosure risk</h2>'
            '<table><tr><th></th><th>before</th><th>after</th></tr>'
            f'{body}</table><h3>Attacks on the release</h3>'
            '<table class="text"><tr><th>measure</th><th>value</th><th>what it means</th></tr>'
            f'{attacks}'
            '</table>' + (f"<p>{_e(UNLINKED)}</p>" if risk.get("record_linkage") is None
                          else "") + '</section>')


def _attacks_section(attacks: Mapping[str, Any] | None) -> str:
    """anonymeter's three risks with their intervals, each with what it means; or why they
    were not measured."""
    from streamanon.attacks import CONFIDENCE, MEANINGS

    head = ('<section id="attacks"><h2>Attacks (anonymeter)</h2><p>Each attack uses the '
            'release as the intruder\'s only source and is run twice: on the respondents it '
            'was made from and on a control, people of the same population whose records were '
            'not released. The risk is how much better it does on the respondents than on the '
            'control (0: no better, 1: it always succeeds where it fails on the control), with '
            'its confidence interval.</p>')
    if not attacks or not attacks.get("measured"):
        why = (attacks or {}).get("reason") or "not asked"
        return f'{head}<p class="not-measured">Not measured: {_e(why)}.</p></section>'
    rows = []
    for key, label, risk in (
            ("singling_out", "singling out", attacks.get("singling_out")),
            ("linkability", "linkability", attacks.get("linkability")),
            *(("inference", f"inference of {name}", r)
              for name, r in attacks.get("inference", {}).items())):
        if risk is None:
            continue
        control = NONE if risk.get("control_rate") is None else _pct(risk["control_rate"])
        rows.append(f'<tr><th>{_e(label)}</th><td>{_pct(risk["value"])}</td>'
                    f'<td>{_pct(risk["low"])} to {_pct(risk["high"])}</td>'
                    f'<td>{_pct(risk["attack_rate"])}</td><td>{control}</td>'
                    f'<td class="text">{_e(MEANINGS[key])}</td></tr>')
    level = f"{100 * float(attacks.get('confidence', CONFIDENCE)):g} %"
    notes = "".join(f"<p>{_e(n)}</p>" for n in attacks.get("notes", []))
    return (f'{head}<p>Control: {_e(attacks["control"])}. {attacks["n_attacks"]:,} attacks '
            f'each on {attacks["n_original"]:,} released and {attacks["n_control"]:,} control '
            f'records.</p><table><tr><th>attack</th><th>risk</th><th>{level} interval</th>'
            '<th>success on respondents</th><th>success on control</th>'
            f'<th>what it means</th></tr>{"".join(rows)}</table>{notes}</section>')


def _sensitive_section(measures: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    sensitive = measures["risk"].get("sensitive", {})
    if not sensitive:
        return ('<section id="sensitive"><h2>Sensitive attributes</h2><p>No attribute was '
                'declared sensitive (<code>sensitive = true</code> in the schema, or '
                '<code>--sensitive</code>): l-diversity and t-closeness were not measured.</p>'
                '</section>')
    l_asked, t_asked = settings.get("l"), settings.get("t")
    rows = []
    for name, s in sensitive.items():
        bad = s["l"] <= 1 or (l_asked is not None and s["l"] < l_asked) or (
            t_asked is not None and s["t"] > t_asked)
        opening = '<tr class="warning">' if bad else "<tr>"
        rows.append(f'{opening}<th>{_e(name)}</th>'
                    f'<td class="text">{_e(DISTANCES.get(s["kind"], s["kind"]))}</td>'
                    f'<td>{s["l"]:,}</td><td>{s["t"]:.3f}</td></tr>')
    asked = ", ".join(p for p in (f"l = {l_asked}" if l_asked is not None else "",
                                  f"t = {t_asked:g}" if t_asked is not None else "") if p)
    return ('<section id="sensitive"><h2>Sensitive attributes</h2><p>l: the fewest different '
            'answers in a group with the same key (distinct l-diversity). t: the largest '
            'distance between a group\'s answers and the whole release\'s (t-closeness).'
            + (f" Asked: {_e(asked)}." if asked else "") + '</p>'
            '<table><tr><th>attribute</th><th>distance</th><th>l</th><th>t</th></tr>'
            + "".join(rows) + '</table></section>')


def _utility_section(measures: Mapping[str, Any]) -> str:
    utility = measures["utility"]
    attributes = utility["attributes"]
    columns = [("type", "type", lambda v: _e(v or "")), ("il", "IL", _num),
               ("mean_before", "mean before", _num), ("mean_after", "mean after", _num),
               ("var_before", "variance before", _num), ("var_after", "variance after", _num),
               ("changed_share", "changed", _pct)]
    unlinked = [key for key in ("il", "changed_share")
                if all(a.get(key) is None for a in attributes.values())]
    columns = [c for c in columns if c[0] not in unlinked]
    head = "".join(f"<th>{label}</th>" for _, label, _ in columns)
    rows = "".join(f"<tr><th>{_e(name)}</th>"
                   + "".join(f"<td>{fmt(a.get(key))}</td>" for key, _, fmt in columns)
                   + "</tr>" for name, a in attributes.items())
    notes = ["Means and variances over the observed values; an ordinal attribute by its "
             "level's rank (0 for the first level); none for a nominal attribute."]
    if unlinked:
        notes.append("The information loss and the share of changed values need to know which "
                     "released row comes from which original row: not measured on a shuffled "
                     "release.")
    else:
        notes.append("IL: the information loss of the attribute (numeric: SSE / SST; ordinal: "
                     "mean rank shift over the number of levels - 1; nominal: share changed); "
                     "changed: the share of records whose value differs after release.")
    largest = utility.get("largest_change")
    if largest and largest.get("what") != "none":
        notes.append(f"The largest change: {largest_change_text(largest)}.")
    text = "".join(f"<p>{_e(n)}</p>" for n in notes)
    return ('<section id="utility"><h2>Utility</h2>'
            f'<table><tr><th>attribute</th>{head}</tr>{rows}</table>{text}</section>')


def _distributions_section(measures: Mapping[str, Any], original: pd.DataFrame,
                           release: pd.DataFrame, schema: Schema, k: int) -> str:
    names = _plotted(measures, original, release, schema)
    figures = []
    for name in names[:MAX_FIGURES]:
        kind = _kind(name, original, schema)
        if kind == "levels":
            png = _bars(name, original[name], release[name], _levels(name, schema), k)
        else:
            png = _histogram(name, original[name], release[name])
        figures.append(f'<figure><img src="{png}" alt="{_e(name)}: before and after" '
                       f'width="420" height="260"><figcaption>{_e(name)}</figcaption></figure>')
    left = names[MAX_FIGURES:]
    more = (f"<p>Not drawn ({len(left)} more): {_e(', '.join(left))}.</p>" if left else "")
    return ('<section id="distributions"><h2>Distributions before and after</h2><p>Share of '
            'records per value (grey: original, blue: release). Histograms span the 0.5 % to '
            '99.5 % quantiles; values outside are counted in the edge bins.</p>'
            f'<div class="grid">{"".join(figures)}</div>{more}</section>')


def _correlations_section(measures: Mapping[str, Any]) -> str:
    utility = measures["utility"]
    columns = list(utility.get("correlation_columns") or [])
    if len(columns) < 2:
        return ('<section id="correlations"><h2>Correlations</h2><p>Fewer than two numeric '
                'attributes: no correlation matrix.</p></section>')
    png = _heatmaps(columns, _matrix(utility["correlation_before"]),
                    _matrix(utility["correlation_after"]))
    return ('<section id="correlations"><h2>Correlations</h2><p>Pearson correlations of '
            f'{_e(", ".join(columns))}, before (left) and after (right).</p>'
            f'<img class="wide" src="{png}" alt="correlation matrices before and after">'
            '</section>')


def _plotted(measures: Mapping[str, Any], original: pd.DataFrame, release: pd.DataFrame,
             schema: Schema) -> list[str]:
    """The attributes to draw, key first, then the sensitive ones, then the rest."""
    candidates = list(measures["key"]) + list(measures["risk"].get("sensitive", {})) + list(
        measures["utility"]["attributes"])
    seen: list[str] = []
    for name in candidates:
        if (name not in seen and name in original.columns and name in release.columns
                and _kind(name, original, schema) is not None):
            seen.append(name)
    return seen


def _kind(name: str, frame: pd.DataFrame, schema: Schema) -> str | None:
    """``numeric``, ``levels`` or None (not drawn: text, timestamps, identifiers)."""
    spec = schema.fields.get(name)
    if spec is not None:
        if spec.role in ("identifier", "ignore"):
            return None
        if spec.type in LEVEL_TYPES:
            return "levels"
        if spec.type in NUMERIC_TYPES:
            return "numeric" if pd.api.types.is_numeric_dtype(frame[name]) else None
        return None
    if pd.api.types.is_bool_dtype(frame[name]):
        return "levels"
    return "numeric" if pd.api.types.is_numeric_dtype(frame[name]) else None


def _levels(name: str, schema: Schema) -> list[str] | None:
    spec = schema.fields.get(name)
    if spec is None:
        return None
    if spec.type == "bool":
        return ["False", "True"]
    return [_label(v) for v in spec.levels] if spec.levels else None


def _label(value: Any) -> str:
    """A level as text, with 3.0 and 3 the same level."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    return str(value)


def _shares(values: pd.Series) -> pd.Series:
    labels = values.map(lambda v: MISSING if pd.isna(v) else _label(v))
    return labels.value_counts() / max(len(values), 1)


def _bars(name: str, before: pd.Series, after: pd.Series, levels: list[str] | None,
          k: int) -> str:
    sb, sa = _shares(before), _shares(after)
    if levels is None:  # undeclared levels: the rare ones (possibly one person's) together
        counts_b, counts_a = sb * len(before), sa * len(after)
        seen = sorted((set(sb.index) | set(sa.index)) - {MISSING})
        rare = [v for v in seen
                if any(0 < c < k for c in (counts_b.get(v, 0), counts_a.get(v, 0)))]
        common = [v for v in seen if v not in rare]
        sb = _merge(sb, rare)
        sa = _merge(sa, rare)
        levels = common + ([RARE] if rare else [])
    else:
        undeclared = [v for v in set(sb.index) | set(sa.index) if v not in levels
                      and v != MISSING]
        if undeclared:
            sb, sa = _merge(sb, undeclared), _merge(sa, undeclared)
            levels = [*levels, RARE]
    if MISSING in sb.index or MISSING in sa.index:
        levels = [*levels, MISSING]
    fig, ax = _figure()
    x = np.arange(len(levels))
    ax.bar(x - 0.2, [sb.get(v, 0.0) for v in levels], 0.4, color=BEFORE_COLOUR, label="before")
    ax.bar(x + 0.2, [sa.get(v, 0.0) for v in levels], 0.4, color=AFTER_COLOUR, label="after")
    labels = [_short(v) for v in levels]
    crowded = sum(map(len, labels)) > 32
    ax.set_xticks(x, labels, rotation=30 if crowded else 0, ha="right" if crowded else "center",
                  fontsize=8)
    ax.set_ylabel("share of records")
    ax.set_title(_short(name, 40))
    ax.legend(fontsize=8)
    return _png(fig)


def _merge(shares: pd.Series, rare: Sequence[str]) -> pd.Series:
    if not len(rare):
        return shares
    out = shares.drop([v for v in rare if v in shares.index])
    total = float(shares.reindex(list(rare)).fillna(0.0).sum())
    return pd.concat([out, pd.Series({RARE: total})]) if total else out


def _histogram(name: str, before: pd.Series, after: pd.Series) -> str:
    b = pd.to_numeric(before, errors="coerce").astype(float).to_numpy()
    a = pd.to_numeric(after, errors="coerce").astype(float).to_numpy()
    missing = (np.isnan(b).mean() if len(b) else 0.0, np.isnan(a).mean() if len(a) else 0.0)
    b, a = b[~np.isnan(b)], a[~np.isnan(a)]
    fig, ax = _figure()
    pooled = np.concatenate([b, a])
    if len(pooled):
        lo, hi = np.quantile(pooled, TAILS)
        integral = bool(np.all(np.mod(pooled, 1) == 0))
        if integral and hi - lo <= MAX_DISCRETE:
            lo, hi = math.floor(lo), math.ceil(hi)
            edges = np.arange(lo - 0.5, hi + 1.5)
        else:
            hi = hi if hi > lo else lo + 1.0
            edges = np.linspace(lo, hi, 31)
        for values, colour, label, filled in ((b, BEFORE_COLOUR, "before", True),
                                              (a, AFTER_COLOUR, "after", False)):
            if len(values):
                ax.hist(np.clip(values, edges[0], edges[-1]), bins=edges,
                        weights=np.full(len(values), 1 / len(values)), color=colour,
                        label=label, histtype="stepfilled" if filled else "step",
                        alpha=0.6 if filled else 1.0, linewidth=1.5)
        ax.legend(fontsize=8)
        ax.locator_params(axis="x", nbins=6)
        ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    ax.set_ylabel("share of records")
    title = _short(name, 40)
    if any(missing):
        title += f"  (missing {_pct(missing[0])} / {_pct(missing[1])})"
    ax.set_title(title, fontsize=10)
    return _png(fig)


def _heatmaps(columns: Sequence[str], before: np.ndarray, after: np.ndarray) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    size = max(4.0, 0.45 * len(columns) + 2.0)
    fig = Figure(figsize=(2 * size + 1.0, size), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2)
    labels = [_short(c, 16) for c in columns]
    image = None
    for ax, matrix, title in ((axes[0], before, "before"), (axes[1], after, "after")):
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_title(title)
        ax.set_xticks(range(len(columns)), labels, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(columns)), labels, fontsize=8)
        if len(columns) <= 12:
            for i in range(len(columns)):
                for j in range(len(columns)):
                    if np.isfinite(matrix[i, j]):
                        ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center",
                                fontsize=7, color="white" if abs(matrix[i, j]) > 0.6
                                else "black")
    fig.colorbar(image, ax=list(axes), shrink=0.8)
    return _png(fig)


def _figure() -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2, 2.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _matrix(rows: Sequence[Sequence[float | None]]) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=float)


def _short(text: str, width: int = 18) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _pct(share: float | None) -> str:
    return NONE if share is None else f"{100 * share:.1f} %"


def _int(value: int) -> str:
    return f"{value:,}"


def _num(value: float | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NONE
    return f"{value:.4g}"


_CSS = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em;
       color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; margin-top: 1.8em; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, table.text td, td.text { text-align: left; }
tr.warning td, tr.warning th { background: #fdecea; }
#verdict { padding: 0.2em 1em 0.6em; border-left: 6px solid #2e7d32; background: #f1f8f1; }
#verdict.bad { border-left-color: #c62828; background: #fff8f7; }
#verdict h2 { border: none; }
.summary { font-weight: 600; }
span.warning { color: #b71c1c; font-weight: 600; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 1em; }
figure { margin: 0; } figcaption { font-size: 0.85em; color: #555; }
img { max-width: 100%; height: auto; } img.wide { width: 100%; }
"""
