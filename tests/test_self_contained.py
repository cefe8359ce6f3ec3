"""A clone needs nothing beside it: no tracked file points at ``../shared``, production code
cites the specification and the papers by section and reference key (docs/design/), and every
specification section the code cites exists."""

from __future__ import annotations

import re
import struct
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


def git_index() -> Path | None:
    """The checkout's index file (``.git`` may be a file naming the git directory)."""
    dot_git = ROOT / ".git"
    if dot_git.is_file():
        dot_git = (ROOT / dot_git.read_text().removeprefix("gitdir:").strip()).resolve()
    return dot_git / "index" if (dot_git / "index").is_file() else None


def tracked_files() -> list[Path]:
    """What ``git ls-files`` lists, read from the index (format versions 2 to 4) rather than by
    running git, so that the test stays in the fast suite."""
    index = git_index()
    if index is None:
        pytest.skip("not a git checkout")
    data = index.read_bytes()
    signature, version, count = struct.unpack(">4sII", data[:12])
    assert signature == b"DIRC" and version in (2, 3, 4), (signature, version)
    paths, pos, previous = [], 12, b""
    for _ in range(count):
        flags = struct.unpack(">H", data[pos + 60:pos + 62])[0]
        start = pos + 62 + (2 if version >= 3 and flags & 0x4000 else 0)
        if version == 4:  # the path is the previous one minus N bytes, plus a suffix
            strip, shift = 0, start
            while True:  # offset encoding of git's varint.c
                byte = data[shift]
                strip = (strip << 7) | (byte & 0x7F)
                shift += 1
                if not byte & 0x80:
                    break
                strip += 1
            end = data.index(b"\0", shift)
            path = previous[:len(previous) - strip] + data[shift:end]
            pos = end + 1
        else:
            end = data.index(b"\0", start)
            path = data[start:end]
            pos += (end - pos + 8) // 8 * 8  # entries are NUL-padded to a multiple of 8
        previous = path
        paths.append(ROOT / path.decode())
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
