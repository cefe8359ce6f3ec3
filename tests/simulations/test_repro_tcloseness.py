"""Paper 005 reproduction (t-closeness through microaggregation): the quick report's tables have
every (t, k) row and every engine's columns, every release is t-close, and the
t-closeness-first cells are at least the paper's size ``max(k, ceil(n / (2 (n - 1) t + 1)))``."""

from __future__ import annotations

import contextlib
import io
import math
import re

import pytest

from simulations.repro.paper005_tcloseness import (
    ENGINES,
    QUICK_K_VALUES,
    QUICK_T_VALUES,
    main,
)

MEASURES = ("IL %", "SSE", "cells", "size min/mean/max", "achieved t", "seconds")


def _tables(text: str) -> list[tuple[int, list[str], list[list[str]]]]:
    """Every Markdown table of ``text`` as (records in the heading above it, header cells, body
    rows of cells)."""
    tables, block, n = [], [], 0
    for line in [*text.splitlines(), ""]:
        heading = re.match(r"#### .* \((\d+) records", line)
        if heading:
            n = int(heading.group(1))
        if line.startswith("|"):
            block.append([cell.strip() for cell in line.strip("|").split("|")])
        elif block:
            tables.append((n, block[0], block[2:]))
            block = []
    return tables


@pytest.fixture(scope="module")
def quick_report() -> str:
    """What ``main --quick`` prints (run once: about 7 s)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["--quick"]) == 0
    return printed.getvalue()


@pytest.mark.heavy
def test_quick_report_has_a_row_per_t_and_k_and_the_engines_side_by_side(quick_report):
    text = quick_report
    assert text.startswith("### Paper 005")
    assert "`python -m simulations.repro.paper005_tcloseness --quick`" in text
    assert "Paper's values: **none available**" in text
    assert re.search(r"\*\*Recommended default: `tclose_(merge|kfirst|tfirst)`\*\*", text)
    tables = _tables(text)
    assert [n for n, _, _ in tables] == [1080, 4092]
    for _, header, body in tables:
        assert header == ["t", "k", "k'"] + [f"{measure} {short}" for measure in MEASURES
                                             for short in ENGINES.values()]
        assert [(float(row[0]), int(row[1])) for row in body] == sorted(
            (t, k) for t in QUICK_T_VALUES for k in QUICK_K_VALUES)
        assert all(len(row) == len(header) for row in body)


@pytest.mark.heavy
def test_every_release_is_t_close_and_t_first_cells_have_the_papers_size(quick_report):
    for n, header, body in _tables(quick_report):
        for row in body:
            cells = dict(zip(header, row, strict=True))
            t, k = float(cells["t"]), int(cells["k"])
            size = max(k, math.ceil(n / (2 * (n - 1) * t + 1)))
            assert int(cells["k'"]) == size
            for short in ENGINES.values():
                assert float(cells[f"achieved t {short}"]) <= t
                smallest = int(cells[f"size min/mean/max {short}"].split(" / ")[0])
                assert smallest >= k
            assert int(cells["size min/mean/max t-first"].split(" / ")[0]) >= size
