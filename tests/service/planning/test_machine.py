"""The load meter: the other work on the machine while a timing ran, as the plan's slow-down."""

from __future__ import annotations

import pytest

from scheduler import live
from streamanon.service import machine


def test_the_meter_counts_the_other_processes_cores_not_this_ones(monkeypatch):
    clock = {"busy": 1000.0, "own": 10.0, "wall": 0.0}
    monkeypatch.setattr(machine, "_busy_seconds", lambda: clock["busy"])
    monkeypatch.setattr(machine, "_own_seconds", lambda: clock["own"])
    monkeypatch.setattr(machine.time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(machine, "usable_cores", lambda: 2)
    stop = machine.load_meter()
    # 10 s: this process used both cores (20 s of CPU), nothing else ran
    clock.update(busy=1020.0, own=30.0, wall=10.0)
    assert stop() == pytest.approx(1.0)
    stop = machine.load_meter()
    # 10 s more: this process 10 s of CPU, another one a whole core (10 s)
    clock.update(busy=1040.0, own=40.0, wall=20.0)
    assert stop() == pytest.approx(live.load_slowdown(1.0, 2)) == pytest.approx(1.5)


def test_without_proc_stat_the_meter_says_quiet(monkeypatch):
    monkeypatch.setattr(machine, "_busy_seconds", lambda: None)
    assert machine.load_meter()() == 1.0


def test_on_this_machine_the_meter_reads_something_sane():
    stop = machine.load_meter()
    total = sum(i * i for i in range(200_000))  # a little own work
    assert total > 0 and stop() >= 1.0
