"""Where a queued run stands: its place on its host, what it waits for, and when it should start."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from experiments.models import Host, Run
from experiments.reads import queueing
from experiments.reads.queueing import host_queues, queued_run

from .factories import make_config, make_eagle_config, make_experiment, make_host, make_profile, make_run

pytestmark = pytest.mark.django_db


def _past_run(experiment, config, minutes: float) -> Run:
    end = timezone.now() - timedelta(hours=1)
    return make_run(
        experiment=experiment,
        config=config,
        state=Run.State.SUCCEEDED,
        started_at=end - timedelta(minutes=minutes),
        finished_at=end,
    )


def test_it_lines_up_queued_runs_in_claim_order_with_their_estimates():
    host = make_host()
    baseline, candidate = make_config(), make_eagle_config()
    profile = make_profile()
    history = make_experiment(host=host, baseline=baseline, candidates=[candidate], profile=profile, with_runs=False)
    for minutes in (10, 12, 30):  # the median, not the mean: one slow launch moves nothing
        _past_run(history, baseline, minutes)
    _past_run(history, candidate, 20)
    experiment = make_experiment(host=host, baseline=baseline, candidates=[candidate], profile=make_profile())

    queue = host_queues([host])[host.pk]

    assert [(q.position, q.run.config.name) for q in queue.runs] == [(1, baseline.name), (2, candidate.name)]
    first, second = queue.runs
    assert first.expected_duration_s == 12 * 60 and first.starts_in_s == 0
    assert second.expected_duration_s == 20 * 60 and second.starts_in_s == 12 * 60
    assert first.waiting_for == f"a worker to start it on {host.name}"
    assert second.waiting_for == "1 queued run ahead of it"
    assert queue.empties_in_s == 32 * 60
    standing = queued_run(experiment.run_set.get(config=candidate))
    assert standing is not None and standing.position == 2


def test_it_counts_the_active_run_and_says_what_blocks_the_host():
    host = make_host()
    config = make_config()
    history = make_experiment(host=host, baseline=config, candidates=[], with_runs=False)
    _past_run(history, config, 10)
    active = make_run(
        experiment=history,
        config=config,
        state=Run.State.BENCHMARKING,
        started_at=timezone.now() - timedelta(minutes=4),
    )
    Host.objects.filter(pk=host.pk).update(active_run=active)
    host.refresh_from_db()
    make_experiment(host=host, baseline=config, candidates=[])

    (standing,) = host_queues([host])[host.pk].runs

    assert standing.waiting_for == f"run {active.pk} ({config.name}, benchmarking) to finish"
    assert standing.starts_in_s is not None and 5.9 * 60 < standing.starts_in_s <= 6 * 60

    Host.objects.filter(pk=host.pk).update(is_dirty=True, dirty_reason="GPU 3 still holds 40 GiB")
    host.refresh_from_db()
    (standing,) = host_queues([host])[host.pk].runs
    assert (
        standing.waiting_for.startswith(f"an admin to clean {host.name}")
        and "GPU 3 still holds 40 GiB" in standing.waiting_for
    )


def test_it_estimates_nothing_without_a_past_run():
    experiment = make_experiment()

    queue = host_queues([experiment.host])[experiment.host_id]

    assert all(q.starts_in_s is None or q.position == 1 for q in queue.runs)
    assert queue.runs[1].starts_in_s is None and queue.empties_in_s is None


def test_the_api_and_pages_show_a_queued_runs_standing(owner_client):
    experiment = make_experiment()
    run = experiment.run_set.order_by("sequence")[1]

    data = owner_client.get(f"/api/runs/{run.pk}").json()
    assert data["queue"]["position"] == 2 and data["queue"]["waiting_for"] == "1 queued run ahead of it"
    listed = owner_client.get(f"/api/experiments/{experiment.pk}").json()["runs"]
    assert [r["queue"]["position"] for r in listed] == [1, 2]

    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    assert f"#2 on {experiment.host.name}" in page

    hosts_page = owner_client.get("/hosts/").content.decode()
    assert "<strong>2</strong> queued" in hosts_page and f"run {run.pk}</a>" in hosts_page


def test_a_run_out_of_the_queue_has_no_standing(owner_client):
    experiment = make_experiment()
    run = experiment.run_set.order_by("sequence")[0]
    Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)

    assert owner_client.get(f"/api/runs/{run.pk}").json()["queue"] is None


def test_the_hosts_page_shows_each_gpus_memory_in_use(owner_client):
    make_host(
        name="gpu8",
        gpu_inventory=[{"index": 0, "name": "NVIDIA H200", "memory_used_mib": 4096, "memory_total_mib": 143771}],
        gpus_read_at=timezone.now() - timedelta(minutes=2),
    )

    page = owner_client.get("/hosts/").content.decode()

    assert "0: 4096 / 143771 MiB" in page and "read 2\xa0minutes ago" in page


def test_the_run_page_says_where_a_queued_run_stands_and_why_one_was_skipped(owner_client):
    experiment = make_experiment()
    _, candidate = experiment.run_set.order_by("sequence")

    page = owner_client.get(candidate.get_absolute_url()).content.decode()
    assert f"Queued: #2 on {experiment.host.name}, waits for 1 queued run ahead of it" in page

    Run.objects.filter(pk=candidate.pk).update(state=Run.State.CANCELLED, cancel_reason="Skipped: the baseline failed.")
    page = owner_client.get(candidate.get_absolute_url()).content.decode()
    assert 'id="queue-standing"' not in page and "Skipped: the baseline failed." in page


def test_each_host_estimates_from_its_own_latest_runs(monkeypatch, owner_client, django_assert_max_num_queries):
    """A busy host's many recent runs never crowd a quiet host's older ones out of its estimates."""
    monkeypatch.setattr(queueing, "HISTORY_RUNS", 2)
    quiet, busy = make_host(), make_host()
    config = make_config()
    old = make_experiment(host=quiet, baseline=config, candidates=[], with_runs=False)
    for days_ago, minutes in ((32, 30), (31, 10), (30, 10)):  # the oldest is past HISTORY_RUNS: it counts no more
        end = timezone.now() - timedelta(days=days_ago)
        make_run(experiment=old, config=config, state=Run.State.SUCCEEDED, started_at=end - timedelta(minutes=minutes),
                 finished_at=end)  # fmt: skip
    recent = make_experiment(host=busy, baseline=config, candidates=[], with_runs=False)
    for _ in range(5):
        _past_run(recent, config, 40)
    for host in (quiet, busy):
        make_experiment(host=host, baseline=config, candidates=[config])

    queues = host_queues([quiet, busy])

    assert queues[quiet.pk].runs[0].expected_duration_s == 10 * 60
    assert queues[busy.pk].runs[0].expected_duration_s == 40 * 60
    with CaptureQueriesContext(connection) as two_hosts:
        assert owner_client.get("/hosts/").status_code == 200
    for _ in range(3):
        make_experiment(host=make_host(), baseline=config, candidates=[])
    with django_assert_max_num_queries(len(two_hosts)):  # as many queries for five hosts as for two
        assert owner_client.get("/hosts/").status_code == 200
