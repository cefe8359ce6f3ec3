"""One owner for a survey's state: no module but ``streamanon/service/survey.py`` assigns a
field of a running survey (:class:`~streamanon.service.survey.Survey`), at any depth.

The planner, the steps (base run, close, release), the lease and the service read a survey
and hand what they decided to its methods (``settle_engine``, ``adopt_models``,
``keep_plan``, ``closed_as_stored``, ``start_planning``, ...), which write under its lock.
The rule is read with ``ast`` from the files: a name is a survey where it is called
``survey`` (or ``rt``, its old name), where a parameter is annotated ``Survey`` or
``RunningSurvey``, or where it is bound from a ``surveys`` mapping (``x = self.surveys[sid]``,
``for x in self.surveys.values()``, ``for sid, x in self.surveys.items()``); a write is an
assignment, an augmented assignment, a ``del`` or a ``setattr`` whose target is an attribute
or an item below such a name, or below ``<...>.surveys[...]`` itself. Like the floors'
rules, it is run on a tree with planted violations too, so that a check that cannot fail does
not pass for one that holds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_architecture import ROOT, modules

OWNER = "streamanon.service.survey"
SURVEY_NAMES = {"survey", "rt"}
SURVEY_TYPES = {"Survey", "RunningSurvey"}


def _annotation_names(node: ast.expr | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return set()
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _is_surveys_item(node: ast.expr) -> bool:
    """``<...>.surveys[...]`` or ``surveys[...]``."""
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    return (isinstance(base, ast.Attribute) and base.attr == "surveys") or (
        isinstance(base, ast.Name) and base.id == "surveys")


def _is_surveys_iteration(node: ast.expr) -> bool:
    """``<...>.surveys.values()`` or ``<...>.surveys.items()``."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("values", "items")
            and isinstance(node.func.value, (ast.Attribute, ast.Name))
            and getattr(node.func.value, "attr", getattr(node.func.value, "id", None))
            == "surveys")


def _survey_names(function: ast.AST) -> set[str]:
    """The names that hold a survey in ``function`` (or a module's top level)."""
    names = set(SURVEY_NAMES)
    for node in ast.walk(function):
        if isinstance(node, ast.arg) and _annotation_names(node.annotation) & SURVEY_TYPES:
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and _is_surveys_item(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)) \
                and _is_surveys_iteration(node.iter):
            target = node.target
            if isinstance(target, ast.Tuple) and target.elts:
                target = target.elts[-1]
            if isinstance(target, ast.Name):
                names.add(target.id)
    return names


def _below_a_survey(target: ast.expr, names: set[str]) -> bool:
    """Whether ``target`` (an attribute or an item, at any depth) is a survey's field."""
    if not isinstance(target, (ast.Attribute, ast.Subscript)):
        return False
    node = target
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        inner = node.value
        if _is_surveys_item(inner) and node is not inner:
            return True
        node = inner
    return isinstance(node, ast.Name) and node.id in names


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        out: list[ast.expr] = []
        for t in node.targets:
            out.extend(t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])
        return out
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "setattr" and node.args:
        return [ast.Attribute(value=node.args[0], attr="?", ctx=ast.Store())]
    return []


def survey_writers(root: Path = ROOT) -> dict[str, list[int]]:
    """Modules other than ``survey.py`` that assign a survey's field: module -> lines."""
    found: dict[str, list[int]] = {}
    for name, path in modules(root).items():
        if name == OWNER:
            continue
        tree = ast.parse(path.read_text())
        scopes = [tree] + [n for n in ast.walk(tree)
                           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        lines: set[int] = set()
        for scope in scopes:
            names = _survey_names(scope)
            body = scope.body if isinstance(scope, ast.Module) else [scope]
            for stmt in body:
                for node in ast.walk(stmt):
                    if any(_below_a_survey(t, names) for t in _targets(node)):
                        lines.add(node.lineno)
        if lines:
            found[name] = sorted(lines)
    return found


def test_only_survey_py_writes_a_survey():
    assert len(modules()) > 60  # the tree is there
    assert survey_writers() == {}, survey_writers.__doc__


#: Planted writes, each in a module of its own; every one must be found.
PLANTED = {
    "plain": "def f(survey):\n    survey.state = 'open'\n",
    "deep": "def f(survey):\n    survey.ingest.closed_at = 1.0\n",
    "item": "def f(survey):\n    survey.timings['x'] = 1.0\n",
    "augmented": "def f(survey):\n    survey.ingest.stored += 1\n",
    "annotated": "def f(s: 'RunningSurvey'):\n    s.config = None\n",
    "typed": "from x import Survey\ndef f(one: Survey) -> None:\n    one.chosen = 1\n",
    "looked_up": "def f(self, sid):\n    sv = self.surveys[sid]\n    sv.plans.models = 1\n",
    "direct": "def f(self, sid):\n    self.surveys[sid].last_plan = None\n",
    "iterated": "def f(self):\n    for sid, sv in self.surveys.items():\n"
                "        sv.base_task = None\n",
    "values": "def f(self):\n    for sv in self.surveys.values():\n        sv.planner = None\n",
    "unpacked": "def f(survey):\n    survey.base_task, x = None, 1\n",
    "setattr": "def f(survey):\n    setattr(survey, 'choice', 1)\n",
    "deleted": "def f(survey):\n    del survey.base_release\n",
    "old_name": "def f(rt):\n    rt.window_warning = 'late'\n",
}


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_the_rule_finds_a_planted_write(planted, tmp_path):
    service = tmp_path / "streamanon" / "service"
    service.mkdir(parents=True)
    (tmp_path / "streamanon" / "__init__.py").write_text("")
    (service / "__init__.py").write_text("")
    # the owner may write; reads and method calls elsewhere are no writes
    (service / "survey.py").write_text("def f(survey):\n    survey.state = 'open'\n")
    (service / "reader.py").write_text(
        "def f(survey, config):\n    x = survey.ingest.closed_at\n    survey.settle('mdav')\n"
        "    survey.read_ahead.drop()\n    config.engine = 'mdav'\n    other = 1\n"
        "    other.state = 2\n")
    assert survey_writers(tmp_path) == {}  # the clean copy keeps it
    (service / f"{planted}.py").write_text(PLANTED[planted])
    assert list(survey_writers(tmp_path)) == [f"streamanon.service.{planted}"]
