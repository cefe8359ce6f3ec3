"""The PostgreSQL server the store tests share, one per test module."""

from __future__ import annotations

import pytest

from simulations.postgres import postgres_server, why_unavailable

_PG_REASON = why_unavailable()


@pytest.fixture(scope="module")
def postgres_url():
    if _PG_REASON:  # `make test` installs Debian's postgresql; never skip these silently
        pytest.fail(f"PostgreSQL store tests cannot run: {_PG_REASON} "
                    "(`make test` installs Debian's postgresql package)")
    with postgres_server() as url:
        yield url
