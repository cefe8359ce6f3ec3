"""A clone needs nothing beside it: no tracked file points at ``../shared``, production code
cites the specification and the papers by section and reference key (docs/design/), and every
specification section the code cites exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPECIFICATION = ROOT / "docs" / "design" / "specification.md"
OUTSIDE = ("../shared", "shared/datasets", "shared/papers", "SPEC.md")
# History and ticket numbers belong to CHANGELOG.md; the papers are cited by key, not by path.
PRODUCTION_FORBIDDEN = (re.compile(r"\bissue \d+", re.IGNORECASE), re.compile(r"\bSPEC\b"),
                        re.compile(r"papers/\d{3}_"), re.compile(r"papers/notes/"))
CITATION = re.compile(r"specification\s+(?:section|sec\.|§)\s*(\d+)|design spec\s+§\s*(\d+)",
                      re.IGNORECASE)


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    paths = [ROOT / p for p in out.stdout.decode().split("\0") if p]
    return [p for p in paths if p.is_file()]


def text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def production_modules() -> list[Path]:
    return sorted(p for package in ("streamanon", "scheduler")
                  for p in (ROOT / package).rglob("*.py"))


def test_no_tracked_file_points_outside_the_clone():
    offenders = []
    for path in tracked_files():
        if path.name == "CHANGELOG.md" or path == Path(__file__).resolve():
            continue
        content = text(path)
        if content is None:
            continue
        for number, line in enumerate(content.splitlines(), 1):
            if any(needle in line for needle in OUTSIDE):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("pattern", PRODUCTION_FORBIDDEN, ids=lambda p: p.pattern)
def test_production_code_cites_by_reference_and_carries_no_history(pattern):
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in production_modules()
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert not offenders, "\n".join(offenders)


def test_every_cited_specification_section_exists():
    sections = set(re.findall(r"^## (\d+)\. ", SPECIFICATION.read_text(encoding="utf-8"),
                              re.MULTILINE))
    cited: dict[str, list[str]] = {}
    for path in tracked_files():
        if path.suffix not in {".py", ".md", ".toml", ".yml", ".yaml"}:
            continue
        content = text(path) or ""
        # A citation may be broken across a line end in a wrapped docstring.
        for match in CITATION.finditer(re.sub(r"\s+", " ", content)):
            cited.setdefault(match.group(1) or match.group(2), []).append(
                str(path.relative_to(ROOT)))
    assert cited, "no specification section is cited anywhere"
    missing = {section: files for section, files in cited.items() if section not in sections}
    assert not missing, missing
