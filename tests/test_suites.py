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


def test_the_slowest_tests_start_first_on_every_worker():
    """worksteal gives each worker a contiguous share and runs it from the front: the slow
    tests go to the fronts of the shares, the longest first, balanced by their seconds."""
    from tests.durations import segments, spread

    ids = [f"t{i}" for i in range(20)]
    seconds = {"t3": 100.0, "t17": 90.0, "t9": 50.0, "t12": 45.0, "t5": 5.0}
    order = spread(ids, ids, seconds, workers=3)
    assert sorted(order) == sorted(ids)  # every test once
    sizes = segments(20, 3)
    assert sizes == [6, 7, 7]  # what worksteal hands three idle workers
    shares = [order[:6], order[6:13], order[13:]]
    assert [share[0] for share in shares] == ["t3", "t17", "t9"]
    assert shares[2][:2] == ["t9", "t12"]  # 50 s: the least slow work when t12 comes
    assert shares[1][:2] == ["t17", "t5"]  # 90 s against 95 and 100 when t5 comes
    fast = [t for t in order if t not in seconds]
    assert fast == [t for t in ids if t not in seconds]  # the others keep their order
    assert spread(ids, ids, {}, workers=4) == ids


def test_the_durations_table_of_a_run_is_read():
    from tests.durations import parse

    text = ("== slowest 30 durations ==\n208.14s call     tests/a.py::test_x\n"
            "2.00s setup    tests/a.py::test_x\n1.50s call     tests/b.py::test_y[1-2]\n"
            "== 3 passed ==\n")
    assert parse(text) == {"tests/a.py::test_x": 210.1, "tests/b.py::test_y[1-2]": 1.5}


def test_a_test_that_measures_a_speed_claim_keeps_its_place():
    from tests.durations import MEASURING, known

    assert MEASURING and not MEASURING & set(known())
