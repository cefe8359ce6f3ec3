"""Where the tests find what the documentation shows: README.md and the pages under docs/.

``page("guide/cli.md")`` is a page's text (``page("README.md")`` the README's),
``section(text, title)`` the part under a heading (to the next heading of the same level or
above), ``blocks(text, "sh")`` its fenced code blocks of one language, and ``commands(block)``
the command lines of a shell block (continuation lines joined, comments dropped).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"


def path(name: str) -> Path:
    """``README.md`` (or another file at the root), or a page under docs/."""
    return REPO / name if (REPO / name).exists() and "/" not in name else DOCS / name


def page(name: str) -> str:
    return path(name).read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    """The part of ``text`` under the heading ``title`` (any level), up to the next heading of
    the same level or above; headings inside code blocks do not count."""
    lines = text.splitlines()
    fence = False
    start = level = None
    for number, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
            continue
        heading = None if fence else re.match(r"^(#{1,6}) (.*?)\s*$", line)
        if not heading:
            continue
        depth = len(heading.group(1))
        if start is None and heading.group(2) == title:
            start, level = number + 1, depth
        elif start is not None and depth <= level:
            return "\n".join(lines[start:number]) + "\n"
    assert start is not None, f"no section {title!r}"
    return "\n".join(lines[start:]) + "\n"


def blocks(text: str, *languages: str) -> list[str]:
    """The fenced code blocks of ``text`` in one of ``languages`` (e.g. "sh", "toml")."""
    found = re.findall(r"^```([a-z]*)\n(.*?)^```", text, flags=re.S | re.M)
    return [body for language, body in found if language in languages]


def block(text: str, language: str) -> str:
    """The first code block of ``language`` in ``text``."""
    found = blocks(text, language)
    assert found, f"no ```{language} block"
    return found[0]


def commands(shell: str) -> list[str]:
    """The command lines of a shell block: continuation lines (ending in ``\\``) joined, the
    comment after a ``#`` preceded by a space dropped, empty lines left out."""
    joined = re.sub(r"\\\n\s*", " ", shell)
    out = []
    for line in joined.splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        if line:
            out.append(" ".join(line.split()))
    return out


def shown_commands(name: str, title: str, needle: str) -> list[str]:
    """The command lines of the shell blocks under ``title`` on page ``name`` that contain
    ``needle`` (e.g. the one command a test runs as the page shows it)."""
    return [line for b in blocks(section(page(name), title), "sh", "console", "bash")
            for line in commands(b) if needle in line]
