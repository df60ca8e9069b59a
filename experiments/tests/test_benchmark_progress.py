"""A benchmarking run says where it is, in the API, the live state, the runs table and the run page."""

from __future__ import annotations

import pytest

from experiments.models import Run
from experiments.serializers import run_state_json
from experiments.tests.factories import make_experiment, make_run

pytestmark = pytest.mark.django_db


def _benchmarking(cell: int, done: int, total: int) -> Run:
    experiment = make_experiment()
    experiment.profile.concurrency, experiment.profile.passes = [1, 4], 3
    experiment.profile.save()
    return make_run(
        experiment=experiment, state=Run.State.BENCHMARKING, benchmark_cell=cell, cell_requests_done=done,
        cell_requests_total=total,
    )  # fmt: skip


def test_it_names_the_cells_concurrency_and_pass_and_the_share_of_the_benchmark_done():
    run = _benchmarking(cell=3, done=8, total=16)  # cells: p1 c1, p1 c4, p2 c1, p2 c4 <- here, p3 c1, p3 c4

    progress = run.benchmark_progress()

    assert progress is not None
    assert (progress["concurrency"], progress["pass"], progress["passes"]) == (4, 2, 3)
    assert (progress["cell"], progress["cells"], progress["percent"]) == (4, 6, 58)  # (3 + 8/16) / 6
    assert progress["label"] == "c=4 · pass 2/3 · 58%"
    assert run_state_json(run)["benchmark_progress"] == progress


def test_before_the_client_reports_it_counts_whole_cells_and_says_nothing_outside_benchmarking():
    assert _benchmarking(cell=0, done=0, total=0).benchmark_progress()["label"] == "c=1 · pass 1/3 · 0%"  # type: ignore[index]
    assert _benchmarking(cell=5, done=16, total=16).benchmark_progress()["percent"] == 100  # type: ignore[index]
    finished = _benchmarking(cell=6, done=0, total=0)
    finished.state = Run.State.TEARDOWN
    assert finished.benchmark_progress() is None and run_state_json(finished)["benchmark_progress"] is None


def test_the_runs_table_and_the_run_page_show_it(owner_client):
    run = _benchmarking(cell=1, done=4, total=16)

    table = owner_client.get(run.experiment.get_absolute_url()).content.decode()
    page = owner_client.get(run.get_absolute_url()).content.decode()

    assert "c=4 · pass 1/3 · 20%" in table  # (1 + 4/16) / 6
    assert 'id="benchmark-progress" >' in page and "c=4 · pass 1/3 · 20%" in page
