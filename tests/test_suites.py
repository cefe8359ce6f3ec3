"""The two suites (``make check`` and ``make test``): a test's markers follow from the fixtures it
uses, and a test that starts a child process without saying so fails, naming what to request."""

from __future__ import annotations

import pytest

from tests.conftest import REPO

CONFTEST = """
from tests.conftest import (  # noqa: F401
    RESOURCES, pytest_collection_modifyitems, pytest_runtest_call, pytest_runtest_setup,
    subprocesses)
import pytest

def pytest_configure(config):
    for marker in RESOURCES:
        config.addinivalue_line("markers", marker + ": a resource")

@pytest.fixture(scope="session")
def broker():
    yield "127.0.0.1:9"

@pytest.fixture(scope="module")
def uses_a_child(subprocesses):
    return "ok"

@pytest.fixture(scope="module")
def server(subprocesses):
    import subprocess, sys
    yield "started"
    subprocess.run([sys.executable, "-c", "pass"], check=True)  # stopped
"""

TESTS = """
import subprocess, sys

def test_pure():
    assert 1 + 1 == 2

def test_kafka(broker):
    assert broker

def test_spawns_undeclared():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_spawns_declared(subprocesses):
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_through_a_module_fixture(uses_a_child):
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_inner=TESTS)
    pytester.syspathinsert(REPO)
    return pytester


def test_markers_follow_from_the_fixtures(inner):
    result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-q", "--co",
                                       "-m", "not (kafka or process)")
    result.stdout.fnmatch_lines(["*test_pure*", "*test_spawns_undeclared*"])
    assert "test_kafka" not in result.stdout.str()
    assert "test_spawns_declared" not in result.stdout.str()
    assert "test_through_a_module_fixture" not in result.stdout.str()


def test_a_child_process_must_be_declared(inner, subprocesses):
    result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-q", "-k", "spawns")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_spawns_undeclared starts a child process*"
                                 "without the `subprocesses` fixture*"])


def test_a_server_stopped_after_an_unmarked_test_is_no_error(inner, subprocesses):
    """A module-scoped server is torn down after the module's last test, marked or not."""
    inner.makepyfile(test_teardown="""
def test_uses_the_server(server):
    assert server == "started"

def test_pure_and_last():
    assert True
""")
    result = inner.runpytest_inprocess("-p", "no:cacheprovider", "-q", "test_teardown.py")
    result.assert_outcomes(passed=2)
