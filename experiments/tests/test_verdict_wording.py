"""How the comparison page words a verdict: a candidate that never pays, and what an inconclusive row needs."""

from __future__ import annotations

import json

import pytest

from experiments.analysis import INCONCLUSIVE, ComparisonRow, compare, never_pays, settling_note
from experiments.analysis.comparison import Sample
from experiments.models import Measurement, Run
from experiments.reads.reports import build_report
from experiments.tests.factories import make_config, make_eagle_config, make_experiment, make_profile


def _row(speedup: float, n: tuple[int, int] = (3, 3), runs_needed: int | None = None) -> ComparisonRow:
    return ComparisonRow("eagle", 1, 100.0, 100.0 * speedup, speedup, None, None, INCONCLUSIVE, *n, runs_needed)


def test_it_tells_a_candidate_that_never_pays_from_one_that_stops_paying() -> None:
    rows = [_row(0.8), ComparisonRow("eagle", 4, 100.0, 70.0, 0.7, None, None, INCONCLUSIVE, 3, 3, None)]
    assert never_pays(rows, "eagle")
    stops = [*rows, ComparisonRow("fast", 1, 100.0, 110.0, 1.1, None, None, INCONCLUSIVE, 3, 3, None)]
    stops.append(ComparisonRow("fast", 4, 100.0, 90.0, 0.9, None, None, INCONCLUSIVE, 3, 3, None))
    assert not never_pays(stops, "fast")
    assert not never_pays(rows, "absent")


def test_it_says_how_many_samples_and_launches_an_inconclusive_row_needs() -> None:
    samples = [Sample("b", 1, i, 0, v) for i, v in enumerate([80.0, 90.0, 85.0])]
    samples += [Sample("c", 1, i, 0, v) for i, v in enumerate([84.0, 99.0, 92.0])]
    (row,) = compare(samples, baseline="b", candidates=["c"])
    assert row.verdict == INCONCLUSIVE and row.runs_needed

    note = settling_note(row, passes_per_launch=3)

    assert note.startswith(f"needs ~{row.runs_needed} samples per side, has 3 and 3: about ")
    assert "more launch" in note


def test_it_says_why_no_number_of_runs_would_settle_a_row() -> None:
    assert settling_note(_row(1.005), 3) == "within 2% of the baseline: more runs would not make it faster or slower"
    assert (
        settling_note(_row(1.2, n=(1, 1)), 3) == "needs at least 2 samples per side to measure the spread, has 1 and 1"
    )
    assert settling_note(_row(1.01, runs_needed=None), 3).startswith("within 2%")
    assert settling_note(_row(1.1, runs_needed=1000), 1).startswith("needs 1000 or more samples per side")
    settled = ComparisonRow("eagle", 1, 100.0, 120.0, 1.2, 1.1, 1.3, "faster", 3, 3, None)
    assert settling_note(settled, 3) == ""


def _measure(run: Run, level: int, values: list[float]) -> None:
    for pass_index, tok_s in enumerate(values):
        Measurement.objects.create(
            run=run, pass_index=pass_index, concurrency=level, completed=16, duration_s=10.0,
            output_throughput=tok_s, total_throughput=2 * tok_s, request_throughput=1.0,
        )  # fmt: skip


@pytest.mark.django_db
def test_it_says_never_pays_without_a_break_even_mark_at_the_lowest_level(owner_client) -> None:
    slow = make_eagle_config(name="eagle3-slow")
    experiment = make_experiment(
        baseline=make_config(name="baseline"), candidates=[slow], profile=make_profile(concurrency=[1, 4], passes=3)
    )
    cells = {"baseline": {1: [80.0, 82.0, 84.0], 4: [300.0, 302.0, 304.0]},
             "eagle3-slow": {1: [60.0, 61.0, 62.0], 4: [250.0, 251.0, 252.0]}}  # fmt: skip
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        run.save(update_fields=["state"])
        for level, values in cells[run.config.name].items():
            _measure(run, level, values)

    report = build_report(experiment)
    page = owner_client.get(experiment.get_absolute_url()).content.decode()

    assert report.never_pays == ["eagle3-slow"]
    names = [trace["name"] for trace in report.figures["speedup"]["data"]]
    assert not any("break-even" in name for name in names), names
    break_even = page[page.index('id="break-even"') :].split("</p>")[0]
    assert "<strong>never pays</strong> at the measured concurrencies" in break_even
    assert "stops paying" not in break_even
    # The API keeps its field and adds the new one.
    api = json.loads(owner_client.get(f"/experiments/{experiment.pk}/export.json").content)
    assert api["never_pays"] == ["eagle3-slow"] and api["break_even"] == {"eagle3-slow": 1}


@pytest.mark.django_db
def test_it_names_the_pinned_baseline_without_saying_baseline_twice(owner_client, owner) -> None:
    from experiments.actions.audit import Actor
    from experiments.actions.review import do_pin_baseline

    experiment = make_experiment(baseline=make_config(name="baseline"))
    do_pin_baseline(host=experiment.host, profile=experiment.profile, config=experiment.baseline, actor=Actor(owner))

    page = owner_client.get(experiment.get_absolute_url()).content.decode()

    pinned = page[page.index('id="pinned-baseline"') :].split("</p>")[0]
    assert "baseline config, <strong>baseline</strong>, is the one the team pinned" in pinned
    assert "The baseline <strong>baseline</strong> is" not in page


@pytest.mark.django_db
def test_it_keeps_a_finished_experiments_report_until_its_runs_change(owner_client, django_assert_max_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    experiment = make_experiment(baseline=make_config(name="baseline"), profile=make_profile(passes=3))
    for run in experiment.run_set.select_related("config"):
        run.state = Run.State.SUCCEEDED
        run.save(update_fields=["state"])
        _measure(run, 1, [80.0, 81.0, 82.0] if run.config.name == "baseline" else [95.0, 96.0, 97.0])
    url = experiment.get_absolute_url()
    with CaptureQueriesContext(connection) as first:
        assert "1.185×" in owner_client.get(url).content.decode()
    with CaptureQueriesContext(connection) as second:
        assert "1.185×" in owner_client.get(url).content.decode()
    assert len(second.captured_queries) < len(first.captured_queries)

    # A re-run measured again: the page shows the new results at once.
    run = experiment.run_set.exclude(config=experiment.baseline).get()
    Measurement.objects.filter(run=run).update(output_throughput=70.0)
    Measurement.objects.filter(run=run, pass_index=0).delete()
    assert "1.185×" not in owner_client.get(url).content.decode()
    # A run that is running again (a re-run queued) is never served from the cache.
    experiment.run_set.create(config=experiment.baseline, host=experiment.host, sequence=9)
    assert 'data-run="' in owner_client.get(url).content.decode()
