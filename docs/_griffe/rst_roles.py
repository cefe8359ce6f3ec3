"""A griffe extension for the API reference: the docstrings are written for Sphinx and for
doctest, the site is Markdown. Before mkdocstrings renders a docstring, this turns the Sphinx
roles (``:func:`name```, ``:mod:`~pkg.name```, ...) into inline code and fences each run of
``>>>`` doctest lines (with their expected output) as a Python code block. The docstrings in
the code stay as they are."""

from __future__ import annotations

import re

from griffe import Extension, Object

ROLE = re.compile(r":(?:func|meth|mod|class|data|attr|obj|exc|const|ref|py:\w+):`~?([^`]+)`")


def markdown(text: str) -> str:
    text = ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>> "):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
                block.append(lines[i][len(indent):])
                i += 1
            if out and out[-1].strip():
                out.append("")
            out += [f"{indent}```python", *[indent + b for b in block], f"{indent}```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


class SphinxToMarkdown(Extension):
    def on_instance(self, *, obj: Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
