"""A headless browser for the tests that look at a page as a person would: Debian's Chromium
driven by Playwright (``make test`` installs the chromium package)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``Browser``), closed after the test."""
    from playwright.sync_api import sync_playwright

    if CHROMIUM is None:
        pytest.fail("Chromium not found: `make test` installs Debian's chromium package")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()
