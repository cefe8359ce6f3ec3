"""The line between the numerical core and the service shell, checked from the imports."""

from __future__ import annotations

import subprocess
import sys

import pytest


def loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    out = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys\n"
                          "print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", [
    "import streamanon",
    "import streamanon.collector",
    "import streamanon.store",
    "import streamanon.cli",
])
def test_importing_the_package_or_the_ingest_path_loads_no_numerical_core(statement):
    loaded = loaded_after(statement)
    assert "numba" not in loaded
    assert not {m for m in loaded if m.startswith("streamanon.engines")}


def test_the_lazy_exports_still_work():
    loaded = loaded_after("from streamanon import microaggregate, Microaggregation")
    assert "streamanon.api" in loaded
