"""Where queued and live runs stand: a queued run's place on its host and what it waits for, and every pending run's
start and end as ranges, learned from the runs a worker measured there (never seeded or imported ones), through the
reads, the API and the pages."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from dashboard.demo.history import seed_drift_history
from dashboard.demo.management.commands.demo import demo_experiment_payload
from experiments.actions.runs import do_advance_run, do_claim_next_run
from experiments.models import ApiToken, Experiment, Host, Run, Study
from experiments.reads import queueing
from experiments.reads.queueing import HANDOVER_S, host_queues, run_estimate

from .factories import (
    make_config,
    make_eagle_config,
    make_experiment,
    make_host,
    make_measured_run,
    make_profile,
    make_run,
)
from .test_imports import BASELINE
from .test_studies import _start as _start_study

pytestmark = pytest.mark.django_db


def _queued(host: Host, config, candidates=()) -> Experiment:
    return make_experiment(host=host, baseline=config, candidates=list(candidates), profile=make_profile())


def _history(host: Host, baseline, candidates=()) -> Experiment:
    return make_experiment(host=host, baseline=baseline, candidates=list(candidates), profile=make_profile(),
                           with_runs=False)  # fmt: skip


def test_it_learns_from_measured_runs_only_never_from_seeded_or_imported_ones(client, owner):
    host = make_host(name="gpu-8")
    payload = demo_experiment_payload(host.models_root)
    seeded = seed_drift_history(host, payload["baseline"], payload["profile"], owner)
    _, token = ApiToken.issue(owner)
    imported = client.post("/api/imports", json.dumps({"host": host.name, "files": [{"name": "b.jsonl",
                           "content": BASELINE}]}), content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert seeded is not None and imported.status_code == 201
    assert Run.objects.filter(host=host, state=Run.State.SUCCEEDED).count() == 16  # 15 seeded nights, 1 imported
    assert not Run.objects.measured().exists()
    assert not any(run.is_measured for run in Run.objects.all())
    # Of the seeded history's own config and profile: still nothing to learn from.
    queued = make_experiment(host=host, baseline=seeded.baseline, candidates=[], profile=seeded.profile)

    _, estimate = run_estimate(queued.run_set.get())

    assert estimate is not None and estimate.launch.basis == "none" and not estimate.launch.is_known

    measured = make_measured_run(_history(host, seeded.baseline), load_s=90)
    _, estimate = run_estimate(queued.run_set.get())

    assert estimate is not None and measured.is_measured and list(Run.objects.measured()) == [measured]
    assert (estimate.launch.basis, estimate.launch.runs, estimate.launch.load.mid) == ("config", 1, 90.0)


def test_it_records_a_worker_measured_run_phase_by_phase():
    began = time.monotonic()
    run = make_measured_run(load_s=90, warmup_s=12, cell_s=40, after_s=3, teardown_s=6)
    # The teardown ends when the worker records the end, which the factory reaches some milliseconds after it set
    # the phases' times (more on a busy machine): exact up to the time the factory itself took.
    took = time.monotonic() - began

    phases = run.measured_phases
    assert phases is not None and run.finished_at is not None and run.started_at is not None
    assert (phases["load"], phases["warmup"], phases["after"]) == pytest.approx((90, 12, 3), abs=0.01)
    assert 6 - 0.01 <= phases["teardown"] <= 6 + took + 0.01
    assert [cell[3] for cell in phases["cells"]] == pytest.approx([40.0, 40.0], abs=0.01)
    assert [cell[:3] for cell in phases["cells"]] == [[1, 16, 128], [4, 16, 128]]  # concurrency, prompts, tokens
    assert phases["total"] == pytest.approx((run.finished_at - run.started_at).total_seconds(), abs=0.01)


def test_it_lines_up_queued_runs_in_claim_order_with_their_ranges():
    host = make_host()
    baseline, candidate = make_config(), make_eagle_config()
    history = _history(host, baseline, [candidate])
    for load in (50, 60, 70):
        make_measured_run(history, baseline, load_s=load)
    make_measured_run(history, candidate, load_s=200)
    experiment = _queued(host, baseline, [candidate])

    queue = host_queues([host])[host.pk]

    assert [(q.position, q.run.config.name) for q in queue.runs] == [(1, baseline.name), (2, candidate.name)]
    first, second = queue.runs
    assert first.waiting_for == f"a worker to start it on {host.name}"
    assert second.waiting_for == "1 queued run ahead of it"
    one, two = first.estimate, second.estimate
    assert one.start and one.end and two.start and two.end
    assert (one.start.low, one.start.high) == (0, HANDOVER_S)
    # The baseline's own three runs, the median 60 s of loading; the candidate's one, 200 s.
    assert one.launch.load.mid == 60 and two.launch.load.mid == 200
    assert one.launch.load.low < 50 and one.launch.load.high > 70
    assert two.start.low == pytest.approx(one.end.low) and two.start.high == pytest.approx(one.end.high + HANDOVER_S)
    assert two.end.mid == pytest.approx(one.end.mid + two.launch.total.mid)
    assert first.starts_in_s == 0 and second.starts_in_s == pytest.approx(one.end.mid)
    assert queue.empties_in_s == pytest.approx(two.end.mid)
    assert one.text.startswith("starts within 2 s, done by ") and one.text.endswith(
        "UTC (from 3 runs of this config on this host)"
    )
    standing, estimate = run_estimate(experiment.run_set.get(config=candidate))
    assert standing is not None and standing.position == 2
    assert estimate is not None and (estimate.start, estimate.end, estimate.launch) == (two.start, two.end, two.launch)


def test_it_counts_what_is_left_of_the_live_run_by_its_phase():
    host = make_host()
    config = make_config()
    history = _history(host, config)
    make_measured_run(history, config, load_s=60, warmup_s=10, cell_s=300)  # 677 s in all
    now = timezone.now()
    timeline = [{"state": state, "at": (now - timedelta(seconds=ago)).isoformat()}
                for state, ago in (("connecting", 170), ("warming", 110), ("benchmarking", 100))]  # fmt: skip
    active = make_run(experiment=history, config=config, state=Run.State.BENCHMARKING,
                      started_at=now - timedelta(seconds=170), timeline=timeline)  # fmt: skip
    Host.objects.filter(pk=host.pk).update(active_run=active)
    host.refresh_from_db()
    _queued(host, config)

    queue = host_queues([host])[host.pk]
    (standing,) = queue.runs

    # 100 s into the first of its two 300 s cells: 200 s of it left, the second, then 7 s after them.
    assert queue.active is not None and queue.active.end is not None and queue.active.phase == "cells"
    assert queue.active.end.mid == pytest.approx(507, abs=2)
    assert standing.waiting_for == f"run {active.pk} ({config.name}, benchmarking) to finish"
    assert standing.starts_in_s == pytest.approx(507, abs=2)
    _, live = run_estimate(active)
    assert (
        live is not None
        and live.text.startswith("done in ")
        and "(from 1 run of this config on this host)" in live.text
    )

    Host.objects.filter(pk=host.pk).update(is_dirty=True, dirty_reason="GPU 3 still holds 40 GiB")
    host.refresh_from_db()
    (standing,) = host_queues([host])[host.pk].runs
    assert standing.waiting_for.startswith(f"an admin to clean {host.name}")
    assert "GPU 3 still holds 40 GiB" in standing.waiting_for
    assert standing.estimate.start is None and standing.starts_in_s is None
    assert standing.estimate.text == "cannot start until its host is cleaned"


def test_with_nothing_measured_it_shows_the_time_outs_bound_and_no_point():
    experiment = make_experiment()

    queue = host_queues([experiment.host])[experiment.host_id]

    assert all(q.starts_in_s is None or q.position == 1 for q in queue.runs)
    assert queue.runs[1].starts_in_s is None and queue.empties_in_s is None
    first = queue.runs[0].estimate
    assert (
        first.end is not None
        and first.end.low == 0
        and first.end.high == pytest.approx(first.launch.bound_s + HANDOVER_S)
    )
    assert first.text.endswith("at the latest (nothing measured on this host yet: up to what the profile's time-outs "
                               "allow)")  # fmt: skip


def test_the_api_and_pages_show_each_pending_runs_standing_and_estimate(owner_client):
    host = make_host()
    config, candidate = make_config(), make_eagle_config()
    history = _history(host, config, [candidate])
    make_measured_run(history, config)
    make_measured_run(history, candidate)
    experiment = _queued(host, config, [candidate])
    run = experiment.run_set.order_by("sequence")[1]

    data = owner_client.get(f"/api/runs/{run.pk}").json()
    assert data["queue"]["position"] == 2 and data["queue"]["waiting_for"] == "1 queued run ahead of it"
    estimate = data["estimate"]
    assert estimate["phase"] == "queued" and estimate["basis"] == "config" and estimate["runs"] == 1
    assert estimate["based_on"] == "from 1 run of this config on this host"
    for span in ("starts_in_s", "ends_in_s", "duration_s"):
        assert estimate[span]["low"] <= estimate[span]["mid"] <= estimate[span]["high"]
    assert estimate["starts_at"]["low"] < estimate["ends_at"]["low"]
    listed = owner_client.get(f"/api/experiments/{experiment.pk}").json()
    assert [r["queue"]["position"] for r in listed["runs"]] == [1, 2]
    # The experiment ends with its last run (each read from now: the same seconds, at a moment's other time).
    assert listed["estimate"]["ends_in_s"] == estimate["ends_in_s"]
    same = ("phase", "starts_in_s", "ends_in_s", "duration_s", "basis", "runs", "based_on")
    assert {k: listed["runs"][1]["estimate"][k] for k in same} == {k: estimate[k] for k in same}

    page = owner_client.get(experiment.get_absolute_url()).content.decode()
    assert f'#<span data-field="position">2</span> on {host.name}' in page
    assert 'id="experiment-estimate"' in page and "(from 1 run of this config on this host)" in page
    run_page = owner_client.get(run.get_absolute_url()).content.decode()
    assert 'Queued: #<span data-field="position">2</span>' in run_page
    assert 'Estimate: <span data-field="estimate">starts in ' in run_page

    hosts_page = owner_client.get("/hosts/").content.decode()
    assert "<strong>2</strong> queued" in hosts_page and f"run {run.pk}</a>" in hosts_page


def test_a_run_out_of_the_queue_has_no_standing_and_an_ended_one_no_estimate(owner_client):
    experiment = make_experiment()
    run = experiment.run_set.order_by("sequence")[0]
    Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED)

    data = owner_client.get(f"/api/runs/{run.pk}").json()

    assert data["queue"] is None and data["estimate"] is None
    page = owner_client.get(run.get_absolute_url()).content.decode()
    assert 'id="queue-standing"' not in page and 'id="run-estimate"' not in page


def test_the_run_page_says_why_one_was_skipped_and_no_longer_where_it_stood(owner_client):
    experiment = make_experiment()
    _, candidate = experiment.run_set.order_by("sequence")

    page = owner_client.get(candidate.get_absolute_url()).content.decode()
    assert 'waits for <span data-field="waiting-for">1 queued run ahead of it</span>' in page

    Run.objects.filter(pk=candidate.pk).update(state=Run.State.CANCELLED, cancel_reason="Skipped: the baseline failed.")
    page = owner_client.get(candidate.get_absolute_url()).content.decode()
    assert 'id="queue-standing"' not in page and "Skipped: the baseline failed." in page


def test_the_hosts_page_shows_each_gpus_memory_in_use(owner_client):
    make_host(
        name="gpu8",
        gpu_inventory=[{"index": 0, "name": "NVIDIA H200", "memory_used_mib": 4096, "memory_total_mib": 143771}],
        gpus_read_at=timezone.now() - timedelta(minutes=2),
    )

    page = owner_client.get("/hosts/").content.decode()

    assert "0: 4096 / 143771 MiB" in page and "read 2\xa0minutes ago" in page


def test_each_host_estimates_from_its_own_latest_runs(monkeypatch, owner_client, django_assert_max_num_queries):
    """A busy host's many recent runs never crowd a quiet host's older ones out of its estimates."""
    monkeypatch.setattr(queueing, "HISTORY_RUNS", 2)
    quiet, busy = make_host(), make_host()
    config = make_config()
    old = _history(quiet, config)
    for load in (900, 100, 100):  # the oldest is past HISTORY_RUNS: it counts no more
        make_measured_run(old, config, load_s=load)
    recent = _history(busy, config)
    for _ in range(5):
        make_measured_run(recent, config, load_s=400)
    for host in (quiet, busy):
        make_experiment(host=host, baseline=config, candidates=[config])

    queues = host_queues([quiet, busy])

    assert queues[quiet.pk].runs[0].estimate.launch.load.mid == 100
    assert queues[quiet.pk].runs[0].estimate.launch.runs == 2
    assert queues[busy.pk].runs[0].estimate.launch.load.mid == 400
    with CaptureQueriesContext(connection) as two_hosts:
        assert owner_client.get("/hosts/").status_code == 200
    for _ in range(3):
        make_experiment(host=make_host(), baseline=config, candidates=[])
    with django_assert_max_num_queries(len(two_hosts)):  # as many queries for five hosts as for two
        assert owner_client.get("/hosts/").status_code == 200


def test_the_api_answers_the_estimate_of_the_state_the_run_is_in_now(owner_client, private_queue):
    host = make_host()
    config = make_config()
    make_measured_run(_history(host, config), config, load_s=60, warmup_s=10, cell_s=30)
    run = _queued(host, config).run_set.get()

    def estimate() -> Any:
        return owner_client.get(f"/api/runs/{run.pk}").json()["estimate"]

    assert estimate()["phase"] == "queued" and estimate()["starts_in_s"] is not None
    do_claim_next_run(host.pk, "worker-1")
    claimed = owner_client.get(f"/api/runs/{run.pk}").json()
    assert claimed["queue"] is None and claimed["estimate"]["phase"] == "load"
    assert claimed["estimate"]["starts_in_s"] is None and claimed["estimate"]["text"].startswith("done in ")
    run.refresh_from_db()
    for state, phase in (
        (Run.State.WARMING, "warmup"),
        (Run.State.BENCHMARKING, "cells"),
        (Run.State.TEARDOWN, "teardown"),
    ):
        do_advance_run(run, state)
        assert estimate()["phase"] == phase
    # Teardown is the last 5 s: less is left than when it began benchmarking.
    assert estimate()["ends_in_s"]["mid"] <= 5
    do_advance_run(run, Run.State.SUCCEEDED, measured=True)
    assert estimate() is None


def test_a_study_says_when_its_round_and_at_the_latest_the_whole_study_should_be_done(api, owner, client):
    study = _start_study(api, owner)
    make_measured_run(_history(study.host, study.baseline), study.baseline, load_s=60, cell_s=30)

    estimate = api(owner, "get", f"/api/studies/{study.pk}").json()["estimate"]

    pending = Run.objects.filter(experiment__studyround__study=study).count()
    assert estimate["launches_left"] == study.max_launches - pending
    assert estimate["round"]["phase"] == "queued" and estimate["basis"] == "config"
    # After this round, the rest of the budget, each launch up to the upper end of its estimate.
    launch = queueing.launch_estimate(study.host, queueing.launch_kind(study.baseline, study.profile))
    after_round = estimate["ends_in_s"]["high"] - estimate["round"]["ends_in_s"]["high"]
    assert after_round == pytest.approx(estimate["launches_left"] * (launch.total.high + HANDOVER_S), abs=1)
    assert estimate["text"].startswith("This round: done in ")
    assert "; the whole study by " in estimate["text"] and " at the latest (" in estimate["text"]
    client.force_login(owner)
    assert 'id="study-estimate"' in client.get(study.get_absolute_url()).content.decode()

    Study.objects.filter(pk=study.pk).update(state=Study.State.CANCELLED)
    assert api(owner, "get", f"/api/studies/{study.pk}").json()["estimate"] is None
