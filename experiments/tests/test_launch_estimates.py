"""The launch estimate (pure): each phase recorded from a measured run's timeline and cells, the range read from the
closest measured launches (same config, else same model, else any on the host), a live run's remaining time by its
phase, the time-outs' bound with nothing measured, and the words the pages print."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from experiments.analysis.launch_estimates import (
    Cell,
    LaunchHistory,
    LaunchKind,
    MeasuredLaunch,
    Span,
    measured_phases,
)
from experiments.formats.estimates import clock_range, estimate_text, range_in_words
from experiments.rules import gpu_hours

T0 = datetime(2026, 12, 7, 18, 0, tzinfo=UTC)
CELLS = (Cell(1, 8, 128), Cell(4, 8, 128))


def _kind(config: str = "c1", model: str = "m1", cells=CELLS, profiled: bool = False) -> LaunchKind:
    return LaunchKind(config, model, tuple(cells), profiled, readiness_timeout_s=1800, request_timeout_s=600)


def _launch(config: str = "c1", model: str = "m1", load=60.0, warmup=10.0, cells=(30.0, 12.0), after=2.0, down=5.0,
            profiled=False) -> MeasuredLaunch:  # fmt: skip
    phases = {"load": load, "warmup": warmup, "after": after, "teardown": down, "profiled": profiled,
              "cells": [[c.concurrency, c.prompts, c.output_len, s]
                        for c, s in zip(CELLS, cells, strict=True)]}  # fmt: skip
    return MeasuredLaunch(config, model, phases)


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


# What a worker records.


def test_it_records_each_phase_from_the_timeline_and_the_cells_ends():
    timeline = [{"state": "queued", "at": _at(-50)}, {"state": "connecting", "at": _at(0)},
                {"state": "loading", "at": _at(5)}, {"state": "warming", "at": _at(60)},
                {"state": "verifying", "at": _at(66)}, {"state": "benchmarking", "at": _at(70)},
                {"state": "teardown", "at": _at(115)}, {"state": "succeeded", "at": _at(121)}]  # fmt: skip
    ends = [T0 + timedelta(seconds=100), T0 + timedelta(seconds=112)]

    record = measured_phases(timeline, ends, CELLS, profiled=False)

    assert record == {"load": 60.0, "warmup": 10.0, "cells": [[1, 8, 128, 30.0], [4, 8, 128, 12.0]], "after": 3.0,
                      "teardown": 6.0, "total": 121.0, "profiled": False}  # fmt: skip


def test_it_records_nothing_for_a_run_without_every_boundary():
    timeline = [{"state": "connecting", "at": _at(0)}, {"state": "benchmarking", "at": _at(70)},
                {"state": "teardown", "at": _at(115)}, {"state": "succeeded", "at": _at(121)}]  # fmt: skip

    assert measured_phases(timeline, [T0 + timedelta(seconds=100), None], CELLS, profiled=False) is None
    assert measured_phases(timeline, [T0], CELLS, profiled=False) is None  # a cell missing
    # Seeded: written straight from queued to succeeded, no phase between.
    seeded = [{"state": "queued", "at": _at(0)}, {"state": "succeeded", "at": _at(1200)}]
    assert measured_phases(seeded, [T0, T0], CELLS, profiled=False) is None


# What an estimate reads.


def test_it_reads_the_same_config_first_then_the_model_then_any_on_the_host():
    others = [_launch("c2", "m1", load=100.0), _launch("c9", "m9", load=300.0)]

    assert LaunchHistory([*others, _launch("c1", "m1", load=50.0)]).estimate(_kind()).basis == "config"
    by_config = LaunchHistory([*others, _launch("c1", "m1", load=50.0)]).estimate(_kind())
    by_model = LaunchHistory(others).estimate(_kind())
    by_host = LaunchHistory(others[1:]).estimate(_kind())

    assert (by_config.load.mid, by_config.runs) == (50.0, 1)
    assert (by_model.basis, by_model.load.mid, by_model.runs) == ("model", 100.0, 1)
    assert (by_host.basis, by_host.load.mid) == ("host", 300.0)
    assert by_config.based_on == "from 1 run of this config on this host"
    assert by_model.based_on == "from 1 run of other configs of this model on this host"
    # A looser basis, a wider range around the same point.
    same_point = LaunchHistory([_launch("c9", "m9")])
    ratio = {basis: (e.total.high / e.total.mid) for basis, e in
             (("config", same_point.estimate(_kind("c9", "m9"))), ("host", same_point.estimate(_kind())))}  # fmt: skip
    assert ratio["host"] > ratio["config"] > 1


def test_the_range_covers_what_was_measured_and_narrows_with_more_runs():
    loads = [55.0, 60.0, 65.0]
    few = LaunchHistory([_launch(load=v) for v in loads]).estimate(_kind())
    many = LaunchHistory([_launch(load=v) for v in loads * 4]).estimate(_kind())

    assert few.load.mid == 60.0 and few.load.low < 55.0 and few.load.high > 65.0
    assert many.load.high < few.load.high and many.load.low > few.load.low
    total = few.total
    assert total.low < 60 + 10 + 42 + 2 + 5 < total.high
    assert total.mid == pytest.approx(60 + 10 + 30 + 12 + 2 + 5)


def test_one_run_that_hung_does_not_widen_the_range_for_good():
    hung = [_launch(load=60.0) for _ in range(11)] + [_launch(load=3000.0)]

    estimate = LaunchHistory(hung).estimate(_kind())

    assert estimate.load.mid == 60.0 and estimate.load.high < 100


def test_a_cell_shape_never_measured_is_scaled_by_its_work():
    # 30 s for 8 prompts one at a time (8 waves x 128 tokens); 16 prompts at 1 are twice the work.
    estimate = LaunchHistory([_launch(cells=(30.0, 12.0))]).estimate(_kind(cells=(Cell(1, 16, 128),)))

    (cell,) = estimate.cells
    rates = sorted([30.0 / (8 * 128), 12.0 / (2 * 128)])
    assert cell.mid == pytest.approx(16 * 128 * (rates[0] + rates[1]) / 2)
    assert cell.low < 60.0 < cell.high


def test_a_profiled_launch_takes_longer_after_its_cells_than_the_plain_ones_measured():
    history = LaunchHistory([_launch(after=2.0)])

    plain, profiled = history.estimate(_kind()), history.estimate(_kind(profiled=True))

    assert profiled.after.mid > plain.after.mid and profiled.total.high > plain.total.high
    measured = LaunchHistory([_launch(after=2.0), _launch(after=40.0, profiled=True)]).estimate(_kind(profiled=True))
    assert measured.after.mid == 40.0


def test_with_nothing_measured_it_ranges_from_zero_to_the_time_outs_bound():
    estimate = LaunchHistory([]).estimate(_kind())

    shape = gpu_hours.LaunchShape(1, (1, 4), 1, 8, 600, 1800)
    assert estimate.basis == "none" and not estimate.is_known and estimate.runs == 0
    assert estimate.total.low == 0 and estimate.total.high == pytest.approx(shape.time_bound_s)
    assert estimate.based_on == "nothing measured on this host yet: up to what the profile's time-outs allow"


def test_what_is_left_of_a_live_launch_follows_its_phase():
    estimate = LaunchHistory([_launch()]).estimate(_kind())
    whole = estimate.total

    assert estimate.remaining("queued", 0) == whole
    loading = estimate.remaining("load", 20)
    assert loading.mid == pytest.approx(whole.mid - 20)
    # In the second cell, 35 s into the benchmark: the first cell (30 s) is done, 5 s of the second.
    benchmarking = estimate.remaining("cells", 35, cells_done=1)
    assert benchmarking.mid == pytest.approx(12 - 5 + 2 + 5)
    assert estimate.remaining("teardown", 1).mid == pytest.approx(4)
    # Past its range, a phase still has a little left: it has not ended.
    overdue = estimate.remaining("teardown", 600)
    assert overdue.low == 0 and overdue.high > 0


def test_a_span_adds_and_what_is_left_never_goes_below_zero():
    assert Span(1, 2, 3) + Span(10, 20, 30) == Span(11, 22, 33)
    assert Span(10, 20, 30).after(25) == Span(0, 0, 5)


# The words.


def test_it_words_a_range_of_seconds_and_of_clock_times():
    assert range_in_words(60, 180) == "in 1-3 min"
    assert range_in_words(45, 150) == "in 1-2 min"
    assert range_in_words(20, 150) == "in 20 s-2 min"
    assert range_in_words(0.2, 5) == "within 5 s"
    assert range_in_words(4000, 7200) == "in 67 min-2 h"
    assert clock_range(T0 + timedelta(minutes=42), T0 + timedelta(minutes=47), T0) == "18:42-18:47 UTC"
    assert clock_range(T0, T0 + timedelta(seconds=20), T0) == "18:00 UTC"
    assert clock_range(T0, T0 + timedelta(hours=8), T0) == "18:00-2026-12-08 02:00 UTC"


def test_it_says_when_a_queued_run_starts_and_ends_and_what_that_rests_on():
    def minutes(m: float) -> datetime:
        return T0 + timedelta(minutes=m)

    based = "from 12 runs of this config on this host"
    queued = estimate_text(now=T0, starts=(minutes(1), minutes(3)), ends=(minutes(42), minutes(47)), queued=True,
                           known=True, based_on=based)  # fmt: skip
    live = estimate_text(now=T0, starts=None, ends=(minutes(1), minutes(3)), queued=False, known=True, based_on=based)
    unknown = estimate_text(now=T0, starts=(T0, minutes(50)), ends=(T0, minutes(120)), queued=True, known=False,
                            based_on="nothing measured")  # fmt: skip
    late = estimate_text(now=minutes(5), starts=(minutes(1), minutes(3)), ends=(minutes(42), minutes(47)),
                         queued=True, known=True, based_on=based)  # fmt: skip

    assert queued == f"starts in 1-3 min, done by 18:42-18:47 UTC ({based})"
    assert live == f"done in 1-3 min, by 18:01-18:03 UTC ({based})"
    assert unknown == "starts within 50 min, done by 20:00 UTC at the latest (nothing measured)"
    assert late.startswith("should have started by 18:03 UTC, done by 18:42-18:47 UTC")
    assert estimate_text(now=T0, starts=None, ends=None, queued=True, known=True, based_on=based) == (
        "cannot start until its host is cleaned"
    )
