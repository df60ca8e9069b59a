"""The scale benches' own arithmetic (bench/scale_figures.py): a lost, repeated or misplaced line is counted, and a
run's orchestration overhead and its wait for a worker come out of its timeline right."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime, timedelta

import pytest

from experiments.models import Run
from simhost.hostsetup import REPO

_spec = importlib.util.spec_from_file_location("scale_figures", REPO / "bench" / "scale_figures.py")
assert _spec is not None and _spec.loader is not None
figures = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("scale_figures", figures)  # its dataclass looks itself up there
_spec.loader.exec_module(figures)


def _lines(first: int, count: int, written_at: float = 100.0) -> list[str]:
    return [f"[2026-11-29 10:00:00 TP0] Decode batch [{n}], gen throughput (token/s): 93.10 {written_at}"
            for n in range(first, first + count)]  # fmt: skip


def test_it_finds_nothing_wrong_with_a_whole_log_in_order():
    delivery = figures.Delivery(5)
    delivery.add(1, _lines(1, 3), now=100.25)
    delivery.add(4, _lines(4, 2), now=100.5)

    assert delivery.complete
    assert (delivery.missing, delivery.duplicates, delivery.out_of_order, delivery.wrong_text) == (0, 0, 0, 0)
    assert delivery.latencies == [0.25, 0.25, 0.25, 0.5, 0.5]


def test_it_counts_lost_repeated_and_misplaced_lines():
    delivery = figures.Delivery(10)
    delivery.add(1, _lines(1, 3), now=101)
    delivery.add(6, _lines(6, 2), now=101)  # 4-5 lost on the way
    delivery.add(2, _lines(2, 2), now=101)  # 2-3 again, behind the highest line
    delivery.add(8, _lines(9, 1), now=101)  # line 8 carrying line 9's text

    assert not delivery.complete
    assert delivery.missing == 4  # 4, 5, 9, 10
    assert delivery.duplicates == 2
    assert delivery.out_of_order == 2
    assert delivery.wrong_text == 1
    assert len(delivery.latencies) == 6  # each line timed at its first arrival only


def _timeline(*steps: tuple[str, float]) -> list[dict[str, str]]:
    start = datetime(2026, 12, 4, 19, 0, tzinfo=UTC)
    return [{"state": state, "at": (start + timedelta(seconds=at)).isoformat()} for state, at in steps]


def test_it_takes_loading_and_benchmarking_out_of_a_runs_wall_time():
    run = Run(timeline=_timeline(("queued", 0), ("connecting", 4), ("preflight", 4.5), ("launching", 5),
                                 ("loading", 5.25), ("warming", 15.25), ("ready", 15.5), ("verifying", 15.75),
                                 ("benchmarking", 16), ("teardown", 46), ("succeeded", 47)))  # fmt: skip

    times = figures.run_times(run.phases())

    assert times["queued"] == 4
    assert times["wall"] == 43
    assert times["overhead"] == pytest.approx(43 - 10 - 30)
    assert times["teardown"] == 1


def test_it_times_a_runs_wait_from_when_its_host_was_free():
    runs = [
        {"host": 1, "queued": 0.0, "claimed": 0.5, "finished": 10.0},
        {"host": 1, "queued": 0.0, "claimed": 10.25, "finished": 20.0},  # waited for its host, not for a worker
        {"host": 2, "queued": 0.0, "claimed": 12.0, "finished": None},
        {"host": 3, "queued": 0.0, "claimed": None, "finished": None},  # cancelled while queued
    ]

    assert figures.slot_waits(runs) == [0.5, 0.25, 12.0]


def test_it_calls_only_a_wait_far_beyond_the_others_starvation():
    assert figures.starved([0.5, 0.6, 0.4, 12.0, 0.5]) == [3]
    assert figures.starved([0.2, 0.3, 0.9, 0.25]) == []  # long compared with the rest, but under a second
