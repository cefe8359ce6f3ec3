"""No table outside the engines and the stages names an engine or a stage.

What the planner and the service know of an engine or a stage is its registry entry's traits
(``docs/architecture.md``, "An engine's traits", "A stage's traits"); a table keyed or filled
by names elsewhere (``STAGE_DELTA``, ``AUTO_STAGES`` before issue 61) is the trap where a new
one is silently treated as another. The rule, read with ``ast``: no dict, set, list or tuple
literal in ``scheduler/`` or ``streamanon/service/`` holds a registered engine's or stage's
name; and the scheduler names none at all, outside its docstrings. It is run once on
planted tables too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from streamanon.engines import available_engines
from streamanon.incremental import available_stages
from tests.test_architecture import ROOT

NAMES = frozenset({e.name for e in available_engines()} | {s.name for s in available_stages()})


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def name_tables(root: Path = ROOT, names: frozenset[str] = NAMES) -> dict[str, list[int]]:
    """File -> lines of a collection literal naming an engine or a stage (``scheduler/`` and
    ``streamanon/service/``), or of any such name in the scheduler's code."""
    found: dict[str, list[int]] = {}
    files = [*sorted((root / "scheduler").rglob("*.py")),
             *sorted((root / "streamanon" / "service").rglob("*.py"))]
    for path in files:
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        in_scheduler = path.is_relative_to(root / "scheduler")
        lines = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Dict, ast.Set, ast.List, ast.Tuple)):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                if any(isinstance(e, ast.Constant) and e.value in names for e in items):
                    lines.add(node.lineno)
            elif in_scheduler and isinstance(node, ast.Constant) and node.value in names \
                    and id(node) not in docs:
                lines.add(node.lineno)
        if lines:
            found[str(path.relative_to(root))] = sorted(lines)
    return found


def test_no_table_outside_the_registry_names_an_engine_or_a_stage():
    assert {"mdav", "two_stage", "nn_split_end"} <= NAMES
    assert name_tables() == {}


@pytest.mark.parametrize("path,text", [
    ("scheduler/quality.py", "CURVES = {'two_stage': (0.0, 0.1)}\n"),
    ("scheduler/choice.py", "AUTO = ('nn_split_end', 'two_stage')\n"),
    ("scheduler/cost_model.py", "def f(stage):\n    return stage == 'two_stage'\n"),
    ("streamanon/service/planning.py", "SPLITS = {'nn_split_mid', 'nn_split_end'}\n"),
])
def test_the_rule_finds_a_planted_table(path, text, tmp_path):
    for package in ("scheduler", "streamanon/service"):
        (tmp_path / package).mkdir(parents=True)
        (tmp_path / package / "__init__.py").write_text(
            '"""The scheduler plans for mdav and two_stage (a docstring may name them)."""\n')
    (tmp_path / "streamanon" / "service" / "planning.py").write_text(
        "FALLBACK = 'mdav'  # one reference engine, not a table\n")
    assert name_tables(tmp_path) == {}  # the clean copy keeps it
    (tmp_path / path).write_text(text)
    assert list(name_tables(tmp_path)) == [path]
