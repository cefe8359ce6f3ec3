"""The line between the numerical core and the service shell, checked from the imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    out = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys\n"
                          "print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", [
    "import streamanon",
    "import streamanon.service.collector",
    "import streamanon.service.store",
    "import streamanon.cli",
])
def test_importing_the_package_or_the_ingest_path_loads_no_numerical_core(subprocesses, statement):
    loaded = loaded_after(statement)
    assert "numba" not in loaded
    assert not {m for m in loaded if m.startswith("streamanon.engines")}


def test_the_lazy_exports_still_work(subprocesses):
    loaded = loaded_after("from streamanon import microaggregate, Microaggregation")
    assert "streamanon.api" in loaded


ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "streamanon"
SHELL = ("streamanon.service", "streamanon.cli")


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, at the top or inside a function (absolute names)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def core_files() -> list[Path]:
    return [p for p in CORE.rglob("*.py")
            if p.relative_to(CORE).parts[0] not in ("service", "cli", "__main__.py")]


def test_the_core_never_imports_the_shell():
    crossing = {str(p.relative_to(ROOT)): sorted(n for n in imports_of(p)
                                                 if n.startswith(SHELL))
                for p in core_files()}
    assert len(crossing) > 20  # the core is there
    assert {f: n for f, n in crossing.items() if n} == {}


def test_the_line_check_can_fail(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from streamanon.service.store import open_store\n")
    assert any(n.startswith(SHELL) for n in imports_of(bad))
